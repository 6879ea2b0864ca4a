"""The level (node, edge, graph, other) of one attribute of a PyG object, for
:func:`graph_adapter.format.spec.flatten`."""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import Batch, HeteroData
from torch_geometric.data.data import BaseData

from .pyg import collate_info, store_mapping
from .errors import UnsupportedAttributeError
from .keys import BATCH, MASK_OF_LEVEL, PTR, StoreKey, key_of, pick_level

__all__ = ["level_of_attr"]


def _readable(t: Tensor, key: str) -> bool:
    """True; raises a named error for a tensor whose values cannot be read (meta device)."""
    if t.device.type == "meta":
        raise UnsupportedAttributeError(
            f"key {key!r} is on the meta device: flatten() reads a batch's per-graph sizes to tell "
            f"node from graph attributes. Flatten the batch on a real device, or name every "
            f"key's level with flatten(obj, levels={{...}}).")
    return True


# Our own keys have a level by name.
_NAMED_LEVELS = {BATCH: "node", PTR: "other", **{m: lv for lv, m in MASK_OF_LEVEL.items()}}


def level_of_attr(obj: BaseData, skey: StoreKey, store, attr: str, value: Tensor) -> str:
    """Node, edge, graph or other: by name for our own keys, else from the data.

    In a batch, the per-graph slices decide (one row per graph -> graph, as
    many rows as the graph has nodes -> node); PyG's own ``is_node_attr`` /
    ``is_edge_attr`` break the remaining ties. Genuinely ambiguous cases
    (every graph has one node) follow PyG; ``flatten(levels=...)`` overrides.
    """
    if attr in _NAMED_LEVELS:
        return _NAMED_LEVELS[attr]
    if value.dim() == 0:
        return "graph"
    is_global = isinstance(obj, HeteroData) and not skey
    if isinstance(obj, Batch):
        all_slices = collate_info(obj)[0]
        slices = all_slices.get(skey[0] if len(skey) == 1 else skey, {}) if skey else all_slices
        if attr in slices:
            counts = torch.diff(slices[attr])
            candidates = []
            if bool((counts == 1).all()):
                candidates.append("graph")
            ptr = store_mapping(store).get(PTR) if not is_global and len(skey) != 3 else None
            nodes = torch.diff(ptr.cpu()) if ptr is not None and _readable(
                ptr, key_of(skey, PTR)) else None
            if nodes is None and BATCH in slices and not is_global and len(skey) != 3:
                # a batch of batches has no ptr of its own: the inner ``batch``
                # vectors (one row per node) count each graph's nodes
                nodes = torch.diff(slices[BATCH])
                ptr = nodes
            if nodes is not None and torch.equal(counts, nodes):
                candidates.append("node")
            if not is_global and len(skey) != 1 and "edge_index" in slices:
                if torch.equal(counts, torch.diff(slices["edge_index"])):
                    candidates.append("edge")
            # Ties, as PyG breaks them (format.pick_level). A store without
            # ``ptr`` (PyG's pairs recipe, follow_batch) falls through to
            # PyG's own node/edge heuristics.
            if ptr is not None or candidates:
                return pick_level(candidates, attr) or "other"
    if not is_global:
        if store.is_node_attr(attr):
            return "node"
        if store.is_edge_attr(attr):
            return "edge"
    num_graphs = obj.num_graphs if isinstance(obj, Batch) else 1
    cat = obj.__cat_dim__(attr, value, store)
    if cat is not None and value.size(cat) == num_graphs:
        return "graph"
    return "other"
