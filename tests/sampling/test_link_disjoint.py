"""FixedSizeLinkNeighborLoader(disjoint=True): one tree per endpoint, PyG's layout
(a link's endpoints and a triplet's negatives share the link's subgraph)."""
from __future__ import annotations

import warnings

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data

from graph_adapter.sampling import FixedSizeLinkNeighborLoader


@st.composite
def setups(draw):
    n = draw(st.integers(2, 40))
    m = draw(st.integers(1, 200))
    g = torch.Generator().manual_seed(draw(st.integers(0, 10 ** 6)))
    d = Data(x=torch.randn(n, 3, generator=g), edge_index=torch.randint(0, n, (2, m), generator=g))
    return dict(data=d, fan=draw(st.lists(st.sampled_from([-1, 1, 3]), min_size=1, max_size=2)),
                batch_size=draw(st.integers(1, 16)), neg=draw(st.sampled_from(["binary",
                                                                                "triplet", None])),
                ratio=draw(st.sampled_from([1, 2])), shuffle=draw(st.booleans()),
                world_size=draw(st.integers(1, 2)))


def seeds_of(r: int, k: int) -> int:
    return r * (2 + k)


@given(setups())
@settings(max_examples=30, deadline=None)
def test_every_endpoint_its_own_tree_and_trees_never_mix(cfg):
    d = cfg["data"]
    sigs, links = set(), 0
    for rank in range(cfg["world_size"]):
        L = FixedSizeLinkNeighborLoader(d, cfg["fan"], batch_size=cfg["batch_size"],
                                        neg_sampling=cfg["neg"], neg_sampling_ratio=cfg["ratio"],
                                        shuffle=cfg["shuffle"], disjoint=True, rank=rank,
                                        world_size=cfg["world_size"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for flat in L:
                sigs.add(tuple((k, tuple(v.shape), v.dtype) for k, v in flat.items()))
                nm, em, so = flat["node_mask"], flat["edge_mask"], flat["seed_of"]
                ei = flat["edge_index"][:, em]
                # sampled edges are graph edges, inside one tree (one supervision slot)
                assert torch.equal(flat["n_id"][ei], d.edge_index[:, flat["e_id"][em]])
                assert torch.equal(so[ei[0]], so[ei[1]])
                assert bool((so[nm] >= 0).all()) and bool((so[~nm] == -1).all())
                lm = flat["link_mask"]
                r = int(lm.sum())
                pos = flat["input_id"] >= 0
                b = int(pos.sum())
                links += b
                if cfg["neg"] == "triplet":
                    k = cfg["ratio"]
                    src, dp = flat["src_index"][:r], flat["dst_pos_index"][:r]
                    dn = flat["dst_neg_index"].view(flat["dst_neg_index"].size(0), -1)[:r]
                    assert torch.equal(src, torch.arange(r))  # endpoint order: PyG's
                    assert torch.equal(dp, r + torch.arange(r))
                    # PyG's layout: the negatives in blocks of the batch's positives
                    # (negative j of positive i at row 2r + j r + i), not per positive
                    blk = 2 * r + torch.arange(k)[None, :] * r + torch.arange(r)[:, None]
                    assert torch.equal(dn, blk)
                    glob = torch.stack([flat["n_id"][src], flat["n_id"][dp]])
                    assert torch.equal(glob, L.edge_label_index[:, flat["input_id"][:r]])
                    assert torch.equal(so[src], torch.arange(r)) and torch.equal(so[dp], so[src])
                    assert bool((so[dn] == torch.arange(r)[:, None]).all())
                    # PyG's batch: the row's tree modulo the positives
                    assert torch.equal(so[:seeds_of(r, k)], torch.arange(seeds_of(r, k)) % r)
                    seeds = r * (2 + k)
                else:
                    eli = flat["edge_label_index"][:, :r]
                    assert torch.equal(eli, torch.stack([torch.arange(r), r + torch.arange(r)]))
                    glob = flat["n_id"][eli[:, :b]]
                    assert torch.equal(glob, L.edge_label_index[:, flat["input_id"][:b]])
                    # PyG's batch (row's tree modulo the b positives): a negative link
                    # shares its number with a positive; its rows are trees of their own
                    assert torch.equal(so[eli[0]], torch.arange(r) % b)
                    assert torch.equal(so[eli[1]], (r + torch.arange(r)) % b)
                    seeds = 2 * r
                sm = flat["seed_mask"]
                assert int(sm.sum()) == seeds and bool(sm[:seeds].all())  # never trimmed
    assert len(sigs) == 1
    assert links == d.edge_index.size(1)  # every supervision edge once, across ranks
