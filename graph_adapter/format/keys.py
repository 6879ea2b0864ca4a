"""The flat dict's keys on the torch side: masks by level, devices, the loss.

Every rule of the padded format (reserved keys, key naming, levels, padding,
the micro-batch dim, the signature, the errors) lives in
:mod:`graph_adapter.contract`, which needs no torch; this module re-exports the
key names and adds the helpers that read tensors. Everything here traces under
``torch.compile(fullgraph=True)``.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from torch import Tensor

from .. import contract as _contract
from ..contract import (ALL_RESERVED_KEYS, BATCH, DST_NEG_INDEX, DST_POS_INDEX, E_ID, EDGE_LABEL,
                        EDGE_LABEL_INDEX, EDGE_MASK, EDGE_TYPE_SEP, ELL_IN, ELL_OUT, GRAPH_MASK,
                        IN_SOURCES, INPUT_ID, LAYOUT_KEYS, LEVEL_OF_MASK, LEVELS, LINK_KEYS,
                        LINK_MASK, LOSS_KEY, MASK_OF_LEVEL, MASKS, N_ID, NODE_MASK, OUTPUT_KEY,
                        PTR, RESERVED_KEYS, RESERVED_NODES, SAMPLED_KEYS, SEED_MASK, SEED_OF, SEP,
                        SPILL_IN, SPILL_OUT, SRC_INDEX, Dim, StoreKey, attr_of, cat_dim_of,
                        is_hetero, is_index_attr, is_layout_key, key_of, level_of_rows,
                        levels_of_rows, mask_key, parse_key, pick_level, store_name,
                        HOP_EDGES, HOP_KEYS, HOP_NODES, hop_budgets, hop_shape)

__all__ = [n for n in _contract.__all__ if n in globals()] + [
    "masks_by_level", "mask_of_rows", "to_device", "loss_of",
]


# --------------------------------------------------------------------------
# Masks by level
# --------------------------------------------------------------------------
def masks_by_level(flat: Mapping[str, Tensor]) -> Dict[str, List[Tensor]]:
    """The masks of a flat dict by level, in key order:
    ``{"node": [...], "edge": [...], "graph": [...]}`` (hetero: one per node/edge type)."""
    out: Dict[str, List[Tensor]] = {lv: [] for lv in MASK_OF_LEVEL}
    for k, v in flat.items():
        lv = LEVEL_OF_MASK.get(parse_key(k)[1])
        if lv is not None:
            out[lv].append(v)
    return out


def mask_of_rows(rows: int, masks: Mapping[str, Sequence[Tensor]], name: str = ""
                 ) -> Tuple[Optional[Tensor], Tuple[str, ...]]:
    """The mask of a tensor with ``rows`` rows, and every level whose mask matched.

    ``masks`` is :func:`masks_by_level`'s; a mask matches when its last dim is
    ``rows``; the level is picked as :func:`pick_level` does (``None`` when no
    mask matches).
    """
    found: Dict[str, Tensor] = {}
    for lv, ms in masks.items():
        for m in ms:
            if m.size(-1) == rows:
                found.setdefault(lv, m)
                break
    candidates = tuple(lv for lv in ("node", "edge", "graph") if lv in found)
    lv = pick_level(candidates, name)
    return (None if lv is None else found[lv]), candidates


def to_device(flat: Mapping[str, Tensor], device: Any) -> Dict[str, Tensor]:
    """Every tensor of ``flat`` on ``device``, copied with ``non_blocking=True``.

    From pinned host memory (``FixedSizeLoader(..., pin_memory=True)``) the
    copies to a GPU then overlap with the work already queued there; from
    ordinary memory ``non_blocking`` changes nothing (the copy is synchronous).
    Keys, dtypes and shapes are unchanged, so a compiled model sees the same
    signature on every batch. A value that is not a tensor is named.
    """
    out: Dict[str, Tensor] = {}
    for k, v in flat.items():
        if not isinstance(v, Tensor):
            raise TypeError(f"to_device: key {k!r} is a {type(v).__qualname__}, not a tensor; "
                            f"a flat dict holds tensors only")
        out[k] = v.to(device, non_blocking=True)
    return out


# --------------------------------------------------------------------------
# The loss in a wrapped model's outputs
# --------------------------------------------------------------------------
def loss_of(out: Any, loss_key: str = LOSS_KEY, required: bool = True) -> Optional[Tensor]:
    """The loss a model returned: ``out`` itself if it is a tensor, else ``out[loss_key]``.

    Raises ``TypeError`` (or returns ``None`` when ``required=False``) if
    there is none, saying how to add one.
    """
    if isinstance(out, Tensor):
        return out
    if isinstance(out, Mapping) and loss_key in out:
        return out[loss_key]
    if not required:
        return None
    keys = sorted(out) if isinstance(out, Mapping) else None
    raise TypeError(
        f"training needs a loss: the model must return a tensor or a dict with key {loss_key!r} "
        f"(ipu_wrap(model, loss_fn=...) adds one); got {type(out).__name__}"
        + (f" with keys {keys}" if keys is not None else "")
    )
