"""FixedSizeNeighborLoader and the CSC sampler: properties, padding format, bad inputs."""
from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data, HeteroData

from graph_adapter import Budget, collate_padded
from graph_adapter.checker import value_problems
from graph_adapter.sampling import CSC, FanoutError, sample_neighbors
from graph_adapter.sampling import (FixedSizeHeteroNeighborLoader, FixedSizeNeighborLoader,
                                    InputNodesError, SubgraphOversizeError, fit_neighbor_budget, trim_sample)


def _graph(n: int, m: int, seed: int, feat: int = 3, edge_attr: bool = True) -> Data:
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, m), generator=g)
    d = Data(x=torch.randn(n, feat, generator=g), edge_index=ei,
             y=torch.randint(0, 3, (n,), generator=g))
    if edge_attr:
        d.edge_attr = torch.randn(m, 2, generator=g)
    return d


@st.composite
def setups(draw):
    n = draw(st.integers(5, 60))
    m = draw(st.integers(0, 300))
    fan = draw(st.lists(st.sampled_from([-1, 0, 1, 2, 3, 5]), min_size=1, max_size=3))
    bs = draw(st.integers(1, 12))
    return dict(data=_graph(n, m, draw(st.integers(0, 10 ** 6))), num_neighbors=fan,
                batch_size=bs, shuffle=draw(st.booleans()), replace=draw(st.booleans()),
                disjoint=draw(st.booleans()), seed=draw(st.integers(0, 1000)))


def _signature(flat):
    return [(k, tuple(v.shape), v.dtype) for k, v in flat.items()]


# --------------------------------------------------------------------------
# The sampler
# --------------------------------------------------------------------------
@given(setups())
def test_sample_is_a_subgraph_of_the_input(cfg):
    d, fan = cfg["data"], cfg["num_neighbors"]
    csc = CSC.from_edge_index(d.edge_index, d.num_nodes)
    seeds = torch.randperm(d.num_nodes)[:cfg["batch_size"]]
    s = sample_neighbors(csc, seeds, fan, replace=cfg["replace"], disjoint=cfg["disjoint"],
                         generator=torch.Generator().manual_seed(cfg["seed"]))
    assert torch.equal(s.n_id[:seeds.numel()], seeds)  # seeds first, in order
    # every sampled edge is an input edge: (n_id[src], n_id[dst]) == edge_index[:, e_id]
    glob = s.n_id[s.edge_index]
    assert torch.equal(glob, d.edge_index[:, s.e_id])
    assert sum(s.nodes_per_hop) == s.num_nodes and sum(s.edges_per_hop) == s.num_edges
    if not cfg["disjoint"]:
        assert torch.unique(s.n_id).numel() == s.num_nodes  # a node is one row
    else:
        keys = s.seed_of * d.num_nodes + s.n_id
        assert torch.unique(keys).numel() == s.num_nodes  # a (tree, node) pair is one row
        # an edge stays inside its seed's tree
        assert torch.equal(s.seed_of[s.edge_index[0]], s.seed_of[s.edge_index[1]])
    # per hop: each frontier node gets min(deg, k) distinct in-edges (all for -1),
    # or k draws (replace) when it has any
    start = 0
    rows_start = 0
    for h, k in enumerate(fan):
        n_front = s.nodes_per_hop[h]
        front = torch.arange(rows_start, rows_start + n_front)
        e = s.edge_index[:, start:start + s.edges_per_hop[h]]
        eid = s.e_id[start:start + s.edges_per_hop[h]]
        assert bool(((e[1] >= rows_start) & (e[1] < rows_start + n_front)).all())
        deg = csc.in_degree(s.n_id[front])
        got = torch.bincount(e[1] - rows_start, minlength=n_front)
        if k < 0:
            want = deg
        elif cfg["replace"]:
            want = torch.where(deg > 0, torch.full_like(deg, k), torch.zeros_like(deg))
        else:
            want = deg.clamp(max=k)
        assert torch.equal(got, want), (h, k)
        if not cfg["replace"]:  # without replacement: an edge at most once per row
            pairs = e[1] * (d.num_edges + 1) + eid
            assert torch.unique(pairs).numel() == pairs.numel()
        rows_start += n_front
        start += s.edges_per_hop[h]


@given(setups())
@settings(max_examples=20)
def test_sample_is_deterministic_for_a_seed(cfg):
    d = cfg["data"]
    csc = CSC.from_edge_index(d.edge_index, d.num_nodes)
    seeds = torch.arange(min(cfg["batch_size"], d.num_nodes))
    a, b = (sample_neighbors(csc, seeds, cfg["num_neighbors"], replace=cfg["replace"],
                             disjoint=cfg["disjoint"],
                             generator=torch.Generator().manual_seed(cfg["seed"]))
            for _ in range(2))
    assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
    assert torch.equal(a.e_id, b.e_id)


def test_without_replacement_picks_uniform_subsets():
    # one destination with 6 in-edges, fanout 2: each of the 15 pairs about 1/15
    ei = torch.tensor([[1, 2, 3, 4, 5, 6], [0, 0, 0, 0, 0, 0]])
    csc = CSC.from_edge_index(ei, 7)
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(7)
    pairs = {}
    trials = 3000
    for _ in range(trials):
        s = sample_neighbors(csc, torch.tensor([0]), [2], generator=g)
        src = tuple(sorted(s.n_id[1:].tolist()))
        assert len(src) == 2
        pairs[src] = pairs.get(src, 0) + 1
        counts[s.n_id[1:]] += 1
    assert len(pairs) == 15
    expect = trials / 15
    chi2 = sum((c - expect) ** 2 / expect for c in pairs.values())
    assert chi2 < 36.1  # chi-square, 14 dof, p = 0.001


# --------------------------------------------------------------------------
# The loader
# --------------------------------------------------------------------------
def _loader(cfg, **kw):
    args = {k: cfg[k] for k in ("num_neighbors", "batch_size", "shuffle", "replace", "disjoint",
                                "seed")}
    args.update(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trim warnings: counted in stats, checked apart
        return FixedSizeNeighborLoader(cfg["data"], **args)


@given(setups(), st.integers(1, 3), st.integers(1, 2))
@settings(max_examples=20, deadline=None)
def test_fixed_signature_and_every_seed_once_across_ranks(cfg, world_size, F):
    seen = []
    sig = None
    for rank in range(world_size):
        L = _loader(cfg, rank=rank, world_size=world_size, micro_batches=F)
        lens = set()
        for epoch in (0, 1):
            L.set_epoch(epoch)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                items = list(L)
            lens.add(len(items))
            for flat in items:
                s = _signature(flat)
                sig = sig or s
                assert s == sig  # one signature: every batch, epoch and rank
                for mb in ([flat] if F == 1 else [{k: v[i] for k, v in flat.items()}
                                                  for i in range(F)]):
                    seeds = mb["n_id"][mb["seed_mask"]]
                    if epoch == 0:
                        seen.append(seeds)
                    b = int(mb["seed_mask"].sum())
                    assert bool(mb["seed_mask"][:b].all())  # seed rows first
                    assert value_problems(mb) == []
            assert L.stats.seeds == sum(int(f["seed_mask"].sum()) for f in items)
        assert lens == {len(L)}
    allseeds = torch.cat(seen).sort().values
    assert torch.equal(allseeds, torch.arange(cfg["data"].num_nodes))  # each once per epoch


@given(setups())
@settings(max_examples=30)
def test_batch_is_collate_padded_of_the_sample(cfg):
    """The padded batch is the format's own collate of the (trimmed) sample, with
    n_id / e_id padded with -1 instead of 0; x / y / edge_attr follow n_id / e_id."""
    d = cfg["data"]
    L = _loader(cfg)
    for chunk in range(min(len(L), 3)):
        flat = L.batch(0, chunk)
        seeds = L.chunk_seeds(0, chunk)
        s = L.sample(seeds, 0, chunk)
        s, _, _ = trim_sample(s, int(L.budget.nodes) - 2, int(L.budget.edges))
        sub = Data(x=d.x[s.n_id], edge_index=s.edge_index, y=d.y[s.n_id],
                   edge_attr=d.edge_attr[s.e_id], n_id=s.n_id, e_id=s.e_id,
                   seed_mask=torch.arange(s.num_nodes) < seeds.numel())
        if s.seed_of is not None:
            sub.seed_of = s.seed_of
        ref = collate_padded([sub], L.budget)
        assert list(ref) == list(flat)
        assert flat["e_id"].shape == (int(L.budget.edges),)
        if s.num_edges in (0, s.num_nodes):
            # collate reads e_id's level from its length (PyG: node first on a tie):
            # checked directly, the rest against collate
            assert torch.equal(flat["e_id"][:s.num_edges], s.e_id)
            assert bool((flat["e_id"][s.num_edges:] == -1).all())
            flat, ref = dict(flat), dict(ref)
            del flat["e_id"], ref["e_id"]
        for k in flat:
            if k in ("n_id", "e_id", "seed_of"):
                real = ref["node_mask"] if k != "e_id" else ref["edge_mask"]
                assert torch.equal(flat[k][real], ref[k][real])
                assert bool((flat[k][~real] == -1).all())
            else:
                assert torch.equal(flat[k], ref[k]), k


def test_budget_is_fitted_from_the_sampler_not_the_worst_case():
    d = _graph(1000, 10000, 0)
    L = FixedSizeNeighborLoader(d, [10, 5], 32, shuffle=True)
    worst = 32 * (1 + 10 + 50)
    assert int(L.budget.nodes) < worst
    sizes = torch.tensor(L.fit_sizes, dtype=torch.float64)
    assert int(L.budget.nodes) == int(sizes[:, 0].max()) + 2  # 32 batches: q99 = max
    assert int(L.budget.edges) == int(sizes[:, 1].max())


def test_fit_budget_nudges_ties_and_holds_the_seeds():
    b = fit_neighbor_budget([(10, 12), (11, 13)], batch_size=4, success_ratio=1.0)
    assert (b.nodes, b.edges, b.graphs) == (13, 14, 2)  # nodes 13 = 11 + 2; edges 13 -> 14
    b = fit_neighbor_budget([(1, 0)], batch_size=8)
    assert b.nodes == 10 and b.edges not in (10, 2)


def test_oversize_trim_is_counted_and_warned_error_raises():
    d = _graph(500, 5000, 1)
    small = Budget(nodes=70, edges=90, graphs=2)
    L = FixedSizeNeighborLoader(d, [5, 5], 32, budget=small)
    with pytest.warns(UserWarning, match="trimmed"):
        items = list(L)
    assert L.stats.trimmed_batches == len(items)
    full = [L.sample(L.chunk_seeds(0, c), 0, c) for c in range(len(items))]
    assert L.stats.trimmed_nodes == sum(max(0, s.num_nodes - 68) for s in full)
    assert L.stats.trimmed_nodes + sum(int(f["node_mask"].sum()) for f in items) == \
        sum(s.num_nodes for s in full)
    assert L.stats.trimmed_edges + sum(int(f["edge_mask"].sum()) for f in items) == \
        sum(s.num_edges for s in full)
    for f in items:
        assert value_problems(f) == []
        assert int(f["seed_mask"].sum()) == 32 or f is items[-1]
    L = FixedSizeNeighborLoader(d, [5, 5], 32, budget=small, oversize="error")
    with pytest.raises(SubgraphOversizeError, match="chunk 0.*budget holds 68 real nodes"):
        next(iter(L))


def test_input_nodes_mask_and_index_give_the_same_seeds():
    d = _graph(50, 200, 2)
    mask = torch.zeros(50, dtype=torch.bool)
    mask[::3] = True
    a = FixedSizeNeighborLoader(d, [2], 4, input_nodes=mask, budget=Budget(nodes=60, edges=61, graphs=2))
    b = FixedSizeNeighborLoader(d, [2], 4, input_nodes=mask.nonzero().view(-1),
                                budget=Budget(nodes=60, edges=61, graphs=2))
    sa = torch.cat([f["n_id"][f["seed_mask"]] for f in a])
    sb = torch.cat([f["n_id"][f["seed_mask"]] for f in b])
    assert torch.equal(sa, sb) and torch.equal(sa, torch.arange(0, 50, 3))


def test_workers_yield_the_same_batches_and_threads_are_restored():
    d = _graph(300, 1500, 5)
    kw = dict(shuffle=True, budget=Budget(nodes=200, edges=260, graphs=2), seed=3)
    before = torch.get_num_threads()
    a = list(FixedSizeNeighborLoader(d, [3, 2], 16, **kw))
    assert torch.get_num_threads() == before  # sampler_threads=1 is undone after each batch
    b = list(FixedSizeNeighborLoader(d, [3, 2], 16, num_workers=2, **kw))
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert list(x) == list(y) and all(torch.equal(x[k], y[k]) for k in x)


# --------------------------------------------------------------------------
# Bad inputs: named errors
# --------------------------------------------------------------------------
def test_bad_inputs_are_named():
    d = _graph(20, 60, 3)
    with pytest.raises(InputNodesError, match=r"input_nodes\[1\] = 20 is out of range.*20 nodes"):
        FixedSizeNeighborLoader(d, [2], 4, input_nodes=torch.tensor([0, 20]))
    with pytest.raises(InputNodesError, match=r"input_nodes\[0\] = -1"):
        FixedSizeNeighborLoader(d, [2], 4, input_nodes=[-1])
    with pytest.raises(InputNodesError, match="repeats"):
        FixedSizeNeighborLoader(d, [2], 4, input_nodes=[1, 1])
    with pytest.raises(InputNodesError, match="bool mask of 5 entries"):
        FixedSizeNeighborLoader(d, [2], 4, input_nodes=torch.ones(5, dtype=torch.bool))
    with pytest.raises(InputNodesError, match="HeteroData"):
        FixedSizeNeighborLoader(d, [2], 4, input_nodes=("paper", torch.arange(3)))
    with pytest.raises(FanoutError, match=r"num_neighbors\[1\]=-2"):
        FixedSizeNeighborLoader(d, [2, -2], 4)
    with pytest.raises(FanoutError, match="as a list"):
        FixedSizeNeighborLoader(d, 3, 4)
    with pytest.raises(FanoutError, match="homogeneous"):
        FixedSizeNeighborLoader(d, {("a", "to", "a"): [2]}, 4)
    with pytest.raises(ValueError, match="fewer than batch_size=4 seeds"):
        FixedSizeNeighborLoader(d, [2], 4, budget=Budget(nodes=5, edges=7, graphs=2))
    with pytest.raises(ValueError, match="graphs=2"):
        FixedSizeNeighborLoader(d, [2], 4, budget=Budget(nodes=50, edges=70, graphs=3))
    with pytest.raises(ValueError, match="oversize='cut'"):
        FixedSizeNeighborLoader(d, [2], 4, oversize="cut")


def test_hetero_fanouts_are_checked_against_the_edge_types():
    h = HeteroData()
    h["paper"].x = torch.randn(4, 2)
    h["author"].x = torch.randn(3, 2)
    h["author", "writes", "paper"].edge_index = torch.tensor([[0, 1], [1, 2]])
    h["paper", "cites", "paper"].edge_index = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(FanoutError, match="'paper', 'rev_writes', 'author'.*lacks"):
        FixedSizeNeighborLoader(h, {("paper", "rev_writes", "author"): [2]}, 2)
    with pytest.raises(FanoutError, match="has 1 hops, the other edge types 2"):
        FixedSizeNeighborLoader(h, {("author", "writes", "paper"): [2, 2],
                                    ("paper", "cites", "paper"): [3]}, 2)
    # one entry point: a HeteroData makes the hetero loader (its seeds' type named)
    loader = FixedSizeNeighborLoader(h, {("author", "writes", "paper"): [2],
                                         ("paper", "cites", "paper"): [3]}, 2,
                                     input_nodes="paper")
    assert isinstance(loader, FixedSizeHeteroNeighborLoader) and loader.seed_type == "paper"
    with pytest.raises(InputNodesError, match="node type"):
        FixedSizeNeighborLoader(h, [2], 2)


# --------------------------------------------------------------------------
# A model on the padded batch == the plain model on the unpadded sample
# --------------------------------------------------------------------------
@given(setups())
@settings(max_examples=10, deadline=None)
def test_seed_outputs_and_grads_equal_the_plain_model_in_train_mode(cfg):
    import copy

    from torch_geometric.nn import GraphSAGE

    from graph_adapter import ipu_wrap
    from graph_adapter.nn import masked_cross_entropy

    d = cfg["data"]
    L = _loader(cfg)
    torch.manual_seed(0)
    plain = GraphSAGE(3, 8, num_layers=2, out_channels=3, norm="batch_norm").train()
    mine = copy.deepcopy(plain)
    wrapped = ipu_wrap(mine, loss_fn=lambda out, b: masked_cross_entropy(out, b["y"],
                                                                         b["seed_mask"]))
    flat = L.batch(0, 0)
    seeds = L.chunk_seeds(0, 0)
    b = seeds.numel()
    s, _, _ = trim_sample(L.sample(seeds, 0, 0), int(L.budget.nodes) - 2, int(L.budget.edges))
    if s.num_nodes < 2:
        return  # BatchNorm in train mode needs two rows (both sides raise)
    out_plain = plain(d.x[s.n_id], s.edge_index)
    loss_plain = torch.nn.functional.cross_entropy(out_plain[:b], d.y[s.n_id][:b])
    loss_plain.backward()
    res = wrapped(flat)
    res["loss"].backward()
    torch.testing.assert_close(res["output"][:b], out_plain[:b], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(res["loss"], loss_plain, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(plain.named_parameters(), mine.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)
    for (name, bp), bq in zip(plain.named_buffers(), mine.buffers()):
        torch.testing.assert_close(bq, bp, rtol=1e-5, atol=1e-6, msg=name)  # running stats


# --------------------------------------------------------------------------
# The per-hop distribution against PyG's own sampler (torch-sparse)
# --------------------------------------------------------------------------
@pytest.mark.needs_scatter
def test_per_hop_sizes_match_pyg_neighbor_loader():
    """Sampled sizes over many batches have the distribution of PyG's NeighborLoader
    (two-sample KS tests): nodes and edges of one hop ([6]) and of two ([6, 3]).
    torch-sparse's path reports no per-hop counts, so hop 2 is read from the totals."""
    try:
        import torch_sparse  # noqa: F401  (import, not find_spec: it fails without scipy)
    except ImportError:
        pytest.skip("torch_sparse not installed: PyG's NeighborLoader cannot sample here "
                    "(pip install --no-deps ../shared/wheels/torch_sparse-*.whl "
                    "../shared/wheels/torch_scatter-*.whl)")
    from torch_geometric.loader import NeighborLoader

    d = _graph(3000, 24000, 4, edge_attr=False)  # Poisson in-degrees around 8: fanouts bite
    bs = 16
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # PyG's small ops: threads only add contention (docs/large_graphs.md)
    try:
        _compare_with_pyg(d, bs, NeighborLoader)
    finally:
        torch.set_num_threads(threads)


def _ks_2samp_pvalue(a: list, b: list) -> float:
    """Two-sample Kolmogorov-Smirnov test, asymptotic p-value (scipy's
    ``ks_2samp(..., method="asymp")``), written out so this venv needs no scipy.
    D is the largest gap between the two empirical CDFs over the pooled values (ties
    are steps of both CDFs); p = Q_KS(sqrt(n_e) * D) with n_e = n*m/(n+m)."""
    import bisect
    import math
    a, b = sorted(a), sorted(b)
    d = max(abs(bisect.bisect_right(a, v) / len(a) - bisect.bisect_right(b, v) / len(b))
            for v in a + b)
    en = math.sqrt(len(a) * len(b) / (len(a) + len(b)))
    lam = (en + 0.12 + 0.11 / en) * d  # Stephens' small-sample correction
    if lam < 1e-3:
        return 1.0
    q = 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))
    return min(1.0, max(0.0, q))


def test_ks_2samp_pvalue_separates_shifted_samples():
    """The helper above can fail: a shifted sample gets a tiny p, the same one p=1."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(200, generator=g).tolist()
    b = (torch.randn(200, generator=g) + 1.0).tolist()
    assert _ks_2samp_pvalue(a, b) < 1e-6
    assert _ks_2samp_pvalue(a, a) == 1.0
    c = torch.randn(200, generator=g).tolist()
    assert _ks_2samp_pvalue(a, c) > 1e-3


def _compare_with_pyg(d, bs, NeighborLoader):
    for fan in ([6], [6, 3]):
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "NeighborSampler without pyg-lib is deprecated"
            theirs = [(b.num_nodes, b.num_edges)
                      for b in NeighborLoader(d, num_neighbors=fan, batch_size=bs, shuffle=True)
                      if b.batch_size == bs]
        L = FixedSizeNeighborLoader(d, fan, bs, shuffle=True,
                                    budget=Budget(nodes=400, edges=401, graphs=2))
        ours = []
        for c in range(len(L) - 1):
            smp = L.sample(L.chunk_seeds(0, c), 0, c)
            ours.append((smp.num_nodes, smp.num_edges))
        assert len(ours) == len(theirs) == 3000 // bs
        for i, what in enumerate(("nodes", "edges")):
            a, b = [o[i] for o in ours], [t[i] for t in theirs]
            p = _ks_2samp_pvalue(a, b)
            assert p > 1e-3, (fan, what, p, sum(a) / len(a), sum(b) / len(b))


# --------------------------------------------------------------------------
# The IPU path: micro_batches=F host batches, check() clean, the emulator trains
# --------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["GraphSAGE", "GAT", "GCN"])
def test_sampled_batches_check_clean_and_emulator_training_equals_plain_loop(arch):
    """A host batch [F, ...] (F = 2 device iterations x 2 accumulation): check() finds
    nothing for GraphSAGE / GAT / GCN in training, and ``compile(..., "ipu-emulator")``
    takes the same optimizer steps as a plain loop over the micro-batches (poptorch's
    Mean reduction of accumulated gradients)."""
    import copy

    import torch_geometric.nn as pyg_nn

    from graph_adapter import ipu_wrap
    from graph_adapter.backends import compile as ga_compile
    from graph_adapter.checker import check
    from graph_adapter.ipu import IPUOptions
    from graph_adapter.nn import masked_cross_entropy

    d = _graph(150, 900, 7, feat=4, edge_attr=False)
    opts = IPUOptions(2, 1, 2)
    F_ = opts.micro_batches
    L = FixedSizeNeighborLoader(d, [4, 3], 16, shuffle=True, micro_batches=F_)
    torch.manual_seed(0)
    model = getattr(pyg_nn, arch)(4, 8, num_layers=2, out_channels=3)
    w_emu = ipu_wrap(model, loss_fn=lambda out, b: masked_cross_entropy(out, b["y"],
                                                                        b["seed_mask"]))
    w_ref = copy.deepcopy(w_emu)
    batches = list(L)
    assert batches[0]["x"].shape[0] == F_ and len(batches) == len(L) == 3
    report = check(w_emu, batches[0], training=True, options=opts)
    assert report.ok and report.findings == [], report
    emu = ga_compile(w_emu, backend="ipu-emulator", options=opts,
                     optimizer=torch.optim.SGD(w_emu.parameters(), lr=0.1))
    ref_opt = torch.optim.SGD(w_ref.parameters(), lr=0.1)
    first = last = None
    for host in batches:
        out = emu(host)
        assert out["loss"].shape == (F_,)
        first = float(out["loss"].mean()) if first is None else first
        last = float(out["loss"].mean())
        per_step = opts.replicas_times_accumulation
        for it in range(opts.device_iterations):
            ref_opt.zero_grad()
            losses = [w_ref({k: v[i:i + 1] for k, v in host.items()})["loss"]
                      for i in range(it * per_step, (it + 1) * per_step)]
            torch.stack(losses).mean().backward()
            ref_opt.step()
    for (name, p), q in zip(w_emu.named_parameters(), w_ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
    # 10 chunks of seeds padded to 12: the last step holds only fill batches (no seed, no
    # real graph), on which the emulator takes no optimizer step (tests/ipu/test_emulator.py)
    real = torch.stack([h["graph_mask"][:, 0] for h in batches]).view(-1, 2)  # [steps, per step]
    assert emu.steps == int(real.any(1).sum()) == 5
    assert last < first  # it trains: 5 steps of SGD lower the loss
