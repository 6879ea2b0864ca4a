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

and the gather and scatter move ``K`` channels an edge instead of ``C``
(``SAGEConv(64, 8)``, a last layer into 8 classes: 8 floats an edge instead of
64). The product is as large as before (``x`` has the rows ``A`` had). The sums are
the same in exact arithmetic; in floating point each output differs in the
last bits (the order of the adds changes), as any reassociation does.

Rewritten only where nothing else reads the gathered rows, ``S`` or ``A`` (an
inference graph: a training forward keeps ``A`` for the weight's gradient, and
is left alone), on CPU float tensors, for a zero-filled ``scatter_add`` along
dim 0 whose index is one id per row broadcast over the channels (PyG's
``scatter``), of rows gathered from a 2-D ``x`` by ``aten.index`` /
``aten.index_select`` along dim 0, and a ``mm`` (or an ``addmm`` with unit
``alpha`` / ``beta``) taking ``A`` as its left operand.

The gather form (a sum over a table of rows, :func:`graph_adapter.nn.static_layout.
source_aggregate` on ``layout="sources"`` batches) projects the same way: there ``A``
is a chain of ops that each act on rows alone, so that ``chain(x) @ W = chain(x @ W)``:
gathers of ``x``'s rows (``index`` / ``index_select``), sums of two chain values,
``where(mask, v, 0)`` and a division by a per-row ``[R, 1]`` value, and a ``cat``
along dim 0 with zero blocks. Each op of the chain is rebuilt on ``K`` channels,
``x`` replaced by ``x @ W``, where the chain is read by the product alone and its
gathered tensors hold no more rows than ``A`` (so the new product is no larger).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import fx

from ..registry import Entry, register
from ._graph import ATEN, example_value, is_zeros, only_user, zeros_node

__all__ = ["project_before_aggregate"]

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


def _narrowing_product(mm: fx.Node):
    """``(A, W, (n, c, k))`` of a ``mm(A, W)`` / ``addmm(b, A, W)`` (unit ``alpha`` /
    ``beta``) of CPU float 2-D values whose ``A`` it alone reads and whose ``W`` narrows
    (``k < c``), or None."""
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
            or not only_user(a, mm) or int(wv.shape[1]) >= int(av.shape[1]):
        return None
    return a, w, (int(av.shape[0]), int(av.shape[1]), int(wv.shape[1]))


def _match(mm: fx.Node):
    """The parts of a rewritable ``mm(A, W)`` / ``addmm(b, A, W)``, or None."""
    product = _narrowing_product(mm)
    if product is None:
        return None
    a, w, (n, c, k) = product
    div = None
    s = a
    if a.op == "call_function" and a.target is ATEN.div.Tensor and len(a.args) == 2:
        div = _divisor(a.args[1], n)
        if div is None:
            return None
        s = a.args[0]
        if not isinstance(s, fx.Node) or not only_user(s, a):
            return None
    if s.op != "call_function" or s.target is not ATEN.scatter_add.default \
            or len(s.args) != 4 or s.args[1] != 0 or not is_zeros(s.args[0]):
        return None
    index, msg = s.args[2], s.args[3]
    mv = example_value(msg)
    if not isinstance(index, fx.Node) or mv is None or tuple(mv.shape)[1:] != (c,) \
            or not only_user(msg, s):
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


_ROW_OPS = (ATEN.add.Tensor, ATEN.div.Tensor, ATEN.where.self, ATEN.cat.default)


def _per_row(node: object, rows: int) -> bool:
    """Whether ``node`` is a ``[rows, 1]`` value (a per-row divisor or mask)."""
    v = example_value(node)
    return v is not None and v.dim() == 2 and tuple(v.shape) == (rows, 1)


def _zero_scalar(node: object) -> bool:
    v = example_value(node)
    return is_zeros(node) and v is not None and v.dim() == 0


def _gather_chain(a: fx.Node, c: int):
    """``(interior nodes, leaves)`` of a row-wise chain ending at ``a`` (module doc):
    every interior node a 2-D value of ``c`` channels read only inside the chain (``a``
    by the product alone, checked by the caller), the leaves the 2-D tensors its gathers
    read; or None."""
    interior, leaves, todo = [], [], [a]
    while todo:
        node = todo.pop()
        v = example_value(node)
        if not isinstance(node, fx.Node) or node.op != "call_function" or v is None \
                or v.dim() != 2 or int(v.shape[1]) != c or node.kwargs.get("alpha", 1) != 1:
            return None
        t, args = node.target, node.args
        if node is not a and any(u not in interior for u in node.users):
            return None  # read outside the chain (users come first: checked when popped)
        interior.append(node)
        if t is ATEN.add.Tensor and len(args) == 2:
            todo += [args[0], args[1]]
        elif t is ATEN.div.Tensor and len(args) == 2 and _per_row(args[1], int(v.shape[0])):
            todo.append(args[0])
        elif t is ATEN.where.self and len(args) == 3 and _per_row(args[0], int(v.shape[0])) \
                and _zero_scalar(args[2]):
            todo.append(args[1])
        elif t is ATEN.cat.default and (len(args) < 2 or args[1] in (0, -2)):
            for part in args[0]:
                if is_zeros(part):
                    pv = example_value(part)
                    if pv is None or pv.dim() != 2 or int(pv.shape[1]) != c \
                            or len(part.users) != 1:
                        return None
                    interior.append(part)
                else:
                    todo.append(part)
        else:
            got = _gather(node)
            if got is None or int(example_value(got[0]).shape[1]) != c:
                return None
            if got[0] not in leaves:
                leaves.append(got[0])
    return interior, leaves


def _match_gathers(mm: fx.Node):
    """``(A, W, interior, leaves, (n, c, k))`` of a rewritable ``mm(chain, W)`` /
    ``addmm(b, chain, W)`` of the gather form, or None."""
    product = _narrowing_product(mm)
    if product is None or product[0].target not in _ROW_OPS:
        return None
    a, w, (n, c, k) = product
    found = _gather_chain(a, c)
    if found is None or not found[1]:
        return None
    interior, leaves = found
    if sum(int(example_value(x).shape[0]) for x in leaves) > n:
        return None  # the projected rows would cost more than the product it replaces
    return a, w, interior, leaves, (n, c, k)


def _replace_product(graph: fx.Graph, mm: fx.Node, projected: fx.Node) -> None:
    """Let ``projected`` (the aggregate of projected rows) stand for ``mm`` (plus the bias
    of an ``addmm(b, A, W)``: ``b + A @ W``), and erase ``mm``."""
    new = projected
    if mm.target is not ATEN.mm.default:
        with graph.inserting_before(mm):
            new = graph.call_function(ATEN.add.Tensor, (projected, mm.args[0]))
        new.meta["val"] = mm.meta["val"]
        new.meta.setdefault("stack_trace", mm.meta.get("stack_trace"))
    mm.replace_all_uses_with(new)
    graph.erase_node(mm)


def _project_gathers(graph: fx.Graph, mm: fx.Node, found) -> None:
    """Rebuild the chain of ``found`` (:func:`_match_gathers`) on ``x @ W`` and let it
    replace ``mm``; the old chain is erased."""
    a, w, interior, leaves, (n, c, k) = found
    inside = set(interior)
    new: dict = {}
    with graph.inserting_before(mm):
        for x in leaves:
            proj = graph.call_function(ATEN.mm.default, (x, w))
            proj.meta["val"] = example_value(x).new_empty((int(example_value(x).shape[0]), k))
            new[x] = proj

        def arg_of(value):
            if isinstance(value, (list, tuple)):
                return type(value)(arg_of(v) for v in value)
            return new.get(value, value) if isinstance(value, fx.Node) else value

        for node in [nd for nd in graph.nodes if nd in inside]:  # graph order: topological
            v = example_value(node)
            if is_zeros(node):  # a zero block of a cat
                copy = zeros_node(graph, (int(v.shape[0]), k), v)
            else:
                copy = graph.call_function(node.target, arg_of(node.args), node.kwargs)
                copy.meta["val"] = v.new_empty((int(v.shape[0]), k))
            copy.meta.setdefault("stack_trace", node.meta.get("stack_trace"))
            new[node] = copy
    _replace_product(graph, mm, new[a])
    for node in reversed([nd for nd in graph.nodes if nd in inside]):
        if not node.users:
            graph.erase_node(node)


def project_before_aggregate(graph: fx.Graph) -> int:
    """Rewrite, in place, each matching ``mm(aggregate(x[src]), W)`` of an ATen graph
    with ``K < C`` (module doc) as ``aggregate((x @ W)[src])``; return how many.

    When it applies: CPU float inference graphs of node-level models whose last layer
    narrows a sum or mean aggregation (``SAGEConv(64, 8)`` in node classification);
    a training forward keeps the aggregate for the weight's gradient and is left alone,
    and none of the models table's graph-level models matches.

    Nodes need their ``val`` (inductor's post-grad graphs have it). The old
    gather, scatter and division are erased where nothing else reads them.
    """
    done = 0
    for mm in list(graph.nodes):
        found = _match(mm)
        if found is None:
            gathers = _match_gathers(mm)
            if gathers is not None:
                _project_gathers(graph, mm, gathers)
                done += 1
            continue
        a, w, div, s, dst, x, src, op, (n, c, k, e) = found
        av, xv = example_value(a), example_value(x)
        with graph.inserting_before(mm):
            proj = graph.call_function(ATEN.mm.default, (x, w))
            if op == "index":
                msg = graph.call_function(ATEN.index.Tensor, (proj, [src]))
            else:
                msg = graph.call_function(ATEN.index_select.default, (proj, 0, src))
            zeros = zeros_node(graph, (n, k), av)
            idx = graph.call_function(ATEN.expand.default, (dst, [e, k]))
            new = graph.call_function(ATEN.scatter_add.default, (zeros, 0, idx, msg))
            nodes = [proj, msg, zeros, idx, new]
            if div is not None:
                by = graph.call_function(ATEN.expand.default, (div, [n, k]))
                new = graph.call_function(ATEN.div.Tensor, (new, by))
                nodes += [by, new]
        proj.meta["val"] = xv.new_empty((int(xv.shape[0]), k))
        msg.meta["val"] = xv.new_empty((e, k))
        new_val = zeros.meta["val"]
        idx.meta["val"] = example_value(dst).expand(e, k)
        for node in nodes[4:]:
            node.meta["val"] = new_val
        if div is not None:
            by.meta["val"] = example_value(div).expand(n, k)
        for node in nodes:
            node.meta.setdefault("stack_trace", mm.meta.get("stack_trace"))
        _replace_product(graph, mm, new)
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


register(Entry(
    "project_before_aggregate",
    "A narrowing linear layer (``K < C`` channels) of a sum or mean aggregation "
    "projects the rows before they are gathered and summed, so each edge moves ``K`` "
    "channels instead of ``C``. Applies to CPU float inference graphs only, where "
    "nothing else reads the aggregate (a training forward keeps it for the weight's "
    "gradient): in practice the last GraphSAGE layer of node classification; none of "
    "the models table's graph-level models matches.",
    points=("post_grad",), order=20, version="2", run=project_before_aggregate))
