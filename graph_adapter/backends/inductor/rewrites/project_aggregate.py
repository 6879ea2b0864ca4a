"""A narrowing linear layer of a sum or mean aggregation projects before it (a post-grad rewrite).

PyG's ``SAGEConv`` (and every layer of the form ``lin(aggregate(x[src]))``)
gathers the source rows, sums them per target node with a ``scatter_add`` and
then applies the linear layer: in an ATen graph,

    S = scatter_add(zeros[N, C], 0, dst.view(-1, 1).expand(E, C), x[src])
    A = S / count.view(-1, 1).expand(N, C)          (mean; absent for sum)
    out = mm(A, W)                                  W: [C, K]

The product distributes over the sum and the per-row division, so with
``K < C`` the same ``out`` is

    out = scatter_add(zeros[N, K], 0, dst..., (x @ W)[src]) / count...

and the gather and scatter move ``K`` channels an edge instead of ``C``: the
node demo's last GraphSAGE layer (64 channels into 8 classes) scattered 64
floats for each of its 11,424 edges, serially on one thread; now 8. The
product is as large as before (``x`` has the rows ``A`` had). The sums are
the same in exact arithmetic; in floating point each output differs in the
last bits (the order of the adds changes), as any reassociation does.

Rewritten only where nothing else reads the gathered rows, ``S`` or ``A`` (an
inference graph: a training forward keeps ``A`` for the weight's gradient, and
is left alone), on CPU float tensors, for a zero-filled ``scatter_add`` along
dim 0 whose index is one id per row broadcast over the channels (PyG's
``scatter``), of rows gathered from a 2-D ``x`` by ``aten.index`` /
``aten.index_select`` along dim 0, and a ``mm`` (or an ``addmm`` with unit
``alpha`` / ``beta``) taking ``A`` as its left operand.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import fx

from ._graph import ATEN, example_value

__all__ = ["project_before_aggregate", "PROJECT_VERSION", "PROJECT_AGGREGATES", "project_key"]

#: Bumped whenever :func:`project_before_aggregate` changes what it rewrites
#: (inductor's cache keys compiled graphs by the pass's ``uuid()``).
PROJECT_VERSION = 1

#: Off: :func:`project_before_aggregate` rewrites nothing (read when a graph is
#: compiled, and part of the pass's cache key: :func:`project_key`).
PROJECT_AGGREGATES = True


def project_key() -> str:
    """This rewrite's part of the post-grad pass's ``uuid()``: its version, or off."""
    return f"project{PROJECT_VERSION}" if PROJECT_AGGREGATES else "project-off"


def _only_user(node: fx.Node, user: fx.Node) -> bool:
    return len(node.users) == 1 and next(iter(node.users)) is user


def _is_zeros(node: object) -> bool:
    """``aten.full(shape, 0)`` / ``aten.zeros(shape)`` / ``aten.new_zeros``."""
    if not isinstance(node, fx.Node) or node.op != "call_function":
        return False
    if node.target is ATEN.full.default:
        return len(node.args) > 1 and node.args[1] == 0
    return node.target in (ATEN.zeros.default, ATEN.new_zeros.default)


def _row_index(index: fx.Node, rows: int, cols: int) -> Optional[fx.Node]:
    """The ``[E, 1]`` (or ``[E]``) node that ``index`` broadcasts over ``cols`` channels
    (``expand(view(dst, [-1, 1]), [E, C])``), or None."""
    if index.op != "call_function" or index.target is not ATEN.expand.default:
        return None
    base = index.args[0]
    v = example_value(base)
    if v is None or v.dim() != 2 or tuple(v.shape) != (rows, 1):
        return None
    return base


def _gather(node: object) -> Optional[Tuple[fx.Node, fx.Node, str]]:
    """``(x, src, op)`` of ``x[src]`` along dim 0 with a 2-D ``x`` and a 1-D integer ``src``."""
    if not isinstance(node, fx.Node) or node.op != "call_function":
        return None
    if node.target is ATEN.index.Tensor and len(node.args) == 2:
        x, idx = node.args
        if not (isinstance(idx, (list, tuple)) and len(idx) == 1):
            return None
        src, op = idx[0], "index"
    elif node.target is ATEN.index_select.default and len(node.args) == 3 \
            and node.args[1] == 0:
        x, _, src = node.args
        op = "index_select"
    else:
        return None
    xv, sv = example_value(x), example_value(src)
    if xv is None or sv is None or xv.dim() != 2 or sv.dim() != 1 \
            or sv.dtype not in (torch.int64, torch.int32):
        return None
    return x, src, op


def _divisor(node: fx.Node, rows: int) -> Optional[fx.Node]:
    """The ``[N, 1]`` node a mean's ``div`` broadcasts (``expand(view(count), [N, C])``
    or the ``[N, 1]`` tensor itself), or None."""
    if not isinstance(node, fx.Node):
        return None
    if node.op == "call_function" and node.target is ATEN.expand.default:
        node = node.args[0]
    v = example_value(node)
    if v is None or v.dim() != 2 or tuple(v.shape) != (rows, 1):
        return None
    return node


def _match(mm: fx.Node):
    """The parts of a rewritable ``mm(A, W)`` / ``addmm(b, A, W)``, or None."""
    if mm.op != "call_function":
        return None
    if mm.target is ATEN.mm.default and len(mm.args) == 2 and not mm.kwargs:
        a, w = mm.args
    elif mm.target is ATEN.addmm.default and len(mm.args) == 3 \
            and all(mm.kwargs.get(k, 1) == 1 for k in ("alpha", "beta")):
        a, w = mm.args[1], mm.args[2]
    else:
        return None
    av, wv = example_value(a), example_value(w)
    if av is None or wv is None or av.dim() != 2 or wv.dim() != 2 \
            or av.device.type != "cpu" or av.dtype not in (torch.float32, torch.float64) \
            or not _only_user(a, mm):
        return None
    n, c = int(av.shape[0]), int(av.shape[1])
    k = int(wv.shape[1])
    if k >= c:
        return None
    div = None
    s = a
    if a.op == "call_function" and a.target is ATEN.div.Tensor and len(a.args) == 2:
        div = _divisor(a.args[1], n)
        if div is None:
            return None
        s = a.args[0]
        if not isinstance(s, fx.Node) or not _only_user(s, a):
            return None
    if s.op != "call_function" or s.target is not ATEN.scatter_add.default \
            or len(s.args) != 4 or s.args[1] != 0 or not _is_zeros(s.args[0]):
        return None
    index, msg = s.args[2], s.args[3]
    mv = example_value(msg)
    if not isinstance(index, fx.Node) or mv is None or tuple(mv.shape)[1:] != (c,) \
            or not _only_user(msg, s):
        return None
    e = int(mv.shape[0])
    dst = _row_index(index, e, c)
    got = _gather(msg)
    if dst is None or got is None:
        return None
    x, src, op = got
    if int(example_value(x).shape[1]) != c:
        return None
    return a, w, div, s, dst, x, src, op, (n, c, k, e)


def project_before_aggregate(graph: fx.Graph) -> int:
    """Rewrite, in place, each matching ``mm(aggregate(x[src]), W)`` of an ATen graph
    with ``K < C`` (module doc) as ``aggregate((x @ W)[src])``; return how many.

    Nodes need their ``val`` (inductor's post-grad graphs have it). The old
    gather, scatter and division are erased where nothing else reads them.
    """
    done = 0
    if not PROJECT_AGGREGATES:
        return done
    for mm in list(graph.nodes):
        found = _match(mm)
        if found is None:
            continue
        a, w, div, s, dst, x, src, op, (n, c, k, e) = found
        av, xv = example_value(a), example_value(x)
        with graph.inserting_before(mm):
            proj = graph.call_function(ATEN.mm.default, (x, w))
            if op == "index":
                msg = graph.call_function(ATEN.index.Tensor, (proj, [src]))
            else:
                msg = graph.call_function(ATEN.index_select.default, (proj, 0, src))
            zeros = graph.call_function(
                ATEN.full.default, ([n, k], 0),
                {"dtype": av.dtype, "layout": torch.strided, "device": av.device,
                 "pin_memory": False})
            idx = graph.call_function(ATEN.expand.default, (dst, [e, k]))
            new = graph.call_function(ATEN.scatter_add.default, (zeros, 0, idx, msg))
            nodes = [proj, msg, zeros, idx, new]
            if div is not None:
                by = graph.call_function(ATEN.expand.default, (div, [n, k]))
                new = graph.call_function(ATEN.div.Tensor, (new, by))
                nodes += [by, new]
        proj.meta["val"] = xv.new_empty((int(xv.shape[0]), k))
        msg.meta["val"] = xv.new_empty((e, k))
        zeros.meta["val"] = new_val = av.new_empty((n, k))
        idx.meta["val"] = example_value(dst).expand(e, k)
        for node in nodes[4:]:
            node.meta["val"] = new_val
        if div is not None:
            by.meta["val"] = example_value(div).expand(n, k)
        for node in nodes:
            node.meta.setdefault("stack_trace", mm.meta.get("stack_trace"))
        if mm.target is ATEN.mm.default:
            mm.replace_all_uses_with(new)
        else:  # addmm(b, A, W) = b + A @ W
            with graph.inserting_before(mm):
                add = graph.call_function(ATEN.add.Tensor, (new, mm.args[0]))
            add.meta["val"] = mm.meta["val"]
            add.meta.setdefault("stack_trace", mm.meta.get("stack_trace"))
            mm.replace_all_uses_with(add)
        graph.erase_node(mm)
        # the old aggregation, now unread (each had one user, checked by _match)
        old = [a] + ([s] if s is not a else []) + [s.args[3], s.args[0], s.args[2]]
        if div is not None:
            old.append(a.args[1])
        for node in old:
            if isinstance(node, fx.Node) and not node.users:
                graph.erase_node(node)
        done += 1
    if done:
        graph.lint()
    return done
