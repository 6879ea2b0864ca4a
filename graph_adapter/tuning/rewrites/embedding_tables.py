""":func:`project_embedding_tables`: a linear layer applied to a
sum of embedding lookups is applied to the tables instead,

    linear(T_1[i_1] + ... + T_k[i_k], W, b)  ->  (T_1 W^T)[i_1] + ... + (T_k W^T)[i_k] + b

which is the same function (a matrix product distributes over the sum, and
commutes with a row lookup). It pays when the tables have far fewer rows
than the lookups: the categorical atom and bond encoders of molecular GNNs
(OGB's ``AtomEncoder`` / ``BondEncoder`` and encoders like them)
feed a per-layer edge projection (``GINEConv(edge_dim=...)``'s ``lin``) of
``E`` rows, while the bond tables hold a few dozen. The ``[E, D] x [D, D]``
product becomes a ``[R, D] x [D, D]`` one (``R`` = the tables' rows), and
inductor fuses the small tables' lookups into the kernel that consumes the
projection (the message ``x_j + edge_attr``), so the ``[E, D]`` projection
is never stored. Autograd differentiates the rewritten graph (AOTAutograd
runs after this pass), so gradients are those of the same function.

Results equal the original up to float rounding (the sum is added in
another order). Only exact patterns are rewritten: ``F.embedding`` without
``padding_idx`` / ``max_norm`` / ``scale_grad_by_freq`` / ``sparse`` (a
padding row gets no gradient, which the projected table could not keep
apart from ``W``'s), summed with ``+``, into ``F.linear``; anything else is
left as it is.

The same pattern is rewritten in an ATen graph (``torch.export``'s
programs: ``aten.embedding`` summed with ``aten.add.Tensor`` into
``aten.linear``), with ATen ops, for ``graph_adapter.export``: AOTInductor
runs inductor's pre-grad passes on the exported graph too, but this pass
matched only the torch-level ops Dynamo records, so without this form the
exported ``.pt2`` keeps each ``[E, D] x [D, D]`` product (slower than the compiled
program: ``docs/dev/RESULTS.md``). There no op may
write to a table (an in-place ``embedding_renorm_`` of ``max_norm`` would
change it before the lookup).
"""
from __future__ import annotations

import operator
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import fx

from ..registry import Entry, register
from ._graph import (ADD, ATEN_ADD, ATEN_EMBEDDING, EMBEDDING, LINEAR, arg, ATEN, example_value,
                     written)

__all__ = ["project_embedding_tables"]

#: The rewrite pays when the tables' rows are at most this share of the lookups.
_MAX_ROW_SHARE = 0.5


def _aten_lookup(node: fx.Node) -> Optional[Tuple[fx.Node, fx.Node]]:
    """``(index, table)`` if ``node`` is a plain ``aten.embedding(table, index)``
    (``padding_idx=-1``: none) of a table that no op writes to."""
    table, index = arg(node, 0, "weight"), arg(node, 1, "indices")
    if not isinstance(index, fx.Node) or not isinstance(table, fx.Node):
        return None
    if arg(node, 2, "padding_idx", -1) != -1 or arg(node, 3, "scale_grad_by_freq", False) \
            or arg(node, 4, "sparse", False):
        return None
    if written(table):
        return None
    return index, table


def _lookup(node: fx.Node) -> Optional[Tuple[fx.Node, fx.Node]]:
    """``(index, table)`` if ``node`` is a plain ``F.embedding`` (or ATen) call."""
    if node.op == "call_function" and node.target in ATEN_EMBEDDING:
        return _aten_lookup(node)
    if node.op != "call_function" or node.target not in EMBEDDING:
        return None
    index, table = arg(node, 0, "input"), arg(node, 1, "weight")
    if not isinstance(index, fx.Node) or not isinstance(table, fx.Node):
        return None
    if arg(node, 2, "padding_idx") is not None or arg(node, 3, "max_norm") is not None \
            or arg(node, 5, "scale_grad_by_freq", False) or arg(node, 6, "sparse", False):
        return None
    return index, table


def _terms(node: fx.Node, aten: bool) -> Optional[List[Tuple[fx.Node, fx.Node]]]:
    """The lookups whose sum ``node`` is (``a + b`` nested any way), or ``None``;
    ``aten``: of ATen ops only (an exported program), else of torch-level ones."""
    if node.op == "call_function" and node.target in (ATEN_EMBEDDING if aten else EMBEDDING):
        one = _lookup(node)
        return None if one is None else [one]
    adds = ATEN_ADD if aten else ADD
    if node.op != "call_function" or node.target not in adds or node.kwargs \
            or len(node.args) != 2 or not all(isinstance(a, fx.Node) for a in node.args):
        return None
    left, right = (_terms(a, aten) for a in node.args)  # type: ignore[arg-type]
    return None if left is None or right is None else left + right


def _pays(terms: List[Tuple[fx.Node, fx.Node]], out: fx.Node) -> bool:
    """Whether the tables hold few enough rows (static shapes only)."""
    lookups, rows = example_value(out), [example_value(t) for _, t in terms]
    if lookups is None or lookups.dim() != 2 or any(r is None or r.dim() != 2 for r in rows):
        return False
    return sum(int(r.shape[0]) for r in rows) <= _MAX_ROW_SHARE * int(lookups.shape[0])


#: What the rewrite emits, per graph level: Dynamo's torch-level graphs, or ATen
#: graphs (``torch.export``): ``rows`` takes ``rows_args(table, start, length)``,
#: ``lookup`` takes ``lookup_args(index, table)``.
_TORCH_OPS: Dict[str, Any] = {
    "cat": torch.cat, "linear": F.linear, "add": operator.add,
    "rows": torch.narrow, "rows_args": lambda t, start, n: (t, 0, start, n),
    "lookup": F.embedding, "lookup_args": lambda i, t: (i, t)}
_ATEN_OPS: Dict[str, Any] = {
    "cat": ATEN.cat.default, "linear": ATEN.linear.default, "add": ATEN.add.Tensor,
    "rows": ATEN.slice.Tensor, "rows_args": lambda t, start, n: (t, 0, start, start + n),
    "lookup": ATEN.embedding.default, "lookup_args": lambda i, t: (t, i)}


def project_embedding_tables(graph: fx.Graph) -> int:
    """Rewrite every ``linear(sum of embedding lookups)`` of ``graph`` in place (module
    doc); return how many linears were rewritten. The caller recompiles the module
    (inductor does after its pre-grad passes)."""
    done = 0
    stacked: Dict[Tuple[fx.Node, ...], fx.Node] = {}
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in LINEAR:
            continue
        inp, weight, bias = arg(node, 0, "input"), arg(node, 1, "weight"), arg(node, 2, "bias")
        if not isinstance(inp, fx.Node) or not isinstance(weight, fx.Node):
            continue
        aten = node.target is ATEN.linear.default  # an exported (ATen) program
        terms = _terms(inp, aten)
        if not terms or not _pays(terms, inp):
            continue
        ops = _ATEN_OPS if aten else _TORCH_OPS
        tables = tuple(t for _, t in terms)
        with graph.inserting_before(node):
            if tables not in stacked:
                # before the first linear of these tables, shared by the later ones
                # (not after the tables: they are placeholders, which come first)
                stacked[tables] = graph.call_function(ops["cat"], (list(tables),))
            # one product for all the tables: [sum of rows, D_in] x [D_in, D_out]
            projected = graph.call_function(ops["linear"], (stacked[tables], weight))
            out: Optional[fx.Node] = None
            start = 0
            for index, table in terms:
                rows = int(example_value(table).shape[0])  # type: ignore[union-attr]
                part = graph.call_function(ops["rows"], ops["rows_args"](projected, start, rows))
                start += rows
                looked_up = graph.call_function(ops["lookup"], ops["lookup_args"](index, part))
                out = looked_up if out is None else graph.call_function(ops["add"],
                                                                        (out, looked_up))
            if bias is not None:
                out = graph.call_function(ops["add"], (out, bias))
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        done += 1
    if done:
        # No eliminate_dead_code() here: on this torch-level graph it also drops
        # in-place updates nobody reads (BatchNorm's running statistics, updated
        # by a masked norm's `mul_`/`add_`). A lookup sum left unused is removed
        # later, by the dead-code passes of the functionalized graph.
        graph.lint()
    return done


register(Entry(
    "project_embedding_tables",
    "A linear layer of a sum of embedding lookups is applied to the tables instead "
    "(``linear(T1[i1] + T2[i2])`` as ``(T1 W^T)[i1] + (T2 W^T)[i2] + b``), where the "
    "tables hold at most half as many rows as the lookups: categorical atom and bond "
    "encoders feeding per-layer edge projections. Plain ``F.embedding`` lookups only (no "
    "``padding_idx``, ``max_norm``, ``scale_grad_by_freq``, ``sparse``). Applies to "
    "Dynamo's graphs on every device and to exported programs (``graph_adapter.export``).",
    points=("pre_grad", "exported"), order=20, version="4", run=project_embedding_tables))
