"""``directed=False``: the induced subgraph of the sampled nodes (PyG's
``subgraph_type="induced"``), in the sampler and both loaders."""
from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data

from graph_adapter.sampling import CSC, sample_neighbors
from graph_adapter.sampling import FixedSizeLinkNeighborLoader
from graph_adapter.sampling import FixedSizeNeighborLoader


def _graph(n, m, seed):
    g = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(n, 3, generator=g), edge_index=torch.randint(0, n, (2, m), generator=g),
                y=torch.randint(0, 3, (n,), generator=g))


@given(st.integers(3, 40), st.integers(0, 300),
       st.lists(st.sampled_from([-1, 0, 1, 2, 4]), min_size=1, max_size=3),
       st.integers(1, 8), st.booleans(), st.integers(0, 10 ** 6))
@settings(max_examples=60, deadline=None)
def test_induced_edges_are_every_input_edge_between_sampled_nodes(n, m, fan, bs, replace, seed):
    d = _graph(n, m, seed)
    csc = CSC.from_edge_index(d.edge_index, n)
    seeds = torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:bs]
    kw = dict(replace=replace)
    s = sample_neighbors(csc, seeds, fan, directed=False,
                         generator=torch.Generator().manual_seed(seed), **kw)
    ref = sample_neighbors(csc, seeds, fan, generator=torch.Generator().manual_seed(seed), **kw)
    assert torch.equal(s.n_id, ref.n_id)  # the nodes are the directed sample's
    inside = torch.zeros(n, dtype=torch.bool)
    inside[s.n_id] = True
    want = (inside[d.edge_index[0]] & inside[d.edge_index[1]]).nonzero().view(-1)
    assert sorted(s.e_id.tolist()) == want.tolist()  # each such edge once, no other
    assert torch.equal(s.n_id[s.edge_index], d.edge_index[:, s.e_id])
    assert bool((s.edge_index[1][1:] >= s.edge_index[1][:-1]).all())  # by destination row
    assert sum(s.edges_per_hop) == s.num_edges
    assert len(s.edges_per_hop) == len(s.nodes_per_hop)
    assert bool((csc.scratch() == -1).all())  # the scratch array is left clean


def test_loader_batches_hold_the_induced_subgraph_and_one_signature():
    d = _graph(200, 1500, 1)
    L = FixedSizeNeighborLoader(d, [3, 2], 16, shuffle=True, directed=False)
    D = FixedSizeNeighborLoader(d, [3, 2], 16, shuffle=True, budget=L.budget)
    sigs, seen = set(), []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for flat, ref in zip(L, D):
            sigs.add(tuple((k, tuple(v.shape), v.dtype) for k, v in flat.items()))
            nid = flat["n_id"][flat["node_mask"]]
            assert torch.equal(nid, ref["n_id"][ref["node_mask"]])  # same nodes as directed
            em = flat["edge_mask"]
            assert int(em.sum()) >= int(ref["edge_mask"].sum())  # a superset of the edges
            assert torch.equal(flat["n_id"][flat["edge_index"][:, em]],
                               d.edge_index[:, flat["e_id"][em]])
            seen.append(flat["n_id"][flat["seed_mask"]])
    assert len(sigs) == 1
    assert sorted(torch.cat(seen).tolist()) == list(range(200))  # every seed once
    assert L.stats.trimmed_batches == 0 or L.stats.trimmed_edges > 0


def test_link_loader_takes_directed_false():
    d = _graph(100, 800, 2)
    L = FixedSizeLinkNeighborLoader(d, [3], batch_size=20, directed=False)
    flat = L.batch(0, 0)
    em = flat["edge_mask"]
    nid = flat["n_id"][flat["node_mask"]]
    inside = torch.zeros(100, dtype=torch.bool)
    inside[nid] = True
    want = int((inside[d.edge_index[0]] & inside[d.edge_index[1]]).sum())
    assert int(em.sum()) == min(want, int(L.budget.edges))


def test_directed_false_with_disjoint_is_a_named_error():
    d = _graph(30, 100, 0)
    with pytest.raises(NotImplementedError, match="directed=False, disjoint=True"):
        FixedSizeNeighborLoader(d, [2], 4, directed=False, disjoint=True)
    with pytest.raises(NotImplementedError, match="directed=False, disjoint=True"):
        sample_neighbors(CSC.from_edge_index(d.edge_index, 30), torch.arange(3), [2],
                         directed=False, disjoint=True)
