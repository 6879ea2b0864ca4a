"""``FixedSizeHeteroNeighborLoader``: neighbour sampling on one ``HeteroData`` graph, at one shape.

PyG ``NeighborLoader`` semantics on heterogeneous graphs, seeds of one node type
(``input_nodes=(node_type, index)``):

* ``num_neighbors`` is a dict ``{edge_type: [k_1, ..., k_H]}`` (one list per
  edge type, every list ``H`` long; an edge type left out samples nothing) or
  one list for every edge type;
* hop ``h`` samples, for every edge type ``(src, rel, dst)``, ``k_h`` in-edges
  (sources of type ``src``) of each ``dst`` node added in hop ``h - 1`` (the
  seeds for hop 1), without replacement unless ``replace``
  (:func:`graph_adapter.sampling.csr.sample_hop` on that edge type's CSC); a
  source not seen before becomes a new row of its type (rows of a type in
  order of first appearance, edge types in ``data.edge_types`` order), one
  already seen keeps its row;
* only the sampled edges are in the subgraph.

Every batch is ``collate_padded([subgraph], budget)`` of the sampled
``HeteroData`` with a hetero :class:`~graph_adapter.batching.budget.Budget`
(``graphs=2``: one real graph slot, one padding slot), so its keys, masks and
padding are FORMAT.md's hetero ones (``"<node_type>/x"``,
``"<src>__<rel>__<dst>/edge_index"``, ``"<node_type>/node_mask"``, ...), plus:

* ``"<node_type>/n_id"``: global id (within its type) of each row, ``pad_id``
  on padding rows; ``"<edge_type>/e_id"``: input edge id, ``pad_id`` on padding;
* ``"<seed_type>/seed_mask"``: True on the seed rows (the first rows of the
  seed type, in batch order).

Budget (``budget=None``): per node type the ``success_ratio`` quantile of the
sampled counts of ``fit_batches`` batches (the seed type at least
``batch_size``) plus the two reserved padding nodes, per edge type the
quantile (at least 1); ties between all counts and ``graphs`` nudged apart.
``oversize="trim"`` keeps the first rows of each type (seeds never cut) and
the first edges of each type between kept rows, counted in ``loader.stats``;
``"error"`` raises. Every seed is in exactly one batch an epoch, across ranks.

``directed=False``: the same nodes, and for every edge type each input
edge between sampled rows of its two types (PyG's ``subgraph_type="induced"``).

``disjoint=True`` (PyG's disjoint layout): seed ``i`` grows its own tree; a
row is a ``(tree, node)`` pair, so a node reached from two seeds is a row of
each tree and every edge joins two rows of one tree (rows of a type in order
of first appearance of the pair). ``"<node_type>/seed_of"`` (every node type,
as PyG's per-type ``batch``) is the tree of each row, ``-1`` on padding.

``num_workers > 0``: batches are sampled in ``torch.utils.data.DataLoader``
worker processes; every batch is a function of ``(seed, epoch, chunk)``, so
the batches are the same for any ``num_workers`` (each worker forks its own
scratch arrays).

``sampler="pyg"``: PyG's own hetero sampler (pyg-lib or torch-sparse;
:class:`~graph_adapter.sampling.pyg_sampler.PygHeteroNeighborSampler`), seeded
per batch, padded the same way; ``disjoint=True`` there needs pyg-lib.

Temporal sampling (``time_attr``: node-level in some node types, or edge-level
in some edge types; ``input_time``; ``temporal_strategy``), weighted sampling
(``weight_attr``) and ``subgraph_type`` as PyG 2.8's (see
:func:`~graph_adapter.sampling.hetero_sample.sample_hetero_neighbors`): an edge
type whose source type has no time is sampled without a time filter;
temporal sampling is disjoint. ``subgraph_type="bidirectional"`` merges each
edge type with its reverse type (``"rev_" + rel``, else the one from ``dst`` to
``src``): those edge types' batches have no ``e_id`` and no edge attributes
(PyG's have none either; they are listed in ``excluded_keys``).
``num_neighbors=[]``: zero hops, the seeds alone (a graph without edge types too).

Not supported (named errors): ``directed=False`` with ``disjoint=True``, seeds
of more than one node type (PyG's ``NeighborLoader`` takes one seed type too).
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import torch
from torch import Tensor

from ..batching import RESERVED_NODES, Budget
from ..batching import collate_padded
from .csr import CSC, FanoutError, TemporalSamplingError, check_fanouts
from ..contract import SEED_TIME
from ..format import (E_ID, EDGE_MASK, GRAPH_MASK, N_ID, NODE_MASK, SEED_MASK,
                      SEED_OF, SEP, stack_micro_batches)
from .pyg_sampler import PygHeteroNeighborSampler
from .settings import SamplingSettings
from .neighbor import (FixedSizeNeighborLoader, InputNodesError,
                       NeighborLoaderStats, SubgraphOversizeError, seed_tensor,
                       check_hetero_fanouts, chunk_seed, input_time_tensor)
from .inputs.source import (AttrValue, StoreRows, check_reserved, describe, gather_rows,
                     hetero_store_view, is_store_pair, rows_of, warn_excluded, whole_rows)
# the sampling itself, before padding
from .hetero_sample import (EdgeType, HeteroSample, bidirectional_pairs, fit_hetero_budget,
                            key_of, sample_hetero_neighbors, trim_hetero)

__all__ = ["FixedSizeHeteroNeighborLoader"]


class _HeteroBatches(torch.utils.data.Dataset):
    """Item ``i`` of an epoch of one rank: ``(flat, (nodes cut, edges cut, batches
    cut))`` over its ``F`` chunks (stacked ``[F, ...]`` when ``F > 1``). Picklable, so
    DataLoader workers can run it; a function of ``(seed, epoch, chunk)`` only."""

    def __init__(self, loader: "FixedSizeHeteroNeighborLoader", epoch: int, chunks: List[int]):
        self.loader, self.epoch, self.chunks = loader, epoch, chunks

    def __len__(self) -> int:
        return len(self.chunks) // self.loader.micro_batches

    def __getitem__(self, i: int) -> Tuple[Dict[str, Tensor], Tuple[int, int, int]]:
        F = self.loader.micro_batches
        parts = [self.loader.sample_chunk(self.epoch, c) for c in self.chunks[i * F:(i + 1) * F]]
        cuts = (sum(p[1] for p in parts), sum(p[2] for p in parts),
                sum(int(p[1] + p[2] > 0) for p in parts))
        return (parts[0][0] if F == 1 else stack_micro_batches([p[0] for p in parts])), cuts


class FixedSizeHeteroNeighborLoader(FixedSizeNeighborLoader):
    """Yields padded hetero flat dicts of one signature (see the module docstring).

    Args:
        data: a ``torch_geometric.data.HeteroData`` (one large graph), or PyG's
            ``(FeatureStore, GraphStore)`` pair with typed edges (features read
            by row per batch, :func:`~graph_adapter.sampling.inputs.source.hetero_store_view`).
        num_neighbors: ``{edge_type: [k_1, ..., k_H]}`` or one list for all edge types.
        batch_size: seeds per batch.
        input_nodes: ``(node_type, index | bool mask | None)``: the seeds, of one type.
        budget: a hetero :class:`Budget` (``graphs=2``, every node and edge type
            of the graph), its dict/JSON, or ``None`` (fitted).
        disjoint: one tree per seed (adds ``"<node_type>/seed_of"``); not with
            ``directed=False``.
        num_workers: sampling worker processes (``torch.utils.data.DataLoader``);
            the batches do not depend on it.
        sampler: ``"ours"`` (default: torch only) or ``"pyg"`` (PyG's sampler;
            needs pyg-lib or torch-sparse).
        The rest: as :class:`FixedSizeNeighborLoader` (``shuffle``, ``seed``,
            ``replace``, ``directed``, ``oversize``, ``success_ratio``,
            ``fit_batches``, ``micro_batches``, ``rank``, ``world_size``,
            ``pad_id``, ``sampler_threads``).

    Yields:
        One hetero flat dict a batch, all of ``loader.budget``'s shapes: keys per
        node type (``"<type>/x"``, ``"<type>/node_mask"``, ``"<type>/n_id"``, ...)
        and edge type (``"<src>__<rel>__<dst>/edge_index"``, ``.../edge_mask``),
        ``graph_mask`` (``docs/dev/FORMAT.md``).

    Raises:
        TypeError: ``data`` that is not a ``HeteroData``.
        FanoutError: a graph without edge types, or a bad ``num_neighbors``.
        InputNodesError: ``input_nodes`` naming a node type or node ``data`` lacks.
        ValueError: a budget that is not ``graphs=2`` or too small for the seeds,
            an attribute whose name is a reserved key.
        SubgraphOversizeError: (while iterating) a sample over the budget with
            ``oversize="error"``.

    Example:
        ```python
        from torch_geometric.datasets import FakeHeteroDataset

        from graph_adapter import FixedSizeHeteroNeighborLoader

        data = FakeHeteroDataset(avg_num_nodes=100)[0]  # node types v0, v1, ...
        loader = FixedSizeHeteroNeighborLoader(
            data, num_neighbors=[4, 4], batch_size=8, input_nodes=("v0", None))
        batch = next(iter(loader))  # 8 seeds of type v0 and their samples
        assert batch["v0/seed_mask"].sum() == 8
        ```
    """

    def __init__(self, data: Any, num_neighbors: Any, batch_size: int, *,
                 input_nodes: Any = None, input_time: Any = None, shuffle: bool = False,
                 budget: Union[Budget, dict, str, None] = None, seed: int = 0,
                 replace: bool = False, disjoint: bool = False, directed: bool = True,
                 subgraph_type: Optional[str] = None, temporal_strategy: str = "uniform",
                 time_attr: Optional[str] = None, weight_attr: Optional[str] = None,
                 oversize: str = "trim", success_ratio: float = 0.99, fit_batches: int = 32,
                 micro_batches: int = 1, rank: Optional[int] = None,
                 world_size: Optional[int] = None,
                 pad_id: int = -1, num_workers: int = 0, sampler_threads: Optional[int] = 1,
                 sampler: str = "ours", prefetch: int = 0, round_to: int = 1,
                 layout: Optional[str] = None, layout_widths: Optional[Tuple[int, int]] = None,
                 layout_spills: Optional[Tuple[int, int]] = None,
                 per_hop_budget: Any = False):
        name = type(self).__name__
        hetero = hasattr(data, "node_types") and hasattr(data, "edge_types")
        if not (hetero or is_store_pair(data)):
            raise TypeError(f"{name} samples HeteroData; for a homogeneous graph use "
                            f"FixedSizeNeighborLoader")
        # the homogeneous loader's arguments without a hetero counterpart: refused, not
        # ignored (FixedSizeNeighborLoader(HeteroData, ...) hands them all on)
        for arg, value, default in (("prefetch", prefetch, 0), ("round_to", round_to, 1),
                                    ("layout", layout, None),
                                    ("layout_widths", layout_widths, None),
                                    ("layout_spills", layout_spills, None),
                                    ("per_hop_budget", per_hop_budget, False)):
            if value != default:
                raise ValueError(f"{name}({arg}={value!r}): not offered for HeteroData (the "
                                 f"homogeneous loader's); leave it at {default!r}")
        if is_store_pair(data):  # PyG's remote backend: edges read, features left in the store
            data = hetero_store_view(data[0], data[1], name)
        self._keep_settings(batch_size, SamplingSettings.of(locals()))
        self.data, self._pyg, self.csc = data, None, None
        self.edge_types: List[EdgeType] = [tuple(et) for et in data.edge_types]
        self.fanouts = self._fanouts(num_neighbors)
        self.num_neighbors = num_neighbors
        self.seed_type, self.seeds = self._input_nodes(input_nodes)
        self.num_nodes_of = {t: int(data[t].num_nodes) for t in data.node_types}
        self.num_nodes = self.num_nodes_of[self.seed_type]
        self._read_attrs(name)
        self._without_edge_ids = self._bidirectional_merges()  # warns of its own cuts
        self.node_time, self.edge_time, self.edge_weight = self._time_and_weight()
        self._keep_input_time(input_time)
        hops = len(next(iter(self.fanouts.values()))) if self.fanouts else 0
        for et in self.edge_types:  # an edge type left out samples nothing
            self.fanouts.setdefault(et, [0] * hops)
        if sampler == "pyg":  # PyG keeps its own CSCs
            self._pyg = PygHeteroNeighborSampler(
                data, self.fanouts, replace=replace, disjoint=self.disjoint,
                directed=self.directed, subgraph_type=self.subgraph_type,
                time_attr=self.time_attr, weight_attr=self.weight_attr,
                temporal_strategy=self.temporal_strategy)
            self.cscs: Dict[EdgeType, CSC] = {}
            self.scratch: Dict[str, Tensor] = {}
        else:
            self._build_cscs()
        self.stats = self._new_stats(0)
        self.budget = self._hetero_budget(budget, success_ratio, fit_batches)

    def _read_attrs(self, name: str, quiet: Tuple[str, ...] = ()) -> None:
        """Sort every store's attributes into ``node_attrs`` / ``edge_attrs`` (gathered by
        row) and ``excluded_keys`` (warned about once); ``quiet``: keys left out of the
        batches without the warning (a subclass's own inputs)."""
        data = self.data
        self.excluded_keys: Dict[str, str] = {}
        self.node_attrs = {t: self._store_attrs(data[t], self.num_nodes_of[t], t + SEP)
                           for t in data.node_types}
        self.edge_attrs = {et: self._store_attrs(data[et], int(data[et].num_edges),
                                                 "__".join(et) + SEP)
                           for et in self.edge_types}
        for store in list(self.node_attrs.values()) + list(self.edge_attrs.values()):
            for k in quiet:
                store.pop(k, None)
        warn_excluded(name, {k: why for k, why in self.excluded_keys.items()
                             if k.rsplit(SEP, 1)[-1] not in quiet})

    def _build_cscs(self) -> None:
        """A CSC per edge type where something is sampled ("induced": every edge type, its
        edges between the sampled nodes are in the subgraph; "bidirectional": every edge
        type, its edges merge with the reverse type's), and the scratch rows."""
        data = self.data
        with self._sampling_threads():
            self.cscs = {et: CSC.from_edge_index(data[et].edge_index, self.num_nodes_of[et[2]],
                                                 num_src_nodes=self.num_nodes_of[et[0]])
                         for et in self.edge_types
                         if self.subgraph_type != "directional"
                         or any(k != 0 for k in self.fanouts[et])}
        self.scratch = {t: torch.full((n,), -1, dtype=torch.long)
                        for t, n in self.num_nodes_of.items()}

    def _bidirectional_merges(self) -> set:
        """The edge types whose ``subgraph_type="bidirectional"`` edges merge two edge
        types' (no ``e_id`` and no edge attributes in their batches, as in PyG's);
        their edge attributes are listed in ``excluded_keys`` and warned about once."""
        if self.subgraph_type != "bidirectional":
            return set()
        merged = {et for et, rev in bidirectional_pairs(self.edge_types).items()
                  if rev is not None}
        cut = []
        for et in sorted(merged):
            for k in list(self.edge_attrs.get(et, {})):
                key = "__".join(et) + SEP + k
                self.excluded_keys[key] = ("subgraph_type='bidirectional' merges this edge type "
                                           "with its reverse: no input edge ids (as PyG's), so "
                                           "no edge attribute; use 'directional' to keep it")
                cut.append(key)
                del self.edge_attrs[et][k]
        if cut:
            warnings.warn(f"{type(self).__name__}: subgraph_type='bidirectional' leaves the edge "
                          f"attributes {cut} out of every batch (a merged edge type has no edge "
                          f"ids, as in PyG); loader.excluded_keys lists them", stacklevel=3)
        return merged

    def _time_and_weight(self) -> Tuple[Dict[str, Tensor], Dict[EdgeType, Tensor],
                                        Dict[EdgeType, Tensor]]:
        """Per node type / edge type the ``time_attr`` times (node-level or edge-level,
        as PyG decides) and per edge type the ``weight_attr`` weights."""
        name, data = type(self).__name__, self.data
        node_time: Dict[str, Tensor] = {}
        edge_time: Dict[EdgeType, Tensor] = {}
        weight: Dict[EdgeType, Tensor] = {}
        ta, wa = self.time_attr, self.weight_attr
        if ta is not None:
            for t in data.node_types:
                if ta in data[t]:
                    node_time[t] = self._per_row(data[t][ta], self.num_nodes_of[t], f"{t}/{ta}")
            for et in self.edge_types:
                if ta in data[et]:
                    edge_time[et] = self._per_row(data[et][ta], int(data[et].num_edges),
                                                  f"{'__'.join(et)}/{ta}")
            if node_time and edge_time:
                raise TemporalSamplingError(
                    f"The time attribute '{ta}' holds both node-level and edge-level "
                    f"information ({name}: node types {sorted(node_time)}, edge types "
                    f"{sorted(edge_time)}); give a name held at one level")
            if not node_time and not edge_time:
                raise TemporalSamplingError(
                    f"The time attribute '{ta}' is neither a node-level or edge-level "
                    f"attribute ({name}: no node or edge type of the graph holds {ta!r})")
        if wa is not None:
            for et in self.edge_types:
                if wa in data[et]:
                    w = self._per_row(data[et][wa], int(data[et].num_edges),
                                      f"{'__'.join(et)}/{wa}")
                    if w.numel() and bool((w < 0).any()):
                        raise TemporalSamplingError(f"{name}(weight_attr={wa!r}): edge type {et} "
                                                    f"has a negative weight; weights are >= 0")
                    weight[et] = w
            if not weight:
                raise TemporalSamplingError(f"{name}(weight_attr={wa!r}): no edge type of the "
                                            f"graph holds {wa!r}; give an edge-level attribute")
        return node_time, edge_time, weight

    def _per_row(self, v: Any, rows: int, where: str) -> Tensor:
        """``v`` as a 1-d tensor of ``rows`` entries (a time or a weight per row; numpy,
        memmap and feature-store columns read whole)."""
        t = whole_rows(v)
        if t.dim() != 1 or t.numel() != rows:
            raise TemporalSamplingError(f"{type(self).__name__}: {where} has shape "
                                        f"{tuple(t.shape)}; a time or weight is one value per "
                                        f"row ([{rows}])")
        return t

    def _keep_input_time(self, input_time: Any) -> None:
        """As the homogeneous loader's, checked against the hetero times: an edge-level
        time, or a seed type without node times, needs ``input_time``."""
        name = type(self).__name__
        if input_time is None and self.time_attr is not None and (
                self.edge_time or self.seed_type not in self.node_time):
            why = ("the times are edge-level" if self.edge_time else
                   "that node type has no node-level time")
            raise TemporalSamplingError(
                f"{name}(time_attr={self.time_attr!r}): the seeds of {self.seed_type!r} have no "
                f"time of their own ({why}): give input_time, one per input node")
        t = input_time_tensor(input_time, int(self.seeds.numel()), self.time_attr, name)
        self._input_time = None
        if t is not None:
            ids, order = torch.sort(self.seeds)
            self._input_time = (ids, t[order])

    # -- settings ------------------------------------------------------------
    def _fanouts(self, num_neighbors: Any) -> Dict[EdgeType, List[int]]:
        if isinstance(num_neighbors, dict):
            check_hetero_fanouts(self.edge_types, num_neighbors)
            return {(tuple(k) if not isinstance(k, str) else tuple(k.split("__"))):
                    check_fanouts(v) for k, v in num_neighbors.items()}
        fan = check_fanouts(num_neighbors)
        if not self.edge_types and fan:
            raise FanoutError("the HeteroData has no edge type: nothing to sample (give "
                              "num_neighbors=[] for the seeds alone)")
        return {et: list(fan) for et in self.edge_types}

    def _input_nodes(self, input_nodes: Any) -> Tuple[str, Tensor]:
        if input_nodes is None:
            raise InputNodesError(
                f"input_nodes=None: on HeteroData name the seeds' node type, "
                f"input_nodes='<node_type>' (all its nodes) or (node_type, index | bool mask); "
                f"node types: {list(self.data.node_types)}")
        if isinstance(input_nodes, str):
            input_nodes = (input_nodes, None)
        if not (isinstance(input_nodes, tuple) and len(input_nodes) == 2
                and isinstance(input_nodes[0], str)):
            raise InputNodesError(
                f"input_nodes={input_nodes!r:.60}: on HeteroData give (node_type, index | bool "
                f"mask | None), seeds of one node type (node types: {list(self.data.node_types)})")
        t, idx = input_nodes
        if t not in self.data.node_types:
            raise InputNodesError(f"input_nodes names node type {t!r}, which the graph lacks; "
                                  f"its node types: {list(self.data.node_types)}")
        return t, seed_tensor(idx, int(self.data[t].num_nodes))

    def _store_attrs(self, store: Any, rows: int, where: str) -> Dict[str, AttrValue]:
        """The row-level attributes of one store: tensors, numpy arrays and memmaps
        (gathered by row, :mod:`~graph_adapter.sampling.inputs.source`); the rest in
        ``excluded_keys``. A store's own ``n_id`` / ``e_id`` (one int a row) is kept
        as PyG keeps it: the batch's key holds its values."""
        from torch_geometric.data.storage import EdgeStorage

        out: Dict[str, AttrValue] = {}
        node_level = not isinstance(store, EdgeStorage)
        for k, v in store.items():
            if k in ("edge_index", "adj", "adj_t", "num_nodes"):
                continue
            r = rows_of(v)
            # a feature-store column may hold more rows than the graph store's nodes (PyG's)
            if r is not None and (r.shape[0] == rows or
                                  (isinstance(r, StoreRows) and r.shape[0] >= rows)):
                out[k] = r
            else:
                shape = f" of shape {list(r.shape)}" if r is not None else ""
                self.excluded_keys[f"{where}{k}"] = (
                    f"a {describe(v)}{shape}: not a tensor or numpy array with one row per "
                    f"{'node' if node_level else 'edge'} of its type")
            check_reserved(k, out.get(k) if node_level else None,
                            None if node_level else out.get(k), where)
        return out

    # -- budget ----------------------------------------------------------------
    #: what a batch of this loader is, for the budget's messages
    batch_kind = "neighbour"

    def _budget_minima(self) -> Dict[str, Tuple[int, str]]:
        """Per node type the real rows a batch needs at least, and what they are (a
        subclass's hook: the link loader's endpoints of both types)."""
        return {self.seed_type: (self.batch_size, f"batch_size={self.batch_size} seeds")}

    def _budget_avoid(self) -> Tuple[int, ...]:
        """Counts no node or edge count of a fitted budget may equal (a subclass's hook:
        the link loader's supervision slots)."""
        return ()

    def _hetero_budget(self, budget: Union[Budget, dict, str, None], success_ratio: float,
                       fit_batches: int) -> Budget:
        minima = self._budget_minima()
        if budget is None:
            n = max(1, min(int(fit_batches), math.ceil(self.seeds.numel() / self.batch_size)))
            with self._sampling_threads():
                self.fit_sizes = [self._fit_sample(c).sizes() for c in range(n)]
            return fit_hetero_budget(self.fit_sizes, self.seed_type, self.batch_size,
                                     success_ratio, minima={t: m for t, (m, _) in minima.items()},
                                     avoid=self._budget_avoid())
        if isinstance(budget, str):
            budget = Budget.from_json(budget)
        elif isinstance(budget, dict):
            budget = Budget.from_dict(budget)
        want_n, want_e = set(self.num_nodes_of), {"__".join(et) for et in self.edge_types}
        if (not budget.is_hetero or budget.graphs != 2 or set(budget.nodes) != want_n
                or set(budget.edges) != want_e):
            raise ValueError(f"budget {budget}: a hetero {self.batch_kind} batch needs graphs=2 "
                             f"and a count for every node type {sorted(want_n)} and edge type "
                             f"{sorted(want_e)}")
        for t, (need, what) in minima.items():
            real = int(budget.nodes[t]) - RESERVED_NODES
            if real < need:
                raise ValueError(f"budget nodes[{t!r}]={budget.nodes[t]} holds {real} real "
                                 f"nodes, fewer than {what}: give >= {need + RESERVED_NODES}")
        return budget

    # -- sampling ----------------------------------------------------------------
    def sample(self, seeds: Tensor, epoch: int, chunk: int, stream: int = 0,
               seed_time: Optional[Tensor] = None) -> HeteroSample:
        """The unpadded sample of ``seeds`` (deterministic for ``(seed, stream, epoch, chunk)``);
        ``seed_time``: their times (temporal sampling; default their node times)."""
        if self._pyg is not None:
            return self._pyg_sample(seeds, chunk_seed(self.seed, epoch, chunk, stream),
                                    seed_time)
        g = torch.Generator().manual_seed(chunk_seed(self.seed, epoch, chunk, stream))
        return self._sample_ours(self.seed_type, seeds, seed_time, g)

    def _sample_ours(self, seed_type: Optional[str], seeds: Union[Tensor, Dict[str, Tensor]],
                     seed_time: Optional[Tensor], g: torch.Generator) -> HeteroSample:
        """Our sampler's sample of ``seeds`` (of ``seed_type``, or a dict of several types:
        the link loader's endpoints), every edge type in it (one signature)."""
        s = sample_hetero_neighbors(self.cscs, self.scratch, seed_type, seeds,
                                    {et: self.fanouts[et] for et in self.cscs},
                                    replace=self.replace, disjoint=self.disjoint,
                                    subgraph_type=self.subgraph_type, seed_time=seed_time,
                                    node_time=self.node_time, edge_time=self.edge_time,
                                    temporal_strategy=self.temporal_strategy,
                                    edge_weight=self.edge_weight, generator=g)
        for et in self.edge_types:  # an edge type not sampled: no edge, same signature
            if et not in s.edge_index:
                s.edge_index[et] = torch.zeros(2, 0, dtype=torch.long)
                s.e_id[et] = torch.zeros(0, dtype=torch.long)
        return s

    def _pyg_sample(self, seeds: Tensor, seed: int,
                    seed_time: Optional[Tensor] = None) -> HeteroSample:
        """PyG's sample of ``seeds``, every node and edge type present (empty if unsampled)."""
        n_id, ei, eid, seed_of = self._pyg.sample(self.seed_type, seeds, seed, seed_time)
        empty = torch.zeros(0, dtype=torch.long)
        for t in self.num_nodes_of:
            n_id.setdefault(t, empty)
            if seed_of is not None:
                seed_of.setdefault(t, empty)
        for et in self.edge_types:
            ei.setdefault(et, torch.zeros(2, 0, dtype=torch.long))
            eid.setdefault(et, empty)
        return HeteroSample(n_id, ei, eid, seed_of)

    def _fit_hetero(self, s: HeteroSample, where: str) -> Tuple[HeteroSample, int, int]:
        """``s`` within the budget: as it is, trimmed (``oversize="trim"``: the first rows
        of each type, the seeds', kept) or refused naming ``where``; ``(s, nodes cut,
        edges cut)``."""
        ns, es = s.sizes()
        over = [f"{t}: {ns[t]} > {int(self.budget.nodes[t]) - RESERVED_NODES} nodes" for t in ns
                if ns[t] > int(self.budget.nodes[t]) - RESERVED_NODES]
        over += [f"{'__'.join(et)}: {es[et]} > {int(self.budget.edges['__'.join(et)])} edges"
                 for et in es if es[et] > int(self.budget.edges["__".join(et)])]
        if not over:
            return s, 0, 0
        if self.oversize == "error":
            raise SubgraphOversizeError(
                f"{where}: the sampled subgraph exceeds the budget ({'; '.join(over)}; "
                f"{self.budget}). Give a larger budget, a higher success_ratio, or "
                f"oversize='trim'")
        return trim_hetero(s, self.budget)

    def _batch_now(self, epoch: int, chunk: int) -> Tuple[Dict[str, Tensor], int, int]:
        seeds = self.chunk_seeds(epoch, chunk)
        s = self.sample(seeds, epoch, chunk, seed_time=self.seed_times_of(seeds))
        s, cut_n, cut_e = self._fit_hetero(
            s, f"epoch {epoch}, chunk {chunk} (seeds {seeds[:4].tolist()}...)")
        return self._with_seed_time(self.pad(s, int(seeds.numel())), seeds,
                                    key_of(self.seed_type, SEED_TIME),
                                    self.node_time.get(self.seed_type)), cut_n, cut_e

    def subgraph(self, s: HeteroSample, num_seeds: int) -> Any:
        """The ``HeteroData`` of a sample (attributes gathered, ``n_id`` / ``e_id`` /
        ``seed_mask`` added): what :meth:`pad` collates."""
        from torch_geometric.data import HeteroData

        h = HeteroData()
        for t, nid in s.n_id.items():
            for k, v in gather_rows(self.node_attrs[t], nid).items():
                h[t][k] = v  # a store's own n_id among them: PyG keeps it
            if N_ID not in self.node_attrs[t]:
                h[t][N_ID] = nid
            h[t].num_nodes = int(nid.numel())
        h[self.seed_type][SEED_MASK] = torch.arange(s.n_id[self.seed_type].numel()) < num_seeds
        if s.seed_of is not None:  # every type, as PyG's per-type batch vector
            for t, so in s.seed_of.items():
                h[t][SEED_OF] = so
        for et in self.edge_types:
            ei = s.edge_index.get(et, torch.zeros(2, 0, dtype=torch.long))
            eid = s.e_id.get(et, torch.zeros(0, dtype=torch.long))
            h[et].edge_index = ei
            if et in self._without_edge_ids:  # bidirectional, merged: no ids (as PyG)
                continue
            if eid is None:
                eid = torch.zeros(0, dtype=torch.long)
            for k, v in gather_rows(self.edge_attrs[et], eid).items():
                h[et][k] = v
            if E_ID not in self.edge_attrs[et]:
                h[et][E_ID] = eid
        return h

    def pad(self, s: HeteroSample, num_seeds: int) -> Dict[str, Tensor]:
        """``collate_padded([subgraph], budget)`` with ``n_id`` / ``e_id`` padded by ``pad_id``."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # one graph: the collate's fill notes say nothing
            flat = collate_padded([self.subgraph(s, num_seeds)], self.budget)
        for t in s.n_id:
            k = key_of(t, N_ID)
            flat[k] = torch.where(flat[key_of(t, NODE_MASK)], flat[k], self.pad_id)
            if s.seed_of is not None:  # padding rows are in no tree
                k = key_of(t, SEED_OF)
                flat[k] = torch.where(flat[key_of(t, NODE_MASK)], flat[k], -1)
        for et in self.edge_types:
            if et in self._without_edge_ids:
                continue
            name = "__".join(et)
            k = key_of(name, E_ID)
            flat[k] = torch.where(flat[key_of(name, EDGE_MASK)], flat[k], self.pad_id)
        return flat

    # -- iteration ---------------------------------------------------------------
    def __iter__(self) -> Iterator[Dict[str, Tensor]]:
        epoch = self._explicit_epoch if self._explicit_epoch is not None else self._epoch
        self._explicit_epoch = None
        self._epoch = epoch + 1
        st = self._new_stats(epoch)
        self.stats = st
        self._ranks.check_same(self._rank_facts)
        ds = _HeteroBatches(self, epoch, self.chunks_of_rank())
        it = (torch.utils.data.DataLoader(ds, batch_size=None, shuffle=False,
                                          num_workers=self.num_workers)
              if self.num_workers > 0 else (ds[i] for i in range(len(ds))))
        real_n = real_e = 0
        N = sum(int(v) for v in self.budget.nodes.values())
        E = sum(int(v) for v in self.budget.edges.values())
        for flat, (cn, ce, tb) in it:  # F > 1: every tensor [F, ...]; the sums count all F
            st.batches += self.micro_batches
            st.fill_batches += int((~flat[GRAPH_MASK].view(-1, 2)[:, 0]).sum())
            st.seeds += int(flat[key_of(self.seed_type, SEED_MASK)].sum())
            real_n += sum(int(flat[key_of(t, NODE_MASK)].sum()) for t in self.num_nodes_of)
            real_e += sum(int(flat[key_of("__".join(et), EDGE_MASK)].sum())
                          for et in self.edge_types)
            st.trimmed_nodes += cn
            st.trimmed_edges += ce
            st.trimmed_batches += tb
            st.node_efficiency = real_n / (st.batches * N)
            st.edge_efficiency = real_e / (st.batches * E) if E else 0.0  # no edge type
            yield flat
        if st.trimmed_batches:
            warnings.warn(
                f"{type(self).__name__} epoch {epoch}: {st.trimmed_batches} of {st.batches} "
                f"sampled subgraphs exceeded {self.budget} and were trimmed ("
                f"{st.trimmed_nodes} nodes and {st.trimmed_edges} edges cut, loader.stats)",
                stacklevel=2)

    def _new_stats(self, epoch: int) -> NeighborLoaderStats:
        return NeighborLoaderStats(epoch=epoch, rank=self.rank, world_size=self.world_size,
                                   total_seeds=int(self.seeds.numel()),
                                   excluded_keys=dict(self.excluded_keys))

    def seeds_in(self, flat: Dict[str, Tensor]) -> int:
        """The number of seed rows of a batch (the seed type's first rows)."""
        return int(flat[key_of(self.seed_type, SEED_MASK)].sum())


# FixedSizeNeighborLoader(HeteroData, ...) makes this loader (one entry point, as PyG's)
FixedSizeNeighborLoader.hetero_loader_class = FixedSizeHeteroNeighborLoader
