"""Weighted neighbour sampling (``weight_attr``): PyG 2.8's rule, a neighbour drawn
with probability proportional to its edge's weight, without replacement unless
``replace``. Frequencies are checked against exact probabilities within a 5-sigma
binomial bound over many draws (a fixed seed: the test is deterministic, and a
sampler ignoring the weights misses the bound by far)."""
from __future__ import annotations

import warnings
from itertools import permutations
from typing import List

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data, HeteroData

from graph_adapter.sampling import (CSC, FixedSizeNeighborLoader, TemporalSamplingError,
                                    sample_neighbors)


def _star(weights: List[float]):
    """Node 0 with one in-edge from each of nodes 1..d (edge i from node i + 1)."""
    d = len(weights)
    ei = torch.stack([torch.arange(1, d + 1), torch.zeros(d, dtype=torch.long)])
    return CSC.from_edge_index(ei, d + 1), torch.tensor(weights, dtype=torch.float64)


def _counts(csc, w, k: int, trees: int, replace: bool, seed: int = 0) -> torch.Tensor:
    """How often each in-edge of node 0 is drawn over ``trees`` independent draws
    (one disjoint tree per copy of the seed)."""
    s = sample_neighbors(csc, torch.zeros(trees, dtype=torch.long), [k], disjoint=True,
                         replace=replace, edge_weight=w,
                         generator=torch.Generator().manual_seed(seed))
    return torch.bincount(s.e_id, minlength=w.numel()).double()


def _within(counts: torch.Tensor, p: torch.Tensor, n: int) -> bool:
    """Every count within 5 binomial standard deviations of ``n * p``."""
    sd = torch.sqrt(n * p * (1 - p)).clamp(min=1e-9)
    return bool(((counts - n * p).abs() <= 5 * sd + 1e-9).all())


def _inclusion(w: List[float], k: int) -> torch.Tensor:
    """Exact chance of each item being among ``k`` successive weighted draws without
    replacement (what Efraimidis-Spirakis keys sample): a sum over ordered k-tuples."""
    d, inc = len(w), [0.0] * len(w)
    for seq in permutations(range(d), k):
        p, left = 1.0, sum(w)
        for i in seq:
            if left <= 0:
                p = 0.0
                break
            p *= w[i] / left
            left -= w[i]
        for i in seq:
            inc[i] += p
    return torch.tensor(inc, dtype=torch.float64)


@pytest.mark.parametrize("weights", [[1.0, 2.0, 3.0, 4.0], [0.5, 0.5, 8.0, 1.0, 0.0]])
def test_one_draw_frequencies_are_proportional_to_the_weights(weights):
    csc, w = _star(weights)
    n = 6000
    c = _counts(csc, w, 1, n, replace=False)
    assert _within(c, w / w.sum(), n)
    assert not _within(c, torch.full_like(w, 1 / w.numel()), n)  # not uniform


@pytest.mark.parametrize("k", [2, 3])
def test_without_replacement_inclusion_matches_successive_weighted_draws(k):
    weights = [1.0, 2.0, 4.0, 8.0, 1.0]
    csc, w = _star(weights)
    n = 6000
    c = _counts(csc, w, k, n, replace=False, seed=k)
    assert _within(c, _inclusion(weights, k), n)


def test_with_replacement_every_draw_is_proportional():
    weights = [3.0, 1.0, 0.0, 6.0]
    csc, w = _star(weights)
    n, k = 3000, 3
    s = sample_neighbors(csc, torch.zeros(n, dtype=torch.long), [k], disjoint=True, replace=True,
                         edge_weight=w, generator=torch.Generator().manual_seed(1))
    assert s.num_edges == n * k  # k draws per tree
    c = torch.bincount(s.e_id, minlength=4).double()
    assert _within(c, w / w.sum(), n * k)
    assert c[2] == 0  # a zero weight is never drawn with replacement


@given(st.lists(st.sampled_from([0.0, 0.5, 1.0, 3.0]), min_size=1, max_size=8),
       st.integers(1, 6), st.integers(0, 99))
@settings(max_examples=40, deadline=None)
def test_a_zero_weight_is_drawn_only_when_too_few_positive_weights(weights, k, seed):
    csc, w = _star(weights)
    s = sample_neighbors(csc, torch.zeros(1, dtype=torch.long), [k], edge_weight=w,
                         generator=torch.Generator().manual_seed(seed))
    got = s.e_id.tolist()
    assert len(got) == len(set(got)) == min(k, len(weights))  # without replacement
    positive = int((w > 0).sum())
    zeros_drawn = sum(1 for e in got if weights[e] == 0)
    assert zeros_drawn == max(0, min(k, len(weights)) - positive)


def test_pyg_weighted_loader_example_homo_and_hetero():
    """PyG: from seed 2, the zero-weight in-edge 1 -> 2 is never taken (3 -> 2 is),
    then 4 -> 3 (3's only positive in-edge)."""
    ei = torch.tensor([[1, 3, 0, 4], [2, 2, 1, 3]])
    w = torch.tensor([0.0, 1.0, 0.0, 1.0])
    d = Data(num_nodes=5, edge_index=ei, edge_weight=w)
    h = HeteroData()
    h["paper"].num_nodes = 5
    h["paper", "to", "paper"].edge_index, h["paper", "to", "paper"].edge_weight = ei, w
    for seed in range(5):
        for data, kw, p in ((d, dict(input_nodes=torch.tensor([2])), ""),
                            (h, dict(input_nodes=("paper", torch.tensor([2]))), "paper")):
            L = FixedSizeNeighborLoader(data, [1, 1], 1, weight_attr="edge_weight", seed=seed,
                                        **kw)
            assert len(L) == 1
            b = next(iter(L))
            nk, ek = (f"{p}/" if p else ""), (f"{p}__to__{p}/" if p else "")
            nm, em = b[nk + "node_mask"], b[ek + "edge_mask"]
            n_id = b[nk + "n_id"][nm]
            assert n_id.tolist() == [2, 3, 4]
            assert n_id[b[ek + "edge_index"][:, em]].tolist() == [[3, 4], [2, 3]]


@given(st.integers(2, 30), st.integers(0, 120), st.integers(0, 10 ** 6), st.integers(1, 6),
       st.booleans())
@settings(max_examples=10, deadline=None)
def test_weighted_loader_every_seed_once_an_epoch(n, m, seed, B, replace):
    g = torch.Generator().manual_seed(seed)
    d = Data(x=torch.randn(n, 2, generator=g), edge_index=torch.randint(0, n, (2, m), generator=g),
             w=torch.rand(m, generator=g))
    L = FixedSizeNeighborLoader(d, [2, 2], B, weight_attr="w", replace=replace, shuffle=True,
                                seed=seed, success_ratio=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a trimmed batch keeps its seeds
        seen = [b["n_id"][b["seed_mask"]] for b in L]
    assert sorted(torch.cat(seen).tolist()) == list(range(n))


def test_weight_errors_are_named():
    d = Data(x=torch.randn(4, 2), edge_index=torch.tensor([[0, 1], [1, 2]]),
             w=torch.tensor([1.0, -1.0]))
    with pytest.raises(TemporalSamplingError, match="weight_attr='nope'"):
        FixedSizeNeighborLoader(d, [2], 2, weight_attr="nope")
    with pytest.raises(TemporalSamplingError, match="negative"):
        FixedSizeNeighborLoader(d, [2], 2, weight_attr="w")
    with pytest.raises(TemporalSamplingError, match="attribute 'x' has shape"):
        FixedSizeNeighborLoader(d, [2], 2, weight_attr="x")  # node-level, not one per edge
