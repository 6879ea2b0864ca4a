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

__all__ = ["KeySpec", "Collator", "HeteroCollator", "make_collator", "collate_padded",
           "unpad_batch", "unpad_hetero", "RESERVED_KEYS"]

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
            raise TypeError(
                "HeteroData needs a hetero Budget (dicts of node/edge types) and "
                "HeteroCollator (FixedSizeLoader picks it from the budget)")
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
                # cat dim first and contiguous: one graph's rows are one block
                c = s.cat_dim
                parts = cols[s.key] if c == 0 else [v.movedim(c, 0) for v in cols[s.key]]
                self.columns[s.key] = torch.cat(parts, 0).contiguous()


# ------------------------------------------------------------ numpy gathers
# The columnar gather runs in numpy: on arrays of a few thousand rows a numpy
# ``take`` costs about half of an ``index_select`` and the index arithmetic
# about a fifth of the torch ops.  Every copy is a bit copy (rows are gathered
# as opaque byte records), so the output is bit-identical to the torch path.

_NP_NATIVE = {
    torch.bool: np.bool_, torch.uint8: np.uint8, torch.int8: np.int8,
    torch.int16: np.int16, torch.int32: np.int32, torch.int64: np.int64,
    torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64,
    torch.complex64: np.complex64, torch.complex128: np.complex128,
}
_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _storage_dtype(dt: torch.dtype) -> torch.dtype:
    """A numpy-representable dtype of the same item size (bfloat16 -> int16)."""
    if dt in _NP_NATIVE:
        return dt
    size = torch.empty((), dtype=dt).element_size()
    if size not in _INT_OF_SIZE:
        raise TypeError(f"dtype {dt} has no numpy counterpart of item size {size}")
    return _INT_OF_SIZE[size]


def _to_np(t: Tensor) -> np.ndarray:
    """Bit-compatible numpy view of a contiguous CPU tensor (no copy)."""
    sd = _storage_dtype(t.dtype)
    return (t if sd == t.dtype else t.view(sd)).numpy()


class _Gather:
    """How one key is gathered from its columnar copy into a padded output.

    ``col`` holds the rows of every graph, cat dim first.  Plain keys are
    gathered as byte records straight into the output; incremented keys
    (``edge_index``) are gathered, offset and written in one numpy ``add``.
    """

    __slots__ = ("key", "level", "col", "rec", "shape", "np_dtype", "torch_dtype",
                 "view_dtype", "fill", "cat", "kind", "spec", "row_items", "perm")

    def __init__(self, key: str, level: Any, col: Tensor, out_shape: Tuple[int, ...],
                 cat: int, dtype: torch.dtype, fill: Any, kind: str, spec=None):
        self.key = key
        self.level = level
        self.spec = spec
        sd = _storage_dtype(dtype)
        self.torch_dtype = dtype
        self.view_dtype = None if sd == dtype else dtype
        self.np_dtype = np.dtype(_NP_NATIVE[sd])
        a = _to_np(col)
        self.col = a
        self.rec = None
        trail = a.shape[1:]
        rowbytes = int(np.prod(trail, dtype=np.int64)) * a.itemsize
        if kind == "plain" and cat == 0 and len(trail) and rowbytes > 0:
            # rows as opaque records: one memcpy per row
            self.rec = np.dtype((np.void, rowbytes))
            self.col = a.reshape(a.shape[0], rowbytes // a.itemsize).view(
                self.rec).reshape(a.shape[0])
            self.row_items = rowbytes // a.itemsize
        self.shape = tuple(out_shape)
        self.cat = cat
        nd = len(self.shape)
        # output axes, cat dim first (a view of the output in the column's layout)
        self.perm = (cat,) + tuple(j for j in range(nd) if j != cat) if nd else ()
        self.kind = kind  # "plain" | "inc" (numpy add) | "torch_inc"
        if isinstance(fill, np.ndarray):
            self.fill = fill  # per trailing row (hetero edge_index: src, dst)
        elif fill is None or fill == 0:
            self.fill = None  # zeros
        elif isinstance(fill, float) and fill != fill:  # NaN, as the storage bits
            self.fill = _to_np(torch.full((1,), float("nan"), dtype=dtype))[0]
        else:
            self.fill = fill  # int or array broadcast over the trailing dims

    def run(self, gi: np.ndarray, off: Optional[np.ndarray] = None) -> Tensor:
        """Gather rows ``gi`` (and add ``off``) into a new padded output.

        The output is allocated uninitialised and only its padding tail is
        filled, so every byte is written once (cold caches make the second
        write of a zero-filled buffer cost as much as the gather).
        """
        m = gi.shape[0]
        fill = 0 if self.fill is None else self.fill
        if self.rec is not None:  # plain, cat dim 0, whole rows as records
            buf = np.empty(self.shape[0], self.rec)
            self.col.take(gi, out=buf[:m], mode="clip")
            out = buf.view(self.np_dtype).reshape(self.shape)
            out[m:] = fill
        else:
            out = np.empty(self.shape, self.np_dtype)
            ov = out if self.cat == 0 else out.transpose(self.perm)
            if self.kind == "plain":
                if ov.ndim == 1:
                    self.col.take(gi, out=ov[:m], mode="clip")
                else:
                    ov[:m] = self.col[gi]
            else:
                blk = self.col.take(gi, axis=0, mode="clip")
                if self.kind == "inc":
                    np.add(blk, off, out=ov[:m], casting="unsafe")
                else:  # exactly the torch ops of the list path (custom increments)
                    tb = torch.from_numpy(blk)
                    if self.view_dtype is not None:
                        tb = tb.view(self.view_dtype)
                    tb += torch.from_numpy(off)
                    to = torch.from_numpy(ov)
                    if self.view_dtype is not None:
                        to = to.view(self.view_dtype)
                    to[:m].copy_(tb)
            ov[m:] = fill
        t = torch.from_numpy(out)
        return t if self.view_dtype is None else t.view(self.view_dtype)


def _data_inc():
    from torch_geometric.data import Data

    return Data.__inc__


class _CollatorBase:
    """What both collators share, given ``schema``, ``keys``, ``excluded_keys``,
    ``empty()``, ``collate_indices(indices)`` and ``collate(data_list)``."""

    @property
    def levels(self) -> Dict[str, str]:
        return {s.key: s.level for s in self.schema}

    def _warn_excluded(self) -> None:
        # Non-tensor attributes cannot live in a tensor dict: say so, never drop silently.
        if self.excluded_keys:
            warnings.warn(
                "graph_adapter: these attributes are not tensors and are left out of the "
                "padded batches: " + ", ".join(f"{k!r} ({why})" for k, why in
                                               self.excluded_keys.items()), stacklevel=4)

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


class Collator(_CollatorBase):
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

    def __init__(self, dataset: Sequence[Any], budget: Budget, *, columnar: bool = True,
                 index_dtype: torch.dtype = torch.int64, warn: bool = True, _scan=None):
        if budget.is_hetero:
            raise TypeError("a hetero Budget needs HeteroCollator (or make_collator)")
        if index_dtype not in (torch.int64, torch.int32):
            raise ValueError(f"index_dtype must be torch.int64 or torch.int32, got {index_dtype}")
        self.budget = budget
        self.index_dtype = index_dtype
        self.scan = _scan if _scan is not None else _Scan(dataset, columnar)
        self.columnar = self.scan.columns is not None
        self.schema: List[KeySpec] = self.scan.specs
        self.excluded_keys: Dict[str, str] = dict(self.scan.excluded)
        self.sizes: GraphSizes = self.scan.sizes
        self._incs_t = {k: torch.from_numpy(v) for k, v in self.scan.incs.items()}
        self._nodes_np = self.sizes.matrix[:, 0].copy()
        self._edges_np = self.sizes.matrix[:, 1].copy()
        self._node_start = np.concatenate([[0], np.cumsum(self._nodes_np)[:-1]]).astype(np.int64)
        self._edge_start = np.concatenate([[0], np.cumsum(self._edges_np)[:-1]]).astype(np.int64)
        # one row per graph (nodes, edges, first node row, first edge row): a
        # batch's lookup touches one cache line per graph
        self._meta = np.stack([self._nodes_np, self._edges_np, self._node_start,
                               self._edge_start], axis=1).astype(np.int64)
        levels = [s.level for s in self.schema]
        self._has_node = "node" in levels
        self._has_edge = "edge" in levels
        self._graph_rows = sorted({s.rows for s in self.schema if s.level == "graph"})
        self._np_idt = np.int64 if index_dtype == torch.int64 else np.int32
        self.keys: List[str] = sorted([s.key for s in self.schema] + list(RESERVED_KEYS))
        if self.columnar:
            self._build_gathers()
        if warn:
            self._warn_excluded()

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

    def _build_gathers(self) -> None:
        """Per-key gather plans over the columnar copy (built once)."""
        b = self.budget
        N = b.nodes
        self._gathers: List[_Gather] = []
        for s in self.schema:
            col = self.scan.columns[s.key]
            R = self._out_rows(s)
            shape = [R] if s.scalar else list(s.trail[:s.cat_dim]) + [R] + \
                list(s.trail[s.cat_dim:])
            lv = s.level if s.level != "graph" else s.rows
            if s.inc == "none":
                fill = float("nan") if s.level == "graph" and _is_float(s.dtype) else None
                self._gathers.append(_Gather(s.key, lv, col, shape, s.cat_dim, s.dtype,
                                             fill, "plain", s))
                continue
            out_dt = self.index_dtype if s.inc == "nodes" else s.dtype
            fast = s.inc == "nodes" and s.dtype in (torch.int64, torch.int32) and \
                (s.dtype == torch.int64 or s.dtype == out_dt)
            g = _Gather(s.key, lv, col, shape, s.cat_dim, out_dt,
                        N - 1 if s.inc == "nodes" else None, "inc" if fast else "torch_inc", s)
            if not fast:
                # the gathered block keeps the key's dtype; the output takes out_dt
                g.col = _to_np(col)
                g.view_dtype = None if _storage_dtype(s.dtype) == s.dtype else s.dtype
                if g.view_dtype is not None and out_dt != s.dtype:
                    raise TypeError(f"key {s.key!r}: cannot offset dtype {s.dtype}")
            self._gathers.append(g)
        self._trail_ones = {s.key: (1,) * len(s.trail) for s in self.schema}
        G = b.graphs
        self._ar_G = np.arange(G, dtype=self._np_idt)
        self._ar_N = np.arange(N)
        self._ar_E = np.arange(b.edges)
        self._template = dict.fromkeys(self.keys)

    def collate_indices(self, indices: Sequence[int]) -> Dict[str, Tensor]:
        """Padded batch of the dataset graphs ``indices`` (columnar gather).

        All index arithmetic is done once per level in numpy (one gather index
        for the node-level keys, one for the edge-level keys); each key is then
        one numpy ``take`` of whole rows into a freshly allocated budget-shaped
        array (never reused, so batches handed to a DataLoader with workers or
        ``pin_memory`` never alias).
        """
        if not self.columnar:
            raise RuntimeError("collate_indices needs columnar=True; use collate(data_list)")
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        g = idx.size
        if g == 0:
            return self.empty()
        if idx.min() < 0:  # (too large ones raise in the lookup below)
            raise IndexError(f"negative dataset indices: {idx[idx < 0][:8].tolist()}")
        b = self.budget
        N, E, G = b.nodes, b.edges, b.graphs
        meta = self._meta[idx]
        n_i = meta[:, 0]
        e_i = meta[:, 1]
        ncum = n_i.cumsum()
        ecum = e_i.cumsum()
        n_real = int(ncum[-1])
        e_real = int(ecum[-1])
        if g > G - 1 or n_real > N - 1 or e_real > E:
            self._check_fit(n_real, e_real, g, f"of dataset indices {idx[:8].tolist()}...")
        node_off = ncum - n_i
        gidx: Dict[Any, np.ndarray] = {}
        if self._has_node:
            gidx["node"] = (meta[:, 2] - node_off).repeat(n_i) + \
                self._ar_N[:n_real]
        if self._has_edge:
            gidx["edge"] = (meta[:, 3] - (ecum - e_i)).repeat(e_i) + \
                self._ar_E[:e_real]
        for r in self._graph_rows:
            gidx[r] = idx if r == 1 else (idx[:, None] * r + np.arange(r)[None, :]).reshape(-1)
        out = self._template.copy()
        edge_node_off = None
        for gt in self._gathers:
            gi = gidx[gt.level]
            s = gt.spec
            if gt.kind == "plain":
                out[gt.key] = gt.run(gi)
                continue
            if s.inc == "nodes":
                if s.level == "edge":
                    if edge_node_off is None:
                        edge_node_off = node_off.repeat(e_i)
                    off = edge_node_off
                elif s.level == "node":
                    off = np.repeat(node_off, n_i)
                else:
                    off = np.repeat(node_off, s.rows)
            else:
                inc = self.scan.incs[s.key][idx]
                per = n_i if s.level == "node" else e_i if s.level == "edge" else s.rows
                off = np.repeat(np.cumsum(inc) - inc, per)
            out[gt.key] = gt.run(gi, off.reshape(off.shape + self._trail_ones[gt.key]))
        cnt = np.zeros(G, dtype=self._np_idt)
        cnt[:g] = n_i
        cnt[G - 1] = N - n_real
        ptr = np.empty(G + 1, dtype=self._np_idt)
        ptr[0] = 0
        cnt.cumsum(out=ptr[1:])
        out["batch"] = torch.from_numpy(self._ar_G.repeat(cnt))
        out["ptr"] = torch.from_numpy(ptr)
        out["node_mask"] = torch.from_numpy(self._ar_N < n_real)
        out["edge_mask"] = torch.from_numpy(self._ar_E < e_real)
        out["graph_mask"] = torch.from_numpy(self._ar_G < g)
        return out

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


# ====================================================================== hetero
def _et_name(et) -> str:
    return "__".join(et)


class _HeteroScan:
    """One pass over a ``HeteroData`` dataset: sizes, schema, columns.

    Node-store attributes must be node-level (one row per node of the type on
    the cat dim), edge-store attributes edge-level (``*index*`` keys are
    ``[2, E]`` and get ``(source, destination)`` node offsets, as in PyG),
    attributes of the global store graph-level (the same number of rows for
    every graph, or 0-d).
    """

    def __init__(self, dataset, budget: Budget):
        from torch_geometric.data import HeteroData

        n = len(dataset)
        if n == 0:
            raise ValueError("cannot collate an empty dataset")
        first = dataset[0]
        if not isinstance(first, HeteroData):
            raise TypeError("a hetero Budget needs a HeteroData dataset")
        self.num_graphs = n
        self.node_types = list(first.node_types)
        self.edge_types = [tuple(et) for et in first.edge_types]
        for nt in self.node_types:
            if "/" in nt or "__" in nt:
                raise ValueError(f"node type {nt!r} may not contain '/' or '__'")
        for et in self.edge_types:
            if any("/" in p or "__" in p for p in et):
                raise ValueError(f"edge type {et!r} may not contain '/' or '__'")
        if set(budget.nodes) != set(self.node_types) or \
                set(budget.edges) != {_et_name(et) for et in self.edge_types}:
            raise ValueError(f"budget types do not match the data: budget nodes "
                             f"{sorted(budget.nodes)}, edges {sorted(budget.edges)}; data node "
                             f"types {sorted(self.node_types)}, edge types "
                             f"{sorted(_et_name(et) for et in self.edge_types)}")
        self.excluded: Dict[str, str] = {}
        # stores: (prefix, kind, store key, reserved names)
        stores = [(nt, "node", nt) for nt in self.node_types] + \
            [(_et_name(et), "edge", et) for et in self.edge_types] + [("", "graph", None)]
        self.stores = stores
        specs: List[KeySpec] = []
        for prefix, kind, sk in stores:
            st = first[sk] if sk is not None else first._global_store
            reserved = {"node": ("batch", "ptr", "node_mask"), "edge": ("edge_mask",),
                        "graph": ("graph_mask",)}[kind]
            for k in sorted(st.keys()):
                v = st[k]
                full = f"{prefix}/{k}" if prefix else k
                if k in _META_KEYS:
                    continue
                if k in reserved or (kind == "graph" and k in RESERVED_KEYS):
                    raise ValueError(f"graph at dataset index 0: attribute {full!r} uses a "
                                     f"name the padded format reserves")
                if not isinstance(v, Tensor):
                    self.excluded[full] = f"not a tensor ({type(v).__name__})"
                    continue
                if v.layout != torch.strided:
                    self.excluded[full] = f"sparse tensor ({v.layout})"
                    continue
                if "batch" in k:
                    raise NotImplementedError(f"key {full!r}: PyG increments '*batch*' keys "
                                              f"by their max; not supported")
                if kind == "edge" and "index" in k:
                    if v.dim() != 2 or v.shape[0] != 2:
                        raise ValueError(f"key {full!r}: index keys of edge stores must be "
                                         f"[2, num_edges], got {tuple(v.shape)}")
                    specs.append(KeySpec(full, f"edge:{prefix}", v.dtype, (2,), 1, "nodes"))
                    continue
                if v.dim() == 0:
                    if kind != "graph":
                        raise ValueError(f"key {full!r}: 0-d tensors are only supported on "
                                         f"the global store")
                    specs.append(KeySpec(full, "graph", v.dtype, (), 0, "none", 1, True))
                    continue
                lv = "graph" if kind == "graph" else f"{kind}:{prefix}"
                specs.append(KeySpec(full, lv, v.dtype, tuple(v.shape[1:]), 0, "none",
                                     rows=int(v.shape[0]) if kind == "graph" else 1))
        self.specs = specs
        nt_cols = list(budget.nodes)  # budget order (sorted), as Budget.capacity()
        et_cols = list(budget.edges)
        et_of = {_et_name(et): et for et in self.edge_types}
        sizes = np.zeros((n, len(nt_cols) + len(et_cols)), dtype=np.int64)
        cols: Dict[str, List[Tensor]] = {s.key: [] for s in specs}
        by_key = {s.key: s for s in specs}
        for i in range(n):
            d = first if i == 0 else dataset[i]
            if not isinstance(d, HeteroData):
                raise TypeError(f"graph at dataset index {i} is not HeteroData")
            if list(d.node_types) != self.node_types or \
                    [tuple(et) for et in d.edge_types] != self.edge_types:
                raise ValueError(f"graph at dataset index {i} has node/edge types "
                                 f"{d.node_types}/{d.edge_types}, graph 0 has "
                                 f"{self.node_types}/{self.edge_types}")
            for j, nt in enumerate(nt_cols):
                sizes[i, j] = d[nt].num_nodes or 0
            for j, en in enumerate(et_cols):
                sizes[i, len(nt_cols) + j] = d[et_of[en]].num_edges
            cnt = {nt: int(sizes[i, j]) for j, nt in enumerate(nt_cols)}
            cnt.update({en: int(sizes[i, len(nt_cols) + j]) for j, en in enumerate(et_cols)})
            for prefix, kind, sk in stores:
                st = d[sk] if sk is not None else d._global_store
                have = {k for k, v in st.items() if isinstance(v, Tensor) and
                        k not in _META_KEYS}
                want = {s.key.split("/")[-1] if prefix else s.key for s in specs
                        if (s.key.rsplit("/", 1)[0] if "/" in s.key else "") == prefix}
                if have != want:
                    raise ValueError(f"graph at dataset index {i}: store {prefix or 'global'!r}"
                                     f" has tensor keys {sorted(have)}, graph 0 has "
                                     f"{sorted(want)}")
                for k in want:
                    full = f"{prefix}/{k}" if prefix else k
                    s = by_key[full]
                    v = st[k]
                    if v.dtype != s.dtype:
                        raise ValueError(f"graph at dataset index {i}: key {full!r} has dtype "
                                         f"{v.dtype}, graph 0 has {s.dtype}")
                    if s.scalar:
                        ok = v.dim() == 0
                        v = v.reshape(1)
                    elif s.inc == "nodes":
                        ok = v.dim() == 2 and v.shape[0] == 2 and v.shape[1] == cnt[prefix]
                        v = v.t()
                    else:
                        want_rows = s.rows if kind == "graph" else cnt[prefix]
                        ok = v.dim() == len(s.trail) + 1 and tuple(v.shape[1:]) == s.trail \
                            and v.shape[0] == want_rows
                    if not ok:
                        raise ValueError(
                            f"graph at dataset index {i}: key {full!r} has shape "
                            f"{tuple(st[k].shape)}, expected {s.level} rows "
                            f"({cnt.get(prefix, s.rows)}) and trailing shape {s.trail}")
                    cols[full].append(v)
        self.sizes = GraphSizes(sizes, tuple(nt_cols), tuple(et_cols))
        self.columns = {k: torch.cat(v, 0).contiguous() for k, v in cols.items()}
        self.incs: Dict[str, np.ndarray] = {}


class HeteroCollator(_CollatorBase):
    """Padded collate of ``HeteroData`` graphs for a hetero :class:`Budget`.

    Keys follow ``docs/dev/FORMAT.md``: ``<node_type>/<attr>`` plus
    ``<node_type>/batch``, ``/ptr``, ``/node_mask`` for every node type,
    ``<src>__<rel>__<dst>/<attr>`` plus ``/edge_mask`` for every edge type,
    bare graph-level attributes and ``graph_mask``.  Every node type keeps at
    least one padding node (the last row, in graph slot ``G - 1``); padding
    edges of ``(s, r, d)`` run from the last node of ``s`` to the last node of
    ``d``, both padding nodes.  Key order: stores in PyG order (node types,
    edge types, global store), names sorted within a store.
    """

    is_hetero = True

    def __init__(self, dataset, budget: Budget, *, columnar: bool = True,
                 index_dtype: torch.dtype = torch.int64, warn: bool = True):
        if not budget.is_hetero:
            raise ValueError("HeteroCollator needs a hetero Budget (dicts of nodes/edges)")
        if index_dtype not in (torch.int64, torch.int32):
            raise ValueError(f"index_dtype must be torch.int64 or torch.int32, got {index_dtype}")
        self.budget = budget
        self.index_dtype = index_dtype
        self._np_idt = np.int64 if index_dtype == torch.int64 else np.int32
        self.scan = _HeteroScan(dataset, budget)
        self.columnar = True  # HeteroData batches are always gathered from columns
        self.schema: List[KeySpec] = self.scan.specs
        self.excluded_keys: Dict[str, str] = dict(self.scan.excluded)
        self.sizes: GraphSizes = self.scan.sizes
        sc = self.scan
        m = sc.sizes.matrix
        nt_cols = list(budget.nodes)
        et_cols = list(budget.edges)
        self._ncol = {nt: j for j, nt in enumerate(nt_cols)}
        self._ecol = {en: len(nt_cols) + j for j, en in enumerate(et_cols)}
        starts = np.zeros_like(m)
        starts[1:] = np.cumsum(m, axis=0)[:-1]
        self._meta = m
        self._starts = starts
        G = budget.graphs
        self._ar_G = np.arange(G, dtype=self._np_idt)
        self._ar = np.arange(max(list(budget.nodes.values()) + list(budget.edges.values()) +
                                 [1]))
        self._graph_rows = sorted({s.rows for s in self.schema if s.level == "graph"})
        self._gathers: List[_Gather] = []
        for s in self.schema:
            col = sc.columns[s.key]
            if s.level == "graph":
                R, lv = G * s.rows, s.rows
            else:
                kind, name = s.level.split(":", 1)
                R = budget.nodes[name] if kind == "node" else budget.edges[name]
                lv = s.level
            if s.inc == "nodes":
                src, _, dst = s.level.split(":", 1)[1].split("__")
                fill = np.array([budget.nodes[src] - 1, budget.nodes[dst] - 1])
                fast = s.dtype == torch.int64 or s.dtype == index_dtype
                g = _Gather(s.key, lv, col, [2, R], 1, index_dtype, fill,
                            "inc" if fast else "torch_inc", s)
                if not fast:
                    g.view_dtype = None
                self._gathers.append(g)
            else:
                shape = [R] if s.scalar else [R] + list(s.trail)
                fill = float("nan") if s.level == "graph" and _is_float(s.dtype) else None
                self._gathers.append(_Gather(s.key, lv, col, shape, 0, s.dtype, fill,
                                             "plain", s))
        keys = []
        for prefix, kind, _ in sc.stores:
            names = [s.key for s in self.schema
                     if (s.key.rsplit("/", 1)[0] if "/" in s.key else "") == prefix]
            extra = {"node": ["batch", "ptr", "node_mask"], "edge": ["edge_mask"],
                     "graph": ["graph_mask"]}[kind]
            names += [f"{prefix}/{r}" if prefix else r for r in extra]
            keys += sorted(names)
        self.keys: List[str] = keys
        self._template = dict.fromkeys(keys)
        if warn:
            self._warn_excluded()

    def collate_indices(self, indices: Sequence[int]) -> Dict[str, Tensor]:
        """Padded batch of the dataset graphs ``indices`` (columnar gather)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        g = idx.size
        if g and idx.min() < 0:
            raise IndexError(f"negative dataset indices: {idx[idx < 0][:8].tolist()}")
        b = self.budget
        G = b.graphs
        meta = self._meta[idx]
        starts = self._starts[idx]
        cum = meta.cumsum(axis=0)
        tot = cum[-1] if g else np.zeros(meta.shape[1], np.int64)
        off = cum - meta  # per graph, per dim: offset inside the batch
        if g > G - 1 or any(int(tot[self._ncol[nt]]) > N - 1 for nt, N in b.nodes.items()) or \
                any(int(tot[self._ecol[en]]) > E for en, E in b.edges.items()):
            raise ValueError(
                f"batch of dataset indices {idx[:8].tolist()}... does not fit {b!r}: {g} graphs "
                f"(max {G - 1}), nodes " +
                ", ".join(f"{nt}: {int(tot[self._ncol[nt]])} (max {N - 1})"
                          for nt, N in b.nodes.items()) + "; edges " +
                ", ".join(f"{en}: {int(tot[self._ecol[en]])} (max {E})"
                          for en, E in b.edges.items()))
        ar = self._ar
        gidx: Dict[Any, np.ndarray] = {}
        for nt, j in self._ncol.items():
            gidx["node:" + nt] = (starts[:, j] - off[:, j]).repeat(meta[:, j]) + \
                ar[:int(tot[j])]
        for en, j in self._ecol.items():
            gidx["edge:" + en] = (starts[:, j] - off[:, j]).repeat(meta[:, j]) + \
                ar[:int(tot[j])]
        for r in self._graph_rows:
            gidx[r] = idx if r == 1 else (idx[:, None] * r + np.arange(r)[None, :]).reshape(-1)
        out = self._template.copy()
        for gt in self._gathers:
            gi = gidx[gt.level]
            if gt.kind == "plain":
                out[gt.key] = gt.run(gi)
                continue
            en = gt.level.split(":", 1)[1]
            src, _, dst = en.split("__")
            e = meta[:, self._ecol[en]]
            o = np.empty((gi.shape[0], 2), dtype=np.int64)
            o[:, 0] = off[:, self._ncol[src]].repeat(e)
            o[:, 1] = off[:, self._ncol[dst]].repeat(e)
            out[gt.key] = gt.run(gi, o)
        for nt, j in self._ncol.items():
            N = b.nodes[nt]
            n_real = int(tot[j])
            cnt = np.zeros(G, dtype=self._np_idt)
            cnt[:g] = meta[:, j]
            cnt[G - 1] = N - n_real
            ptr = np.empty(G + 1, dtype=self._np_idt)
            ptr[0] = 0
            cnt.cumsum(out=ptr[1:])
            out[nt + "/batch"] = torch.from_numpy(self._ar_G.repeat(cnt))
            out[nt + "/ptr"] = torch.from_numpy(ptr)
            out[nt + "/node_mask"] = torch.from_numpy(ar[:N] < n_real)
        for en, j in self._ecol.items():
            out[en + "/edge_mask"] = torch.from_numpy(ar[:b.edges[en]] < int(tot[j]))
        out["graph_mask"] = torch.from_numpy(self._ar_G < g)
        return out

    def empty(self) -> Dict[str, Tensor]:
        """A fully padded batch (no real graph)."""
        return self.collate_indices([])

    def collate(self, data_list: Sequence[Any]) -> Dict[str, Tensor]:
        """Padded batch of ``HeteroData`` objects (scanned into columns first)."""
        if len(data_list) == 0:
            return self.empty()
        tmp = HeteroCollator(list(data_list), self.budget, index_dtype=self.index_dtype,
                             warn=False)
        if [(s.key, s.dtype, s.trail) for s in tmp.schema] != \
                [(s.key, s.dtype, s.trail) for s in self.schema]:
            raise ValueError("these graphs have a different schema than the dataset")
        return tmp.collate_indices(range(len(data_list)))

    def unpad(self, flat: Mapping[str, Tensor]) -> List[Any]:
        """The real graphs of a padded hetero flat dict, as ``HeteroData``."""
        return unpad_hetero(flat, self.schema, self.scan.node_types, self.scan.edge_types)


def unpad_hetero(flat: Mapping[str, Tensor], schema: Sequence[KeySpec],
                 node_types: Sequence[str], edge_types: Sequence[Tuple[str, str, str]]
                 ) -> List[Any]:
    """Give back the real ``HeteroData`` graphs of a padded hetero flat dict
    (``schema``, ``node_types``, ``edge_types`` from :class:`HeteroCollator`)."""
    from torch_geometric.data import HeteroData

    if flat["graph_mask"].dim() == 2:
        out = []
        for f in range(flat["graph_mask"].shape[0]):
            out.extend(unpad_hetero({k: v[f] for k, v in flat.items()}, schema, node_types,
                                    edge_types))
        return out
    g = int(flat["graph_mask"].sum())
    G = flat["graph_mask"].numel()
    n_i, n_off = {}, {}
    for nt in node_types:
        ptr = flat[nt + "/ptr"].long()
        n_i[nt] = ptr[1:g + 1] - ptr[:g]
        n_off[nt] = ptr[:g]
    e_i = {}
    for et in edge_types:
        en = _et_name(et)
        e_real = int(flat[en + "/edge_mask"].sum())
        src = flat[en + "/edge_index"][0, :e_real].long()
        e_i[en] = torch.bincount(flat[et[0] + "/batch"].long()[src], minlength=g)[:g] \
            if e_real else torch.zeros(g, dtype=torch.long)
    graphs = [HeteroData() for _ in range(g)]
    for nt in node_types:
        for j in range(g):
            graphs[j][nt].num_nodes = int(n_i[nt][j])
    for s in schema:
        v = flat[s.key]
        if s.level == "graph":
            cnt = [s.rows] * g
            store, attr = None, s.key
        else:
            prefix, attr = s.key.rsplit("/", 1)
            kind, name = s.level.split(":", 1)
            cnt = (n_i[name] if kind == "node" else e_i[name]).tolist()
            store = name if kind == "node" else tuple(name.split("__"))
        vv = v.t() if s.inc == "nodes" else v
        parts = torch.split(vv[:sum(cnt)], cnt) if g else []
        for j, p in enumerate(parts):
            if s.inc == "nodes":
                src, _, dst = store
                p = (p - torch.stack([n_off[src][j], n_off[dst][j]]).to(p.dtype)).t()
            if s.scalar:
                p = p.reshape(())
            p = p.contiguous()
            if store is None:
                graphs[j][attr] = p
            else:
                graphs[j][store][attr] = p
    return graphs


def make_collator(dataset, budget: Budget, **kw):
    """:class:`Collator` or :class:`HeteroCollator`, following the budget."""
    if budget.is_hetero:
        return HeteroCollator(dataset, budget, **kw)
    return Collator(dataset, budget, **kw)
