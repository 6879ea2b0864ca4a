"""``FixedSizeHeteroLinkNeighborLoader``: link prediction on one ``HeteroData`` graph, at one shape.

PyG ``LinkNeighborLoader`` semantics on heterogeneous graphs (also reached
through :class:`~graph_adapter.sampling.link.FixedSizeLinkNeighborLoader`,
which hands a ``HeteroData`` here): the supervision edges are of one edge type
``(src, rel, dst)``, ``edge_label_index=(edge_type, index)`` (or the edge type
alone: its own ``edge_index``); a batch takes ``batch_size`` of them, draws
negatives (binary: sources of type ``src``, destinations of type ``dst``;
triplet: destinations of type ``dst``; ``NegativeSampling(src_weight=,
dst_weight=)`` over those types' nodes), and grows the hetero subgraph of
:mod:`graph_adapter.sampling.hetero_neighbor` around the endpoints, seeds of
both types at once (PyG's ``edge_sample``):

* ``disjoint=False``: the distinct endpoints of each type, sorted by id, are
  the first rows of that type (one type when ``src == dst``: sources and
  destinations together);
* ``disjoint=True``: one row (and tree) per endpoint: sources then
  destinations (triplet: positive destinations, then the negatives in blocks of
  the batch's positives); ``"<type>/seed_of"`` is PyG's ``batch``, the row's
  tree modulo the positives.

The batch is the hetero neighbour loader's (``collate_padded`` with a hetero
:class:`~graph_adapter.batching.budget.Budget`: ``"<type>/x"``,
``"<type>/n_id"``, ``"<type>/seed_mask"`` on the endpoint rows of both
types, ...) plus the supervision keys of
:mod:`graph_adapter.sampling.link`, all under the supervised edge type's
store (``"<src>__<rel>__<dst>/edge_label_index"``, ``.../edge_label``,
``.../input_id``, ``.../link_mask``; triplet ``.../src_index``,
``.../dst_pos_index``, ``.../dst_neg_index``; temporal
``.../edge_label_time`` or ``.../seed_time``), a slot count of their own.
Local rows point into the source type's rows (row 0, ``src_index``) and the
destination type's (row 1, ``dst_*``); padding slots point at each type's last
padding node. :meth:`~FixedSizeHeteroLinkNeighborLoader.unpad_links` gives
them back as PyG places them (``src_index`` on the source type, ...).

Budget (``budget=None``): per node type the ``success_ratio`` quantile of
``fit_batches`` samples (the endpoint types at least the endpoints a batch
can have) plus the reserved padding nodes, per edge type the quantile; the
supervision slot count kept apart from every count.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor

from ...batching import Budget
from ...contract import (DST_NEG_INDEX, DST_POS_INDEX, INPUT_ID, LINK_KEYS, SEED_MASK,
                         SEED_TIME, SRC_INDEX, padding_node)
from ..hetero_neighbor import FixedSizeHeteroNeighborLoader
from ..hetero_sample import EdgeType, HeteroSample, key_of
from . import loader as _link
from .loader import (LinkLabelError, LinkRows, LinkSupervision, check_time_args, link_rows,
                     neg_spec)
from ..neighbor import chunk_seed
from ..settings import SamplingSettings
from ..inputs.source import hetero_store_view, is_store_pair

__all__ = ["FixedSizeHeteroLinkNeighborLoader"]


class FixedSizeHeteroLinkNeighborLoader(LinkSupervision, FixedSizeHeteroNeighborLoader):
    """Yields padded hetero flat dicts of one signature for link prediction (module doc).

    Args:
        data: a ``torch_geometric.data.HeteroData`` (one large graph) or PyG's
            ``(FeatureStore, GraphStore)`` pair with typed edges.
        num_neighbors: ``{edge_type: [k_1, ..., k_H]}`` or one list for every edge type.
        edge_label_index: ``(edge_type, index)``: the supervision edges, of one edge
            type, ``index`` ``[2, L]`` (source ids of type ``src``, destination ids
            of type ``dst``) or ``None`` (that type's ``edge_index``); or the
            edge type alone.
        edge_label: ``[L, ...]`` labels (binary / ``None`` only).
        neg_sampling / neg_sampling_ratio: as
            :class:`~graph_adapter.sampling.link.FixedSizeLinkNeighborLoader`
            (weights over the source / destination type's nodes).
        batch_size: supervision edges per batch.
        budget: a hetero :class:`Budget` (``graphs=2``, every node and edge type),
            its dict/JSON, or ``None`` (fitted).
        disjoint: one tree per endpoint (``"<type>/seed_of"``, PyG's ``batch``).
        time_attr / edge_label_time / temporal_strategy: PyG's temporal sampling
            (both or neither; turns ``disjoint`` on).
        The rest: as :class:`FixedSizeHeteroNeighborLoader`.

    Yields:
        One hetero flat dict a batch, all of ``loader.budget``'s shapes plus the
        supervision keys (``loader.slots`` slots) under the edge type's store.

    Raises:
        LinkLabelError: a bad ``edge_label_index`` (edge type the graph lacks, shape,
            dtype, an id out of range), ``edge_label``, negative sampling or times.
        TypeError: ``data`` that is not a ``HeteroData``.
        FanoutError / ValueError: as :class:`FixedSizeHeteroNeighborLoader`.
        NotImplementedError: ``sampler="pyg"``; temporal sampling without the
            temporal hetero sampler.

    Example:
        ```python
        from torch_geometric.datasets import FakeHeteroDataset

        from graph_adapter import FixedSizeLinkNeighborLoader

        data = FakeHeteroDataset(avg_num_nodes=100)[0]
        et = data.edge_types[0]
        loader = FixedSizeLinkNeighborLoader(data, [4, 4], edge_label_index=et,
                                             batch_size=8)
        batch = next(iter(loader))
        assert batch["__".join(et) + "/edge_label"].shape == (loader.slots,)
        ```
    """

    def __init__(self, data: Any, num_neighbors: Any, edge_label_index: Any = None,
                 edge_label: Optional[Tensor] = None, *, neg_sampling: Any = "binary",
                 neg_sampling_ratio: Optional[float] = None, batch_size: int = 1,
                 shuffle: bool = False, budget: Union[Budget, dict, str, None] = None,
                 seed: int = 0, replace: bool = False, disjoint: bool = False,
                 directed: bool = True, time_attr: Optional[str] = None,
                 edge_label_time: Optional[Tensor] = None, temporal_strategy: str = "uniform",
                 subgraph_type: Optional[str] = None, weight_attr: Optional[str] = None,
                 oversize: str = "trim", success_ratio: float = 0.99, fit_batches: int = 32,
                 round_to: int = 1, micro_batches: int = 1, rank: Optional[int] = None,
                 world_size: Optional[int] = None, pad_id: int = -1, num_workers: int = 0,
                 sampler_threads: Optional[int] = 1, sampler: str = "ours", prefetch: int = 0):
        name = type(self).__name__
        if is_store_pair(data):  # PyG's remote backend: edges read, features left in the store
            data = hetero_store_view(data[0], data[1], name)
        if not (hasattr(data, "node_types") and hasattr(data, "edge_types")):
            raise TypeError(f"{name} samples HeteroData; for a homogeneous graph use "
                            f"FixedSizeLinkNeighborLoader")
        if sampler == "pyg":
            raise NotImplementedError(f"{name}(sampler='pyg'): PyG's hetero sampler is driven "
                                      f"from one seed type here; use sampler='ours'")
        for arg, value, default in (("prefetch", prefetch, 0), ("round_to", round_to, 1)):
            if value != default:  # the homogeneous loader's: refused, not ignored
                raise ValueError(f"{name}({arg}={value!r}): not offered for HeteroData (the "
                                 f"homogeneous loader's); leave it at {default!r}")
        neg = neg_spec(neg_sampling, neg_sampling_ratio)
        self.temporal = check_time_args(name, time_attr, edge_label_time, temporal_strategy,
                                        sampler)
        if self.temporal:
            disjoint = True  # PyG: temporal sampling is disjoint
        self._keep_settings(batch_size, SamplingSettings.of(locals()))
        self.data, self._pyg, self.csc = data, None, None
        self.edge_types: List[EdgeType] = [tuple(et) for et in data.edge_types]
        self.fanouts = self._fanouts(num_neighbors)
        self.num_neighbors = num_neighbors
        self.num_nodes_of = {t: int(data[t].num_nodes) for t in data.node_types}
        self.edge_type, self.edge_label_index = self._label_index(edge_label_index)
        et = self.edge_type
        self.src_type, self.dst_type = et[0], et[2]
        self.seed_type = self.src_type  # stats.seeds and the base's seed checks
        self.num_nodes = self.num_nodes_of[self.src_type]
        self._read_attrs(name, quiet=LINK_KEYS)  # RandomLinkSplit leaves them on the graph
        hops = len(next(iter(self.fanouts.values()))) if self.fanouts else 0
        for e in self.edge_types:
            self.fanouts.setdefault(e, [0] * hops)
        self._setup_supervision(neg, edge_label, edge_label_time, time_attr, temporal_strategy)
        L = int(self.edge_label_index.size(1))
        self._without_edge_ids = self._bidirectional_merges()
        self.node_time, self.edge_time, self.edge_weight = self._time_and_weight()
        self.two_types = self.src_type != self.dst_type
        self._build_cscs()
        self.seeds = torch.arange(L)
        self.stats = self._new_stats(0)
        self._init_slots(batch_size)
        self.min_seeds = self._min_seeds()
        self.budget = self._hetero_budget(budget, success_ratio, fit_batches)
        self.slots = self._slot_count(self.budget)

    # -- settings ----------------------------------------------------------------
    def _label_index(self, arg: Any) -> Tuple[EdgeType, Tensor]:
        """``(edge_type, [2, L] index)`` of ``edge_label_index`` (PyG's hetero forms: an
        edge type, ``(src, dst)`` or a relation naming one, alone or with an index)."""
        types = [tuple(e) for e in self.edge_types]
        if isinstance(arg, str) or (isinstance(arg, (tuple, list)) and len(arg) in (2, 3)
                                    and all(isinstance(a, str) for a in arg)):
            spec, idx = arg, None
        elif isinstance(arg, (tuple, list)) and len(arg) == 2 and not isinstance(arg[1], str):
            spec, idx = arg
        else:
            raise LinkLabelError(f"edge_label_index={arg!r:.60}: on HeteroData give "
                                 f"(edge_type, [2, L] index | None) or the edge type, a "
                                 f"(src, rel, dst) tuple of {types}")
        et = self._canonical(spec, types)
        if et not in types and (idx is None or et[0] not in self.num_nodes_of
                                or et[2] not in self.num_nodes_of):
            # PyG supervises an edge type the graph lacks when its index is given
            raise LinkLabelError(f"edge_label_index names edge type {et!r}, which the graph "
                                 f"lacks; its edge types: {types} (an edge type of its own "
                                 f"needs its index and node types of the graph)")
        eli = self.data[et].edge_index if idx is None else torch.as_tensor(idx)
        if eli.dim() != 2 or eli.size(0) != 2:
            raise LinkLabelError(f"edge_label_index of {et!r} has shape {tuple(eli.shape)}; "
                                 f"give [2, L] (row 0 {et[0]!r} ids, row 1 {et[2]!r} ids)")
        if eli.is_floating_point() or eli.dtype == torch.bool:
            raise LinkLabelError(f"edge_label_index of {et!r} has dtype {eli.dtype}; give "
                                 f"integer node ids")
        eli = eli.long()
        if eli.size(1) == 0:
            raise LinkLabelError(f"edge_label_index of {et!r} has no column: give at least "
                                 f"one supervision edge")
        for row, t in ((0, et[0]), (1, et[2])):
            n = self.num_nodes_of[t]
            bad = (eli[row] < 0) | (eli[row] >= n)
            if bool(bad.any()):
                c = int(bad.nonzero()[0])
                raise LinkLabelError(f"edge_label_index of {et!r} column {c} = "
                                     f"{eli[:, c].tolist()} is out of range: node type {t!r} "
                                     f"has {n} nodes (ids 0..{n - 1})")
        return et, eli

    @staticmethod
    def _canonical(spec: Any, types: List[EdgeType]) -> EdgeType:
        """PyG's ``HeteroData._to_canonical``: a relation names the one edge type that has
        it; ``(src, dst)`` the one edge type between them, else ``(src, "to", dst)``."""
        if isinstance(spec, str):
            hits = [e for e in types if e[1] == spec]
            if len(hits) != 1:
                raise LinkLabelError(f"edge_label_index names relation {spec!r}, which "
                                     f"{len(hits)} edge types have; give the edge type, one of "
                                     f"{types}")
            return hits[0]
        spec = tuple(spec)
        if len(spec) == 2:
            hits = [e for e in types if e[0] == spec[0] and e[2] == spec[1]]
            return hits[0] if len(hits) == 1 else (spec[0], "to", spec[1])
        return spec

    def _min_seeds(self) -> Dict[str, int]:
        """The most endpoint rows of each endpoint type a batch can have."""
        B, m = self.batch_size, self.slots_needed
        if self.neg_sampling == "triplet":
            ns, nd = B, B * (1 + int(self.neg_sampling_ratio))
        else:
            ns = nd = m
        if not self.two_types:
            n = ns + nd
            return {self.src_type: n if self.disjoint else min(n, self.num_nodes_of[self.src_type])}
        if not self.disjoint:
            ns, nd = min(ns, self.num_nodes_of[self.src_type]), min(nd,
                                                                    self.num_nodes_of[self.dst_type])
        return {self.src_type: ns, self.dst_type: nd}

    batch_kind = "link"

    def _budget_minima(self) -> Dict[str, Tuple[int, str]]:
        return {t: (need, f"the {need} endpoints of type {t!r} a batch can have")
                for t, need in self.min_seeds.items()}

    def _budget_avoid(self) -> Tuple[int, ...]:
        return (self.slots_needed,)

    # -- hooks of the link loader's supervision ---------------------------------------
    def _num_src_dst(self) -> Tuple[int, int]:
        return self.num_nodes_of[self.src_type], self.num_nodes_of[self.dst_type]

    def _node_times(self) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        if self.node_time is None:
            return None, None
        return self.node_time.get(self.src_type), self.node_time.get(self.dst_type)

    def _link_key(self, key: str) -> str:
        return key_of("__".join(self.edge_type), key)

    # -- sampling ----------------------------------------------------------------
    def _rows(self, sup: Dict[str, Tensor]) -> LinkRows:
        return link_rows(sup, self.neg_sampling, int(self.neg_sampling_ratio or 0),
                         self.disjoint, two_types=self.two_types)

    def _seed_dict(self, rows: LinkRows) -> Dict[str, Tensor]:
        types = [self.src_type, self.dst_type] if self.two_types else [self.src_type]
        return dict(zip(types, rows.groups))

    def _sample_links(self, rows: LinkRows, epoch: int, chunk: int,
                      stream: int = 0) -> HeteroSample:
        g = torch.Generator().manual_seed(chunk_seed(self.seed, epoch, chunk, stream))
        seeds = self._seed_dict(rows)
        # tree i of each endpoint type is endpoint i of that type: the longest group's
        # times are every tree's (the shorter group's agree with its first entries)
        times = max((t for t in rows.times if t is not None), key=len, default=None)
        return self._sample_ours(None, seeds, times if self.temporal else None, g)

    def _sample_chunk(self, epoch: int, chunk: int, stream: int = 0):
        sup = self.supervision(epoch, chunk, stream)
        return self._sample_links(self._rows(sup), epoch, chunk, stream), sup

    def _fit_sample(self, chunk: int) -> HeteroSample:
        return self._sample_chunk(0, chunk, stream=2)[0]

    def _batch_now(self, epoch: int, chunk: int) -> Tuple[Dict[str, Tensor], int, int]:
        sup = self.supervision(epoch, chunk)
        rows = self._rows(sup)
        s = self._sample_links(rows, epoch, chunk)
        b = int(sup[INPUT_ID].numel())
        if s.seed_of is not None and b:  # PyG's batch: the row's tree modulo the positives
            s.seed_of = {t: v % b for t, v in s.seed_of.items()}
        s, cut_n, cut_e = self._fit_hetero(  # endpoint rows come first: kept by a trim
            s, f"epoch {epoch}, chunk {chunk} (supervision columns "
               f"{sup[INPUT_ID][:4].tolist()}...)")
        seeds = {t: int(v.numel()) for t, v in self._seed_dict(rows).items()}
        flat = self.pad(s, seeds)
        pad = {SRC_INDEX: padding_node(int(self.budget.nodes[self.src_type])),
               DST_POS_INDEX: padding_node(int(self.budget.nodes[self.dst_type])),
               DST_NEG_INDEX: padding_node(int(self.budget.nodes[self.dst_type]))}
        flat.update({self._link_key(k): v for k, v in self._pad_links(sup, rows, pad).items()})
        return {k: flat[k] for k in sorted(flat)}, cut_n, cut_e

    def subgraph(self, s: HeteroSample, num_seeds: Any) -> Any:
        """The sample's ``HeteroData`` with ``seed_mask`` on the endpoint rows of each
        endpoint type (``num_seeds``: ``{type: rows}``)."""
        h = super().subgraph(s, 0)
        for t, n in num_seeds.items():
            h[t][SEED_MASK] = torch.arange(s.n_id[t].numel()) < n
        return h

    def __iter__(self):
        for flat in super().__iter__():
            st = self.stats
            self._count(st, flat)
            if self.two_types:  # the base counts the source type's endpoint rows
                st.seeds += int(flat[key_of(self.dst_type, SEED_MASK)].sum())
            yield flat

    def seeds_in(self, flat: Dict[str, Tensor]) -> int:
        """The endpoint rows of a batch (both endpoint types)."""
        n = int(flat[key_of(self.src_type, SEED_MASK)].sum())
        if self.two_types:
            n += int(flat[key_of(self.dst_type, SEED_MASK)].sum())
        return n

    def unpad_links(self, flat: Dict[str, Tensor]) -> Dict[str, Tensor]:
        """A batch's supervision keys as PyG's hetero ``LinkNeighborLoader`` places them:
        ``"<edge_type>/input_id"`` ``[b]``, binary ``"<edge_type>/edge_label_index"``
        ``[2, m]``, ``.../edge_label``, ``.../edge_label_time``; triplet
        ``"<src>/src_index"``, ``"<dst>/dst_pos_index"``, ``"<dst>/dst_neg_index"``,
        ``"<src>/seed_time"`` and ``"<dst>/seed_time"`` (real slots only)."""
        out = super().unpad_links(flat)
        if self.neg_sampling != "triplet":
            return out
        place = {SRC_INDEX: [self.src_type], DST_POS_INDEX: [self.dst_type],
                 DST_NEG_INDEX: [self.dst_type], SEED_TIME: [self.src_type, self.dst_type]}
        for key, types in place.items():
            v = out.pop(self._link_key(key), None)
            if v is not None:
                for t in types:
                    out[key_of(t, key)] = v
        return out


# FixedSizeLinkNeighborLoader(HeteroData, ...) builds this loader (PyG's one entry point)
_link.HETERO_LINK_LOADER[:] = [FixedSizeHeteroLinkNeighborLoader]
