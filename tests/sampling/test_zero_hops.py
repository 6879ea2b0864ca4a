"""``num_neighbors=[]`` (zero hops: each batch is its seeds alone, no edge), one entry
point for ``Data`` and ``HeteroData``, and PyG's wording for a fanout-length mismatch."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data, HeteroData

from graph_adapter.sampling import (FanoutError, FanoutLengthError, FixedSizeHeteroNeighborLoader,
                                    FixedSizeNeighborLoader, InputNodesError)


@given(st.integers(1, 40), st.integers(0, 100), st.integers(1, 9), st.booleans(),
       st.booleans(), st.integers(0, 99))
@settings(max_examples=15, deadline=None)
def test_zero_hops_batches_are_the_seeds_alone(n, m, B, with_edges, shuffle, seed):
    g = torch.Generator().manual_seed(seed)
    d = Data(x=torch.randn(n, 2, generator=g), num_nodes=n)
    if with_edges:
        d.edge_index = torch.randint(0, n, (2, m), generator=g)
    L = FixedSizeNeighborLoader(d, [], B, shuffle=shuffle, seed=seed)
    seen = []
    for b in L:
        nm, sm = b["node_mask"], b["seed_mask"]
        assert torch.equal(nm, sm)  # every real row is a seed
        assert int(b["edge_mask"].sum()) == 0
        assert torch.equal(b["x"][nm], d.x[b["n_id"][nm]])
        seen.append(b["n_id"][sm])
    assert sorted(torch.cat(seen).tolist()) == list(range(n))


def test_zero_hops_hetero_without_edge_types():
    """PyG: ``HeteroData(paper=dict(num_nodes=100))`` with ``num_neighbors=[]``."""
    h = HeteroData(paper=dict(num_nodes=100))
    L = FixedSizeNeighborLoader(h, [], 20, input_nodes="paper")
    assert isinstance(L, FixedSizeHeteroNeighborLoader)
    seen = []
    for b in L:
        assert torch.equal(b["paper/node_mask"], b["paper/seed_mask"])
        seen.append(b["paper/n_id"][b["paper/seed_mask"]])
    assert sorted(torch.cat(seen).tolist()) == list(range(100))
    with pytest.raises(FanoutError, match="no edge type"):
        FixedSizeNeighborLoader(h, [2], 20, input_nodes="paper")


def test_zero_hops_hetero_with_edges_samples_none():
    h = HeteroData()
    h["a"].x, h["b"].x = torch.randn(10, 2), torch.randn(8, 2)
    h["a", "to", "b"].edge_index = torch.stack([torch.randint(0, 10, (30,)),
                                               torch.randint(0, 8, (30,))])
    for fan in ([], {("a", "to", "b"): []}):
        L = FixedSizeNeighborLoader(h, fan, 4, input_nodes=("b", None))
        for b in L:
            assert int(b["a/node_mask"].sum()) == 0
            assert int(b["a__to__b/edge_mask"].sum()) == 0
            assert torch.equal(b["b/node_mask"], b["b/seed_mask"])


def test_a_bare_node_type_is_all_its_nodes():
    h = HeteroData()
    h["a"].x, h["b"].x = torch.randn(10, 2), torch.randn(8, 2)
    h["a", "to", "b"].edge_index = torch.stack([torch.randint(0, 10, (30,)),
                                               torch.randint(0, 8, (30,))])
    one = FixedSizeNeighborLoader(h, [2], 3, input_nodes="b")
    two = FixedSizeHeteroNeighborLoader(h, [2], 3, input_nodes=("b", None))
    assert torch.equal(one.seeds, two.seeds) and one.seed_type == "b"
    for x, y in zip(one, two):
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def test_fanout_length_mismatch_raises_with_pygs_wording():
    h = HeteroData()
    h["paper"].x, h["author"].x = torch.randn(5, 2), torch.randn(4, 2)
    h["paper", "to", "paper"].edge_index = torch.tensor([[0, 1], [1, 2]])
    h["paper", "to", "author"].edge_index = torch.tensor([[0, 1], [1, 2]])
    h["author", "to", "paper"].edge_index = torch.tensor([[0, 1], [1, 2]])
    fan = {("paper", "to", "paper"): [-1], ("paper", "to", "author"): [-1, -1],
           ("author", "to", "paper"): [-1, -1]}
    with pytest.raises(FanoutLengthError, match="hops must be the same across all"):
        FixedSizeNeighborLoader(h, fan, 2, input_nodes="paper")
    assert issubclass(FanoutLengthError, FanoutError)
    with pytest.raises(FanoutError, match="Not all edge types specified in 'num_neighbors'"):
        FixedSizeNeighborLoader(h, {("paper", "cites", "paper"): [2]}, 2, input_nodes="paper")


def test_hetero_refuses_what_only_the_homogeneous_loader_offers():
    h = HeteroData()
    h["a"].x = torch.randn(6, 2)
    h["a", "to", "a"].edge_index = torch.tensor([[0, 1], [1, 2]])
    for kw in (dict(prefetch=2), dict(layout="hyb"), dict(round_to=8)):
        with pytest.raises(ValueError, match="not offered for HeteroData"):
            FixedSizeNeighborLoader(h, [2], 2, input_nodes="a", **kw)
    with pytest.raises(InputNodesError, match="name the seeds' node type"):
        FixedSizeNeighborLoader(h, [2], 2)


def test_zero_hops_with_hyb_tables():
    d = Data(x=torch.randn(12, 2), edge_index=torch.randint(0, 12, (2, 40)))
    L = FixedSizeNeighborLoader(d, [], 5, layout="hyb")
    assert L.layout_widths == (1, 1)
    for b in L:
        assert int(b["edge_mask"].sum()) == 0 and "in_slots" in b
