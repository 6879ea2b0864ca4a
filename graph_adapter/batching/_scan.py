"""One pass over a dataset of ``Data`` or ``HeteroData``: sizes, schema, columns.

A homogeneous graph is the one-store case: its store ``()`` holds node-, edge-
and graph-level attributes, whose level is decided as PyG does
(``is_node_attr`` / ``is_edge_attr`` on the first graph) and checked on every
graph.  A hetero graph has one store per node type (node-level attributes),
per edge type (edge-level; ``*index*`` keys are ``[2, E]`` and offset by the
source/destination node counts) and the global store (graph-level).

The *size dims* are the columns of :class:`~graph_adapter.batching.packing.GraphSizes`:
``("node", store)`` and ``("edge", store)``, in the budget's order
(homogeneous: ``("node", ())``, ``("edge", ())``).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Collection, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from ..format.pyg import global_store, store_mapping
from ._stored import Stored, stored_of, stored_sizes
from ._view import check_graph_item
from .budget import Budget
from ..format import (Dim, BATCH, EDGE_MASK, EDGE_TYPE_SEP, GRAPH_MASK, NODE_MASK, PAIR_SEP,
                      PTR, RESERVED_KEYS, SEP, StoreKey, dim_of, inc_dims, is_index_attr,
                      key_of, store_name)
from .packing import GraphSizes
from ._sets import SAMPLE, NodeSets, node_sets_of
from ..format import Field

__all__ = ["Scan", "Store", "Dim", "META_KEYS"]

#: Attributes PyG keeps in a store that are not data.
META_KEYS = ("num_nodes",)



class Store(NamedTuple):
    """One store of the graphs: its key, what it holds and the keys the format adds to it."""

    key: StoreKey
    kind: str  # "node" | "edge" | "graph" (hetero stores) or "mixed" (homogeneous)
    reserved: Tuple[str, ...]


def _stores(first: Any, hetero: bool, sets: Optional[NodeSets] = None) -> List[Store]:
    """The stores in PyG order: node types, edge types, global store (a homogeneous
    store with node sets of their own reserves every set's keys: ``_sets.py``)."""
    if not hetero:
        return [Store((), "mixed", RESERVED_KEYS if sets is None else
                      (GRAPH_MASK,) + sets.reserved())]
    return [Store((nt,), "node", (BATCH, PTR, NODE_MASK)) for nt in first.node_types] + \
        [Store(tuple(et), "edge", (EDGE_MASK,)) for et in first.edge_types] + \
        [Store((), "graph", (GRAPH_MASK,))]


def _store_of(d: Any, store: StoreKey, hetero: bool):
    if not hetero:
        return global_store(d)
    if not store:
        return global_store(d)
    return d[store[0]] if len(store) == 1 else d[store]


def _count(d: Any, dim: Dim, hetero: bool, sets: Optional[NodeSets] = None) -> int:
    """Node or edge count of one graph along one size dim."""
    if sets is not None:
        return sets.count(d, dim)
    level, store = dim
    if hetero:
        st = _store_of(d, store, True)
        return (st.num_nodes or 0) if level == "node" else st.num_edges
    if level == "node":
        return d.num_nodes or 0
    ei = global_store(d).get("edge_index")
    return ei.shape[-1] if isinstance(ei, Tensor) else d.num_edges


def _data_inc():
    from torch_geometric.data import Data

    return Data.__inc__


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


class Scan:
    """Sizes (``sizes``), schema (``fields``, :class:`~graph_adapter.format.spec.Field`
    per tensor attribute), excluded attributes (``excluded``), custom
    increments (``incs``) and, with ``columnar=True``, every attribute's
    rows of every graph, cat dim first (``columns``).

    With ``schema`` (a collator's fields) the levels are taken from it and the
    graphs are checked against it: this is how a list of graphs is collated
    like the dataset it comes from.

    ``ids``: the dataset indices of ``dataset``'s graphs, for error messages
    (a batch of graph objects); default: their positions.

    ``sets``: the node sets of their own of the dataset these graphs are collated
    like (with ``schema``; default: read off the first graphs, ``_sets.py``).

    ``sets``: the node sets of their own of the dataset these graphs are collated
    like (with ``schema``; default: read off the first graphs, ``_sets.py``).

    ``exclude``: keys left out on purpose (listed in ``excluded``, not
    warned about).  ``validate``: check every index key (``edge_index``...)
    of every graph: an integer dtype, ``[2, E]`` for ``edge_index``, and
    ``0 <= index < num_nodes`` of that graph (of the source / destination
    node type in a hetero graph), so that no edge joins two graphs or
    touches a padding node.
    """

    def __init__(self, dataset: Sequence[Any], budget: Budget, columnar: bool = True,
                 schema: Optional[Sequence[Field]] = None, exclude: Collection[str] = (),
                 validate: bool = True, ids: Optional[Sequence[int]] = None,
                 sets: Optional[NodeSets] = None):
        n = len(dataset)
        if n == 0:
            raise ValueError("cannot collate an empty dataset")
        first = dataset[0]
        self.ids = ids
        check_graph_item(first, ids[0] if ids is not None else 0)
        self.exclude = frozenset(exclude)
        self.on_purpose: Dict[str, str] = {}
        self.hetero = hetero = isinstance(first, HeteroData)
        #: node sets of their own in a homogeneous store (PyG's PairData), or None
        # (graphs collated like a dataset: its sets, ``sets``)
        self.sets: Optional[NodeSets] = sets if sets is not None or hetero else node_sets_of(
            first, self.exclude, _head(dataset, first, n))
        if self.sets is not None:
            self._check_set_budget(first, budget)
        elif hetero != budget.is_hetero:
            raise TypeError("HeteroData needs a hetero Budget (dicts of node/edge types)"
                            if hetero else "a hetero Budget needs a HeteroData dataset")
        self.num_graphs = n
        # graph 0's order (PyG's); other graphs may have added their types in
        # another order (PyG batches them): compared as sets
        self.node_types: List[str] = list(first.node_types) if hetero else []
        self.edge_types: List[Tuple[str, str, str]] = \
            [tuple(et) for et in first.edge_types] if hetero else []
        if hetero:
            self._check_types(budget)
            self.dims: List[Dim] = [("node", (nt,)) for nt in budget.nodes] + \
                [("edge", tuple(en.split(EDGE_TYPE_SEP))) for en in budget.edges]
        elif self.sets is not None:
            self.dims = self.sets.dims()
        else:
            self.dims = [("node", ()), ("edge", ())]
        self.stores = _stores(first, hetero, self.sets)
        self.excluded: Dict[str, str] = {}
        self._mixed: set = set()  # excluded keys some graph holds as a tensor (named once)
        protos = [f for st in self.stores for f in self._protos(first, st)]
        # an InMemoryDataset is read off its concatenated storage (no per-graph
        # Python); anything else, or a storage the fast path cannot vouch for,
        # graph by graph
        stored = stored_of(dataset) if schema is None and ids is None else None
        got = self._read_stored(stored, protos, columnar) if stored is not None else None
        rows, cols, incs, sizes = got if got is not None else \
            self._read(dataset, protos, columnar, schema)
        #: whether the sizes and columns were read off an InMemoryDataset's storage
        self.from_storage = got is not None
        self.sizes = GraphSizes(sizes) if not budget.is_hetero else GraphSizes(
            sizes, tuple(budget.nodes), tuple(budget.edges))
        if schema is not None:
            self.fields = self._match(protos, schema)
        else:
            self.fields = [self._decide(first, f, rows[f.key]) for f in protos]
        self._check_rows(rows)
        self._check_set_incs(incs)
        self.incs: Dict[str, np.ndarray] = incs
        self.columns: Optional[Dict[str, Tensor]] = None
        if columnar:
            # cat dim first and contiguous: one graph's rows are one block
            self.columns = {f.key: _column(cols[f.key], f.cat_dim) for f in self.fields}
            if validate:
                for f in self.fields:
                    if f.inc == "nodes":
                        self._check_index_range(f, rows[f.key])
            del cols, rows

    def _check_set_budget(self, first: Any, budget: Budget) -> None:
        """A homogeneous store with node sets of their own (PyG's ``PairData``) needs a
        budget per set (``_sets.py``), named as the sets are."""
        sets = self.sets
        if budget.is_hetero and tuple(budget.nodes) == sets.nodes and \
                tuple(budget.edges) == sets.edges:
            return
        keys = sorted(sets.where)
        fix = (f"Budget(nodes={{{', '.join(f'{n!r}: ...' for n in sets.nodes)}}}, "
               f"edges={{{', '.join(f'{e!r}: ...' for e in sets.edges)}}}, graphs=...)")
        got = (f"a budget per type with nodes {sorted(budget.nodes)} and edges "
               f"{sorted(budget.edges)}" if budget.is_hetero else "one node and one edge count")
        raise ValueError(
            f"keys {keys} of the {self._at(0)} ({type(first).__name__}) make "
            f"{len(sets.sets())} node sets of their own in one store, {sets.sets()} (read off "
            f"its __inc__; edge sets {[e for e in sets.edges if e]}"
            f"{', and the store has nodes of its own' if '' in sets.nodes else ''}), so every "
            f"set has its own count in the budget, but this budget has {got}. Pass {fix} "
            f"('' is the store's own nodes or edges), e.g. Budget.fit(dataset, k) or "
            f"Budget.tight(dataset, k) sizes every set; or pass transform= making each graph "
            f"a HeteroData with one node type per set, or leave the keys out (exclude={keys!r}).")

    def _check_set_incs(self, incs: Dict[str, Any]) -> None:
        """An index key into a node set of its own is incremented, graph by graph, by that
        set's size: PyG's batch offsets it by its ``__inc__``, the padded one by the set's
        node counts, which must be the same numbers."""
        if self.sets is None:
            return
        col = {dim: j for j, dim in enumerate(self.dims)}
        for f in self.fields:
            if f.key not in incs or not f.nodes:
                continue
            src, dst = inc_dims(f)
            got = np.asarray(incs[f.key]).reshape(self.num_graphs, -1)
            want = self.sizes.matrix[:, [col[src]] + ([col[dst]] if got.shape[1] == 2 else [])]
            bad = np.nonzero(np.any(got != want, axis=1))[0]
            if len(bad):
                i = int(bad[0])
                g, w = got[i].tolist(), want[i].tolist()
                raise ValueError(
                    f"{self._at(i)}: __inc__({f.key!r}) is {g[0] if len(g) == 1 else g}, but "
                    f"its node set {f.nodes!r} has {w[0] if len(w) == 1 else w} rows in that "
                    f"graph (graph 0 made "
                    f"{f.key!r} an index into {f.nodes!r}: its increment was that set's size); "
                    f"the padded batch offsets {f.key!r} by the set's node counts, so both must "
                    f"agree on every graph. Make __inc__ return the set's size, or leave the key "
                    f"out (exclude=[{f.key!r}]).")

    def _at(self, i: int) -> str:
        """Where graph ``i`` of the scan is, for error messages."""
        return f"graph at dataset index {i if self.ids is None else int(self.ids[i])}"

    # ------------------------------------------------------------ graph 0
    def _check_types(self, budget: Budget) -> None:
        for name in self.node_types + [p for et in self.edge_types for p in et]:
            if SEP in name or EDGE_TYPE_SEP in name:
                raise ValueError(f"node/edge type {name!r} may not contain {SEP!r} or "
                                 f"{EDGE_TYPE_SEP!r}")
        ets = {store_name(et) for et in self.edge_types}
        if set(budget.nodes) != set(self.node_types) or set(budget.edges) != ets:
            raise ValueError(f"budget types do not match the data: budget nodes "
                             f"{sorted(budget.nodes)}, edges {sorted(budget.edges)}; data node "
                             f"types {sorted(self.node_types)}, edge types {sorted(ets)}")

    def _protos(self, first: Any, store: Store) -> List[Field]:
        """The fields of one store of graph 0, sorted by name (level still open
        for a homogeneous graph: ``"?"``)."""
        st = _store_of(first, store.key, self.hetero)
        out = []
        for attr in sorted(st.keys()):
            v = st[attr]
            key = key_of(store.key, attr)
            if attr in META_KEYS:
                continue
            if key in self.exclude:
                self.on_purpose[key] = "excluded on purpose (exclude=)"
                continue
            if attr in store.reserved or (store.kind == "graph" and attr in RESERVED_KEYS):
                raise ValueError(f"{self._at(0)} has an attribute {key!r}, a name "
                                 f"the padded format reserves ({RESERVED_KEYS})")
            if not isinstance(v, Tensor):
                self.excluded[key] = f"not a tensor ({type(v).__name__}; on the {self._at(0)})"
            elif v.layout != torch.strided:
                self.excluded[key] = f"sparse tensor ({v.layout})"
            elif v.is_nested:  # (its sizes cannot even be read as one shape)
                self.excluded[key] = ("nested tensor (ragged rows have no fixed shape to pad "
                                      "to: pad it to one shape, or split it into keys)")
            else:
                f = self._proto_hetero(store, key, attr, v) if self.hetero else \
                    self._proto_homo(first, key, v)
                if f is not None:
                    out.append(f)
        return out

    def _proto_homo(self, first: Any, key: str, v: Tensor) -> Optional[Field]:
        """PyG's collate semantics: ``__cat_dim__`` and ``__inc__`` of graph 0."""
        cat = first.__cat_dim__(key, v)
        if not isinstance(cat, int):
            self.excluded[key] = f"cat dim {cat!r} is not an int"
            return None
        dt = _dtype_name(v.dtype)
        where = self.sets.where.get(key) if self.sets is not None else None
        if where is not None and v.dim():
            return self._proto_set(key, v, cat, dt, where)
        inc = _homo_inc(first, key, v)
        if inc == "nodes":
            _check_index_proto(key, v, key == "edge_index", self._at(0))
        if v.dim() == 0:
            return Field(key, (), key, dt, (), "graph", inc)
        shape: List[Optional[int]] = list(v.shape)
        shape[cat % v.dim()] = None
        return Field(key, (), key, dt, tuple(shape), "?", inc)

    def _proto_set(self, key: str, v: Tensor, cat: int, dt: str,
                   where: Tuple[str, str, str]) -> Field:
        """A key in a node or edge set of its own: its level and set as
        :func:`graph_adapter.format.node_sets` read them off graph 0; an index into a
        set (``edge_index_s``) is offset by that set's node counts (``inc="nodes"``
        with ``Field.nodes``), which :meth:`_check_set_incs` holds to its ``__inc__``."""
        level, nodes, edges = where
        shape: List[Optional[int]] = list(v.shape)
        shape[cat % v.dim()] = None
        inc = "none"
        if nodes and is_index_attr(key):  # an index into one set (two: bipartite "x_s,x_t")
            _check_index_proto(key, v, key == "edge_index", self._at(0))
            inc = "nodes"
        return Field(key, (), key, dt, tuple(shape), level, inc, nodes=nodes if inc == "nodes"
                     or level == "node" else "", edges=edges if level == "edge" else "")

    def _proto_hetero(self, store: Store, key: str, attr: str, v: Tensor) -> Field:
        dt = _dtype_name(v.dtype)
        if BATCH in attr:  # (a name that holds it, as PyG reads it)
            raise NotImplementedError(f"key {key!r}: PyG increments '*batch*' keys by their "
                                      f"max; not supported")
        if store.kind == "edge" and "index" in attr:
            _check_index_proto(key, v, True, self._at(0))
            return Field(key, store.key, attr, dt, (2, None), "edge", "nodes")
        if v.dim() == 0:
            if store.kind != "graph":
                raise ValueError(f"key {key!r}: 0-d tensors are only supported on the "
                                 f"global store")
            return Field(key, (), attr, dt, (), "graph")
        return Field(key, store.key, attr, dt, (None,) + tuple(v.shape[1:]), store.kind)

    # ------------------------------------------------------------ every graph
    def _read(self, dataset, protos: List[Field], columnar: bool,
              schema: Optional[Sequence[Field]]):
        """Sizes, rows per key and (columnar) the columns, checking every graph
        against graph 0.  (The hot loop of a list collate: plain lists, the key
        check compares key views first, and with a ``schema`` a size dim is
        read off the rows of one of its keys rather than PyG's slow
        ``num_nodes``: :meth:`_check_rows` then holds by construction.)"""
        n = self.num_graphs
        first = dataset[0]
        by_dim = {dim_of(f): f.key for f in reversed(schema or []) if f.shape}
        counted = [(j, dim) for j, dim in enumerate(self.dims) if dim not in by_dim]
        sizes: List[int] = []  # flat, graph after graph (no list per graph: memory)
        rows: Dict[str, List[int]] = {f.key: [] for f in protos}
        cols: Dict[str, List[Tensor]] = {f.key: [] for f in protos}
        # custom increments, and those of indices into a node set of its own (checked)
        incs: Dict[str, List[int]] = {f.key: [] for f in protos if f.inc == "custom"
                                      or (f.inc == "nodes" and f.nodes)}
        hetero = self.hetero
        plan = []
        for st in self.stores:
            keys0 = set(store_mapping(_store_of(first, st.key, hetero)).keys())
            # per key: field, dtype, shape before / after the cat dim (None: 0-d),
            # cat dim, and the lists it fills
            checks = [(f, f.torch_dtype, f.shape[:f.cat_dim] if f.shape else None,
                       f.shape[f.cat_dim + 1:], f.cat_dim, rows[f.key],
                       cols[f.key] if columnar else None, incs.get(f.key))
                      for f in protos if f.store == st.key]
            # attributes left out for graph 0's non-tensor value: a later tensor is named
            mixed = [a for a in sorted(keys0) if self.excluded.get(key_of(st.key, a), "")
                     .startswith("not a tensor")]
            plan.append((st, keys0, checks, mixed))
        for i in range(n):
            d = first if i == 0 else dataset[i]
            if hetero or not isinstance(d, Data):
                self._check_graph(d, i)
            if counted:
                sizes.extend([_count(d, dim, hetero, self.sets) for _, dim in counted])
            for st, keys0, checks, mixed in plan:
                s = _store_of(d, st.key, True) if hetero else global_store(d)
                if store_mapping(s).keys() != keys0:
                    self._check_keys(s, st, [ck[0] for ck in checks], i)
                for a in mixed:
                    self._note_mixed(key_of(st.key, a), store_mapping(s).get(a), i)
                for f, dt, pre, post, c, rows_f, cols_f, incs_f in checks:
                    v = self._tensor_of(s, f, dt, i)
                    sh = v.shape
                    if v.requires_grad or v.device.type != "cpu":
                        raise not_collatable(self._at(i), f.key, v)
                    if v.dtype != dt:
                        raise ValueError(f"{self._at(i)}: key {f.key!r} has dtype "
                                         f"{v.dtype}, graph 0 has {dt}")
                    if pre is None:  # 0-d: one row per graph
                        if sh:
                            raise ValueError(f"{self._at(i)}: key {f.key!r} has "
                                             f"shape {tuple(sh)}, graph 0 has a 0-d tensor")
                        r, vv = 1, v.reshape(1)
                    else:
                        r = sh[c] if len(sh) > c else -1
                        if sh != pre + (r,) + post:
                            raise ValueError(
                                f"{self._at(i)}: key {f.key!r} has shape "
                                f"{tuple(sh)}, incompatible with graph 0's "
                                f"{f.shape} (cat dim {c})")
                        vv = v
                    rows_f.append(r)
                    if cols_f is not None:
                        cols_f.append(vv)
                    if incs_f is not None:
                        incs_f.append(self._pair_inc(d, f.attr, v, i) if PAIR_SEP in f.nodes
                                      else self._int_inc(d, f.attr, v, i))
        as_np = {k: np.asarray(v, dtype=np.int64) for k, v in rows.items()}
        matrix = np.empty((n, len(self.dims)), dtype=np.int64)
        if counted:
            matrix[:, [j for j, _ in counted]] = np.asarray(sizes, dtype=np.int64).reshape(
                n, len(counted))
        for j, dim in enumerate(self.dims):
            if dim in by_dim:
                matrix[:, j] = as_np[by_dim[dim]]
        return as_np, cols, {k: np.asarray(v, dtype=np.int64) for k, v in incs.items()}, matrix

    def _read_stored(self, stored: Stored, protos: List[Field], columnar: bool):
        """:meth:`_read`'s result off an ``InMemoryDataset``'s storage, or ``None``
        where it would differ.  Sizes and rows are ``numpy.diff`` of the slices;
        the columns are the storage tensors (cat dim first, views: no copy).
        Dtypes and trailing shapes are one per key by construction of the
        storage, so the per-graph checks of :meth:`_read` hold."""
        if self.hetero or self.sets is not None or any(f.inc == "custom" or f.attr not in stored.slices
                              for f in protos):
            return None
        matrix = stored_sizes(stored)
        if matrix is None:
            return None
        rows = {f.key: stored.counts(f.attr) for f in protos}
        cols: Dict[str, Any] = {f.key: stored.column(f.attr, f.cat_dim) if columnar else None
                                for f in protos}
        for k, col in cols.items():
            if col is not None and (col.requires_grad or col.device.type != "cpu"):
                raise not_collatable("the dataset's storage", k, col)
        return rows, cols, {}, matrix

    def _tensor_of(self, s: Any, f: Field, dt: Any, i: int) -> Tensor:
        """Graph ``i``'s value of ``f`` (a tensor in graph 0), or a named error naming both."""
        v = s[f.attr]
        if not isinstance(v, Tensor):
            raise ValueError(
                f"key {f.key!r}: the {self._at(i)} holds a {type(v).__name__}, graph 0 a "
                f"tensor of dtype {dt}; a key holds a tensor in every graph or in none: make "
                f"it one, or pass exclude=[{f.key!r}]")
        return v

    def _note_mixed(self, key: str, v: Any, i: int) -> None:
        """``key`` is left out for a graph's non-tensor value; if graph ``i`` holds a
        tensor under it (the first such graph), the reason names it too."""
        if isinstance(v, Tensor) and key not in self._mixed:
            self._mixed.add(key)
            self.excluded[key] += (f"; the {self._at(i)} has a tensor of shape "
                                   f"{tuple(v.shape)} under it, left out with it")

    def _int_inc(self, d: Any, attr: str, v: Tensor, i: int) -> int:
        """``d.__inc__(attr, v)`` as an int, or a named error for a tensor increment
        (PyG's bipartite ``[[num_src], [num_dst]]`` form), which is not supported."""
        inc = d.__inc__(attr, v)
        if isinstance(inc, Tensor):
            if inc.numel() == 1:
                return int(inc)
            raise ValueError(
                f"{self._at(i)}: {type(d).__name__}.__inc__({attr!r}, ...) returned a tensor of "
                f"shape {tuple(inc.shape)} ({inc.flatten().tolist()[:4]}); graph_adapter "
                f"increments a key by one int per graph (PyG's default, or a custom int such "
                f"as PairData's). For a bipartite edge_index with per-row increments, use "
                f"HeteroData (one node type a side), or exclude={[attr]!r} and rebuild it "
                f"inside the model")
        try:
            return int(inc)
        except (TypeError, ValueError):
            raise ValueError(f"{self._at(i)}: {type(d).__name__}.__inc__({attr!r}, ...) returned "
                             f"{inc!r}; give an int") from None

    def _pair_inc(self, d: Any, attr: str, v: Tensor, i: int) -> Tuple[int, int]:
        """``d.__inc__(attr, v)`` of a bipartite index (graph 0's was a tensor of two:
        PyG's ``[[num_src], [num_dst]]``) as ``(source, destination)``, or a named error."""
        inc = d.__inc__(attr, v)
        if isinstance(inc, Tensor) and inc.numel() == 2:
            a, b = inc.reshape(-1).tolist()
            return int(a), int(b)
        raise ValueError(f"{self._at(i)}: {type(d).__name__}.__inc__({attr!r}, ...) returned "
                         f"{inc!r}; graph 0's was a tensor of two (a bipartite index: "
                         f"[[num_src], [num_dst]]): give every graph that form")

    def _check_graph(self, d: Any, i: int) -> None:
        if not isinstance(d, HeteroData):
            check_graph_item(d, i if self.ids is None else int(self.ids[i]))
        if isinstance(d, HeteroData) != self.hetero:
            raise TypeError(f"{self._at(i)} is "
                            f"{'not ' if self.hetero else ''}HeteroData, graph 0 is"
                            f"{'' if self.hetero else ' not'}")
        if self.hetero and (set(d.node_types) != set(self.node_types) or
                            {tuple(et) for et in d.edge_types} != set(self.edge_types)):
            raise ValueError(f"{self._at(i)} has node/edge types "
                             f"{sorted(d.node_types)}/{sorted(map(tuple, d.edge_types))}, "
                             f"graph 0 has {sorted(self.node_types)}/{sorted(self.edge_types)}; every graph "
                             f"of a dataset needs the same types (add empty ones: "
                             f"data['type'].num_nodes = 0)")

    def _check_keys(self, s, st: Store, fields: List[Field], i: int) -> None:
        """The tensor keys of one store of graph ``i`` are graph 0's."""
        for k, v in s.items():  # non-tensor attributes of some graphs only: reported too
            key = key_of(st.key, k)
            if key in self.exclude:
                self.on_purpose.setdefault(key, "excluded on purpose (exclude=)")
            elif k not in META_KEYS and key not in self.exclude and key not in self.excluded \
                    and not isinstance(v, Tensor):
                self.excluded[key] = (f"not a tensor ({type(v).__name__}; first seen on the "
                                      f"{self._at(i)})")
            elif self.excluded.get(key, "").startswith("not a tensor"):
                self._note_mixed(key, v, i)
        have = {k for k, v in s.items() if isinstance(v, Tensor) and k not in META_KEYS
                and key_of(st.key, k) not in self.excluded and key_of(st.key, k)
                not in self.exclude}
        want = {f.attr for f in fields}
        if have != want:
            where = f" (store {store_name(st.key) or 'global'!r})" if self.hetero else ""
            raise ValueError(
                f"{self._at(i)}{where} has different tensor keys than graph 0: "
                f"missing {sorted(want - have)}, extra {sorted(have - want)}")

    # ------------------------------------------------------------ levels
    def _decide(self, first: Any, f: Field, rows: np.ndarray) -> Field:
        """The level of a key: fixed by its store (hetero, 0-d), else PyG's
        decision on graph 0, checked on every graph."""
        if f.level != "?":
            return _with_level(f, f.level, rows)
        nodes, edges = self._own_counts()
        varies = not np.all(rows == rows[0])
        if first.is_node_attr(f.key) and np.array_equal(rows, nodes):
            level = "node"
        elif first.is_edge_attr(f.key) and np.array_equal(rows, edges):
            level = "edge"
        elif np.array_equal(rows, nodes) and varies:
            level = "node"
        elif np.array_equal(rows, edges) and varies:
            level = "edge"
        elif f.cat_dim == 0 and not varies:
            level = "graph"
        else:
            raise ValueError(self._undecided(first, f, rows, nodes, edges))
        return _with_level(f, level, rows)

    def _own_counts(self) -> Tuple[np.ndarray, np.ndarray]:
        """The store's own node and edge counts of every graph (``-1`` where a store with
        node sets of their own has none: no key's rows match them)."""
        col = {dim: j for j, dim in enumerate(self.dims)}
        none = np.full(self.num_graphs, -1, dtype=np.int64)
        return tuple(self.sizes.matrix[:, col[(lv, ())]] if (lv, ()) in col else none
                     for lv in ("node", "edge"))

    def _undecided(self, first: Any, f: Field, rows: np.ndarray, nodes: np.ndarray,
                   edges: np.ndarray) -> str:
        """The error of a key whose level no count explains on every graph.

        When graph 0 suggests a level (its rows are its node or edge count),
        it names the first graph that breaks it; otherwise the key belongs to
        no level the padded format has (a second node set that no ``__inc__``
        names: ``_sets.py``)."""
        for level, want in (("node", nodes), ("edge", edges)):
            bad = np.nonzero(rows != want)[0]
            if rows[0] == want[0] and len(bad):
                i = int(bad[0])
                return (f"{self._at(i)}: key {f.key!r} has {rows[i]} rows on cat "
                        f"dim {f.cat_dim} but {want[i]} {level}s (graph 0 makes it "
                        f"{level}-level); give every graph one row per {level}, or leave the "
                        f"key out (exclude=[{f.key!r}])")
        return (f"key {f.key!r}: graph 0 has {rows[0]} rows on cat dim {f.cat_dim}, neither "
                f"its {nodes[0]} nodes nor its {edges[0]} edges, and the count varies between "
                f"graphs, so it is no node-, edge- or graph-level attribute. Further node sets "
                f"of a store are read off its class's __inc__ (PyG's PairData: an index key "
                f"incremented by its set's size, x_s.size(0); docs/dev/FORMAT.md): give the "
                f"class such an __inc__, pass transform= making each graph a HeteroData with "
                f"one node type per set, or leave the key out (exclude=[{f.key!r}])")

    def _match(self, protos: List[Field], schema: Sequence[Field]) -> List[Field]:
        """The collator's fields, after checking that these graphs have them."""
        same = [(f.key, f.dtype, f.cat_dim, f.trail, f.inc) for f in protos] == \
            [(f.key, f.dtype, f.cat_dim, f.trail, f.inc) for f in schema]
        if not same:
            raise ValueError("these graphs have a different schema than the dataset: keys "
                             f"{[f.key for f in protos]}, dataset {[f.key for f in schema]}")
        return list(schema)

    def _check_index_range(self, f: Field, rows: np.ndarray) -> None:
        """``0 <= index < num_nodes`` of its graph for every entry of index key ``f``
        (one vectorised pass over the column; rows of a [2, E] hetero index
        are checked against the source and destination node counts)."""
        col = self.columns[f.key]
        if col.numel() == 0:
            return
        a = col.numpy() if col.dtype != torch.bfloat16 else col.long().numpy()
        a = a.reshape(a.shape[0], -1)  # [rows of every graph, entries per row]
        src, dst = inc_dims(f)
        j = {dim: c for c, dim in enumerate(self.dims)}
        bounds = self.sizes.matrix[:, [j[src], j[dst]]]  # [graphs, 2]
        ends = np.cumsum(rows)
        r = -1
        # graphs in chunks: the per-entry bounds of a million graphs at once
        # would be another copy of the column
        for g0 in range(0, len(rows), _RANGE_CHUNK):
            g1 = min(len(rows), g0 + _RANGE_CHUNK)
            r0, r1 = int(ends[g0] - rows[g0]), int(ends[g1 - 1])
            bound = bounds[g0:g1].repeat(rows[g0:g1], axis=0)  # [rows, 2]
            per_entry = bound[:, :1] if src == dst or a.shape[1] != 2 else bound
            blk = a[r0:r1]
            bad_rows = np.nonzero(((blk < 0) | (blk >= per_entry)).any(axis=1))[0]
            if len(bad_rows):
                r = r0 + int(bad_rows[0])
                per_entry = per_entry[r - r0]
                break
        if r < 0:
            return
        g = int(np.searchsorted(ends, r, side="right"))
        vals = a[r].tolist()
        n = per_entry.tolist()
        raise ValueError(
            f"{self._at(g)}: key {f.key!r} has an index {vals} out of range: "
            f"every entry must be in [0, num_nodes) = [0, {n[0]})"
            + ("" if len(n) == 1 else f" for the source and [0, {n[1]}) for the destination")
            + "; an index outside its graph would join two graphs or touch a padding node. "
              "Fix or drop those edges (e.g. torch_geometric.utils.subgraph), or set the "
              "graph's num_nodes.")

    def _check_rows(self, rows: Dict[str, np.ndarray]) -> None:
        """Every graph has the rows its keys' levels say."""
        col = {dim: j for j, dim in enumerate(self.dims)}
        m = self.sizes.matrix
        for f in self.fields:
            if f.level == "graph":
                want = np.full(self.num_graphs, f.rows)
            else:
                want = m[:, col[dim_of(f)]]
            bad = np.nonzero(rows[f.key] != want)[0]
            if len(bad):
                i = int(bad[0])
                raise ValueError(f"{self._at(i)}: key {f.key!r} has "
                                 f"{rows[f.key][i]} rows on its cat dim, expected {want[i]} "
                                 f"({f.level} rows)")


def _head(dataset: Sequence[Any], first: Any, n: int) -> List[Any]:
    """The first graphs of ``dataset`` that name its node sets (``_sets.SAMPLE``), where
    graph 0 has node sets of its own (PyG's own ``__inc__`` has none: no read)."""
    if type(first).__inc__ is Data.__inc__ or isinstance(first, HeteroData):
        return []
    return [first] + [dataset[i] for i in range(1, min(n, SAMPLE))]


def _check_index_proto(key: str, v: Tensor, edge: bool, at: str) -> None:
    """An index key (offset by node counts) of graph 0: integer, ``[2, E]`` for edges."""
    if v.dtype == torch.bool or v.is_floating_point() or v.is_complex():
        raise TypeError(f"{at}: key {key!r} is an index into the nodes but "
                        f"has dtype {v.dtype}; convert it with .long() (fractions would be "
                        f"truncated)")
    if edge and (v.dim() != 2 or v.shape[0] != 2):
        raise ValueError(f"{at}: key {key!r} must have shape [2, num_edges], "
                         f"got {tuple(v.shape)}" + ("; transpose it (.t())" if v.dim() == 2 and
                                                    v.shape[-1] == 2 else ""))


#: Graphs whose index rows are range-checked at once.
_RANGE_CHUNK = 1 << 16

#: Graph count from which a collator (after its scan) and a loader (after
#: planning an epoch) hand their freed scratch memory back to the OS.
TRIM_FROM = 10_000


def not_collatable(at: str, key: str, v: Tensor) -> ValueError:
    """The error for a graph tensor that collation cannot copy into a padded batch: one that
    requires grad (part of an autograd graph) or that is not on the CPU (collation builds
    batches on the host; FixedSizeLoader's device moves them afterwards)."""
    if v.requires_grad:
        return ValueError(
            f"{at}: key {key!r} requires grad (it is part of an autograd graph, e.g. a model's "
            f"output); collation copies values into a padded batch and would drop its graph: "
            f"store it detached (data.{key.rsplit('/', 1)[-1]} = value.detach()) or build the "
            f"dataset under torch.no_grad().")
    return ValueError(
        f"{at}: key {key!r} is on {v.device}; collation builds padded batches on the CPU: move "
        f"the graph there (data.cpu()) and let the loader move batches (FixedSizeLoader(..., "
        f"device=...) or to_device(batch, device)).")


def release_freed_memory() -> None:
    """Give the heap pages freed so far back to the OS (glibc's
    ``malloc_trim``; a no-op elsewhere; about a millisecond).  A scan of many
    tiny graphs frees tens of MiB of scratch (per-graph lists, torch.cat's
    bookkeeping, whole-column temporaries), and once glibc has seen large
    blocks freed it serves the next ones from its heap rather than from fresh
    mappings, so those pages would stay resident next to the columns
    (``benchmarks/bench_memory.py`` measures it)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _column(parts: Any, cat: int) -> Tensor:
    """The rows of every graph, cat dim first (one cat, one transposing copy;
    a column read off a dataset's storage is already one)."""
    if isinstance(parts, Tensor):
        return parts
    if cat == 0:
        return torch.cat(parts, 0).contiguous()
    return torch.cat(parts, cat).movedim(cat, 0).contiguous()


def _with_level(f: Field, level: str, rows: np.ndarray) -> Field:
    return dataclasses.replace(f, level=level, rows=int(rows[0]) if level == "graph" else 1)


def _homo_inc(first: Any, key: str, v: Tensor) -> str:
    """``"none"``, ``"nodes"`` (PyG's default ``__inc__`` of an index key) or ``"custom"``."""
    inc = first.__inc__(key, v)
    is_index = is_index_attr(key)
    if isinstance(inc, (int, np.integer)) and int(inc) == 0 and not is_index:
        return "none"
    if is_index and type(first).__inc__ is _data_inc() and isinstance(inc, int):
        return "nodes"
    return "custom"
