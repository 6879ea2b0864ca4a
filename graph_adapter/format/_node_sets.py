"""Several node sets in one store, as PyG's ``__inc__`` defines them (its
"advanced mini-batching" ``PairData``: ``x_s`` / ``edge_index_s`` and ``x_t`` /
``edge_index_t``), for :func:`graph_adapter.format.spec.flatten`.

An index key whose ``__inc__`` is not the store's node count (``edge_index`` and
``face`` always are) increments by the size of another node set: that set's
per-graph sizes are the key's increments, and the keys with those row counts
belong to it. A set is named by its first feature key (``x_s``); where sizes
tie, keys that share the last ``_`` token with it (``_s``) win.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data
from torch_geometric.data.data import BaseData

from .keys import BATCH, EDGE_MASK, NODE_MASK, PTR, is_index_attr
from .pyg import collate_info, global_store, store_mapping

__all__ = ["extra_sets", "node_sets", "Where", "set_key", "set_masks", "PAIR_SEP"]

#: ``(level, nodes, edges)``: a key's level and the node / edge set it belongs to.
Where = Tuple[str, str, str]

_MAIN_INDEX = ("edge_index", "face")


def _tag(name: str) -> str:
    return name.rsplit("_", 1)[1] if "_" in name else ""


def _affine(a: str, b: str) -> bool:
    return _tag(a) != "" and _tag(a) == _tag(b)


def _int_inc(obj: BaseData, attr: str, value: Tensor) -> Optional[int]:
    try:
        inc = obj.__inc__(attr, value)
    except Exception:  # a custom __inc__ that needs other arguments: no set read
        return None
    if isinstance(inc, Tensor):
        return int(inc) if inc.numel() == 1 else None
    return int(inc) if isinstance(inc, int) else None


def _pair_inc(obj: BaseData, attr: str, value: Tensor) -> Optional[Tuple[int, int]]:
    """``(source, destination)`` increments of an index whose ``__inc__`` is a tensor of
    two (PyG's bipartite ``[[x_s.size(0)], [x_t.size(0)]]``), else ``None``."""
    try:
        inc = obj.__inc__(attr, value)
    except Exception:  # a custom __inc__ that needs other arguments: no set read
        return None
    if isinstance(inc, Tensor) and inc.numel() == 2 and not inc.is_floating_point():
        a, b = inc.reshape(-1).tolist()
        return int(a), int(b)
    return None


#: Joins the source and destination sets of a bipartite index in ``Field.nodes``.
PAIR_SEP = ","


def _bipartite(k: str, totals: Tuple[int, int], inc: Optional[Tensor], feats, same,
               out: Dict[str, Where]) -> None:
    """Record bipartite index ``k``: row 0 points into the node set whose per-graph sizes
    are its first increments, row 1 into the second's (``Field.nodes`` ``"x_s,x_t"``;
    ``""`` for a row into the store's own nodes, ``x`` / ``pos``: ``",x_t"``); its
    edges are the store's own (``edge_attr``, ``edge_mask``). Where two sets have one
    size series, the rows take them in name order (``x_s``, ``x_t``). Both rows into
    the store's own nodes make no set (PyG's default increment, in tensor form)."""
    inc = torch.zeros(1, 2, dtype=torch.long) if inc is None else inc.reshape(inc.shape[0], -1).long()
    if inc.shape[-1] != 2:
        return
    names: List[str] = []
    own = [a for a in feats if a in _OWN_NODE_KEYS]
    for r in range(2):
        series = torch.diff(torch.cat([inc[:, r], torch.tensor([totals[r]])]))
        owners = [a for a in feats if same(a, series) and "edge" not in a
                  and a not in _OWN_NODE_KEYS]
        pick = [a for a in owners if a not in names] or owners
        if not pick:
            if own and same(own[0], series):
                names.append("")  # a row into the store's own nodes
                continue
            return  # a row into no set: nothing read
        names.append(pick[0])
        for a in owners:
            if a == pick[0] or (_affine(a, pick[0]) and a not in names):
                out.setdefault(a, ("node", pick[0], ""))
    if any(names):
        out[k] = ("edge", PAIR_SEP.join(names), "")


#: The keys PyG reads a store's own node count off (``N_KEYS``): never a set of their own.
_OWN_NODE_KEYS = ("x", "pos", "feat", "node_type", "n_id", "tf")


def _follow(attr: str, tensors: Dict[str, Tensor]) -> Optional[str]:
    """The key a ``follow_batch`` vector (``x_s_batch``, ``x_s_ptr``) was made for."""
    for suffix in ("_batch", "_" + PTR):
        if attr.endswith(suffix) and attr[:-len(suffix)] in tensors:
            return attr[:-len(suffix)]
    return None


def extra_sets(obj: BaseData) -> Dict[str, Where]:
    """``{attr: (level, nodes, edges)}`` of the global store's keys that belong to a node
    set other than the store's own (empty when there is none: every key as before)."""
    if type(obj).__inc__ is Data.__inc__:
        return {}  # PyG's own increments: every index key counts the store's nodes
    store = global_store(obj)
    tensors = {a: v for a, v in store_mapping(store).items()
               if isinstance(v, Tensor) and v.dim() > 0}
    is_batch = isinstance(obj, Batch)
    slices, incs = collate_info(obj) if is_batch else (None, None)

    def counts(a: str) -> Optional[Tensor]:
        if is_batch:
            return torch.diff(slices[a]) if a in slices else None
        return torch.tensor([tensors[a].size(obj.__cat_dim__(a, tensors[a]))])

    def same(a: str, series: Tensor) -> bool:
        c = counts(a)
        return c is not None and c.shape == series.shape and bool(torch.equal(c, series))

    feats = sorted(a for a in tensors if not is_index_attr(a) and a != BATCH
                   and _follow(a, tensors) is None)
    out: Dict[str, Where] = {}
    for k in sorted(tensors):
        v = tensors[k]
        if not is_index_attr(k) or v.is_floating_point() or \
                v.dtype == torch.bool or _follow(k, tensors) is not None:
            continue
        pair = _pair_inc(obj, k, v)
        if pair is not None:  # PyG's bipartite [[num_src], [num_dst]] increment
            _bipartite(k, pair, incs.get(k) if is_batch else None, feats, same, out)
            continue
        if k in _MAIN_INDEX:
            continue
        total = _int_inc(obj, k, v)
        if not total:
            continue
        inc = incs.get(k) if is_batch else torch.zeros(1, dtype=torch.long)
        if inc is None:
            continue
        series = torch.diff(torch.cat([inc.reshape(-1).long(), torch.tensor([total])]))
        edge_rows = counts(k)
        owners = [a for a in feats if same(a, series)]
        # the set's name: a key of its own tag, not one named for edges (PyG's tie
        # rule: a name with "edge" in it is edge-level where edges match too)
        owners.sort(key=lambda a: (not _affine(a, k), "edge" in a))
        if not owners or not _affine(owners[0], k):
            continue  # no feature key of its own: read as the store's own nodes
        name = owners[0]
        for a in owners:
            if "edge" in a and a != name and same(a, edge_rows):
                continue  # edge_attr_s with as many rows as nodes and edges: an edge key
            if _affine(a, name) or a == name:
                out.setdefault(a, ("node", name, ""))
        # a tie of its rows with the set's size goes to edges for an "edge" name
        # (format.pick_level, as PyG breaks it)
        node_level = same(k, series) and "edge" not in k
        out[k] = ("node", name, "") if node_level else ("edge", name, k)
        for a in feats:  # the edge set's features (edge_attr_s)
            if a not in out and _affine(a, k) and same(a, edge_rows):
                out[a] = ("edge", "", k)
    for a in tensors:
        base = _follow(a, tensors)
        if base is not None and base in out:
            out[a] = out[base] if a.endswith("_batch") else ("other", "", "")
    return out


def node_sets(obj: BaseData) -> Dict[str, Where]:
    """``{attr: (level, nodes, edges)}`` of the keys of a homogeneous ``Data`` / ``Batch``
    that belong to a node or edge set of their own (PyG's ``PairData``: ``x_s``,
    ``edge_index_s``...), as :func:`~graph_adapter.format.flatten` records them in
    ``Field.nodes`` / ``Field.edges``; ``{}`` for a graph with one node set."""
    return extra_sets(obj)


def set_key(name: str, reserved: str) -> str:
    """The key of a reserved key (``batch``, ``ptr``, ``node_mask``, ``edge_mask``) of a
    node or edge set of its own in a padded batch: ``<set>_<reserved>`` (``x_s_batch``,
    ``x_s_ptr``, ``x_s_node_mask``, ``edge_index_s_edge_mask``), the names PyG's
    ``follow_batch=[set]`` gives the batch vector and ``ptr``."""
    return f"{name}_{reserved}"


def set_masks(flat: Mapping[str, Tensor]) -> Dict[str, List[Tuple[str, str]]]:
    """``{"node": [(mask key, set)], "edge": [...]}``: the masks of the node and edge sets
    of their own in a padded homogeneous batch (keys only, no value read: it traces).
    A ``<set>_node_mask`` counts where ``<set>``, ``<set>_batch`` and ``<set>_ptr`` are
    keys too, an ``<edge set>_edge_mask`` where ``<edge set>`` is, so that a dataset
    attribute that merely ends like a mask (``train_node_mask``) is never one."""
    out: Dict[str, List[Tuple[str, str]]] = {"node": [], "edge": []}
    for k in flat:
        for level, mask, needs in (("node", NODE_MASK, (BATCH, PTR)), ("edge", EDGE_MASK, ())):
            tail = "_" + mask
            if k.endswith(tail) and len(k) > len(tail):
                name = k[:-len(tail)]
                if name in flat and all(set_key(name, r) in flat for r in needs):
                    out[level].append((k, name))
    return out
