"""Per-hop fixed budgets: a sampled subgraph laid out one block per hop.

With ``FixedSizeNeighborLoader(..., per_hop_budget=True)`` every hop has a
static node count and a static edge count of its own (:class:`HopBudget`,
fitted as the plain budget is: the ``success_ratio`` quantile of each hop's
sampled counts, :func:`fit_hop_budget`). A batch (:func:`pad_per_hop`) lays
out

* rows: block 0 (the seeds, then padding rows, at least
  :data:`~graph_adapter.contract.RESERVED_NODES`), block 1 (hop 1's new nodes,
  then padding), ..., block ``H``; each block padded to its hop's count;
* edges: block 1 (the edges sampled at hop 1: into the seeds, from rows of
  blocks 0 and 1), ..., block ``H``; each block its real edges then padding
  edges, self-loops on the last row of block 0 (a padding row);
* ``num_sampled_nodes`` / ``num_sampled_edges``: keys whose shapes are the
  block sizes (:func:`~graph_adapter.contract.hop_shape`), so that inside a
  wrapped forward the model reads them as lists of static ints.

So PyG's ``trim_to_layer`` (``BasicGNN(num_sampled_nodes_per_hop=...)``),
which cuts the last block of rows and of edges at every layer, cuts whole
blocks: an edge of block ``h`` joins rows of blocks ``<= h`` only (the
sampler's hop order), and every padding edge a row that no layer cuts. Every
layer then has a static shape, so a compiled model compiles once.

The masks stay right: ``node_mask`` / ``edge_mask`` True on the real rows of
every block; ``batch`` is 0 on real rows and 1 on padding rows (so it is not
sorted: pool with ``scatter``-based ops, not ``ptr``-based ones), ``ptr`` the
real and total counts ``[0, n, N]``. ``unpad_batch`` gives PyG's layout back,
with the real ``num_sampled_nodes`` / ``num_sampled_edges``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from ..batching import RESERVED_NODES, Budget
from .csr import Sample
from .inputs.source import AttrValue, gather_rows
from .sampled import sample_keys
from ..format import (BATCH, E_ID, GRAPH_MASK, HOP_EDGES, HOP_NODES, N_ID, NODE_MASK, PTR,
                      hop_shape)

__all__ = ["HopBudget", "HopBudgetError", "fit_hop_budget", "fit_to_hops", "pad_per_hop"]


class HopBudgetError(ValueError):
    """A per-hop budget that cannot hold a batch's layout, or a sample without
    per-hop counts for it."""


@dataclass(frozen=True)
class HopBudget:
    """Static rows and edges per hop of a sampled batch (see the module doc).

    Args:
        nodes: rows of each block, the seeds' block first: ``(b_0, ..., b_H)``;
            ``b_0`` holds the seeds and at least ``RESERVED_NODES`` padding rows.
        edges: edges of each hop's block: ``(e_1, ..., e_H)``.

    Raises:
        HopBudgetError: ``len(edges) != len(nodes) - 1``, a negative count,
            ``b_0 < RESERVED_NODES + 1``, or totals that make a tie (the
            total rows, edges and the two graph slots must differ: grow the
            last block by one).
    """

    nodes: Tuple[int, ...]
    edges: Tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(int(c) for c in self.nodes))
        object.__setattr__(self, "edges", tuple(int(c) for c in self.edges))
        if len(self.nodes) < 2 or len(self.edges) != len(self.nodes) - 1:
            raise HopBudgetError(f"HopBudget(nodes={self.nodes}, edges={self.edges}): give one "
                                 f"node count per block (seeds, hop 1, ..., hop H) and one edge "
                                 f"count per hop (H of them), H >= 1")
        if min(self.nodes + self.edges) < 0:
            raise HopBudgetError(f"HopBudget(nodes={self.nodes}, edges={self.edges}): a count is "
                                 f"negative")
        if self.nodes[0] < RESERVED_NODES + 1:
            raise HopBudgetError(f"HopBudget: the seeds' block has {self.nodes[0]} rows; it holds "
                                 f"the seeds and {RESERVED_NODES} padding rows (the padding "
                                 f"edges' endpoints): give nodes[0] >= batch_size + "
                                 f"{RESERVED_NODES}")
        N, E = sum(self.nodes), sum(self.edges)
        if len({N, E, 2}) < 3:
            raise HopBudgetError(f"HopBudget(nodes={self.nodes}, edges={self.edges}): {N} rows, "
                                 f"{E} edges and 2 graph slots must differ (a row count names "
                                 f"its level): grow the last block by one")

    @property
    def hops(self) -> int:
        """``H``, the number of hops."""
        return len(self.edges)

    @property
    def seed_capacity(self) -> int:
        """The most seeds the seeds' block holds."""
        return self.nodes[0] - RESERVED_NODES

    @property
    def budget(self) -> Budget:
        """The totals as a plain :class:`Budget` (``graphs=2``): every key's shape."""
        return Budget(nodes=sum(self.nodes), edges=sum(self.edges), graphs=2)

    def to_dict(self) -> Dict[str, Any]:
        """``{"nodes": [...], "edges": [...]}``."""
        return {"nodes": list(self.nodes), "edges": list(self.edges)}

    def to_json(self) -> str:
        """The JSON form of :meth:`to_dict`."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "HopBudget":
        """The budget of :meth:`to_dict`'s form."""
        return cls(nodes=tuple(d["nodes"]), edges=tuple(d["edges"]))

    @classmethod
    def from_json(cls, s: str) -> "HopBudget":
        """The budget of :meth:`to_json`'s form."""
        return cls.from_dict(json.loads(s))

    @classmethod
    def of(cls, value: Union["HopBudget", Mapping[str, Any], str]) -> "HopBudget":
        """``value`` as a :class:`HopBudget` (itself, its dict or its JSON)."""
        if isinstance(value, HopBudget):
            return value
        if isinstance(value, str):
            return cls.from_json(value)
        if isinstance(value, Mapping):
            return cls.from_dict(value)
        raise TypeError(f"per_hop_budget={value!r}; pass True (fitted), False, a HopBudget or "
                        f"its dict / JSON")


def _per_hop(sample: Sample, hops: int) -> Tuple[List[int], List[int]]:
    """The sample's per-hop counts, checked against ``hops``."""
    n, e = list(sample.nodes_per_hop), list(sample.edges_per_hop)
    if len(n) != hops + 1 or len(e) != hops:
        raise HopBudgetError(f"a sample reports {len(n)} node counts and {len(e)} edge counts "
                             f"per hop; a {hops}-hop budget needs {hops + 1} and {hops} (the "
                             f"sampler must report its hops: sampler='ours', directed=True)")
    return n, e


def fit_hop_budget(samples: Sequence[Sample], batch_size: int, success_ratio: float = 0.99,
                   round_to: int = 1) -> HopBudget:
    """The per-hop budget holding ``success_ratio`` of each hop's sampled counts.

    Args:
        samples: sampled subgraphs (their ``nodes_per_hop`` / ``edges_per_hop``).
        batch_size: the most seeds a batch has (the seeds' block holds them and
            ``RESERVED_NODES`` padding rows).
        success_ratio: the quantile of each hop's node and edge counts.
        round_to: every block's counts rounded up to a multiple of it.

    Returns:
        The :class:`HopBudget`; the last node block (then edge block) grown by
        one where the totals would tie.

    Raises:
        ValueError: ``success_ratio`` outside ``(0, 1]`` or no sample.
        HopBudgetError: samples with different hop counts.
    """
    if not 0 < success_ratio <= 1:
        raise ValueError(f"success_ratio={success_ratio}; choose a quantile in (0, 1]")
    if not samples:
        raise ValueError("fit_hop_budget: no sample to fit")
    hops = len(samples[0].edges_per_hop)
    rows = [_per_hop(s, hops) for s in samples]
    n = np.asarray([r[0] for r in rows], dtype=np.float64)
    e = np.asarray([r[1] for r in rows], dtype=np.float64)
    qn = np.quantile(n, success_ratio, axis=0, method="higher")
    qe = np.quantile(e, success_ratio, axis=0, method="higher")
    r = max(int(round_to), 1)
    up = lambda c: -(-int(c) // r) * r  # noqa: E731
    nodes = [up(batch_size + RESERVED_NODES)] + [up(c) for c in qn[1:]]
    edges = [up(max(int(c), 1)) for c in qe]  # one padding edge at least: no empty block
    while len({sum(nodes), sum(edges), 2}) < 3:
        if sum(edges) in (sum(nodes), 2):
            edges[-1] += 1
        else:
            nodes[-1] += 1
    return HopBudget(nodes=tuple(nodes), edges=tuple(edges))


def fit_to_hops(sample: Sample, hb: HopBudget) -> Tuple[Sample, int, int]:
    """Cut ``sample`` to fit every block of ``hb``: the first rows of each hop, then
    the first edges of each hop between kept rows.

    Returns:
        ``(sample, nodes cut, edges cut)``; seeds are never cut (the caller's
        batch has at most :attr:`HopBudget.seed_capacity` of them).

    Raises:
        HopBudgetError: a sample with another number of hops.
    """
    npr, epr = _per_hop(sample, hb.hops)
    cap_n = [hb.seed_capacity] + list(hb.nodes[1:])
    if all(a <= c for a, c in zip(npr, cap_n)) and all(a <= c for a, c in zip(epr, hb.edges)):
        return sample, 0, 0
    counts = torch.tensor(npr)
    hop_of_row = torch.repeat_interleave(torch.arange(len(npr)), counts)
    start = torch.cumsum(counts, 0) - counts
    local = torch.arange(sample.num_nodes) - start[hop_of_row]
    keep_row = local < torch.tensor(cap_n)[hop_of_row]
    new_row = torch.cumsum(keep_row.long(), 0) - 1
    ei = sample.edge_index
    ok = keep_row[ei[0]] & keep_row[ei[1]]
    ecounts = torch.tensor(epr)
    hop_of_edge = torch.repeat_interleave(torch.arange(len(epr)), ecounts)
    # the first e_h surviving edges of each hop
    rank = torch.zeros_like(hop_of_edge)
    for h in range(len(epr)):
        sel = (hop_of_edge == h) & ok
        rank[sel] = torch.arange(int(sel.sum()))
    keep_e = ok & (rank < torch.tensor(hb.edges)[hop_of_edge])
    idx = keep_e.nonzero().view(-1)
    kept_n = [min(a, c) for a, c in zip(npr, cap_n)]
    kept_e = torch.bincount(hop_of_edge[idx], minlength=len(epr)).tolist()
    cut = Sample(n_id=sample.n_id[keep_row], edge_index=new_row[ei[:, idx]],
                 e_id=None if sample.e_id is None else sample.e_id[idx],
                 nodes_per_hop=kept_n, edges_per_hop=kept_e,
                 seed_of=None if sample.seed_of is None else sample.seed_of[keep_row])
    return cut, sample.num_nodes - sum(kept_n), sample.num_edges - int(idx.numel())


def _positions(counts: Sequence[int], blocks: Sequence[int]) -> Tensor:
    """Where each of ``sum(counts)`` consecutive items goes when hop ``h``'s
    ``counts[h]`` items start block ``h`` (blocks of ``blocks`` sizes)."""
    c = torch.tensor(list(counts), dtype=torch.long)
    b = torch.tensor(list(blocks), dtype=torch.long)
    hop = torch.repeat_interleave(torch.arange(c.numel()), c)
    shift = (torch.cumsum(b, 0) - b) - (torch.cumsum(c, 0) - c)
    return torch.arange(int(c.sum())) + shift[hop]


def _scatter_rows(v: Tensor, pos: Tensor, rows: int) -> Tensor:
    """``v``'s rows at rows ``pos`` of a new zero ``[rows, ...]`` tensor."""
    t = v.new_zeros((rows,) + tuple(v.shape[1:]))
    t.index_copy_(0, pos, v)
    return t


def pad_per_hop(sample: Sample, hb: HopBudget, node_attrs: Mapping[str, AttrValue],
                edge_attrs: Mapping[str, AttrValue], num_seeds: int, pad_id: int = -1
                ) -> Dict[str, Tensor]:
    """The per-hop padded flat dict of ``sample`` (fitting ``hb``: :func:`fit_to_hops`).

    Args:
        sample: a sampled subgraph whose every hop fits its block.
        hb: the per-hop budget.
        node_attrs / edge_attrs: the graph's node- and edge-level tensors,
            gathered by ``n_id`` / ``e_id``.
        num_seeds: the seeds among the first rows.
        pad_id: ``n_id`` / ``e_id`` of padding rows.

    Returns:
        The flat dict, keys sorted (the plain layout's keys plus
        ``num_sampled_nodes`` / ``num_sampled_edges``).

    Raises:
        HopBudgetError: a hop over its block, or a sample with another number of hops.
        ValueError: edge attributes without the sample's edge ids.
    """
    npr, epr = _per_hop(sample, hb.hops)
    cap_n = [hb.seed_capacity] + list(hb.nodes[1:])
    over = [h for h in range(len(npr)) if npr[h] > cap_n[h]] + \
        [h + 1 for h in range(len(epr)) if epr[h] > hb.edges[h]]
    if over:
        raise HopBudgetError(f"pad_per_hop: hop {over[0]} has {npr} nodes / {epr} edges per hop, "
                             f"over {hb} (cut it first with fit_to_hops)")
    if edge_attrs and sample.e_id is None:
        raise ValueError(f"pad_per_hop: the sample has no e_id (a CSC built with "
                         f"keep_edge_ids=False) but the graph has edge attributes "
                         f"{sorted(edge_attrs)}: build the CSC with keep_edge_ids=True")
    N, E = sum(hb.nodes), sum(hb.edges)
    n, m = sample.num_nodes, sample.num_edges
    pos_n = _positions(npr, hb.nodes)
    pos_e = _positions(epr, hb.edges)
    # tensors, numpy / memmap arrays, feature-store columns: the sampled rows, placed
    out = {k: _scatter_rows(v, pos_n, N) for k, v in gather_rows(node_attrs, sample.n_id).items()}
    if edge_attrs:
        out.update({k: _scatter_rows(v, pos_e, E)
                    for k, v in gather_rows(edge_attrs, sample.e_id).items()})
    own_ids = {k: out.pop(k)[pos_n if k == N_ID else pos_e] for k in (N_ID, E_ID) if k in out}
    pad_row = hb.nodes[0] - 1  # a padding row of the seeds' block: no layer cuts it
    ei = torch.full((2, E), pad_row, dtype=torch.long)
    ei[:, pos_e] = pos_n[sample.edge_index]
    out["edge_index"] = ei
    out.update(sample_keys(sample, N, E, pos_n, pos_e, num_seeds, pad_id, own_ids))
    nm = out[NODE_MASK]
    # real rows in slot 0, padding rows in slot 1 (not sorted: the blocks interleave
    # them); a fill batch (no real row) keeps one padding row in slot 0, as the plain
    # layout does (no graph slot is empty)
    b = (~nm).long()
    if n == 0:
        b[0] = 0
    out[BATCH] = b
    n0 = n if n > 0 else 1
    out[PTR] = torch.tensor([0, n0, N])
    out[GRAPH_MASK] = torch.tensor([n > 0, False])
    out[HOP_NODES] = torch.empty(hop_shape(hb.nodes), dtype=torch.long)
    out[HOP_EDGES] = torch.empty(hop_shape(hb.edges), dtype=torch.long)
    return {k: out[k] for k in sorted(out)}
