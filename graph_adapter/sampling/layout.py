"""HYB aggregation tables for neighbour-sampled batches (``FixedSizeNeighborLoader(layout="hyb")``).

The keys and their meaning are those of the graph-level loader's
``layout="hyb"`` (:mod:`graph_adapter.batching._layout`, ``docs/dev/FORMAT.md``):
``in_slots`` ``[N, Din]`` / ``out_slots`` ``[N, Dout]``, each node's first
in-/out-edges (padding id ``E``), and ``in_spill`` / ``out_spill`` ``[2, K]``,
the edges past a node's width (edge id, node; padding ``(E, N - 1)``). Inside a
wrapped forward PyG's sum and mean aggregations then run over the tables
(:mod:`graph_adapter.nn.static_layout`): a gather-sum per node, in parallel
over nodes, where PyG's scatter is one serial loop.

Why the widths can be exact here: the sampler expands each node once, in the
hop where it first appears, so a node's in-degree in a directed sample is at
most that hop's fanout: the seeds at most ``num_neighbors[0]``, the nodes of
hop ``h`` at most ``num_neighbors[h]``, the last hop's none. With the in-width
``Din`` (default: the largest fanout of hops 1, 2, ..., or ``num_neighbors[0]``
for one hop) only seeds can spill, at most ``num_neighbors[0] - Din`` edges
each, so ``Kin = seeds x (num_neighbors[0] - Din)`` holds every batch. Where
no fanout bounds the degree (``directed=False``, a fanout of ``-1``) and for
out-edges (a node is a source of as many edges as nodes that drew it), the
width is fitted on the loader's budget samples (:data:`~graph_adapter.batching.HYB_COVER`
of the degrees) and the spill capacity is the budget's edge count: every edge
can spill, so no batch can exceed it either.

``layout="sources"`` (inference): one table, ``in_sources`` ``[R, D]``, the source
node of each real in-edge of the batch's first ``R`` rows (padding id ``N``), so a
sum or mean over in-edges is a gather of node rows, parallel over nodes, without the
per-edge messages. The same bound makes it exact: rows are laid out hop by hop (seeds
first) and only the nodes of the hops before the last have in-edges, at most
``R = seeds x (1 + f0 + f0 f1 + ...)`` rows (the last hop's term left out) of at most
``D = max(fanouts)`` in-edges each (:func:`source_table_shape`). Every batch is
checked against it when its table is built.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from ..batching import DegreeWidthError, cover_width, hyb_tables
from ..format import ELL_IN, ELL_OUT, IN_SOURCES, SPILL_IN, SPILL_OUT

__all__ = ["SAMPLED_LAYOUTS", "fanout_in_width", "fit_sampled_hyb", "sampled_tables",
           "source_table_shape", "source_table"]

#: The ``layout`` values of the neighbour loader.
SAMPLED_LAYOUTS = (None, "hyb", "sources")


def fanout_in_width(num_neighbors: Sequence[int], directed: bool) -> Optional[int]:
    """The default in-width bounded by the fanouts (module doc), or ``None`` where no fanout
    bounds a node's in-degree (``directed=False`` or a fanout of ``-1``)."""
    fan = [int(f) for f in num_neighbors]
    if not directed or any(f < 0 for f in fan):
        return None
    if not fan:  # zero hops: no edge, the narrowest table
        return 1
    return max(max(fan[1:]) if len(fan) > 1 else fan[0], 1)


def _cover(degrees: List[np.ndarray]) -> int:
    """:func:`~graph_adapter.batching.cover_width` of the samples' nodes' degrees."""
    return cover_width(np.concatenate(degrees) if degrees else np.zeros(0, np.int64))


def fit_sampled_hyb(edge_indices: Sequence[Tensor], num_nodes: Sequence[int],
                    num_neighbors: Sequence[int], directed: bool, seeds: int, edges: int,
                    widths: Optional[Tuple[int, int]] = None,
                    spills: Optional[Tuple[int, int]] = None,
                    ) -> Tuple[Tuple[int, int], Tuple[int, int]]:
    """``((Din, Dout), (Kin, Kout))`` of the HYB tables of a neighbour loader.

    ``edge_indices`` / ``num_nodes``: the budget fit's samples (``[2, m]`` local
    rows, and their node counts); ``seeds``: the most seeds a batch holds;
    ``edges``: the budget's edge count. ``widths`` / ``spills`` given: kept
    (a spill capacity then must hold every batch, or the batch raises
    :class:`~graph_adapter.batching._layout.DegreeWidthError`). Defaults as
    the module doc says.
    """
    bound = fanout_in_width(num_neighbors, directed)
    if widths is None:
        ins = [np.bincount(e[1].numpy(), minlength=n) for e, n in zip(edge_indices, num_nodes)]
        outs = [np.bincount(e[0].numpy(), minlength=n) for e, n in zip(edge_indices, num_nodes)]
        widths = (bound if bound is not None else _cover(ins), _cover(outs))
    din, dout = int(widths[0]), int(widths[1])
    if din < 1 or dout < 1:
        raise ValueError(f"layout_widths={widths!r}: give two widths >= 1 (in, out)")
    if spills is None:
        if bound is not None and din >= bound:  # only seeds can pass the width
            kin = seeds * max(int(num_neighbors[0]) - din, 0) if len(num_neighbors) else 0
        else:
            kin = edges
        spills = (max(kin, 1), max(int(edges), 1))
    if int(spills[0]) < 1 or int(spills[1]) < 1:
        raise ValueError(f"layout_spills={spills!r}: give two capacities >= 1 (in, out)")
    return (din, dout), (int(spills[0]), int(spills[1]))


def sampled_tables(edge_index: Tensor, num_real_edges: int, num_nodes: int,
                   widths: Tuple[int, int], spills: Tuple[int, int]) -> Dict[str, Tensor]:
    """The HYB keys of one padded batch (``edge_index`` ``[2, E]``, real edges first):
    ``in_slots`` ``[N, Din]``, ``out_slots`` ``[N, Dout]``, ``in_spill`` ``[2, Kin]``,
    ``out_spill`` ``[2, Kout]``, int64."""
    try:
        arrays = hyb_tables(edge_index.numpy(), num_real_edges, num_nodes, widths, spills)
    except DegreeWidthError as e:  # (the loader's own sizes always fit: given ones may not)
        node, what, width = e.args[1:]
        raise DegreeWidthError(
            f"a sampled batch's node {node} has {what}, more than the HYB width {width} "
            f"holds (layout_widths={tuple(widths)}, layout_spills={tuple(spills)}): pass "
            f"larger layout_spills (or layout_widths), or leave both unset (the loader then "
            f"sizes them so that every batch fits)", node, what, width) from None
    return {k: torch.from_numpy(a) for k, a in zip((ELL_IN, ELL_OUT, SPILL_IN, SPILL_OUT),
                                                  arrays)}


def source_table_shape(num_neighbors: Sequence[int], directed: bool, seeds: int,
                       nodes: int) -> Tuple[int, int]:
    """``(R, D)`` of ``layout="sources"`` (module doc): the rows that can have in-edges,
    at most ``nodes`` (the budget's), and the largest fanout. Raises ``ValueError``
    where no fanout bounds the in-degrees (``directed=False``, a fanout of ``-1``)."""
    fan = [int(f) for f in num_neighbors]
    if not directed or any(f < 0 for f in fan) or not fan:
        raise ValueError(
            f"layout='sources' needs in-degrees bounded by the fanouts: directed=True and "
            f"no fanout of -1 (got directed={directed}, num_neighbors={fan}); use "
            f"layout='hyb', whose spill lists hold any degree")
    rows, hop = 0, int(seeds)
    for f in fan:  # the nodes of every hop but the last
        rows += hop
        hop *= f
    return min(rows, int(nodes)), max(max(fan), 1)


def source_table(edge_index: Tensor, num_real_edges: int, num_nodes: int,
                 shape: Tuple[int, int]) -> Dict[str, Tensor]:
    """``{"in_sources": [R, D] int64}`` of one padded batch (``edge_index`` ``[2, E]``,
    real edges first): row ``r`` lists the sources of ``r``'s real in-edges in edge
    order, then ``num_nodes`` (the padding id). Raises ``DegreeWidthError`` naming the
    row for a batch that breaks the bound (an in-edge past row ``R``, or more than ``D``
    in-edges into one row)."""
    rows, width = int(shape[0]), int(shape[1])
    ei = edge_index[:, :num_real_edges].numpy()
    src, dst = ei[0], ei[1]
    table = np.full((rows, width), num_nodes, dtype=np.int64)
    if dst.size:
        if int(dst.max()) >= rows:
            node = int(dst.max())
            raise DegreeWidthError(
                f"a sampled batch's node {node} has in-edges, past the {rows} rows that "
                f"layout='sources' holds (the nodes of every hop but the last): use "
                f"layout='hyb'", node, "in-edges", rows)
        order = np.argsort(dst, kind="stable")
        src, dst = src[order], dst[order]
        deg = np.bincount(dst, minlength=rows)
        if int(deg.max()) > width:
            node = int(deg.argmax())
            raise DegreeWidthError(
                f"a sampled batch's node {node} has {int(deg.max())} in-edges, more than "
                f"layout='sources' holds ({width}, the largest fanout): use layout='hyb'",
                node, f"{int(deg.max())} in-edges", width)
        slot = np.arange(dst.size) - (np.cumsum(deg) - deg)[dst]
        table[dst, slot] = src
    return {IN_SOURCES: torch.from_numpy(table)}
