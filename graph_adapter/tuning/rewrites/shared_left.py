"""Thin products of one left operand computed as one product (a post-grad rewrite).

After :func:`.project_aggregate.project_before_aggregate`, a GraphSAGE layer
into a few classes (``SAGEConv(64, 8)``) multiplies its input ``h`` ``[N, 64]`` by
two ``[64, 8]`` weights (``lin_l``'s, projected before the aggregation, and
``lin_r``'s). Each thin product is computed transposed
(:func:`.thin_matmuls.transpose_thin_matmuls`) and copied back; one
``[N, 64] x [64, 16]`` product of the concatenated weights costs about half as
much as the two on the CPU (``docs/dev/RESULTS.md``, "Node demo inference: the
last layer projected"). :func:`merge_shared_left_mms` computes the products
``mm(x, W_i)`` of one ``x`` whose widths are all thin (``THIN_WIDTHS``) as
``mm(x, cat(W_i, 1))`` and hands each user its columns (a view). Every
output is the same sum of the same products; the order of the additions inside
the GEMM may differ, as between any two GEMM calls of other shapes.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import torch
from torch import fx

from ..registry import Entry, register
from ._graph import ATEN, example_value
from .thin_matmuls import THIN_WIDTHS

__all__ = ["merge_shared_left_mms", "SHARED_MAX_WIDTH"]

#: The merged product's widest output (sum of the merged widths).
SHARED_MAX_WIDTH = 64


def _thin_mm(node: fx.Node, x: fx.Node) -> bool:
    """A CPU float ``mm(x, w)`` whose output width is thin and that is no graph output."""
    if node.op != "call_function" or node.target is not ATEN.mm.default \
            or len(node.args) != 2 or node.kwargs or node.args[0] is not x:
        return False
    if any(u.op == "output" for u in node.users):
        return False  # a graph output keeps its contiguous layout (a slice would not)
    out, w = example_value(node), example_value(node.args[1])
    return out is not None and w is not None and out.dim() == 2 and w.dim() == 2 \
        and out.device.type == "cpu" and out.dtype in (torch.float32, torch.float64) \
        and int(out.shape[1]) in THIN_WIDTHS


def _available(w: fx.Node, at: fx.Node, order: Dict[fx.Node, int], graph: fx.Graph
               ) -> Optional[fx.Node]:
    """``w`` if it is computed before ``at``; else a copy placed before ``at`` when ``w``
    is a ``permute`` / ``t`` of a node computed before ``at`` (a weight's transpose placed just
    before its own product); else None."""
    if order[w] < order[at]:
        return w
    if w.op == "call_function" and w.target in (ATEN.permute.default, ATEN.t.default) \
            and isinstance(w.args[0], fx.Node) and order[w.args[0]] < order[at]:
        with graph.inserting_before(at):
            copy = graph.call_function(w.target, tuple(w.args))
        copy.meta["val"] = example_value(w)
        return copy
    return None


def merge_shared_left_mms(graph: fx.Graph) -> int:
    """Rewrite, in place, each group of two or more thin CPU ``mm(x, W_i)`` of one ``x``
    (total width at most :data:`SHARED_MAX_WIDTH`) as one ``mm(x, cat(W_i, 1))`` whose
    column slices replace them; return how many products were merged away.

    Runs before :func:`.thin_matmuls.transpose_thin_matmuls` (the merged product is
    no longer thin). Nodes need their ``val`` (inductor's post-grad graphs have it).
    """
    done = 0
    order = {n: i for i, n in enumerate(graph.nodes)}
    for x in list(graph.nodes):
        mms = [u for u in x.users if _thin_mm(u, x)]
        if len(mms) < 2:
            continue
        mms.sort(key=order.__getitem__)
        mms_kept: List[fx.Node] = []
        width = 0
        for mm in mms:
            k = int(example_value(mm).shape[1])
            if width + k <= SHARED_MAX_WIDTH:
                mms_kept.append(mm)
                width += k
        if len(mms_kept) < 2:
            continue
        at = mms_kept[0]
        weights = [_available(mm.args[1], at, order, graph) for mm in mms_kept]
        if any(w is None for w in weights):
            continue
        with graph.inserting_before(at):
            cat = graph.call_function(ATEN.cat.default, (weights, 1))
            merged = graph.call_function(ATEN.mm.default, (x, cat))
        xv = example_value(x)
        cat.meta["val"] = example_value(weights[0]).new_empty((int(xv.shape[1]), width))
        merged.meta["val"] = xv.new_empty((int(xv.shape[0]), width))
        start, parts = 0, []
        for mm in mms_kept:  # all placed before `at`, erased only once they are in
            k = int(example_value(mm).shape[1])
            with graph.inserting_before(at):
                part = graph.call_function(ATEN.slice.Tensor, (merged, 1, start, start + k))
            part.meta["val"] = merged.meta["val"][:, start:start + k]
            for n in (cat, merged, part):
                n.meta.setdefault("stack_trace", mm.meta.get("stack_trace"))
            parts.append(part)
            start += k
        for mm, part in zip(mms_kept, parts):
            mm.replace_all_uses_with(part)
            w = mm.args[1]
            graph.erase_node(mm)
            if isinstance(w, fx.Node) and w.op == "call_function" and not w.users:
                graph.erase_node(w)
        done += len(mms_kept) - 1
        order = {n: i for i, n in enumerate(graph.nodes)}
    if done:
        graph.lint()
    return done


register(Entry(
    "merge_shared_left_mms",
    "Two or more thin CPU products of one left operand (``mm(x, W_i)``, each 2-15 "
    "columns wide, at most 64 together) become one ``mm(x, cat(W_i))`` whose column "
    "slices replace them. Applies to CPU float ATen graphs; in practice SAGEConv's "
    "``lin_l`` (projected by ``project_before_aggregate``) and ``lin_r`` of a narrow "
    "last layer, in inference.",
    points=("post_grad",), order=40, version=f"2.{SHARED_MAX_WIDTH}", run=merge_shared_left_mms))
