"""Packers: exactly once, capacity, reproducibility, JSON plans."""
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from graph_adapter.batching import Budget
from graph_adapter.batching import (GraphSizes, find_oversize, pack_greedy, pack_histogram,
                                    plan_efficiency, plan_epoch)

SETTINGS = settings(deadline=None)

pairs_st = st.lists(st.tuples(st.integers(0, 20), st.integers(0, 40)), min_size=0, max_size=80)


def check_plan(plan, m, budget, indices):
    cap, gcap = budget.capacity()
    flat = [i for b in plan for i in b]
    assert sorted(flat) == sorted(int(i) for i in indices)  # exactly once
    for b in plan:
        assert 1 <= len(b) <= gcap
        assert np.all(m[b].sum(axis=0) <= cap)
    json.dumps(plan)  # plain ints


@SETTINGS
@given(pairs=pairs_st, nodes=st.integers(22, 60), edges=st.integers(40, 100),
       graphs=st.integers(2, 12), packer=st.sampled_from(["greedy", "histogram"]),
       shuffle=st.booleans(), seed=st.integers(0, 5), ob=st.integers(1, 4))
def test_exactly_once_and_capacity(pairs, nodes, edges, graphs, packer, shuffle, seed, ob):
    m = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    edges += edges == nodes  # one edge more where N == E: Budget refuses a tie
    budget = Budget(nodes=nodes, edges=edges, graphs=graphs)
    plan = plan_epoch(m, budget, packer=packer, shuffle=shuffle, seed=seed, open_batches=ob)
    check_plan(plan, m, budget, range(len(pairs)))
    again = plan_epoch(m, budget, packer=packer, shuffle=shuffle, seed=seed, open_batches=ob)
    assert plan == again  # reproducible
    # issue 15 item 2: a padding node for every padding graph slot, wherever a
    # graph's own nodes leave N - G room for it (capped graphs may not)
    room = nodes - graphs
    for bb in plan:
        if len(m) and room >= 0 and np.all(m[bb, 0] - 1 <= room):
            n, g = int(m[bb, 0].sum()), len(bb)
            assert nodes - n >= graphs - g, (bb, n, g)


def test_epochs_differ_and_indices_subset():
    rng = np.random.default_rng(0)
    m = np.stack([rng.integers(1, 20, 300), rng.integers(0, 40, 300)], axis=1)
    b = Budget(nodes=200, edges=400, graphs=30)
    for packer in ("greedy", "histogram"):
        p0 = plan_epoch(m, b, packer=packer, shuffle=True, seed=1, epoch=0)
        p1 = plan_epoch(m, b, packer=packer, shuffle=True, seed=1, epoch=1)
        assert p0 != p1
        sub = np.arange(0, 300, 3)
        ps = plan_epoch(m, b, packer=packer, shuffle=True, seed=1, indices=sub)
        check_plan(ps, m, b, sub)
    # no shuffle: the greedy plan keeps dataset order
    p = plan_epoch(m, b, packer="greedy", shuffle=False, open_batches=1)
    assert [i for bb in p for i in bb] == list(range(300))


def test_histogram_reaches_lower_bound_on_small_items():
    rng = np.random.default_rng(0)
    m = np.stack([rng.integers(1, 10, 2000), rng.integers(0, 10, 2000)], axis=1)
    # G = 105: N >= G, so no padding slot is left empty (FORMAT.md); the lower
    # bound is the largest over nodes, graph slots and the slots' padding nodes
    # (every batch keeps sum(n_i - 1) <= N - G: packing.slot_dims)
    b = Budget(nodes=501, edges=2000, graphs=105)
    plan = plan_epoch(m, b, packer="histogram", shuffle=True)
    lower = int(max(np.ceil(m[:, 0].sum() / 499), np.ceil(2000 / 104),
                    np.ceil((m[:, 0] - 1).sum() / (501 - 105))))
    assert len(plan) == lower
    eff = plan_efficiency(plan, m, b)
    assert eff["node_efficiency"] > 0.95 and eff["graphs"] == 2000


def test_oversize_and_errors():
    m = np.array([[5, 5], [50, 1], [1, 80]])
    b = Budget(nodes=11, edges=20, graphs=4)
    assert find_oversize(GraphSizes(m), b).tolist() == [1, 2]
    with pytest.raises(ValueError, match="does not fit"):
        pack_greedy(m, [0, 1], *b.capacity())
    with pytest.raises(ValueError, match="does not fit"):
        pack_histogram(m, [0, 1], *b.capacity())
    with pytest.raises(ValueError, match="packer"):
        plan_epoch(m[:1], b, packer="nope")


def test_multi_dim_sizes():
    # hetero: 2 node types + 1 edge type
    rng = np.random.default_rng(0)
    m = rng.integers(0, 6, (100, 3))
    sizes = GraphSizes(m, ("a", "b"), ("a__r__b",))
    b = Budget(nodes={"a": 31, "b": 32}, edges={"a__r__b": 30}, graphs=12)
    for packer in ("greedy", "histogram"):
        plan = plan_epoch(sizes, b, packer=packer, shuffle=True)
        check_plan(plan, m, b, range(100))


@SETTINGS
@given(rows=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(0, 9)),
                     min_size=1, max_size=60),
       dims=st.integers(1, 3), graph_cap=st.integers(1, 6), open_batches=st.integers(1, 4),
       seed=st.integers(0, 99))
def test_unrolled_greedy_is_the_generic_greedy(rows, dims, graph_cap, open_batches, seed):
    """Up to 3 dims the greedy packer runs an unrolled loop; with 2 extra dims
    of zeros it runs the generic one: the plans are the same."""
    m = np.asarray(rows, dtype=np.int64)[:, :dims]
    cap = m.max(axis=0) + np.random.default_rng(seed).integers(0, 15, dims)
    order = np.random.default_rng(seed).permutation(len(m))
    fast = pack_greedy(m, order, cap, graph_cap, open_batches)
    generic = pack_greedy(np.concatenate([m, np.zeros((len(m), 2), np.int64)], axis=1), order,
                          np.concatenate([cap, [0, 0]]), graph_cap, open_batches)
    assert fast == generic


def test_fit_plans_a_sample_of_a_large_dataset(monkeypatch):
    import graph_adapter.batching.budget as budget_mod

    rng = np.random.default_rng(0)
    sizes = np.stack([rng.integers(1, 30, 400), rng.integers(0, 60, 400)], axis=1)
    whole = Budget.fit(sizes, 8)
    assert "planned_graphs" not in whole.report
    monkeypatch.setattr(budget_mod, "_PLAN_GRAPHS", 100)
    sampled = Budget.fit(sizes, 8)
    assert sampled.report["planned_graphs"] == 100
    assert sampled.report["graphs"] == 100  # the efficiency figures are the sample's
    assert not len(find_oversize(GraphSizes(sizes), sampled))
