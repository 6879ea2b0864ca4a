"""FixedSizeHeteroLinkNeighborLoader (and FixedSizeLinkNeighborLoader on HeteroData): PyG's
hetero LinkNeighborLoader semantics, one signature, every supervision edge once."""
from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import HeteroData

from graph_adapter.sampling.link import FixedSizeHeteroLinkNeighborLoader
from graph_adapter.sampling.link import FixedSizeLinkNeighborLoader, LinkLabelError

ETS = [("u", "buys", "i"), ("i", "rev_buys", "u"), ("u", "knows", "u")]


def _hetero(nu: int, ni: int, m: int, seed: int) -> HeteroData:
    g = torch.Generator().manual_seed(seed)
    h = HeteroData()
    h["u"].x = torch.randn(nu, 3, generator=g)
    h["i"].x = torch.randn(ni, 2, generator=g)
    e = torch.stack([torch.randint(0, nu, (m,), generator=g), torch.randint(0, ni, (m,),
                                                                            generator=g)])
    h["u", "buys", "i"].edge_index = e
    h["u", "buys", "i"].edge_attr = torch.randn(m, 2, generator=g)
    h["i", "rev_buys", "u"].edge_index = e.flip(0)
    h["u", "knows", "u"].edge_index = torch.randint(0, nu, (2, m // 2 + 1), generator=g)
    return h


@st.composite
def setups(draw):
    neg = draw(st.sampled_from(["binary", "triplet", None]))
    return dict(data=_hetero(draw(st.integers(2, 20)), draw(st.integers(2, 20)),
                             draw(st.integers(1, 80)), draw(st.integers(0, 10 ** 6))),
                et=draw(st.sampled_from([ETS[0], ETS[2]])), neg=neg,
                ratio=draw(st.sampled_from([1, 2] if neg == "triplet" else [1, 2, 0.5])),
                batch_size=draw(st.integers(1, 8)), disjoint=draw(st.booleans()),
                shuffle=draw(st.booleans()), world_size=draw(st.integers(1, 2)),
                fan=draw(st.lists(st.sampled_from([-1, 0, 2]), min_size=1, max_size=2)))


def _endpoint_types(et):
    return (et[0], et[2])


@given(setups())
@settings(max_examples=25, deadline=None)
def test_hetero_links_one_signature_each_edge_once_and_endpoints_map_back(cfg):
    d, et = cfg["data"], cfg["et"]
    name = "__".join(et)
    src_t, dst_t = _endpoint_types(et)
    E = d[et].edge_index
    sigs, seen = set(), []
    for rank in range(cfg["world_size"]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            L = FixedSizeLinkNeighborLoader(d, cfg["fan"], edge_label_index=(et, None),
                                            batch_size=cfg["batch_size"],
                                            neg_sampling=cfg["neg"],
                                            neg_sampling_ratio=cfg["ratio"] if cfg["neg"] else None,
                                            disjoint=cfg["disjoint"], shuffle=cfg["shuffle"],
                                            rank=rank, world_size=cfg["world_size"])
            assert isinstance(L, FixedSizeHeteroLinkNeighborLoader)  # one entry point
            for flat in L:
                sigs.add(tuple((k, tuple(v.shape), v.dtype) for k, v in flat.items()))
                sup = L.unpad_links(flat)
                iid = sup[f"{name}/input_id"]
                b = iid.numel()
                seen += iid.tolist()
                if b == 0:  # a fill batch (the ranks' tail): no real slot
                    assert not bool(flat[f"{name}/link_mask"].any())
                    continue
                ns, nd = flat[f"{src_t}/n_id"], flat[f"{dst_t}/n_id"]
                if cfg["neg"] == "triplet":
                    src, dp = sup[f"{src_t}/src_index"], sup[f"{dst_t}/dst_pos_index"]
                    dn = sup[f"{dst_t}/dst_neg_index"].reshape(b, -1)
                    assert torch.equal(torch.stack([ns[src], nd[dp]]), E[:, iid])
                    assert bool((nd[dn] >= 0).all())  # real destination rows
                else:
                    eli = sup[f"{name}/edge_label_index"]
                    assert torch.equal(torch.stack([ns[eli[0, :b]], nd[eli[1, :b]]]), E[:, iid])
                    assert bool((ns[eli[0]] >= 0).all()) and bool((nd[eli[1]] >= 0).all())
                    if cfg["neg"] is None:
                        assert eli.size(1) == b
                # every sampled edge is an edge of its type (e_id names it)
                for e in ETS:
                    k = "__".join(e)
                    em = flat[f"{k}/edge_mask"]
                    ei = flat[f"{k}/edge_index"][:, em]
                    got = torch.stack([flat[f"{e[0]}/n_id"][ei[0]], flat[f"{e[2]}/n_id"][ei[1]]])
                    assert torch.equal(got, d[e].edge_index[:, flat[f"{k}/e_id"][em]])
                    if cfg["disjoint"]:  # inside one tree
                        assert torch.equal(flat[f"{e[0]}/seed_of"][ei[0]],
                                           flat[f"{e[2]}/seed_of"][ei[1]])
                if not cfg["disjoint"] and b:  # the distinct endpoints first, sorted (PyG)
                    sm = flat[f"{src_t}/seed_mask"]
                    r = int(sm.sum())
                    assert bool(sm[:r].all()) and bool((ns[:r].diff() > 0).all())
    assert len(sigs) == 1
    assert sorted(seen) == list(range(E.size(1)))  # each supervision edge once, all ranks


def test_hetero_disjoint_triplet_layout_is_pyg_blocks():
    d = _hetero(12, 15, 40, 0)
    et = ETS[0]
    L = FixedSizeLinkNeighborLoader(d, [2], edge_label_index=et, batch_size=4,
                                    neg_sampling="triplet", neg_sampling_ratio=3, disjoint=True)
    flat = L.batch(0, 0)
    sup = L.unpad_links(flat)
    b, k = 4, 3
    assert torch.equal(sup["u/src_index"], torch.arange(b))
    assert torch.equal(sup["i/dst_pos_index"], torch.arange(b))
    # two endpoint types: destination rows [positives, negatives in blocks of b]
    assert torch.equal(sup["i/dst_neg_index"],
                       b + torch.arange(k)[None, :] * b + torch.arange(b)[:, None])
    so = flat["i/seed_of"][flat["i/seed_mask"]]
    assert torch.equal(so, torch.arange(b * (1 + k)) % b)  # PyG's batch % num_pos
    raw = L.supervision(0, 0)["dst_neg"]  # PyG's flat draw: block j holds negative j
    assert torch.equal(flat["i/n_id"][sup["i/dst_neg_index"]], raw.view(k, b).t())


def test_hetero_negatives_are_of_their_node_types_and_weighted():
    d = _hetero(6, 50, 60, 1)
    w = torch.zeros(50)
    w[[3, 7]] = 1.0  # only items 3 and 7 may be drawn as negative destinations
    from torch_geometric.sampler import NegativeSampling
    L = FixedSizeLinkNeighborLoader(d, [2], edge_label_index=ETS[0], batch_size=8,
                                    neg_sampling=NegativeSampling("binary", 2, dst_weight=w))
    for c in range(len(L)):
        sup = L.supervision(0, c)
        b = sup["input_id"].numel()
        neg = sup["edge_label_index"][:, b:]
        assert bool(((neg[1] == 3) | (neg[1] == 7)).all())
        assert bool((neg[0] < 6).all())


def test_hetero_bad_inputs_are_named():
    d = _hetero(6, 7, 20, 2)
    L = FixedSizeLinkNeighborLoader
    with pytest.raises(LinkLabelError, match="lacks"):
        L(d, [2], edge_label_index=("u", "likes", "i"))
    with pytest.raises(LinkLabelError, match="give \\(edge_type"):
        L(d, [2])
    with pytest.raises(LinkLabelError, match="node type 'i' has 7 nodes"):
        L(d, [2], edge_label_index=(ETS[0], torch.tensor([[0], [7]])))
    with pytest.raises(LinkLabelError, match="dst_weight has shape"):
        L(d, [2], edge_label_index=ETS[0], neg_sampling={"mode": "binary", "dst_weight":
                                                         torch.ones(6)})
    with pytest.raises(ValueError, match="endpoints of type 'u'"):
        from graph_adapter import Budget
        L(d, [2], edge_label_index=ETS[0], batch_size=4,
          budget=Budget(nodes={"u": 5, "i": 30}, edges={"__".join(e): 40 + j
                                                         for j, e in enumerate(ETS)}, graphs=2))
    with pytest.raises(NotImplementedError, match="sampler='pyg'"):
        L(d, [2], edge_label_index=ETS[0], sampler="pyg")
    for arg in ({"round_to": 8}, {"prefetch": 2}):  # the homogeneous loader's: refused
        with pytest.raises(ValueError, match="not offered for HeteroData"):
            L(d, [2], edge_label_index=ETS[0], **arg)


@pytest.mark.needs_scatter
@pytest.mark.parametrize("neg", [None, "binary", "triplet"])
def test_unpadded_batch_matches_pyg_hetero_link_neighbor_loader(neg):
    """PyG's own hetero LinkNeighborLoader (torch-sparse), full fanouts: the same
    supervision keys in the same stores and shapes, the same seeds in the same order
    (the distinct endpoints of each type, sorted), and without negatives the same node
    and edge sets of every type (the sampler is deterministic at fanout -1)."""
    from torch_geometric.loader import LinkNeighborLoader

    d = _hetero(20, 25, 100, 0)
    et = ETS[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = next(iter(LinkNeighborLoader(d, [-1, -1], edge_label_index=(et, None),
                                              batch_size=8, neg_sampling=neg)))
    L = FixedSizeLinkNeighborLoader(d, [-1, -1], edge_label_index=et, batch_size=8,
                                    neg_sampling=neg)
    flat = L.batch(0, 0)
    ours = L.unpad_links(flat)
    name = "__".join(et)
    want = {f"{name}/input_id": theirs[et].input_id}
    for store in (et, et[0], et[2]):
        for k in ("edge_label_index", "edge_label", "src_index", "dst_pos_index",
                  "dst_neg_index", "seed_time", "edge_label_time"):
            v = theirs[store].get(k) if k in theirs[store] else None
            if v is not None:
                want[f"{store if isinstance(store, str) else name}/{k}"] = v
    assert sorted(ours) == sorted(want)
    for k, v in want.items():
        assert ours[k].shape == v.shape and ours[k].dtype == v.dtype, k
    assert torch.equal(ours[f"{name}/input_id"], want[f"{name}/input_id"])
    if neg is None:  # no random draw at all: the same supervision and subgraph
        assert torch.equal(ours[f"{name}/edge_label_index"], want[f"{name}/edge_label_index"])
        for t in ("u", "i"):
            got = flat[f"{t}/n_id"][flat[f"{t}/node_mask"]]
            seeds = int(flat[f"{t}/seed_mask"].sum())
            assert torch.equal(got[:seeds], theirs[t].n_id[:seeds])  # endpoints first, sorted
            assert sorted(got.tolist()) == sorted(theirs[t].n_id.tolist())
        for e in ETS:
            k = "__".join(e)
            got = flat[f"{k}/e_id"][flat[f"{k}/edge_mask"]]
            assert sorted(got.tolist()) == sorted(theirs[e].e_id.tolist())


def test_hetero_micro_batches_and_workers_give_the_same_batches():
    d = _hetero(15, 18, 60, 4)
    kw = dict(edge_label_index=ETS[0], batch_size=4, neg_sampling="triplet", shuffle=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = list(FixedSizeLinkNeighborLoader(d, [2, 2], **kw))
        L2 = FixedSizeLinkNeighborLoader(d, [2, 2], micro_batches=2, **kw)
        two = list(L2)
        work = list(FixedSizeLinkNeighborLoader(d, [2, 2], num_workers=1, **kw))
    assert L2.stats.links == d[ETS[0]].edge_index.size(1)
    flat = [{k: v[i] for k, v in f.items()} for f in two for i in range(2)]
    for a, b in zip(one, flat):  # F = 2 stacks the same chunks
        assert all(torch.equal(a[k], b[k]) for k in a)
    for a, b in zip(one, work):  # worker processes: the same batches
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_edge_type_forms_and_graphs_without_edges_as_pyg():
    """PyG's edge-type forms ((src, dst), a relation) and link batches of a graph without
    edges (zero hops: the endpoints alone, each distinct endpoint one row)."""
    d = _hetero(6, 7, 20, 5)
    for spec in (("u", "i"), "buys", ("u", "buys", "i")):
        L = FixedSizeLinkNeighborLoader(d, [2], edge_label_index=spec, batch_size=4)
        assert L.edge_type == ("u", "buys", "i")
    with pytest.raises(LinkLabelError, match="relation 'nope'"):
        FixedSizeLinkNeighborLoader(d, [2], edge_label_index="nope")
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 100, (2, 100), generator=g)
    from torch_geometric.data import Data
    for data, spec, key in ((HeteroData(paper=dict(num_nodes=100)), (("paper", "paper"), idx),
                             "paper__to__paper/"), (Data(num_nodes=100), idx, "")):
        L = FixedSizeLinkNeighborLoader(data, [], edge_label_index=spec, batch_size=20,
                                        neg_sampling=None)
        n = 0
        for flat in L:
            sup = L.unpad_links(flat)
            assert sup[key + "input_id"].numel() == 20
            eli = sup[key + "edge_label_index"]
            assert eli.size(1) == 20
            mask = flat["paper/node_mask" if key else "node_mask"]
            assert int(mask.sum()) == eli.unique().numel()
            n += 1
        assert n == 5


def test_hetero_temporal_pyg_style_batches():
    """PyG's temporal hetero link test, restated: supervision on ``(paper, paper)`` with
    ``edge_label_time``, node times on both types, binary negatives 1:2."""
    g = torch.Generator().manual_seed(0)
    h = HeteroData()
    h["paper"].x = torch.arange(100)
    h["paper"].time = torch.arange(100) - 200
    h["author"].x = torch.arange(100, 300)
    h["author"].time = torch.arange(200)
    h["paper", "paper"].edge_index = torch.randint(0, 100, (2, 500), generator=g)
    h["paper", "author"].edge_index = torch.stack([torch.randint(0, 100, (1000,), generator=g),
                                                   torch.randint(0, 200, (1000,), generator=g)])
    h["author", "paper"].edge_index = torch.stack([torch.randint(0, 200, (1000,), generator=g),
                                                   torch.randint(0, 100, (1000,), generator=g)])
    with pytest.raises(LinkLabelError, match="edge_label_time is not"):
        FixedSizeLinkNeighborLoader(h, [-1] * 2, edge_label_index=("paper", "paper"),
                                    batch_size=32, time_attr="time")
    elt = torch.arange(500)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        L = FixedSizeLinkNeighborLoader(h, [-1] * 2, edge_label_index=("paper", "paper"),
                                        edge_label_time=elt, batch_size=32, time_attr="time",
                                        neg_sampling_ratio=0.5)
        for flat in L:
            sup = L.unpad_links(flat)
            key = "paper__to__paper/"
            if sup[key + "input_id"].numel() < 32:
                continue  # PyG's test drops the last batch
            so = flat["paper/seed_of"][flat["paper/node_mask"]]
            assert int(so.max()) + 1 == 32  # a tree number per positive
            am = flat["author/node_mask"]
            if bool(am.any()):
                t_auth = h["author"].time[flat["author/n_id"][am]]
                assert int(sup[key + "edge_label_time"].max()) >= int(t_auth.max())


@pytest.mark.parametrize("disjoint,temporal", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("amount", [1, 2])
def test_hetero_triplet_batches_as_pygs_triplet_test(disjoint, temporal, amount):
    """PyG's hetero triplet loader test, restated on the unpadded batch (``(paper, paper)``
    supervision, weighted negatives without time, node times on both types with)."""
    g = torch.Generator().manual_seed(amount)
    h = HeteroData()
    h["paper"].x = torch.arange(100)
    h["author"].x = torch.arange(100, 300)
    h["paper", "paper"].edge_index = torch.randint(0, 100, (2, 400), generator=g)
    eli = torch.randint(0, 100, (2, 500), generator=g)
    h["paper", "paper"].edge_label_index = eli
    h["paper", "author"].edge_index = torch.stack([torch.randint(0, 100, (1000,), generator=g),
                                                   torch.randint(0, 200, (1000,), generator=g)])
    h["author", "paper"].edge_index = h["paper", "author"].edge_index.flip(0)
    kw = {}
    if temporal:
        h["paper"].time, h["author"].time = torch.arange(100), torch.arange(200)
        kw = dict(time_attr="time",
                  edge_label_time=torch.max(h["paper"].time[eli[0]], h["paper"].time[eli[1]]) + 50)
    w = None if temporal else torch.rand(100, generator=g)
    bs = 20
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        L = FixedSizeLinkNeighborLoader(
            h, [-1] * 2, edge_label_index=(("paper", "paper"), eli), batch_size=bs,
            disjoint=disjoint, shuffle=True, neg_sampling=dict(
                mode="triplet", amount=amount, src_weight=w, dst_weight=w), **kw)
        assert len(L) == 500 / bs
        for flat in L:
            sup = L.unpad_links(flat)
            x, iid = flat["paper/x"], sup["paper__to__paper/input_id"]
            src, dp, dn = (sup["paper/src_index"], sup["paper/dst_pos_index"],
                           sup["paper/dst_neg_index"])
            assert torch.equal(x[src], eli[0, iid]) and torch.equal(x[dp], eli[1, iid])
            assert dn.shape == ((bs,) if amount == 1 else (bs, amount))
            assert int(dn.min()) >= 0 and int(dn.max()) < int(flat["paper/node_mask"].sum())
            if not disjoint:
                continue
            assert (int(src.min()), int(src.max())) == (0, bs - 1)
            assert (int(dp.min()), int(dp.max())) == (bs, 2 * bs - 1)
            assert (int(dn.min()), int(dn.max())) == (2 * bs, (2 + amount) * bs - 1)
            so = flat["paper/seed_of"]
            for i in range(0, (2 + amount) * bs, bs):
                assert torch.equal(so[i:i + bs], torch.arange(bs))
            if temporal:
                nm = flat["paper/node_mask"]
                for i in range(bs):
                    rows = nm & (so == i)
                    assert int(flat["paper/time"][rows].max()) <= int(sup["paper/seed_time"][i])


@pytest.mark.parametrize("subgraph_type", ["directional", "bidirectional"])
@pytest.mark.parametrize("neg", [None, "binary"])
def test_hetero_basic_as_pygs_basic_test(subgraph_type, neg):
    """PyG's hetero basic / loop tests, restated: at full fanouts every positive is an edge
    of the batch's subgraph (of its edge type), binary labels 1 then 0."""
    g = torch.Generator().manual_seed(7)
    h = HeteroData()
    h["paper"].x, h["author"].x = torch.arange(100), torch.arange(100, 300)
    h["paper", "paper"].edge_index = torch.randint(0, 100, (2, 500), generator=g)
    h["paper", "author"].edge_index = torch.stack([torch.randint(0, 100, (1000,), generator=g),
                                                   torch.randint(0, 200, (1000,), generator=g)])
    h["author", "paper"].edge_index = torch.stack([torch.randint(0, 200, (1000,), generator=g),
                                                   torch.randint(0, 100, (1000,), generator=g)])
    from graph_adapter import Budget
    big = Budget(nodes={"paper": 103, "author": 203}, graphs=2,  # the whole graph fits
                 edges={"paper__to__paper": 1001, "paper__to__author": 2002,
                        "author__to__paper": 2003})
    for spec, n in ((("paper", "author"), 1000), (("paper", "paper"), 500)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            L = FixedSizeLinkNeighborLoader(h, [-1] * 2, edge_label_index=spec, batch_size=20,
                                            subgraph_type=subgraph_type, neg_sampling=neg,
                                            shuffle=True, oversize="error", budget=big)
        assert len(L) == n / 20
        key = "__".join(L.edge_type)
        for flat in L:
            sup = L.unpad_links(flat)
            eli = sup[key + "/edge_label_index"]
            em = flat[key + "/edge_mask"]
            have = set(map(tuple, flat[key + "/edge_index"][:, em].t().tolist()))
            assert set(map(tuple, eli[:, :20].t().tolist())) <= have
            assert bool((flat["paper/x"][flat["paper/node_mask"]] < 100).all())
            if neg == "binary":
                lab = sup[key + "/edge_label"]
                assert lab.shape == (40,) and lab.dtype == torch.float
                assert bool((lab[:20] == 1).all()) and bool((lab[20:] == 0).all())
