"""The padded flat-dict format: the one home of its rules.

Every module that reads or writes a flat dict (``docs/dev/FORMAT.md`` is the
prose version of this module) asks this one: how keys are named, which keys
are reserved, which level (node, edge, graph) a row count belongs to, whether
a dict is heterogeneous, whether it carries a leading micro-batch dim, and
where the loss is in a wrapped model's outputs.  Pure functions over keys and
static shapes: everything here traces under ``torch.compile(fullgraph=True)``.

Conventions, in one place:

* homogeneous key: the attribute name (``x``); hetero key:
  ``"<store>/<attr>"`` where ``<store>`` is a node type or PyG's
  ``src__rel__dst`` edge-type string; global-store attributes keep a bare name;
* reserved keys: ``batch`` and ``ptr`` (per node type in hetero dicts) and the
  masks ``node_mask`` [N], ``edge_mask`` [E], ``graph_mask`` [G] (True = real);
* a padded batch keeps at least two padding nodes of every node type
  (:data:`RESERVED_NODES`; the static ``remove_self_loops`` needs two to
  leave no loop) and one padding graph slot, ``G - 1``;
* a micro-batch dim is a new leading dim ``F`` on every tensor; a dict has one
  iff ``graph_mask.dim() == 2``;
* a wrapped model's outputs live under ``"output"`` (``"output/..."`` for
  nested ones) and its loss under ``"loss"``.
"""
from __future__ import annotations

from typing import Any, Collection, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import Tensor

__all__ = [
    "SEP", "EDGE_TYPE_SEP", "LEVELS", "StoreKey", "Dim",
    "BATCH", "PTR", "NODE_MASK", "EDGE_MASK", "GRAPH_MASK", "MASKS", "MASK_OF_LEVEL",
    "LEVEL_OF_MASK",
    "RESERVED_KEYS", "RESERVED_NODES",
    "ELL_IN", "ELL_OUT", "SPILL_IN", "SPILL_OUT", "IN_SOURCES", "LAYOUT_KEYS",
    "N_ID", "E_ID", "SEED_MASK", "SEED_OF", "SAMPLED_KEYS",
    "EDGE_LABEL_INDEX", "EDGE_LABEL", "INPUT_ID", "LINK_MASK", "SRC_INDEX", "DST_POS_INDEX",
    "DST_NEG_INDEX", "LINK_KEYS", "ALL_RESERVED_KEYS",
    "OUTPUT_KEY", "LOSS_KEY",
    "key_of", "parse_key", "store_name", "cat_dim_of", "is_index_attr", "is_hetero", "mask_key",
    "levels_of_rows", "pick_level", "level_of_rows", "masks_by_level", "mask_of_rows",
    "to_device", "loss_of",
]

#: Padding nodes every batch keeps (per node type): ``Budget.nodes`` includes
#: them, so at most ``nodes - RESERVED_NODES`` real nodes fit.
RESERVED_NODES = 2

#: Separator between store and attribute in hetero keys (``paper/x``).
SEP = "/"
#: PyG's own separator inside an edge type string (``author__writes__paper``).
EDGE_TYPE_SEP = "__"
#: The levels a key can have.
LEVELS = ("node", "edge", "graph", "other")

StoreKey = Tuple[str, ...]  # () global, (node_type,), (src, rel, dst)
#: A size dim: ``(level, store)`` with level ``"node"`` or ``"edge"``.
Dim = Tuple[str, StoreKey]

BATCH = "batch"
PTR = "ptr"
NODE_MASK = "node_mask"
EDGE_MASK = "edge_mask"
GRAPH_MASK = "graph_mask"
#: The three masks, True on real rows.
MASKS = (NODE_MASK, EDGE_MASK, GRAPH_MASK)
MASK_OF_LEVEL = {"node": NODE_MASK, "edge": EDGE_MASK, "graph": GRAPH_MASK}
#: The level each mask marks (the inverse of ``MASK_OF_LEVEL``).
LEVEL_OF_MASK = {m: lv for lv, m in MASK_OF_LEVEL.items()}
#: Attribute names the padded format owns; a dataset may not use them.
RESERVED_KEYS = (BATCH, PTR, NODE_MASK, EDGE_MASK, GRAPH_MASK)
#: Optional static aggregation layout (``layout="ell"``): ``[N, Din]`` ids of
#: each node's real in-edges and ``[N, Dout]`` of its real out-edges, padded
#: with ``E`` (see graph_adapter/batching/_layout.py). Homogeneous batches only.
ELL_IN = "in_slots"
ELL_OUT = "out_slots"
#: ``layout="hyb"``: the same tables, narrower, plus ``[2, K]`` lists of the
#: edges past a node's width (row 0 edge id, row 1 its node; padding ``(E, N - 1)``).
SPILL_IN = "in_spill"
SPILL_OUT = "out_spill"
#: ``FixedSizeNeighborLoader(layout="sources")``: ``[R, D]`` the source nodes of each of
#: the first ``R`` rows' real in-edges, padded with ``N``; rows from ``R`` on have no
#: in-edges (in a sampled batch only the nodes of the hops before the last have any).
IN_SOURCES = "in_sources"
LAYOUT_KEYS = (ELL_IN, ELL_OUT, SPILL_IN, SPILL_OUT, IN_SOURCES)

#: Keys the neighbour-family loaders add to a sampled batch (``FixedSizeNeighborLoader``
#: and the loaders built on it): each node's and edge's id in the large graph
#: (``-1`` on padding), True on the seed nodes, and each node's seed (disjoint sampling).
N_ID = "n_id"
E_ID = "e_id"
SEED_MASK = "seed_mask"
SEED_OF = "seed_of"
SAMPLED_KEYS = (N_ID, E_ID, SEED_MASK, SEED_OF)
#: Keys of ``FixedSizeLinkNeighborLoader``'s supervision slots: ``[2, L]`` node ids
#: of the supervised links, their ``[L]`` labels, each link's id in the input and
#: ``[L]`` True on real links; ``neg_sampling="triplet"``: the ``[S]`` sources,
#: their positive and ``[S, k]`` negative destinations.
EDGE_LABEL_INDEX = "edge_label_index"
EDGE_LABEL = "edge_label"
INPUT_ID = "input_id"
LINK_MASK = "link_mask"
SRC_INDEX = "src_index"
DST_POS_INDEX = "dst_pos_index"
DST_NEG_INDEX = "dst_neg_index"
LINK_KEYS = (EDGE_LABEL_INDEX, EDGE_LABEL, INPUT_ID, LINK_MASK, SRC_INDEX, DST_POS_INDEX,
             DST_NEG_INDEX)
#: Every key the format or its loaders own; a graph attribute may not use any of them.
ALL_RESERVED_KEYS = RESERVED_KEYS + LAYOUT_KEYS + SAMPLED_KEYS + LINK_KEYS

#: Where a wrapped model's output and loss live in its output dict.
OUTPUT_KEY = "output"
LOSS_KEY = "loss"


# --------------------------------------------------------------------------
# Keys
# --------------------------------------------------------------------------
def store_name(store: StoreKey) -> str:
    """``()`` -> ``""``, ``("paper",)`` -> ``"paper"``, ``("a", "r", "b")`` -> ``"a__r__b"``."""
    return EDGE_TYPE_SEP.join(store)


def key_of(store: StoreKey, attr: str) -> str:
    """The flat key of attribute ``attr`` of store ``store``.

    ``store`` is ``()`` for a homogeneous graph or the global store of a hetero
    graph, ``(node_type,)`` or ``(src, rel, dst)``.
    """
    if not store:
        return attr
    return store_name(store) + SEP + attr


def parse_key(key: str) -> Tuple[StoreKey, str]:
    """Inverse of :func:`key_of`: ``"a__r__b/edge_index"`` -> ``(("a","r","b"), "edge_index")``."""
    if SEP not in key:
        return (), key
    store, attr = key.rsplit(SEP, 1)
    return tuple(store.split(EDGE_TYPE_SEP)), attr


def cat_dim_of(attr: str) -> int:
    """The dim PyG concatenates ``attr`` along when it batches graphs: the last
    for ``edge_index``, ``edge_mask`` and every ``*index`` attribute, else 0."""
    return -1 if attr in ("edge_index", EDGE_MASK) or attr.endswith("index") else 0


def is_index_attr(attr: str) -> bool:
    """Whether PyG's ``Data.__inc__`` increments ``attr`` by the node count when it
    batches graphs (``edge_index``, ``face`` and every attribute with ``index`` in its
    name), so that its values are node ids of the batch."""
    return "index" in attr or attr == "face"


def is_hetero(keys: Collection[str]) -> bool:
    """Whether the keys of a flat dict (or the dict itself) are those of a hetero graph."""
    return any(SEP in k for k in keys)


def mask_key(store: StoreKey, level: str) -> str:
    """The key of the mask of ``level`` rows of ``store`` (``graph_mask`` is always global)."""
    if level == "graph":
        return GRAPH_MASK
    return key_of(store, MASK_OF_LEVEL[level])


# --------------------------------------------------------------------------
# The level of a row count
# --------------------------------------------------------------------------
def levels_of_rows(rows: int, sizes: Mapping[str, Optional[int]]) -> Tuple[str, ...]:
    """Every level whose row count is ``rows``, in the order node, edge, graph.

    ``sizes`` maps a level to its row count (``{"node": N, "edge": E,
    "graph": G}``; missing or ``None`` levels never match).
    """
    return tuple(lv for lv in ("node", "edge", "graph") if sizes.get(lv) == rows)


def pick_level(candidates: Collection[str], name: str = "") -> Optional[str]:
    """One level out of several that match, as PyG breaks the tie.

    An attribute whose name contains ``"edge"`` is edge-level when edges
    match; otherwise node before graph before edge. ``None`` if nothing matches.
    """
    if "edge" in candidates and ("edge" in name or len(candidates) == 1):
        return "edge"
    for lv in ("node", "graph", "edge"):
        if lv in candidates:
            return lv
    return None


def level_of_rows(rows: int, sizes: Mapping[str, Optional[int]], name: str = "") -> Optional[str]:
    """The level of a tensor with ``rows`` rows: :func:`pick_level` of :func:`levels_of_rows`."""
    return pick_level(levels_of_rows(rows, sizes), name)


def masks_by_level(flat: Mapping[str, Tensor]) -> Dict[str, List[Tensor]]:
    """The masks of a flat dict by level, in key order:
    ``{"node": [...], "edge": [...], "graph": [...]}`` (hetero: one per node/edge type)."""
    level_of_mask = {m: lv for lv, m in MASK_OF_LEVEL.items()}
    out: Dict[str, List[Tensor]] = {lv: [] for lv in MASK_OF_LEVEL}
    for k, v in flat.items():
        lv = level_of_mask.get(parse_key(k)[1])
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
