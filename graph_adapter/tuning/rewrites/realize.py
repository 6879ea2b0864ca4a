"""Values inductor's fused loops would recompute, stored once (a post-grad rewrite)."""
from __future__ import annotations

from typing import Any, List

import torch
from torch import fx

from ..registry import Entry, register
from ._graph import ATEN, example_value

__all__ = ["realize_recomputed_values"]

_VIEWS = {ATEN.view.default, ATEN.unsqueeze.default, ATEN.expand.default,
          ATEN.reshape.default, ATEN._unsafe_view.default, ATEN.squeeze.dim,
          ATEN.squeeze.default, ATEN.squeeze.dims}
_GATHERS = {ATEN.index.Tensor, ATEN.index_select.default, ATEN.embedding.default}


def _source(node: Any) -> Any:
    """The node a chain of views starts from."""
    while isinstance(node, fx.Node) and node.op == "call_function" and node.target in _VIEWS:
        node = node.args[0]
    return node


def _fused_away(node: Any) -> bool:
    """Whether inductor would inline ``node`` into its consumers (a pointwise op or a
    gather, not stored), so that a consumer looping over more elements recomputes it."""
    if not isinstance(node, fx.Node) or node.op != "call_function":
        return False
    tags = getattr(node.target, "tags", ())
    v = example_value(node)
    return (torch.Tag.pointwise in tags or node.target in _GATHERS) \
        and v is not None and v.numel() > 1 and v.device.type == "cpu" \
        and torch._prims_common.is_non_overlapping_and_dense_or_false(v)


def _recomputed(node: fx.Node) -> List[fx.Node]:
    """The producers whose values ``node`` (an op of a post-grad ATen graph) would
    recompute more than once each, were they inlined into it:

    * a gather's source read through an index longer than the source has rows
      (GCN's ``deg^-1/2`` per node, read at both ends of every edge);
    * an input broadcast along the innermost dimension of a pointwise op
      (``[E, 1]`` against ``[E, D]``: GCN's per-edge norm times the messages), which
      inductor's CPU loops recompute once per vector of that dimension.
    """
    out = example_value(node)
    if node.op != "call_function" or out is None:
        return []
    found: List[fx.Node] = []
    if node.target in _GATHERS:
        src: Any = None
        idx: Any = None
        if node.target is ATEN.index.Tensor:
            src, idxs = node.args[0], node.args[1]
            idx = idxs[0] if len(idxs) == 1 else None
        elif node.target is ATEN.index_select.default:
            src, idx = (node.args[0], node.args[2]) if node.args[1] == 0 else (None, None)
        else:  # embedding(table, indices)
            src, idx = node.args[0], node.args[1]
        vs, vi = example_value(src), example_value(idx)
        if vs is not None and vi is not None and vs.dim() >= 1 \
                and vi.numel() > vs.shape[0] and _fused_away(_source(src)):
            found.append(_source(src))
    elif torch.Tag.pointwise in getattr(node.target, "tags", ()) and out.dim() >= 2 \
            and out.shape[-1] > 1:
        for a in node.args:
            va = example_value(a)
            # (not a mask: one compare is cheaper than a load, and a stored mask kept
            # inductor from vectorising the masked gather it selects: layout="sources")
            if va is not None and va.dtype != torch.bool and va.dim() == out.dim() \
                    and va.shape[-1] == 1 \
                    and va.numel() > 1 and _fused_away(_source(a)):
                found.append(_source(a))
    return found


def realize_recomputed_values(graph: fx.Graph) -> int:
    """Store, in place, the values that inductor would otherwise recompute inside a
    wider loop (:func:`_recomputed`), by ``prims.inductor_force_stride_order`` (the
    op inductor lowers by realizing its input into a buffer, strides as they are);
    return how many were stored.

    Runs on a post-grad ATen graph (nodes with ``val``). Results are unchanged
    (the same ops, stored once then read), only where the work happens.
    """
    from torch._inductor import inductor_prims  # noqa: F401  (registers the op)

    force = torch.ops.prims.inductor_force_stride_order.default
    done = 0
    for node in list(graph.nodes):
        for src in _recomputed(node):
            if any(u.target is force for u in src.users):
                continue  # stored already
            val = src.meta["val"]
            with graph.inserting_after(src):
                stored = graph.call_function(force, (src, list(val.stride())))
            stored.meta["val"] = val
            stored.meta.setdefault("stack_trace", src.meta.get("stack_trace"))
            src.replace_all_uses_with(stored, delete_user_cb=lambda u: u is not stored)
            done += 1
    if done:
        graph.lint()
    return done


# -- the same op on the same inputs, computed once -------------------------------------


register(Entry(
    "realize_recomputed_values",
    "A value that inductor's fused loops would recompute for every edge or every "
    "channel vector (GCN's ``deg ** -0.5`` read through a gather) is stored once "
    "(``inductor_force_stride_order``). Applies to ATen graphs where a pointwise "
    "value of few rows is read by a gather or broadcast to many; boolean masks are "
    "left inline.",
    points=("post_grad",), order=70, version="2", run=realize_recomputed_values))
