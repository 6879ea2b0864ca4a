"""The flat dict's contract: every rule of the padded format, in one module.

A graph-capture compiler sees a batch of graphs as a *flat dict*: a mapping from
string keys to tensors, with the same keys, dtypes and shapes on every call.
Everything that writes or reads one (the collate and the samplers on the host,
the wrapped forward, the compile core, the exporter, the serving runtime) follows
the rules written here, and imports their names from here. This module needs
neither torch nor numpy (the serving runtime of an ONNX artifact runs without
torch): values are read through ``.shape`` / ``.dtype`` / ``.device`` only.

The rules (``docs/flat_dict.md`` is the user's guide, ``docs/dev/FORMAT.md`` the
prose version):

Keys
    A homogeneous graph's attribute keeps its name (``x``). In a hetero dict the
    key is ``"<store>/<attr>"``: ``<store>`` is a node type (``paper/x``) or PyG's
    edge-type string ``src__rel__dst`` (``author__writes__paper/edge_index``);
    attributes of the global store keep a bare name (:func:`key_of`,
    :func:`parse_key`).
Reserved keys
    ``batch`` and ``ptr`` (per node type in a hetero dict) and the masks
    ``node_mask`` [N], ``edge_mask`` [E], ``graph_mask`` [G] (True on real rows)
    belong to the format (:data:`RESERVED_KEYS`); the optional layout tables, the
    samplers' ids and the link loaders' supervision slots are reserved too
    (:data:`ALL_RESERVED_KEYS`). A graph attribute may use none of them.
Levels
    Every tensor is node-, edge- or graph-level (or ``other``) by the dim PyG
    concatenates it along (:func:`cat_dim_of`) and the budget its row count
    matches (:func:`level_of_rows`).
Padding
    A batch has a budget of ``N`` nodes, ``E`` edges and ``G`` graph slots (per
    node and edge type in a hetero batch). Real rows come first, in the order
    PyG's ``Batch.from_data_list`` lays them out. At least
    :data:`RESERVED_NODES` padding nodes and one padding graph slot are always
    left (:func:`fits`); the padding nodes fill the padding slots one each, the
    rest in the last slot ``G - 1`` (:func:`slot_counts`); padding edges are
    self-loops on the last node ``N - 1`` (:func:`padding_node`); padding
    features are zero, padding graph-level float rows NaN (:func:`pad_value`).
Micro-batches
    A dict for poptorch or gradient accumulation carries a leading dim ``F`` on
    every tensor; it has one iff ``graph_mask`` is 2-D (:func:`has_micro_batch_dim`).
Outputs
    A wrapped model returns its outputs under ``"output"`` (``"output/..."`` for
    nested ones) and its loss under ``"loss"``.
Signature
    What a compiled program is specialised to: each key's dtype, shape and device
    (:class:`Signature`); a batch with another signature needs another program.
Errors
    Every failure of a flat dict against these rules is a :class:`SpecError`
    naming its key (and graph, where there is one) and saying what to do.
"""
from __future__ import annotations

from typing import (Any, Collection, Dict, Iterator, List, Mapping, NamedTuple, Optional,
                    Sequence, Tuple, Union)

__all__ = [
    # keys
    "SEP", "EDGE_TYPE_SEP", "LEVELS", "StoreKey", "Dim",
    "BATCH", "PTR", "NODE_MASK", "EDGE_MASK", "GRAPH_MASK", "MASKS", "MASK_OF_LEVEL",
    "LEVEL_OF_MASK", "RESERVED_KEYS",
    "ELL_IN", "ELL_OUT", "SPILL_IN", "SPILL_OUT", "IN_SOURCES", "LAYOUT_KEYS",
    "N_ID", "E_ID", "SEED_MASK", "SEED_OF", "SAMPLED_KEYS",
    "EDGE_LABEL_INDEX", "EDGE_LABEL", "INPUT_ID", "LINK_MASK", "SRC_INDEX", "DST_POS_INDEX",
    "DST_NEG_INDEX", "EDGE_LABEL_TIME", "SEED_TIME", "LINK_KEYS", "HOP_NODES", "HOP_EDGES",
    "HOP_KEYS", "hop_shape", "hop_budgets", "ALL_RESERVED_KEYS", "OUTPUT_KEY", "LOSS_KEY",
    "key_of", "parse_key", "store_name", "attr_of", "cat_dim_of", "is_index_attr", "is_hetero",
    "mask_key", "is_layout_key",
    # levels
    "levels_of_rows", "pick_level", "level_of_rows",
    # padding
    "RESERVED_NODES", "fits", "misfit", "max_graph_nodes", "slot_counts", "padding_node", "pad_value",
    # micro-batches
    "has_micro_batch_dim",
    # signature
    "TensorSignature", "Signature", "dtype_name",
    # errors
    "SpecError", "MissingKeyError", "UnexpectedKeyError", "DtypeMismatchError",
    "ShapeMismatchError", "UnsupportedAttributeError", "DeviceMismatchError",
    "BatchMismatchError", "SpecFormatError", "ClassNotAllowedError", "InputValueError",
    "ShapeChangedError",
]


# ==========================================================================
# Keys
# ==========================================================================
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

#: Optional static aggregation layout (``layout="ell"``): ``[N, Din]`` ids of each
#: node's real in-edges and ``[N, Dout]`` of its real out-edges, padded with ``E``.
#: Homogeneous batches only.
ELL_IN = "in_slots"
ELL_OUT = "out_slots"
#: ``layout="hyb"``: the same tables, narrower, plus ``[2, K]`` lists of the edges
#: past a node's width (row 0 edge id, row 1 its node; padding ``(E, N - 1)``).
SPILL_IN = "in_spill"
SPILL_OUT = "out_spill"
#: ``layout="sources"`` (sampled batches): ``[R, D]`` the source nodes of each of the
#: first ``R`` rows' real in-edges, padded with ``N``; rows from ``R`` on have no
#: in-edges (in a sampled batch only the nodes of the hops before the last have any).
IN_SOURCES = "in_sources"
LAYOUT_KEYS = (ELL_IN, ELL_OUT, SPILL_IN, SPILL_OUT, IN_SOURCES)

#: Keys the neighbour-family loaders add to a sampled batch: each node's and edge's
#: id in the large graph (``-1`` on padding), True on the seed nodes, and each node's
#: seed (disjoint sampling).
N_ID = "n_id"
E_ID = "e_id"
SEED_MASK = "seed_mask"
SEED_OF = "seed_of"
SAMPLED_KEYS = (N_ID, E_ID, SEED_MASK, SEED_OF)
#: Keys of the link loaders' supervision slots: ``[2, L]`` node ids of the supervised
#: links, their ``[L]`` labels, each link's id in the input and ``[L]`` True on real
#: links; ``neg_sampling="triplet"``: the ``[S]`` sources, their positive and
#: ``[S, k]`` negative destinations.
EDGE_LABEL_INDEX = "edge_label_index"
EDGE_LABEL = "edge_label"
INPUT_ID = "input_id"
LINK_MASK = "link_mask"
SRC_INDEX = "src_index"
DST_POS_INDEX = "dst_pos_index"
DST_NEG_INDEX = "dst_neg_index"
#: Temporal link batches: each supervision slot's time (binary: ``[L]``, PyG's
#: ``edge_label_time``) and each triplet's time (``[S]``, PyG's ``seed_time``).
EDGE_LABEL_TIME = "edge_label_time"
SEED_TIME = "seed_time"
LINK_KEYS = (EDGE_LABEL_INDEX, EDGE_LABEL, INPUT_ID, LINK_MASK, SRC_INDEX, DST_POS_INDEX,
             DST_NEG_INDEX, EDGE_LABEL_TIME, SEED_TIME)
#: Keys of a neighbour batch with per-hop budgets (``per_hop_budget=``): rows and
#: edges lie in one block per hop, each padded to its hop's own budget, and these
#: two keys say how large the blocks are by their SHAPE (``(0, b_0, ..., b_H)`` nodes,
#: ``(0, e_1, ..., e_H)`` edges; no element, so no value a compiler would have to
#: read): :func:`hop_budgets` reads the lists back, static ints under a trace. The
#: names are PyG's batch attributes, which a wrapped model sees as these lists.
HOP_NODES = "num_sampled_nodes"
HOP_EDGES = "num_sampled_edges"
HOP_KEYS = (HOP_NODES, HOP_EDGES)
#: Every key the format or its loaders own; a graph attribute may not use any of them.
ALL_RESERVED_KEYS = RESERVED_KEYS + LAYOUT_KEYS + SAMPLED_KEYS + LINK_KEYS + HOP_KEYS

#: Where a wrapped model's output and loss live in its output dict.
OUTPUT_KEY = "output"
LOSS_KEY = "loss"


def store_name(store: StoreKey) -> str:
    """The store's name in a key.

    Args:
        store: ``()`` (homogeneous, or a hetero graph's global store), ``(node_type,)``
            or ``(src, rel, dst)``.

    Returns:
        ``""``, ``"paper"`` or ``"a__r__b"``.
    """
    return EDGE_TYPE_SEP.join(store)


def key_of(store: StoreKey, attr: str) -> str:
    """The flat key of attribute ``attr`` of store ``store``.

    Args:
        store: as in :func:`store_name`.
        attr: the attribute's name (``"x"``).

    Returns:
        ``"x"`` for the empty store, else ``"<store>/<attr>"``.

    Examples:
        >>> key_of(("author", "writes", "paper"), "edge_index")
        'author__writes__paper/edge_index'
    """
    if not store:
        return attr
    return store_name(store) + SEP + attr


def parse_key(key: str) -> Tuple[StoreKey, str]:
    """The inverse of :func:`key_of`.

    Examples:
        >>> parse_key("a__r__b/edge_index")
        (('a', 'r', 'b'), 'edge_index')
    """
    if SEP not in key:
        return (), key
    store, attr = key.rsplit(SEP, 1)
    return tuple(store.split(EDGE_TYPE_SEP)), attr


def attr_of(key: str) -> str:
    """The attribute part of a key (``"paper/x"`` -> ``"x"``, ``"x"`` -> ``"x"``)."""
    return key.rsplit(SEP, 1)[-1]


def cat_dim_of(attr: str) -> int:
    """The dim PyG concatenates ``attr`` along when it batches graphs: the last for
    ``edge_index``, ``edge_mask`` and every ``*index`` attribute, else 0."""
    return -1 if attr in ("edge_index", EDGE_MASK) or attr.endswith("index") else 0


def is_index_attr(attr: str) -> bool:
    """Whether PyG's ``Data.__inc__`` increments ``attr`` by the node count when it
    batches graphs (``edge_index``, ``face`` and every attribute with ``index`` in its
    name), so that its values are node ids of the batch."""
    return "index" in attr or attr == "face"


def is_hetero(keys: Collection[str]) -> bool:
    """Whether the keys of a flat dict (or the dict itself) are those of a hetero graph."""
    return any(SEP in k for k in keys)


def is_layout_key(key: str) -> bool:
    """Whether ``key`` is one of the optional aggregation layout tables."""
    return attr_of(key) in LAYOUT_KEYS


def hop_shape(counts: Sequence[int]) -> Tuple[int, ...]:
    """The shape of a :data:`HOP_NODES` / :data:`HOP_EDGES` key holding the per-hop
    block sizes ``counts``: ``(0, *counts)`` (the leading 0: no element, and no row
    count any level could have but an empty one)."""
    return (0,) + tuple(int(c) for c in counts)


def hop_budgets(shape: Sequence[int]) -> List[int]:
    """The per-hop block sizes a :data:`HOP_NODES` / :data:`HOP_EDGES` key's shape
    holds (the inverse of :func:`hop_shape`; a leading micro-batch dim ``F`` is
    skipped: the sizes follow the 0)."""
    dims = [int(d) for d in shape]
    if 0 not in dims[:2]:
        raise SpecFormatError(f"a per-hop key has shape {tuple(dims)}; it is (0, b_0, ..., b_H) "
                              f"(or (F, 0, ...) with a micro-batch dim): the block sizes follow "
                              f"the leading 0 (contract.hop_shape)")
    return dims[dims.index(0) + 1:]


def mask_key(store: StoreKey, level: str) -> str:
    """The key of the mask of ``level`` rows of ``store`` (``graph_mask`` is always global)."""
    if level == "graph":
        return GRAPH_MASK
    return key_of(store, MASK_OF_LEVEL[level])


# ==========================================================================
# The level of a row count
# ==========================================================================
def levels_of_rows(rows: int, sizes: Mapping[str, Optional[int]]) -> Tuple[str, ...]:
    """Every level whose row count is ``rows``, in the order node, edge, graph.

    Args:
        rows: a tensor's row count (its size on its cat dim).
        sizes: a level's row count (``{"node": N, "edge": E, "graph": G}``; missing or
            ``None`` levels never match).
    """
    return tuple(lv for lv in ("node", "edge", "graph") if sizes.get(lv) == rows)


def pick_level(candidates: Collection[str], name: str = "") -> Optional[str]:
    """One level out of several that match, as PyG breaks the tie.

    An attribute whose name contains ``"edge"`` is edge-level when edges match;
    otherwise node before graph before edge. ``None`` if nothing matches.
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


# ==========================================================================
# Padding
# ==========================================================================
#: Padding nodes every batch keeps, per node type: a budget's node count includes
#: them, so at most ``nodes - RESERVED_NODES`` real nodes fit. Two, so that the
#: padding edges' self-loops on node ``N - 1`` can be moved to ``N - 2`` by the
#: static ``remove_self_loops`` and leave no loop.
RESERVED_NODES = 2


def misfit(graphs: int, nodes: int, edges: int, budget_graphs: int, budget_nodes: int,
           budget_edges: int) -> str:
    """Why ``graphs`` graphs of ``nodes`` nodes and ``edges`` edges in all do not fit
    one padded call (``""``: they fit).

    A call keeps one padding graph slot and :data:`RESERVED_NODES` padding nodes, and
    enough padding nodes that no padding graph slot is empty (every per-graph op then
    reduces over a non-empty set, so its value and gradient stay finite).
    """
    if graphs > budget_graphs - 1:
        return f"{graphs} graphs (at most {budget_graphs - 1}: one slot is padding)"
    if nodes > budget_nodes - RESERVED_NODES:
        return (f"{nodes} nodes (at most {budget_nodes - RESERVED_NODES}: "
                f"{RESERVED_NODES} are padding)")
    if edges > budget_edges:
        return f"{edges} edges (at most {budget_edges})"
    if budget_nodes - nodes < budget_graphs - graphs:
        return (f"{nodes} nodes in {graphs} graphs leave {budget_nodes - nodes} padding nodes "
                f"for {budget_graphs - graphs} padding graph slots (one each at least)")
    return ""


def fits(graphs: int, nodes: int, edges: int, budget_graphs: int, budget_nodes: int,
         budget_edges: int) -> bool:
    """Whether the graphs fit one padded call (:func:`misfit` says why not)."""
    return not misfit(graphs, nodes, edges, budget_graphs, budget_nodes, budget_edges)


def max_graph_nodes(budget_graphs: int, budget_nodes: int) -> int:
    """The most nodes one graph may have and still fit a call alone (:func:`misfit`):
    :data:`RESERVED_NODES` stay padding, and every other padding graph slot keeps a node."""
    return min(budget_nodes - RESERVED_NODES, budget_nodes - budget_graphs + 1)


def slot_counts(real: Sequence[int], graph_slots: int, pad_nodes: int) -> List[int]:
    """Nodes per graph slot of a padded batch.

    Args:
        real: the real graphs' node counts, in batch order.
        graph_slots: ``G``, the budget's graph slots (``len(real) < G``).
        pad_nodes: the padding nodes, ``N - sum(real)`` (at least one).

    Returns:
        ``G`` counts: the real graphs', then the padding nodes over the padding slots,
        one each while they last and the rest in the last slot ``G - 1`` (which so
        always holds the padding edges' node ``N - 1``). ``batch`` repeats each slot's
        id by its count; ``ptr`` is their running sum from 0.

    Examples:
        >>> slot_counts([3, 2], 5, 4)
        [3, 2, 1, 1, 2]
    """
    g = len(real)
    counts = list(real) + [0] * (graph_slots - g)
    ones = max(min(graph_slots - 1 - g, pad_nodes - 1), 0)
    for s in range(g, g + ones):
        counts[s] = 1
    counts[graph_slots - 1] = pad_nodes - ones
    return counts


def padding_node(num_nodes: int) -> int:
    """The node every padding edge starts and ends at: the last, ``N - 1`` (a padding
    node: :data:`RESERVED_NODES` are always left), of its source and destination
    node type alike."""
    return num_nodes - 1


def pad_value(level: str, dtype: str) -> Union[float, int, bool]:
    """The value of a padding row of a feature.

    Args:
        level: ``"node"``, ``"edge"``, ``"graph"`` or ``"other"``.
        dtype: the dtype's name without ``torch.`` (``"float32"``, ``"int64"``, ``"bool"``).

    Returns:
        NaN for graph-level floating rows (a padding graph's target is not a number:
        a loss that forgets the mask fails loudly), ``False`` for booleans, else 0.
    """
    if level == "graph" and dtype.startswith(("float", "bfloat", "complex")):
        return float("nan")
    return False if dtype == "bool" else 0


# ==========================================================================
# Micro-batches
# ==========================================================================
def has_micro_batch_dim(flat: Mapping[str, Any]) -> bool:
    """Whether a flat dict carries a leading micro-batch dim ``F``: ``graph_mask`` is
    ``[F, G]`` instead of ``[G]``. Raises :class:`MissingKeyError` without one."""
    if GRAPH_MASK not in flat:
        raise MissingKeyError(f"the flat dict has no {GRAPH_MASK!r} key (its keys: "
                              f"{sorted(flat)[:8]}); padded batches come from FixedSizeLoader "
                              f"or graph_adapter.collate_padded")
    return len(flat[GRAPH_MASK].shape) == 2


# ==========================================================================
# Signature
# ==========================================================================
def dtype_name(dtype: Any) -> str:
    """``torch.float32`` / ``numpy.dtype('float32')`` / ``"float32"`` -> ``"float32"``."""
    return str(dtype).replace("torch.", "")


class TensorSignature(NamedTuple):
    """One key of a :class:`Signature`: the tensor's dtype and shape (and device,
    ``None`` where the signature leaves devices out)."""

    dtype: Any
    #: a tuple of ints (``torch.Size`` is one)
    shape: Tuple[int, ...]
    device: Any = None

    @property
    def dtype_name(self) -> str:
        return dtype_name(self.dtype)


class Signature(Dict[str, TensorSignature]):
    """What a compiled program is specialised to: every key's dtype, shape and device.

    Two batches with equal signatures can run through one compiled program (one
    trace, one CUDA graph, one poptorch executable); any difference needs another.
    Values are read through ``.dtype`` / ``.shape`` / ``.device`` only: a signature
    of torch tensors, numpy arrays or fake tensors alike. A read-only dict from key
    to :class:`TensorSignature` in the flat dict's key order, equal and hashable by
    value whatever the key order (a dict, so that building and comparing one costs
    no Python call: it is read on every call of a compiled model).

    Examples:
        >>> import torch
        >>> a = Signature.of({"x": torch.zeros(4, 3), "graph_mask": torch.ones(2, dtype=torch.bool)})
        >>> a["x"].shape == (4, 3)
        True
        >>> b = Signature.of({"x": torch.zeros(5, 3), "graph_mask": torch.ones(2, dtype=torch.bool)})
        >>> a.difference(b)
        "key 'x' has shape (5, 3), the compiled program takes (4, 3)"
    """

    __slots__ = ("_hash",)

    @classmethod
    def of(cls, flat: Mapping[str, Any], *, strip_micro: bool = False,
           devices: bool = False) -> "Signature":
        """The signature of a flat dict.

        Args:
            flat: key -> tensor (anything with ``.dtype`` and ``.shape``).
            strip_micro: leave out a leading micro-batch dim where the dict has one
                (:func:`has_micro_batch_dim`): the signature of one micro-batch.
            devices: record each tensor's device too.

        Returns:
            The signature, its keys in ``flat``'s order.

        Raises:
            UnsupportedAttributeError: a value is not a tensor (named by its key).
        """
        gm = flat.get(GRAPH_MASK) if strip_micro else None
        cut = gm is not None and len(gm.shape) == 2  # has_micro_batch_dim, inline: a hot path
        make = tuple.__new__  # (a NamedTuple's own __new__ is a Python call a key)
        try:
            if cut:
                return cls({k: make(TensorSignature, (v.dtype, v.shape[1:],
                                                      v.device if devices else None))
                            for k, v in flat.items()})
            if devices:
                return cls({k: make(TensorSignature, (v.dtype, v.shape, v.device))
                            for k, v in flat.items()})
            return cls({k: make(TensorSignature, (v.dtype, v.shape, None))
                        for k, v in flat.items()})
        except AttributeError:
            k, v = next((k, v) for k, v in flat.items()
                        if not (hasattr(v, "shape") and hasattr(v, "dtype")))
            raise UnsupportedAttributeError(
                f"key {k!r} is a {type(v).__qualname__}, not a tensor; a flat dict holds "
                f"tensors only (graph_adapter.flatten or FixedSizeLoader make one)") from None

    def __hash__(self) -> int:  # type: ignore[override]
        try:
            return self._hash
        except AttributeError:
            self._hash = h = hash(frozenset(self.items()))
            return h

    def _read_only(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a Signature is read-only: make a new one with Signature.of(flat)")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _read_only

    def __reduce__(self) -> Any:  # copy / deepcopy build a new one (no item assignment)
        return (type(self), (dict(self),))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}: {e.dtype_name}{list(e.shape)}" for k, e in sorted(self.items()))
        return f"Signature({inner})"

    # -- comparing ------------------------------------------------------------
    def difference(self, new: Mapping[str, TensorSignature],
                   what: str = "the compiled program") -> str:
        """The first key (in key order) whose presence, dtype, shape or device differs
        between this signature (what ``what`` takes) and ``new``, in words; ``""``
        when they are equal."""
        for k in sorted(set(self) | set(new)):
            if k not in new:
                o = self[k]
                return (f"key {k!r} is missing ({what} takes it: dtype {o.dtype_name}, "
                        f"shape {tuple(o.shape)})")
            n = new[k]
            if k not in self:
                return (f"key {k!r} is new (dtype {n.dtype_name}, shape {tuple(n.shape)}); "
                        f"{what} does not take it")
            o = self[k]
            if o.dtype != n.dtype:
                return f"key {k!r} has dtype {n.dtype_name}, {what} takes {o.dtype_name}"
            if o.shape != n.shape:
                hint = (" (a layout table: loaders that fitted their layouts apart, e.g. train "
                        "and test; fit it once on every graph and pass that loader's "
                        "collator.layout_widths / layout_spills to both)"
                        if is_layout_key(k) else "")
                return (f"key {k!r} has shape {tuple(n.shape)}, {what} takes "
                        f"{tuple(o.shape)}{hint}")
            if o.device != n.device:
                return f"key {k!r} is on {n.device}, {what} takes {o.device}"
        return ""

    # -- JSON -----------------------------------------------------------------
    def to_json(self) -> List[List[Any]]:
        """``[[key, dtype, shape], ...]`` in key order: devices are not saved (a program
        is loaded onto the device it runs on)."""
        return [[k, e.dtype_name, list(e.shape)] for k, e in sorted(self.items())]

    @classmethod
    def from_json(cls, rows: Sequence[Sequence[Any]]) -> "Signature":
        """The inverse of :meth:`to_json`; dtypes come back as names (``"float32"``):
        compare with a signature of names (:meth:`named`)."""
        try:
            return cls({str(k): TensorSignature(str(d), tuple(int(s) for s in shape))
                        for k, d, shape in rows})
        except (TypeError, ValueError) as e:
            raise SpecFormatError(f"a saved signature must be [[key, dtype, shape], ...]: "
                                  f"{e}") from None

    def named(self) -> "Signature":
        """The same signature with dtypes as names, shapes as tuples and no devices:
        comparable with one read back from JSON."""
        return Signature({k: TensorSignature(e.dtype_name, tuple(e.shape))
                          for k, e in self.items()})


# ==========================================================================
# Errors: each names the key (and graph) it is about and says what to do.
# Every one is a SpecError (``except SpecError`` catches them all) and also the
# builtin error a caller would expect (KeyError, TypeError, ValueError).
# ==========================================================================
class SpecError(Exception):
    """Base class: a flat dict, a spec, a request graph or an attribute that breaks the
    contract."""


class _KeyErrorMessage(KeyError):
    # KeyError repr()s its message; show it as written instead.
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class MissingKeyError(SpecError, _KeyErrorMessage):
    """The flat dict lacks a key that the spec names."""


class UnexpectedKeyError(SpecError, _KeyErrorMessage):
    """The flat dict has a key that the spec does not name."""


class DtypeMismatchError(SpecError, TypeError):
    """A tensor's dtype differs from the spec's."""


class ShapeMismatchError(SpecError, ValueError):
    """A tensor's shape differs from the spec's (other than on its cat dim)."""


class UnsupportedAttributeError(SpecError, TypeError):
    """An attribute is neither a dense tensor nor a JSON value."""


class DeviceMismatchError(SpecError, ValueError):
    """A tensor sits on another device than the rest of the input (or the model)."""


class BatchMismatchError(SpecError, ValueError):
    """A flat dict's row counts disagree with the batch its spec describes, or graphs
    do not fit the budget."""


class InputValueError(SpecError, ValueError):
    """A value breaks the padded format: an index out of range, an unsorted ``batch``.

    Raised by a wrapped model in eager mode (``ipu_wrap``'s ``check_inputs``, chained
    from the error the value caused) and by a compiled one's bounds check: an index out
    of its range, an unsorted ``batch``, a mask that contradicts ``batch`` or
    ``edge_index``. ``.key``, ``.position`` and ``.value`` name the first offending
    entry where known; ``.problems`` lists every one found.

    Args:
        message: the first offending entry and how to fix it (a few more are named).

    Example:
        ```python
        from torch_geometric.datasets import FakeDataset
        from torch_geometric.nn import GCN

        from graph_adapter import Budget, FixedSizeLoader, InputValueError, ipu_wrap

        graphs = FakeDataset(num_graphs=8, avg_num_nodes=10, num_channels=8)
        batch = next(iter(FixedSizeLoader(graphs, Budget.tight(graphs, 4))))
        batch["edge_index"][0, 0] = batch["x"].shape[0]  # a node id past the last row
        try:
            ipu_wrap(GCN(8, 16, 2), check_inputs="values")(batch)
        except InputValueError as e:
            print(e.key, e.position)  # edge_index (0, 0)
        ```
    """


class SpecFormatError(SpecError, ValueError):
    """A spec's (or a saved signature's) JSON has a missing, unknown or wrongly typed field."""


class ClassNotAllowedError(SpecError, TypeError):
    """A spec names a class that is not a PyG ``Data``/``HeteroData`` subclass, or lives
    in a module that is neither imported nor allowed."""


class ShapeChangedError(SpecError, ValueError):
    """A batch's signature differs from the one a compiled program was built for
    (:meth:`Signature.difference` names the first key that differs)."""
