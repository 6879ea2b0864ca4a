"""The PyG internals graph_adapter reads or writes, one named helper each.

PyG's ``Data`` / ``HeteroData`` / ``Batch`` keep their tensors in storage
objects and a collated batch's bookkeeping in private attributes. The package
needs a few of them: to read a store's attributes without the property layer
(faster, and traceable by Dynamo), to give a rebuilt batch the metadata that
``Batch.to_data_list()`` reads, and to read an ``InMemoryDataset`` column-wise.
Every such access is here, so a PyG release that renames one breaks one
function (the tests of ``tests/format/test_pyg.py`` pin each to PyG's behaviour).
Nothing else in the package touches a PyG private attribute.

All of these are plain attribute reads and writes: they trace under
``torch.compile(fullgraph=True)`` when called inside a forward.
"""
from __future__ import annotations

from typing import Any, Dict, List, MutableMapping, Optional, Tuple

from torch_geometric.data import HeteroData

__all__ = ["global_store", "store_mapping", "collate_info", "set_collate_info",
           "set_num_graphs", "graph_num_nodes", "set_graph_num_nodes", "typed_stores", "in_memory_data",
           "dataset_indices", "made_from", "set_made_from"]


def global_store(obj: Any) -> Any:
    """The store of a graph's un-typed attributes: ``Data``'s only store, ``HeteroData``'s
    global one (PyG: ``_store`` / ``_global_store``)."""
    return obj._global_store if isinstance(obj, HeteroData) else obj._store


def store_mapping(store: Any) -> MutableMapping[str, Any]:
    """A store's ``{attribute: value}`` dict itself (PyG: ``_mapping``): reads and writes
    skip the store's property layer."""
    return store._mapping


def collate_info(batch: Any) -> Tuple[Optional[Dict[str, Any]], Optional[Dict[str, Any]]]:
    """``(slice_dict, inc_dict)`` of a collated ``Batch`` (``None`` where it has none: a
    batch not made by ``Batch.from_data_list``); what ``to_data_list()`` reads."""
    return getattr(batch, "_slice_dict", None), getattr(batch, "_inc_dict", None)


def set_collate_info(batch: Any, slice_dict: Any, inc_dict: Any) -> None:
    """Give a rebuilt ``Batch`` the collate metadata :func:`collate_info` reads."""
    batch._slice_dict = slice_dict
    batch._inc_dict = inc_dict


def set_num_graphs(batch: Any, num_graphs: int) -> None:
    """Give a rebuilt ``Batch`` its graph count (what ``num_graphs`` returns first;
    PyG: ``_num_graphs``)."""
    batch._num_graphs = num_graphs


def graph_num_nodes(store: Any) -> Optional[List[int]]:
    """A collated store's per-graph ``num_nodes`` list where PyG kept one (graphs that set
    ``num_nodes`` explicitly), else ``None`` (PyG: ``_num_nodes``)."""
    return store.__dict__.get("_num_nodes")


def set_graph_num_nodes(store: Any, values: List[int]) -> None:
    """Set what :func:`graph_num_nodes` reads."""
    store._num_nodes = values


def made_from(obj: Any) -> Optional[Any]:
    """The ``Spec`` :func:`set_made_from` left on a rebuilt batch, else ``None``."""
    return obj.__dict__.get("_graph_adapter_spec")


def set_made_from(batch: Any, spec: Any) -> None:
    """Leave ``spec`` on a batch rebuilt from it, in the object's own ``__dict__``:
    ``Data.__setattr__`` would put it in the store, among the graph's attributes."""
    batch.__dict__["_graph_adapter_spec"] = spec


def typed_stores(data: Any) -> Tuple[Dict[str, Any], Dict[Tuple[str, str, str], Any]]:
    """``(node stores by type, edge stores by type)`` of a ``HeteroData``, without the
    copies its public ``node_stores`` / ``edge_stores`` lists make."""
    return data._node_store_dict, data._edge_store_dict


def in_memory_data(dataset: Any) -> Any:
    """The one collated ``Data`` an ``InMemoryDataset`` holds (each attribute is every
    graph's rows concatenated; PyG: ``_data``), ``None`` for other datasets."""
    return getattr(dataset, "_data", None)


def dataset_indices(dataset: Any) -> Optional[Any]:
    """The index a sliced / shuffled dataset view reads through, or ``None`` for the
    whole dataset in order (PyG: ``_indices``; ``dataset.indices()`` makes a range)."""
    return dataset._indices
