"""Initializers nothing reads, dropped.

What it does. Removes the initializers no node (nor a subgraph) reads and no graph
input or output names: the tables and constants a rewrite replaced, the exporter's
leftovers (onnxruntime warns of each at every load; the file would hold them for
nothing).

When it applies. Last, after the other rewrites, on every exported model.
"""
from __future__ import annotations

from typing import Any, Set

from ._graph import subgraph_reads

__all__ = ["drop_unread_initializers"]


def drop_unread_initializers(graph: Any) -> int:
    """Remove the initializers of ``graph`` that no node (nor a subgraph) reads and no graph
    output or input names: the tables a rewrite replaced, the exporter's leftovers
    (onnxruntime warns of each at every load; the file holds them for nothing). Returns
    how many."""
    read: Set[str] = {o.name for o in graph.output} | {i.name for i in graph.input}
    for node in graph.node:
        read.update(node.input)
        read.update(subgraph_reads(node))
    kept = [i for i in graph.initializer if i.name in read]
    removed = len(graph.initializer) - len(kept)
    if removed:
        del graph.initializer[:]
        graph.initializer.extend(kept)
    return removed
