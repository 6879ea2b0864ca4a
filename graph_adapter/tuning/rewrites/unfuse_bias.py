"""A CPU ``addmm`` as ``mm`` + a pointwise add (a post-grad rewrite, CPU inference).

On the CPU, inductor calls ATen's ``addmm(bias, a, b)`` for a linear layer
(and for ``mm(a, b) + c``, a second product added to a first). ATen copies
``bias`` (broadcast to the output's shape) into the output first, then runs
the GEMM with ``beta=1``: one more pass over the output, and a chained
``addmm(addmm(...), x, w)`` (SAGEConv's ``lin_l(aggr) + lin_r(x)``) copies a
whole ``[rows, cols]`` product. Inductor's own rewrite of this
(``unfuse_bias_add_to_pointwise``) runs on GPUs only. :func:`unfuse_bias_addmm`
turns such an ``addmm`` into ``add(mm(a, b), bias)`` where the add can fuse into
a generated kernel: every user of the ``addmm`` is pointwise (or a view whose
users are), or its product is one that :func:`.thin_matmuls.transpose_thin_matmuls`
computes transposed (its copy back to the row-major layout takes the add).

The sum ``a @ b + bias`` is the same in exact arithmetic; ATen's ``addmm`` adds
``bias`` inside the GEMM's accumulation and the rewrite adds it after, so the
last bit can differ (``tests/tuning/test_unfuse_bias.py`` bounds it).
"""
from __future__ import annotations

import torch
from torch import fx

from ..registry import Entry, register
from ._graph import ATEN, example_value
from .thin_matmuls import thin_matmul_rule

__all__ = ["unfuse_bias_addmm"]


def _pointwise_use(user: fx.Node) -> bool:
    """Whether ``user`` is a pointwise ATen op, or a view whose users all are."""
    target = user.target
    if user.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    if torch.Tag.pointwise in target.tags:
        return True
    schema = target._schema
    is_view = bool(schema.returns) and schema.returns[0].alias_info is not None \
        and not schema.is_mutable
    return is_view and bool(user.users) and all(_pointwise_use(u) for u in user.users)


def _unit(node: fx.Node, name: str) -> bool:
    value = node.kwargs.get(name, 1)
    return isinstance(value, (int, float)) and value == 1


def _rewritable(node: fx.Node) -> bool:
    """A CPU float ``addmm(inp, a, b)`` with ``alpha = beta = 1`` whose add can fuse."""
    if node.op != "call_function" or node.target is not ATEN.addmm.default \
            or len(node.args) != 3 or not (_unit(node, "alpha") and _unit(node, "beta")):
        return False
    out = example_value(node)
    if out is None or out.device.type != "cpu" \
            or out.dtype not in (torch.float32, torch.float64) or out.dim() != 2:
        return False
    if thin_matmul_rule(int(out.shape[0]), int(out.shape[1])):
        return True  # the transposed product's copy back takes the add
    return bool(node.users) and all(_pointwise_use(u) for u in node.users)


def unfuse_bias_addmm(graph: fx.Graph) -> int:
    """Rewrite, in place, each :func:`_rewritable` ``aten.addmm(inp, a, b)`` of an ATen
    graph as ``aten.add(aten.mm(a, b), inp)``; return how many were rewritten.

    Consumers first (reverse order): an ``addmm`` that feeds another as its
    ``inp`` (a chain) becomes rewritable once that one is an ``add``. Nodes
    need their ``val`` (inductor's post-grad graphs have it). Runs before
    :func:`.thin_matmuls.transpose_thin_matmuls`, which then sees the ``mm``.
    """
    done = 0
    for node in reversed(list(graph.nodes)):
        if not _rewritable(node):
            continue
        inp, a, b = node.args
        with graph.inserting_before(node):
            mm = graph.call_function(ATEN.mm.default, (a, b))
            add = graph.call_function(ATEN.add.Tensor, (mm, inp))
        mm.meta["val"] = add.meta["val"] = node.meta["val"]
        node.replace_all_uses_with(add)
        graph.erase_node(node)
        done += 1
    return done


register(Entry(
    "unfuse_bias_addmm",
    "A CPU inference graph's ``addmm(bias, a, b)`` becomes ``add(mm(a, b), bias)`` where "
    "the add fuses into a generated kernel (every user pointwise, or a thin product "
    "that is computed transposed): ATen's CPU ``addmm`` copies the bias, or a chained "
    "product, into its output first. Inductor's own rewrite of this runs on GPUs only. "
    "Applies to CPU float inference graphs only (compiled without grad mode); runs first "
    "in the post-grad slot, before the thin-product rewrites.",
    points=("post_grad",), order=10, version="1", run=unfuse_bias_addmm, cpu_inference_only=True))
