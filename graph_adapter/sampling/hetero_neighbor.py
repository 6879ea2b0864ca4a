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

Not supported (named errors): ``directed=False`` with ``disjoint=True``, seeds
of more than one node type (PyG's ``NeighborLoader`` takes one seed type too),
temporal sampling.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import torch
from torch import Tensor

from ..batching import RESERVED_NODES, Budget
from ..batching import collate_padded
from .csr import CSC, FanoutError, check_fanouts
from ..format import (E_ID, EDGE_MASK, GRAPH_MASK, N_ID, NODE_MASK, SEED_MASK,
                      SEED_OF, SEP, stack_micro_batches)
from .pyg_sampler import PygHeteroNeighborSampler
from .settings import SamplingSettings
from .neighbor import (FixedSizeNeighborLoader, InputNodesError,
                       NeighborLoaderStats, SubgraphOversizeError, seed_tensor,
                       check_hetero_fanouts, chunk_seed)
from .source import (AttrValue, StoreRows, check_reserved, describe, gather_rows,
                     hetero_store_view, is_store_pair, rows_of, warn_excluded)
# the sampling itself, before padding
from .hetero_sample import (EdgeType, HeteroSample, fit_hetero_budget, key_of,
                            sample_hetero_neighbors, trim_hetero)

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
            by row per batch, :func:`~graph_adapter.sampling.source.hetero_store_view`).
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
                 input_nodes: Any, shuffle: bool = False,
                 budget: Union[Budget, dict, str, None] = None, seed: int = 0,
                 replace: bool = False, disjoint: bool = False, directed: bool = True,
                 oversize: str = "trim", success_ratio: float = 0.99, fit_batches: int = 32,
                 micro_batches: int = 1, rank: Optional[int] = None,
                 world_size: Optional[int] = None,
                 pad_id: int = -1, num_workers: int = 0, sampler_threads: Optional[int] = 1,
                 sampler: str = "ours"):
        name = type(self).__name__
        hetero = hasattr(data, "node_types") and hasattr(data, "edge_types")
        if not (hetero or is_store_pair(data)):
            raise TypeError(f"{name} samples HeteroData; for a homogeneous graph use "
                            f"FixedSizeNeighborLoader")
        # prefetch: the homogeneous loader's background thread, not offered here (0)
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
        self.excluded_keys: Dict[str, str] = {}
        self.node_attrs = {t: self._store_attrs(data[t], self.num_nodes_of[t], t + SEP)
                           for t in data.node_types}
        self.edge_attrs = {et: self._store_attrs(data[et], int(data[et].num_edges),
                                                 "__".join(et) + SEP)
                           for et in self.edge_types}
        warn_excluded(name, self.excluded_keys)
        hops = len(next(iter(self.fanouts.values())))
        for et in self.edge_types:  # an edge type left out samples nothing
            self.fanouts.setdefault(et, [0] * hops)
        if sampler == "pyg":  # PyG keeps its own CSCs
            self._pyg = PygHeteroNeighborSampler(data, self.fanouts, replace=replace,
                                                 disjoint=self.disjoint, directed=self.directed)
            self.cscs: Dict[EdgeType, CSC] = {}
            self.scratch: Dict[str, Tensor] = {}
        else:
            with self._sampling_threads():  # a CSC where something is sampled (directed=False:
                # every edge type, its edges between the sampled nodes are in the subgraph)
                self.cscs = {et: CSC.from_edge_index(data[et].edge_index,
                                                     self.num_nodes_of[et[2]],
                                                     num_src_nodes=self.num_nodes_of[et[0]])
                             for et in self.edge_types
                             if not self.directed or any(k != 0 for k in self.fanouts[et])}
            self.scratch = {t: torch.full((n,), -1, dtype=torch.long)
                            for t, n in self.num_nodes_of.items()}
        self.stats = self._new_stats(0)
        self.budget = self._hetero_budget(budget, success_ratio, fit_batches)

    # -- settings ------------------------------------------------------------
    def _fanouts(self, num_neighbors: Any) -> Dict[EdgeType, List[int]]:
        if isinstance(num_neighbors, dict):
            check_hetero_fanouts(self.edge_types, num_neighbors)
            return {(tuple(k) if not isinstance(k, str) else tuple(k.split("__"))):
                    check_fanouts(v) for k, v in num_neighbors.items()}
        fan = check_fanouts(num_neighbors)
        if not self.edge_types:
            raise FanoutError("the HeteroData has no edge type: nothing to sample")
        return {et: list(fan) for et in self.edge_types}

    def _input_nodes(self, input_nodes: Any) -> Tuple[str, Tensor]:
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
        (gathered by row, :mod:`~graph_adapter.sampling.source`); the rest in
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
    def _hetero_budget(self, budget: Union[Budget, dict, str, None], success_ratio: float,
                       fit_batches: int) -> Budget:
        if budget is None:
            n = max(1, min(int(fit_batches), math.ceil(self.seeds.numel() / self.batch_size)))
            with self._sampling_threads():
                self.fit_sizes = [self._fit_sample(c).sizes() for c in range(n)]
            return fit_hetero_budget(self.fit_sizes, self.seed_type, self.batch_size,
                                     success_ratio)
        if isinstance(budget, str):
            budget = Budget.from_json(budget)
        elif isinstance(budget, dict):
            budget = Budget.from_dict(budget)
        want_n, want_e = set(self.num_nodes_of), {"__".join(et) for et in self.edge_types}
        if (not budget.is_hetero or budget.graphs != 2 or set(budget.nodes) != want_n
                or set(budget.edges) != want_e):
            raise ValueError(f"budget {budget}: a hetero neighbour batch needs graphs=2 and a "
                             f"count for every node type {sorted(want_n)} and edge type "
                             f"{sorted(want_e)}")
        real = int(budget.nodes[self.seed_type]) - RESERVED_NODES
        if real < self.batch_size:
            raise ValueError(f"budget nodes[{self.seed_type!r}]={budget.nodes[self.seed_type]} "
                             f"holds {real} real nodes, fewer than batch_size={self.batch_size} "
                             f"seeds: give >= {self.batch_size + RESERVED_NODES}")
        return budget

    # -- sampling ----------------------------------------------------------------
    def sample(self, seeds: Tensor, epoch: int, chunk: int, stream: int = 0) -> HeteroSample:
        """The unpadded sample of ``seeds`` (deterministic for ``(seed, stream, epoch, chunk)``)."""
        if self._pyg is not None:
            return self._pyg_sample(seeds, chunk_seed(self.seed, epoch, chunk, stream))
        g = torch.Generator().manual_seed(chunk_seed(self.seed, epoch, chunk, stream))
        s = sample_hetero_neighbors(self.cscs, self.scratch, self.seed_type, seeds,
                                    {et: self.fanouts[et] for et in self.cscs},
                                    replace=self.replace, directed=self.directed,
                                    disjoint=self.disjoint, generator=g)
        for et in self.edge_types:  # an edge type not sampled: no edge, same signature
            if et not in s.edge_index:
                s.edge_index[et] = torch.zeros(2, 0, dtype=torch.long)
                s.e_id[et] = torch.zeros(0, dtype=torch.long)
        return s

    def _pyg_sample(self, seeds: Tensor, seed: int) -> HeteroSample:
        """PyG's sample of ``seeds``, every node and edge type present (empty if unsampled)."""
        n_id, ei, eid, seed_of = self._pyg.sample(self.seed_type, seeds, seed)
        empty = torch.zeros(0, dtype=torch.long)
        for t in self.num_nodes_of:
            n_id.setdefault(t, empty)
            if seed_of is not None:
                seed_of.setdefault(t, empty)
        for et in self.edge_types:
            ei.setdefault(et, torch.zeros(2, 0, dtype=torch.long))
            eid.setdefault(et, empty)
        return HeteroSample(n_id, ei, eid, seed_of)

    def _batch_now(self, epoch: int, chunk: int) -> Tuple[Dict[str, Tensor], int, int]:
        seeds = self.chunk_seeds(epoch, chunk)
        s = self.sample(seeds, epoch, chunk)
        ns, es = s.sizes()
        over = [f"{t}: {ns[t]} > {int(self.budget.nodes[t]) - RESERVED_NODES} nodes" for t in ns
                if ns[t] > int(self.budget.nodes[t]) - RESERVED_NODES]
        over += [f"{'__'.join(et)}: {es[et]} > {int(self.budget.edges['__'.join(et)])} edges"
                 for et in es if es[et] > int(self.budget.edges["__".join(et)])]
        cut_n = cut_e = 0
        if over:
            if self.oversize == "error":
                raise SubgraphOversizeError(
                    f"epoch {epoch}, chunk {chunk} (seeds {seeds[:4].tolist()}...): the sampled "
                    f"subgraph exceeds the budget ({'; '.join(over)}; {self.budget}). Give a "
                    f"larger budget, a higher success_ratio, or oversize='trim'")
            s, cut_n, cut_e = trim_hetero(s, self.budget)
        return self.pad(s, int(seeds.numel())), cut_n, cut_e

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
            st.edge_efficiency = real_e / (st.batches * E)
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
