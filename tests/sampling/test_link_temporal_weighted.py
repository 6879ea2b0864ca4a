"""Temporal links (time_attr, edge_label_time, temporal_strategy) and weighted negatives
(PyG's NegativeSampling) in FixedSizeLinkNeighborLoader, homogeneous and hetero."""
from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data, HeteroData
from torch_geometric.sampler import NegativeSampling

from graph_adapter.sampling.link import FixedSizeLinkNeighborLoader, LinkLabelError


@st.composite
def temporal_setups(draw):
    n = draw(st.integers(3, 30))
    m = draw(st.integers(1, 120))
    g = torch.Generator().manual_seed(draw(st.integers(0, 10 ** 6)))
    kind = draw(st.sampled_from(["node", "edge"]))
    if kind == "edge" and m == n:
        m += 1  # PyG (and we) read a time of the node count as node-level
    d = Data(x=torch.randn(n, 2, generator=g),
             edge_index=torch.randint(0, n, (2, m), generator=g))
    if kind == "node":
        d.time = torch.randint(0, 50, (n,), generator=g)
    else:
        d.time = torch.randint(0, 50, (m,), generator=g)
    neg = draw(st.sampled_from(["binary", "triplet"]))
    return dict(data=d, kind=kind, neg=neg, elt=torch.randint(0, 60, (m,), generator=g),
                ratio=draw(st.sampled_from([1, 2])), batch_size=draw(st.integers(1, 8)),
                strategy=draw(st.sampled_from(["uniform", "last"])),
                fan=draw(st.lists(st.sampled_from([-1, 1, 3]), min_size=1, max_size=2)))


def _check_causal(flat, L, d, kind, times_of_tree):
    """No sampled neighbour (node time) or edge (edge time) later than its link's time."""
    nm, so = flat["node_mask"], flat["seed_of"]
    em = flat["edge_mask"]
    ei = flat["edge_index"][:, em]
    if kind == "node":
        t_node = d.time[flat["n_id"][nm]]
        # rows added by the hops (not the endpoint rows): held to their tree's time
        hop = ~flat["seed_mask"][nm]
        assert bool((t_node[hop] <= times_of_tree[so[nm]][hop]).all())
    else:
        t_edge = d.time[flat["e_id"][em]]
        assert bool((t_edge <= times_of_tree[so[ei[1]]]).all())


@given(temporal_setups())
@settings(max_examples=25, deadline=None)
def test_no_neighbour_later_than_its_link_and_every_link_once(cfg):
    d = cfg["data"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        L = FixedSizeLinkNeighborLoader(d, cfg["fan"], batch_size=cfg["batch_size"],
                                        neg_sampling=cfg["neg"], neg_sampling_ratio=cfg["ratio"],
                                        time_attr="time", edge_label_time=cfg["elt"],
                                        temporal_strategy=cfg["strategy"], shuffle=True)
        assert L.disjoint  # PyG: temporal sampling is disjoint
        seen, sigs = [], set()
        for flat in L:
            sigs.add(tuple((k, tuple(v.shape), v.dtype) for k, v in flat.items()))
            sup = L.unpad_links(flat)
            iid = sup["input_id"]
            b = iid.numel()
            seen += iid.tolist()
            if b == 0:
                continue
            t = cfg["elt"][iid]
            if cfg["neg"] == "triplet":
                assert torch.equal(sup["seed_time"], t)
            else:  # PyG: negative j takes positive (j mod b)'s time
                m = sup["edge_label_index"].size(1)
                assert torch.equal(sup["edge_label_time"], t[torch.arange(m) % b])
                if cfg["kind"] == "node":  # temporal negatives: no later than their link
                    neg = flat["n_id"][sup["edge_label_index"][:, b:]]
                    ok = d.time[neg] <= sup["edge_label_time"][b:]
                    fallback = neg == int(d.time.argmin())
                    assert bool((ok | fallback).all())
            # seed_of is the tree mod b: tree i's time is the time of positive i
            _check_causal(flat, L, d, cfg["kind"], t)
    assert len(sigs) == 1
    assert sorted(seen) == list(range(d.num_edges))


def test_last_strategy_takes_the_most_recent_edges():
    # a star: node 0 has in-edges from 1..9 at times 1..9; the link at time 6
    src = torch.arange(1, 10)
    d = Data(x=torch.zeros(10, 1), edge_index=torch.stack([src, torch.zeros(9, dtype=torch.long)]),
             time=src.clone())
    L = FixedSizeLinkNeighborLoader(d, [2], edge_label_index=torch.tensor([[0], [0]]),
                                    neg_sampling=None, time_attr="time",
                                    edge_label_time=torch.tensor([6]), temporal_strategy="last")
    flat = L.batch(0, 0)
    em = flat["edge_mask"]
    got = sorted(set(d.time[flat["e_id"][em]].tolist()))
    assert got == [5, 6]  # the two latest edges no later than 6, for each endpoint tree


def test_hetero_temporal_links_are_causal():
    g = torch.Generator().manual_seed(3)
    h = HeteroData()
    h["u"].x, h["i"].x = torch.randn(20, 2, generator=g), torch.randn(25, 2, generator=g)
    h["u"].time = torch.randint(0, 50, (20,), generator=g)
    h["i"].time = torch.randint(0, 50, (25,), generator=g)
    e = torch.stack([torch.randint(0, 20, (150,), generator=g),
                     torch.randint(0, 25, (150,), generator=g)])
    h["u", "buys", "i"].edge_index = e
    h["i", "rev", "u"].edge_index = e.flip(0)
    elt = torch.randint(0, 60, (150,), generator=g)
    for neg in ("binary", "triplet"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            L = FixedSizeLinkNeighborLoader(h, [3, 3], edge_label_index=("u", "buys", "i"),
                                            batch_size=8, neg_sampling=neg, time_attr="time",
                                            edge_label_time=elt)
            seen = []
            for flat in L:
                sup = L.unpad_links(flat)
                iid = sup["u__buys__i/input_id"]
                seen += iid.tolist()
                t = elt[iid]
                for nt in ("u", "i"):
                    nm = flat[f"{nt}/node_mask"]
                    hop = nm & ~flat[f"{nt}/seed_mask"]
                    tree = flat[f"{nt}/seed_of"][hop]
                    assert bool((h[nt].time[flat[f"{nt}/n_id"][hop]] <= t[tree]).all())
        assert sorted(seen) == list(range(150))


def test_temporal_bad_inputs_are_named():
    d = Data(x=torch.zeros(5, 1), edge_index=torch.tensor([[0, 1], [1, 2]]),
             time=torch.arange(5))
    L = FixedSizeLinkNeighborLoader
    with pytest.raises(LinkLabelError, match="time_attr is set but edge_label_time is not"):
        L(d, [1], time_attr="time")
    with pytest.raises(LinkLabelError, match="edge_label_time is set but time_attr is not"):
        L(d, [1], edge_label_time=torch.zeros(2))
    with pytest.raises(LinkLabelError, match="temporal_strategy='newest'"):
        L(d, [1], time_attr="time", edge_label_time=torch.zeros(2), temporal_strategy="newest")
    with pytest.raises(ValueError, match="The time attribute 'when' is neither"):
        L(d, [1], time_attr="when", edge_label_time=torch.zeros(2))
    with pytest.raises(LinkLabelError, match=r"edge_label_time has shape \(3,\)"):
        L(d, [1], time_attr="time", edge_label_time=torch.zeros(3))
    with pytest.raises(NotImplementedError, match="pyg-lib"):
        L(d, [1], time_attr="time", edge_label_time=torch.zeros(2), sampler="pyg")


# --------------------------------------------------------------------------
# Weighted negatives
# --------------------------------------------------------------------------
@given(st.integers(0, 10 ** 6), st.sampled_from(["binary", "triplet"]))
@settings(max_examples=8, deadline=None)
def test_weighted_negative_frequencies_within_a_statistical_bound(seed, mode):
    n = 12
    g = torch.Generator().manual_seed(seed)
    d = Data(x=torch.zeros(n, 1), edge_index=torch.randint(0, n, (2, 400), generator=g))
    w = torch.rand(n, generator=g) * (torch.rand(n, generator=g) > 0.3)
    w[0] = 0.5  # never all zero
    kw = {"dst_weight": w} if mode == "triplet" else {"src_weight": w, "dst_weight": w.flip(0)}
    L = FixedSizeLinkNeighborLoader(d, [1], batch_size=50, seed=seed,
                                    neg_sampling=NegativeSampling(mode, 2, **kw))
    counts = {0: torch.zeros(n), 1: torch.zeros(n)}
    for epoch in range(3):
        for c in range(len(L)):
            sup = L.supervision(epoch, c)
            if mode == "triplet":
                counts[1] += torch.bincount(sup["dst_neg"], minlength=n).float()
            else:
                b = sup["input_id"].numel()
                for side in (0, 1):
                    counts[side] += torch.bincount(sup["edge_label_index"][side, b:],
                                                   minlength=n).float()
    for side, weight in ((1, kw["dst_weight"]), (0, kw.get("src_weight"))):
        if weight is None:
            continue
        total = counts[side].sum()
        p = weight.double() / weight.sum()
        expect = total * p
        sd = (total * p * (1 - p)).sqrt()
        assert bool((counts[side][p == 0] == 0).all())  # weight 0: never drawn
        assert bool(((counts[side] - expect).abs() <= 6 * sd + 1).all()), (counts[side], expect)


def test_negative_sampling_forms_agree():
    g = torch.Generator().manual_seed(0)
    d = Data(x=torch.zeros(30, 1), edge_index=torch.randint(0, 30, (2, 90), generator=g))
    forms = ["triplet", {"mode": "triplet", "amount": 2}, NegativeSampling("triplet", 2)]
    batches = []
    for f in forms:
        kw = {"neg_sampling_ratio": 2} if isinstance(f, str) else {}
        L = FixedSizeLinkNeighborLoader(d, [2], batch_size=8, neg_sampling=f, **kw)
        batches.append(L.batch(0, 1))
    for b in batches[1:]:
        assert b.keys() == batches[0].keys()
        assert all(torch.equal(b[k], batches[0][k]) for k in b)


def test_negative_sampling_bad_forms_are_named():
    d = Data(x=torch.zeros(5, 1), edge_index=torch.tensor([[0, 1], [1, 2]]))
    L = FixedSizeLinkNeighborLoader
    with pytest.raises(LinkLabelError, match="give the amount once"):
        L(d, [1], neg_sampling=NegativeSampling("binary", 2), neg_sampling_ratio=3)
    with pytest.raises(LinkLabelError, match="src_weight has shape"):
        L(d, [1], neg_sampling=NegativeSampling("binary", src_weight=torch.ones(4)))
    with pytest.raises(LinkLabelError, match="all zero"):
        L(d, [1], neg_sampling={"mode": "binary", "dst_weight": torch.zeros(5)})
    with pytest.raises(LinkLabelError, match="negative or non-finite"):
        L(d, [1], neg_sampling={"mode": "binary", "dst_weight": -torch.ones(5)})
    with pytest.raises(LinkLabelError, match="PyG's NegativeSampling fields"):
        L(d, [1], neg_sampling={"mode": "binary", "ratio": 2})
    with pytest.warns(UserWarning, match=r"src_weight=\.\.\.\) with mode 'triplet' is not used"):
        L(d, [1], neg_sampling={"mode": "triplet", "src_weight": torch.ones(5)})


@pytest.mark.parametrize("disjoint,temporal", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("amount", [1, 2])
def test_triplet_batches_as_pygs_triplet_test(disjoint, temporal, amount):
    """PyG's homogeneous triplet loader test, restated on the unpadded batch: endpoints
    through the batch's rows, PyG's disjoint row blocks and ``batch``, and with node
    times every row of tree ``i`` no later than ``seed_time[i]``."""
    g = torch.Generator().manual_seed(amount)
    data = Data(x=torch.arange(100), edge_index=torch.randint(0, 100, (2, 400), generator=g))
    data.edge_label_index = torch.randint(0, 100, (2, 500), generator=g)  # left on the graph
    kw = {}
    if temporal:
        data.time = torch.arange(100)
        kw = dict(time_attr="time", edge_label_time=torch.max(
            data.time[data.edge_label_index[0]], data.time[data.edge_label_index[1]]) + 50)
    bs = 20
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        L = FixedSizeLinkNeighborLoader(data, [-1] * 2, data.edge_label_index, batch_size=bs,
                                        disjoint=disjoint, shuffle=True,
                                        neg_sampling=dict(mode="triplet", amount=amount), **kw)
        assert len(L) == 500 / bs
        assert "edge_label_index" in L.excluded_keys  # a supervision key, never gathered
        for flat in L:
            sup = L.unpad_links(flat)
            x = flat["x"]
            assert torch.equal(x[sup["src_index"]], data.edge_label_index[0, sup["input_id"]])
            assert torch.equal(x[sup["dst_pos_index"]],
                               data.edge_label_index[1, sup["input_id"]])
            dn = sup["dst_neg_index"]
            assert dn.shape == ((bs,) if amount == 1 else (bs, amount))
            assert int(dn.min()) >= 0 and int(dn.max()) < int(flat["node_mask"].sum())
            if not disjoint:
                continue
            assert int(sup["src_index"].min()) == 0 and int(sup["src_index"].max()) == bs - 1
            assert int(sup["dst_pos_index"].min()) == bs
            assert int(dn.min()) == 2 * bs and int(dn.max()) == (2 + amount) * bs - 1
            so = flat["seed_of"]
            for i in range(0, (2 + amount) * bs, bs):  # PyG's batch: increasing in blocks
                assert torch.equal(so[i:i + bs], torch.arange(bs))
            if temporal:
                nm = flat["node_mask"]
                for i in range(bs):
                    rows = nm & (so == i)
                    assert int(flat["time"][rows].max()) <= int(sup["seed_time"][i])
