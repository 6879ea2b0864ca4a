"""The sampler's fast paths against their plain definitions: new rows in order of
first occurrence through the scratch array, and both k-subset draws (Floyd's for
fanouts up to ``FLOYD_MAX_K``, the sorted random keys above it)."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from graph_adapter.sampling import csr
from graph_adapter.sampling.csr import (CSC, ArrayRows, _floyd_subsets, sample_hop, sample_neighbors,
                                    unique_in_order)

#: FLOYD_MAX_K values that route every fanout of these tests to one path
PATHS = {"floyd": 32, "sort": -1}


@given(n=st.integers(1, 60), seen=st.lists(st.integers(0, 59), max_size=20, unique=True),
       keys=st.lists(st.integers(0, 59), max_size=120), dtype=st.sampled_from(["int32", "int64"]))
@settings(max_examples=60, deadline=None)
def test_add_unseen_gives_new_rows_in_order_of_first_occurrence(n, seen, keys, dtype):
    seen = torch.tensor([s for s in seen if s < n], dtype=torch.long)
    keys = torch.tensor([k for k in keys if k < n], dtype=torch.long)
    scratch = torch.full((n,), -1, dtype=getattr(torch, dtype))
    rows = ArrayRows(scratch, seen)
    new = rows.add_unseen(keys)
    # the plain definition: the distinct keys not seen before, in order of first occurrence
    want = unique_in_order(keys[~torch.isin(keys, seen)]) if keys.numel() else keys
    assert torch.equal(new, want)
    assert rows.n == seen.numel() + want.numel()
    # every key's row: the seen ones keep theirs, the new ones follow in order
    order = torch.cat([seen, want])
    assert torch.equal(rows.lookup(order), torch.arange(order.numel()))
    rows.reset()
    assert bool((scratch == -1).all())


@pytest.mark.parametrize("path", sorted(PATHS))
@given(degs=st.lists(st.integers(0, 12), min_size=1, max_size=30), k=st.integers(0, 6),
       seed=st.integers(0, 10 ** 6))
@settings(max_examples=40, deadline=None)
def test_sample_hop_keeps_a_k_subset_of_each_node_in_csc_order(path, degs, k, seed):
    """Each frontier node keeps min(deg, k) of its own slots, distinct, in CSC order."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(csr, "FLOYD_MAX_K", PATHS[path])
        _check_k_subsets(degs, k, seed)


def _check_k_subsets(degs, k, seed):
    dst = torch.repeat_interleave(torch.arange(len(degs)), torch.tensor(degs))
    src = torch.randint(0, len(degs), (dst.numel(),), generator=torch.Generator().manual_seed(seed))
    csc = CSC.from_edge_index(torch.stack([src, dst]), len(degs))
    frontier = torch.randperm(len(degs), generator=torch.Generator().manual_seed(seed + 1))
    seg, pos = sample_hop(csc, frontier, k, False, torch.Generator().manual_seed(seed))
    start, deg = csc.slot_range(frontier)
    assert torch.equal(torch.bincount(seg, minlength=len(degs)), deg.clamp(max=k))
    assert bool((seg[1:] >= seg[:-1]).all())  # grouped by frontier position, in order
    for i in range(len(degs)):
        p = pos[seg == i]
        assert bool(((p >= start[i]) & (p < start[i] + deg[i])).all())  # the node's own slots
        assert bool((p[1:] > p[:-1]).all())  # distinct, in CSC order


@pytest.mark.parametrize("path", sorted(PATHS))
def test_both_subset_draws_are_uniform(monkeypatch, path):
    """One node with 7 in-edges, fanout 3: each of the 35 subsets about 1/35 (chi-square,
    34 dof, p = 0.001), for Floyd's draw and for the sorted keys."""
    monkeypatch.setattr(csr, "FLOYD_MAX_K", PATHS[path])
    csc = CSC.from_edge_index(torch.tensor([[1, 2, 3, 4, 5, 6, 7], [0] * 7]), 8)
    g = torch.Generator().manual_seed(0)
    counts = {}
    trials = 3500
    for _ in range(trials):
        s = sample_neighbors(csc, torch.tensor([0]), [3], generator=g)
        key = tuple(sorted(s.n_id[1:].tolist()))
        counts[key] = counts.get(key, 0) + 1
    assert len(counts) == 35 and all(len(key) == 3 for key in counts)
    expect = trials / 35
    assert sum((c - expect) ** 2 / expect for c in counts.values()) < 65.2


@given(deg=st.lists(st.integers(1, 40), min_size=1, max_size=20), k=st.integers(1, 8),
       seed=st.integers(0, 10 ** 6))
@settings(max_examples=60, deadline=None)
def test_floyd_subsets_are_distinct_ascending_offsets_in_range(deg, k, seed):
    d = torch.tensor(deg) + k  # every node has more than k slots
    out = _floyd_subsets(d, k, torch.Generator().manual_seed(seed))
    assert out.shape == (d.numel(), k)
    assert bool((out >= 0).all()) and bool((out < d.unsqueeze(1)).all())
    assert bool((out[:, 1:] > out[:, :-1]).all())  # distinct and ascending


def test_padding_gathers_in_place_and_names_a_missing_edge_id():
    from graph_adapter import Budget
    from graph_adapter.sampling import Sample
    from graph_adapter.sampling import pad_sample

    x = torch.arange(12.).view(6, 2)
    s = Sample(n_id=torch.tensor([4, 1]), edge_index=torch.tensor([[1], [0]]), e_id=None,
               nodes_per_hop=[1, 1], edges_per_hop=[1])
    flat = pad_sample(s, Budget(nodes=5, edges=3, graphs=2), {"x": x}, {}, 1)
    assert torch.equal(flat["x"], torch.cat([x[[4, 1]], torch.zeros(3, 2)]))
    with pytest.raises(ValueError, match=r"no e_id.*edge attributes \['edge_attr'\].*keep_edge_ids"):
        pad_sample(s, Budget(nodes=5, edges=3, graphs=2), {"x": x}, {"edge_attr": x}, 1)
