"""The cluster loader's PyG arguments: ``sparse_format`` (PyG's edge order) and
``keep_inter_cluster_edges`` (outer ends as rows of their own), with the budget's promise
kept: the clusters' rows are never cut; the outer rows are fitted and trimmed first.
(Equality with PyG's ``ClusterLoader`` / ``ClusterData``: tests/sampling/test_pyg_equivalence.py.)"""
from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch_geometric.data import Data

from graph_adapter.batching import Budget
from graph_adapter.sampling import FixedSizeClusterLoader


def _graph(n: int = 40, m: int = 160, seed: int = 0) -> Data:
    g = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(n, 3, generator=g), edge_index=torch.randint(0, n, (2, m), generator=g))


def test_unknown_sparse_format_is_named():
    with pytest.raises(ValueError, match=r"sparse_format='coo'; choose one of \('csr', 'csc'\)"):
        FixedSizeClusterLoader(_graph(), batch_size=1, partition=torch.arange(40) % 4,
                               sparse_format="coo")


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2 ** 16), st.integers(1, 6), st.integers(1, 3),
       st.sampled_from(["csr", "csc"]))
def test_kept_inter_cluster_edges_every_edge_of_the_clusters_once(seed, parts, batch_size, fmt):
    data = _graph(seed=seed)
    part = torch.randint(0, parts, (40,), generator=torch.Generator().manual_seed(seed))
    part = torch.unique(part, return_inverse=True)[1]  # no empty part
    loader = FixedSizeClusterLoader(data, batch_size=batch_size, partition=part, sparse_format=fmt,
                                    keep_inter_cluster_edges=True, success_ratio=1.0,
                                    oversize="error")
    side = 0 if fmt == "csr" else 1  # the end in the batch's clusters
    seen = []
    for flat in loader:
        sm, nm, em = flat["seed_mask"], flat["node_mask"], flat["edge_mask"]
        ei, nid = flat["edge_index"][:, em], flat["n_id"]
        # cluster rows first (seeds), outer rows after them, features gathered for both
        assert bool((sm[:int(sm.sum())]).all()) and not bool(sm[int(sm.sum()):].any())
        assert torch.equal(flat["x"][nm], data.x[nid[nm]])
        assert bool((ei[side] < int(sm.sum())).all())
        assert torch.equal(nid[ei], data.edge_index[:, flat["e_id"][em]])
        seen.append(flat["e_id"][em])
    # every edge whose `side` end is a node is in the batch of that node's cluster, once
    assert sorted(torch.cat(seen).tolist()) == list(range(data.num_edges))


def test_outer_rows_are_trimmed_first_and_counted():
    data = _graph(n=60, m=400, seed=3)
    part = torch.arange(60) % 3
    full = FixedSizeClusterLoader(data, batch_size=1, partition=part,
                                  keep_inter_cluster_edges=True, success_ratio=1.0)
    small = Budget(nodes=20 + 2 + 5, edges=int(full.budget.edges), graphs=2)  # 5 outer rows
    loader = FixedSizeClusterLoader(data, batch_size=1, partition=part, budget=small,
                                    keep_inter_cluster_edges=True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        flats = list(loader)
    assert loader.stats.trimmed_nodes > 0 and any("trimmed" in str(x.message) for x in w)
    for flat, whole in zip(flats, full):
        # the clusters' rows are all there; the outer rows kept are the first of the full batch's
        assert int(flat["seed_mask"].sum()) == 20
        n = int(flat["node_mask"].sum())
        assert n == 25 and torch.equal(flat["n_id"][:n], whole["n_id"][:n])


def test_to_pyg_of_a_micro_batched_batch_is_a_list():
    data = _graph()
    loader = FixedSizeClusterLoader(data, batch_size=1, partition=torch.arange(40) % 4,
                                    micro_batches=2)
    flat = next(iter(loader))
    one, two = loader.to_pyg(flat)
    assert one.num_nodes == two.num_nodes == 10
    assert torch.equal(torch.cat([one.x, two.x]), data.x[torch.cat(
        [flat["n_id"][i][flat["node_mask"][i]] for i in range(2)])])
