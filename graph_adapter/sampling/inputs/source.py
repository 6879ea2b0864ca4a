"""Where a loader's rows come from: attributes gathered by index, and the graph's edges.

A sampled batch needs, for each of its rows, the rows of the graph's node- and
edge-level attributes. Those attributes live in different places:

* a ``torch.Tensor`` (the usual case: gathered with ``index_select``);
* a ``numpy.ndarray`` or ``numpy.memmap`` (features kept on disk): gathered
  with ``np.take`` of the batch's rows only, so a memmap is never read whole;
* a column of a PyG ``FeatureStore`` (PyG's remote-backend protocol: the
  ``(feature_store, graph_store)`` input of PyG's loaders): gathered with one
  ``feature_store.multi_get_tensor`` call a batch, its ``TensorAttr.index`` the
  batch's node ids.

:class:`RowSource` is the one abstraction over the last two (a tensor is gathered
as it is); :func:`gather_rows` gathers a dict of them for one batch, padded to
the budget's row count. :func:`graph_input` reads what a loader samples from:
a ``Data`` (its ``edge_index``, or PyG's ``adj`` / ``adj_t`` sparse tensors, or
no edges at all), or a ``(FeatureStore, GraphStore)`` pair (the graph store's
edges in COO, CSR or CSC layout).

Nothing is left out silently: an attribute no batch can hold is listed in the
loader's ``excluded_keys`` with why, and :func:`warn_excluded` warns once per
loader (an :class:`ExcludedAttributeWarning`, naming each key, its type and how
to keep it).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from ...contract import E_ID, N_ID, RESERVED_KEYS, SAMPLED_KEYS, key_of
from ..csr import CSC

__all__ = ["RowSource", "NumpyRows", "StoreRows", "rows_of", "whole_rows", "gather_rows",
           "GraphInput",
           "graph_input", "input_edge_index", "hetero_store_view", "is_store_pair",
           "is_hetero_store_pair",
           "warn_excluded", "check_reserved", "describe", "sparse_edge_index",
           "store_input", "ExcludedAttributeWarning", "GraphStructureError",
           "FeatureStoreError", "ReservedAttributeError"]


class ExcludedAttributeWarning(UserWarning):
    """A graph attribute is left out of every batch (the loader's ``excluded_keys``
    lists it with why); filter this category to silence it on purpose."""


class GraphStructureError(ValueError):
    """The graph gives nothing a loader can sample from (no node count, an edge
    structure of a kind it cannot read)."""


class FeatureStoreError(ValueError):
    """A ``(FeatureStore, GraphStore)`` input a loader cannot use (no edges, too few
    feature rows, a hetero store given to the homogeneous loader)."""


class ReservedAttributeError(ValueError):
    """A graph attribute named like a key the padded batches own, in a form that key
    cannot take (PyG's ``n_id`` / ``e_id`` override: one integer per node / edge)."""


AttrValue = Union[Tensor, "RowSource"]


# ------------------------------------------------------------------- rows of one attribute
class RowSource:
    """Rows of one attribute that a batch gathers by index, wherever they live.

    Attributes: ``num_rows``, ``trailing`` (the shape after the row dim),
    ``dtype`` (the torch dtype of the gathered rows), ``kind`` (for messages).
    """

    num_rows: int
    trailing: Tuple[int, ...]
    dtype: torch.dtype
    kind: str

    @property
    def shape(self) -> Tuple[int, ...]:
        """``(num_rows, *trailing)``, as a tensor's ``shape``."""
        return (self.num_rows,) + tuple(self.trailing)

    def gather(self, idx: Tensor) -> Tensor:
        """The rows ``idx`` (1-d int64) as a new ``[len(idx), *trailing]`` tensor."""
        raise NotImplementedError

    def __getitem__(self, idx: Tensor) -> Tensor:
        return self.gather(torch.as_tensor(idx).long().view(-1))


class NumpyRows(RowSource):
    """An ``np.ndarray`` or ``np.memmap``: ``np.take`` of the requested rows only (a
    memmap reads the pages of those rows, never the whole file). A memmap pickles as
    its file name, dtype, shape and offset (reopened read-only), not as its data, so
    worker processes share the file instead of a copy."""

    def __init__(self, array: np.ndarray):
        self.array = array
        self.num_rows = int(array.shape[0])
        self.trailing = tuple(int(s) for s in array.shape[1:])
        self.dtype = torch.from_numpy(np.empty(0, dtype=array.dtype.newbyteorder("="))).dtype
        self.kind = type(array).__name__

    def gather(self, idx: Tensor) -> Tensor:
        picked = np.take(self.array, idx.numpy(), axis=0)
        # a native-order, writable, plain ndarray: torch.from_numpy takes it as it is
        picked = np.ascontiguousarray(picked, dtype=picked.dtype.newbyteorder("="))
        return torch.from_numpy(np.asarray(picked))

    def __getstate__(self) -> Dict[str, Any]:
        a = self.array
        state = dict(self.__dict__)
        if isinstance(a, np.memmap) and a.filename is not None:
            state["array"] = None
            state["_memmap"] = (str(a.filename), a.dtype.str, tuple(a.shape), int(a.offset),
                                "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C")
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        spec = state.pop("_memmap", None)
        self.__dict__.update(state)
        if spec is not None:
            path, dtype, shape, offset, order = spec
            self.array = np.memmap(path, dtype=np.dtype(dtype), mode="r", shape=shape,
                                   offset=offset, order=order)


class StoreRows(RowSource):
    """One column of a PyG ``FeatureStore`` (``group_name``, ``attr_name``); gathered by
    :func:`gather_rows` in one ``multi_get_tensor`` call per store and batch."""

    def __init__(self, store: Any, group_name: Any, attr_name: str, num_rows: int,
                 trailing: Tuple[int, ...], dtype: torch.dtype):
        self.store, self.group_name, self.attr_name = store, group_name, attr_name
        self.num_rows, self.trailing, self.dtype = int(num_rows), tuple(trailing), dtype
        self.kind = f"{type(store).__name__} column ({group_name!r}, {attr_name!r})"

    def attr(self, idx: Tensor) -> Any:
        """The ``TensorAttr`` of rows ``idx``."""
        from torch_geometric.data import TensorAttr

        return TensorAttr(self.group_name, self.attr_name, idx)

    def gather(self, idx: Tensor) -> Tensor:
        return _as_tensor(self.store.get_tensor(self.attr(idx)), self)


def _as_tensor(value: Any, rows: "StoreRows") -> Tensor:
    """A feature store's answer as a tensor (a store may answer with numpy)."""
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(np.ascontiguousarray(value))
    if not isinstance(value, Tensor):
        raise FeatureStoreError(f"{rows.kind}: the feature store returned a "
                                f"{type(value).__name__}; a FeatureStore returns a tensor or "
                                f"a numpy array")
    return value


def rows_of(value: Any) -> Optional[AttrValue]:
    """``value`` as something :func:`gather_rows` gathers: a dense tensor as it is, a
    numpy array (memmap too) of a dtype torch has as :class:`NumpyRows`; ``None``
    where no batch can hold it (a string, a list, a sparse tensor, an object array)."""
    if isinstance(value, RowSource):
        return value
    if isinstance(value, Tensor):
        return value if value.layout == torch.strided and value.dim() > 0 else None
    if isinstance(value, np.ndarray) and value.ndim > 0:
        try:
            return NumpyRows(value)
        except TypeError:  # object, string, ... dtypes: torch has none
            return None
    return None


def whole_rows(value: Any) -> Tensor:
    """Every row of ``value`` as a tensor (a column read whole: a time or a weight, one
    value per node or edge, is what the sampler needs at once); ``value`` itself
    where it is no row source (a list, a scalar: the caller checks its shape)."""
    r = rows_of(value)
    if r is None or isinstance(r, Tensor):
        return torch.as_tensor(value)
    return r.gather(torch.arange(int(r.shape[0])))


def _gather_into(v: Tensor, idx: Tensor, rows: int) -> Tensor:
    """``v[idx]`` in the first rows of a new ``[rows, ...]`` tensor, zeros after:
    gathered by ``index_select`` straight into place (``v[idx]`` then a copy was
    19x slower for ``x`` [25k rows of 32], csr.take) and only the padding rows
    zeroed."""
    t = v.new_empty((rows,) + tuple(v.shape[1:]))
    torch.index_select(v, 0, idx, out=t[:idx.numel()])
    t[idx.numel():].zero_()
    return t


def _padded(got: Tensor, src: RowSource, rows: int) -> Tensor:
    n = int(got.shape[0])
    t = torch.zeros((rows,) + tuple(src.trailing), dtype=src.dtype)
    if n:
        t[:n] = got.to(src.dtype).view((n,) + tuple(src.trailing))
    return t


def gather_rows(attrs: Mapping[str, AttrValue], idx: Tensor,
                rows: Optional[int] = None) -> Dict[str, Tensor]:
    """Each attribute's rows ``idx``: ``[len(idx), ...]`` tensors, or, with ``rows``,
    ``[rows, ...]`` with zeros after the gathered rows (a batch's padding rows).

    Tensors gather with ``index_select``, numpy arrays with ``np.take``; the
    columns of one ``FeatureStore`` in one ``multi_get_tensor`` call (its
    ``TensorAttr.index`` is ``idx``, nothing else is asked of the store; no call
    at all when ``idx`` is empty).
    """
    idx = idx.long()
    out: Dict[str, Tensor] = {}
    by_store: Dict[int, List[Tuple[str, StoreRows]]] = {}
    for k, v in attrs.items():
        if isinstance(v, Tensor):
            out[k] = _gather_into(v, idx, idx.numel() if rows is None else rows)
        elif isinstance(v, StoreRows):
            by_store.setdefault(id(v.store), []).append((k, v))
        else:
            got = v.gather(idx) if idx.numel() else torch.zeros((0,) + v.trailing, dtype=v.dtype)
            out[k] = got if rows is None else _padded(got, v, rows)
    for cols in by_store.values():
        if idx.numel():
            store = cols[0][1].store
            got = store.multi_get_tensor([v.attr(idx) for _, v in cols])
            got = [_as_tensor(g, v) for g, (_, v) in zip(got, cols)]
        else:
            got = [torch.zeros((0,) + v.trailing, dtype=v.dtype) for _, v in cols]
        for (k, v), g in zip(cols, got):
            if int(g.shape[0]) != idx.numel():
                raise FeatureStoreError(f"{v.kind}: asked for {idx.numel()} rows, the store "
                                        f"returned {int(g.shape[0])}")
            out[k] = g.to(v.dtype) if rows is None else _padded(g, v, rows)
    return {k: out[k] for k in attrs}


# ------------------------------------------------------------------- the excluded keys
def check_reserved(k: str, node: Any, edge: Any, where: str) -> None:
    """Raise :class:`ReservedAttributeError` for an attribute ``where + k`` that takes a
    key the batches own; PyG's ``n_id`` / ``e_id`` override passes (one int a row)."""
    own = {N_ID: ("node", node), E_ID: ("edge", edge)}
    if k in own:
        level, v = own[k]
        if v is None:
            got = f"not {level}-level"
        elif len(v.shape) != 1 or v.dtype.is_floating_point or v.dtype == torch.bool:
            got = f"shape {list(v.shape)}, {v.dtype}"
        else:
            return  # PyG's override: gathered into the batch's own key
        raise ReservedAttributeError(
            f"the graph has an attribute {where}{k!r} that is not one integer per {level} "
            f"({got}): a batch's {k!r} holds the sampled {level}s' ids or, as in PyG's "
            f"loaders, the graph's own {k!r} gathered by row; rename it (e.g. "
            f"data.orig_{k} = data.{k}; del data.{k})")
    if k in RESERVED_KEYS or k in SAMPLED_KEYS:
        raise ReservedAttributeError(
            f"the graph has an attribute {where}{k!r}, a name the padded batches own "
            f"(reserved: {RESERVED_KEYS + SAMPLED_KEYS}); rename it")


def describe(value: Any) -> str:
    """A value's type for a message: ``ndarray[object]``, ``SparseTensor``, ``str``."""
    if isinstance(value, np.ndarray):
        return f"{type(value).__name__}[{value.dtype}]"
    if isinstance(value, Tensor) and value.layout != torch.strided:
        return f"Tensor[{str(value.layout).replace('torch.', '')}]"
    return type(value).__name__


def warn_excluded(owner: str, excluded: Mapping[str, str], stacklevel: int = 3) -> None:
    """One :class:`ExcludedAttributeWarning` naming every excluded key with why (the
    loader's ``excluded_keys``), and how to keep one or silence the warning."""
    if not excluded:
        return
    listed = "; ".join(f"{k!r}: {why}" for k, why in excluded.items())
    warnings.warn(
        f"{owner} leaves {len(excluded)} graph attribute(s) out of every batch ({listed}). "
        f"To keep one, give it as a tensor or numpy array with one row per node or per edge "
        f"(torch.as_tensor(value)); to leave them out on purpose, delete them from the graph "
        f"or filter graph_adapter.sampling.ExcludedAttributeWarning. loader.excluded_keys "
        f"lists them", ExcludedAttributeWarning, stacklevel=stacklevel)


# ------------------------------------------------------------------- the graph's edges
@dataclass
class GraphInput:
    """What a homogeneous loader samples from, whatever the input was.

    ``edge_index`` [2, E]: ``[source, destination]`` in the input's own edge order
    (``e_id`` of a batch is a position in it: ``data.edge_index``'s column, the
    sparse tensor's stored entry, the graph store's stored edge); ``num_nodes``;
    ``node`` / ``edge``: the gatherable node- and edge-level attributes;
    ``excluded``: the rest, each with why; ``structure``: where the edges came from.
    """

    num_nodes: int
    edge_index: Tensor
    node: Dict[str, AttrValue] = field(default_factory=dict)
    edge: Dict[str, AttrValue] = field(default_factory=dict)
    excluded: Dict[str, str] = field(default_factory=dict)
    structure: str = "edge_index"
    #: the input's own int64 source tensor equal to ``edge_index[0]`` where there is one
    #: (a graph store's COO / CSC row): the CSC keeps it instead of a copy
    src: Optional[Tensor] = None

    def csc(self) -> CSC:
        """The CSC the loader samples (its ``src`` a view of the input's own sources
        where it has them, so a store's edges are not held twice)."""
        csc = CSC.from_edge_index(self.edge_index, self.num_nodes)
        if self.src is not None:
            csc.src = self.src
        return csc

    def structure_data(self) -> Any:
        """A ``Data`` holding the edges and node count only (PyG's own sampler's input)."""
        from torch_geometric.data import Data

        return Data(edge_index=self.edge_index, num_nodes=self.num_nodes)


def is_store_pair(data: Any) -> bool:
    """Whether ``data`` is PyG's remote-backend input: ``(FeatureStore, GraphStore)``."""
    if not (isinstance(data, (tuple, list)) and len(data) == 2):
        return False
    from torch_geometric.data import FeatureStore, GraphStore

    return isinstance(data[0], FeatureStore) and isinstance(data[1], GraphStore)


def is_hetero_store_pair(data: Any) -> bool:
    """Whether ``data`` is a store pair whose graph store holds typed edges (what PyG's
    loaders sample as ``HeteroData``)."""
    return is_store_pair(data) and any(
        a.edge_type is not None for a in data[1].get_all_edge_attrs())


def _ptr2index(ptr: Tensor) -> Tensor:
    ptr = ptr.long()
    return torch.repeat_interleave(torch.arange(ptr.numel() - 1), ptr[1:] - ptr[:-1])


def sparse_edge_index(adj: Any, transposed: bool, key: str) -> Tensor:
    """``[source, destination]`` of a sparse adjacency, in its stored entry order.

    ``adj``: torch-sparse's ``SparseTensor`` or a torch sparse COO / CSR tensor;
    ``transposed``: PyG's ``adj_t`` (rows are destinations) rather than ``adj``.
    """
    if hasattr(adj, "storage") and hasattr(adj, "csr"):  # torch_sparse.SparseTensor
        row, col = adj.storage.row(), adj.storage.col()
    elif isinstance(adj, Tensor) and adj.layout == torch.sparse_csr:
        row, col = _ptr2index(adj.crow_indices()), adj.col_indices().long()
    elif isinstance(adj, Tensor) and adj.layout == torch.sparse_coo:
        row, col = adj.coalesce().indices().long()
    else:
        raise GraphStructureError(
            f"the graph's {key!r} is a {describe(adj)}; a loader reads a torch_sparse "
            f"SparseTensor or a torch sparse COO / CSR tensor there, or an edge_index [2, E]")
    return torch.stack([col, row]) if transposed else torch.stack([row, col])


def _data_edges(data: Any, owner: str) -> Tuple[Tensor, str]:
    """A ``Data``'s edges as PyG's sampler reads them (``to_csc``): ``adj``, else
    ``adj_t``, else ``edge_index``, else none (every batch its seeds only, warned)."""
    for key, transposed in (("adj", False), ("adj_t", True)):
        if key in data:
            return sparse_edge_index(data[key], transposed, key), key
    ei = data["edge_index"] if "edge_index" in data else None
    if ei is None:
        warnings.warn(f"{owner}: the graph has no edges (no edge_index, adj or adj_t): every "
                      f"batch holds its seeds only, as PyG's NeighborLoader samples such a "
                      f"graph; give data.edge_index [2, E] to sample neighbours", stacklevel=4)
        return torch.zeros(2, 0, dtype=torch.long), "none"
    if not isinstance(ei, Tensor):
        ei = torch.as_tensor(np.asarray(ei))
    return ei, "edge_index"


def _num_nodes(data: Any, owner: str) -> int:
    n = data.num_nodes
    if n is None:
        raise GraphStructureError(
            f"{owner}: the graph's node count is unknown (no edges, no node-level attribute, "
            f"no num_nodes): set data.num_nodes")
    return int(n)


def _data_attributes(data: Any, graph: GraphInput, skip: Tuple[str, ...]) -> None:
    """Sort ``data``'s attributes into ``graph.node`` / ``graph.edge`` / ``graph.excluded``."""
    num_edges = int(graph.edge_index.size(1))
    for k, v in data.items():
        if k in skip:
            continue
        r = rows_of(v)
        if r is None:
            graph.excluded[k] = f"a {describe(v)}: not a tensor or numpy array of rows"
        elif k == E_ID and r.shape[0] == num_edges:  # by its name where the counts tie
            graph.edge[k] = r
        elif r.shape[0] == graph.num_nodes and (k == N_ID or data.is_node_attr(k)):
            graph.node[k] = r
        elif r.shape[0] == num_edges and data.is_edge_attr(k):
            graph.edge[k] = r
        else:
            graph.excluded[k] = (f"a {describe(v)} of shape {list(r.shape)}: graph-level "
                                 f"(neither one row per node nor one per edge)")


def graph_input(data: Any, owner: str) -> GraphInput:
    """What a homogeneous loader samples from ``data`` (a ``Data`` or a
    ``(FeatureStore, GraphStore)`` pair), attributes sorted, nothing gathered yet.

    Raises:
        GraphStructureError: no node count, or a sparse adjacency of a kind not read.
        FeatureStoreError: a store pair without edges, hetero, or with too few rows.
    """
    if is_store_pair(data):
        return store_input(data[0], data[1], owner)
    num_nodes = _num_nodes(data, owner)
    edge_index, structure = _data_edges(data, owner)
    graph = GraphInput(num_nodes, edge_index, structure=structure)
    _data_attributes(data, graph, ("edge_index", "adj", "adj_t", "num_nodes"))
    return graph


def input_edge_index(data: Any, owner: str = "the loader") -> Tensor:
    """``[source, destination]`` of a homogeneous loader's input, whatever it is: a
    ``Data``'s ``edge_index`` (itself), its ``adj`` / ``adj_t`` in stored order, a
    graph store's stored edges; what a loader reads where it would read
    ``data.edge_index`` (default supervision edges, METIS)."""
    if is_store_pair(data):
        edge_attrs = list(data[1].get_all_edge_attrs())
        if not edge_attrs:
            raise FeatureStoreError(f"{owner}: the graph store holds no edges")
        return _stored_edges(data[1], edge_attrs[0])[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the no-edge warning: the loader's own gave it
        return _data_edges(data, owner)[0]


# ------------------------------------------------------------------- PyG's remote backend
def _stored_edges(graph_store: Any, attr: Any) -> Tuple[Tensor, Optional[Tensor]]:
    """One stored edge attr's ``[source, destination]`` in its stored order, and the
    store's own source tensor where it is one (int64, 1-d: COO and CSC layouts)."""
    row, col = graph_store.get_edge_index(attr)
    layout = getattr(attr.layout, "value", attr.layout)
    if layout == "csr":
        row = _ptr2index(row)
    elif layout == "csc":
        col = _ptr2index(col)
    row, col = torch.as_tensor(row), torch.as_tensor(col)
    own = row if row.dtype == torch.long and row.dim() == 1 and layout != "csr" else None
    return torch.stack([row.long(), col.long()]), own


def _store_column(feature_store: Any, attr: Any, num_nodes: int, owner: str) -> StoreRows:
    """A ``StoreRows`` of one feature-store column: its size asked, one row read (the dtype)."""
    from torch_geometric.data import TensorAttr

    size = feature_store.get_tensor_size(TensorAttr(attr.group_name, attr.attr_name, None))
    if size is None or len(size) == 0:
        raise FeatureStoreError(f"{owner}: the feature store has no size for column "
                                f"({attr.group_name!r}, {attr.attr_name!r})")
    if int(size[0]) < num_nodes:
        raise FeatureStoreError(
            f"{owner}: feature-store column ({attr.group_name!r}, {attr.attr_name!r}) has "
            f"{int(size[0])} rows; the graph store's graph has {num_nodes} nodes: give one "
            f"row per node")
    probe = feature_store.get_tensor(TensorAttr(attr.group_name, attr.attr_name,
                                                torch.zeros(1, dtype=torch.long)))
    probe = probe if isinstance(probe, Tensor) else torch.as_tensor(np.asarray(probe))
    return StoreRows(feature_store, attr.group_name, attr.attr_name, int(size[0]),
                     tuple(int(s) for s in size[1:]), probe.dtype)


def store_input(feature_store: Any, graph_store: Any, owner: str) -> GraphInput:
    """A homogeneous ``(FeatureStore, GraphStore)``: the graph store's edges (the first
    stored edge attr, as PyG's sampler takes it; COO, CSR or CSC), ``num_nodes`` the
    larger of its ``size`` (PyG's), else the feature store's rows; every column of
    group ``None`` a node attribute read by index (never whole)."""
    from torch_geometric.data import TensorAttr

    edge_attrs = list(graph_store.get_all_edge_attrs())
    if not edge_attrs:
        raise FeatureStoreError(f"{owner}: the graph store holds no edges: put an edge index "
                                f"(graph_store.put_edge_index(..., layout='coo'))")
    if any(a.edge_type is not None for a in edge_attrs):
        raise FeatureStoreError(
            f"{owner}: the graph store holds typed edges "
            f"{sorted({str(a.edge_type) for a in edge_attrs})}: a heterogeneous store; use "
            f"FixedSizeHeteroNeighborLoader for it (this loader reads edge_type=None)")
    first = edge_attrs[0]
    edge_index, own_src = _stored_edges(graph_store, first)
    columns = list(feature_store.get_all_tensor_attrs())
    if first.size is not None:
        num_nodes = int(max(first.size))
    elif columns:
        num_nodes = int(feature_store.get_tensor_size(
            TensorAttr(columns[0].group_name, columns[0].attr_name, None))[0])
    else:
        raise FeatureStoreError(f"{owner}: the node count is unknown: give the graph store's "
                                f"edges a size=(num_nodes, num_nodes)")
    graph = GraphInput(num_nodes, edge_index, structure=f"graph store ({first.layout})",
                       src=own_src)
    if edge_index.numel() and int(edge_index.max()) >= num_nodes:
        raise FeatureStoreError(f"{owner}: the graph store's edges reach node "
                                f"{int(edge_index.max())}; its size says {num_nodes} nodes")
    for attr in columns:
        if attr.group_name is not None:
            graph.excluded[key_of(str(attr.group_name), attr.attr_name)] = (
                "a feature-store column of a named group: the homogeneous loader reads "
                "group_name=None")
            continue
        graph.node[attr.attr_name] = _store_column(feature_store, attr, num_nodes, owner)
    return graph


def _type_sizes(edge_attrs: List[Any]) -> Dict[str, int]:
    """Node counts per node type from the graph store's edge sizes (PyG's
    ``remote_backend_utils``: the first size naming the type)."""
    sizes: Dict[str, int] = {}
    for a in edge_attrs:
        if a.size is not None:
            sizes.setdefault(a.edge_type[0], int(a.size[0]))
            sizes.setdefault(a.edge_type[-1], int(a.size[-1]))
    return sizes


def hetero_store_view(feature_store: Any, graph_store: Any, owner: str) -> Any:
    """A heterogeneous ``(FeatureStore, GraphStore)`` as a ``HeteroData`` the hetero
    loader samples: each edge type's ``edge_index`` from the graph store (stored
    order: ``e_id`` is a stored position), each node type's ``num_nodes`` (the
    store's edge sizes, else its columns' rows), each feature-store column as a
    :class:`StoreRows` (read by row per batch, never whole): node types' columns
    by ``n_id``, an edge type's (one row per stored edge) by ``e_id``.

    Raises:
        FeatureStoreError: an untyped (homogeneous) graph store, no edges, or a node
            type whose count is unknown.
    """
    from torch_geometric.data import HeteroData, TensorAttr

    edge_attrs = list(graph_store.get_all_edge_attrs())
    if not edge_attrs or any(a.edge_type is None for a in edge_attrs):
        raise FeatureStoreError(f"{owner}: the graph store holds "
                                f"{'no edges' if not edge_attrs else 'untyped edges'}: the "
                                f"hetero loader reads edges put with edge_type=(src, rel, dst)")
    columns = list(feature_store.get_all_tensor_attrs())
    sizes = _type_sizes(edge_attrs)
    for c in columns:
        if isinstance(c.group_name, str) and c.group_name not in sizes:
            size = feature_store.get_tensor_size(TensorAttr(c.group_name, c.attr_name, None))
            sizes[c.group_name] = int(size[0])
    h = HeteroData()
    for t, n in sizes.items():  # node stores first: a relation named like a node type
        h.get_node_store(t).num_nodes = n  # (("user", "user", "user")) then reads as it
    for a in edge_attrs:
        for t in (a.edge_type[0], a.edge_type[-1]):
            if t not in sizes:
                raise FeatureStoreError(
                    f"{owner}: node type {t!r} of edge type {a.edge_type} has an unknown "
                    f"count: put its edges with size=(num_src, num_dst) or a column of it")
        et = tuple(a.edge_type)
        if "edge_index" not in h[et]:  # the first stored layout of a type, as PyG's
            h[et].edge_index = _stored_edges(graph_store, a)[0]
    for c in columns:
        group = tuple(c.group_name) if isinstance(c.group_name, (tuple, list)) else c.group_name
        need = int(h[group].num_edges) if isinstance(group, tuple) else sizes.get(group)
        if need is None:  # a group None column beside typed edges: no node type to read it
            raise FeatureStoreError(f"{owner}: feature-store column ({c.group_name!r}, "
                                    f"{c.attr_name!r}) names no node or edge type of the graph "
                                    f"store {sorted(sizes)}")
        h[group][c.attr_name] = _store_column(feature_store, c, need, owner)
    return h
