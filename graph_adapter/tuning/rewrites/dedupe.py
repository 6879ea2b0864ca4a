"""An inference graph's repeated pure computations merged (a post-grad rewrite)."""
from __future__ import annotations

from typing import Any, Dict

import torch
from torch import fx

from ..registry import Entry, register
from ._graph import op_schema, written

__all__ = ["dedupe_pure_ops"]


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
        schema = op_schema(node)
        if schema is None:
            continue
        if schema.is_mutable:
            seen.clear()
            continue
        if torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()) \
                or written(node):
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


register(Entry(
    "dedupe_pure_ops",
    "Each pure ATen op of a post-grad graph is computed once per distinct inputs: an "
    "inference graph keeps every layer's copy of a computation that depends on the "
    "batch alone (GCN's ``gcn_norm``), which AOTAutograd merges in training graphs "
    "only. Ops that write or draw random numbers, and results written later, are "
    "never merged. Applies to every ATen graph; fires in inference graphs.",
    points=("post_grad",), order=60, version="1", run=dedupe_pure_ops))
