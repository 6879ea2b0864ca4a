"""ELL neighbour tables of a padded batch (numpy, vectorised).

The ELL ("ELLPACK") layout lists, for every node ``n`` of the padded batch,
the ids of its real in-edges (``in_slots[n]``, edges whose destination
``edge_index[1]`` is ``n``) and of its real out-edges (``out_slots[n]``,
edges whose source ``edge_index[0]`` is ``n``), padded to static widths
``Din`` / ``Dout`` with the id ``E`` (one past the last edge: it indexes a
zero row appended to the edge values). With these two tables, a sum over the
in-edges of every node is a gather plus a dense sum, and so is its backward
(over ``out_slots``): no atomics, which is what makes compiled training fast
(:mod:`graph_adapter.static_layout`).

Padding edges (the collator's self-loops on the last padding node) are left
out of both tables: they only touch padding nodes. Within a node's row the
edges keep their batch order (a stable sort).

The widths are static for a whole dataset: :func:`fit_widths` returns the
largest in-degree and out-degree of any graph; a graph beyond them raises
:class:`DegreeWidthError`.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

__all__ = ["DegreeWidthError", "degree_widths", "fit_widths", "ell_tables", "graph_of_node"]


class DegreeWidthError(ValueError):
    """A graph has a node with more in- or out-edges than the ELL table's width."""


def degree_widths(edge_index: np.ndarray, num_nodes: int) -> Tuple[int, int]:
    """``(max in-degree, max out-degree)`` of one graph (or a disjoint union).

    ``edge_index``: ``[2, E]`` integer array of node ids in ``[0, num_nodes)``.
    """
    if edge_index.shape[1] == 0 or num_nodes == 0:
        return 0, 0
    din = np.bincount(edge_index[1], minlength=num_nodes).max()
    dout = np.bincount(edge_index[0], minlength=num_nodes).max()
    return int(din), int(dout)


def fit_widths(edge_index: np.ndarray, edge_counts: np.ndarray,
               node_counts: np.ndarray) -> Tuple[int, int]:
    """Widths ``(Din, Dout)`` fitting every graph of a dataset (at least 1 each).

    ``edge_index``: ``[2, sum(edge_counts)]``, every graph's edges one after the
    other, node ids local to their graph; ``edge_counts`` / ``node_counts``:
    per-graph sizes. The graphs are made one disjoint union (node ids offset
    by the graph's first node), so one ``bincount`` per direction suffices.
    """
    node_start = np.cumsum(node_counts) - node_counts
    shift = np.repeat(node_start, edge_counts)
    glob = edge_index.astype(np.int64, copy=False) + shift[None, :]
    din, dout = degree_widths(glob, int(np.sum(node_counts)))
    # width 0 would make [N, 0] tables; one slot of padding keeps shapes simple
    return max(din, 1), max(dout, 1)


def _slots(key: np.ndarray, num_nodes: int, width: int, pad: int,
           what: str) -> np.ndarray:
    """``[num_nodes, width]`` table: row ``n`` holds the positions ``e`` with
    ``key[e] == n`` in increasing order, then ``pad``."""
    order = np.argsort(key, kind="stable")
    ks = key[order]
    deg = np.bincount(ks, minlength=num_nodes)
    if ks.size and deg.max() > width:
        n = int(np.argmax(deg))
        raise DegreeWidthError(f"node {n} has {int(deg[n])} {what}-edges, more than the ELL "
                               f"width {width}", n, f"{int(deg[n])} {what}-edges", width)
    start = np.cumsum(deg) - deg
    pos = np.arange(ks.size) - start[ks]
    table = np.full((num_nodes, width), pad, dtype=np.int64)
    table[ks, pos] = order
    return table


def ell_tables(edge_index: np.ndarray, num_real_edges: int, num_nodes: int,
               widths: Tuple[int, int], dtype=np.int64) -> Tuple[np.ndarray, np.ndarray]:
    """``(in_slots [N, Din], out_slots [N, Dout])`` of a padded batch.

    ``edge_index``: the padded ``[2, E]`` batch, real edges first (the first
    ``num_real_edges`` columns); padding id ``E``. Raises
    :class:`DegreeWidthError` (args: message, node, ``"<k> in-edges"``, width)
    when a node has more
    in-/out-edges than ``widths``.
    """
    E = edge_index.shape[1]
    real = edge_index[:, :num_real_edges]
    din, dout = widths
    ins = _slots(real[1], num_nodes, din, E, "in")
    outs = _slots(real[0], num_nodes, dout, E, "out")
    return ins.astype(dtype, copy=False), outs.astype(dtype, copy=False)


def graph_of_node(ptr: np.ndarray, node: int) -> int:
    """The graph slot of ``node`` given the batch's ``ptr``."""
    return int(np.searchsorted(ptr, node, side="right") - 1)

