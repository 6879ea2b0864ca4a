"""A sampled subgraph into a fixed budget: pad it, trim it, fit the budget.

The pure functions behind the neighbour, link and cluster loaders
(:mod:`graph_adapter.sampling.neighbor`, :mod:`~graph_adapter.sampling.link`,
:mod:`~graph_adapter.sampling.cluster`): :func:`pad_sample` lays one
:class:`~graph_adapter.sampling.csr.Sample` out as ``collate_padded([subgraph],
budget)`` does (plus ``n_id``, ``e_id``, ``seed_mask``, ``seed_of``),
:func:`trim_sample` is the ``oversize="trim"`` policy (the first rows and edges,
hop order), :func:`fit_neighbor_budget` the quantile budget of sampled sizes.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from ..batching import RESERVED_NODES, Budget
from .csr import Sample
from .inputs.source import AttrValue, gather_rows
from ..contract import padding_node, slot_counts
from ..format import (BATCH, E_ID, EDGE_MASK, GRAPH_MASK, N_ID, NODE_MASK, PTR, SEED_MASK,
                      SEED_OF)

__all__ = ["pad_sample", "trim_sample", "fit_neighbor_budget", "sample_keys"]


def pad_sample(sample: Sample, budget: Budget, node_attrs: Mapping[str, AttrValue],
               edge_attrs: Mapping[str, AttrValue], num_seeds: int, pad_id: int = -1,
               ) -> Dict[str, Tensor]:
    """The padded flat dict of one sample that fits ``budget`` (``graphs=2``).

    Same layout as ``collate_padded([subgraph], budget)`` (keys sorted), plus
    ``n_id`` / ``e_id`` padded with ``pad_id`` and ``seed_mask``. The attributes
    are tensors, :class:`~graph_adapter.sampling.inputs.source.RowSource` (numpy, memmap,
    feature-store columns), gathered by the sample's ``n_id`` / ``e_id``; a graph's
    own ``n_id`` / ``e_id`` attribute fills those keys' real rows (PyG's loaders).
    """
    N, E = int(budget.nodes), int(budget.edges)
    n, m = sample.num_nodes, sample.num_edges
    if edge_attrs and sample.e_id is None:
        raise ValueError(f"pad_sample: the sample has no e_id (a CSC built with "
                         f"keep_edge_ids=False) but the graph has edge attributes "
                         f"{sorted(edge_attrs)}: build the CSC with keep_edge_ids=True")
    # tensors, numpy / memmap arrays, feature-store columns: the sampled rows only
    out: Dict[str, Tensor] = gather_rows(node_attrs, sample.n_id, N)
    if edge_attrs:
        out.update(gather_rows(edge_attrs, sample.e_id, E))
    # the graph's own n_id / e_id: their real rows, into those keys (sample_keys)
    own_ids = {k: out.pop(k)[:n if k == N_ID else m] for k in (N_ID, E_ID) if k in out}
    ei = torch.full((2, E), padding_node(N), dtype=torch.long)
    ei[:, :m] = sample.edge_index
    out["edge_index"] = ei
    out.update(sample_keys(sample, N, E, slice(0, n), slice(0, m), num_seeds, pad_id, own_ids))
    # the real graph in slot 0 (a fill batch, n == 0, has none), the padding after it
    counts = slot_counts([n] if n > 0 else [], 2, N - n)
    out[BATCH] = torch.repeat_interleave(torch.arange(2), torch.tensor(counts), output_size=N)
    out[PTR] = torch.tensor([0, counts[0], N])
    out[GRAPH_MASK] = torch.tensor([n > 0, False])
    return {k: out[k] for k in sorted(out)}


def sample_keys(sample: Sample, N: int, E: int, rows_n: Any, rows_e: Any, num_seeds: int,
                pad_id: int, own_ids: Mapping[str, Tensor]) -> Dict[str, Tensor]:
    """A padded sample's ``n_id`` / ``e_id`` (``pad_id`` on padding), ``seed_mask``,
    ``seed_of`` (disjoint), ``node_mask`` and ``edge_mask``, its real rows at ``rows_n`` /
    ``rows_e`` (a slice: the plain layout; positions: the per-hop blocks). ``own_ids``:
    a graph's own ``n_id`` / ``e_id`` gathered by row, which fill those keys' real rows
    instead (PyG's loaders keep them so)."""
    out: Dict[str, Tensor] = {}
    nid = torch.full((N,), pad_id, dtype=torch.long)
    nid[rows_n] = sample.n_id if N_ID not in own_ids else own_ids[N_ID].long()
    out[N_ID] = nid
    if sample.e_id is not None:
        eid = torch.full((E,), pad_id, dtype=torch.long)
        eid[rows_e] = sample.e_id if E_ID not in own_ids else own_ids[E_ID].long()
        out[E_ID] = eid
    sm = torch.zeros(N, dtype=torch.bool)
    sm[:num_seeds] = True
    out[SEED_MASK] = sm
    if sample.seed_of is not None:
        so = torch.full((N,), -1, dtype=torch.long)
        so[rows_n] = sample.seed_of
        out[SEED_OF] = so
    nm = torch.zeros(N, dtype=torch.bool)
    nm[rows_n] = True
    out[NODE_MASK] = nm
    em = torch.zeros(E, dtype=torch.bool)
    em[rows_e] = True
    out[EDGE_MASK] = em
    return out


def trim_sample(sample: Sample, max_nodes: int, max_edges: int) -> Tuple[Sample, int, int]:
    """Cut ``sample`` to ``max_nodes`` rows and ``max_edges`` edges: the first rows
    (hop order) and the first edges (hop order) between kept rows.

    Returns ``(sample, nodes cut, edges cut)``; seeds are never cut (the
    budget holds ``batch_size`` real nodes).
    """
    n, m = sample.num_nodes, sample.num_edges
    if n <= max_nodes and m <= max_edges:
        return sample, 0, 0
    keep_n = min(n, max_nodes)
    ei = sample.edge_index
    keep_e = (ei[0] < keep_n) & (ei[1] < keep_n)
    idx = keep_e.nonzero().view(-1)[:max_edges]
    hop_end = np.cumsum(sample.nodes_per_hop)
    nodes_per_hop = [int(min(b, keep_n) - min(a, keep_n))
                     for a, b in zip(np.concatenate([[0], hop_end[:-1]]), hop_end)]
    e_end = np.cumsum(sample.edges_per_hop)
    hop_of_edge = np.searchsorted(e_end, idx.numpy(), side="right")
    edges_per_hop = np.bincount(hop_of_edge, minlength=len(sample.edges_per_hop)).tolist()
    cut = Sample(
        n_id=sample.n_id[:keep_n], edge_index=ei[:, idx],
        e_id=None if sample.e_id is None else sample.e_id[idx],
        nodes_per_hop=nodes_per_hop, edges_per_hop=edges_per_hop,
        seed_of=None if sample.seed_of is None else sample.seed_of[:keep_n])
    return cut, n - keep_n, m - int(idx.numel())


def _distinct(nodes: int, edges: int, graphs: int, avoid: Sequence[int] = ()) -> Tuple[int, int]:
    """Nudge ``edges`` (then ``nodes``) up by one until the three counts differ
    (and differ from every count in ``avoid``: the link loader's slot counts)."""
    avoid = tuple(avoid)
    while edges in (nodes, graphs) + avoid:
        edges += 1
    while nodes in (edges, graphs) + avoid:
        nodes += 1
    return nodes, edges


def fit_neighbor_budget(sizes: Sequence[Tuple[int, int]], batch_size: int,
                        success_ratio: float = 0.99, round_to: int = 1,
                        avoid: Sequence[int] = ()) -> Budget:
    """A ``graphs=2`` budget holding ``success_ratio`` of the sampled ``(nodes, edges)``.

    The node count is the quantile of the real node counts (at least
    ``batch_size``: the seeds always fit) plus the reserved padding nodes; the
    edge count the quantile of the edge counts (at least 1); both rounded up to
    ``round_to``; ties nudged apart, also from the row counts in ``avoid``
    (other keys' lengths, e.g. the link loader's supervision slots).
    """
    if not 0 < success_ratio <= 1:
        raise ValueError(f"success_ratio={success_ratio}; choose a quantile in (0, 1]")
    arr = np.asarray(sizes, dtype=np.float64).reshape(-1, 2)
    q = np.quantile(arr, success_ratio, axis=0, method="higher")
    nodes = max(int(q[0]), batch_size) + RESERVED_NODES
    edges = max(int(q[1]), 1)
    r = max(int(round_to), 1)
    nodes, edges = -(-nodes // r) * r, -(-edges // r) * r
    nodes, edges = _distinct(nodes, edges, 2, avoid)
    return Budget(nodes=nodes, edges=edges, graphs=2)
