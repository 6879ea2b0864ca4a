"""Padded collate: a list of ``Data`` straight to a fixed-size flat dict.

No ``Batch.from_data_list``: outputs are preallocated at the budget's shape,
offsets come from cumulative sums, and copies are vectorised.  With a
*columnar* copy of the dataset (built once by :class:`Collator`), a batch is a
handful of gathers.

Padding convention (see ``docs/batching.md`` and ``docs/dev/FORMAT.md``):

* real graphs come first, in the order given; real nodes/edges/graph rows
  occupy the leading rows of every tensor, exactly as ``Batch.from_data_list``
  would lay them out (``edge_index`` offset by ``ptr``);
* padding nodes (at least one: the budget reserves it) belong to the last
  graph slot ``G - 1``, so ``batch.max() == G - 1``; graph slots between the
  real graphs and the last slot are empty graphs (``ptr`` repeats);
* padding edges are self-loops on the last node ``N - 1`` (always a padding
  node), so they never touch a real node; a batch with exactly ``E`` real
  edges has no padding edge;
* padding features are zero; graph-level float rows of padding slots are NaN,
  integer/bool ones 0;
* boolean ``node_mask`` [N], ``edge_mask`` [E], ``graph_mask`` [G] mark real
  rows.

Keys: every tensor attribute of the graphs, with PyG's collate semantics
(``__cat_dim__``, ``__inc__``), plus ``batch``, ``ptr`` and the three masks.
Each key's level (node, edge or graph) is decided as PyG does on the first
graph (``is_node_attr`` / ``is_edge_attr``; everything else concatenated on
dim 0 is graph-level), checked against every graph of the dataset.
Non-tensor attributes (e.g. a ``smiles`` string) cannot live in a tensor dict:
they are excluded, listed in ``excluded_keys`` and reported with a warning.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from .budget import Budget
from .packing import GraphSizes

# PyG wraps torch.index_select (hash_tensor); the ATen op itself is cheaper
_index_select = getattr(torch._C._VariableFunctions, "index_select", torch.index_select)

__all__ = ["KeySpec", "Collator", "collate_padded", "unpad_batch", "RESERVED_KEYS"]

RESERVED_KEYS = ("batch", "ptr", "node_mask", "edge_mask", "graph_mask")
_META_KEYS = ("num_nodes",)


@dataclass(frozen=True)
class KeySpec:
    """How one attribute is collated and padded."""

    key: str
    level: str  # "node" | "edge" | "graph"
    dtype: torch.dtype
    trail: Tuple[int, ...]  # shape without the cat dim
    cat_dim: int  # cat dim in the per-graph tensor (non-negative)
    inc: str  # "none" | "nodes" | "custom"
    rows: int = 1  # graph level: rows per graph
    scalar: bool = False  # graph level: 0-d per graph


def _is_float(dt: torch.dtype) -> bool:
    return dt.is_floating_point or dt.is_complex


def _fmt_budget(b: Budget) -> str:
    return f"Budget(nodes={b.nodes}, edges={b.edges}, graphs={b.graphs})"


class _Scan:
    """One pass over a dataset: sizes, schema, per-key columns."""

    def __init__(self, dataset, columnar: bool, data_list: Optional[list] = None):
        from torch_geometric.data import HeteroData

        n = len(dataset)
        if n == 0:
            raise ValueError("cannot collate an empty dataset")
        first = dataset[0]
        if isinstance(first, HeteroData):
            raise NotImplementedError(
                "fixed-size collate of HeteroData is not implemented yet; "
                "homogeneous Data only (hetero Budgets and packing are supported)")
        self.num_graphs = n
        nodes = np.zeros(n, dtype=np.int64)
        edges = np.zeros(n, dtype=np.int64)
        m0 = first.to_dict()
        tensor_keys = []
        self.excluded: Dict[str, str] = {}
        for k in sorted(m0):
            v = m0[k]
            if k in _META_KEYS:
                continue
            if k in RESERVED_KEYS:
                raise ValueError(f"graph at dataset index 0 has an attribute named {k!r}, "
                                 f"which the padded format reserves ({RESERVED_KEYS})")
            if not isinstance(v, Tensor):
                self.excluded[k] = f"not a tensor ({type(v).__name__})"
                continue
            if v.layout != torch.strided:
                self.excluded[k] = f"sparse tensor ({v.layout})"
                continue
            cat = first.__cat_dim__(k, v)
            if not isinstance(cat, int):
                self.excluded[k] = f"cat dim {cat!r} is not an int"
                continue
            tensor_keys.append(k)
        self.keys = tensor_keys
        cats: Dict[str, int] = {}
        scalar: Dict[str, bool] = {}
        dtypes: Dict[str, torch.dtype] = {}
        trails: Dict[str, Tuple[int, ...]] = {}
        inc_kind: Dict[str, str] = {}
        rows = {k: np.zeros(n, dtype=np.int64) for k in tensor_keys}
        incs: Dict[str, np.ndarray] = {}
        cols: Dict[str, List[Tensor]] = {k: [] for k in tensor_keys}
        n0 = first.num_nodes or 0
        for k in tensor_keys:
            v = m0[k]
            scalar[k] = v.dim() == 0
            c = 0 if v.dim() == 0 else first.__cat_dim__(k, v) % v.dim()
            cats[k] = c
            dtypes[k] = v.dtype
            trails[k] = tuple(s for j, s in enumerate(v.shape) if j != c)
            inc = first.__inc__(k, v)
            if isinstance(inc, (int, np.integer)) and int(inc) == 0 and \
                    not ("index" in k or k == "face"):
                inc_kind[k] = "none"
            elif ("index" in k or k == "face") and type(first).__inc__ is _data_inc() and \
                    isinstance(inc, int):
                inc_kind[k] = "nodes"
            else:
                inc_kind[k] = "custom"
                incs[k] = np.zeros(n, dtype=np.int64)
        keyset = set(tensor_keys)
        for i in range(n):
            d = first if i == 0 else dataset[i]
            if isinstance(d, HeteroData):
                raise TypeError(f"graph at dataset index {i} is HeteroData, graph 0 is not")
            m = d.to_dict()
            ni = d.num_nodes or 0
            nodes[i] = ni
            ks = {k for k, v in m.items() if isinstance(v, Tensor) and k not in _META_KEYS}
            if ks != keyset:
                missing = sorted(keyset - ks)
                extra = sorted(ks - keyset)
                raise ValueError(
                    f"graph at dataset index {i} has different tensor keys than graph 0: "
                    f"missing {missing}, extra {extra}")
            ei = m.get("edge_index")
            for k in tensor_keys:
                v = m[k]
                if v.dtype != dtypes[k]:
                    raise ValueError(f"graph at dataset index {i}: key {k!r} has dtype "
                                     f"{v.dtype}, graph 0 has {dtypes[k]}")
                if scalar[k]:
                    if v.dim() != 0:
                        raise ValueError(f"graph at dataset index {i}: key {k!r} has shape "
                                         f"{tuple(v.shape)}, graph 0 has a 0-d tensor")
                    r = 1
                    vv = v.reshape(1)
                else:
                    c = cats[k]
                    if v.dim() != len(trails[k]) + 1 or \
                            tuple(s for j, s in enumerate(v.shape) if j != c) != trails[k]:
                        raise ValueError(
                            f"graph at dataset index {i}: key {k!r} has shape "
                            f"{tuple(v.shape)}, incompatible with graph 0's "
                            f"{tuple(m0[k].shape)} (cat dim {c})")
                    r = v.shape[c]
                    vv = v
                rows[k][i] = r
                if columnar:
                    cols[k].append(vv)
                if k in incs:
                    inc = d.__inc__(k, v)
                    incs[k][i] = int(inc)
            if ei is not None:
                edges[i] = ei.shape[-1]
            else:
                edges[i] = d.num_edges
        self.sizes = GraphSizes(np.stack([nodes, edges], axis=1))
        # levels: PyG's decision on the first graph, checked on every graph
        specs = []
        for k in tensor_keys:
            v = m0[k]
            if scalar[k]:
                level = "graph"
            elif first.is_node_attr(k) and np.array_equal(rows[k], nodes):
                level = "node"
            elif first.is_edge_attr(k) and np.array_equal(rows[k], edges):
                level = "edge"
            elif np.array_equal(rows[k], nodes) and not np.all(rows[k] == rows[k][0]):
                level = "node"
            elif np.array_equal(rows[k], edges) and not np.all(rows[k] == rows[k][0]):
                level = "edge"
            elif cats[k] == 0 and np.all(rows[k] == rows[k][0]):
                level = "graph"
            else:
                bad = int(np.nonzero(rows[k] != rows[k][0])[0][0]) if n > 1 else 0
                raise ValueError(
                    f"key {k!r}: cannot tell whether it is node-, edge- or graph-level "
                    f"(graph at dataset index {bad} has {rows[k][bad]} rows on cat dim "
                    f"{cats[k]}, {nodes[bad]} nodes, {edges[bad]} edges)")
            specs.append(KeySpec(k, level, dtypes[k], trails[k], cats[k], inc_kind[k],
                                 rows=int(rows[k][0]) if level == "graph" else 1,
                                 scalar=scalar[k]))
        self.specs = specs
        self.incs = incs
        self.columns: Optional[Dict[str, Tensor]] = None
        if columnar:
            self.columns = {}
            for s in specs:
                self.columns[s.key] = torch.cat(cols[s.key], s.cat_dim)


def _data_inc():
    from torch_geometric.data import Data

    return Data.__inc__


class Collator:
    """Padded collate for one dataset and one budget.

    Built once (one pass over ``dataset``: sizes, schema checks and, with
    ``columnar=True``, a columnar copy of every tensor attribute, so that a
    batch is a gather).  Call :meth:`collate_indices` with dataset indices
    (columnar) or :meth:`collate` with ``Data`` objects.

    Args:
        dataset: a PyG dataset or a list of ``Data``.
        budget: the fixed batch shape.
        columnar: keep a columnar copy of the dataset (memory: one more copy
            of the tensors) for the fastest collate.
        index_dtype: dtype of index tensors on the host (``edge_index`` and
            other incremented keys, ``batch``, ``ptr``): ``torch.int64``
            (PyG's) or ``torch.int32`` (what poptorch narrows to anyway).
        warn: warn about excluded (non-tensor) keys.
    """

    def __init__(self, dataset, budget: Budget, *, columnar: bool = True,
                 index_dtype: torch.dtype = torch.int64, warn: bool = True, _scan=None):
        if budget.is_hetero:
            raise NotImplementedError("hetero budgets: fixed-size collate of HeteroData is "
                                      "not implemented yet")
        if index_dtype not in (torch.int64, torch.int32):
            raise ValueError(f"index_dtype must be torch.int64 or torch.int32, got {index_dtype}")
        self.budget = budget
        self.index_dtype = index_dtype
        self.scan = _scan if _scan is not None else _Scan(dataset, columnar)
        self.columnar = self.scan.columns is not None
        self.schema: List[KeySpec] = self.scan.specs
        self.excluded_keys: Dict[str, str] = dict(self.scan.excluded)
        self.sizes: GraphSizes = self.scan.sizes
        self._nodes_t = torch.from_numpy(self.sizes.matrix[:, 0].copy())
        self._edges_t = torch.from_numpy(self.sizes.matrix[:, 1].copy())
        self._incs_t = {k: torch.from_numpy(v) for k, v in self.scan.incs.items()}
        self._nodes_np = self.sizes.matrix[:, 0].copy()
        self._edges_np = self.sizes.matrix[:, 1].copy()
        self._node_start = np.concatenate([[0], np.cumsum(self._nodes_np)[:-1]]).astype(np.int64)
        self._edge_start = np.concatenate([[0], np.cumsum(self._edges_np)[:-1]]).astype(np.int64)
        levels = [s.level for s in self.schema]
        self._has_node = "node" in levels
        self._has_edge = "edge" in levels
        self._graph_rows = sorted({s.rows for s in self.schema if s.level == "graph"})
        self._arange = np.arange(max(budget.nodes, budget.edges,
                                     budget.graphs * max(self._graph_rows + [1])) + 1)
        self._alloc_cache: Dict[Any, Any] = {}
        self._np_idt = np.int64 if index_dtype == torch.int64 else np.int32
        self.keys: List[str] = sorted([s.key for s in self.schema] + list(RESERVED_KEYS))
        if warn and self.excluded_keys:
            warnings.warn(
                "graph_adapter: these attributes are not tensors and are left out of the "
                "padded batches: " + ", ".join(f"{k!r} ({why})" for k, why in
                                               self.excluded_keys.items()), stacklevel=3)

    # ---------------------------------------------------------------- levels
    @property
    def levels(self) -> Dict[str, str]:
        return {s.key: s.level for s in self.schema}

    def _out_rows(self, s: KeySpec) -> int:
        b = self.budget
        if s.level == "node":
            return b.nodes
        if s.level == "edge":
            return b.edges
        return b.graphs * s.rows

    # ----------------------------------------------------------------- core
    def _check_fit(self, n_real: int, e_real: int, g: int, where: str):
        b = self.budget
        if g > b.graphs - 1 or n_real > b.nodes - 1 or e_real > b.edges:
            raise ValueError(
                f"batch {where} does not fit {_fmt_budget(b)}: {g} graphs (max "
                f"{b.graphs - 1}), {n_real} nodes (max {b.nodes - 1}), {e_real} edges "
                f"(max {b.edges})")

    def _finish(self, blocks: Dict[str, Tensor], n_i: Tensor, e_i: Tensor,
                incs: Dict[str, Tensor]) -> Dict[str, Tensor]:
        """Pad the concatenated real rows of every key into budget-shaped
        tensors (``blocks[k]`` has the cat dim first)."""
        b = self.budget
        N, E, G = b.nodes, b.edges, b.graphs
        g = int(n_i.numel())
        n_real = int(n_i.sum())
        e_real = int(e_i.sum())
        idt = self.index_dtype
        out: Dict[str, Tensor] = {}
        node_off = None
        for s in self.schema:
            blk = blocks[s.key]
            m = blk.shape[0]
            R = self._out_rows(s)
            if s.inc != "none":
                if s.inc == "nodes":
                    if node_off is None:
                        node_off = torch.cumsum(n_i, 0) - n_i
                    off = node_off
                else:
                    inc = incs[s.key]
                    off = torch.cumsum(inc, 0) - inc
                per = n_i if s.level == "node" else e_i if s.level == "edge" else \
                    torch.full((g,), s.rows, dtype=torch.long)
                dt = idt if s.inc == "nodes" else s.dtype
                o = torch.empty((R,) + s.trail, dtype=dt)
                rep = torch.repeat_interleave(off, per, output_size=m)
                rep = rep.view((m,) + (1,) * len(s.trail))
                torch.add(blk, rep, out=o[:m]) if dt == blk.dtype else \
                    o[:m].copy_(blk + rep)
                # padding rows: point at the last node, a padding node
                o[m:] = N - 1 if s.inc == "nodes" else 0
            else:
                if s.level == "graph" and _is_float(s.dtype):
                    o = torch.full((R,) + s.trail, float("nan"), dtype=s.dtype)
                else:
                    o = torch.zeros((R,) + s.trail, dtype=s.dtype)
                o[:m] = blk
            if s.scalar:
                o = o.view(R)
            elif s.cat_dim != 0:
                o = o.movedim(0, s.cat_dim).contiguous()
            out[s.key] = o
        batch = torch.full((N,), G - 1, dtype=idt)
        if g:
            batch[:n_real] = torch.repeat_interleave(torch.arange(g, dtype=idt), n_i,
                                                     output_size=n_real)
        ptr = torch.empty(G + 1, dtype=idt)
        ptr[0] = 0
        if g:
            torch.cumsum(n_i, 0, out=ptr[1:g + 1]) if idt == torch.int64 else \
                ptr[1:g + 1].copy_(torch.cumsum(n_i, 0))
        ptr[g + 1:G] = n_real
        ptr[G] = N
        node_mask = torch.zeros(N, dtype=torch.bool)
        node_mask[:n_real] = True
        edge_mask = torch.zeros(E, dtype=torch.bool)
        edge_mask[:e_real] = True
        graph_mask = torch.zeros(G, dtype=torch.bool)
        graph_mask[:g] = True
        out.update(batch=batch, ptr=ptr, node_mask=node_mask, edge_mask=edge_mask,
                   graph_mask=graph_mask)
        return {k: out[k] for k in self.keys}

    def collate_indices(self, indices: Sequence[int]) -> Dict[str, Tensor]:
        """Padded batch of the dataset graphs ``indices`` (columnar gather).

        All index arithmetic is done once per level in numpy; each key is then
        one ``index_select`` into a preallocated budget-shaped tensor.
        """
        if not self.columnar:
            raise RuntimeError("collate_indices needs columnar=True; use collate(data_list)")
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        g = idx.size
        if g == 0:
            return self.empty()
        b = self.budget
        N, E, G = b.nodes, b.edges, b.graphs
        n_i = self._nodes_np[idx]
        e_i = self._edges_np[idx]
        ncum = np.cumsum(n_i)
        ecum = np.cumsum(e_i)
        n_real = int(ncum[-1])
        e_real = int(ecum[-1])
        if g > G - 1 or n_real > N - 1 or e_real > E:
            self._check_fit(n_real, e_real, g, f"of dataset indices {idx[:8].tolist()}...")
        node_off = ncum - n_i
        ar = self._arange
        gidx: Dict[Any, Tensor] = {}
        if self._has_node:
            gidx["node"] = torch.from_numpy(
                np.repeat(self._node_start[idx] - node_off, n_i) + ar[:n_real])
        if self._has_edge:
            gidx["edge"] = torch.from_numpy(
                np.repeat(self._edge_start[idx] - (ecum - e_i), e_i) + ar[:e_real])
        for r in self._graph_rows:
            gidx[r] = torch.from_numpy(
                idx if r == 1 else (idx[:, None] * r + ar[None, :r]).reshape(-1))
        idt = self._np_idt
        edge_node_off = None
        out: Dict[str, Tensor] = {}
        cols = self.scan.columns
        for s in self.schema:
            lv = s.level if s.level != "graph" else s.rows
            gi = gidx[lv]
            m = gi.numel()
            col = cols[s.key]
            c = s.cat_dim
            if s.inc == "none":
                o = self._alloc(s)
                if c == 0:
                    _index_select(col, 0, gi, out=o[:m])
                else:
                    o.narrow(c, 0, m).copy_(col.index_select(c, gi))
            else:
                if s.inc == "nodes":
                    if s.level == "edge":
                        if edge_node_off is None:
                            edge_node_off = np.repeat(node_off, e_i)
                        off = edge_node_off
                    elif s.level == "node":
                        off = np.repeat(node_off, n_i)
                    else:
                        off = np.repeat(node_off, s.rows)
                    fill = N - 1
                else:
                    inc = self.scan.incs[s.key][idx]
                    per = n_i if s.level == "node" else e_i if s.level == "edge" else \
                        np.full(g, s.rows)
                    off = np.repeat(np.cumsum(inc) - inc, per)
                    fill = 0
                o = self._alloc(s, index=s.inc == "nodes")
                shape = [1] * o.dim()
                shape[c] = m
                blk = col.index_select(c, gi)
                blk += torch.from_numpy(off).view(shape)
                o.narrow(c, 0, m).copy_(blk)
                o.narrow(c, m, o.shape[c] - m).fill_(fill)
            out[s.key] = o
        batch = np.full(N, G - 1, dtype=idt)
        batch[:n_real] = np.repeat(np.arange(g, dtype=idt), n_i)
        ptr = np.empty(G + 1, dtype=idt)
        ptr[0] = 0
        ptr[1:g + 1] = ncum
        ptr[g + 1:G] = n_real
        ptr[G] = N
        node_mask = np.zeros(N, dtype=np.bool_)
        node_mask[:n_real] = True
        edge_mask = np.zeros(E, dtype=np.bool_)
        edge_mask[:e_real] = True
        graph_mask = np.zeros(G, dtype=np.bool_)
        graph_mask[:g] = True
        out["batch"] = torch.from_numpy(batch)
        out["ptr"] = torch.from_numpy(ptr)
        out["node_mask"] = torch.from_numpy(node_mask)
        out["edge_mask"] = torch.from_numpy(edge_mask)
        out["graph_mask"] = torch.from_numpy(graph_mask)
        return {k: out[k] for k in self.keys}

    def _alloc(self, s: KeySpec, index: bool = False) -> Tensor:
        a = self._alloc_cache.get((s.key, index))
        if a is not None:
            fn, shape, kw = a
            return fn(*shape, **kw)
        shape = list(s.trail)
        R = self._out_rows(s)
        if s.scalar:
            shape = [R]
        else:
            shape.insert(s.cat_dim, R)
        if index:
            a = (torch.empty, (shape,), {"dtype": self.index_dtype})
        elif s.level == "graph" and _is_float(s.dtype):
            a = (torch.full, (shape, float("nan")), {"dtype": s.dtype})
        else:
            a = (torch.zeros, (shape,), {"dtype": s.dtype})
        self._alloc_cache[(s.key, index)] = a
        return a[0](*a[1], **a[2])

    def collate(self, data_list: Sequence[Any]) -> Dict[str, Tensor]:
        """Padded batch of ``Data`` objects with this collator's schema."""
        g = len(data_list)
        maps = [d.to_dict() for d in data_list]
        n_i = torch.tensor([d.num_nodes or 0 for d in data_list], dtype=torch.long)
        e_list = []
        for d, m in zip(data_list, maps):
            ei = m.get("edge_index")
            e_list.append(ei.shape[-1] if ei is not None else d.num_edges)
        e_i = torch.tensor(e_list, dtype=torch.long)
        self._check_fit(int(n_i.sum()), int(e_i.sum()), g, "of graphs")
        blocks = {}
        for s in self.schema:
            try:
                vals = [m[s.key] for m in maps]
            except KeyError:
                raise ValueError(f"a graph of this batch lacks key {s.key!r}") from None
            if s.scalar:
                vals = [v.reshape(1) for v in vals]
            elif s.cat_dim != 0:
                vals = [v.movedim(s.cat_dim, 0) for v in vals]
            blocks[s.key] = torch.cat(vals, 0) if vals else \
                torch.zeros((0,) + s.trail, dtype=s.dtype)
        incs = {}
        for s in self.schema:
            if s.inc == "custom":
                incs[s.key] = torch.tensor([int(d.__inc__(s.key, m[s.key]))
                                            for d, m in zip(data_list, maps)], dtype=torch.long)
        return self._finish(blocks, n_i, e_i, incs)

    def empty(self) -> Dict[str, Tensor]:
        """A fully padded batch (no real graph)."""
        z = torch.zeros(0, dtype=torch.long)
        blocks = {s.key: torch.zeros((0,) + s.trail, dtype=s.dtype) for s in self.schema}
        incs = {k: z for k in self._incs_t}
        return self._finish(blocks, z, z, incs)

    def collate_micro(self, groups: Sequence[Sequence[Any]]) -> Dict[str, Tensor]:
        """Stack several padded batches on a new leading dim."""
        outs = [self._one(g) for g in groups]
        return {k: torch.stack([o[k] for o in outs]) for k in self.keys}

    def _one(self, items) -> Dict[str, Tensor]:
        if len(items) == 0:
            return self.empty()
        if isinstance(items[0], (int, np.integer)):
            return self.collate_indices(items)
        return self.collate(items)

    def shapes(self) -> Dict[str, Tuple[Tuple[int, ...], torch.dtype]]:
        e = self.empty()
        return {k: (tuple(v.shape), v.dtype) for k, v in e.items()}


def collate_padded(data_list: Sequence[Any], budget: Budget, *,
                   index_dtype: torch.dtype = torch.int64) -> Dict[str, Tensor]:
    """One-off padded collate of a list of ``Data`` (schema from this list).

    For many batches of one dataset build a :class:`Collator` once instead.
    """
    c = Collator(list(data_list), budget, columnar=False, index_dtype=index_dtype, warn=False)
    return c.collate(data_list)


def unpad_batch(flat: Mapping[str, Tensor], schema: Optional[Sequence[KeySpec]] = None,
                levels: Optional[Mapping[str, str]] = None) -> List[Any]:
    """Give back the real graphs of a padded flat dict as ``Data`` objects.

    ``schema`` (``Collator.schema`` / ``FixedSizeLoader.schema``) restores
    every key exactly (0-d graph attributes, custom increments).  Without it,
    ``levels`` (``{key: "node"|"edge"|"graph"}``) or a guess from the row
    counts is used, and keys named like indices (``*index*``, ``face``) are
    shifted back by the node offsets.  A micro-batched dict
    (``graph_mask.dim() == 2``) gives the graphs of all micro-batches in order.
    """
    from torch_geometric.data import Data

    if flat["graph_mask"].dim() == 2:
        out = []
        for f in range(flat["graph_mask"].shape[0]):
            out.extend(unpad_batch({k: v[f] for k, v in flat.items()}, schema, levels))
        return out
    gm = flat["graph_mask"]
    g = int(gm.sum())
    N = flat["node_mask"].numel()
    E = flat["edge_mask"].numel()
    G = gm.numel()
    ptr = flat["ptr"].long()
    n_i = (ptr[1:g + 1] - ptr[:g])
    n_real = int(flat["node_mask"].sum())
    e_real = int(flat["edge_mask"].sum())
    batch = flat["batch"].long()
    if "edge_index" in flat:
        src = flat["edge_index"][0, :e_real].long()
        e_i = torch.bincount(batch[src], minlength=g)[:g] if e_real else \
            torch.zeros(g, dtype=torch.long)
    else:
        e_i = torch.zeros(g, dtype=torch.long)
        if e_real:
            raise ValueError("unpad_batch: cannot split edges without edge_index")
    specs: Dict[str, KeySpec] = {s.key: s for s in schema} if schema is not None else {}
    node_off = ptr[:g]
    graphs: List[Dict[str, Tensor]] = [dict() for _ in range(g)]
    for k, v in flat.items():
        if k in RESERVED_KEYS:
            continue
        s = specs.get(k)
        if s is not None:
            level, cat, scalar, inc = s.level, s.cat_dim, s.scalar, s.inc
        else:
            inc = "nodes" if ("index" in k or k == "face") else "none"
            cat = v.dim() - 1 if inc == "nodes" else 0
            scalar = False
            level = (levels or {}).get(k)
            if level is None:
                size = v.shape[cat] if v.dim() else 0
                cands = [lv for lv, R in (("node", N), ("edge", E)) if size == R]
                if k == "edge_index" or (k.startswith("edge_") and E == size):
                    cands = ["edge"]
                if size % G == 0 and not cands:
                    cands = ["graph"]
                if len(cands) != 1:
                    raise ValueError(f"unpad_batch: cannot tell the level of key {k!r}; "
                                     f"pass schema= or levels=")
                level = cands[0]
        vv = v.movedim(cat, 0) if cat != 0 and v.dim() else v
        if level == "node":
            cnt = n_i
        elif level == "edge":
            cnt = e_i
        else:
            rows = vv.shape[0] // G
            cnt = torch.full((g,), rows, dtype=torch.long)
        m = int(cnt.sum())
        parts = torch.split(vv[:m], cnt.tolist()) if g else []
        for j, p in enumerate(parts):
            if inc == "nodes":
                p = p - node_off[j].to(p.dtype)
            elif inc == "custom":
                pass  # custom increments cannot be undone from the flat dict alone
            if cat != 0:
                p = p.movedim(0, cat)
            if scalar:
                p = p.reshape(())
            graphs[j][k] = p.contiguous()
    res = []
    for j in range(g):
        d = Data(**graphs[j])
        if not any((specs[k].level if k in specs else None) == "node" or k == "x"
                   for k in graphs[j]):
            d.num_nodes = int(n_i[j])
        res.append(d)
    return res
