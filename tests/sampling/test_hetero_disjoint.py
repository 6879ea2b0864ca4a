"""FixedSizeHeteroNeighborLoader(disjoint=True): one tree per seed in PyG's layout
(rows are (tree, node) pairs, ``<type>/seed_of`` the tree), each tree the sample its
seed alone would grow."""
from __future__ import annotations

import warnings

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from graph_adapter.sampling import FixedSizeHeteroNeighborLoader

from test_hetero_neighbor import ETS, _hetero, _rows


@st.composite
def setups(draw):
    h = _hetero(draw(st.integers(2, 30)), draw(st.integers(1, 20)),
                (draw(st.integers(0, 150)), draw(st.integers(0, 150))),
                draw(st.integers(0, 10 ** 6)))
    hops = draw(st.integers(1, 3))
    fan = {et: draw(st.lists(st.sampled_from([-1, 0, 1, 2]), min_size=hops, max_size=hops))
           for et in ETS}
    return dict(data=h, num_neighbors=fan, batch_size=draw(st.integers(1, 6)),
                replace=draw(st.booleans()), shuffle=draw(st.booleans()),
                F=draw(st.integers(1, 2)), seed=draw(st.integers(0, 99)))


@given(setups())
@settings(max_examples=25, deadline=None)
def test_disjoint_trees_share_no_row_and_every_edge_stays_in_its_tree(cfg):
    h, F = cfg["data"], cfg["F"]
    L = FixedSizeHeteroNeighborLoader(h, cfg["num_neighbors"], cfg["batch_size"],
                                      input_nodes=("paper", None), disjoint=True,
                                      replace=cfg["replace"], shuffle=cfg["shuffle"],
                                      seed=cfg["seed"], micro_batches=F, success_ratio=1.0)
    sigs, seen = set(), []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for flat in L:
            sigs.add(tuple((k, tuple(v.shape)) for k, v in flat.items()))
            for i in range(F):
                f = _rows(flat, F, i)
                b = int(f["paper/seed_mask"].sum())
                seen.append(f["paper/n_id"][:b])
                # seed i is row i of the seed type and the root of tree i
                assert f["paper/seed_of"][:b].tolist() == list(range(b))
                for t in ("paper", "author"):
                    nm, so, nid = f[f"{t}/node_mask"], f[f"{t}/seed_of"], f[f"{t}/n_id"]
                    assert bool((so[~nm] == -1).all()) and bool((so[nm] >= 0).all())
                    assert bool((so[nm] < b).all())
                    pair = so[nm] * h[t].num_nodes + nid[nm]  # PyG's (batch, node) identity
                    assert pair.unique().numel() == int(nm.sum())  # a (tree, node): one row
                for et in ETS:
                    k = "__".join(et)
                    em = f[f"{k}/edge_mask"]
                    ei = f[f"{k}/edge_index"][:, em]
                    # an edge joins two rows of one tree, and is an edge of the graph
                    assert torch.equal(f[f"{et[0]}/seed_of"][ei[0]], f[f"{et[2]}/seed_of"][ei[1]])
                    glob = torch.stack([f[f"{et[0]}/n_id"][ei[0]], f[f"{et[2]}/n_id"][ei[1]]])
                    assert torch.equal(glob, h[et].edge_index[:, f[f"{k}/e_id"][em]])
    assert len(sigs) == 1
    assert sorted(torch.cat(seen).tolist()) == list(range(h["paper"].num_nodes))


@given(setups())
@settings(max_examples=25, deadline=None)
def test_each_tree_is_the_sample_its_seed_alone_grows(cfg):
    """With fanouts -1 / 0 (no draw) tree i holds exactly the nodes and edges the
    non-disjoint sampler reaches from seed i alone."""
    h = cfg["data"]
    fan = {et: [k if k <= 0 else -1 for k in v] for et, v in cfg["num_neighbors"].items()}
    D = FixedSizeHeteroNeighborLoader(h, fan, cfg["batch_size"], input_nodes=("paper", None),
                                      disjoint=True, shuffle=cfg["shuffle"], seed=cfg["seed"])
    One = FixedSizeHeteroNeighborLoader(h, fan, 1, input_nodes=("paper", None))
    seeds = D.chunk_seeds(0, 0)
    s = D.sample(seeds, 0, 0)
    for i, seed in enumerate(seeds.tolist()):
        ref = One.sample(torch.tensor([seed]), 0, 0)
        for t in ("paper", "author"):
            mine = s.n_id[t][s.seed_of[t] == i]
            assert mine.tolist() == ref.n_id[t].tolist()  # same rows, same order
        for et in ETS:
            in_tree = s.seed_of[et[2]][s.edge_index[et][1]] == i
            assert sorted(s.e_id[et][in_tree].tolist()) == sorted(ref.e_id[et].tolist())
