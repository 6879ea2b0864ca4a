"""Graph rewrites applied to a model's graphs when inductor compiles them.

Five rewrites at two pass points (inductor has one slot per point, so one
``CustomGraphPass`` runs every rewrite of its point). Before autograd
(``pre_grad_custom_pass``, on Dynamo's torch-level graphs): :func:`compose_linears`
(a linear layer of a linear layer, e.g. a per-layer edge projection of encoded
bond features, becomes one product of the raw features), then
:func:`project_embedding_tables` (below).
After autograd (``post_grad_custom_post_pass``, on the ATen graphs inductor
lowers): :func:`transpose_thin_matmuls`, :func:`dedupe_pure_ops` (an inference
graph's per-layer copies of one computation, GCN's ``gcn_norm``, computed once)
and :func:`realize_recomputed_values` (a value that inductor's fused loops would
recompute per edge or per vector is stored once, GCN's normalisation). Each is
described at its definition; the embedding-table projection here.

:func:`project_embedding_tables`: a linear layer applied to a
sum of embedding lookups is applied to the tables instead,

    linear(T_1[i_1] + ... + T_k[i_k], W, b)  ->  (T_1 W^T)[i_1] + ... + (T_k W^T)[i_k] + b

which is the same function (a matrix product distributes over the sum, and
commutes with a row lookup). It pays when the tables have far fewer rows
than the lookups: the categorical atom and bond encoders of molecular GNNs
(OGB's ``AtomEncoder`` / ``BondEncoder``, the demo's ``AtomBondEncoder``)
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
matched only the torch-level ops Dynamo records, so the exported ``.pt2``
kept the four ``[E, 64] x [64, 64]`` products (its program ran at 1.7x eager
PyG, the compiled one at 2.6x, same budget and process). There no op may
write to a table (an in-place ``embedding_renorm_`` of ``max_norm`` would
change it before the lookup).
"""
from __future__ import annotations

import functools
import operator
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import fx

__all__ = ["project_embedding_tables", "project_embedding_tables_pass",
           "transpose_thin_matmuls", "thin_matmul_rule", "transpose_thin_matmuls_pass",
           "compose_linears", "compose_linears_rule", "realize_recomputed_values",
           "dedupe_pure_ops"]

_aten = torch.ops.aten
_LINEAR = (torch._C._nn.linear, F.linear, _aten.linear.default)
_EMBEDDING = (F.embedding,)
_ATEN_EMBEDDING = (_aten.embedding.default,)
_ADD = (operator.add, torch.add, operator.iadd)
_ATEN_ADD = (_aten.add.Tensor,)

#: The rewrite pays when the tables' rows are at most this share of the lookups.
_MAX_ROW_SHARE = 0.5


def _arg(node: fx.Node, i: int, name: str, default=None):
    """Positional-or-keyword argument ``name`` (position ``i``) of a call node."""
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def _aten_lookup(node: fx.Node) -> Optional[Tuple[fx.Node, fx.Node]]:
    """``(index, table)`` if ``node`` is a plain ``aten.embedding(table, index)``
    (``padding_idx=-1``: none) of a table that no op writes to."""
    table, index = _arg(node, 0, "weight"), _arg(node, 1, "indices")
    if not isinstance(index, fx.Node) or not isinstance(table, fx.Node):
        return None
    if _arg(node, 2, "padding_idx", -1) != -1 or _arg(node, 3, "scale_grad_by_freq", False) \
            or _arg(node, 4, "sparse", False):
        return None
    if _written(table):
        return None
    return index, table


def _written(table: fx.Node) -> bool:
    """Whether an ATen op of the graph writes ``table`` or a view of it: ``max_norm``'s
    ``embedding_renorm_(detach(table), ...)`` renormalises the rows in place before the
    lookup reads them, which the projected copy would not see."""
    seen, todo = {table}, [table]
    while todo:
        for user in todo.pop().users:
            schema = getattr(user.target, "_schema", None)
            if user.op != "call_function" or schema is None or user in seen:
                continue
            if schema.is_mutable:
                return True
            if any(r.alias_info is not None for r in schema.returns):  # detach, view, ...
                seen.add(user)
                todo.append(user)
    return False


def _lookup(node: fx.Node) -> Optional[Tuple[fx.Node, fx.Node]]:
    """``(index, table)`` if ``node`` is a plain ``F.embedding`` (or ATen) call."""
    if node.op == "call_function" and node.target in _ATEN_EMBEDDING:
        return _aten_lookup(node)
    if node.op != "call_function" or node.target not in _EMBEDDING:
        return None
    index, table = _arg(node, 0, "input"), _arg(node, 1, "weight")
    if not isinstance(index, fx.Node) or not isinstance(table, fx.Node):
        return None
    if _arg(node, 2, "padding_idx") is not None or _arg(node, 3, "max_norm") is not None \
            or _arg(node, 5, "scale_grad_by_freq", False) or _arg(node, 6, "sparse", False):
        return None
    return index, table


def _terms(node: fx.Node, aten: bool) -> Optional[List[Tuple[fx.Node, fx.Node]]]:
    """The lookups whose sum ``node`` is (``a + b`` nested any way), or ``None``;
    ``aten``: of ATen ops only (an exported program), else of torch-level ones."""
    if node.op == "call_function" and node.target in (_ATEN_EMBEDDING if aten else _EMBEDDING):
        one = _lookup(node)
        return None if one is None else [one]
    adds = _ATEN_ADD if aten else _ADD
    if node.op != "call_function" or node.target not in adds or node.kwargs \
            or len(node.args) != 2 or not all(isinstance(a, fx.Node) for a in node.args):
        return None
    left, right = (_terms(a, aten) for a in node.args)  # type: ignore[arg-type]
    return None if left is None or right is None else left + right


def _value(node: fx.Node) -> Optional[torch.Tensor]:
    v = node.meta.get("example_value", node.meta.get("val"))
    return v if isinstance(v, torch.Tensor) else None


def _pays(terms: List[Tuple[fx.Node, fx.Node]], out: fx.Node) -> bool:
    """Whether the tables hold few enough rows (static shapes only)."""
    lookups, rows = _value(out), [_value(t) for _, t in terms]
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
    "cat": _aten.cat.default, "linear": _aten.linear.default, "add": _aten.add.Tensor,
    "rows": _aten.slice.Tensor, "rows_args": lambda t, start, n: (t, 0, start, start + n),
    "lookup": _aten.embedding.default, "lookup_args": lambda i, t: (t, i)}


def project_embedding_tables(graph: fx.Graph) -> int:
    """Rewrite every ``linear(sum of embedding lookups)`` of ``graph`` in place (module
    doc); return how many linears were rewritten. The caller recompiles the module
    (inductor does after its pre-grad passes)."""
    done = 0
    stacked: Dict[Tuple[fx.Node, ...], fx.Node] = {}
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _LINEAR:
            continue
        inp, weight, bias = _arg(node, 0, "input"), _arg(node, 1, "weight"), _arg(node, 2, "bias")
        if not isinstance(inp, fx.Node) or not isinstance(weight, fx.Node):
            continue
        aten = node.target is _aten.linear.default  # an exported (ATen) program
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
                rows = int(_value(table).shape[0])  # type: ignore[union-attr]
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


#: Bumped whenever the pre-grad rewrites (:func:`compose_linears`, then
#: :func:`project_embedding_tables`) change what they rewrite (inductor's cache keys
#: compiled graphs by it). 4: :func:`compose_linears` added.
PASS_VERSION = 4


def _counting_pass(name: str, rewrites: Tuple[str, ...], uuid: Callable[[], str],
                   doc: str) -> type:
    """A ``CustomGraphPass`` class (inductor caches graphs by its ``uuid()``) whose
    instances run this module's functions ``rewrites`` on a graph, in turn, and count
    in ``rewritten`` what they rewrote (a graph loaded from inductor's cache is not
    rewritten again: it was already). Inductor has one slot per pass point, so one
    pass runs every rewrite of its point. Built on first use: importing
    ``torch._inductor`` is slow (see _inductor_cpu)."""
    from torch._inductor.custom_graph_pass import CustomGraphPass

    def __call__(self, graph: fx.Graph) -> None:
        for rewrite in rewrites:
            # looked up at each call: a test may have replaced the function
            self.rewritten += globals()[rewrite](graph)

    return type(name, (CustomGraphPass,), {"__doc__": doc, "__module__": __name__,
                                           "rewritten": 0, "__call__": __call__,
                                           "uuid": lambda self: uuid()})


@functools.lru_cache(maxsize=None)
def _pass_class() -> type:
    return _counting_pass(
        "ProjectEmbeddingTables", ("compose_linears", "project_embedding_tables"),
        lambda: f"graph_adapter.ProjectEmbeddingTables.v{PASS_VERSION}",
        "Inductor's ``pre_grad_custom_pass``: :func:`compose_linears` (a linear of a "
        "linear), then :func:`project_embedding_tables`.")


def project_embedding_tables_pass() -> Any:
    """A fresh instance of the pre-grad pass (a ``CustomGraphPass``, so inductor caches)."""
    return _pass_class()()


# -- transposed thin matrix products ------------------------------------------------

#: Output widths for which :func:`thin_matmul_rule` computes the transposed product.
THIN_WIDTHS = range(2, 16)
#: ... when the output has at least this many rows (and twice its width).
THIN_MIN_ROWS = 16


def thin_matmul_rule(rows: int, cols: int) -> bool:
    """Whether an ``[rows, K] x [K, cols]`` product on the CPU is computed as
    ``([cols, K] x [K, rows])^T`` (:func:`transpose_thin_matmuls`).

    MKL's sgemm (torch 2.13's CPU ``mm``) is slow when the output has 2-15
    columns and many rows: the weight gradient ``g^T @ x`` of a linear layer of
    few input features (9 atom or 3 bond features into 64-128 channels) took
    254 us for ``[128, 1041] x [1041, 9]`` against 45 us for the same numbers as
    ``([9, 1041] x [1041, 128])^T``; ``[64, 2138] x [2138, 3]``: 171 us against
    36 us (1 thread, AMD EPYC, AVX-512, every operand layout 1.3-14x; float64
    2.3-2.6x). One column (a matrix-vector product) and 16 or more are as fast
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
    aten = torch.ops.aten
    done = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.mm.default:
            continue
        a, b = node.args[0], node.args[1]
        out = node.meta.get("val")
        vals = [n.meta.get("val") if isinstance(n, fx.Node) else None for n in (a, b)]
        if not (isinstance(out, torch.Tensor) and all(isinstance(v, torch.Tensor) for v in vals)):
            continue
        if out.device.type != "cpu" or out.dtype not in (torch.float32, torch.float64) \
                or out.dim() != 2 or not thin_matmul_rule(int(out.shape[0]), int(out.shape[1])):
            continue
        with graph.inserting_before(node):
            bt = graph.call_function(aten.permute.default, (b, [1, 0]))
            at = graph.call_function(aten.permute.default, (a, [1, 0]))
            mm = graph.call_function(aten.mm.default, (bt, at))
            back = graph.call_function(aten.permute.default, (mm, [1, 0]))
            new = graph.call_function(aten.clone.default, (back,),
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


#: Bumped whenever :func:`transpose_thin_matmuls` changes what it rewrites.
_THIN_VERSION = 1


@functools.lru_cache(maxsize=None)
def _thin_pass_class() -> type:
    return _counting_pass(
        "TransposeThinMatmuls",
        ("transpose_thin_matmuls", "dedupe_pure_ops", "realize_recomputed_values"),
        lambda: (f"graph_adapter.TransposeThinMatmuls.v{_THIN_VERSION}"
                 f".{THIN_WIDTHS.start}-{THIN_WIDTHS.stop}.{THIN_MIN_ROWS}"
                 f".realize{_REALIZE_VERSION}.cse{_CSE_VERSION}"),
        "Inductor's ``post_grad_custom_post_pass``: :func:`transpose_thin_matmuls`, "
        ":func:`dedupe_pure_ops`, then :func:`realize_recomputed_values`.")


def transpose_thin_matmuls_pass() -> Any:
    """A fresh instance of the post-grad pass (a ``CustomGraphPass``, so inductor caches)."""
    return _thin_pass_class()()


# -- a linear layer of a linear layer ------------------------------------------------

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
        if node.op != "call_function" or node.target not in _LINEAR \
                or node.target is _aten.linear.default:
            continue
        inner = _arg(node, 0, "input")
        w2, b2 = _arg(node, 1, "weight"), _arg(node, 2, "bias")
        if not isinstance(inner, fx.Node) or inner.op != "call_function" \
                or inner.target not in _LINEAR or inner.target is _aten.linear.default:
            continue
        x, w1, b1 = _arg(inner, 0, "input"), _arg(inner, 1, "weight"), _arg(inner, 2, "bias")
        if not all(isinstance(n, fx.Node) for n in (x, w1, w2)) \
                or any(b is not None and not isinstance(b, fx.Node) for b in (b1, b2)):
            continue
        vx, v1, v2 = _value(x), _value(w1), _value(w2)
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


# -- values recomputed inside wider loops ----------------------------------------------

_VIEWS = {_aten.view.default, _aten.unsqueeze.default, _aten.expand.default,
          _aten.reshape.default, _aten._unsafe_view.default, _aten.squeeze.dim,
          _aten.squeeze.default, _aten.squeeze.dims}
_GATHERS = {_aten.index.Tensor, _aten.index_select.default, _aten.embedding.default}


#: Bumped whenever :func:`realize_recomputed_values` changes what it stores.
_REALIZE_VERSION = 1
#: Bumped whenever :func:`dedupe_pure_ops` changes what it merges.
_CSE_VERSION = 1


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
    v = node.meta.get("val")
    return (torch.Tag.pointwise in tags or node.target in _GATHERS) \
        and isinstance(v, torch.Tensor) and v.numel() > 1 and v.device.type == "cpu" \
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
    out = node.meta.get("val")
    if node.op != "call_function" or not isinstance(out, torch.Tensor):
        return []
    found: List[fx.Node] = []
    if node.target in _GATHERS:
        src: Any = None
        idx: Any = None
        if node.target is _aten.index.Tensor:
            src, idxs = node.args[0], node.args[1]
            idx = idxs[0] if len(idxs) == 1 else None
        elif node.target is _aten.index_select.default:
            src, idx = (node.args[0], node.args[2]) if node.args[1] == 0 else (None, None)
        else:  # embedding(table, indices)
            src, idx = node.args[0], node.args[1]
        vs = src.meta.get("val") if isinstance(src, fx.Node) else None
        vi = idx.meta.get("val") if isinstance(idx, fx.Node) else None
        if isinstance(vs, torch.Tensor) and isinstance(vi, torch.Tensor) and vs.dim() >= 1 \
                and vi.numel() > vs.shape[0] and _fused_away(_source(src)):
            found.append(_source(src))
    elif torch.Tag.pointwise in getattr(node.target, "tags", ()) and out.dim() >= 2 \
            and out.shape[-1] > 1:
        for a in node.args:
            va = a.meta.get("val") if isinstance(a, fx.Node) else None
            if isinstance(va, torch.Tensor) and va.dim() == out.dim() and va.shape[-1] == 1 \
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

def _key(value: Any) -> Any:
    """A hashable form of an op's arguments (lists as tuples; nodes by identity)."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(_key(v) for v in value)
    if isinstance(value, dict):
        return ("dict",) + tuple(sorted((k, _key(v)) for k, v in value.items()))
    hash(value)  # TypeError for anything else unhashable: the caller skips the node
    return value


def dedupe_pure_ops(graph: fx.Graph) -> int:
    """Compute, in place, each ATen op of a post-grad graph once per distinct inputs:
    a node whose op and arguments equal an earlier node's uses that node's result;
    return how many nodes were dropped.

    AOTAutograd merges such nodes in training graphs only (its partitioner's CSE);
    an inference graph keeps every layer's copy of a computation that depends on the
    batch alone (GCN's ``gcn_norm``: self-loops, degrees, ``deg^-1/2`` and the edge
    norms, once per layer). Ops that write (mutable schemas) or draw random numbers
    are never merged, nor results that an op writes later (or a view of them), and
    no earlier node is reused across a write (the write may have changed what it read).
    """
    done = 0
    seen: Dict[Any, fx.Node] = {}
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        schema = getattr(node.target, "_schema", None)
        if schema is None:
            continue
        if schema.is_mutable:
            seen.clear()
            continue
        if torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()) \
                or _written(node):
            # a buffer written later (reinplaced scatters into a fresh zeros) must stay
            # its own: two merged ones would take each other's writes
            continue
        try:
            key = (node.target, _key(node.args), _key(node.kwargs))
        except TypeError:
            continue
        first = seen.get(key)
        if first is None:
            seen[key] = node
            continue
        node.replace_all_uses_with(first)
        graph.erase_node(node)
        done += 1
    if done:
        graph.lint()
    return done
