"""Which value of a flat dict is wrong: the index ranges and mask rules of the padded format.

The eager checks of :mod:`graph_adapter.nn._inputs` read keys, shapes,
dtypes and devices only (once per input signature, to keep the wrapper's
eager overhead small), so a hand-made flat dict with a bad *value* reaches
the model. Some bad values then fail deep inside PyG with an error that names
no key (``IndexError: index out of range in self``); others give a wrong
result without any error. :func:`value_problems` reads the values and names
every rule of ``docs/dev/FORMAT.md`` a dict breaks:

* every index key (an attribute with ``index`` in its name, or ``face``, as
  PyG increments them) is in ``[0, N)``, ``N`` the node count of its store
  (``len(node_mask)``); a hetero ``[2, E]`` edge index: row 0 in the source
  type's range, row 1 in the destination type's. A negative index fails in
  ``index_select`` but wraps silently in bracket indexing ``x[idx]``;
* the ELL/HYB layout tables: slot ids in ``[0, E]`` (``E`` is the padding id),
  spill rows ``(edge id in [0, E], node in [0, N))``;
* ``batch`` in ``[0, G)`` (``G = len(graph_mask)``) and sorted: PyG assumes a
  sorted batch vector in ``to_dense_batch`` and the sort/LSTM/GRU
  aggregations, whose results are silently wrong otherwise;
* ``ptr`` the node offsets of ``batch``'s slots (``[0, cumsum of counts]``);
* ``node_mask == graph_mask[batch]``: real nodes sit in real graph slots,
  padding nodes in padding slots (a padding node in a real slot is pooled
  into that graph);
* a real edge (``edge_mask`` True) joins two real nodes of one graph; a
  padding edge joins two padding nodes (otherwise a real node gets its
  message: a wrong result, no error).

:func:`named_error` is what ``IPUWrapped.forward`` calls when the model (or
``unflatten``, or the loss) raised in eager mode: the first problem as an
:class:`InputValueError` naming the key, the position, the value, the valid
range and what to do, or ``None`` when every value is fine (the caller then
re-raises the original error unchanged). It never runs on the happy path,
so it costs nothing there; ``ipu_wrap(..., check_inputs="values")`` runs
:func:`value_problems` before every eager call instead, to catch the silent
cases (its cost: ``docs/wrapping.md``, "What the wrapped model checks").

Inside a poptorch model (or its emulation: ``poptorch.isRunningOnIpu()``) the
tensors hold no values, so neither runs there (``"values"`` warns).

A dict made by ``FixedSizeLoader`` / ``collate_padded`` satisfies all of it
(tests/format/test_bad_inputs.py checks that on random batches).
"""
from __future__ import annotations

import sys
import warnings
from typing import Dict, List, Mapping, Optional, Tuple, Union

import torch
from torch import Tensor

from .errors import InputValueError, SpecError
from .keys import (BATCH, EDGE_MASK, ELL_IN, ELL_OUT, GRAPH_MASK, IN_SOURCES, LAYOUT_KEYS,
                   HOP_NODES, NODE_MASK, PTR, StoreKey, is_index_attr, key_of, parse_key)
from .micro import micro_batches_of

__all__ = ["Problem", "value_problems", "micro_batches_of", "named_error", "raise_for_values",
           "BoundsPlan", "bounds_plan", "raise_for_bounds", "check_before_call",
           "DIAGNOSED"]

#: The errors of a model call after which :func:`named_error` looks for a bad
#: value (torch's index errors are IndexError or RuntimeError; PyG's own range
#: checks raise ValueError or IndexError).
DIAGNOSED = (IndexError, RuntimeError, ValueError)

_FIX = ("Build padded batches with FixedSizeLoader or graph_adapter.collate_padded (they check "
        "every index per graph); a hand-made dict must follow docs/dev/FORMAT.md.")


class Problem:
    """One broken rule: the key, the position (tensor indices) and value, and the message."""

    __slots__ = ("key", "position", "value", "message")

    def __init__(self, key: str, position: Tuple[int, ...], value: int, message: str) -> None:
        self.key, self.position, self.value, self.message = key, position, value, message

    def __repr__(self) -> str:
        return f"Problem({self.key!r}, {self.position}, {self.value})"


def _int(t: Tensor) -> bool:
    return not (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool)


def _first(bad: Tensor) -> Optional[Tuple[int, ...]]:
    """The first True position of ``bad`` (row-major), or None: one host sync when
    nothing is bad (``nonzero`` runs only on a bad value)."""
    if bad.numel() == 0 or not bool(bad.any()):
        return None
    return tuple(int(j) for j in bad.nonzero()[0])


def _pos(p: Tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, p)) + "]"


def _range(key: str, t: Tensor, hi: Union[int, Tensor], what: str,
           problems: List[Problem]) -> bool:
    """``0 <= t < hi`` (``hi`` an int, or a tensor broadcast against ``t``); record the
    first offender."""
    p = _first((t < 0) | (t >= hi))
    if p is None:
        return True
    v = int(t[p])
    bound = hi if isinstance(hi, int) else int(hi.expand_as(t)[p])
    neg = (" A negative index fails in index_select and wraps silently in bracket indexing "
           "(x[idx] reads row N + idx)." if v < 0 else "")
    problems.append(Problem(key, p, v, (
        f"key {key!r} has the value {v} at position {_pos(p)}, outside the valid range "
        f"[0, {bound}) ({what}).{neg} {_fix_entry(key, p)} {_FIX}")))
    return False


def _fix_entry(key: str, p: Tuple[int, ...]) -> str:
    if parse_key(key)[1] == "edge_index" and len(p) == 2:
        return (f"Fix that entry, drop edge {p[1]} (column {p[1]} of every edge-level key), "
                f"or make it a padding edge (both ends the last node of their type, "
                f"edge_mask False).")
    return "Fix that entry."


def _node_counts(flat: Mapping[str, Tensor]) -> Dict[StoreKey, Tuple[int, str]]:
    """``{node store: (N, key it was read from)}``: ``node_mask``'s length, else ``batch``'s."""
    out: Dict[StoreKey, Tuple[int, str]] = {}
    for attr in (BATCH, NODE_MASK):  # node_mask wins
        for k, v in flat.items():
            store, a = parse_key(k)
            if a == attr and len(store) <= 1 and v.dim() >= 1:
                out[store] = (v.size(0), k)
    return out


def _index_ranges(flat: Mapping[str, Tensor], nodes: Optional[Dict[StoreKey, Tuple[int, str]]] = None
                  ) -> List[Tuple[str, Union[int, Tuple[int, int]], str]]:
    """``(key, bound, what)`` for every index range rule of one micro-batch: the key's
    values must lie in ``[0, bound)``; ``bound`` a pair for a ``[2, ...]`` table whose
    two rows index different things (hetero ``edge_index``: source and destination
    types; a spill table: edge ids and node ids). Reads keys and shapes only."""
    nodes = _node_counts(flat) if nodes is None else nodes
    out: List[Tuple[str, Union[int, Tuple[int, int]], str]] = []
    # index keys: node ids of their store
    for k, v in flat.items():
        store, attr = parse_key(k)
        if not (is_index_attr(attr) and _int(v)) or v.numel() == 0:
            continue
        if len(store) == 3 and v.dim() >= 1 and v.size(0) == 2:
            (ns, ks) = nodes.get(store[:1], (None, None))
            (nd, kd) = nodes.get(store[2:], (None, None))
            if ns is None or nd is None:
                continue
            out.append((k, (ns, nd),
                        f"row 0: the source type {store[0]!r} has {ns} nodes, the length of "
                        f"{ks!r}; row 1: the destination type {store[2]!r} has {nd}, the length "
                        f"of {kd!r}"))
        elif len(store) <= 1 and store in nodes:
            n, kn = nodes[store]
            out.append((k, n, f"the batch has {n} nodes, the length of {kn!r}"))
    # the layout tables (homogeneous only): edge ids, E the padding id
    E = flat["edge_index"].size(-1) if "edge_index" in flat else None
    for k in LAYOUT_KEYS:
        v = flat.get(k)
        if v is None or E is None or not _int(v) or v.numel() == 0:
            continue
        if k in (ELL_IN, ELL_OUT):
            out.append((k, E + 1, f"edge ids of 'edge_index' ({E} edges) and the padding id {E}"))
        elif k == IN_SOURCES and () in nodes:
            n = nodes[()][0]
            out.append((k, n + 1, f"node ids of the batch's {n} nodes and the padding id {n}"))
        elif v.dim() == 2 and v.size(0) == 2 and () in nodes:
            out.append((k, (E + 1, nodes[()][0]),
                        f"row 0: edge ids, [0, {E}], {E} the padding id; row 1: node ids in "
                        f"[0, {nodes[()][0]})"))
    return out


def value_problems(flat: Mapping[str, Tensor]) -> List[Problem]:
    """Every rule of the padded format (module docstring) that ``flat``'s values break.

    ``flat``: one micro-batch (no leading micro-batch dim). Keys it does not
    have are not checked (a dict without ``batch`` gets no batch rules).
    Reads values (host syncs): meant for a failed call or an opt-in check.
    Returns ``[]`` for a dict from ``FixedSizeLoader``.
    """
    problems: List[Problem] = []
    nodes = _node_counts(flat)
    G = flat[GRAPH_MASK].size(-1) if GRAPH_MASK in flat else None
    ok_index: Dict[str, bool] = {}
    # 1-2. ranges of index keys and of the layout tables
    for k, hi, what in _index_ranges(flat, nodes):
        v = flat[k]
        if isinstance(hi, tuple):  # one bound per row of a [2, ...] table
            hi = torch.tensor(hi, device=v.device).view(2, *([1] * (v.dim() - 1)))
        ok_index[k] = _range(k, v, hi, what, problems)
    # 3. batch vectors, ptr, node masks, per node store
    batches: Dict[StoreKey, Tensor] = {}
    for store in nodes:
        b = _store_problems(flat, store, G, problems)
        if b is not None:
            batches[store] = b
    # 4. edges against the node masks and the batch vectors
    for k, v in flat.items():
        if ok_index.get(k):  # out of range: reported once, by rule 1
            _edge_problems(flat, k, v, batches, problems)
    return problems


def _store_problems(flat: Mapping[str, Tensor], store: StoreKey, G: Optional[int],
                    problems: List[Problem]) -> Optional[Tensor]:
    """Rule 3 for one node store: its ``batch`` vector in range and sorted, ``ptr``
    and the node mask consistent with it. Returns the batch vector where it is in
    range and sorted (rule 4 reads it), else ``None``."""
    kb = key_of(store, BATCH)
    b = flat.get(kb)
    if b is None or G is None or not _int(b) or b.dim() != 1:
        return None
    if not _range(kb, b, G,
                  f"graph slots: {G}, the length of {GRAPH_MASK!r}", problems):
        return None
    down = _first(b[1:] < b[:-1]) if b.numel() > 1 else None
    if down is not None and not (store == () and HOP_NODES in flat):
        # (per-hop blocks interleave padding rows with real ones by design: FORMAT.md)
        i = down[0] + 1
        problems.append(Problem(kb, (i,), int(b[i]), (
            f"key {kb!r} is not sorted: position [{i}] has graph slot {int(b[i])} after slot "
            f"{int(b[i - 1])} at [{i - 1}]. PyG assumes a sorted batch vector (to_dense_batch, "
            f"the sort/LSTM/GRU aggregations, 'ptr') and gives wrong results without an "
            f"error otherwise. Put every graph's nodes together, graphs in slot order. {_FIX}")))
        return None
    kp = key_of(store, PTR)
    ptr = flat.get(kp)
    if ptr is not None and _int(ptr) and ptr.dim() == 1:
        want = torch.zeros(G + 1, dtype=torch.long, device=b.device)
        want[1:] = torch.bincount(b.long(), minlength=G).cumsum(0)
        if ptr.numel() != G + 1:
            problems.append(Problem(kp, (), ptr.numel(), (
                f"key {kp!r} has {ptr.numel()} entries; it holds the node offsets of the "
                f"{G} graph slots ({G} + 1 entries: the length of {GRAPH_MASK!r} + 1). {_FIX}")))
        else:
            p = _first(ptr.long() != want)
            if p is not None:
                problems.append(Problem(kp, p, int(ptr[p]), (
                    f"key {kp!r} has the value {int(ptr[p])} at position {_pos(p)}, but "
                    f"{key_of(store, BATCH)!r} puts {int(want[p])} nodes before graph slot "
                    f"{p[0]}: 'ptr' is [0, cumulative node count per slot], which PyG reads "
                    f"for per-graph offsets. {_FIX}")))
    km = key_of(store, NODE_MASK)
    m = flat.get(km)
    if m is not None and m.dtype == torch.bool and m.shape == b.shape:
        real_slot = flat[GRAPH_MASK].bool()[b.long()]
        p = _first(m != real_slot)
        if p is not None:
            i, slot = p[0], int(b[p])
            node = "a real node" if bool(m[p]) else "a padding node"
            slot_kind = "a real" if bool(real_slot[p]) else "a padding"
            problems.append(Problem(km, p, int(m[p]), (
                f"key {km!r} makes node {i} {node} ({km}[{i}] = {bool(m[p])}), but "
                f"{kb!r} puts it in graph slot {slot}, {slot_kind} slot "
                f"({GRAPH_MASK}[{slot}] = {bool(real_slot[p])}): real nodes belong to real "
                f"graph slots and padding nodes to padding slots (otherwise pooling mixes "
                f"padding rows into a real graph, or a loss/norm reads a padding one). "
                f"{_FIX}")))
    return b


def _edge_problems(flat: Mapping[str, Tensor], k: str, v: Tensor,
                   batches: Dict[StoreKey, Tensor], problems: List[Problem]) -> None:
    """Rule 4 for one key ``k`` whose values are in range: a real ``edge_index`` column
    joins real nodes of one graph, a padding column padding nodes."""
    store, attr = parse_key(k)
    if attr != "edge_index" or v.dim() != 2 or v.size(0) != 2:
        return
    src_t, dst_t = (store[:1], store[2:]) if len(store) == 3 else (store, store)
    em = flat.get(key_of(store, EDGE_MASK))
    ms, md = flat.get(key_of(src_t, NODE_MASK)), flat.get(key_of(dst_t, NODE_MASK))
    if em is None or ms is None or md is None or em.shape != v.shape[1:]:
        return
    em = em.bool()
    real_s, real_d = ms.bool()[v[0]], md.bool()[v[1]]
    p = _first(em & ~(real_s & real_d))
    if p is not None:
        j = p[0]
        end, t = ("source", src_t) if not bool(real_s[j]) else ("destination", dst_t)
        r = 0 if end == "source" else 1
        problems.append(Problem(k, (r, j), int(v[r, j]), (
            f"key {k!r}: column {j} ({int(v[0, j])} -> {int(v[1, j])}) is a real edge "
            f"({key_of(store, EDGE_MASK)}[{j}] = True) whose {end} is a padding node "
            f"({key_of(t, NODE_MASK)}[{int(v[r, j])}] = False). A "
            f"real edge joins real nodes of one graph; its message would reach (or come "
            f"from) a padding row and change the real result without an error. {_FIX}")))
        return
    p = _first(~em & (real_s | real_d))
    if p is not None:
        j = p[0]
        r = 0 if bool(real_s[j]) else 1
        problems.append(Problem(k, (r, j), int(v[r, j]), (
            f"key {k!r}: column {j} ({int(v[0, j])} -> {int(v[1, j])}) is a padding edge "
            f"({key_of(store, EDGE_MASK)}[{j}] = False) that touches the real node "
            f"{int(v[r, j])}: padding edges join padding nodes only (the collator makes "
            f"them loops on the last node), otherwise the real node gets their message "
            f"and its result changes without an error. Mark the edge real in "
            f"{key_of(store, EDGE_MASK)!r} or point it at padding nodes. {_FIX}")))
        return
    bs, bd = batches.get(src_t), batches.get(dst_t)
    if bs is None or bd is None:
        return
    gs, gd = bs[v[0]], bd[v[1]]
    p = _first(em & (gs != gd))
    if p is not None:
        j = p[0]
        problems.append(Problem(k, (1, j), int(v[1, j]), (
            f"key {k!r}: column {j} ({int(v[0, j])} -> {int(v[1, j])}) is a real edge from "
            f"graph slot {int(gs[j])} to graph slot {int(gd[j])} (by "
            f"{_keys(key_of(src_t, BATCH), key_of(dst_t, BATCH))}): a real edge stays inside "
            f"its graph, or one graph's result depends on another's. {_FIX}")))


def _keys(a: str, b: str) -> str:
    return repr(a) if a == b else f"{a!r} and {b!r}"


def _message(problems: List[Problem]) -> str:
    head = f"ipu_wrap: a bad value in the input dict: {problems[0].message}"
    if len(problems) > 1:
        more = "; ".join(f"{p.key!r} at {_pos(p.position)}" for p in problems[1:4])
        head += f" Also: {more}" + (" and more" if len(problems) > 4 else "") + "."
    return head


def _error(problems: List[Problem]) -> InputValueError:
    err = InputValueError(_message(problems))
    err.key, err.position, err.value = problems[0].key, problems[0].position, problems[0].value
    err.problems = problems
    return err


def inside_poptorch() -> bool:
    """Whether this forward runs inside a poptorch model (or its emulation), whose
    tensors hold no values: reading one is an error there. Reads ``sys.modules``
    (never imports poptorch), as graph_adapter.lightning does."""
    pt = sys.modules.get("poptorch")
    try:
        return pt is not None and bool(pt.isRunningOnIpu())
    except Exception:  # noqa: BLE001 - a poptorch without it: assume eager
        return False


def named_error(flat: Mapping[str, Tensor], exc: BaseException) -> Optional[InputValueError]:
    """The :class:`InputValueError` that explains ``exc``, or ``None`` (re-raise ``exc``).

    Called only after a model call raised, outside any trace: by the eager
    ``IPUWrapped.forward`` and by ``Compiled`` (whose dict may stack micro-batches:
    the first micro-batch with a bad value is named). An error of
    graph_adapter's own (a :class:`SpecError`) is left alone, and so is any
    failure of the diagnosis itself: it must never hide the original error.
    """
    if isinstance(exc, SpecError) or not isinstance(exc, DIAGNOSED) or inside_poptorch():
        return None
    for part in micro_batches_of(flat):
        try:
            problems = value_problems(part)
        except Exception:  # noqa: BLE001 - a dict too odd to check: the original error stands
            return None
        if problems:
            return _error(problems)
    return None


def raise_for_values(flat: Mapping[str, Tensor]) -> None:
    """Raise :class:`InputValueError` for the first bad value (``check_inputs="values"``).

    Inside a poptorch model (values unreadable) it checks nothing and warns.
    """
    if inside_poptorch():
        warnings.warn("ipu_wrap(check_inputs='values'): inside a poptorch model the input's "
                      "values cannot be read; nothing was checked. Run the batch through the "
                      "wrapped model on the CPU (eager) to check it.", UserWarning, stacklevel=3)
        return
    problems = value_problems(flat)
    if problems:
        raise _error(problems)


# --------------------------------------------------------------------------
# The index bounds alone, cheaply, before a compiled call
# --------------------------------------------------------------------------
#: ``(key, row dim, row, bound)``: ``flat[key]`` (its ``row`` along ``row dim``
#: when ``row`` is not None) must lie in ``[0, bound)``.
BoundsPlan = Tuple[Tuple[str, int, Optional[int], int], ...]


def bounds_plan(flat: Mapping[str, Tensor]) -> BoundsPlan:
    """The index range rules of ``flat`` (:func:`value_problems`' steps 1-2 and
    ``batch`` in ``[0, G)``) as a plan for :func:`raise_for_bounds`.

    Reads keys and shapes only, so a caller builds it once per input signature.
    ``flat`` may stack micro-batches: the bounds are those of one micro-batch,
    and a plan's row dims count from the end so that they hold for both.
    """
    parts = micro_batches_of(flat)
    if not parts:
        return ()
    one = parts[0]
    plan: List[Tuple[str, int, Optional[int], int]] = []
    for k, hi, _ in _index_ranges(one):
        if isinstance(hi, tuple) and len(set(hi)) > 1:  # rows of their own bounds (hetero)
            plan.extend((k, -one[k].dim(), r, b) for r, b in enumerate(hi))
        elif isinstance(hi, tuple):  # one bound for every row: one aminmax, not one a row
            plan.append((k, 0, None, hi[0]))
        else:
            plan.append((k, 0, None, hi))
    G = one[GRAPH_MASK].size(-1) if GRAPH_MASK in one else None
    for store in _node_counts(one):
        b = one.get(key_of(store, BATCH))
        if G is not None and b is not None and _int(b) and b.numel() > 0:
            plan.append((key_of(store, BATCH), 0, None, G))
    return tuple(plan)


def raise_for_bounds(flat: Mapping[str, Tensor], plan: BoundsPlan) -> None:
    """Raise :class:`InputValueError` when a value of ``flat`` breaks a bound of ``plan``.

    One ``aminmax`` per key (a few microseconds each on the CPU; on a GPU each
    read of the result waits for the device). Code that inductor generates
    does not raise a Python error for an index out of range: on the CPU it
    reads or writes out of bounds without an error, or throws from an OpenMP
    region, which ends the process; so a compiled call checks first. Only a
    failed check reads the values again, through :func:`value_problems`, to
    name the first bad value.
    """
    for k, dim, row, bound in plan:
        v = flat[k] if row is None else flat[k].select(dim, row)
        lo, hi = torch.aminmax(v)
        if int(lo) < 0 or int(hi) >= bound:
            break
    else:
        return
    for part in micro_batches_of(flat):
        problems = value_problems(part)
        if problems:
            raise _error(problems)
    # (unreachable while the plan and value_problems agree on the bounds)
    value = int(lo) if int(lo) < 0 else int(hi)
    raise _error([Problem(k, (), value, f"key {k!r} has the value {value}, outside the valid "
                                        f"range [0, {bound}). {_FIX}")])


def check_before_call(flat: Mapping[str, Tensor], values: bool, plan: BoundsPlan) -> None:
    """What the caller of a traced forward checks on the host: every value rule
    (``values``: the wrapped model has ``check_inputs="values"``, which a traced
    forward cannot honour), else the bounds of ``plan`` (``()``: nothing)."""
    if values:
        for part in micro_batches_of(flat):
            raise_for_values(part)
    elif plan:
        raise_for_bounds(flat, plan)
