"""FixedSizeLinkNeighborLoader: properties, PyG's LinkNeighborLoader semantics, bad inputs."""
from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data

from graph_adapter import Budget
from graph_adapter.checker import value_problems
from graph_adapter.format import levels_of_rows
from graph_adapter.sampling.link import FixedSizeLinkNeighborLoader, LinkLabelError, link_seeds
from graph_adapter.sampling import SubgraphOversizeError, trim_sample


def _graph(n: int, m: int, seed: int, feat: int = 3) -> Data:
    g = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(n, feat, generator=g),
                edge_index=torch.randint(0, n, (2, m), generator=g),
                edge_attr=torch.randn(m, 2, generator=g))


@st.composite
def setups(draw):
    n = draw(st.integers(4, 50))
    m = draw(st.integers(1, 200))
    neg = draw(st.sampled_from(["binary", "triplet", None]))
    ratio = draw(st.sampled_from([1, 2, 0.5] if neg == "binary" else [1, 2, 3]))
    labelled = neg != "triplet" and draw(st.booleans())
    return dict(data=_graph(n, m, draw(st.integers(0, 10 ** 6))),
                num_neighbors=draw(st.lists(st.sampled_from([-1, 0, 1, 2, 4]), min_size=1,
                                            max_size=2)),
                batch_size=draw(st.integers(1, 10)), neg_sampling=neg,
                neg_sampling_ratio=ratio, shuffle=draw(st.booleans()),
                replace=draw(st.booleans()), seed=draw(st.integers(0, 1000)),
                labels=labelled, label_kind=draw(st.sampled_from(["01", "float"])))


def _loader(cfg, **kw):
    d = cfg["data"]
    args = {k: cfg[k] for k in ("num_neighbors", "batch_size", "neg_sampling",
                                "neg_sampling_ratio", "shuffle", "replace", "seed")}
    if cfg["labels"]:
        g = torch.Generator().manual_seed(1)
        args["edge_label"] = (torch.randint(0, 2, (d.num_edges,), generator=g)
                              if cfg["label_kind"] == "01" else torch.rand(d.num_edges, generator=g))
    args.update(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trim warnings: counted in stats, tested apart
        return FixedSizeLinkNeighborLoader(d, **args)


def _signature(flat):
    return [(k, tuple(v.shape), v.dtype) for k, v in flat.items()]


def _micro(flat, F_):
    return [flat] if F_ == 1 else [{k: v[i] for k, v in flat.items()} for i in range(F_)]


# --------------------------------------------------------------------------
# One signature; every supervision edge once per epoch, across ranks
# --------------------------------------------------------------------------
@given(setups(), st.integers(1, 3), st.integers(1, 2))
@settings(max_examples=25, deadline=None)
def test_fixed_signature_and_every_supervision_edge_once_across_ranks(cfg, world_size, F_):
    sig, seen = None, {0: [], 1: []}
    for rank in range(world_size):
        L = _loader(cfg, rank=rank, world_size=world_size, micro_batches=F_)
        N, E = int(L.budget.nodes), int(L.budget.edges)
        # the slot count is a row count of its own: no level claims it
        assert levels_of_rows(L.slots, {"node": N, "edge": E, "graph": 2}) == ()
        for epoch in (0, 1):
            L.set_epoch(epoch)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                items = list(L)
            assert len(items) == len(L)
            for flat in items:
                s = _signature(flat)
                sig = sig or s
                assert s == sig
                for mb in _micro(flat, F_):
                    assert value_problems(mb) == []
                    iid = mb["input_id"]
                    seen[epoch].append(iid[iid >= 0])
            assert L.stats.links == sum(int((f["input_id"] >= 0).sum()) for f in items)
    total = cfg["data"].num_edges
    for epoch in (0, 1):
        got = torch.cat(seen[epoch]).sort().values
        assert torch.equal(got, torch.arange(total))  # each column exactly once an epoch


# --------------------------------------------------------------------------
# The batch: endpoints named, PyG's layout, padding slots inert
# --------------------------------------------------------------------------
@given(setups())
@settings(max_examples=40, deadline=None)
def test_endpoints_map_back_to_the_supervision_edges_through_n_id(cfg):
    d = cfg["data"]
    L = _loader(cfg)
    N = int(L.budget.nodes)
    k = int(cfg["neg_sampling_ratio"]) if cfg["neg_sampling"] == "triplet" else None
    for chunk in range(min(len(L), 3)):
        flat = L.batch(0, chunk)
        cols = L.chunk_seeds(0, chunk)
        b = cols.numel()
        sup = L.supervision(0, chunk)
        mask, n_id = flat["link_mask"], flat["n_id"]
        assert torch.equal(flat["input_id"][:b], cols)
        assert bool((flat["input_id"][b:] == -1).all())
        if cfg["neg_sampling"] == "triplet":
            assert int(mask.sum()) == b and bool(mask[:b].all())
            assert torch.equal(n_id[flat["src_index"][:b]], d.edge_index[0, cols])
            assert torch.equal(n_id[flat["dst_pos_index"][:b]], d.edge_index[1, cols])
            neg = flat["dst_neg_index"]
            assert neg.shape == ((L.slots,) if k == 1 else (L.slots, k))  # PyG squeezes k == 1
            # PyG's reading of its flat draw without disjoint: row-major [b, k]
            assert torch.equal(n_id[neg[:b]].view(b, -1), sup["dst_neg"].view(b, -1))
            pads = [flat["src_index"][b:], flat["dst_pos_index"][b:], neg[b:]]
        else:
            nb = math.ceil(b * cfg["neg_sampling_ratio"]) if cfg["neg_sampling"] else 0
            m = b + nb
            assert int(mask.sum()) == m and bool(mask[:m].all())  # real slots first
            eli = flat["edge_label_index"]
            glob = n_id[eli[:, :m]]
            assert torch.equal(glob[:, :b], d.edge_index[:, cols])  # positives, then negatives
            assert torch.equal(glob, sup["edge_label_index"])
            pads = [eli[:, m:]]
            if "edge_label" in flat:
                lab = flat["edge_label"]
                assert bool((lab[b:] == 0).all())  # negatives and padding: 0
                if cfg["labels"]:
                    want = L.edge_label[cols]
                    assert torch.equal(lab[:b], want.to(lab.dtype))
                else:
                    assert bool((lab[:b] == 1).all())
            else:
                assert cfg["neg_sampling"] is None and not cfg["labels"]
        for p in pads:  # padding slots touch the last padding node only
            assert bool((p == N - 1).all())
        # seed rows: the distinct endpoints, sorted (PyG's unique), first
        ends = torch.cat([t.reshape(-1) for k_, t in sup.items() if k_ != "input_id"]) \
            if cfg["neg_sampling"] == "triplet" else sup["edge_label_index"].reshape(-1)
        seeds = torch.unique(ends)
        sm = flat["seed_mask"]
        assert int(sm.sum()) == seeds.numel() and bool(sm[:seeds.numel()].all())
        assert torch.equal(n_id[:seeds.numel()], seeds)


def test_given_labels_follow_pyg_binary_shift():
    """PyG's LinkLoader adds 1 to binary labels whose minimum is 0 (0 = negative)."""
    d = _graph(30, 40, 0)
    lab = torch.arange(40) % 3
    L = FixedSizeLinkNeighborLoader(d, [2], edge_label=lab, batch_size=8)
    f = L.batch(0, 0)
    assert torch.equal(f["edge_label"][:8], lab[:8] + 1)
    L = FixedSizeLinkNeighborLoader(d, [2], edge_label=lab + 5, batch_size=8)
    assert torch.equal(L.batch(0, 0)["edge_label"][:8], lab[:8] + 5)
    L = FixedSizeLinkNeighborLoader(d, [2], edge_label=lab, neg_sampling=None, batch_size=8)
    assert torch.equal(L.batch(0, 0)["edge_label"][:8], lab[:8])  # no negatives: unchanged


def test_supervision_edges_subset_and_graph_attrs_not_gathered():
    d = _graph(40, 100, 1)
    eli = torch.tensor([[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]])
    d.edge_label_index = eli  # RandomLinkSplit leaves these on the graph
    d.edge_label = torch.ones(5)
    L = FixedSizeLinkNeighborLoader(d, [2], edge_label_index=eli, batch_size=2, shuffle=True)
    assert "edge_label" in L.excluded_keys and "edge_label_index" in L.excluded_keys
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a trimmed batch: counted, tested apart
        got = torch.cat([f["input_id"][f["input_id"] >= 0] for f in L]).sort().values
    assert torch.equal(got, torch.arange(5))
    assert L.stats.links == 5 and L.stats.negatives == 5 and len(L) == 3


def test_negatives_are_uniform_and_may_hit_positives_as_in_pyg():
    """Negatives are PyG's NegativeSampling draws: uniform over the nodes (chi-square),
    and not rejected when they are an edge of the graph (PyG: 'TODO: Do not sample false
    negatives'): on a complete graph every negative is a real edge."""
    n = 6
    ii, jj = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    full = torch.stack([ii.reshape(-1), jj.reshape(-1)])
    d = Data(x=torch.randn(n, 2), edge_index=full)
    L = FixedSizeLinkNeighborLoader(d, [1], batch_size=6, neg_sampling_ratio=2)
    counts = torch.zeros(n)
    for epoch in range(40):
        for c in range(len(L)):
            neg = L.supervision(epoch, c)["edge_label_index"][:, 6:]
            counts += torch.bincount(neg.reshape(-1), minlength=n)
    expect = counts.sum() / n
    chi2 = float(((counts - expect) ** 2 / expect).sum())
    assert chi2 < 20.5  # chi-square, 5 dof, p = 0.001
    assert counts.sum() == 40 * len(L) * 2 * 12


def test_negatives_are_deterministic_per_seed_epoch_batch():
    d = _graph(50, 120, 2)
    a = FixedSizeLinkNeighborLoader(d, [2, 2], batch_size=16, shuffle=True, seed=4)
    b = FixedSizeLinkNeighborLoader(d, [2, 2], batch_size=16, shuffle=True, seed=4)
    for x, y in zip(a, b):
        assert all(torch.equal(x[k], y[k]) for k in x)
    e0 = a.supervision(0, 0)["edge_label_index"][:, 16:]
    e1 = a.supervision(1, 0)["edge_label_index"][:, 16:]
    assert not torch.equal(e0, e1)  # another epoch, other negatives
    w = list(FixedSizeLinkNeighborLoader(d, [2, 2], batch_size=16, shuffle=True, seed=4,
                                         num_workers=2))
    a.set_epoch(0)
    for x, y in zip(a, w):
        assert all(torch.equal(x[k], y[k]) for k in x)


def test_slots_are_nudged_off_the_budget_counts():
    d = _graph(40, 60, 3)
    # L = 8 + 8 = 16 slots would equal E = 16: one padding slot more
    L = FixedSizeLinkNeighborLoader(d, [1], batch_size=8, budget=Budget(nodes=40, edges=16, graphs=2))
    assert L.slots == 17 and L.batch(0, 0)["edge_label_index"].shape == (2, 17)
    # batch_size 1, ratio 1: L = 2 = G
    L = FixedSizeLinkNeighborLoader(d, [1], batch_size=1)
    assert L.slots == 3
    assert L.slots not in (int(L.budget.nodes), int(L.budget.edges), 2)


def test_oversize_trims_never_seeds_and_error_names_the_batch():
    d = _graph(300, 3000, 4)
    small = Budget(nodes=40, edges=30, graphs=2)  # 32 endpoints at most + 2 padding nodes
    cols = d.edge_index[:, :64]  # 8 batches
    L = FixedSizeLinkNeighborLoader(d, [5, 5], cols, batch_size=8, neg_sampling_ratio=1,
                                    budget=small)
    with pytest.warns(UserWarning, match="FixedSizeLinkNeighborLoader.*trimmed"):
        items = list(L)
    assert L.stats.trimmed_batches == len(items)
    for c, f in enumerate(items):
        assert value_problems(f) == []
        s, sup = L._sample_chunk(0, c)
        seeds, _ = link_seeds(sup["edge_label_index"])
        assert int(f["seed_mask"].sum()) == seeds.numel()  # every endpoint kept
        t, _, _ = trim_sample(s, 38, 30)
        assert int(f["node_mask"].sum()) == t.num_nodes
    L = FixedSizeLinkNeighborLoader(d, [5, 5], cols, batch_size=8, budget=small, oversize="error")
    with pytest.raises(SubgraphOversizeError, match="chunk 0.*supervision columns"):
        next(iter(L))


# --------------------------------------------------------------------------
# Bad inputs: named errors
# --------------------------------------------------------------------------
def test_bad_inputs_are_named():
    d = _graph(20, 30, 5)
    L = FixedSizeLinkNeighborLoader
    with pytest.raises(LinkLabelError, match=r"column 1 = \[3, 20\] is out of range.*20 nodes"):
        L(d, [2], edge_label_index=torch.tensor([[0, 3], [1, 20]]))
    with pytest.raises(LinkLabelError, match=r"shape \(3, 2\); give \[2, L\]"):
        L(d, [2], edge_label_index=torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(LinkLabelError, match="dtype torch.float32"):
        L(d, [2], edge_label_index=torch.zeros(2, 2))
    with pytest.raises(LinkLabelError, match="no column"):
        L(d, [2], edge_label_index=torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(LinkLabelError, match="HeteroData"):
        L(d, [2], edge_label_index=(("a", "to", "b"), torch.zeros(2, 1, dtype=torch.long)))
    with pytest.raises(LinkLabelError, match=r"edge_label has shape \(29,\).*30 columns"):
        L(d, [2], edge_label=torch.ones(29))
    with pytest.raises(LinkLabelError, match="triplet.*edge_label=None"):
        L(d, [2], edge_label=torch.ones(30), neg_sampling="triplet")
    with pytest.raises(LinkLabelError, match="neg_sampling_ratio=1.5 with neg_sampling='triplet'"):
        L(d, [2], neg_sampling="triplet", neg_sampling_ratio=1.5)
    with pytest.raises(LinkLabelError, match="neg_sampling_ratio=0"):
        L(d, [2], neg_sampling_ratio=0)
    with pytest.raises(LinkLabelError, match="neg_sampling='pairs'"):
        L(d, [2], neg_sampling="pairs")
    with pytest.raises(ValueError, match="fewer than the 16 endpoints a batch can have"):
        L(d, [2], batch_size=4, neg_sampling_ratio=1, budget=Budget(nodes=10, edges=11, graphs=2))
    with pytest.raises(NotImplementedError, match="directed=False, disjoint=True"):
        L(d, [2], disjoint=True, directed=False)
    with pytest.raises(ValueError, match="batch_size=0"):
        L(d, [2], batch_size=0)


# --------------------------------------------------------------------------
# A link predictor on the padded batch == the plain model on the unpadded sample
# --------------------------------------------------------------------------
class _LinkPredictor(torch.nn.Module):
    """GraphSAGE encoder + dot-product decoder (PyG's link-prediction example)."""

    def __init__(self, triplet: bool):
        super().__init__()
        from torch_geometric.nn import GraphSAGE
        self.enc = GraphSAGE(3, 8, num_layers=2, out_channels=8, norm="batch_norm")
        self.triplet = triplet

    def forward(self, x, edge_index, edge_label_index=None, src_index=None,
                dst_pos_index=None, dst_neg_index=None):
        h = self.enc(x, edge_index)
        if not self.triplet:
            return (h[edge_label_index[0]] * h[edge_label_index[1]]).sum(-1)
        src = h[src_index]
        pos = (src * h[dst_pos_index]).sum(-1)
        neg = (src.unsqueeze(1) * h[dst_neg_index.reshape(src_index.size(0), -1)]).sum(-1)
        return pos, neg


@given(setups())
@settings(max_examples=12, deadline=None)
def test_scores_and_grads_equal_the_plain_model_in_train_mode(cfg):
    from graph_adapter import ipu_wrap
    from graph_adapter.nn import link_loss

    if cfg["neg_sampling"] is None:
        cfg = dict(cfg, neg_sampling="binary", labels=False)  # the loss needs labels
    d = cfg["data"]
    L = _loader(cfg)
    triplet = cfg["neg_sampling"] == "triplet"
    torch.manual_seed(0)
    plain = _LinkPredictor(triplet).train()
    mine = copy.deepcopy(plain)
    wrapped = ipu_wrap(mine, loss_fn=link_loss())
    flat = L.batch(0, 0)
    s, sup = L._sample_chunk(0, 0)
    s, _, _ = trim_sample(s, int(L.budget.nodes) - 2, int(L.budget.edges))
    if s.num_nodes < 2:
        return  # BatchNorm in train mode needs two rows (both sides raise)
    x = d.x[s.n_id]
    b = sup["input_id"].numel()
    if triplet:
        ends = torch.cat([sup["src"], sup["dst_pos"], sup["dst_neg"].reshape(-1)])
        _, local = link_seeds(ends)
        pos, neg = plain(x, s.edge_index, src_index=local[:b], dst_pos_index=local[b:2 * b],
                         dst_neg_index=local[2 * b:])
        scores = torch.cat([pos.view(-1, 1), neg], 1)
        target = torch.zeros_like(scores)
        target[:, 0] = 1
        loss_plain = F.binary_cross_entropy_with_logits(scores, target)
    else:
        _, local = link_seeds(sup["edge_label_index"])
        scores = plain(x, s.edge_index, local)
        loss_plain = F.binary_cross_entropy_with_logits(scores, sup["edge_label"].float())
    loss_plain.backward()
    res = wrapped(flat)
    res["loss"].backward()
    if triplet:
        got = torch.cat([res["output/0"][:b].view(-1, 1), res["output/1"][:b].view(b, -1)], 1)
        torch.testing.assert_close(got, scores, rtol=1e-5, atol=1e-5)
    else:
        torch.testing.assert_close(res["output"][:scores.numel()], scores, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(res["loss"], loss_plain, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(plain.named_parameters(), mine.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_link_loss_of_a_batch_without_real_slots_is_zero():
    from graph_adapter.nn import masked_link_bce, masked_triplet_bce

    s = torch.randn(5, requires_grad=True)
    assert float(masked_link_bce(s, torch.ones(5), torch.zeros(5, dtype=torch.bool))) == 0.0
    m = torch.tensor([True, True, False, False, False])
    lab = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0])
    torch.testing.assert_close(masked_link_bce(s, lab, m),
                               F.binary_cross_entropy_with_logits(s[:2], lab[:2]))
    neg = torch.randn(5, 2)
    want = F.binary_cross_entropy_with_logits(
        torch.cat([s[:2].view(-1, 1), neg[:2]], 1), torch.tensor([[1.0, 0, 0]] * 2))
    torch.testing.assert_close(masked_triplet_bce(s, neg, m), want)


# --------------------------------------------------------------------------
# PyG's own LinkNeighborLoader (torch-sparse): same layout, same size distribution
# --------------------------------------------------------------------------
@pytest.mark.needs_scatter
def test_layout_and_sizes_match_pyg_link_neighbor_loader():
    """Per batch, PyG's LinkNeighborLoader and ours have the same number of supervision
    columns, endpoint seeds first and sorted, and the sampled node counts have one
    distribution (two-sample KS test, the helper of test_neighbor.py)."""
    from torch_geometric.loader import LinkNeighborLoader

    from test_neighbor import _ks_2samp_pvalue

    d = _graph(2000, 12000, 6)
    d.edge_attr = None
    bs, fan = 8, [4, 2]
    sup = d.edge_index[:, :2400]  # 300 batches
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for neg in ("binary", "triplet"):
            torch.manual_seed(0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                theirs = list(LinkNeighborLoader(d, num_neighbors=fan, batch_size=bs,
                                                 edge_label_index=sup, neg_sampling=neg,
                                                 shuffle=True))
            L = FixedSizeLinkNeighborLoader(d, fan, sup, batch_size=bs, neg_sampling=neg,
                                            shuffle=True,
                                            budget=Budget(nodes=1200, edges=1201, graphs=2))
            ours = [L._sample_chunk(0, c)[0].num_nodes for c in range(len(L) - 1)]
            for t in theirs[:50]:
                ends = (t.edge_label_index.reshape(-1) if neg == "binary" else
                        torch.cat([t.src_index, t.dst_pos_index, t.dst_neg_index.reshape(-1)]))
                k = int(torch.unique(ends).numel())
                assert torch.equal(torch.unique(ends), torch.arange(k))  # seeds first
                assert bool((t.n_id[:k].diff() > 0).all())  # sorted by id, as ours
                if neg == "binary":
                    assert t.edge_label_index.size(1) == 2 * bs
                else:
                    assert t.dst_neg_index.shape == (bs,)
            full = [t.num_nodes for t in theirs if t.input_id.numel() == bs]
            p = _ks_2samp_pvalue(ours, full)
            assert p > 1e-3, (neg, p, sum(ours) / len(ours), sum(full) / len(full))
    finally:
        torch.set_num_threads(threads)


# --------------------------------------------------------------------------
# The IPU path: host batches [F, ...], check() clean, the emulator trains
# --------------------------------------------------------------------------
@pytest.mark.parametrize("neg", ["binary", "triplet"])
def test_link_batches_check_clean_and_emulator_training_equals_plain_loop(neg):
    from graph_adapter import ipu_wrap
    from graph_adapter.backends import compile as ga_compile
    from graph_adapter.checker import check
    from graph_adapter.ipu import IPUOptions
    from graph_adapter.nn import link_loss

    d = _graph(150, 400, 8)
    opts = IPUOptions(1, 1, 2)
    cols = d.edge_index[:, :64]
    L = FixedSizeLinkNeighborLoader(d, [3, 2], cols, batch_size=16, neg_sampling=neg,
                                    shuffle=True, micro_batches=opts.micro_batches)
    torch.manual_seed(0)
    w_emu = ipu_wrap(_LinkPredictor(neg == "triplet"), loss_fn=link_loss())
    w_ref = copy.deepcopy(w_emu)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batches = list(L)
    assert len(batches) == 2 and batches[0]["link_mask"].shape[0] == 2
    report = check(w_emu, batches[0], training=True, options=opts)
    assert report.ok and report.findings == [], report
    emu = ga_compile(w_emu, backend="ipu-emulator", options=opts,
                     optimizer=torch.optim.SGD(w_emu.parameters(), lr=0.1))
    ref_opt = torch.optim.SGD(w_ref.parameters(), lr=0.1)
    for host in batches:
        emu(host)
        ref_opt.zero_grad()
        losses = [w_ref({k: v[i:i + 1] for k, v in host.items()})["loss"] for i in range(2)]
        torch.stack(losses).mean().backward()
        ref_opt.step()
    for (name, p), q in zip(w_emu.named_parameters(), w_ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
    assert emu.steps == 2


@pytest.mark.needs_scatter
@pytest.mark.parametrize("neg", [None, "binary", "triplet"])
def test_unpad_links_matches_pyg_link_neighbor_loader(neg):
    """``unpad_links`` holds PyG's supervision keys with PyG's shapes and dtypes; without
    negatives and at full fanouts (no random draw) the same supervision, seeds and
    node / edge sets as PyG's LinkNeighborLoader (torch-sparse)."""
    from torch_geometric.loader import LinkNeighborLoader

    d = _graph(60, 300, 8)
    d.edge_attr = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = next(iter(LinkNeighborLoader(d, [-1, -1], batch_size=8, neg_sampling=neg)))
    L = FixedSizeLinkNeighborLoader(d, [-1, -1], batch_size=8, neg_sampling=neg)
    flat = L.batch(0, 0)
    ours = L.unpad_links(flat)
    keys = ("input_id", "edge_label_index", "edge_label", "src_index", "dst_pos_index",
            "dst_neg_index")
    want = {k: t[k] for k in keys if k in t and t[k] is not None}
    assert sorted(ours) == sorted(want)
    for k, v in want.items():
        assert ours[k].shape == v.shape and ours[k].dtype == v.dtype, k
    assert torch.equal(ours["input_id"], t.input_id)
    if neg is None:
        assert torch.equal(ours["edge_label_index"], t.edge_label_index)
        got = flat["n_id"][flat["node_mask"]]
        k = int(flat["seed_mask"].sum())
        assert torch.equal(got[:k], t.n_id[:k])
        assert sorted(got.tolist()) == sorted(t.n_id.tolist())
        assert sorted(flat["e_id"][flat["edge_mask"]].tolist()) == sorted(t.e_id.tolist())
