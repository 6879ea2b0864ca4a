"""What :func:`~graph_adapter.nn.wrap.ipu_wrap`'s forward checks about its input, in eager mode.

Three checks, each raising a named error that says which key and what to do:

* :func:`check_format`: the padded format's own keys: every value a tensor,
  ``graph_mask`` present, masks boolean, ``edge_index`` integer ``[2, E]``,
  all tensors on one device, the model's (:class:`DeviceMismatchError`);
* :func:`compare_signature`: a key that the first batch also had keeps its
  dtype, its shape other than the row dim, and its device (the errors
  ``Spec.validate`` gives). Keys may come and go (an inference batch
  without ``y``); row counts may change (another budget);
* :func:`check_still_bound`: a key that fed the model at the first call of
  this training mode (a parameter in ``inputs="tensors"``, the batch object
  in ``inputs="data"``) is in every later dict of that mode, as poptorch
  demands ("Missing arguments");
* :func:`check_binding` (named-tensor models): no parameter with a default
  silently left unbound while a flat key that looks like it binds to nothing
  (``edge_atr`` for ``edge_attr=None``, ``batch`` for ``batch_index=None``).

All three read only keys, dtypes, shapes and devices (no values), and the
wrapped forward skips them while compiling, so they never break
``fullgraph=True``. Because they read no values, the eager forward runs them
once per input signature (every key's shape, dtype and device, with the
model's device and the input mode) and skips them for a dict whose signature
passed before (``IPUWrapped._eager_spec``; ``reset_inputs`` forgets). A check
that reads values must not be added here without keying that record on it.

After a failed eager call (torch's own error, deep inside the model) the
wrapped forward asks :func:`row_mismatches` (computed with the checks, once per
signature, from shapes only) whether a node-, edge- or graph-level key of the
first call now has rows its mask does not have, and raises a
:class:`~graph_adapter.format.errors.ShapeMismatchError` naming the key, chained
from torch's error.
"""
from __future__ import annotations

import difflib
import inspect
from typing import Any, Collection, Dict, List, Mapping, Optional, Tuple

import torch
from torch import Tensor

from ..contract import Signature
from ..format import (DeviceMismatchError, DtypeMismatchError, MissingKeyError, ShapeMismatchError,
                      UnsupportedAttributeError)
from ..format import (BATCH, GRAPH_MASK, LEVEL_OF_MASK, MASKS, PTR, cat_dim_of, levels_of_rows,
                      mask_key, parse_key, set_key, set_masks)

__all__ = ["MissingInputError", "UnboundInputError", "input_signature", "RowLevels",
           "row_levels", "row_mismatches", "bound_keys", "check_still_bound", "InputRecord",
           "require_graph_mask", "check_format", "missing_required", "compare_signature", "check_binding", "choose_mode", "RESERVED_ATTRS"]

#: attributes that never need a parameter (the masks, ``ptr``).
RESERVED_ATTRS = frozenset((*MASKS, PTR))


class MissingInputError(TypeError):
    """The model's forward needs a parameter that no key of the flat dict provides."""


class UnboundInputError(MissingInputError):
    """A forward parameter with a default has no key while a similar flat key binds to nothing."""


# key -> (dtype, shape without the row dim, device)


def _row_dim(key: str) -> int:
    """The dim that changes with the budget: PyG's cat dim (``*_index`` keys: the last)."""
    return -1 if parse_key(key)[1].endswith("index") else 0


def _trail(key: str, shape: Tuple[int, ...]) -> Tuple[int, ...]:
    """A shape without its row dim (what must stay the same from batch to batch)."""
    if not shape:
        return ()
    shape = list(shape)
    del shape[_row_dim(key)]
    return tuple(shape)


def input_signature(flat: Mapping[str, Any]) -> Signature:
    """The contract's :class:`~graph_adapter.contract.Signature` of a wrapped model's
    input, devices included; a value that is not a tensor is named."""
    if not all(isinstance(v, Tensor) for v in flat.values()):
        k, v = next((k, v) for k, v in flat.items() if not isinstance(v, Tensor))
        raise UnsupportedAttributeError(
            f"ipu_wrap: input key {k!r} is a {type(v).__qualname__}, not a tensor; a wrapped "
            f"model takes the flat dict of tensors that FixedSizeLoader yields.")
    return Signature.of(flat, devices=True)


def _dt(d: torch.dtype) -> str:
    return str(d).replace("torch.", "")


def require_graph_mask(flat: Mapping[str, Any]) -> None:
    """``graph_mask`` tells whether a micro-batch dim is there: it must be present."""
    if not isinstance(flat, Mapping):
        raise UnsupportedAttributeError(
            f"ipu_wrap: the wrapped model takes a flat dict of tensors (from FixedSizeLoader, or "
            f"graph_adapter.flatten), got {type(flat).__qualname__}.")
    if GRAPH_MASK not in flat:
        raise MissingKeyError(
            f"ipu_wrap: the input has no {GRAPH_MASK!r} key (its keys: {sorted(flat)[:8]}); a "
            f"wrapped model takes padded batches from FixedSizeLoader (docs/dev/FORMAT.md).")


def _set_reserved(keys: Collection[str]) -> set:
    """The masks and ``ptr`` of the node and edge sets of their own (``x_s_node_mask``,
    ``x_s_ptr``, ``edge_index_s_edge_mask``: ``format.set_masks``): reserved like ``ptr``."""
    sets = set_masks(dict.fromkeys(keys))
    return {k for ms in sets.values() for k, _ in ms} | {set_key(n, PTR) for _, n in sets["node"]}


def check_format(flat: Mapping[str, Tensor], sig: Signature, device: Optional[torch.device]) -> None:
    """The padded format's own keys, and one device for everything (the model's, if given)."""
    set_reserved = _set_reserved(sig)
    for k, (dtype, shape, dev) in sig.items():
        trail = _trail(k, shape)
        attr = parse_key(k)[1]
        if (attr in MASKS or (k in set_reserved and k.endswith("mask"))) and dtype != torch.bool:
            raise DtypeMismatchError(f"ipu_wrap: mask {k!r} has dtype {_dt(dtype)}; masks are "
                                     f"bool (True = real row): pass {k}.bool().")
        if attr == "edge_index" and (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool):
            raise DtypeMismatchError(f"ipu_wrap: {k!r} has dtype {_dt(dtype)}; an edge index is "
                                     f"integer: pass {k}.long().")
        if attr == "edge_index" and trail != (2,):
            raise ShapeMismatchError(f"ipu_wrap: {k!r} has shape {tuple(flat[k].shape)}; an edge "
                                     f"index is [2, E] (transpose an [E, 2] one: .t()).")
    devices = {dev for _, _, dev in sig.values()}
    if len(devices) > 1:
        first = next(iter(sig.values()))[2]
        odd = next(k for k, (_, _, dev) in sig.items() if dev != first)
        raise DeviceMismatchError(
            f"ipu_wrap: input key {odd!r} is on {sig[odd][2]}, other keys on {first}; move the "
            f"whole batch: {{k: v.to(device) for k, v in flat.items()}}.")
    if device is not None and devices and devices != {device}:
        k, (_, _, dev) = next(iter(sig.items()))
        raise DeviceMismatchError(
            f"ipu_wrap: the input (key {k!r}) is on {dev}, the model's parameters on {device}; "
            f"move the batch: {{k: v.to({str(device)!r}) for k, v in flat.items()}}.")


def compare_signature(first: Signature, now: Signature) -> None:
    """Raise when a key of both batches changed dtype, trailing shape or device."""
    for k, (dtype, shape, dev) in now.items():
        if k not in first:
            continue
        d0, s0, v0 = first[k]
        trail, t0 = _trail(k, shape), _trail(k, s0)
        what = None
        if dtype != d0:
            err, what = DtypeMismatchError, f"has dtype {_dt(dtype)}, the first batch had {_dt(d0)}"
            fix = f"cast it: .to(torch.{_dt(d0)})"
        elif trail != t0:
            err, what = ShapeMismatchError, (f"has shape {trail} besides its rows, the first batch "
                                             f"had {t0}")
            fix = "every batch must have one schema (one dataset, one FixedSizeLoader)"
        elif dev != v0:
            err, what = DeviceMismatchError, f"is on {dev}, the first batch was on {v0}"
            fix = "move the batch to the model's device"
        if what is not None:
            raise err(f"ipu_wrap: input key {k!r} {what}: {fix}. (compile() would refuse this "
                      f"batch too. To start over with a new schema on purpose, call "
                      f"wrapped.reset_inputs().)")


# --------------------------------------------------------------------------
# Keys bound at the first call, and each key's level (its rows against the masks)
# --------------------------------------------------------------------------
#: key -> (rows along PyG's cat dim, the levels whose mask had that many rows)
RowLevels = Dict[str, Tuple[int, Tuple[str, ...]]]


def _mask_rows(flat: Mapping[str, Tensor], store: Tuple, level: str) -> Optional[int]:
    m = flat.get(mask_key(store, level))
    return None if m is None or m.dim() == 0 else int(m.shape[-1])


def row_levels(flat: Mapping[str, Tensor]) -> RowLevels:
    """``{key: (rows, levels whose mask has that many rows)}`` for every key but the
    masks and ``ptr`` (shapes only: no value is read)."""
    out: RowLevels = {}
    for k, t in flat.items():
        store, attr = parse_key(k)
        if attr in LEVEL_OF_MASK or attr == PTR or not isinstance(t, Tensor) or t.dim() == 0:
            continue
        rows = int(t.shape[cat_dim_of(attr)])
        sizes = {lv: _mask_rows(flat, store, lv) for lv in ("node", "edge", "graph")}
        out[k] = (rows, levels_of_rows(rows, sizes))
    return out


def row_mismatches(first: RowLevels, now: RowLevels, flat: Mapping[str, Tensor]) -> List[str]:
    """One line per key that had a level's rows at the first call and now matches
    none of those levels' masks (``'x' has 13 rows, node_mask has 12``)."""
    lines = []
    for k, (rows, levels) in now.items():
        if k not in first or not first[k][1] or set(levels) & set(first[k][1]):
            continue
        store = parse_key(k)[0]
        masks = ", ".join(f"{mask_key(store, lv)} has {_mask_rows(flat, store, lv)}"
                          for lv in first[k][1])
        lines.append(f"input key {k!r} has {rows} rows along dim {cat_dim_of(parse_key(k)[1])}, "
                     f"{masks} (at the first call it had {first[k][0]}: the "
                     f"{'/'.join(first[k][1])}-level rows)")
    return lines


def bound_keys(mode: str, params: List[inspect.Parameter], keys: Collection[str],
               bind: Mapping[str, str], extra: Mapping[str, Any]) -> Dict[str, str]:
    """``{key: what it fed}`` for one call: in ``inputs="tensors"`` the keys that fed a
    parameter (``{"edge_attr": "parameter 'edge_attr'"}``), in ``inputs="data"`` every
    key of the batch object (``"batch.edge_attr"``); masks and ``ptr`` are always there."""
    if mode == "tensors":
        return {bind.get(p.name, p.name): f"parameter {p.name!r}" for p in params
                if p.name not in extra and bind.get(p.name, p.name) in keys}
    set_reserved = _set_reserved(keys)
    return {k: f"batch{'.' if parse_key(k)[0] == () else '/'}{k}" for k in keys
            if parse_key(k)[1] not in RESERVED_ATTRS and k not in set_reserved}


def check_still_bound(model: Any, first: Mapping[str, str], keys: Collection[str],
                      training: bool) -> None:
    """Raise :class:`MissingInputError` for a key that fed the model at the first call of
    this training mode and is missing now (the model would silently run without it)."""
    for k, fed in first.items():
        if k not in keys:
            raise MissingInputError(
                f"ipu_wrap: input key {k!r} fed {fed} of {_model_name(model)} at the first "
                f"{'training' if training else 'eval'} call, but this dict has no {k!r} (keys: "
                f"{sorted(keys)}): the model would run without it (poptorch refuses this too: "
                f"'Missing arguments: {k}'). Pass {k!r} in every batch, or call "
                f"wrapped.reset_inputs() to start over with these keys on purpose.")


class InputRecord:
    """What the eager checks remember between calls (``reset_inputs`` makes a new one):
    the first call's signature and rows, the keys bound at the first call of each
    training mode, and per checked signature the row mismatches to name on a failure."""

    def __init__(self) -> None:
        self.first: Optional[Signature] = None
        self.first_rows: Optional[RowLevels] = None
        self.bound: Dict[bool, Dict[str, str]] = {}
        self.notes: Dict[Any, List[str]] = {}

    def check(self, model: Any, flat: Mapping[str, Tensor], sig: Signature, mode: str,
              training: bool, params: List[inspect.Parameter], bind: Mapping[str, str],
              extra: Mapping[str, Any], key: Any = None) -> None:
        """:func:`compare_signature`, :func:`check_still_bound` and the row record, for a
        dict whose signature ``key`` was not checked before (shapes only)."""
        rows = row_levels(flat)
        if self.first is None:
            self.first, self.first_rows = sig, rows
        else:
            compare_signature(self.first, sig)
        first_bound = self.bound.setdefault(training, bound_keys(mode, params, flat, bind, extra))
        check_still_bound(model, first_bound, flat, training)
        if key is not None:
            if len(self.notes) >= 64:
                self.notes.clear()
            self.notes[key] = row_mismatches(self.first_rows or {}, rows, flat)

    def named_error(self, key: Any, exc: BaseException) -> Optional[ShapeMismatchError]:
        """The named error for a failed call of a checked signature, or ``None``."""
        lines = self.notes.get(key) if key is not None else None
        if not lines:
            return None
        return ShapeMismatchError(
            f"ipu_wrap: the model failed ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}) "
            f"on a dict whose rows do not match its masks: {'; '.join(lines)}. Every node-, "
            f"edge- or graph-level key has the rows of its mask (docs/dev/FORMAT.md); build "
            f"batches with FixedSizeLoader.")


# --------------------------------------------------------------------------
# Named-tensor models: which parameter takes which key
# --------------------------------------------------------------------------
def _model_name(model: Any) -> str:
    return f"{type(model).__qualname__}.forward"


def check_binding(model: Any, params: List[inspect.Parameter], keys: Collection[str],
                  bind: Mapping[str, str], extra: Mapping[str, Any], takes_kwargs: bool) -> None:
    """Raise :class:`UnboundInputError` for a defaulted parameter left without its key
    while a similar key binds to nothing (see the module docstring)."""
    bound = {bind.get(p.name, p.name) for p in params if p.name not in extra}
    unbound = [] if takes_kwargs else [k for k in keys if k not in bound
                                       and parse_key(k)[1] not in RESERVED_ATTRS]
    for p in params:
        key = bind.get(p.name, p.name)
        if p.name in extra or key in keys or p.default is inspect.Parameter.empty:
            continue
        if p.name in bind:
            raise MissingInputError(
                f"ipu_wrap(bind={{{p.name!r}: {key!r}}}): the flat dict has no key {key!r} "
                f"(keys: {sorted(keys)}); bind {p.name!r} to one of them.")
        near = difflib.get_close_matches(p.name, unbound, n=1, cutoff=0.6)
        if p.name == BATCH and BATCH not in keys and not near:
            near = [None]
        if near:
            got = (f"key {near[0]!r} binds to no parameter" if near[0] is not None
                   else "the flat dict has no 'batch' key")
            raise UnboundInputError(
                f"{_model_name(model)}'s parameter {p.name!r} (default {p.default!r}) has no key "
                f"{key!r}, and {got}: the model would run without it"
                f"{' and pool every node into one graph' if p.name == BATCH else ''}. Map it with "
                f"ipu_wrap(model, bind={{{p.name!r}: {near[0] or '<key>'!r}}}), or, to run without "
                f"it on purpose, pass extra_kwargs={{{p.name!r}: {p.default!r}}}.")


def missing_required(model: Any, p: inspect.Parameter, key: str, keys: Collection[str]) -> MissingInputError:
    """The error for a required parameter without a key (naming a similar key if any)."""
    near = difflib.get_close_matches(key, [k for k in keys if parse_key(k)[1] not in RESERVED_ATTRS],
                                     n=1, cutoff=0.6)
    hint = f" (did you mean key {near[0]!r}?)" if near else ""
    return MissingInputError(
        f"{_model_name(model)} needs parameter {p.name!r}, but the flat dict has no key {key!r}"
        f"{hint} (keys: {sorted(keys)}). Map it with ipu_wrap(model, bind={{{p.name!r}: "
        f"'<key>'}}) or give it a default.")


# --------------------------------------------------------------------------
# inputs="auto"
# --------------------------------------------------------------------------
_HETERO_NAMES = {"x_dict", "edge_index_dict"}


def choose_mode(params: List[inspect.Parameter], keys: Collection[str], bind: Mapping[str, str],
                extra: Mapping[str, Any]) -> Tuple[str, Optional[str]]:
    """``("tensors" | "data", why)`` for ``inputs="auto"``; ``why`` is set when it could not tell.

    Named tensors whenever every required parameter of forward is (after
    ``bind``) a key of the flat dict (``forward(x, edge_index, batch)``,
    SchNet's ``forward(z, pos, batch)``); the batch object when forward takes
    one parameter that is not a key (``forward(data)``).
    """
    names = {p.name for p in params}
    if bind or names & _HETERO_NAMES:
        return "tensors", None
    required = [p.name for p in params if p.default is inspect.Parameter.empty and p.name not in extra]
    present = [n for n in required if n in keys]
    if required and len(present) == len(required):
        if len(required) == 1 and required[0] == BATCH:
            return "data", (f"forward's one parameter {BATCH!r} is also a key of the flat dict (the "
                            f"node -> graph vector); it gets the batch object")
        return "tensors", None
    if len(required) <= 1 and not present:
        return "data", None
    if present:
        return "tensors", (f"forward's parameters {present} are keys of the flat dict but "
                           f"{[n for n in required if n not in keys]} are not; they are bound by name")
    return "data", (f"forward has {len(required)} required parameters {required}, none of them a "
                    f"key of the flat dict; it gets the batch object as {required[0]!r}")
