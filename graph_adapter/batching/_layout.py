"""ELL neighbour tables of a padded batch (numpy, vectorised).

The ELL ("ELLPACK") layout lists, for every node ``n`` of the padded batch,
the ids of its real in-edges (``in_slots[n]``, edges whose destination
``edge_index[1]`` is ``n``) and of its real out-edges (``out_slots[n]``,
edges whose source ``edge_index[0]`` is ``n``), padded to static widths
``Din`` / ``Dout`` with the id ``E`` (one past the last edge: it indexes a
zero row appended to the edge values). With these two tables, a sum over the
in-edges of every node is a gather plus a dense sum, and so is its backward
(over ``out_slots``): no atomics, which is what makes compiled training fast
(:mod:`graph_adapter.nn.static_layout`).

Padding edges (the collator's self-loops on the last padding node) are left
out of both tables: they only touch padding nodes. Within a node's row the
edges keep their batch order (a stable sort).

The widths are static for a whole dataset: :func:`fit_widths` returns the
largest in-degree and out-degree of any graph; a graph beyond them raises
:class:`DegreeWidthError`.

The HYB layout (``layout="hyb"``, ELL + a COO spill list, as in Bell &
Garland's sparse formats) keeps the tables narrow: widths cover almost every
node (default: the 99.5th percentile of the dataset's degrees, see
:func:`fit_hyb`), and the edges past a node's width go to a spill list
``[2, K]`` (row 0 the edge id, row 1 its node; padding ``(E, N - 1)``),
summed with one small scatter. ``K`` is static too: the largest number of
spilled edges any ``G`` graphs of the dataset can bring into one batch (the
sum of the ``G`` largest per-graph counts), so no batch of the fitted dataset
can exceed it. Why: a few hub atoms (degree 7-10 among 82k atoms of degree
<= 4 in NCI-5k) would otherwise set the width every node pays for.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from ..format import ELL_IN, ELL_OUT, SPILL_IN, SPILL_OUT

__all__ = ["LAYOUTS", "DegreeWidthError", "degree_widths", "fit_widths", "fit_hyb", "ell_tables",
           "hyb_tables", "fit_layout", "fit_layout_widths", "layout_tables", "graph_of_node"]

#: The ``layout`` values a collator takes.
LAYOUTS = (None, "ell", "hyb")
#: Default HYB width: the smallest covering this share of the dataset's node degrees.
HYB_COVER = 0.995


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
    glob = _global_ids(edge_index, edge_counts, node_counts)
    din, dout = degree_widths(glob, int(np.sum(node_counts)))
    # width 0 would make [N, 0] tables; one slot of padding keeps shapes simple
    return max(din, 1), max(dout, 1)


def _slots(key: np.ndarray, num_nodes: int, width: int, pad: int,
           what: str, spill: Optional[int] = None
           ) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """``[num_nodes, width]`` table: row ``n`` holds the positions ``e`` with
    ``key[e] == n`` in increasing order, then ``pad``.

    ``spill=None``: a node with more than ``width`` entries raises. Otherwise
    the entries past a node's width go to a ``[2, spill]`` list (positions,
    then their nodes; padding ``(pad, num_nodes - 1)``), which raises when
    they are more than ``spill``.
    """
    order = np.argsort(key, kind="stable")
    ks = key[order]
    deg = np.bincount(ks, minlength=num_nodes)
    start = np.cumsum(deg) - deg
    pos = np.arange(ks.size) - start[ks]
    table = np.full((num_nodes, width), pad, dtype=np.int64)
    if spill is None:
        if ks.size and deg.max() > width:
            n = int(np.argmax(deg))
            raise DegreeWidthError(f"node {n} has {int(deg[n])} {what}-edges, more than the "
                                   f"ELL width {width}", n, f"{int(deg[n])} {what}-edges", width)
        table[ks, pos] = order
        return table, None
    fits = pos < width
    table[ks[fits], pos[fits]] = order[fits]
    over = np.flatnonzero(~fits)
    if over.size > spill:
        n = int(ks[over[spill]])  # the node of the first edge past the capacity
        raise DegreeWidthError(
            f"node {n} has {int(deg[n])} {what}-edges: the batch spills {over.size} edges "
            f"past the HYB width {width}, more than the spill capacity {spill}", n,
            f"{int(deg[n])} {what}-edges (the batch spills {over.size} past the width, the "
            f"capacity is {spill})", width)
    lst = np.empty((2, spill), dtype=np.int64)
    lst[0] = pad
    lst[1] = num_nodes - 1
    lst[0, :over.size] = order[over]
    lst[1, :over.size] = ks[over]
    return table, lst


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
    ins, _ = _slots(real[1], num_nodes, din, E, "in")
    outs, _ = _slots(real[0], num_nodes, dout, E, "out")
    return ins.astype(dtype, copy=False), outs.astype(dtype, copy=False)


def hyb_tables(edge_index: np.ndarray, num_real_edges: int, num_nodes: int,
               widths: Tuple[int, int], spills: Tuple[int, int], dtype=np.int64
               ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(in_slots [N, Din], out_slots [N, Dout], in_spill [2, Kin], out_spill
    [2, Kout])`` of a padded batch (arguments as :func:`ell_tables`).

    A node's first ``Din`` in-edges (in edge order) are in its ``in_slots`` row,
    the rest in ``in_spill`` (column ``(edge id, node)``, padding ``(E, N - 1)``);
    the same for out-edges. Raises :class:`DegreeWidthError` when a batch
    spills more edges than ``spills``.
    """
    E = edge_index.shape[1]
    real = edge_index[:, :num_real_edges]
    ins, isp = _slots(real[1], num_nodes, widths[0], E, "in", spills[0])
    outs, osp = _slots(real[0], num_nodes, widths[1], E, "out", spills[1])
    return tuple(a.astype(dtype, copy=False) for a in (ins, outs, isp, osp))  # type: ignore


def _global_ids(edge_index: np.ndarray, edge_counts: np.ndarray,
                node_counts: np.ndarray) -> np.ndarray:
    """The graphs' edges as one disjoint union (node ids offset by the graph's first node)."""
    node_start = np.cumsum(node_counts) - node_counts
    shift = np.repeat(node_start, edge_counts)
    return edge_index.astype(np.int64, copy=False) + shift[None, :]


def cover_width(degrees: np.ndarray) -> int:
    """The smallest width covering :data:`HYB_COVER` of ``degrees`` (one a node), at least 1."""
    if not degrees.size:
        return 1
    return max(int(np.sort(degrees)[int(np.ceil(HYB_COVER * degrees.size)) - 1]), 1)


def fit_hyb(edge_index: np.ndarray, edge_counts: np.ndarray, node_counts: np.ndarray,
            graphs: int, widths: Optional[Tuple[int, int]] = None
            ) -> Tuple[Tuple[int, int], Tuple[int, int]]:
    """``((Din, Dout), (Kin, Kout))`` of the HYB layout for a dataset.

    Arguments as :func:`fit_widths`; ``graphs``: the most graphs a batch holds.
    Widths (unless given): the smallest covering :data:`HYB_COVER` of the
    nodes' in- (out-) degrees, at least 1. Spill capacities: the sum of the
    ``graphs`` largest per-graph counts of edges past the width (at least 1),
    so that every batch of the dataset fits.
    """
    glob = _global_ids(edge_index, edge_counts, node_counts)
    total = int(np.sum(node_counts))
    graph_of = np.repeat(np.arange(len(node_counts)), node_counts)
    ws, ks = [], []
    for j, row in enumerate((1, 0)):
        deg = np.bincount(glob[row], minlength=total) if total else np.zeros(0, np.int64)
        w = max(int(widths[j]), 1) if widths is not None else cover_width(deg)
        over = np.bincount(graph_of, weights=np.clip(deg - w, 0, None),
                           minlength=len(node_counts)).astype(np.int64)
        top = np.sort(over)[::-1][:graphs]
        ws.append(w)
        ks.append(max(int(top.sum()), 1))
    return (ws[0], ws[1]), (ks[0], ks[1])


def fit_layout(layout: str, edge_index: np.ndarray, edge_counts: np.ndarray,
               node_counts: np.ndarray, graphs: int,
               widths: Optional[Tuple[int, int]] = None
               ) -> Tuple[Tuple[int, int], Optional[Tuple[int, int]]]:
    """``(widths, spill capacities or None)`` of ``layout`` (``"ell"`` / ``"hyb"``)."""
    if layout == "ell":
        return (widths if widths is not None
                else fit_widths(edge_index, edge_counts, node_counts)), None
    return fit_hyb(edge_index, edge_counts, node_counts, graphs, widths)


def fit_layout_widths(dataset: Sequence[Any], graphs: int, layout: str
                      ) -> Tuple[Tuple[int, int], Optional[Tuple[int, int]]]:
    """``(layout_widths, layout_spills)`` of ``layout`` (``"ell"`` / ``"hyb"``; ``"ell"``'s
    spills are ``None``) fitted on every graph of ``dataset``, as a loader over it fits them,
    for batches of at most ``graphs`` graphs (its budget's).

    Loaders over parts of one dataset (a train and a test split of one compiled model)
    given these (``FixedSizeLoader(part, budget, layout=..., layout_widths=...,
    layout_spills=...)``) give batches of one shape. Reads each graph's ``edge_index``
    and ``num_nodes``; no collator (no columnar copy) is built.
    """
    if layout not in ("ell", "hyb"):
        raise ValueError(f"layout must be 'ell' or 'hyb' (the layouts with tables), got {layout!r}")
    parts = [np.asarray(g.edge_index, dtype=np.int64).reshape(2, -1) for g in dataset]
    edges = np.array([p.shape[1] for p in parts], dtype=np.int64)
    nodes = np.array([int(g.num_nodes) for g in dataset], dtype=np.int64)
    ei = np.concatenate(parts, axis=1) if parts else np.zeros((2, 0), np.int64)
    return fit_layout(layout, ei, edges, nodes, int(graphs))


def layout_tables(layout: str, edge_index: np.ndarray, num_real_edges: int, num_nodes: int,
                  widths: Tuple[int, int], spills: Optional[Tuple[int, int]],
                  dtype=np.int64) -> Dict[str, np.ndarray]:
    """The batch's layout keys (``format.LAYOUT_KEYS``) -> arrays."""
    if layout == "ell":
        return dict(zip((ELL_IN, ELL_OUT),
                        ell_tables(edge_index, num_real_edges, num_nodes, widths, dtype)))
    assert spills is not None
    return dict(zip((ELL_IN, ELL_OUT, SPILL_IN, SPILL_OUT),
                    hyb_tables(edge_index, num_real_edges, num_nodes, widths, spills, dtype)))


def graph_of_node(ptr: np.ndarray, node: int) -> int:
    """The graph slot of ``node`` given the batch's ``ptr``."""
    return int(np.searchsorted(ptr, node, side="right") - 1)

