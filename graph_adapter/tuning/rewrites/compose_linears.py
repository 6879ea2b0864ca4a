"""A linear layer of a linear layer composed into one product (a pre-grad rewrite)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import fx

from ..registry import Entry, register
from ._graph import LINEAR, ATEN, arg, example_value

__all__ = ["compose_linears", "compose_linears_rule"]

#: :func:`compose_linears` rewrites when the inner linear's input is at most this share
#: of its output width (the composed product is then at most this share of the outer one).
_MAX_WIDTH_SHARE = 0.5


def compose_linears_rule(rows: int, k: int, d: int) -> bool:
    """Whether ``linear(linear(x, W1, b1), W2, b2)``, ``x`` of ``rows`` rows and ``k``
    features, ``W1`` ``[d, k]``, is computed as ``linear(x, W2 @ W1, W2 @ b1 + b2)``.

    The outer product costs ``rows * d * d_out`` multiply-adds, the composed one
    ``rows * k * d_out`` plus ``d_out * d * k`` for ``W2 @ W1``: it pays when ``k`` is
    well below ``d`` (a linear that widens few raw features, the 3 bond features of
    molecules into 64 channels, then a per-layer edge projection ``GINEConv(edge_dim=)``'s
    ``lin``) and the rows outnumber the inner width.
    """
    return k <= _MAX_WIDTH_SHARE * d and rows >= d


def compose_linears(graph: fx.Graph) -> int:
    """Rewrite, in place, every ``linear(linear(x, W1, b1), W2, b2)`` of a Dynamo
    (torch-level) graph that :func:`compose_linears_rule` picks as
    ``linear(x, W2 @ W1, linear(b1, W2, b2))``; return how many were rewritten.

    The same function (a product of products is associative), up to float rounding:
    shapes are ``x [*, k]``, ``W1 [d, k]``, ``b1 [d]``, ``W2 [d_out, d]``, ``b2 [d_out]``
    (either bias may be missing). The inner linear stays for its other users, and is
    removed later by inductor's dead-code passes when all of them were rewritten.
    Autograd differentiates the rewritten graph (AOTAutograd runs after this pass),
    so the weights' gradients are those of the same function.
    """
    done = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in LINEAR \
                or node.target is ATEN.linear.default:
            continue
        inner = arg(node, 0, "input")
        w2, b2 = arg(node, 1, "weight"), arg(node, 2, "bias")
        if not isinstance(inner, fx.Node) or inner.op != "call_function" \
                or inner.target not in LINEAR or inner.target is ATEN.linear.default:
            continue
        x, w1, b1 = arg(inner, 0, "input"), arg(inner, 1, "weight"), arg(inner, 2, "bias")
        if not all(isinstance(n, fx.Node) for n in (x, w1, w2)) \
                or any(b is not None and not isinstance(b, fx.Node) for b in (b1, b2)):
            continue
        vx, v1, v2 = example_value(x), example_value(w1), example_value(w2)
        if vx is None or v1 is None or v2 is None or v1.dim() != 2 or v2.dim() != 2 \
                or vx.dim() < 1 or vx.shape[-1] == 0:
            continue
        d, k = int(v1.shape[0]), int(v1.shape[1])
        if not compose_linears_rule(int(vx.numel()) // k, k, d):
            continue
        with graph.inserting_before(node):
            weight = graph.call_function(torch.matmul, (w2, w1))  # [d_out, k]
            bias = b2 if b1 is None else graph.call_function(F.linear, (b1, w2, b2))
            out = graph.call_function(F.linear, (x, weight, bias))
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        done += 1
    if done:
        graph.lint()  # no dead-code elimination here: see project_embedding_tables
    return done


register(Entry(
    "compose_linears",
    "A linear layer of a linear layer whose input is narrow (at most half the inner "
    "width, and more rows than that width) becomes one product of the raw input: "
    "``linear(linear(x, W1, b1), W2, b2)`` as ``linear(x, W2 @ W1, W2 @ b1 + b2)``. "
    "Applies to Dynamo's graphs of every device, training and inference: GINE's "
    "per-layer edge projections of encoded 3-feature bonds are its case.",
    points=("pre_grad",), order=10, version="1", run=compose_linears))
