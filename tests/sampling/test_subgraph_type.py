"""``subgraph_type`` ("directional" / "bidirectional" / "induced") as PyG 2.8's:
bidirectional = the sampled edges and their reverses, coalesced by destination row
(PyG's ``to_bidirectional``); ``directed=False`` keeps meaning "induced"; the two
given against each other is a named error. Restates on our loaders what PyG's
``test_neighbor_loader.py`` checks of bidirectional batches."""
from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data, HeteroData
from torch_geometric.utils import is_undirected

from graph_adapter.batching import Budget
from graph_adapter.sampling import (CSC, FixedSizeNeighborLoader, SubgraphTypeError,
                                    sample_neighbors)
from graph_adapter.sampling.hetero_sample import bidirectional_pairs


@st.composite
def cases(draw):
    n = draw(st.integers(1, 30))
    g = torch.Generator().manual_seed(draw(st.integers(0, 10 ** 6)))
    ei = torch.randint(0, n, (2, draw(st.integers(0, 120))), generator=g)
    seeds = torch.randperm(n, generator=g)[:draw(st.integers(1, min(n, 6)))]
    return dict(ei=ei, n=n, seeds=seeds,
                fan=draw(st.lists(st.sampled_from([-1, 1, 2, 3]), min_size=0, max_size=3)),
                replace=draw(st.booleans()), disjoint=draw(st.booleans()),
                gen=draw(st.integers(0, 99)))


@given(cases())
@settings(max_examples=40, deadline=None)
def test_bidirectional_is_the_sampled_edges_and_their_reverses(cfg):
    csc = CSC.from_edge_index(cfg["ei"], cfg["n"])
    kw = dict(replace=cfg["replace"], disjoint=cfg["disjoint"])
    one = sample_neighbors(csc, cfg["seeds"], cfg["fan"], **kw,
                           generator=torch.Generator().manual_seed(cfg["gen"]))
    two = sample_neighbors(csc, cfg["seeds"], cfg["fan"], subgraph_type="bidirectional", **kw,
                           generator=torch.Generator().manual_seed(cfg["gen"]))
    assert torch.equal(one.n_id, two.n_id)  # the same nodes, the same rows
    sampled = {tuple(e) for e in one.edge_index.t().tolist()}
    want = sampled | {(b, a) for a, b in sampled}
    got = [tuple(e) for e in two.edge_index.t().tolist()]
    assert set(got) == want and len(got) == len(want)  # coalesced: each pair once
    assert got == sorted(got, key=lambda e: (e[1], e[0]))  # by destination, then source
    # each edge's id is an input edge joining its two nodes, one way or the other
    ends = cfg["ei"][:, two.e_id]
    fwd = (ends[0] == two.n_id[two.edge_index[0]]) & (ends[1] == two.n_id[two.edge_index[1]])
    bwd = (ends[1] == two.n_id[two.edge_index[0]]) & (ends[0] == two.n_id[two.edge_index[1]])
    assert bool((fwd | bwd).all())
    assert sum(two.edges_per_hop) == two.num_edges
    assert len(two.edges_per_hop) == len(two.nodes_per_hop)


def test_directed_false_is_induced_and_contradictions_are_named():
    g = torch.Generator().manual_seed(0)
    ei = torch.randint(0, 20, (2, 80), generator=g)
    csc = CSC.from_edge_index(ei, 20)
    a = sample_neighbors(csc, torch.arange(4), [2, 2], directed=False)
    b = sample_neighbors(csc, torch.arange(4), [2, 2], subgraph_type="induced")
    assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.e_id, b.e_id)
    d = Data(x=torch.randn(20, 2), edge_index=ei)
    for sub in ("directional", "bidirectional"):
        with pytest.raises(SubgraphTypeError, match="directed=False"):
            FixedSizeNeighborLoader(d, [2], 4, directed=False, subgraph_type=sub)
    with pytest.raises(SubgraphTypeError, match="choose one of"):
        FixedSizeNeighborLoader(d, [2], 4, subgraph_type="undirected")
    L = FixedSizeNeighborLoader(d, [2], 4, directed=False, subgraph_type="induced")
    assert L.subgraph_type == "induced" and not L.directed


def test_bidirectional_loader_batches_are_undirected_and_every_seed_once():
    torch.manual_seed(12345)
    d = Data(x=torch.arange(100), edge_index=torch.randint(0, 100, (2, 500)),
             edge_attr=torch.arange(500))
    # a budget no sample exceeds: a trimmed batch may keep an edge and cut its reverse
    L = FixedSizeNeighborLoader(d, [5, 5], 20, subgraph_type="bidirectional", oversize="error",
                                budget=Budget(nodes=102, edges=1001, graphs=2))
    assert len(L) == 5
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, b in enumerate(L):
            nm, em = b["node_mask"], b["edge_mask"]
            ei = b["edge_index"][:, em]
            assert is_undirected(ei, num_nodes=int(nm.sum()))
            # seeds first, in order (PyG: batch.x[:batch_size] == arange)
            assert b["x"][b["seed_mask"]].tolist() == list(range(20 * i, 20 * (i + 1)))
            # the edge attributes follow e_id: an edge's or the one it reverses
            assert torch.equal(b["edge_attr"][em], d.edge_attr[b["e_id"][em]])
            seen.append(b["n_id"][b["seed_mask"]])
    assert sorted(torch.cat(seen).tolist()) == list(range(100))


def _pyg_style_hetero() -> HeteroData:
    torch.manual_seed(12345)
    h = HeteroData()
    h["paper"].x = torch.arange(100)
    h["author"].x = torch.arange(100, 300)
    h["paper", "paper"].edge_index = torch.stack([torch.randint(0, 100, (500,)),
                                                 torch.randint(0, 100, (500,))])
    h["paper", "paper"].edge_attr = torch.arange(500)
    h["paper", "author"].edge_index = torch.stack([torch.randint(0, 100, (1000,)),
                                                  torch.randint(0, 200, (1000,))])
    h["author", "paper"].edge_index = torch.stack([torch.randint(0, 200, (1000,)),
                                                  torch.randint(0, 100, (1000,))])
    return h


def test_hetero_bidirectional_as_pygs():
    """PyG: the paper-paper edges are undirected, paper->author is author->paper
    flipped (sorted by column), and the merged edge types carry no e_id / edge_attr."""
    h = _pyg_style_hetero()
    with pytest.warns(UserWarning, match="edge attributes"):
        L = FixedSizeNeighborLoader(h, [10, 10], 20, input_nodes="paper", oversize="error",
                                    subgraph_type="bidirectional", budget=Budget(
                                        nodes={"paper": 102, "author": 203},
                                        edges={"paper__to__paper": 1001,
                                               "paper__to__author": 2001,
                                               "author__to__paper": 2002}, graphs=2))
    assert "paper__to__paper/edge_attr" in L.excluded_keys
    pp, pa, ap = "paper__to__paper", "paper__to__author", "author__to__paper"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for b in L:
            assert not any(k.endswith("/e_id") or k.endswith("/edge_attr") for k in b)
            e = b[f"{pp}/edge_index"][:, b[f"{pp}/edge_mask"]]
            assert is_undirected(e, num_nodes=int(b["paper/node_mask"].sum()))
            e1 = b[f"{pa}/edge_index"][:, b[f"{pa}/edge_mask"]]
            e2 = b[f"{ap}/edge_index"][:, b[f"{ap}/edge_mask"]].flip(0)
            order = torch.argsort(e2[1] * 10 ** 6 + e2[0])  # sorted by column, then row
            assert torch.equal(e1, e2[:, order])
            # no isolated real node: every sampled node is joined to its tree
            for t in ("paper", "author"):
                n = int(b[f"{t}/node_mask"].sum())
                touched = torch.zeros(n, dtype=torch.bool)
                for et in (pp, pa, ap):
                    ei = b[f"{et}/edge_index"][:, b[f"{et}/edge_mask"]]
                    s_, _, d_ = et.split("__")
                    if s_ == t:
                        touched[ei[0]] = True
                    if d_ == t:
                        touched[ei[1]] = True
                seeds = int(b["paper/seed_mask"].sum()) if t == "paper" else 0
                assert bool(touched[seeds:].all())


def test_reverse_edge_types_follow_pygs_rules():
    pairs = bidirectional_pairs([("a", "to", "b"), ("b", "rev_to", "a"), ("a", "self", "a"),
                                 ("c", "x", "d"), ("d", "y", "c"), ("d", "z", "c"),
                                 ("e", "only", "f")])
    assert pairs[("a", "to", "b")] == ("b", "rev_to", "a")
    assert pairs[("b", "rev_to", "a")] == ("a", "to", "b")
    assert pairs[("a", "self", "a")] == ("a", "self", "a")
    assert pairs[("c", "x", "d")] is None  # two edge types back: ambiguous, left as sampled
    assert pairs[("d", "y", "c")] == ("c", "x", "d")
    assert pairs[("e", "only", "f")] is None


@pytest.mark.needs_scatter
@pytest.mark.parametrize("sub", ["directional", "bidirectional", "induced"])
def test_full_fanouts_give_pygs_node_and_edge_sets(sub):
    """Full fanouts leave nothing to chance: our sampler's batch and PyG's own
    (``sampler="pyg"``) hold the same nodes and the same edges (global ids), seeds
    first in order, for every subgraph type."""
    g = torch.Generator().manual_seed(2)
    d = Data(x=torch.randn(40, 2, generator=g),
             edge_index=torch.randint(0, 40, (2, 120), generator=g))
    big = Budget(nodes=42, edges=241, graphs=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyG's note on pyg-lib
        ours = FixedSizeNeighborLoader(d, [-1, -1], 5, subgraph_type=sub, budget=big)
        pygs = FixedSizeNeighborLoader(d, [-1, -1], 5, subgraph_type=sub, budget=big,
                                       sampler="pyg")
        for a, b in zip(ours, pygs):
            assert torch.equal(a["n_id"][a["seed_mask"]], b["n_id"][b["seed_mask"]])
            na, nb = a["n_id"][a["node_mask"]], b["n_id"][b["node_mask"]]
            assert sorted(na.tolist()) == sorted(nb.tolist())
            ea = na[a["edge_index"][:, a["edge_mask"]]].t().tolist()
            eb = nb[b["edge_index"][:, b["edge_mask"]]].t().tolist()
            assert sorted(map(tuple, ea)) == sorted(map(tuple, eb))
