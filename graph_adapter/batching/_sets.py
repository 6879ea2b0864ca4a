"""Several node sets in one homogeneous store (PyG's ``PairData``) as size dims.

:func:`graph_adapter.format.node_sets` reads the sets off a graph's custom
``__inc__`` (``x_s`` / ``edge_index_s`` and ``x_t`` / ``edge_index_t``); here
each node set and each edge set becomes one size dim of the padded batch,
with its own budget count and its own reserved keys, as a node or edge type
of a hetero graph has:

* size dims ``("node", (set,))`` and ``("edge", (edge set,))`` (a set is named
  by its first feature key, ``x_s``; an edge set by its index key,
  ``edge_index_s``), beside the store's own ``("node", ())`` / ``("edge", ())``
  where the graphs have their own nodes (PyG's ``can_infer_num_nodes``: ``x``,
  ``pos``, ``num_nodes``...) or an own ``edge_index``;
* the budget is a dict per set, as a hetero one is per type:
  ``Budget(nodes={"x_s": 40, "x_t": 36}, edges={"edge_index_s": 70,
  "edge_index_t": 60}, graphs=9)``, ``""`` naming the store's own nodes /
  edges where it has them; ``Budget.fit`` / ``Budget.tight`` size every set;
* reserved keys of a set: ``<set>_batch`` ``[N_s]``, ``<set>_ptr`` ``[G + 1]``
  (the vectors PyG's ``follow_batch=[set]`` makes) and ``<set>_node_mask``
  ``[N_s]``; of an edge set, ``<edge set>_edge_mask`` ``[E_s]``
  (:func:`graph_adapter.format.set_key`).
"""
from __future__ import annotations

import warnings
from typing import Any, Collection, Dict, List, Optional, Sequence, Tuple

from torch import Tensor
from torch_geometric.data import Batch, Data

from ..format import (BATCH, EDGE_MASK, NODE_MASK, PTR, Dim, node_sets, set_key)
from ..format.pyg import global_store, store_mapping

__all__ = ["NodeSets", "node_sets_of", "SAMPLE"]

#: The first graphs of a dataset whose PyG ``Batch`` names its node sets.
SAMPLE = 32


class NodeSets:
    """The node and edge sets of a dataset's homogeneous store (read off graph 0).

    ``where``: ``{attr: (level, node set, edge set)}`` of the keys in a set of
    their own (:func:`graph_adapter.format.node_sets`, less ``exclude``);
    ``nodes`` / ``edges``: the budget names of the node and edge sets, sorted
    (``""``: the store's own, where it has them).
    """

    def __init__(self, where: Dict[str, Tuple[str, str, str]], own_nodes: bool,
                 own_edges: bool):
        self.where = where
        self.nodes: Tuple[str, ...] = tuple(sorted(
            {w[1] for w in where.values() if w[0] == "node" and w[1]} | ({""} if own_nodes else set())))
        self.edges: Tuple[str, ...] = tuple(sorted(
            {w[2] for w in where.values() if w[0] == "edge" and w[2]} | ({""} if own_edges else set())))

    def dims(self) -> List[Dim]:
        """The size dims, in the budget's order (node sets, then edge sets, by name)."""
        return [("node", (n,) if n else ()) for n in self.nodes] + \
            [("edge", (e,) if e else ()) for e in self.edges]

    def sets(self) -> List[str]:
        """The node sets of their own (not the store's), for messages."""
        return [n for n in self.nodes if n]

    def reserved(self) -> Tuple[str, ...]:
        """The keys the padded format adds for every set (the store's own included)."""
        out: List[str] = []
        for level, store in self.dims():
            if level == "node":
                out += [BATCH, PTR, NODE_MASK] if not store else \
                    [set_key(store[0], BATCH), set_key(store[0], PTR), set_key(store[0], NODE_MASK)]
            else:
                out += [EDGE_MASK] if not store else [set_key(store[0], EDGE_MASK)]
        return tuple(out)

    def count(self, d: Any, dim: Dim) -> int:
        """Graph ``d``'s rows of one size dim: the set's named key along its cat dim
        (the store's own: PyG's ``num_nodes``, the columns of ``edge_index``)."""
        level, store = dim
        if not store:
            if level == "node":
                return d.num_nodes or 0
            ei = store_mapping(global_store(d)).get("edge_index")
            return ei.shape[-1] if isinstance(ei, Tensor) else 0
        v = store_mapping(global_store(d))[store[0]]
        return v.size(d.__cat_dim__(store[0], v)) if v.dim() else 1


def node_sets_of(first: Any, exclude: Collection[str] = (),
                 sample: Sequence[Any] = ()) -> Optional[NodeSets]:
    """The :class:`NodeSets` of graph ``first`` (a homogeneous ``Data``), or ``None``
    when it has one node set (every plain ``Data``: PyG's own ``__inc__``).

    ``sample``: the dataset's first graphs (``first`` among them), read as PyG's
    ``Batch`` of them: one graph alone cannot tell a set's keys from another
    count that happens to equal its size there (one node and one edge), the
    per-graph sizes of several mostly can."""
    if type(first).__inc__ is Data.__inc__:
        return None
    where = _where(first, sample)
    where = {a: w for a, w in where.items() if a not in exclude}
    if not any(w[1] or w[2] for w in where.values()):
        return None
    mapping = store_mapping(global_store(first))
    own_edges = isinstance(mapping.get("edge_index"), Tensor) and "edge_index" not in exclude
    # PyG's collate makes a batch vector only for a store whose num_nodes it can infer
    # (its can_infer_num_nodes: x, pos, num_nodes, edge_index, a 'node' key...); here
    # from the keys outside the sets (PairData and a bipartite edge_index have none)
    own = [k for k in mapping if k not in where and k not in exclude]
    own_nodes = bool(set(own) & _NUM_NODE_KEYS) or any("node" in k for k in own)
    return NodeSets(where, own_nodes, own_edges)


#: Keys from which PyG infers a store's own node count (``can_infer_num_nodes``).
_NUM_NODE_KEYS = {"num_nodes", "x", "pos", "batch", "adj", "adj_t", "edge_index", "face"}


def _where(first: Any, sample: Sequence[Any]) -> Dict[str, Tuple[str, str, str]]:
    """:func:`graph_adapter.format.node_sets` of a ``Batch`` of ``sample`` (of ``first``
    alone where there is no sample, or PyG cannot batch it)."""
    if len(sample) > 1:
        try:
            with warnings.catch_warnings():
                # PyG cannot infer a PairData's num_nodes: it says so while batching,
                # which this probe must not add to what the user sees
                warnings.simplefilter("ignore", UserWarning)
                return node_sets(Batch.from_data_list(list(sample)))
        except Exception:  # graphs that PyG itself cannot batch: graph 0 decides
            pass
    return node_sets(first)
