"""Checks of :mod:`graph_adapter.format.spec`: loading a spec from JSON (checked, and without
running code), and whether a flat dict holds the batch a full spec describes.

A spec's JSON may come from a file someone else wrote. Loading it must either
give exactly the object the JSON describes or raise a named
:class:`~graph_adapter.format.spec.SpecError`; never a ``KeyError`` from a missing
field, never ``bool("false") == True``.

It must also not run code. A spec names its data class as
``"module:qualname"``; :func:`resolve_data_class` turns that into a class only
if

* the module is already imported (``sys.modules``), or the user allowed it
  (:func:`allow_modules`, or ``Spec.from_json(text, allow_modules=[...])``):
  no other module is ever imported by name;
* every step of ``qualname`` is read with ``inspect.getattr_static`` (no
  module ``__getattr__``, no descriptors run);
* the result is a subclass of PyG's ``Data`` or ``HeteroData`` (and not a
  ``Batch``: a spec names the class it batches).
"""
from __future__ import annotations

import importlib
import inspect
import json
import sys
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data, HeteroData

from .errors import (BatchMismatchError, ClassNotAllowedError, DtypeMismatchError,
                     MissingKeyError, ShapeMismatchError, SpecFormatError,
                     UnexpectedKeyError)
from .json_codec import decode
from .keys import BATCH, GRAPH_MASK, LEVELS, PTR, key_of

__all__ = ["allow_modules", "allowed_modules", "resolve_data_class", "spec_fields_of",
           "field_fields_of", "check_batch_info", "check_batch_sizes", "check_flat", "decode_constants",
           "SPEC_FORMAT"]

SPEC_FORMAT = "graph_adapter.format.spec/1"

# --------------------------------------------------------------------------
# Modules a spec may import
# --------------------------------------------------------------------------
_ALLOWED: set = set()


def allow_modules(*names: str) -> None:
    """Let specs import these modules (and their submodules) by name.

    Without this a spec can only name classes of modules that are already
    imported. Example: ``graph_adapter.format.spec.allow_modules("my_project.data")``.
    """
    for n in names:
        if not isinstance(n, str) or not n:
            raise TypeError(f"allow_modules takes module names, got {n!r}")
        _ALLOWED.add(n)


def allowed_modules() -> Tuple[str, ...]:
    """The names :func:`allow_modules` was given, sorted."""
    return tuple(sorted(_ALLOWED))


def _is_allowed(module: str, extra: Iterable[str]) -> bool:
    for a in (*_ALLOWED, *extra):
        if module == a or module.startswith(a + "."):
            return True
    return False


def resolve_data_class(data_cls: Any, allow: Iterable[str] = ()) -> type:
    """The ``Data``/``HeteroData`` subclass that ``"module:qualname"`` names.

    Raises:
        SpecFormatError: not a ``"module:qualname"`` string.
        ClassNotAllowedError: the module is not imported and not allowed, the
            name does not exist, or it is not a ``Data``/``HeteroData`` subclass.
    """
    if not isinstance(data_cls, str) or data_cls.count(":") != 1:
        raise SpecFormatError(f"spec field 'data_cls' = {data_cls!r}; expected 'module:qualname' "
                              f"(e.g. 'torch_geometric.data.data:Data')")
    module, qualname = data_cls.split(":")
    mod = sys.modules.get(module)
    if mod is None:
        if not _is_allowed(module, allow):
            raise ClassNotAllowedError(
                f"the spec names class {data_cls!r}, whose module {module!r} is not imported; a "
                f"spec never imports a module by itself. Import it first, or allow it with "
                f"graph_adapter.format.spec.allow_modules({module!r}) or "
                f"Spec.from_json(text, allow_modules=[{module!r}]).")
        mod = importlib.import_module(module)
    obj: Any = mod
    for part in qualname.split("."):
        if not (inspect.ismodule(obj) or isinstance(obj, type)):
            break
        obj = inspect.getattr_static(obj, part, None)
    if not (isinstance(obj, type) and issubclass(obj, (Data, HeteroData))
            and not issubclass(obj, Batch)):
        raise ClassNotAllowedError(
            f"the spec names {data_cls!r}, which is {'missing' if obj is None else repr(obj)[:80]}; "
            f"a spec's data_cls must be a subclass of torch_geometric's Data or HeteroData (not a "
            f"Batch: a batch's spec names the class it batches). Flatten the object again.")
    return obj


# --------------------------------------------------------------------------
# Field-by-field checks of the JSON
# --------------------------------------------------------------------------
def _fail(where: str, value: Any, expected: str) -> SpecFormatError:
    return SpecFormatError(f"spec field {where} = {str(json.dumps(value, default=repr))[:80]}; "
                           f"expected {expected}. The JSON was edited or comes from another "
                           f"version: flatten the object again to get a fresh spec.")


def _keys(d: Any, where: str, required: Iterable[str], optional: Iterable[str] = ()) -> None:
    if not isinstance(d, dict):
        raise _fail(where, d, "a JSON object")
    required = set(required)
    missing = sorted(required - set(d))
    if missing:
        raise SpecFormatError(f"spec {where} lacks field(s) {missing}; flatten the object again "
                              f"to get a complete spec.")
    unknown = sorted(set(d) - required - set(optional))
    if unknown:
        raise SpecFormatError(f"spec {where} has unknown field(s) {unknown}; a spec holds only "
                              f"{sorted(required | set(optional))}. Remove them.")


def _str(v: Any, where: str) -> str:
    if not isinstance(v, str):
        raise _fail(where, v, "a string")
    return v


def _int(v: Any, where: str, minimum: int = 0) -> int:
    # bool is an int in Python; JSON true is not a count.
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise _fail(where, v, f"an integer >= {minimum}")
    return v


def _list(v: Any, where: str) -> list:
    if not isinstance(v, list):
        raise _fail(where, v, "a JSON array")
    return v


def _store(v: Any, where: str) -> Tuple[str, ...]:
    v = _list(v, where)
    if len(v) not in (0, 1, 3):
        raise _fail(where, v, "[] (global), [node_type] or [src, rel, dst]")
    return tuple(_str(p, f"{where}[{i}]") for i, p in enumerate(v))


def field_fields_of(d: Any, where: str) -> Dict[str, Any]:
    """The checked keyword arguments of one ``Field`` from its JSON."""
    _keys(d, where, ("key", "store", "attr", "dtype", "shape", "level"),
          ("inc", "rows", "nodes", "edges"))
    store = _store(d["store"], f"{where}.store")
    attr = _str(d["attr"], f"{where}.attr")
    key = _str(d["key"], f"{where}.key")
    if key != key_of(store, attr):
        raise _fail(f"{where}.key", key, f"{key_of(store, attr)!r} (the key of store {list(store)} "
                                         f"and attribute {attr!r})")
    dtype = _str(d["dtype"], f"{where}.dtype")
    if not isinstance(getattr(torch, dtype, None), torch.dtype):
        raise _fail(f"{where}.dtype", dtype, "a torch dtype name such as 'float32' or 'int64'")
    shape = tuple(None if s is None else _int(s, f"{where}.shape[{i}]")
                  for i, s in enumerate(_list(d["shape"], f"{where}.shape")))
    if shape.count(None) > 1:
        raise _fail(f"{where}.shape", list(shape), "at most one null (the dim PyG concatenates along)")
    level = d["level"]
    if level not in LEVELS:
        raise _fail(f"{where}.level", level, f"one of {list(LEVELS)}")
    inc = d.get("inc", "none")
    if inc not in ("none", "nodes", "custom"):
        raise _fail(f"{where}.inc", inc, "one of ['none', 'nodes', 'custom']")
    rows = _int(d.get("rows", 1), f"{where}.rows", minimum=1)
    sets = {k: _str(d[k], f"{where}.{k}") for k in ("nodes", "edges") if k in d}
    return dict(key=key, store=store, attr=attr, dtype=dtype, shape=shape, level=level, inc=inc,
                rows=rows, **sets)


def spec_fields_of(d: Any) -> Dict[str, Any]:
    """The checked top-level values of a spec's JSON (``fields`` as dicts for ``Field``)."""
    _keys(d, "object", ("format", "data_cls", "is_batch", "fields", "node_types", "edge_types",
                        "constants", "batch_info"), ("graphs",))
    if d["format"] != SPEC_FORMAT:
        raise _fail("'format'", d["format"], repr(SPEC_FORMAT))
    if not isinstance(d["is_batch"], bool):
        raise _fail("'is_batch'", d["is_batch"], "true or false (a JSON boolean, not a string)")
    node_types = tuple(_str(t, f"node_types[{i}]")
                       for i, t in enumerate(_list(d["node_types"], "'node_types'")))
    edge_types = []
    for i, t in enumerate(_list(d["edge_types"], "'edge_types'")):
        et = _store(t, f"edge_types[{i}]")
        if len(et) != 3:
            raise _fail(f"edge_types[{i}]", t, "[src, rel, dst]")
        edge_types.append(et)
    fields = [field_fields_of(f, f"fields[{i}]") for i, f in enumerate(_list(d["fields"], "'fields'"))]
    keys = [f["key"] for f in fields]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise SpecFormatError(f"spec fields name key(s) {dup} more than once; flatten again.")
    stores = {(), *((t,) for t in node_types), *edge_types}
    for i, f in enumerate(fields):
        if f["store"] not in stores:
            raise _fail(f"fields[{i}].store", list(f["store"]),
                        "a store of node_types/edge_types (or [] for the global store)")
    constants = []
    for i, c in enumerate(_list(d["constants"], "'constants'")):
        if not isinstance(c, list) or len(c) != 3:
            raise _fail(f"constants[{i}]", c, "[store, attribute, JSON text]")
        constants.append((_store(c[0], f"constants[{i}][0]"), _str(c[1], f"constants[{i}][1]"),
                          _str(c[2], f"constants[{i}][2]")))
    info = d["batch_info"]
    if info is not None:
        _str(info, "'batch_info'")
        if not d["is_batch"]:
            raise _fail("'batch_info'", info[:40], "null for a spec that is not a batch")
    return dict(data_cls=d["data_cls"], is_batch=d["is_batch"], fields=fields,
                node_types=node_types, edge_types=tuple(edge_types), constants=tuple(constants),
                batch_info=info,
                **({"graphs": _int(d["graphs"], "'graphs'")} if d.get("graphs") is not None
                   else {}))


def _json(text: str, where: str) -> Any:
    try:
        return decode(json.loads(text))
    except json.JSONDecodeError as e:
        raise SpecFormatError(f"spec {where} is not valid JSON ({e}); flatten again.") from None


def decode_constants(constants: Iterable[Tuple[Tuple[str, ...], str, str]]) -> tuple:
    """``(store, attr, value)`` for each ``(store, attr, json text)``."""
    return tuple((s, a, _json(j, f"constant {key_of(s, a)!r}")) for s, a, j in constants)


def check_batch_info(text: str, fields: Iterable[Any]) -> Dict[str, Any]:
    """Decode a spec's ``batch_info`` and check that its counts agree with each other
    and with the fields' static shapes (``num_graphs`` vs ``ptr``/``graph_mask``).

    The checks read the JSON lists, not decoded tensors: a spec is built
    while ``torch.export`` traces, where reading a tensor's values would be
    recorded (or refused) by the tracer.
    """
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecFormatError(f"spec batch_info is not valid JSON ({e}); flatten again.") from None
    info = _raw_dict(raw, "batch_info")
    _keys(info, "batch_info", ("num_graphs", "slice_dict", "inc_dict", "num_nodes"))
    g = _int(info["num_graphs"], "batch_info.num_graphs")
    _check_slices(info["slice_dict"], g + 1, "batch_info.slice_dict", cumulative=True)
    _check_slices(info["inc_dict"], g, "batch_info.inc_dict", cumulative=False)
    for i, entry in enumerate(_list(info["num_nodes"], "batch_info.num_nodes")):
        if not (isinstance(entry, list) and len(entry) == 2):
            raise _fail(f"batch_info.num_nodes[{i}]", entry, "[store, [num_nodes per graph]]")
        counts = _list(entry[1], f"batch_info.num_nodes[{i}][1]")
        if len(counts) != g:
            raise _fail(f"batch_info.num_nodes[{i}][1]", counts, f"{g} counts (num_graphs)")
    for f in fields:
        rows = _static_rows(f)
        if f.attr == PTR and rows is not None and rows != g + 1:
            raise SpecFormatError(f"spec key {f.key!r} has {rows} rows but batch_info.num_graphs is "
                                  f"{g} (ptr has num_graphs + 1 rows); flatten again.")
        if f.attr == GRAPH_MASK and rows is not None and rows < g:
            raise SpecFormatError(f"spec key {f.key!r} has {rows} graph slots but "
                                  f"batch_info.num_graphs is {g}; flatten again.")
    return decode(raw)


def _static_rows(f: Any) -> Optional[int]:
    return f.shape[0] if len(f.shape) == 1 and f.shape[0] is not None else None


def _raw_dict(v: Any, where: str) -> Dict[Any, Any]:
    """An encoded dict (``{"__dict__": [[key, value], ...]}``) as a Python dict of raw values."""
    if not (isinstance(v, dict) and set(v) == {"__dict__"} and isinstance(v["__dict__"], list)
            and all(isinstance(kv, list) and len(kv) == 2 for kv in v["__dict__"])):
        raise _fail(where, v, "an encoded dict")
    out = {}
    for k, val in v["__dict__"]:
        out[json.dumps(k) if not isinstance(k, str) else k] = val
    return out


def _check_slices(d: Any, length: int, where: str, cumulative: bool) -> None:
    for k, v in _raw_dict(d, where).items():
        _check_slice(v, length, f"{where}[{k!r}]", cumulative)


def _check_slice(v: Any, length: int, w: str, cumulative: bool) -> None:
    """One entry of ``slice_dict`` / ``inc_dict``: a tensor, or (a hetero store, or an
    attribute PyG collates recursively: a dict or list of tensors) a dict or list of them."""
    if isinstance(v, dict) and "__dict__" in v:
        _check_slices(v, length, w, cumulative)
        return
    if isinstance(v, list):
        for i, item in enumerate(v):
            _check_slice(item, length, f"{w}[{i}]", cumulative)
        return
    if v is None and not cumulative:
        return
    # slices: [G + 1] offsets; increments: [G, ...] (hetero edge_index: [G, 2, 1]).
    shape = v.get("shape") if isinstance(v, dict) and "__tensor__" in v else None
    if not (isinstance(shape, list) and shape and shape[0] == length
            and (len(shape) == 1 or not cumulative)):
        raise _fail(w, str(v)[:60], f"a tensor of {length} rows (num_graphs"
                                    f"{' + 1' if cumulative else ''})")
    data = v.get("data")
    if cumulative and (not isinstance(data, list) or len(data) != length
                       or not all(isinstance(x, int) and not isinstance(x, bool) for x in data)
                       or data[0] != 0
                       or any(b < a for a, b in zip(data, data[1:]))):
        raise _fail(w, str(data)[:60], "slice offsets starting at 0, never decreasing")


# --------------------------------------------------------------------------
# Does the flat dict hold the batch the spec describes? (eager, full spec only)
# --------------------------------------------------------------------------
def _slices_of(info: Mapping[str, Any], f: Any) -> Optional[Tensor]:
    """The spec's ``[G + 1]`` row offsets of a field (``None`` if PyG keeps none)."""
    d = info["slice_dict"]
    if f.store:
        d = d.get(f.store[0] if len(f.store) == 1 else f.store, {})
    return d.get(f.attr)


def check_batch_sizes(flat: Mapping[str, Tensor], spec: Any) -> None:
    """Raise :class:`BatchMismatchError` when ``flat`` is not the batch ``spec``'s metadata describes.

    Rows along each key's cat dim must match the spec's slices; ``ptr`` and
    ``batch`` (per store) must split the nodes as the spec's graphs do, else
    ``to_data_list()`` would cut the tensors at another batch's boundaries.
    """
    info = spec.batch_values
    node_slices: Dict[Tuple[str, ...], Tensor] = {}
    for f in spec.fields:
        slices = _slices_of(info, f)
        if slices is None or None not in f.shape:
            continue
        rows, want = flat[f.key].size(f.cat_dim), int(slices[-1])
        if rows != want:
            raise BatchMismatchError(
                f"key {f.key!r} has {rows} rows along dim {f.cat_dim}, but the spec's batch has "
                f"{want} ({info['num_graphs']} graphs): the spec comes from another batch. Use the "
                f"spec that flatten() returned with this flat dict (or flatten the batch again).")
        if f.level == "node" and not f.nodes and f.attr not in (PTR, BATCH):
            node_slices.setdefault(f.store, slices)
    for f in spec.fields:
        nodes = node_slices.get(f.store)
        t = flat[f.key]
        # Only PyG's own ``batch``/``ptr`` (a batch of batches carries the
        # inner ones as data, with slices of their own).
        if nodes is None or t.device.type == "meta" or f.attr not in (PTR, BATCH) \
                or _slices_of(info, f) is not None:
            continue
        if f.attr == PTR:
            ok = t.numel() == nodes.numel() and torch.equal(t.cpu().to(nodes.dtype), nodes)
        else:
            counts = torch.bincount(t.cpu().long(), minlength=int(info["num_graphs"]))
            ok = torch.equal(counts[:info["num_graphs"]], torch.diff(nodes)) and \
                counts.numel() == info["num_graphs"]
        if not ok:
            raise BatchMismatchError(
                f"key {f.key!r} splits the nodes into graphs differently from the spec's batch "
                f"(its graphs have {torch.diff(nodes).tolist()[:10]} nodes): the spec comes from "
                f"another batch, and to_data_list() would cut at the wrong rows. Use the spec that "
                f"flatten() returned with this flat dict.")


# --------------------------------------------------------------------------
# Does a flat dict fit a spec? (keys, dtypes, shapes other than the cat dim)
# --------------------------------------------------------------------------
def check_flat(flat: Mapping[str, Tensor], spec: Any) -> None:
    """Raise a ``SpecError`` naming the first key of ``flat`` that does not fit ``spec``."""
    keys = list(spec.keys)
    missing = [k for k in keys if k not in flat]
    if missing:
        raise MissingKeyError(
            f"flat dict is missing key(s) {missing} named by the spec; pass every key that "
            f"flatten() produced (spec keys: {keys})")
    extra = [k for k in flat if k not in set(keys)]
    if extra:
        raise UnexpectedKeyError(
            f"flat dict has unexpected key(s) {extra}; the spec names only {keys}. "
            f"Remove them or flatten the object again.")
    for f in spec.fields:
        t = flat[f.key]
        if not isinstance(t, Tensor):
            raise DtypeMismatchError(f"key {f.key!r}: expected a tensor, got {type(t).__name__}")
        if t.dtype != f.torch_dtype:
            raise DtypeMismatchError(
                f"key {f.key!r}: dtype {str(t.dtype).replace('torch.', '')}, spec says {f.dtype}; "
                f"cast it with .to(torch.{f.dtype})")
        if t.dim() != len(f.shape) or any(s is not None and s != n for s, n in zip(f.shape, t.shape)):
            raise ShapeMismatchError(
                f"key {f.key!r}: shape {tuple(t.shape)} does not match the spec's "
                f"{show_shape(f.shape)} (* = any size)")


def show_shape(shape: Iterable[Optional[int]]) -> str:
    """``(None, 3)`` -> ``"(*, 3)"``."""
    return "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
