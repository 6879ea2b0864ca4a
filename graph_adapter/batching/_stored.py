"""A PyG ``InMemoryDataset`` read straight from its concatenated storage.

An ``InMemoryDataset`` keeps every graph in one collated ``Data``
(``dataset._data``: each attribute is the graphs' tensors concatenated along
their cat dim, index keys *not* incremented) plus ``dataset.slices``
(``{key: [num_graphs + 1]}`` row offsets along the cat dim).  Reading it graph
by graph costs PyG's ``separate`` per graph (~100 us); this module reads the
per-graph sizes as ``numpy.diff`` of the slices and hands the storage tensors
themselves to the scan as its columns (a view, no copy), which is exactly
what the graph-by-graph scan would have concatenated.

The fast path is taken only where it is provably the same: a homogeneous
``InMemoryDataset`` whose items are PyG's own ``get`` (no ``transform``, no
overridden ``get`` / ``__getitem__``), whose attributes are plain tensors or
non-tensors with a slice entry per tensor.  Anything else (a list, a lazily
loading ``Dataset``, ``transform=``, ``HeteroData``) is read graph by graph.
"""
from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional

import numpy as np
import torch
from torch import Tensor

from ..format.pyg import dataset_indices, global_store, graph_num_nodes, in_memory_data

__all__ = ["Stored", "stored_of", "stored_sizes"]

#: PyG's keys that reveal a graph's node count, looked up first (``storage.N_KEYS``).
_N_KEYS = ("x", "feat", "pos", "batch", "node_type", "n_id")


class Stored(NamedTuple):
    """The concatenated storage of an ``InMemoryDataset``.

    ``data``: the collated ``Data``; ``slices``: ``{key: int64 numpy [M + 1]}``
    over the ``M`` stored graphs; ``indices``: the stored graph of each dataset
    index (``None``: the identity, dataset index ``i`` is stored graph ``i``).
    """

    data: Any
    slices: Dict[str, np.ndarray]
    indices: Optional[np.ndarray]

    def counts(self, key: str) -> np.ndarray:
        """Rows of ``key`` of every dataset graph along its cat dim, ``[n]``."""
        c = np.diff(self.slices[key])
        return c if self.indices is None else c[self.indices]

    def column(self, key: str, cat: int) -> Tensor:
        """Every dataset graph's rows of ``key``, cat dim first, graph after graph.

        The whole dataset: the storage tensor itself (cat dim 0) or a
        transposed view of it (no copy; e.g. ``edge_index`` ``[2, E]`` ->
        ``[E, 2]``).  A subset (``dataset[idx]``, ``shuffle()``): one gather
        of the selected graphs' rows."""
        v = global_store(self.data)[key]
        if v.dim() == 0:  # never stored so; kept for safety
            v = v.reshape(1)
        col = v if cat % max(v.dim(), 1) == 0 else v.movedim(cat, 0)
        if self.indices is None:
            return col
        s = self.slices[key]
        start, cnt = s[:-1][self.indices], np.diff(s)[self.indices]
        rows = np.repeat(start - (np.cumsum(cnt) - cnt), cnt) + np.arange(int(cnt.sum()))
        return col.index_select(0, torch.from_numpy(rows))


def stored_of(dataset: Any) -> Optional[Stored]:
    """The storage of ``dataset`` when its graphs can be read from it, else ``None``."""
    try:
        from torch_geometric.data import Data, HeteroData, InMemoryDataset
        from torch_geometric.data.dataset import Dataset
    except ImportError:  # pragma: no cover
        return None
    if not isinstance(dataset, InMemoryDataset) or dataset.transform is not None:
        return None
    cls = type(dataset)
    if cls.get is not InMemoryDataset.get or cls.__getitem__ is not Dataset.__getitem__:
        return None  # items are not PyG's own slices of the storage
    data, slices = in_memory_data(dataset), dataset.slices
    if type(data) is HeteroData or not isinstance(data, Data) or not isinstance(slices, dict):
        return None
    if type(data).__inc__ is not Data.__inc__:
        return None  # custom increments: read graph by graph (they are per graph)
    out: Dict[str, np.ndarray] = {}
    for k, v in global_store(data).items():
        if isinstance(v, Tensor):
            s = slices.get(k)
            if type(v) is not Tensor or not isinstance(s, Tensor) or v.layout != torch.strided:
                return None  # EdgeIndex, sparse, nested slices: the slow path knows them
            out[k] = s.numpy().astype(np.int64, copy=False)
    if not out or len({len(s) for s in out.values()}) != 1:
        return None
    m = len(next(iter(out.values()))) - 1
    idx = None if dataset_indices(dataset) is None else np.asarray(dataset.indices(), dtype=np.int64)
    if idx is not None and np.array_equal(idx, np.arange(m)):
        idx = None
    if len(dataset) < 2 or (idx is None and m != len(dataset)):
        return None  # PyG's get copies the whole storage for a single graph
    return Stored(data, out, idx)


def _node_counts(st: Stored) -> Optional[np.ndarray]:
    """Every graph's ``num_nodes`` as PyG's ``Data.num_nodes`` infers it from
    a separated graph: the stored ``num_nodes`` first, then the first
    ``N_KEYS`` attribute, then the first attribute named ``*node*``."""
    store = global_store(st.data)
    if graph_num_nodes(store) is not None:
        c = np.asarray(graph_num_nodes(store), dtype=np.int64)
        return c if st.indices is None else c[st.indices]
    for test in (lambda k: k in _N_KEYS, lambda k: "node" in k):
        for k, v in store.items():
            if isinstance(v, Tensor) and test(k) and k in st.slices:
                return st.counts(k)
    return None


def stored_sizes(st: Stored) -> Optional[np.ndarray]:
    """``[n, 2]`` (nodes, edges) of every graph, or ``None`` where the storage
    does not say (no node attribute, no ``edge_index``)."""
    nodes = _node_counts(st)
    if nodes is None or "edge_index" not in st.slices:
        return None
    return np.stack([nodes, st.counts("edge_index")], axis=1)
