"""A product of rows padded with zero rows multiplies the real rows only (a post-grad rewrite).

``FixedSizeNeighborLoader(layout="sources")`` aggregates the first ``R`` rows of a
sampled batch (the only ones with in-edges) and pads the rest with zeros
(:func:`graph_adapter.nn.static_layout.source_aggregate`): in an ATen graph

    A = cat([S, zeros[N - R, C]])           S: [R, C]
    out = mm(A, W)                          W: [C, K]

and ``zeros @ W`` is zeros, so ``out = cat([mm(S, W), zeros[N - R, K]])``: the
product skips the padding rows, a large share of a sampled batch's (its leaf nodes).
Rewritten where ``A`` is read by the product alone, on CPU float tensors, for a
``cat`` along dim 0 of two blocks, the second zero-filled (``full(.., 0)``,
``zeros``, ``new_zeros``), and a ``mm`` taking ``A`` as its left operand (inductor's
post-grad graphs split a biased product into ``mm`` + ``add``). Each output row is
the same sum of products; a product of fewer rows may take another BLAS kernel, whose
order of additions differs in the last bits.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import fx

from ..registry import Entry, register
from ._graph import ATEN, example_value, is_zeros, only_user, zeros_node

__all__ = ["multiply_real_rows"]


def _match(mm: fx.Node) -> Optional[Tuple[fx.Node, fx.Node, fx.Node, fx.Node]]:
    """``(A, S, zeros, W)`` of a rewritable ``mm(cat([S, zeros]), W)``, or None."""
    if mm.op != "call_function" or mm.target is not ATEN.mm.default or len(mm.args) != 2 \
            or mm.kwargs:
        return None
    a, w = mm.args
    if not isinstance(a, fx.Node) or a.op != "call_function" or a.target is not ATEN.cat.default \
            or not only_user(a, mm) or (len(a.args) > 1 and a.args[1] not in (0, -2)):
        return None
    parts = a.args[0]
    av = example_value(a)
    if len(parts) != 2 or av is None or av.dim() != 2 or av.device.type != "cpu" \
            or av.dtype not in (torch.float32, torch.float64):
        return None
    s, z = parts
    if not is_zeros(z) or example_value(s) is None or example_value(w) is None:
        return None
    return a, s, z, w


def multiply_real_rows(graph: fx.Graph) -> int:
    """Rewrite, in place, every ``mm(cat([S, zeros]), W)`` of an ATen graph as
    ``cat([mm(S, W), zeros])`` (module doc); return how many were rewritten."""
    done = 0
    for mm in list(graph.nodes):
        found = _match(mm)
        if found is None:
            continue
        a, s, z, w = found
        out = example_value(mm)
        rows, pad = int(example_value(s).shape[0]), int(example_value(z).shape[0])
        with graph.inserting_before(mm):
            part = graph.call_function(ATEN.mm.default, (s, w))
            zeros = zeros_node(graph, (pad, int(out.shape[1])), out)
            new = graph.call_function(ATEN.cat.default, ([part, zeros],))
        part.meta["val"] = out.new_empty((rows, int(out.shape[1])))
        new.meta["val"] = out
        for node in (part, zeros, new):
            node.meta.setdefault("stack_trace", mm.meta.get("stack_trace"))
        mm.replace_all_uses_with(new)
        graph.erase_node(mm)
        graph.erase_node(a)
        if not z.users:
            graph.erase_node(z)
        done += 1
    if done:
        graph.lint()
    return done


register(Entry(
    "multiply_real_rows",
    "A product of rows padded with zero rows, ``mm(cat([S, zeros]), W)``, multiplies "
    "the real rows only: ``cat([mm(S, W), zeros])``. Applies to CPU float ATen graphs "
    "where the padded block is read by the product alone: ``layout=\"sources\"`` "
    "batches of ``FixedSizeNeighborLoader`` (a first GraphSAGE layer on them).",
    points=("post_grad",), order=30, version="1", run=multiply_real_rows))
