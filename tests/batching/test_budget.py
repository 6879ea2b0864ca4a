"""Budget: validation, JSON round trip, tight and fit."""
import dataclasses
import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from graph_adapter.batching import Budget
from graph_adapter.batching import graph_sizes, plan_epoch

SETTINGS = settings(deadline=None)


def sizes_array(pairs):
    return np.asarray(pairs, dtype=np.int64).reshape(-1, 2)


def test_validation():
    with pytest.raises(ValueError, match="graphs"):
        Budget(nodes=10, edges=10, graphs=1)
    with pytest.raises(ValueError, match="nodes"):
        Budget(nodes=0, edges=10, graphs=2)
    with pytest.raises(ValueError, match="nodes must be >= 2.*padding nodes"):
        Budget(nodes=1, edges=10, graphs=2)  # two padding nodes are reserved
    with pytest.raises(TypeError):
        Budget(nodes=1.5, edges=10, graphs=2)
    with pytest.raises(ValueError, match="both"):
        Budget(nodes={"a": 3}, edges=10, graphs=2)
    b = Budget(nodes=10, edges=0, graphs=2)
    assert b.max_real_nodes == 8 and b.max_real_graphs == 1
    cap, gcap = b.capacity()
    assert cap.tolist() == [8, 0] and gcap == 1


def test_json_round_trip_and_frozen():
    b = Budget(nodes=100, edges=300, graphs=9, report={"node_efficiency": 0.9})
    s = b.to_json()
    assert json.loads(s)["nodes"] == 100
    b2 = Budget.from_json(s)
    assert b2 == b and b2.report == b.report
    with pytest.raises(dataclasses.FrozenInstanceError):  # a Budget is immutable
        b.nodes = 3
    h = Budget(nodes={"paper": 10, "author": 5},
               edges={("author", "writes", "paper"): 20}, graphs=3)
    assert h.is_hetero and h.edges == {"author__writes__paper": 20}
    assert Budget.from_json(h.to_json()) == h
    assert h.capacity()[0].tolist() == [3, 8, 20]  # sorted node types, then edge types
    with pytest.raises(ValueError, match="unknown"):
        Budget.from_dict({"nodes": 3, "edges": 3, "graphs": 3, "pickle": 1})


@SETTINGS
@given(pairs=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 60)), min_size=1,
                      max_size=40),
       k=st.integers(1, 10), seed=st.integers(0, 100))
def test_tight_every_batch_fits(pairs, k, seed):
    m = sizes_array(pairs)
    b = Budget.tight(m, k)
    k = min(k, len(pairs))
    assert b.graphs == k + 1
    rng = np.random.default_rng(seed)
    for _ in range(20):
        idx = rng.choice(len(pairs), size=k, replace=False)
        tot = m[idx].sum(axis=0)
        assert tot[0] <= b.nodes - 2 and tot[1] <= b.edges  # two padding nodes left


@SETTINGS
@given(pairs=st.lists(st.tuples(st.integers(1, 30), st.integers(0, 60)), min_size=2,
                      max_size=60),
       k=st.integers(1, 8))
def test_fit_every_graph_fits_and_reports(pairs, k):
    m = sizes_array(pairs)
    b = Budget.fit(m, k, num_samples=200)
    cap, gcap = b.capacity()
    assert np.all(m <= cap[None, :])  # nothing is oversize
    assert gcap >= min(k, len(pairs))
    r = b.report
    for key in ("node_efficiency", "edge_efficiency", "graph_efficiency", "batches",
                "sampled_fit_ratio"):
        assert key in r
    assert 0 < r["node_efficiency"] <= 1
    tight = Budget.tight(m, k)
    # never above tight, except for the room that keeps padding slots non-empty
    # (N - G >= the largest graph's nodes - 1) and one or two rows that keep
    # N, E and G pairwise different (issue 15 items 2 and 10)
    assert b.nodes <= max(tight.nodes, b.graphs + int(m[:, 0].max()) - 1) + 1
    assert b.edges <= tight.edges + 2
    assert len({b.nodes, b.edges, b.graphs}) == 3
    # the plan used for the report packs every graph exactly once
    plan = plan_epoch(m, b, shuffle=True, seed=0)
    assert sorted(i for bb in plan for i in bb) == list(range(len(pairs)))


def test_fit_success_ratio_monotone_and_round_to():
    rng = np.random.default_rng(0)
    m = np.stack([rng.integers(5, 40, 500), rng.integers(5, 90, 500)], axis=1)
    # success_ratio sizes the opt-in fill_to_brim budget only
    lo = Budget.fit(m, 16, success_ratio=0.5, num_samples=500, fill_to_brim=True)
    hi = Budget.fit(m, 16, success_ratio=0.99, num_samples=500, fill_to_brim=True)
    assert lo.nodes <= hi.nodes and lo.edges <= hi.edges
    assert abs(hi.report["sampled_fit_ratio"] - 0.99) < 0.02
    r = Budget.fit(m, 16, round_to=8, num_samples=500)
    assert r.nodes % 8 == 0 and r.edges % 8 == 0


def test_fit_on_data_list_and_efficiency():
    from torch_geometric.data import Data

    rng = np.random.default_rng(1)
    graphs = []
    for _ in range(300):
        n = int(rng.integers(5, 30))
        e = int(rng.integers(n, 3 * n))
        graphs.append(Data(x=torch.zeros(n, 1), edge_index=torch.zeros(2, e, dtype=torch.long)))
    b = Budget.fit(graphs, 32)
    assert graph_sizes(graphs).num_graphs == 300
    assert b.report["node_efficiency"] > 0.85  # 10 batches: the last one is partial
    hb = Budget.fit(graphs, 32, packer="histogram")
    assert hb.report["node_efficiency"] > 0.85


def test_bad_args():
    m = sizes_array([(3, 4)])
    with pytest.raises(ValueError):
        Budget.fit(m, 0)
    with pytest.raises(ValueError):
        Budget.fit(m, 4, success_ratio=1.5)
    with pytest.raises(ValueError):
        Budget.tight(sizes_array([]), 4)
