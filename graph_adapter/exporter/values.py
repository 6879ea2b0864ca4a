"""The value rules of an artifact's contract: which codes each integer feature may hold
(the rows of the embedding tables it indexes, read from the traced program) and whether
each float feature may hold NaN/inf (whether the export data held any).

The host checks them before any call (:func:`graph_adapter.serve.pack.check_values`):
an ONNX ``Gather`` wraps a negative index to another row, so an artifact given a code
outside its table would answer with another code's prediction (or fail deep in its
runtime), where eager PyG raises.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..serve import InputField

__all__ = ["index_tables", "with_value_rules", "SCAN_GRAPHS"]

#: how many of the data's graphs are scanned for negative codes and NaN/inf (a value
#: seen later than these is refused by the server, a named error, never answered wrong)
SCAN_GRAPHS = 4096

_aten = torch.ops.aten
#: ops whose output holds the input's values in the same places (columns kept), by name
_SAME_NAMES = ("aten.to.", "aten._to_copy.", "aten.clone.", "aten.contiguous.",
               "aten.alias.", "aten.detach.", "aten.lift_fresh_copy.")


def _is_same(target: Any) -> bool:
    return str(target).startswith(_SAME_NAMES)


def _rows(node: Any) -> Optional[int]:
    val = getattr(node, "meta", {}).get("val")
    return int(val.shape[0]) if isinstance(val, Tensor) and val.dim() >= 1 else None


def _walk(start: Any, cols: Tuple[int, ...], rank: int) -> Dict[int, int]:
    """Original column -> the fewest table rows it indexes, following ``start``'s values
    forward through the ops that keep them (casts, copies, row slices, column selects,
    ``unbind``) to the lookups that read them as indices (``embedding``,
    ``index_select`` on dim 0, ``index`` with one index, ``one_hot``).

    ``cols``: the original column of each position of the node's last dim while it
    still has one (``rank == 2``), else the set of columns its values come from."""
    out: Dict[int, int] = {}

    def bound(columns: Iterable[int], rows: Optional[int]) -> None:
        if rows is None:
            return
        for c in columns:
            out[c] = min(out.get(c, rows), rows)

    stack = [(start, cols, rank)]
    seen = set()
    while stack:
        node, cols, rank = stack.pop()
        if (node, cols, rank) in seen:
            continue
        seen.add((node, cols, rank))
        for user in node.users:
            t, args = user.target, user.args
            if user.op != "call_function":
                continue
            if _is_same(t) and args and args[0] is node:
                stack.append((user, cols, rank))
            elif t == _aten.select.int and args[0] is node:
                dim = int(args[1]) % max(rank, 1)
                if rank == 2 and dim == 1:
                    stack.append((user, (cols[int(args[2])],), 1))
                elif rank == 2:  # one row: its values still come from every column
                    stack.append((user, cols, 1))
            elif t == _aten.slice.Tensor and args[0] is node:
                dim = int(args[1]) % max(rank, 1) if len(args) > 1 else 0
                if dim == 0 or rank != 2:
                    stack.append((user, cols, rank))
                else:  # a slice of the columns
                    start_, end_ = (args[2] if len(args) > 2 else None), \
                        (args[3] if len(args) > 3 else None)
                    step = args[4] if len(args) > 4 else 1
                    stack.append((user, tuple(cols[slice(start_, end_, step)]), 2))
            elif t == _aten.unbind.int and args[0] is node:
                dim = (int(args[1]) if len(args) > 1 else 0) % max(rank, 1)
                for g in user.users:
                    if g.target is operator.getitem:
                        if rank == 2 and dim == 1:
                            stack.append((g, (cols[int(g.args[1])],), 1))
                        else:
                            stack.append((g, cols, max(rank - 1, 1)))
            elif t == _aten.embedding.default and len(args) > 1 and args[1] is node:
                bound(cols, _rows(args[0]))
            elif t == _aten.index_select.default and args[2] is node and \
                    int(args[1]) % max(_rank(args[0]), 1) == 0:
                bound(cols, _rows(args[0]))
            elif t == _aten.index.Tensor and len(args[1]) == 1 and args[1][0] is node:
                bound(cols, _rows(args[0]))
            elif t == _aten.one_hot.default and args[0] is node:
                classes = int(args[1]) if len(args) > 1 else -1
                if classes > 0:
                    bound(cols, classes)
    return out


def _rank(node: Any) -> int:
    val = getattr(node, "meta", {}).get("val")
    return val.dim() if isinstance(val, Tensor) else 0


def index_tables(ep: Any, keys: Sequence[str], fields: Dict[str, InputField]
                 ) -> Dict[str, Tuple[Optional[int], ...]]:
    """Per feature of ``fields`` (integer, or float cast to codes) that indexes embedding
    tables in the exported program ``ep`` (its inputs are ``keys``, in order): per
    column (a ``[n, C]`` feature) or for the whole feature (one entry), the rows of the
    smallest table its values index (``None``: a column that indexes none)."""
    names = list(ep.graph_signature.user_inputs)
    nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    out: Dict[str, Tuple[Optional[int], ...]] = {}
    for key, name in zip(keys, names):
        f = fields.get(key)
        if f is None or f.kind != "feature" or f.inc == "nodes" or f.dtype == "bool":
            continue  # (a float feature cast to codes, ``emb(x[:, 0].long())``, is followed)
        per_column = len(f.shape) == 2 and f.shape[1] is not None
        width = int(f.shape[1]) if per_column else 1
        found = _walk(nodes[name], tuple(range(width)), 2 if per_column else 1)
        if found:
            out[key] = tuple(found.get(c) for c in range(width))
    return out


def _scan(data: Sequence[Any], key: str) -> Tuple[bool, bool]:
    """``(any negative, any non-finite)`` among the first :data:`SCAN_GRAPHS` graphs'
    values of ``key``."""
    negative = nonfinite = False
    for i in range(min(len(data), SCAN_GRAPHS)):
        v = getattr(data[i], key, None) if not isinstance(data[i], dict) else data[i].get(key)
        if not isinstance(v, Tensor) or not v.numel():
            continue
        if v.is_floating_point():
            nonfinite = nonfinite or not bool(torch.isfinite(v).all())
        elif v.dtype != torch.bool:
            negative = negative or bool((v < 0).any())
    return negative, nonfinite


def with_value_rules(inputs: Sequence[InputField], tables: Dict[str, Tuple[Optional[int], ...]],
                     data: Sequence[Any], batches: Sequence[Dict[str, Tensor]] = ()
                     ) -> Tuple[InputField, ...]:
    """``inputs`` with each feature's value rules (:class:`graph_adapter.serve.InputField`):
    ``codes`` from ``tables`` (:func:`index_tables`); ``low = 0`` for an integer feature
    that indexes a table or whose values in ``data`` (and the real rows of the check
    ``batches``) are never negative; ``finite`` for a float feature: whether those
    values held no NaN/inf."""
    out: List[InputField] = []
    for f in inputs:
        if f.kind != "feature" or f.inc == "nodes":
            out.append(f)
            continue
        negative, nonfinite = _scan(data, f.key)
        for b in batches:  # (the check batches' padding rows are the packer's: left out)
            v = b.get(f.key)
            if isinstance(v, Tensor) and v.is_floating_point() and f.level != "graph":
                nonfinite = nonfinite or not bool(torch.isfinite(v).all())
        if f.dtype.startswith(("int", "uint")):
            codes = tables.get(f.key)
            low = 0 if codes is not None or not negative else None
            out.append(dataclasses.replace(f, codes=codes, low=low))
        elif f.dtype.startswith(("float", "bfloat")):
            codes = tables.get(f.key)  # (cast to codes in the model: 0 .. rows - 1 too)
            out.append(dataclasses.replace(f, finite=not nonfinite, codes=codes,
                                           low=0 if codes is not None else None))
        else:
            out.append(f)
    return tuple(out)
