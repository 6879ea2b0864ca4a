"""Stage 1 of the data path: PyG objects <-> a flat dict of tensors with fixed keys.

``flatten(obj)`` turns a ``Data``, a ``Batch`` made by ``Batch.from_data_list``,
a ``HeteroData`` or a batch of ``HeteroData`` into ``(flat, spec)``:

* ``flat`` is a ``dict[str, Tensor]`` holding every tensor attribute, under a
  key that depends only on where the attribute lives (see :func:`key_of`);
* ``spec`` is a :class:`Spec`, an immutable, hashable, JSON-serialisable
  description of everything else: the class, every key with its dtype,
  shape (``None`` on the dimension PyG concatenates along) and level
  (node, edge, graph or other), the non-tensor attributes, and what
  ``to_data_list()`` needs (``_slice_dict``, ``_inc_dict``, ``num_graphs``).

``unflatten(flat, spec)`` is the exact inverse: same concrete class, keys,
tensors (the very same objects), non-tensor attributes and batch metadata.

``unflatten(flat, spec.static())`` rebuilds only what a model's forward needs
and is written so that ``torch.compile(fullgraph=True)`` and strict
``torch.export`` trace it: the class is resolved eagerly, the instance is
created empty and filled by item assignment (see ``shared/FACTS.md``).

Key naming (documented in ``docs/flat_dict.md``):

* homogeneous graphs: the attribute name (``x``, ``edge_index``, ``batch``);
* heterogeneous graphs: ``"<store>/<attr>"`` with the node type
  (``paper/x``) or PyG's edge-type string (``author__writes__paper/edge_index``);
  attributes of the global store keep a bare name (``y``).
* keys are sorted: node stores, then edge stores, then the global store, each
  by name, attributes by name. One schema always gives one key order.
"""
from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data, HeteroData
from torch_geometric.data.data import BaseData

from ._spec_checks import (SPEC_FORMAT, allow_modules, check_batch_info, check_batch_sizes,
                           check_flat, decode_constants, field_fields_of, spec_fields_of)
from . import classes
from ._levels import level_of_attr
from ._node_sets import extra_sets
from .classes import class_path, resolve_class
from .errors import (BatchMismatchError, ClassNotAllowedError, DeviceMismatchError,
                     DtypeMismatchError, MissingKeyError, ShapeMismatchError, SpecError,
                     SpecFormatError, UnexpectedKeyError, UnsupportedAttributeError)
from .json_codec import dumps
from .torch_internals import real_tensors as unset_fake_temporarily
from .pyg import (collate_info, global_store, graph_num_nodes, made_from, set_collate_info,
                  set_graph_num_nodes, set_made_from, set_num_graphs, store_mapping)
from .keys import (EDGE_TYPE_SEP, GRAPH_MASK, LEVEL_OF_MASK, LEVELS, PTR, SEP, StoreKey,
                     cat_dim_of, is_hetero, key_of, levels_of_rows, parse_key, pick_level)

__all__ = [
    "SEP",
    "EDGE_TYPE_SEP",
    "LEVELS",
    "Field",
    "Spec",
    "SpecError",
    "MissingKeyError",
    "UnexpectedKeyError",
    "DtypeMismatchError",
    "ShapeMismatchError",
    "UnsupportedAttributeError",
    "DeviceMismatchError",
    "BatchMismatchError",
    "SpecFormatError",
    "ClassNotAllowedError",
    "allow_modules",
    "flatten",
    "unflatten",
    "infer_spec",
    "key_of",
    "parse_key",
    "class_path",
    "resolve_class",
]

# --------------------------------------------------------------------------
# Key naming: the rules live in graph_adapter.contract (re-exported here)
# --------------------------------------------------------------------------
def _check_name(name: str, what: str) -> None:
    if SEP in name:
        raise UnsupportedAttributeError(
            f"{what} {name!r} contains {SEP!r}, which graph_adapter uses to join store and "
            f"attribute in flat keys; rename it."
        )


# --------------------------------------------------------------------------
# The spec
# --------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Field:
    """One tensor attribute.

    Attributes:
        key: its flat key.
        store: ``()``, ``(node_type,)`` or ``(src, rel, dst)``.
        attr: the attribute name inside the store.
        dtype: e.g. ``"float32"``.
        shape: the full shape with ``None`` on the dimension PyG concatenates
            along (the one that changes from batch to batch).
        level: ``"node"``, ``"edge"``, ``"graph"`` or ``"other"``.
        inc: how the padded collate offsets it when batching: ``"none"``,
            ``"nodes"`` (by the node counts of the graphs before it, as
            ``edge_index``; in a hetero edge store row 0 by the source type's,
            row 1 by the destination type's) or ``"custom"`` (the graph's own
            ``__inc__``).
        rows: graph-level attributes: rows per graph.
        nodes: the node set a node-level key belongs to (or an index key points
            into) when its store has several, named by the set's first feature
            key (PyG's ``PairData``: ``"x_s"``); ``""``: the store's own nodes.
            A bipartite index names its two sets, source then target, joined
            by ``format.PAIR_SEP`` (``"x_s,x_t"``; ``",x_t"``: row 0 points into
            the store's own nodes).
        edges: the edge set of an edge-level key of such a store, named by its
            index key (``"edge_index_s"``); ``""``: the store's own edges.

    ``shape`` has ``None`` on the cat dim; a 0-d attribute has ``shape == ()``.
    """

    key: str
    store: StoreKey
    attr: str
    dtype: str
    shape: Tuple[Optional[int], ...]
    level: str
    inc: str = "none"
    rows: int = 1
    nodes: str = ""
    edges: str = ""

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def scalar(self) -> bool:
        """A 0-d attribute (one value per graph)."""
        return not self.shape

    @property
    def cat_dim(self) -> int:
        """The dim PyG concatenates along (0 for a 0-d attribute)."""
        return self.shape.index(None) if None in self.shape else 0

    @property
    def trail(self) -> Tuple[int, ...]:
        """The shape without the cat dim."""
        if self.scalar:
            return ()
        c = self.cat_dim
        return tuple(self.shape[:c]) + tuple(self.shape[c + 1:])

    def to_dict(self) -> Dict[str, Any]:
        """JSON form (``inc``/``rows`` only when not the defaults)."""
        d = {"key": self.key, "store": list(self.store), "attr": self.attr, "dtype": self.dtype,
             "shape": list(self.shape), "level": self.level}
        if self.inc != "none":
            d["inc"] = self.inc
        if self.rows != 1:
            d["rows"] = self.rows
        if self.nodes:
            d["nodes"] = self.nodes
        if self.edges:
            d["edges"] = self.edges
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Field":
        """Inverse of :meth:`to_dict`; a :class:`SpecFormatError` names any field that does not fit."""
        return cls(**field_fields_of(d, "field"))


@dataclasses.dataclass(frozen=True)
class Spec:
    """Static description of a flattened PyG object (hashable, JSON-serialisable).

    Attributes:
        data_cls: ``"module:qualname"`` of the data class (for a batch, the
            class it batches, e.g. ``torch_geometric.data.data:Data``).
        is_batch: whether the object is a ``Batch`` subclass (``DataBatch``...).
        fields: one :class:`Field` per tensor attribute, in key order.
        node_types / edge_types: hetero store order (empty for homogeneous).
        constants: ``(store, attr, json)`` for every non-tensor attribute.
        batch_info: JSON of ``num_graphs``, ``_slice_dict`` and ``_inc_dict``
            (``None`` for non-batches and for :meth:`static` specs).
        graphs: a :meth:`static` spec's graph count where no key's static
            shape gives it (a batch without ``ptr`` or ``graph_mask``: a batch
            of batches, ``PairData``); ``None`` otherwise.
    """

    data_cls: str
    is_batch: bool
    fields: Tuple[Field, ...]
    node_types: Tuple[str, ...] = ()
    edge_types: Tuple[Tuple[str, str, str], ...] = ()
    constants: Tuple[Tuple[StoreKey, str, str], ...] = ()
    batch_info: Optional[str] = None
    graphs: Optional[int] = None

    def __post_init__(self) -> None:
        # Decode the JSON parts once, eagerly: unflatten() may run inside a
        # compiled region (strict export), where json.loads cannot be traced.
        # Both are checked here, so a spec made in Python is held to what
        # from_json() checks (counts that agree with each other and the shapes).
        constants, info = (), None
        if self.constants or self.batch_info is not None:
            with unset_fake_temporarily():
                constants = decode_constants(self.constants)
                info = None if self.batch_info is None else check_batch_info(self.batch_info,
                                                                             self.fields)
        object.__setattr__(self, "_constant_values", constants)
        object.__setattr__(self, "_batch_values", info)

    # ---- views -----------------------------------------------------------
    @property
    def keys(self) -> Tuple[str, ...]:
        """The flat keys, in order."""
        return tuple(f.key for f in self.fields)

    @property
    def is_hetero(self) -> bool:
        return bool(self.node_types or self.edge_types)

    def field(self, key: str) -> Field:
        for f in self.fields:
            if f.key == key:
                return f
        raise MissingKeyError(f"key {key!r} is not in the spec; its keys are {list(self.keys)}")

    def static(self) -> "Spec":
        """The part a compiler bakes in: class and fields, no per-batch values.

        Two batches of one schema have equal ``static()`` specs.
        ``unflatten(flat, spec.static())`` traces under ``fullgraph=True``.
        """
        graphs = None
        if self._batch_values is not None and _num_graphs_key(self) is None:
            graphs = int(self._batch_values["num_graphs"])
        return dataclasses.replace(self, constants=(), batch_info=None, graphs=graphs)

    @property
    def num_graphs(self) -> Optional[int]:
        return None if self._batch_values is None else self._batch_values["num_graphs"]

    @property
    def constant_values(self) -> Tuple[Tuple[StoreKey, str, Any], ...]:
        """``((store, attr, value), ...)``: the non-tensor attributes, decoded from JSON
        once (at construction)."""
        return self._constant_values

    @property
    def batch_values(self) -> Optional[Dict[str, Any]]:
        """A batch's metadata (``num_graphs``, ``slice_dict``, ``inc_dict``,
        ``num_nodes``), decoded and checked once; ``None`` without ``batch_info``."""
        return self._batch_values

    # ---- JSON ------------------------------------------------------------
    def to_dict(self) -> Dict[str, Any]:
        return {
            "format": SPEC_FORMAT,
            "data_cls": self.data_cls,
            "is_batch": self.is_batch,
            "fields": [f.to_dict() for f in self.fields],
            "node_types": list(self.node_types),
            "edge_types": [list(t) for t in self.edge_types],
            "constants": [[list(s), a, j] for s, a, j in self.constants],
            "batch_info": self.batch_info,
            **({} if self.graphs is None else {"graphs": self.graphs}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], allow_modules: Iterable[str] = ()) -> "Spec":
        """Inverse of :meth:`to_dict`, checked: the spec the JSON describes or a :class:`SpecError`.

        Every field is type-checked (``"false"`` is not a bool), counts must
        agree, and ``data_cls`` must name a ``Data``/``HeteroData`` subclass
        of an imported or allowed module (``allow_modules``, or
        :func:`graph_adapter.format.spec.allow_modules`); see ``docs/flat_dict.md``.
        """
        kw = spec_fields_of(d)
        resolve_class(kw["data_cls"], kw["is_batch"], allow_modules)
        kw["fields"] = tuple(Field(**f) for f in kw["fields"])
        return cls(**kw)

    def to_json(self, **kwargs: Any) -> str:
        """JSON text of this spec (``json.dumps`` keyword arguments pass through)."""
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_json(cls, text: str, allow_modules: Iterable[str] = ()) -> "Spec":
        """:meth:`from_dict` of JSON text (raises :class:`SpecFormatError` for invalid JSON)."""
        try:
            d = json.loads(text)
        except (TypeError, json.JSONDecodeError) as e:
            raise SpecFormatError(f"not a spec's JSON text ({e}); pass what Spec.to_json() "
                                  f"wrote.") from None
        return cls.from_dict(d, allow_modules)

    # ---- checks ----------------------------------------------------------
    def validate(self, flat: Mapping[str, Tensor]) -> None:
        """Raise a :class:`SpecError` naming the first key of ``flat`` that does not fit
        (a missing or unexpected key, a dtype, a shape other than on the cat dim)."""
        check_flat(flat, self)


# --------------------------------------------------------------------------
# flatten
# --------------------------------------------------------------------------
def _stores(obj: BaseData):
    """Yield ``(store_key, store)`` in key order."""
    if isinstance(obj, HeteroData):
        for nt in sorted(obj.node_types):
            _check_name(nt, "node type")
            yield (nt,), obj[nt]
        for et in sorted(obj.edge_types):
            for part in et:
                _check_name(part, "edge type part")
            yield tuple(et), obj[et]
        yield (), global_store(obj)
    else:
        yield (), global_store(obj)


def flatten(
    obj: BaseData, levels: Optional[Mapping[str, str]] = None
) -> Tuple[Dict[str, Tensor], Spec]:
    """Flatten a PyG object into ``(flat, spec)``.

    Args:
        obj: a ``Data``, ``HeteroData`` (or subclass), or a ``Batch`` of them
            made by ``Batch.from_data_list``.
        levels: optional ``{key: level}`` overrides where PyG's own node/edge
            heuristics are ambiguous (e.g. a one-node graph's ``y``).

    Returns:
        ``flat``: ``{key: tensor}`` in key order; the tensors are the
        object's own (no copy). ``spec``: a :class:`Spec`.

    Raises:
        UnsupportedAttributeError: an attribute that is neither a dense tensor
            nor a JSON value (names the key and its type).
        ValueError: a ``levels`` value that is not a level.

    Example:
        ```python
        import torch
        from torch_geometric.data import Data

        from graph_adapter import Spec, flatten

        data = Data(x=torch.randn(3, 4), edge_index=torch.tensor([[0, 1], [1, 2]]))
        flat, spec = flatten(data)  # {"edge_index": ..., "x": ...}, how to rebuild it
        assert flat["x"] is data.x and Spec.from_json(spec.to_json()) == spec
        ```
    """
    levels = _check_flatten_args(obj, levels)
    is_batch = isinstance(obj, Batch)
    # An object that unflatten() made knows its levels: no data reads, which
    # matters when its tensors are fake (torch.export flattens inputs again).
    source = made_from(obj)
    known = {f.key: (f.level, f.nodes, f.edges) for f in source.fields} \
        if source is not None else {}
    flat: Dict[str, Tensor] = {}
    fields: List[Field] = []
    constants: List[Tuple[StoreKey, str, str]] = []
    # keys of further node sets in a homogeneous store (PyG's PairData)
    extra = {} if isinstance(obj, HeteroData) else extra_sets(obj)
    num_nodes_lists = []  # PyG's per-graph ``num_nodes`` of a batch (format.pyg.graph_num_nodes)
    for skey, store in _stores(obj):
        if is_batch and graph_num_nodes(store) is not None:
            num_nodes_lists.append([list(skey), graph_num_nodes(store)])
        for attr in sorted(store.keys()):
            _check_name(attr, "attribute")
            key = key_of(skey, attr)
            value = store[attr]
            if isinstance(value, Tensor) and value.layout == torch.strided and not value.is_nested:
                where = known.get(key) or extra.get(attr, None)
                given = levels.pop(key, None)
                level = given or (where[0] if where else None) or \
                    level_of_attr(obj, skey, store, attr, value)
                sets = where[1:] if where and not given else ("", "")
                flat[key] = value
                fields.append(_field_of(obj, skey, store, attr, key, value, level, sets))
            else:
                constants.append((skey, attr, _constant_json(key, value)))
    if levels:
        raise MissingKeyError(f"levels names key(s) {sorted(levels)} that are not tensor attributes")
    spec = Spec(
        data_cls=class_path(classes.base_class(obj)),
        is_batch=is_batch,
        fields=tuple(fields),
        node_types=tuple(obj.node_types) if isinstance(obj, HeteroData) else (),
        edge_types=tuple(tuple(t) for t in obj.edge_types) if isinstance(obj, HeteroData) else (),
        constants=tuple(constants),
        batch_info=_batch_info_json(obj, num_nodes_lists) if is_batch else None,
    )
    # The class is in hand: remember it (the latest one of that name wins), so
    # that unflatten never resolves it by name, also for classes that no
    # import reaches (defined in a function, redefined in a notebook).
    classes.remember(spec.data_cls, is_batch, type(obj))
    return flat, spec


def _check_flatten_args(obj: Any, levels: Optional[Mapping[str, str]]) -> Dict[str, str]:
    """``levels`` as a dict to consume, after checking ``obj`` and ``levels``' values."""
    if not isinstance(obj, BaseData):
        raise UnsupportedAttributeError(
            f"flatten() takes a PyG Data/HeteroData/Batch, got {type(obj).__qualname__}"
        )
    levels = dict(levels or {})
    for k, lv in levels.items():
        if lv not in LEVELS:
            raise ValueError(f"levels[{k!r}] = {lv!r}; choose one of {LEVELS}")
    if isinstance(obj, Batch) and collate_info(obj)[0] is None:
        raise UnsupportedAttributeError(
            "this Batch has no _slice_dict (it was not made by Batch.from_data_list); "
            "flatten the Data objects and batch them with Batch.from_data_list"
        )
    return levels


def _field_of(obj: BaseData, skey: StoreKey, store: Any, attr: str, key: str, value: Tensor,
              level: str, sets: Tuple[str, str] = ("", "")) -> Field:
    """The :class:`Field` of one dense tensor attribute: its concatenation dim (PyG's
    ``__cat_dim__``) is the one left ``None`` in the shape."""
    cat = obj.__cat_dim__(attr, value, store) if value.dim() else None
    shape: List[Optional[int]] = list(value.shape)
    if cat is not None:
        shape[cat] = None
    return Field(key, skey, attr, str(value.dtype).replace("torch.", ""), tuple(shape), level,
                 nodes=sets[0], edges=sets[1])


def _constant_json(key: str, value: Any) -> str:
    """A non-tensor attribute's exact JSON; a nested or sparse tensor is refused by name."""
    if isinstance(value, Tensor) and value.is_nested:
        raise UnsupportedAttributeError(
            f"attribute {key!r} is a nested tensor, which has no fixed shape to flatten; "
            f"store it padded (value.to_padded_tensor(0.0)) or as one concatenated tensor "
            f"with per-graph counts.")
    return dumps(value, f"attribute {key!r}")


def _batch_info_json(obj: Batch, num_nodes_lists: List[list]) -> str:
    """JSON of what ``Batch.to_data_list()`` needs: graph count and collate metadata."""
    slice_dict, inc_dict = collate_info(obj)
    return dumps({"num_graphs": obj.num_graphs, "slice_dict": slice_dict,
                  "inc_dict": inc_dict, "num_nodes": num_nodes_lists}, "batch metadata")

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
        if attr in LEVEL_OF_MASK:
            mask_rows[(store, LEVEL_OF_MASK[attr])] = flat[key].size(0)
    fields = []
    for key in sorted(flat, key=lambda k: _order(parsed[k])):
        store, attr = parsed[key]
        t = flat[key]
        cat = cat_dim_of(attr)
        level = LEVEL_OF_MASK.get(attr, "other")
        if level == "other" and t.dim() and attr != PTR:
            level = pick_level(levels_of_rows(t.size(cat), _store_sizes(store, mask_rows)), attr) \
                or "other"
        fields.append(Field(key, store, attr, str(t.dtype).replace("torch.", ""), tuple(t.shape), level))
    node_types = sorted({s[0] for s, _ in parsed.values() if len(s) == 1})
    edge_types = sorted({s for s, _ in parsed.values() if len(s) == 3})
    return Spec(class_path(data_cls), is_batch, tuple(fields), tuple(node_types), tuple(edge_types))




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


# --------------------------------------------------------------------------
# unflatten
# --------------------------------------------------------------------------
def _store_of(out: BaseData, skey: StoreKey):
    if not skey:
        return global_store(out)
    return out[skey[0]] if len(skey) == 1 else out[skey]


def unflatten(flat: Mapping[str, Tensor], spec: Spec, validate: bool = True) -> BaseData:
    """Rebuild the PyG object that :func:`flatten` described.

    With the full spec the result equals the original: same concrete class,
    keys, tensors, non-tensor attributes, and (for batches) ``num_graphs``,
    ``to_data_list()`` and ``get_example(i)``.

    With ``spec.static()`` only the tensors are set; this path is what runs
    inside a compiled forward. There, ``num_graphs`` is static when the flat
    dict carries ``ptr`` (``ptr.numel() - 1``).

    Args:
        flat: ``{key: tensor}``, as :func:`flatten` returned it or of its shapes.
        spec: the :class:`Spec` :func:`flatten` returned (or ``spec.static()``).
        validate: check ``flat`` against ``spec`` first (eager calls only).

    Returns:
        The object, of the spec's class, holding ``flat``'s tensors (no copy).

    Raises:
        ClassNotAllowedError: a spec naming a class outside the allowed modules.
        SpecError: ``flat`` does not fit ``spec``: a ``MissingKeyError``,
            ``UnexpectedKeyError``, ``DtypeMismatchError`` or
            ``ShapeMismatchError`` whose message names the key; with a full
            spec, a ``BatchMismatchError`` when ``flat`` is another batch than
            the spec's (rows, or the ``batch``/``ptr`` split, differ). Pass
            ``validate=False`` to skip the checks; nothing is checked while
            compiling.

    Example:
        ```python
        import torch
        from torch_geometric.data import Data
        from graph_adapter import flatten, unflatten

        flat, spec = flatten(Data(x=torch.randn(3, 4), y=torch.tensor([1.0])))
        again = unflatten(flat, spec)  # a Data again: its class, keys and tensors
        assert isinstance(again, Data) and again.x is flat["x"]
        ```
    """
    if validate and not torch.compiler.is_compiling():
        spec.validate(flat)
        if spec.batch_values is not None:
            check_batch_sizes(flat, spec)
    compiling = torch.compiler.is_compiling()
    cls = resolve_class(spec.data_cls, spec.is_batch)
    out = classes.new(cls) if compiling else classes.new_eager(cls)
    # Create hetero stores in the original order (also the empty ones).
    for nt in spec.node_types:
        out[nt]
    for et in spec.edge_types:
        out[et]
    for f in spec.fields:
        store = _store_of(out, f.store)
        value = flat[f.key]
        if compiling or value is None:
            store[f.attr] = value
        else:
            # The store is new, so it has no attribute cache to invalidate:
            # PyG's __setitem__ would look one up (an AttributeError raised
            # and caught per key, ~3 us) before this same dict write.
            store_mapping(store)[f.attr] = value
    for skey, attr, value in spec.constant_values:
        _store_of(out, skey)[attr] = value if compiling else _copy(value)
    if spec.batch_info is not None:
        info = spec.batch_values if compiling else _copy(spec.batch_values)
        # PyG keeps these in the (global) store's __dict__ (Storage.__setattr__).
        set_num_graphs(out, info["num_graphs"])
        set_collate_info(out, info["slice_dict"], info["inc_dict"])
        for skey, values in info["num_nodes"]:
            set_graph_num_nodes(_store_of(out, tuple(skey)), values)
        set_made_from(out, spec)
    elif spec.is_batch:
        # Make ``num_graphs`` a static int from a static shape, never
        # ``int(batch.max()) + 1`` (a data-dependent read).
        num_graphs = _static_num_graphs(flat, spec)
        if num_graphs is not None:
            set_num_graphs(out, num_graphs)
    return out


def _copy(value: Any) -> Any:
    # A private copy, so that editing the result never edits the spec; made
    # outside any fake mode (non-strict export runs forward in one).
    with unset_fake_temporarily():
        return copy.deepcopy(value)


def _num_graphs_key(spec: Spec) -> Optional[Tuple[str, int]]:
    """``(key, offset)``: the key whose last static size minus ``offset`` is the graph
    count (``graph_mask``; a ``ptr``; a ``follow_batch`` vector's ``<key>_ptr``)."""
    for f in spec.fields:
        if f.attr == GRAPH_MASK and not f.store:
            return f.key, 0
    for f in spec.fields:
        if f.attr == PTR:
            return f.key, 1
    attrs = {(f.store, f.attr) for f in spec.fields}
    for f in spec.fields:
        if f.attr.endswith("_" + PTR) and (f.store, f.attr[:-len(PTR) - 1]) in attrs \
                and len(f.shape) == 1:
            return f.key, 1
    return None


def _static_num_graphs(flat: Mapping[str, Tensor], spec: Spec) -> Optional[int]:
    got = _num_graphs_key(spec)
    if got is not None:
        return flat[got[0]].size(-1) - got[1]
    return spec.graphs
