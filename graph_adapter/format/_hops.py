"""Per-hop blocks of a sampled batch (``per_hop_budget=``) back to the plain layout.

A neighbour batch with per-hop budgets lays its rows out in one block per hop
(the seeds' block, then hop 1's, ...), each block its hop's real rows then
padding rows up to the hop's budget; its edges likewise (one block per hop,
real edges then padding self-loops). The sizes of the blocks are the shapes of
the :data:`~graph_adapter.contract.HOP_NODES` / ``HOP_EDGES`` keys
(:func:`~graph_adapter.contract.hop_budgets`). :func:`compact_hops` moves the
real rows of every block to the front, in block order, which is the plain
layout of the same sample (seeds, hop 1, hop 2, ..., then padding), so
:func:`~graph_adapter.format.unpad.unpad_batch` reads it as any sampled batch,
and :func:`real_hop_counts` gives PyG's ``num_sampled_nodes`` /
``num_sampled_edges`` (the real counts of every block).
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Tuple

import torch
from torch import Tensor

from ..contract import padding_node
from .keys import (BATCH, EDGE_MASK, GRAPH_MASK, HOP_EDGES, HOP_KEYS, HOP_NODES, NODE_MASK, PTR,
                   cat_dim_of, hop_budgets, levels_of_rows)

__all__ = ["is_per_hop", "real_hop_counts", "compact_hops"]


def is_per_hop(flat: Mapping[str, Tensor]) -> bool:
    """Whether ``flat`` (homogeneous) is laid out in per-hop blocks."""
    return HOP_NODES in flat and HOP_EDGES in flat


def _block_sums(mask: Tensor, sizes: List[int]) -> List[int]:
    """The True entries of ``mask`` in each consecutive block of ``sizes``."""
    if not sizes:
        return []
    return [int(c) for c in torch.stack([b.sum() for b in mask.split(sizes)]).tolist()]


def real_hop_counts(flat: Mapping[str, Tensor]) -> Tuple[List[int], List[int]]:
    """``(real nodes per hop, real edges per hop)`` of a per-hop batch (no micro-batch
    dim): what PyG's loader reports as ``num_sampled_nodes`` / ``num_sampled_edges``."""
    nodes = hop_budgets(flat[HOP_NODES].shape)
    edges = hop_budgets(flat[HOP_EDGES].shape)
    return _block_sums(flat[NODE_MASK], nodes), _block_sums(flat[EDGE_MASK], edges)


def compact_hops(flat: Mapping[str, Tensor]) -> Tuple[Dict[str, Tensor], Tuple[List[int], List[int]]]:
    """The plain layout of a per-hop batch (no micro-batch dim), and its real per-hop
    counts (:func:`real_hop_counts`).

    Real rows (edges) keep their order, every block's before the next one's; the
    padding rows follow; ``edge_index`` is renumbered, padding edges become
    self-loops on the last row; ``batch`` / ``ptr`` are the plain layout's (real
    slot, padding slot); the per-hop keys are left out.
    """
    counts = real_hop_counts(flat)
    nm, em = flat[NODE_MASK], flat[EDGE_MASK]
    N, E, G = nm.numel(), em.numel(), flat[GRAPH_MASK].numel()
    # stable: real rows stay in block order (each block holds its real rows first)
    perm_n = torch.sort((~nm).to(torch.uint8), stable=True).indices
    perm_e = torch.sort((~em).to(torch.uint8), stable=True).indices
    new_row = torch.empty_like(perm_n)
    new_row[perm_n] = torch.arange(N)
    n, m = int(nm.sum()), int(em.sum())
    out: Dict[str, Tensor] = {}
    for k, v in flat.items():
        if k in HOP_KEYS:
            continue
        dim = cat_dim_of(k)
        rows = v.size(dim) if v.dim() else -1
        lv = levels_of_rows(rows, {"node": N, "edge": E, "graph": G})
        if k == "edge_index":
            ei = new_row[v[:, perm_e]]
            ei[:, m:] = padding_node(N)
            out[k] = ei
        elif k in (BATCH, PTR) or k == GRAPH_MASK:
            out[k] = v
        elif "edge" in lv and ("node" not in lv or "edge" in k):
            out[k] = v.index_select(dim, perm_e)
        elif "node" in lv:
            out[k] = v.index_select(dim, perm_n)
        else:
            out[k] = v
    # the plain layout's slots: real rows in slot 0, padding in slot 1 (a fill batch
    # keeps one padding row in slot 0: contract.slot_counts)
    n0 = max(n, 1)
    out[BATCH] = (torch.arange(N) >= n0).to(flat[BATCH].dtype)
    out[PTR] = torch.tensor([0, n0, N], dtype=flat[PTR].dtype)
    return {k: out[k] for k in flat if k in out}, counts
