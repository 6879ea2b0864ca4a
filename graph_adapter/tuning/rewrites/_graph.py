"""FX helpers the rewrites share: ATen op handles, call arguments, example values,
who reads a node, zero-filled tensors (found and made), an op's schema, and whether an
op writes a tensor."""
from __future__ import annotations

import operator
from typing import Any, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import fx

ATEN = torch.ops.aten
LINEAR = (torch._C._nn.linear, F.linear, ATEN.linear.default)
EMBEDDING = (F.embedding,)
ATEN_EMBEDDING = (ATEN.embedding.default,)
ADD = (operator.add, torch.add, operator.iadd)
ATEN_ADD = (ATEN.add.Tensor,)


def arg(node: fx.Node, i: int, name: str, default=None):
    """Positional-or-keyword argument ``name`` (position ``i``) of a call node."""
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def op_schema(node: fx.Node) -> Optional[Any]:
    """The ATen schema (``torch.FunctionSchema``) of a call node's op, or ``None``: a node
    that calls no function, or a function that is no ATen op overload (no schema)."""
    if node.op != "call_function":
        return None
    return getattr(node.target, "_schema", None)


def written(table: fx.Node) -> bool:
    """Whether an ATen op of the graph writes ``table`` or a view of it: ``max_norm``'s
    ``embedding_renorm_(detach(table), ...)`` renormalises the rows in place before the
    lookup reads them, which the projected copy would not see."""
    seen, todo = {table}, [table]
    while todo:
        for user in todo.pop().users:
            schema = op_schema(user)
            if schema is None or user in seen:
                continue
            if schema.is_mutable:
                return True
            if any(r.alias_info is not None for r in schema.returns):  # detach, view, ...
                seen.add(user)
                todo.append(user)
    return False


def example_value(node: object) -> Optional[torch.Tensor]:
    """The tensor a node stands for (Dynamo's ``meta["example_value"]``, an ATen graph's
    ``meta["val"]``), or None: for an argument that is no node (a number, a list) or a
    node whose value is no tensor."""
    if not isinstance(node, fx.Node):
        return None
    v = node.meta.get("example_value", node.meta.get("val"))
    return v if isinstance(v, torch.Tensor) else None


def only_user(node: fx.Node, user: fx.Node) -> bool:
    """Whether ``user`` is the one node that reads ``node``."""
    return len(node.users) == 1 and next(iter(node.users)) is user


def is_zeros(node: object) -> bool:
    """Whether ``node`` is ``aten.full(shape, 0)`` / ``aten.zeros(shape)`` / ``aten.new_zeros``."""
    if not isinstance(node, fx.Node) or node.op != "call_function":
        return False
    if node.target is ATEN.full.default:
        return len(node.args) > 1 and node.args[1] == 0
    return node.target in (ATEN.zeros.default, ATEN.new_zeros.default)


def zeros_node(graph: fx.Graph, shape: Tuple[int, ...], like: torch.Tensor) -> fx.Node:
    """A new ``aten.full(shape, 0)`` node at the graph's insert point, of ``like``'s dtype
    and device, with its ``val``."""
    node = graph.call_function(ATEN.full.default, (list(shape), 0),
                               {"dtype": like.dtype, "layout": torch.strided,
                                "device": like.device, "pin_memory": False})
    node.meta["val"] = like.new_empty(tuple(shape))
    return node
