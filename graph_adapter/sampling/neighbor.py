"""``FixedSizeNeighborLoader``: node-level training on one large graph, at one shape.

Every batch is the directed subgraph sampled around ``batch_size`` seed nodes
(:func:`graph_adapter.sampling.csr.sample_neighbors`, PyG ``NeighborLoader``
semantics; ``directed=False``: the induced subgraph of the sampled nodes;
``sampler="pyg"``: PyG's own sampler, :mod:`graph_adapter.sampling.pyg_sampler`), padded to one :class:`~graph_adapter.batching.budget.Budget` and
flattened to the format of ``docs/dev/FORMAT.md``, as ``collate_padded`` lays
out one graph (bit for bit: ``tests/sampling/test_neighbor.py`` checks it):

* one real graph slot (the subgraph) and one padding slot: ``graphs=2``,
  ``batch`` = 0 on the real rows, 1 on padding rows, ``ptr = [0, n, N]``;
* rows: the seeds first (in batch order), then the nodes of hop 1, hop 2, ...
  (PyG's order); padding rows after them (zero features, at least two);
* ``edge_index`` ``[source row, destination row]`` (messages flow towards the
  seeds), padding edges the self-loop ``(N - 1, N - 1)``;
* extra keys, all node-level (``[N]``) or edge-level (``[E]``):
  ``n_id`` global node id of each row (padding rows: ``pad_id``, default
  ``-1``: never a node id; clamp it before an embedding lookup),
  ``e_id`` input edge id of each sampled edge (padding: ``pad_id``),
  ``seed_mask`` True on the seed rows (a node-level mask with the node count,
  so FORMAT's level rules read it as node-level; it is not a reserved name),
  ``seed_of`` with ``disjoint=True``: the seed position of each row's tree;
* every node-level attribute of the graph (``x``, ``y``, ``train_mask``, ...;
  a tensor, a numpy array or memmap, or a ``FeatureStore`` column) gathered by
  ``n_id``, every edge-level one (``edge_attr``, ...) by ``e_id``, the batch's
  rows only (:mod:`graph_adapter.sampling.inputs.source`); graph-level attributes are
  left out (listed in ``excluded_keys``, warned about once).

Loss and outputs on the seed rows only: the masked helpers of
:mod:`graph_adapter.nn.losses` with the seed mask,
``ipu_wrap(model, loss_fn=lambda out, b: losses.masked_cross_entropy(out, b["y"],
b["seed_mask"]))`` (a mean over the seeds; a fill batch gives 0), and on the
host ``out[:loader.seeds_in(flat)]`` (seed rows are the first) with their
global ids ``flat["n_id"][flat["seed_mask"]]``.

Budgets (``budget=None``): sampled from the loader's own sampler
(``fit_batches`` batches, streams apart from the training ones) at the
``success_ratio`` quantile of the real node and edge counts, plus the reserved
padding nodes, ties nudged apart (FORMAT: no two row counts equal). A sampled
subgraph over the budget is handled by ``oversize``:

* ``"trim"`` (default): keep the first rows (the seeds and the nearest hops:
  rows are in hop order) and the first edges (hop order) that fit: the
  farthest hop loses its last-sampled nodes and edges, deterministically.
  Every cut is counted in ``loader.stats`` (``trimmed_batches``,
  ``trimmed_nodes``, ``trimmed_edges``) and warned about once per epoch;
* ``"error"``: raise :class:`SubgraphOversizeError` naming the batch, its
  sizes and the budget.

Every input node is a seed exactly once per epoch, across ranks too: batch
``b`` of rank ``r`` holds the seeds of chunk ``b * world_size + r`` of the
epoch's (shuffled) seed order; ranks get equally many batches, the tail ones
possibly short or fully padded (``seed_mask`` all False: a masked loss of 0).
"""
from __future__ import annotations

import contextlib
import math
import queue
import threading
import warnings
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from ..batching import RESERVED_NODES, Budget, Ranks, Sharded, fingerprint
from .csr import (CSC, FanoutError, FanoutLengthError, Sample, TemporalSamplingError,
                  check_fanouts, sample_neighbors, take)
from ..contract import SEED_TIME
from ..format import (EDGE_MASK, GRAPH_MASK, LINK_KEYS, NODE_MASK, SEED_MASK,
                      stack_micro_batches)
from .layout import (SAMPLED_LAYOUTS, fit_sampled_hyb, sampled_tables, source_table,
                     source_table_shape)
from .pyg_sampler import PygNeighborSampler
from .inputs.source import (AttrValue, GraphInput, check_reserved, graph_input,
                     is_hetero_store_pair, warn_excluded, whole_rows)
from .settings import OVERSIZE_POLICIES, SamplingSettings
from .sampled import fit_neighbor_budget, pad_sample, trim_sample
from .hops import HopBudget, HopBudgetError, fit_hop_budget, fit_to_hops, pad_per_hop

__all__ = ["FixedSizeNeighborLoader", "NeighborLoaderStats", "SubgraphOversizeError",
           "InputNodesError", "OVERSIZE_POLICIES", "check_hetero_fanouts",
           "seed_tensor", "chunk_seed", "prefetched", "is_hetero_graph", "time_and_weight",
           "input_time_tensor"]



class SubgraphOversizeError(RuntimeError):
    """A sampled subgraph exceeds the budget and ``oversize="error"``."""


class InputNodesError(ValueError):
    """``input_nodes`` names a node the graph lacks (or repeats one)."""


@dataclass
class NeighborLoaderStats:
    """One epoch of this rank: fill (real slots / budget slots over every yielded
    batch, fill batches included) and every cut the oversize policy made."""

    epoch: int = 0
    batches: int = 0
    fill_batches: int = 0  # batches without a seed (the distributed / micro-batch tail)
    seeds: int = 0  # seeds of this rank this epoch
    total_seeds: int = 0  # seeds of all ranks (the input nodes)
    node_efficiency: float = 0.0
    edge_efficiency: float = 0.0
    trimmed_batches: int = 0
    trimmed_nodes: int = 0
    trimmed_edges: int = 0
    rank: int = 0
    world_size: int = 1
    excluded_keys: Dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)


def check_hetero_fanouts(edge_types: Sequence[Tuple[str, str, str]],
                         num_neighbors: Dict[Any, Sequence[int]]) -> int:
    """Validate a per-edge-type fanout dict against a graph's edge types.

    Returns the number of hops; raises :class:`FanoutError` naming an edge type
    the graph lacks, :class:`FanoutLengthError` for a list whose length differs
    from the others (both start with PyG's own wording).
    """
    known = {tuple(et) for et in edge_types}
    hops = None
    lengths = {len(v) for v in num_neighbors.values() if hasattr(v, "__len__")}
    for et, fan in num_neighbors.items():
        key = tuple(et) if not isinstance(et, str) else tuple(et.split("__"))
        if key not in known:
            raise FanoutError(f"Not all edge types specified in 'num_neighbors' exist in the "
                              f"graph: num_neighbors has a fanout for edge type {et!r}, which "
                              f"the graph lacks; its edge types: {sorted(known)}")
        fan = check_fanouts(fan, where=f"num_neighbors[{et!r}]")
        if hops is None:
            hops = len(fan)
        elif len(fan) != hops:
            raise FanoutLengthError(
                f"Number of hops must be the same across all edge types (got {len(lengths)} "
                f"different number of hops): num_neighbors[{et!r}] has {len(fan)} hops, the "
                f"other edge types {hops}: give every edge type one fanout per hop")
    if hops is None:
        raise FanoutError("num_neighbors={}: give a fanout list per edge type")
    return hops


def seed_tensor(input_nodes: Any, num_nodes: int) -> Tensor:
    """``input_nodes`` (None / index / bool mask) as a 1-d int64 tensor of distinct ids."""
    if input_nodes is None:
        return torch.arange(num_nodes)
    if isinstance(input_nodes, tuple):
        raise InputNodesError(f"input_nodes={input_nodes[:1]!r}...: (node_type, index) is for "
                              f"HeteroData; this graph is homogeneous: pass the index itself")
    t = torch.as_tensor(input_nodes)
    if t.dtype == torch.bool:
        if t.numel() != num_nodes:
            raise InputNodesError(f"input_nodes is a bool mask of {t.numel()} entries; the graph "
                                  f"has {num_nodes} nodes: give one entry per node")
        return t.nonzero().view(-1)
    if t.is_floating_point():
        raise InputNodesError(f"input_nodes has dtype {t.dtype}; give node ids (int) or a bool mask")
    t = t.long().view(-1)
    bad = (t < 0) | (t >= num_nodes)
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise InputNodesError(f"input_nodes[{i}] = {int(t[i])} is out of range: the graph has "
                              f"{num_nodes} nodes (ids 0..{num_nodes - 1})")
    if torch.unique(t).numel() != t.numel():
        raise InputNodesError("input_nodes repeats a node: every seed is seen exactly once per "
                              "epoch, so give distinct ids (torch.unique(input_nodes))")
    return t


def _attributes(graph: GraphInput, owner: str = "FixedSizeNeighborLoader",
                quiet: Sequence[str] = ()
                ) -> Tuple[Dict[str, AttrValue], Dict[str, AttrValue], Dict[str, str]]:
    """Node-level and edge-level attributes of ``graph`` (:func:`~.inputs.source.graph_input`):
    tensors, numpy arrays and memmaps, feature-store columns, all gathered by row; the
    rest, excluded with why, warned about once (:func:`~.inputs.source.warn_excluded`).

    A graph's own ``n_id`` (``e_id``) is kept as PyG's loaders keep it: the batch's
    ``n_id`` holds its values on the sampled rows instead of the row's node id.
    ``quiet``: keys left out without the warning (a subclass's own inputs).

    Raises:
        ReservedAttributeError: an attribute named like a key the batches own
            (``n_id`` / ``e_id`` other than one integer per node / edge).
    """
    for k in list(graph.node) + list(graph.edge) + list(graph.excluded):
        check_reserved(k, graph.node.get(k), graph.edge.get(k), "")
    excluded = dict(graph.excluded)
    for k in LINK_KEYS:
        if k in excluded:
            excluded[k] = ("a supervision key of link prediction (rows neither per node nor per "
                           "edge): FixedSizeLinkNeighborLoader takes it as edge_label_index= / "
                           "edge_label=")
    warn_excluded(owner, {k: v for k, v in excluded.items() if k not in quiet}, stacklevel=5)
    return dict(graph.node), dict(graph.edge), excluded


def is_hetero_graph(data: Any) -> bool:
    """Whether ``data`` is a ``HeteroData`` (node and edge types), not a ``Data``."""
    return hasattr(data, "node_types") and hasattr(data, "edge_types") and \
        hasattr(data, "edge_items")


def _as_1d(v: Any, name: str, owner: str) -> Tensor:
    t = torch.as_tensor(v)
    if t.dim() != 1:
        raise TemporalSamplingError(f"{owner}: the attribute {name!r} has shape "
                                    f"{tuple(t.shape)}; a time or weight is one value per node "
                                    f"or edge ([N] or [E])")
    return t


def time_and_weight(graph: GraphInput, time_attr: Optional[str], weight_attr: Optional[str],
                    owner: str) -> Tuple[Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
    """``(node_time [N], edge_time [E], edge_weight [E])`` of a homogeneous graph
    (:func:`~.inputs.source.graph_input`: a ``Data`` or a store pair) from ``time_attr``
    (node-level or edge-level, as PyG decides) and ``weight_attr`` (edge-level);
    ``None`` where not asked for.

    Raises:
        TemporalSamplingError: an attribute the graph lacks, or one that is not
            node- or edge-level ``[N]`` / ``[E]`` (PyG's wording first), or a
            negative weight.
    """
    node_time = edge_time = edge_weight = None
    E = int(graph.edge_index.size(1))
    names = sorted(set(graph.node) | set(graph.edge) | set(graph.excluded))
    if time_attr is not None:
        if time_attr in graph.node:
            node_time = _as_1d(whole_rows(graph.node[time_attr]), time_attr, owner)
        elif time_attr in graph.edge:
            edge_time = _as_1d(whole_rows(graph.edge[time_attr]), time_attr, owner)
        else:
            raise TemporalSamplingError(
                f"The time attribute '{time_attr}' is neither a node-level or edge-level "
                f"attribute ({owner}: give time_attr the name of an [N] node or [E] edge "
                f"attribute of the graph; it has {names})")
    if weight_attr is not None:
        v = graph.edge.get(weight_attr, graph.node.get(weight_attr))
        w = None if v is None else _as_1d(whole_rows(v), weight_attr, owner)
        if w is None or w.numel() != E:
            raise TemporalSamplingError(
                f"{owner}(weight_attr={weight_attr!r}): give the name of an edge-level [E] "
                f"attribute (one weight per edge; the graph has {E} edges and attributes "
                f"{names})")
        if w.numel() and bool((w < 0).any()):
            raise TemporalSamplingError(f"{owner}(weight_attr={weight_attr!r}): a weight is "
                                        f"negative; sampling weights are >= 0")
        edge_weight = w
    return node_time, edge_time, edge_weight


def input_time_tensor(input_time: Any, num_seeds: int, time_attr: Optional[str],
                      owner: str) -> Optional[Tensor]:
    """``input_time`` (one time per seed, in ``input_nodes`` order) as a 1-d tensor.

    Raises:
        TemporalSamplingError: ``input_time`` without ``time_attr`` (PyG's wording),
            or not one time per seed.
    """
    if input_time is None:
        return None
    if time_attr is None:
        raise TemporalSamplingError(
            f"Received conflicting 'input_time' and 'time_attr' arguments: 'input_time' is set "
            f"while 'time_attr' is not set ({owner}: name the graph's time attribute)")
    t = torch.as_tensor(input_time).reshape(-1)
    if t.numel() != num_seeds:
        raise TemporalSamplingError(f"{owner}: input_time has {t.numel()} entries for "
                                    f"{num_seeds} input nodes: give one time per seed")
    return t


def chunk_seed(seed: int, epoch: int, chunk: int, stream: int = 0) -> int:
    """The seed of one batch's generator: a function of ``(seed, stream, epoch, chunk)``
    only (streams: 0 neighbours, 1 seed order, 2 budget fit, 3+ the link loader's)."""
    return int(np.random.SeedSequence([seed, stream, epoch, chunk]).generate_state(1)[0])


_END, _ERROR = object(), object()


def prefetched(items: Any, depth: int, threads: Optional[int] = 1) -> Iterator[Any]:
    """``items[0], items[1], ...`` (``len(items)`` of them, in order), each made by one
    background thread up to ``depth`` items ahead of the consumer.

    Torch ops release the GIL, so the thread samples and pads the next batches
    while the caller's model step runs (docs/large_graphs.md, "Overlapping the
    host's sampling with the step"). What each item is does not depend on the
    thread: the order and the values are those of ``items[i]`` in the caller's
    thread. The thread runs torch ops at ``threads`` intra-op threads (torch's
    setting is per thread: the caller's own is left alone; ``None``: the
    caller's count); an error in ``items[i]`` is raised to the
    consumer at item ``i``; leaving the loop early (``break``, an error in the
    consumer) stops the thread after the item in hand and waits for it.
    """
    if depth < 1:
        raise ValueError(f"prefetch={depth}; give the number of batches to prepare ahead (>= 1)")
    q: "queue.Queue" = queue.Queue(maxsize=depth)
    stop = threading.Event()
    default = torch.get_num_threads()  # what a new thread inherits: given back at the end
    threads = default if threads is None else int(threads)

    def put(entry: Any) -> bool:
        """Hand ``entry`` over, waiting for room; False once the consumer has left."""
        while not stop.is_set():
            try:
                q.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        torch.set_num_threads(threads)  # this thread's; also the default of new threads
        try:
            for i in range(len(items)):
                if stop.is_set() or not put(items[i]):
                    return
            put(_END)
        except BaseException as exc:  # handed to the consumer, raised there
            put((_ERROR, exc))
        finally:
            torch.set_num_threads(default)  # new threads' default as it was

    worker = threading.Thread(target=work, name="graph_adapter-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            entry = q.get()
            if entry is _END:
                return
            if isinstance(entry, tuple) and len(entry) == 2 and entry[0] is _ERROR:
                raise entry[1]
            yield entry
    finally:
        stop.set()
        worker.join()


class _Batches(torch.utils.data.Dataset):
    """Item ``i`` of an epoch: ``(flat dict, (nodes cut, edges cut))`` (picklable for workers)."""

    def __init__(self, loader: "FixedSizeNeighborLoader", epoch: int, chunks: List[int]):
        self.loader, self.epoch, self.chunks = loader, epoch, chunks

    def __len__(self) -> int:
        return len(self.chunks) // self.loader.micro_batches

    def __getitem__(self, i: int):
        F = self.loader.micro_batches
        parts = [self.loader.sample_chunk(self.epoch, c) for c in self.chunks[i * F:(i + 1) * F]]
        flats = [p[0] for p in parts]
        cuts = (sum(p[1] for p in parts), sum(p[2] for p in parts), sum(p[1] + p[2] > 0 for p in parts))
        flat = flats[0] if F == 1 else stack_micro_batches(flats)
        return flat, cuts


class FixedSizeNeighborLoader(Sharded):
    """Yields padded flat dicts of one signature, each the subgraph sampled around a seed batch.

    Args:
        data: a homogeneous ``torch_geometric.data.Data`` (one large graph; its
            edges ``edge_index``, ``adj`` or ``adj_t``), or PyG's
            ``(FeatureStore, GraphStore)`` pair (features read by row per batch); a
            ``HeteroData`` makes a :class:`~graph_adapter.sampling.hetero_neighbor.
            FixedSizeHeteroNeighborLoader` with these arguments (one entry point,
            as PyG's ``NeighborLoader``).
        num_neighbors: fanout per hop, e.g. ``[10, 5]`` (``-1`` = all; ``[]``:
            zero hops, the seeds alone without edges).
        batch_size: seeds per batch.
        input_nodes: the seeds: ``None`` (every node), an index tensor or a
            bool mask over the nodes.
        input_time: with ``time_attr``: one time per seed (in ``input_nodes``
            order); no neighbour later than its seed's time is sampled. Default:
            the seeds' own times where ``time_attr`` is node-level (an edge-level
            one needs it).
        time_attr: the name of a node-level ``[N]`` or edge-level ``[E]`` time
            attribute: temporal sampling, PyG's rule (a neighbour, or an edge,
            whose time is ``<=`` the seed's; every hop against the tree's seed).
            Forces ``disjoint=True`` as PyG does (``seed_of`` is PyG's ``batch``).
        temporal_strategy: ``"uniform"`` (a uniform draw among the valid
            neighbours) or ``"last"`` (the ``k`` most recent).
        weight_attr: the name of an edge-level ``[E]`` attribute of weights
            ``>= 0``: neighbours drawn with probability proportional to the weight
            (without replacement unless ``replace``).
        subgraph_type: ``"directional"`` (default: the sampled edges),
            ``"bidirectional"`` (the sampled edges and their reverses, coalesced by
            destination row as PyG's ``to_bidirectional``; a reverse edge's ``e_id``
            and edge attributes are those of the edge it reverses) or
            ``"induced"`` (every input edge between the sampled nodes).
        shuffle: shuffle the seed order every epoch (from ``(seed, epoch)``).
        budget: a :class:`Budget` with ``graphs=2`` (its nodes hold at least
            ``batch_size`` real nodes), its dict/JSON, or ``None``: fitted from
            the sampler's output (:func:`fit_neighbor_budget`).
        seed: base seed: the seed order and every sample are functions of
            ``(seed, epoch, chunk)``, with any ``num_workers``.
        replace: sample with replacement.
        disjoint: one tree per seed (adds ``seed_of``).
        directed: ``False``: the induced subgraph of the sampled nodes (every
            input edge between them; PyG's ``subgraph_type="induced"``), edges
            ordered by destination row (hop order); not with ``disjoint``. With
            ``subgraph_type`` "directional" or "bidirectional" it is a
            :class:`~graph_adapter.sampling.csr.SubgraphTypeError`.
        oversize: ``"trim"`` (default; counted, warned) or ``"error"``.
        success_ratio / fit_batches / round_to: budget fitting (quantile,
            sampled batches, rounding of both counts).
        micro_batches: ``F`` > 1 stacks F batches on a new leading dim.
        rank / world_size: distributed sharding (every seed once over all ranks);
            ``None`` (default): read from ``torch.distributed`` when each epoch is
            planned, so a loader built before the process group shards once it
            exists (:mod:`graph_adapter.batching.ranks`).
        pad_id: the ``n_id`` / ``e_id`` value of padding rows.
        num_workers: sampling worker processes (``torch.utils.data.DataLoader``).
        prefetch: batches one background thread samples and pads ahead of the
            caller (:func:`prefetched`; 0: none, in the caller's thread; not
            with ``num_workers``). The batches are the same with any setting.
        sampler_threads: torch intra-op threads while sampling and padding a
            batch (default 1: its ops are small; the setting is restored
            after each batch); ``None`` leaves torch's setting.
        sampler: ``"ours"`` (default: torch only) or ``"pyg"``: PyG's
            ``NeighborSampler`` (needs pyg-lib or torch-sparse;
            :mod:`graph_adapter.sampling.pyg_sampler`), padded the same way.
        layout: ``"hyb"`` adds the aggregation tables ``in_slots`` /
            ``out_slots`` / ``in_spill`` / ``out_spill`` to every batch (the
            graph-level loader's ``layout="hyb"`` keys; inside a wrapped
            forward PyG's sum and mean aggregations run over them, see
            :mod:`graph_adapter.sampling.layout`); ``"sources"`` adds
            ``in_sources`` ``[R, D]``, each row's in-edge sources (for inference:
            a sum or mean whose messages are the source rows, as in SAGEConv and
            GINConv, gathers node rows through it; needs ``directed=True`` and
            no fanout of ``-1``); ``None`` (default): none.
        layout_widths / layout_spills: ``(in, out)`` table widths and spill
            capacities of ``layout="hyb"`` (refused with any other layout;
            default: from the fanouts where they bound the in-degree, else
            fitted; ``loader.layout_widths`` / ``loader.layout_spills`` give
            another loader the same shapes).
        per_hop_budget: ``True``: every hop gets a static node and edge count of
            its own, fitted as ``budget`` is (the ``success_ratio`` quantile of
            each hop's counts), and batches lay rows and edges out one block
            per hop, with ``num_sampled_nodes`` / ``num_sampled_edges`` keys,
            so that PyG's ``trim_to_layer`` runs compiled at static shapes
            (:mod:`graph_adapter.sampling.hops`; ``loader.hop_budget``); a
            :class:`~graph_adapter.sampling.hops.HopBudget` (or its dict /
            JSON): that one; ``False`` (default): the plain layout. Not with
            ``budget``, ``layout`` or ``directed=False``.

    Yields:
        One flat dict a batch, all of ``loader.budget``'s shapes: the sampled
        subgraph's attributes and ``edge_index``, ``node_mask`` / ``edge_mask`` /
        ``graph_mask``, ``seed_mask`` (the seeds' rows), ``n_id`` / ``e_id`` (ids in
        ``data``, ``pad_id`` on padding rows).

    Raises:
        FanoutError: a ``num_neighbors`` that is not a list of ints ``>= -1``.
        InputNodesError: ``input_nodes`` naming a node ``data`` lacks (or twice).
        TemporalSamplingError: a ``time_attr`` / ``weight_attr`` the graph lacks or
            of the wrong level, ``input_time`` without ``time_attr`` or not one
            per seed, an edge-level time without ``input_time``, an unknown
            ``temporal_strategy``, temporal sampling with ``"induced"``.
        SubgraphTypeError: an unknown ``subgraph_type`` or one against ``directed``.
        ValueError: another bad argument (``oversize``, ``layout``, a budget
            without ``graphs=2`` or too small for ``batch_size`` seeds).
        SubgraphOversizeError: (while iterating) a sample over the budget with
            ``oversize="error"``.
        HopBudgetError: ``per_hop_budget`` with ``budget``, ``layout`` or
            ``directed=False``, or a given one whose hops or seeds' block do not fit.

    Example:
        ```python
        from torch_geometric.datasets import FakeDataset

        from graph_adapter import FixedSizeNeighborLoader

        data = FakeDataset(avg_num_nodes=300, avg_degree=4)[0]  # one large graph
        loader = FixedSizeNeighborLoader(data, num_neighbors=[5, 5], batch_size=16)
        batch = next(iter(loader))  # 16 seeds' 2-hop samples, padded to the budget
        assert batch["x"].shape[0] == loader.budget.nodes
        ```
    """

    #: graph attributes left out of batches without the excluded-key warning (still in
    #: ``excluded_keys``): a subclass's own inputs, e.g. the link loader's supervision keys
    quiet_keys: Tuple[str, ...] = ()

    #: the loader a ``HeteroData`` makes (set by :mod:`~graph_adapter.sampling.hetero_neighbor`,
    #: a later module: this one does not import it)
    hetero_loader_class: Optional[type] = None

    def __new__(cls, data: Any = None, *args: Any, **kwargs: Any) -> "FixedSizeNeighborLoader":
        # one entry point, as PyG's NeighborLoader: a HeteroData goes to the hetero loader
        # (a subclass, so its __init__ runs with these arguments)
        hetero = FixedSizeNeighborLoader.hetero_loader_class
        if cls is FixedSizeNeighborLoader and hetero is not None and (
                is_hetero_graph(data) or is_hetero_store_pair(data)):
            return super().__new__(hetero)
        return super().__new__(cls)

    def __init__(self, data: Any, num_neighbors: Sequence[int], batch_size: int, *,
                 input_nodes: Any = None, input_time: Any = None, shuffle: bool = False,
                 budget: Union[Budget, dict, str, None] = None, seed: int = 0,
                 replace: bool = False, disjoint: bool = False, directed: bool = True,
                 subgraph_type: Optional[str] = None, temporal_strategy: str = "uniform",
                 time_attr: Optional[str] = None, weight_attr: Optional[str] = None,
                 oversize: str = "trim",
                 success_ratio: float = 0.99, fit_batches: int = 32, round_to: int = 1,
                 micro_batches: int = 1, rank: Optional[int] = None,
                 world_size: Optional[int] = None,
                 pad_id: int = -1, num_workers: int = 0, sampler_threads: Optional[int] = 1,
                 sampler: str = "ours", prefetch: int = 0, layout: Optional[str] = None,
                 layout_widths: Optional[Tuple[int, int]] = None,
                 layout_spills: Optional[Tuple[int, int]] = None,
                 per_hop_budget: Union[bool, HopBudget, dict, str] = False):
        self._setup(data, num_neighbors, batch_size, SamplingSettings.of(locals()))
        self.seeds = seed_tensor(input_nodes, self.num_nodes)
        #: whether ``input_nodes`` was an index (PyG's ``input_id``: positions in it), not
        #: ``None`` or a mask (node ids): ``to_pyg`` reads it
        self.input_is_index = input_nodes is not None and torch.as_tensor(
            input_nodes).dtype != torch.bool
        self._keep_input_time(input_time)
        self.stats = self._new_stats(0)
        #: the per-hop budget (``per_hop_budget=``; :mod:`graph_adapter.sampling.hops`), else None
        self.hop_budget: Optional[HopBudget] = self._resolve_hop_budget(
            per_hop_budget, budget, layout, success_ratio, fit_batches, round_to)
        self.budget = self.hop_budget.budget if self.hop_budget is not None else \
            self._resolve_budget(budget, success_ratio, fit_batches, round_to,
                                 batch_size, f"batch_size={batch_size} seeds")
        self._fit_layout(layout, layout_widths, layout_spills, fit_batches)

    def _fit_layout(self, layout: Optional[str], widths: Optional[Tuple[int, int]],
                    spills: Optional[Tuple[int, int]], fit_batches: int) -> None:
        """Check ``layout`` and keep its ``layout_widths`` / ``layout_spills`` (``None``
        without a layout), fitted on the budget fit's stream where not given."""
        if layout not in SAMPLED_LAYOUTS:
            raise ValueError(f"layout={layout!r}; choose one of {SAMPLED_LAYOUTS} (the "
                             f"neighbour loader builds HYB tables: exact widths from the "
                             f"fanouts, spill lists for the rest)")
        if layout != "hyb" and (widths is not None or spills is not None):
            raise ValueError(f"layout_widths / layout_spills size the HYB tables: pass them "
                             f"with layout='hyb' (got layout={layout!r}, whose tables, if any, "
                             f"are sized by the fanouts)")
        self.layout = layout
        self.layout_widths: Optional[Tuple[int, int]] = None
        self.layout_spills: Optional[Tuple[int, int]] = None
        #: ``(R, D)`` of ``layout="sources"``'s table, else None
        self.source_shape: Optional[Tuple[int, int]] = None
        if layout is None:
            return
        if layout == "sources":
            self.source_shape = source_table_shape(self.num_neighbors, self._fanout_bounded,
                                                   self.batch_size, int(self.budget.nodes))
            return
        samples = []
        if widths is None:  # the out-width is fitted: degrees of the fit stream's samples
            n = max(1, min(int(fit_batches), math.ceil(self.seeds.numel() / self.batch_size)))
            with self._sampling_threads():
                samples = [self._fit_sample(c) for c in range(n)]
        self.layout_widths, self.layout_spills = fit_sampled_hyb(
            [s.edge_index for s in samples], [s.num_nodes for s in samples],
            self.num_neighbors, self._fanout_bounded, self.batch_size, int(self.budget.edges),
            widths, spills)

    @property
    def _fanout_bounded(self) -> bool:
        """Whether a row's in-edges are at most its hop's fanout (the sampled edges only:
        ``subgraph_type="directional"``), what the layout tables' widths assume."""
        return self.subgraph_type == "directional"

    def _setup(self, data: Any, num_neighbors: Sequence[int], batch_size: int,
               settings: SamplingSettings) -> None:
        """Check and keep the settings every neighbour loader shares; build the CSC."""
        name = type(self).__name__
        if is_hetero_graph(data):
            if isinstance(num_neighbors, dict):
                check_hetero_fanouts(data.edge_types, num_neighbors)
            raise NotImplementedError(f"{name} samples homogeneous graphs; for HeteroData use "
                                      "FixedSizeNeighborLoader or graph_adapter.sampling."
                                      "hetero_neighbor.FixedSizeHeteroNeighborLoader (or "
                                      "data.to_homogeneous())")
        if isinstance(num_neighbors, dict):
            raise FanoutError("num_neighbors is a dict (a fanout per edge type) but the graph is "
                              "homogeneous: give one list, e.g. [10, 5]")
        self.num_neighbors = check_fanouts(num_neighbors)
        self._keep_settings(batch_size, settings)
        self.data = data
        graph = graph_input(data, name)  # a Data (edge_index / adj / adj_t) or a store pair
        self.num_nodes = graph.num_nodes
        self.node_attrs, self.edge_attrs, self.excluded_keys = _attributes(
            graph, name, getattr(self, "quiet_keys", ()))
        self.node_time, self.edge_time, self.edge_weight = time_and_weight(
            graph, self.time_attr, self.weight_attr, name)
        #: times of the seeds (``input_time``), by seed id: ``(sorted ids, their times)``
        self._input_time: Optional[Tuple[Tensor, Tensor]] = None
        self._pyg = (PygNeighborSampler(data if graph.structure == "edge_index" else
                                        graph.structure_data(), self.num_neighbors,
                                        replace=self.replace,
                                        disjoint=self.disjoint, directed=self.directed,
                                        subgraph_type=self.subgraph_type,
                                        time_attr=self.time_attr, weight_attr=self.weight_attr,
                                        temporal_strategy=self.temporal_strategy)
                     if self.sampler == "pyg" else None)
        self.csc: Optional[CSC] = None  # PyG's sampler keeps its own
        if self._pyg is None:
            with self._sampling_threads():  # its sorts are small chunks too (1M nodes: 3.5x
                # slower at 2 threads than at 1 on the loaded 2-core box, large_graphs.md)
                self.csc = graph.csc()  # CSC.from_edge_index of the graph's edges

    def _resolve_hop_budget(self, per_hop: Union[bool, HopBudget, dict, str],
                            budget: Any, layout: Optional[str], success_ratio: float,
                            fit_batches: int, round_to: int) -> Optional[HopBudget]:
        """``per_hop_budget`` as a :class:`HopBudget` (fitted per hop when ``True``), or
        ``None`` (``False``: the plain layout); refused where the layout cannot be."""
        if per_hop is False:
            return None
        name = type(self).__name__
        why = (f"subgraph_type={self.subgraph_type!r} (its edges are not one block of "
               f"sampled edges per hop: only 'directional' is)"
               if self.subgraph_type != "directional" else
               "num_neighbors=[] (zero hops: no hop blocks, the plain layout holds the seeds)"
               if not self.num_neighbors else
               f"layout={layout!r} (its tables index the plain layout)" if layout is not None
               else f"budget={budget!r} (a per-hop budget sets every shape: pass the "
                    f"HopBudget as per_hop_budget=)" if budget is not None else None)
        if why is not None:
            raise HopBudgetError(f"{name}(per_hop_budget=...) with {why}: use one of them")
        if per_hop is True:
            n = max(1, min(int(fit_batches), math.ceil(self.seeds.numel() / self.batch_size)))
            with self._sampling_threads():
                samples = [self._fit_sample(c) for c in range(n)]
            self.fit_sizes = [(s.num_nodes, s.num_edges) for s in samples]
            return fit_hop_budget(samples, self.batch_size, success_ratio, round_to)
        hb = HopBudget.of(per_hop)
        if hb.hops != len(self.num_neighbors):
            raise HopBudgetError(f"{name}: per_hop_budget has {hb.hops} hops, num_neighbors "
                                 f"{len(self.num_neighbors)}: give one block per hop")
        if hb.seed_capacity < self.batch_size:
            raise HopBudgetError(f"{name}: per_hop_budget's seeds' block holds "
                                 f"{hb.seed_capacity} seeds, fewer than batch_size="
                                 f"{self.batch_size}: give nodes[0] >= "
                                 f"{self.batch_size + RESERVED_NODES}")
        return hb

    def _keep_input_time(self, input_time: Any) -> None:
        """Check ``input_time`` against the seeds and keep it by seed id (the epoch's
        shuffled order looks each batch's seed times up)."""
        name = type(self).__name__
        t = input_time_tensor(input_time, int(self.seeds.numel()), self.time_attr, name)
        if t is None:
            if self.edge_time is not None:
                raise TemporalSamplingError(
                    f"{name}(time_attr={self.time_attr!r}): an edge-level time needs the seeds' "
                    f"times: give input_time (one per input node; a node has no time here)")
            return
        ids, order = torch.sort(self.seeds)
        self._input_time = (ids, take(t, order))

    def seed_times_of(self, seeds: Tensor) -> Optional[Tensor]:
        """The ``input_time`` of each of ``seeds`` (ids among the input nodes), or ``None``
        without ``input_time`` (the sampler then reads the seeds' node times)."""
        if getattr(self, "_input_time", None) is None:
            return None
        ids, times = self._input_time
        at = torch.searchsorted(ids, seeds.long()).clamp(max=max(ids.numel() - 1, 0))
        return take(times, at)

    def _keep_settings(self, batch_size: int, settings: SamplingSettings) -> None:
        """Check ``batch_size`` and the shared settings; keep them as attributes (``rank``
        and ``world_size`` resolved at each epoch: :mod:`graph_adapter.batching.ranks`)."""
        name = type(self).__name__
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r}; give a positive int")
        settings.check(name)
        self.settings = settings
        self.batch_size = batch_size
        for f in fields(settings):
            if f.name not in ("rank", "world_size"):
                setattr(self, f.name, getattr(settings, f.name))
        self.directed, self.disjoint = bool(self.directed), bool(self.disjoint)
        self._ranks = Ranks(settings.rank, settings.world_size, name)
        self._epoch = 0
        self._explicit_epoch: Optional[int] = None

    def _resolve_budget(self, budget: Union[Budget, dict, str, None], success_ratio: float,
                        fit_batches: int, round_to: int, min_real: int, what: str) -> Budget:
        """``budget`` as a :class:`Budget` (fitted when ``None``), checked: ``graphs=2``,
        at least ``min_real`` real nodes (``what`` names them in the error)."""
        if budget is None:
            budget = self._fit_budget(success_ratio, fit_batches, round_to)
        elif isinstance(budget, str):
            budget = Budget.from_json(budget)
        elif isinstance(budget, dict):
            budget = Budget.from_dict(budget)
        if budget.is_hetero or budget.graphs != 2:
            raise ValueError(f"budget {budget}: a neighbour-sampling batch is one subgraph, so "
                             f"the budget has graphs=2 (one real slot, one padding slot)")
        if int(budget.nodes) - RESERVED_NODES < min_real:
            raise ValueError(f"budget nodes={budget.nodes} holds {int(budget.nodes) - RESERVED_NODES}"
                             f" real nodes, fewer than {what}: give "
                             f"nodes >= {min_real + RESERVED_NODES}")
        return budget

    # -- the epoch's plan ------------------------------------------------
    @property
    def num_chunks(self) -> int:
        """Seed chunks of an epoch over all ranks (a multiple of ``world_size x F``)."""
        per = self.world_size * self.micro_batches
        raw = math.ceil(self.seeds.numel() / self.batch_size)
        return max(per, -(-raw // per) * per)

    def __len__(self) -> int:
        return self.num_chunks // (self.world_size * self.micro_batches)

    def set_epoch(self, epoch: int) -> None:
        """Pick the epoch of the next iteration (as ``DistributedSampler.set_epoch``)."""
        self._explicit_epoch = int(epoch)

    def seed_order(self, epoch: int) -> Tensor:
        """The epoch's seed order (a function of ``(seed, epoch)``)."""
        if not self.shuffle:
            return self.seeds
        cached = getattr(self, "_order", None)
        if cached is not None and cached[0] == epoch:
            return cached[1]  # one permutation an epoch, not one a batch
        g = torch.Generator().manual_seed(chunk_seed(self.seed, epoch, 0, stream=1))
        order = self.seeds[torch.randperm(self.seeds.numel(), generator=g)]
        self._order = (epoch, order)
        return order

    def chunk_seeds(self, epoch: int, chunk: int) -> Tensor:
        """The seeds of ``chunk`` (global numbering) in ``epoch``: possibly short or empty."""
        order = self.seed_order(epoch)
        return order[chunk * self.batch_size:(chunk + 1) * self.batch_size]

    def chunks_of_rank(self) -> List[int]:
        """The chunks this rank yields, in order: ``b * world_size + rank``."""
        rank, world = self._ranks.resolve()
        return [b * world + rank for b in range(self.num_chunks // world)]

    def _rank_facts(self) -> Dict[str, int]:
        """What every rank's loader must agree on (exchanged at a group's first epoch)."""
        return {"nodes of the graph": self.num_nodes, "seeds": int(self.seeds.numel()),
                "batch_size": self.batch_size, "seed": int(self.seed),
                "shuffle": int(bool(self.shuffle)), "micro_batches": self.micro_batches,
                "budget fingerprint": fingerprint(self.budget.to_json() + (
                    "" if getattr(self, "hop_budget", None) is None
                    else self.hop_budget.to_json()))}

    # -- sampling ----------------------------------------------------------
    def sample(self, seeds: Tensor, epoch: int, chunk: int, stream: int = 0,
               seed_time: Optional[Tensor] = None) -> Sample:
        """The unpadded sample of ``seeds`` (deterministic for ``(seed, stream, epoch, chunk)``);
        ``seed_time``: their times (temporal sampling; default their node times)."""
        if self._pyg is not None:
            return self._pyg.sample(seeds, chunk_seed(self.seed, epoch, chunk, stream),
                                    seed_time=seed_time)
        g = torch.Generator().manual_seed(chunk_seed(self.seed, epoch, chunk, stream))
        return sample_neighbors(self.csc, seeds, self.num_neighbors, replace=self.replace,
                                disjoint=self.disjoint, subgraph_type=self.subgraph_type,
                                seed_time=seed_time, node_time=self.node_time,
                                edge_time=self.edge_time,
                                temporal_strategy=self.temporal_strategy,
                                edge_weight=self.edge_weight, generator=g)

    def _fit_budget(self, success_ratio: float, fit_batches: int, round_to: int, *,
                    per_batch: Optional[int] = None, avoid: Sequence[int] = ()) -> Budget:
        """The budget from ``fit_batches`` samples of :meth:`_fit_sample` (``per_batch``:
        the most seeds a batch has, default ``batch_size``; ``avoid``: counts the
        budget must not equal)."""
        n = max(1, min(int(fit_batches), math.ceil(self.seeds.numel() / self.batch_size)))
        with self._sampling_threads():
            sizes = [(s.num_nodes, s.num_edges) for s in map(self._fit_sample, range(n))]
        self.fit_sizes = sizes
        return fit_neighbor_budget(sizes, self.batch_size if per_batch is None else per_batch,
                                   success_ratio, round_to, avoid=avoid)

    def _fit_sample(self, chunk: int) -> Sample:
        """The sample of ``chunk`` that the budget fit sees: stream 2, not the training
        samples, same distribution."""
        seeds = self.chunk_seeds(0, chunk)
        st = self.seed_times_of(seeds)  # a loader without input_time: sample() as it was
        return self.sample(seeds, 0, chunk, stream=2, **({} if st is None else {"seed_time": st}))

    @contextlib.contextmanager
    def _sampling_threads(self) -> Iterator[None]:
        """``sampler_threads`` torch intra-op threads inside, the caller's after. The
        sampler's ops are small: torch's intra-op threads cost more than they give
        (see docs/dev/RESULTS.md)."""
        if self.sampler_threads is None or torch.get_num_threads() == self.sampler_threads:
            yield
            return
        before = torch.get_num_threads()
        torch.set_num_threads(self.sampler_threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    def sample_chunk(self, epoch: int, chunk: int) -> Tuple[Dict[str, Tensor], int, int]:
        """``(flat, real nodes, real edges)`` of one chunk of seeds of an epoch, sampled
        and padded with this loader's thread setting (an epoch's view stacks ``F`` of
        them into one batch)."""
        with self._sampling_threads():
            return self._batch_now(epoch, chunk)

    def _batch_now(self, epoch: int, chunk: int) -> Tuple[Dict[str, Tensor], int, int]:
        seeds = self.chunk_seeds(epoch, chunk)
        s = self.sample(seeds, epoch, chunk, seed_time=self.seed_times_of(seeds))
        flat, cut_n, cut_e = self._fit_and_pad(
            s, int(seeds.numel()), f"epoch {epoch}, chunk {chunk} (seeds {seeds[:4].tolist()}...)")
        return self._with_seed_time(flat, seeds, SEED_TIME, self.node_time), cut_n, cut_e

    def _with_seed_time(self, flat: Dict[str, Tensor], seeds: Tensor, key: str,
                        node_time: Optional[Tensor]) -> Dict[str, Tensor]:
        """``flat`` with PyG's ``seed_time`` of a temporal batch under ``key``: each seed's
        ``input_time``, else its node time, ``[batch_size]`` (``0`` on padding slots);
        ``flat`` as it is without ``time_attr``."""
        if getattr(self, "time_attr", None) is None:
            return flat
        t = self.seed_times_of(seeds)
        if t is None:
            if node_time is None:
                return flat
            t = take(node_time, seeds)
        row = torch.zeros(self.batch_size, dtype=t.dtype)
        row[:t.numel()] = t
        flat[key] = row
        return {k: flat[k] for k in sorted(flat)}  # pad_sample's order: keys sorted

    def _fit_and_pad(self, s, num_seeds: int, where: str) -> Tuple[Dict[str, Tensor], int, int]:
        """Sample ``s`` into the budget (``oversize``: raise naming ``where``, or trim the
        farthest hop, seeds never) and padded: ``(flat, nodes cut, edges cut)``."""
        hb = getattr(self, "hop_budget", None)
        if hb is not None:  # per-hop blocks (graph_adapter/sampling/hops.py)
            return self._fit_and_pad_hops(s, hb, num_seeds, where)
        cap_n = int(self.budget.nodes) - RESERVED_NODES
        cap_e = int(self.budget.edges)
        cut_n = cut_e = 0
        if s.num_nodes > cap_n or s.num_edges > cap_e:
            if self.oversize == "error":
                raise SubgraphOversizeError(
                    f"{where}: the sampled subgraph has {s.num_nodes} nodes and {s.num_edges} "
                    f"edges; the budget holds {cap_n} real nodes and {cap_e} edges "
                    f"({self.budget}). Give a larger budget, budget=None with a higher "
                    f"success_ratio, or oversize='trim'")
            s, cut_n, cut_e = trim_sample(s, cap_n, cap_e)
        flat = pad_sample(s, self.budget, self.node_attrs, self.edge_attrs, num_seeds,
                          self.pad_id)
        layout = getattr(self, "layout", None)
        if layout is not None:
            args = (flat["edge_index"], s.num_edges, int(self.budget.nodes))
            flat.update(source_table(*args, self.source_shape) if layout == "sources" else
                        sampled_tables(*args, self.layout_widths, self.layout_spills))
            flat = {k: flat[k] for k in sorted(flat)}  # pad_sample's order: keys sorted
        return flat, cut_n, cut_e

    def _fit_and_pad_hops(self, s: Sample, hb: HopBudget, num_seeds: int,
                          where: str) -> Tuple[Dict[str, Tensor], int, int]:
        """:meth:`_fit_and_pad` with per-hop blocks: a hop over its block is cut (its
        last-sampled nodes and edges) or, with ``oversize="error"``, raised."""
        fitted, cut_n, cut_e = fit_to_hops(s, hb)
        if (cut_n or cut_e) and self.oversize == "error":
            raise SubgraphOversizeError(
                f"{where}: the sampled subgraph has {s.nodes_per_hop} nodes and "
                f"{s.edges_per_hop} edges per hop; the per-hop budget holds {hb} (the seeds' "
                f"block {hb.seed_capacity} real rows). Give a larger per_hop_budget, "
                f"per_hop_budget=True with a higher success_ratio, or oversize='trim'")
        flat = pad_per_hop(fitted, hb, self.node_attrs, self.edge_attrs, num_seeds, self.pad_id)
        return flat, cut_n, cut_e

    def batch(self, epoch: int, chunk: int) -> Dict[str, Tensor]:
        """The padded batch of ``chunk`` in ``epoch`` (what iteration yields for it, F = 1)."""
        return self.sample_chunk(epoch, chunk)[0]

    # -- iteration -----------------------------------------------------------
    def __iter__(self) -> Iterator[Dict[str, Tensor]]:
        epoch = self._explicit_epoch if self._explicit_epoch is not None else self._epoch
        self._explicit_epoch = None
        self._epoch = epoch + 1
        self._ranks.check_same(self._rank_facts)
        chunks = self.chunks_of_rank()
        ds = _Batches(self, epoch, chunks)
        st = self._new_stats(epoch)
        self.stats = st
        real_n = real_e = 0
        for flat, (cn, ce, tb) in self._items(ds):
            nm, sm = flat[NODE_MASK], flat[SEED_MASK]
            st.batches += self.micro_batches
            st.fill_batches += int((~flat[GRAPH_MASK].view(-1, 2)[:, 0]).sum())
            st.seeds += int(sm.sum())
            self._count(st, flat)
            real_n += int(nm.sum())
            real_e += int(flat[EDGE_MASK].sum())
            st.trimmed_nodes += cn
            st.trimmed_edges += ce
            st.trimmed_batches += tb
            st.node_efficiency = real_n / (st.batches * int(self.budget.nodes))
            st.edge_efficiency = real_e / (st.batches * int(self.budget.edges))
            yield flat
        if st.trimmed_batches:
            warnings.warn(
                f"{type(self).__name__} epoch {epoch}: {st.trimmed_batches} of {st.batches} "
                f"sampled subgraphs exceeded {getattr(self, 'hop_budget', None) or self.budget} "
                f"and were trimmed (oversize='trim': "
                f"{st.trimmed_nodes} farthest-hop nodes and {st.trimmed_edges} edges cut, "
                f"loader.stats); a larger success_ratio or budget cuts fewer", stacklevel=2)

    def _items(self, ds: torch.utils.data.Dataset) -> Iterator[Any]:
        """``ds``'s items in order: from ``num_workers`` processes, from a prefetching
        thread (``prefetch``) or made here, one at a time."""
        if self.num_workers > 0:
            return iter(torch.utils.data.DataLoader(ds, batch_size=None, shuffle=False,
                                                    num_workers=self.num_workers))
        if self.prefetch > 0:
            return prefetched(ds, self.prefetch, self.sampler_threads)
        return (ds[i] for i in range(len(ds)))

    def _new_stats(self, epoch: int) -> NeighborLoaderStats:
        """The (empty) stats of an epoch of this rank (a subclass adds its own counts)."""
        return NeighborLoaderStats(epoch=epoch, rank=self.rank, world_size=self.world_size,
                                   total_seeds=int(self.seeds.numel()),
                                   excluded_keys=dict(self.excluded_keys))

    def _count(self, st: NeighborLoaderStats, flat: Dict[str, Tensor]) -> None:
        """Add a yielded batch's own counts to ``st`` (none here: a subclass hook)."""

    def keys(self) -> List[str]:
        """The keys of every batch, in order."""
        return list(self.batch(0, 0).keys())

    def seeds_in(self, flat: Dict[str, Tensor]) -> int:
        """The number of seed rows of a batch (its first rows)."""
        return int(flat[SEED_MASK].sum())

    def to_pyg(self, flat: Dict[str, Tensor]) -> Any:
        """The ``Data`` / ``HeteroData`` PyG's loader yields for the sample of padded batch
        ``flat`` (a list for a micro-batched one): :func:`graph_adapter.sampling.to_pyg.to_pyg`.

        Args:
            flat: one batch this loader yielded.

        Returns:
            PyG's batch object: padding dropped, ``n_id``, ``e_id``, ``input_id``,
            ``batch_size``, ``num_sampled_nodes`` ... as PyG's loaders name them.
        """
        from .to_pyg import to_pyg

        return to_pyg(self, flat)
