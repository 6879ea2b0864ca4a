"""``infer_spec``: a static spec for a padded flat dict that :func:`~graph_adapter.spec.flatten`
did not make (re-exported by :mod:`graph_adapter.spec`)."""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Tuple

from torch import Tensor
from torch_geometric.data import Data, HeteroData

from .format import MASK_OF_LEVEL, PTR, StoreKey, is_hetero, levels_of_rows, parse_key, pick_level
from .spec import Field, Spec, class_path

__all__ = ["infer_spec"]


def infer_spec(
    flat: Mapping[str, Tensor], data_cls: Optional[type] = None, is_batch: bool = True
) -> Spec:
    """A static spec for a flat dict that :func:`flatten` did not make.

    This is how a fixed-size batch from ``FixedSizeLoader`` (keys per
    ``docs/flat_dict.md``, masks included) is rebuilt without a stored spec:
    keys with ``/`` are hetero stores, the class defaults to ``Data`` or
    ``HeteroData`` (batched). Shapes are taken as they are (all static).
    Levels follow the masks: a key whose size along PyG's cat dim equals its
    store's ``node_mask`` (``edge_mask``, the global ``graph_mask``) length is
    a node (edge, graph) key; ``ptr`` and the rest are ``other``.

    Pure Python over keys and static shapes, so it traces.
    """
    parsed = {k: parse_key(k) for k in flat}
    if data_cls is None:
        data_cls = HeteroData if is_hetero(flat) else Data
    mask_rows: Dict[Tuple[StoreKey, str], int] = {}
    for key, (store, attr) in parsed.items():
        if attr in _MASK_LEVEL:
            mask_rows[(store, _MASK_LEVEL[attr])] = flat[key].size(0)
    fields = []
    for key in sorted(flat, key=lambda k: _order(parsed[k])):
        store, attr = parsed[key]
        t = flat[key]
        cat = -1 if attr in ("edge_index", "edge_mask") or attr.endswith("index") else 0
        level = _MASK_LEVEL.get(attr, "other")
        if level == "other" and t.dim() and attr != PTR:
            level = pick_level(levels_of_rows(t.size(cat), _store_sizes(store, mask_rows)), attr) \
                or "other"
        fields.append(Field(key, store, attr, str(t.dtype).replace("torch.", ""), tuple(t.shape), level))
    node_types = sorted({s[0] for s, _ in parsed.values() if len(s) == 1})
    edge_types = sorted({s for s, _ in parsed.values() if len(s) == 3})
    return Spec(class_path(data_cls), is_batch, tuple(fields), tuple(node_types), tuple(edge_types))


_MASK_LEVEL = {m: lv for lv, m in MASK_OF_LEVEL.items()}


def _store_sizes(store: StoreKey, mask_rows: Mapping[Tuple[StoreKey, str], int]) -> Dict[str, int]:
    """The row counts a key of ``store`` can match: its node rows (not in an
    edge store), its edge rows (not in a node store), the graph rows (global
    store only)."""
    sizes = {}
    if len(store) != 3 and (store, "node") in mask_rows:
        sizes["node"] = mask_rows[(store, "node")]
    if len(store) != 1 and (store, "edge") in mask_rows:
        sizes["edge"] = mask_rows[(store, "edge")]
    if not store and ((), "graph") in mask_rows:
        sizes["graph"] = mask_rows[((), "graph")]
    return sizes


def _order(parsed: Tuple[StoreKey, str]) -> Tuple[int, StoreKey, str]:
    store, attr = parsed
    kind = {1: 0, 3: 1}.get(len(store), 2)
    return kind, store, attr
