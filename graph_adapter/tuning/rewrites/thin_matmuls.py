"""Thin matrix products computed transposed (a post-grad rewrite)."""
from __future__ import annotations

import torch
from torch import fx

from ..registry import Entry, register
from ._graph import ATEN, example_value

__all__ = ["transpose_thin_matmuls", "thin_matmul_rule", "THIN_WIDTHS", "THIN_MIN_ROWS"]

#: Output widths for which :func:`thin_matmul_rule` computes the transposed product.
THIN_WIDTHS = range(2, 16)
#: ... when the output has at least this many rows (and twice its width).
THIN_MIN_ROWS = 16


def thin_matmul_rule(rows: int, cols: int) -> bool:
    """Whether an ``[rows, K] x [K, cols]`` product on the CPU is computed as
    ``([cols, K] x [K, rows])^T`` (:func:`transpose_thin_matmuls`).

    MKL's sgemm (torch 2.13's CPU ``mm``) is slow when the output has 2-15
    columns and many rows, several times slower than the transposed product of the
    same numbers (``docs/dev/RESULTS.md``): the weight gradient ``g^T @ x`` of a
    linear layer of few input features (9 atom or 3 bond features into 64-128
    channels). One column (a matrix-vector product) and 16 or more are as fast
    or faster as they are (``docs/benchmarks.md``, "Models table").
    """
    return cols in THIN_WIDTHS and rows >= max(THIN_MIN_ROWS, 2 * cols)


def transpose_thin_matmuls(graph: fx.Graph) -> int:
    """Rewrite, in place, every CPU ``aten.mm(a, b)`` of a float ATen graph whose output
    :func:`thin_matmul_rule` picks as ``clone(permute(mm(b^T, a^T)))``: the same
    numbers, contiguous like the original (the transposes are views; the copy of the
    ``[rows, cols]`` result is small). Return how many were rewritten.

    Runs as inductor's ``post_grad_custom_post_pass`` on the forward and the backward
    graph (the weight gradients are there); nodes need their ``val`` (inductor's
    post-grad graphs and ``make_fx`` graphs have it).
    """
    done = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not ATEN.mm.default:
            continue
        a, b = node.args[0], node.args[1]
        out = example_value(node)
        vals = [example_value(a), example_value(b)]
        if out is None or vals[0] is None or vals[1] is None:
            continue
        if out.device.type != "cpu" or out.dtype not in (torch.float32, torch.float64) \
                or out.dim() != 2 or not thin_matmul_rule(int(out.shape[0]), int(out.shape[1])):
            continue
        with graph.inserting_before(node):
            bt = graph.call_function(ATEN.permute.default, (b, [1, 0]))
            at = graph.call_function(ATEN.permute.default, (a, [1, 0]))
            mm = graph.call_function(ATEN.mm.default, (bt, at))
            back = graph.call_function(ATEN.permute.default, (mm, [1, 0]))
            new = graph.call_function(ATEN.clone.default, (back,),
                                      {"memory_format": torch.contiguous_format})
        # each value from one input's (fake) tensor: a graph traced by make_fx on real
        # tensors gives every node a fake mode of its own
        bt.meta["val"], at.meta["val"] = vals[1].permute(1, 0), vals[0].permute(1, 0)
        mm.meta["val"] = out.new_empty((int(out.shape[1]), int(out.shape[0])))
        back.meta["val"] = mm.meta["val"].permute(1, 0)
        new.meta["val"] = out  # contiguous [rows, cols], as the product it replaces
        for n in (bt, at, mm, back, new):
            n.meta.setdefault("stack_trace", node.meta.get("stack_trace"))
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        done += 1
    if done:
        graph.lint()
    return done


register(Entry(
    "transpose_thin_matmuls",
    "A CPU float ``mm`` whose output has 2-15 columns and at least 16 rows (and twice "
    "its width) is computed as ``(b^T @ a^T)^T`` and copied back contiguous: MKL's "
    "GEMM is slow for such thin outputs. Applies to forward and backward ATen graphs "
    "on the CPU; the weight gradient of a linear layer of few input features (atom or "
    "bond features) is its main case.",
    points=("post_grad",), order=50, version=f"1.{THIN_WIDTHS.start}-{THIN_WIDTHS.stop}.{THIN_MIN_ROWS}",
    run=transpose_thin_matmuls))
