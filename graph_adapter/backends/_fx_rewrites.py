"""Graph rewrites applied to a model's Dynamo graph before inductor compiles it.

One rewrite, :func:`project_embedding_tables`: a linear layer applied to a
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
"""
from __future__ import annotations

import functools
import operator
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import fx

__all__ = ["project_embedding_tables", "project_embedding_tables_pass"]

_LINEAR = (torch._C._nn.linear, F.linear)
_EMBEDDING = (F.embedding,)
_ADD = (operator.add, torch.add, operator.iadd)

#: The rewrite pays when the tables' rows are at most this share of the lookups.
_MAX_ROW_SHARE = 0.5


def _arg(node: fx.Node, i: int, name: str, default=None):
    """Positional-or-keyword argument ``name`` (position ``i``) of a call node."""
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def _lookup(node: fx.Node) -> Optional[Tuple[fx.Node, fx.Node]]:
    """``(index, table)`` if ``node`` is a plain ``F.embedding`` call."""
    if node.op != "call_function" or node.target not in _EMBEDDING:
        return None
    index, table = _arg(node, 0, "input"), _arg(node, 1, "weight")
    if not isinstance(index, fx.Node) or not isinstance(table, fx.Node):
        return None
    if _arg(node, 2, "padding_idx") is not None or _arg(node, 3, "max_norm") is not None \
            or _arg(node, 5, "scale_grad_by_freq", False) or _arg(node, 6, "sparse", False):
        return None
    return index, table


def _terms(node: fx.Node) -> Optional[List[Tuple[fx.Node, fx.Node]]]:
    """The lookups whose sum ``node`` is (``a + b`` nested any way), or ``None``."""
    one = _lookup(node)
    if one is not None:
        return [one]
    if node.op != "call_function" or node.target not in _ADD or node.kwargs \
            or len(node.args) != 2 or not all(isinstance(a, fx.Node) for a in node.args):
        return None
    left, right = (_terms(a) for a in node.args)  # type: ignore[arg-type]
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
        terms = _terms(inp)
        if not terms or not _pays(terms, inp):
            continue
        tables = tuple(t for _, t in terms)
        with graph.inserting_before(node):
            if tables not in stacked:
                # before the first linear of these tables, shared by the later ones
                # (not after the tables: they are placeholders, which come first)
                stacked[tables] = graph.call_function(torch.cat, (list(tables),))
            # one product for all the tables: [sum of rows, D_in] x [D_in, D_out]
            projected = graph.call_function(F.linear, (stacked[tables], weight))
            out: Optional[fx.Node] = None
            start = 0
            for index, table in terms:
                rows = int(_value(table).shape[0])  # type: ignore[union-attr]
                part = graph.call_function(torch.narrow, (projected, 0, start, rows))
                start += rows
                looked_up = graph.call_function(F.embedding, (index, part))
                out = looked_up if out is None else graph.call_function(operator.add,
                                                                        (out, looked_up))
            if bias is not None:
                out = graph.call_function(operator.add, (out, bias))
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


#: Bumped whenever :func:`project_embedding_tables` changes what it rewrites
#: (inductor's cache keys compiled graphs by it).
_PASS_VERSION = 2


@functools.lru_cache(maxsize=None)
def _pass_class() -> type:
    # defined on first use: importing torch._inductor is slow (see _inductor_cpu)
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class ProjectEmbeddingTables(CustomGraphPass):
        """Inductor's ``pre_grad_custom_pass``: :func:`project_embedding_tables`;
        ``rewritten`` counts the linears rewritten so far (a graph
        loaded from inductor's cache is not rewritten again: it was already)."""

        rewritten = 0

        def __call__(self, graph: fx.Graph) -> None:
            self.rewritten += project_embedding_tables(graph)

        def uuid(self) -> Any:
            return f"graph_adapter.ProjectEmbeddingTables.v{_PASS_VERSION}"

    return ProjectEmbeddingTables


def project_embedding_tables_pass() -> Any:
    """A fresh instance of the pre-grad pass (a ``CustomGraphPass``, so inductor caches)."""
    return _pass_class()()
