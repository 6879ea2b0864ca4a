"""Large-graph node classification: FixedSizeNeighborLoader vs PyG's NeighborLoader.

One run, side by side, on a stochastic block model generated here (no download):
``--nodes`` nodes in ``--classes`` blocks, average degree about ``2 * --out-degree``
(each node draws Poisson(out-degree) edges, 80% inside its block, then the graph is
made undirected), features = a class mean + unit noise (``--signal`` sets how
far apart the means are, so accuracy is meaningful and not 100%).

GraphSAGE 2 x 128 (PyG's ``GraphSAGE``), ``num_neighbors=[10, 5]``, batch 512,
Adam 1e-2, on 50% of the nodes as seeds; test accuracy on 25%. Reported:

1. fill: real node / edge slots over the budget across one epoch, for our
   fitted budget (q99 of 32 sampled batches), poptorch_geometric's
   ``FixedSizeOptions.from_loader`` rule computed on the same samples (max of
   up to 1000 sampled batches + 1 each), and the worst case
   ``B * (1 + 10 + 10 * 5)`` nodes / ``B * (10 + 50)`` edges;
2. sampler seeds/s: ours (padded dicts) vs PyG's ``NeighborLoader`` (needs
   torch-sparse or pyg-lib; skipped, and said so, without);
3. training / inference seeds/s and test accuracy after ``--epochs`` epochs, the
   methods interleaved (each round: one training epoch and one inference pass of
   every method, order rotated), wall-clock rates and CPU seconds: eager PyG
   (its loader with 0 and ``--workers`` worker processes, or our sampler's
   unpadded subgraphs where PyG's sampler is missing: printed), ``ipu_wrap``
   eager, ``ipu_wrap`` + inductor with our loader in the caller's thread, with
   ``prefetch=2`` (a sampling thread) and with ``--workers`` processes.

Run: ``TORCHINDUCTOR_CACHE_DIR=.cache/inductor python benchmarks/bench_large_graph.py``
(``--nodes 20000 --epochs 1`` for a quick look). ``--link`` / ``--temporal-link`` add the
link rows (2b, 2c), ``--hetero-link`` runs the hetero link row alone (6b).
"""
from __future__ import annotations

import argparse
import copy
import gc
import itertools
import multiprocessing as mp
import os
import platform
import resource
import statistics
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import GraphSAGE

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout

import graph_adapter  # noqa: E402
from graph_adapter import FixedSizeNeighborLoader, ipu_wrap  # noqa: E402
from graph_adapter.app.demo.node import sbm_graph  # the generator `demo --task node` uses
from graph_adapter.nn import masked_cross_entropy


def pyg_loader_available() -> bool:
    """PyG's NeighborSampler needs torch-sparse or pyg-lib."""
    import importlib.util
    return any(importlib.util.find_spec(m) is not None for m in ("torch_sparse", "pyg_lib"))


def _cpu_s() -> float:
    """CPU seconds of this process (every thread: a prefetching one too) and of its
    reaped children (DataLoader workers, joined when an epoch ends)."""
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def _timed_epoch(batches, count, step=None):
    """One pass over ``batches``, ``step(b)`` on each (``None``: only iterate), ``count(b)``
    summed: ``(count, wall s, CPU s)``. The loaders' trim warnings are silenced: their
    stats count every cut and :func:`_print_fill` prints them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t, c, n = time.perf_counter(), _cpu_s(), 0
        for b in batches:
            if step is not None:
                step(b)
            n += count(b)
        return n, time.perf_counter() - t, _cpu_s() - c


def _print_fill(st, what: str = "subgraphs") -> None:
    """A loader's fill over the epoch it just ran, and its cuts (``loader.stats``)."""
    print(f"   fill over the epoch: node slots real {st.node_efficiency:.1%}, edge slots real "
          f"{st.edge_efficiency:.1%}; {st.trimmed_batches} of {st.batches} {what} trimmed "
          f"({st.trimmed_nodes} nodes, {st.trimmed_edges} edges cut, counted)")


def _seeds_in(flat) -> int:
    return int(flat["seed_mask"].sum())


def pyg_batches(data, seeds, fan, bs, shuffle, loader_ok, ours_for_fallback, workers=0):
    """PyG's NeighborLoader batches (``Data``, seeds first, ``batch_size`` attr; ``workers``
    DataLoader processes), or our sampler's unpadded subgraphs where PyG's sampler is
    missing (in this process)."""
    if loader_ok:
        from torch_geometric.loader import NeighborLoader
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield from NeighborLoader(data, num_neighbors=fan, batch_size=bs, input_nodes=seeds,
                                      shuffle=shuffle, num_workers=workers)
        return
    L = ours_for_fallback
    for c in range(len(L)):
        sd = L.chunk_seeds(L._epoch, c)
        if sd.numel() == 0:
            continue
        s = L.sample(sd, L._epoch, c)
        b = Data(x=data.x[s.n_id], edge_index=s.edge_index, y=data.y[s.n_id])
        b.batch_size = sd.numel()
        yield b
    L._epoch += 1


def link_section(data, fan, bs, num_links, loader_ok) -> None:
    """2b. Link level: fill at one shape over an epoch and the sampler's rate (supervision
    edges/s, binary negatives 1:1) against PyG's LinkNeighborLoader, side by side."""
    from graph_adapter.sampling import FixedSizeLinkNeighborLoader

    g = torch.Generator().manual_seed(2)
    cols = torch.randperm(data.num_edges, generator=g)[:num_links]
    eli = data.edge_index[:, cols]
    t = time.perf_counter()
    LL = FixedSizeLinkNeighborLoader(data, fan, eli, batch_size=bs, shuffle=True)
    built = time.perf_counter() - t
    print(f"\n2b. link level: {eli.size(1)} supervision edges, batch_size={bs}, binary "
          f"negatives 1:1, num_neighbors={fan}")
    print(f"   FixedSizeLinkNeighborLoader built in {built:.2f} s: budget {LL.budget}, "
          f"{LL.slots} supervision slots, {len(LL)} batches an epoch")
    n_ours, dt_ours, _ = _timed_epoch(LL, lambda f: int((f["input_id"] >= 0).sum()))
    _print_fill(LL.stats)
    print(f"   ours (padded dicts): {n_ours / dt_ours:9.0f} supervision edges/s ({dt_ours:.2f} s)")
    if not loader_ok:
        print("   PyG LinkNeighborLoader: unavailable (no torch-sparse / pyg-lib): not measured")
        return
    from torch_geometric.loader import LinkNeighborLoader

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pyg = LinkNeighborLoader(data, num_neighbors=fan, edge_label_index=eli, batch_size=bs,
                                 shuffle=True, neg_sampling="binary")
    n_pyg, dt_pyg, _ = _timed_epoch(pyg, lambda b: int(b.input_id.numel()))
    print(f"   PyG LinkNeighborLoader (torch-sparse): {n_pyg / dt_pyg:9.0f} supervision edges/s "
          f"({dt_pyg:.2f} s); ours / PyG = {dt_pyg / dt_ours:.2f}x")


def _peak_mib() -> float:
    """The process's peak resident set since the last :func:`_reset_peak` (Linux VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak() -> None:
    """Reset VmHWM to the current RSS (Linux: ``clear_refs`` 5)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _million_run(kind, nodes, out_degree, seed_share, fan, bs, threads, q) -> None:
    """In a fresh process: build the graph, then one loader's construction time, resident
    memory growth (after construction, peak during it, after one epoch, peak over it) and
    one epoch's seeds/s. Memory is read without handing freed heap pages back first: what
    a user's process holds."""
    from benchmarks.harness.memory import rss_mib, trim_heap

    torch.set_num_threads(threads)
    data = sbm_graph(nodes, 10, out_degree, 0.8, 0.15, 32, 0)
    perm = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(1))
    train = perm[: int(data.num_nodes * seed_share)].clone()
    del perm
    graph_mib = sum(v.numel() * v.element_size() for v in data.values()) / 2**20
    gc.collect()
    trim_heap()  # the graph generator's freed pages are not the loader's
    before = rss_mib()
    _reset_peak()
    out = {"graph_mib": graph_mib, "nodes": data.num_nodes, "edges": data.num_edges,
           "seeds": train.numel()}
    t = time.perf_counter()
    if kind == "ours":
        L = FixedSizeNeighborLoader(data, fan, bs, input_nodes=train, shuffle=True)
        out["budget"] = str(L.budget)
        out["csc_mib"] = L.csc.nbytes() / 2**20
    else:
        from torch_geometric.loader import NeighborLoader
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            L = NeighborLoader(data, num_neighbors=fan, batch_size=bs, input_nodes=train,
                               shuffle=True)
    out["build_s"] = time.perf_counter() - t
    out["rss_built_mib"] = rss_mib() - before
    out["peak_built_mib"] = _peak_mib() - before
    out["epoch_seeds"], out["epoch_s"], _ = _timed_epoch(
        L, _seeds_in if kind == "ours" else (lambda b: b.batch_size))
    out["rss_epoch_mib"] = rss_mib() - before
    out["peak_epoch_mib"] = _peak_mib() - before
    q.put(out)


def million_section(args, fan, bs) -> None:
    """4. The 1M-node / 20M-edge targets: construction <= 10 s, resident memory <= 1.3x the
    graph's own tensors (the loader's growth <= 0.3x), an epoch of sampling >= PyG's
    speed. Each loader in a fresh process, one after the other, in this one run."""
    kinds = ["ours"] + (["pyg"] if pyg_loader_available() else [])
    ctx = mp.get_context("spawn")
    res = {}
    for kind in kinds:
        q = ctx.Queue()
        p = ctx.Process(target=_million_run, args=(kind, args.million_nodes, args.out_degree,
                                                  args.million_seeds, fan, bs, args.threads, q))
        p.start()
        res[kind] = q.get()
        p.join()
    o = res["ours"]
    g = o["graph_mib"]
    print(f"\n4. large graph: SBM {o['nodes']} nodes, {o['edges']} edges, graph tensors (x, "
          f"edge_index, y) {g:.0f} MiB; {o['seeds']} seeds, batch_size={bs}, "
          f"num_neighbors={fan}, fresh process per loader")
    print(f"   ours: budget {o['budget']}, CSC beside the graph {o['csc_mib']:.0f} MiB")
    print("   | loader | build s | RSS growth built | peak while building | RSS growth after "
          "epoch | peak over epoch | epoch seeds/s |")
    print("   |---|---:|---:|---:|---:|---:|---:|")
    for kind in kinds:
        r = res[kind]
        name = "FixedSizeNeighborLoader" if kind == "ours" else "PyG NeighborLoader (torch-sparse)"
        print(f"   | {name} | {r['build_s']:.2f} | {r['rss_built_mib']:.0f} MiB "
              f"({r['rss_built_mib'] / g:.2f}x) | {r['peak_built_mib']:.0f} MiB "
              f"({r['peak_built_mib'] / g:.2f}x) | {r['rss_epoch_mib']:.0f} MiB "
              f"({r['rss_epoch_mib'] / g:.2f}x) | {r['peak_epoch_mib']:.0f} MiB "
              f"({r['peak_epoch_mib'] / g:.2f}x) | {r['epoch_seeds'] / r['epoch_s']:.0f} |")
    print(f"   goals: build <= 10 s (ours {o['build_s']:.2f} s); graph + loader <= 1.3x the "
          f"graph (ours after an epoch {1 + o['rss_epoch_mib'] / g:.2f}x, peak "
          f"{1 + o['peak_epoch_mib'] / g:.2f}x)")
    if "pyg" in res:
        r = res["pyg"]
        print(f"   epoch seeds/s ours / PyG = "
              f"{(o['epoch_seeds'] / o['epoch_s']) / (r['epoch_seeds'] / r['epoch_s']):.2f}x "
              f"(goal >= 1x)")
    else:
        print("   PyG NeighborLoader: unavailable (no torch-sparse / pyg-lib): not measured")


def overlap_section(args, data, L, train, fan, bs) -> None:
    """3b. Does sampling overlap the compiled step? One compiled model (training:
    ``inductor``, inference: ``inductor_eval``) fed by our loader in the caller's
    thread, with ``prefetch=2`` and with ``--workers`` processes, ``--overlap-batches``
    batches each, the loaders alternated over ``--epochs`` rounds (order reversed every
    other round): wall and CPU ms a batch, median of the rounds. The batches are the
    same for all three (the loaders' property), so only the overlap differs."""
    torch.manual_seed(0)
    model = GraphSAGE(args.dim, 128, num_layers=2, out_channels=args.classes)
    w = ipu_wrap(model, loss_fn=lambda out, b: masked_cross_entropy(out, b["y"], b["seed_mask"]))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    step = graph_adapter.compile(w, "inductor", background=False)  # the steady state is timed
    ev = graph_adapter.compile(w, "inductor_eval")

    def train_step(f):
        opt.zero_grad()
        step(f)["loss"].backward()
        opt.step()

    def infer_step(f):
        with torch.no_grad():
            ev(f)

    kinds = [("caller's thread", {}), ("prefetch=2", {"prefetch": 2})]
    if args.workers:
        kinds.append((f"num_workers={args.workers}", {"num_workers": args.workers}))
    loaders = [(name, FixedSizeNeighborLoader(data, fan, bs, input_nodes=train, shuffle=True,
                                              budget=L.budget, **kw)) for name, kw in kinds]
    nb = args.overlap_batches
    print(f"\n3b. overlap: one compiled GraphSAGE, {nb} batches per loader and round, "
          f"{args.epochs} rounds, torch at {args.threads} threads")
    for mode, fn in (("training", train_step), ("inference", infer_step)):
        w.train(mode == "training")
        fn(L.batch(0, 0))  # the compile, apart
        res = {name: [] for name, _ in loaders}
        for r in range(args.epochs):
            for name, LL in (loaders if r % 2 == 0 else loaders[::-1]):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    t, c, it = time.perf_counter(), _cpu_s(), iter(LL)
                    for f in itertools.islice(it, nb):
                        fn(f)
                    it.close()  # stops the thread / joins the workers before the clock stops
                    res[name].append(((time.perf_counter() - t) / nb * 1e3,
                                      (_cpu_s() - c) / nb * 1e3))
        ref = statistics.median(v[0] for v in res[loaders[0][0]])
        print(f"   {mode}: " + "; ".join(
            f"{name} {statistics.median(v[0] for v in res[name]):.1f} ms wall "
            f"({ref / statistics.median(v[0] for v in res[name]):.2f}x), "
            f"{statistics.median(v[1] for v in res[name]):.1f} ms CPU"
            for name, _ in loaders) + " a batch")


def _host_breakdown(data, fan, bs, budget, flat, batches: int = 20) -> None:
    """Where the host's time per batch goes before a compiled call: sampling, padding,
    the compiled model's signature and its index-bounds check (CPU ms, mean of
    ``batches`` training batches)."""
    from graph_adapter.backends import signature_of
    from graph_adapter.format import bounds_plan, check_before_call

    T = FixedSizeNeighborLoader(data, fan, bs, shuffle=True, budget=budget)
    plan = bounds_plan(flat)
    cost = dict.fromkeys(("sampling", "padding", "signature_of", "bounds check"), 0.0)
    with T._sampling_threads(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for c in range(batches):
            t = time.process_time()
            seeds = T.chunk_seeds(0, c)
            s = T.sample(seeds, 0, c)
            t1 = time.process_time()
            f = T._fit_and_pad(s, int(seeds.numel()), "")[0]
            t2 = time.process_time()
            signature_of(f)
            t3 = time.process_time()
            check_before_call(f, False, plan)
            t4 = time.process_time()
            for k, dt in zip(cost, (t1 - t, t2 - t1, t3 - t2, t4 - t3)):
                cost[k] += dt
    print(f"   host side per batch (CPU ms, mean of {batches}): " +
          ", ".join(f"{k} {v / batches * 1e3:.2f}" for k, v in cost.items()))


def profile_section(data, fan, bs, threads) -> None:
    """5. What one inference step of GraphSAGE 2x128 spends its time on, eager ``ipu_wrap``
    and ``ipu_wrap`` + inductor (``inductor_eval``), on one padded test batch: the
    operators' self time (torch.profiler, 5 steps each, after 3 warm-up steps), the
    host's own time per batch (:func:`_host_breakdown`), then the aggregation op alone: ATen's ``scatter_add_`` with the broadcast index PyG uses vs
    ``index_add_`` on the same rows, side by side."""
    from torch.profiler import ProfilerActivity, profile

    L = FixedSizeNeighborLoader(data, fan, bs, seed=1)
    flat = L.batch(0, 1)
    torch.manual_seed(0)
    model = GraphSAGE(data.x.size(1), 128, num_layers=2, out_channels=int(data.y.max()) + 1)
    w = ipu_wrap(model.eval())
    w.eval()
    print(f"\n5. one inference step, budget {L.budget}, {threads} threads")
    with torch.no_grad():
        t = time.perf_counter()
        ev = graph_adapter.compile(w, "inductor_eval")
        ev(flat)
        print(f"   inductor_eval first call (compile) {time.perf_counter() - t:.1f} s")
        for name, f in (("ipu_wrap eager", w), ("ipu_wrap + inductor", ev)):
            for _ in range(3):
                f(flat)
            ts = []
            for _ in range(5):
                t = time.perf_counter()
                f(flat)
                ts.append(time.perf_counter() - t)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(5):
                    f(flat)
            ev_tot = sum(e.self_cpu_time_total for e in prof.key_averages())
            top = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:5]
            print(f"   {name}: median step {sorted(ts)[2] * 1e3:.0f} ms; self time: " +
                  ", ".join(f"{e.key[:40]} {e.self_cpu_time_total / ev_tot:.0%}" for e in top))
        _host_breakdown(data, fan, bs, L.budget, flat)
        E, N = int(L.budget.edges), int(L.budget.nodes)
        msg = torch.randn(E, 128)
        dst = flat["edge_index"][1]
        out = torch.zeros(N, 128)
        for name, op in (("scatter_add_ (broadcast index)",
                          lambda: out.zero_().scatter_add_(0, dst.view(-1, 1).expand(-1, 128), msg)),
                         ("index_add_", lambda: out.zero_().index_add_(0, dst, msg))):
            op()
            ts = []
            for _ in range(20):
                t = time.perf_counter()
                op()
                ts.append(time.perf_counter() - t)
            print(f"   aggregation alone, {E} x 128 messages into {N} rows: {name} "
                  f"{sorted(ts)[10] * 1e3:.1f} ms (median of 20)")


def hetero_graph(papers: int, authors: int, writes: int, cites: int, dim: int = 32):
    """A generated bipartite + citation ``HeteroData`` (no download): ``paper`` and
    ``author`` nodes with random features, ``writes`` (and its reverse) and ``cites``
    edges drawn uniformly."""
    from torch_geometric.data import HeteroData

    g = torch.Generator().manual_seed(0)
    h = HeteroData()
    h["paper"].x = torch.randn(papers, dim, generator=g)
    h["paper"].y = torch.randint(0, 10, (papers,), generator=g)
    h["author"].x = torch.randn(authors, dim, generator=g)
    w = torch.stack([torch.randint(0, authors, (writes,), generator=g),
                     torch.randint(0, papers, (writes,), generator=g)])
    h["author", "writes", "paper"].edge_index = w
    h["paper", "rev_writes", "author"].edge_index = w.flip(0)
    h["paper", "cites", "paper"].edge_index = torch.randint(0, papers, (2, cites), generator=g)
    return h


def hetero_section(fan, bs) -> None:
    """6. Hetero: FixedSizeHeteroNeighborLoader's build time, fill over one epoch and
    sampler seeds/s against PyG's NeighborLoader on the same HeteroData, side by side."""
    from graph_adapter import FixedSizeHeteroNeighborLoader

    h = hetero_graph(100_000, 50_000, 400_000, 1_000_000)
    seeds = torch.randperm(100_000, generator=torch.Generator().manual_seed(1))[:50_000]
    print(f"\n6. hetero: paper 100000 / author 50000 nodes, writes + rev_writes 400000 each, "
          f"cites 1000000; {seeds.numel()} paper seeds, batch_size={bs}, num_neighbors={fan} "
          f"for every edge type")
    t = time.perf_counter()
    L = FixedSizeHeteroNeighborLoader(h, fan, bs, input_nodes=("paper", seeds), shuffle=True)
    print(f"   FixedSizeHeteroNeighborLoader built in {time.perf_counter() - t:.2f} s: "
          f"{L.budget}")
    n, dt, _ = _timed_epoch(L, L.seeds_in)
    _print_fill(L.stats)
    print(f"   ours (padded dicts): {n / dt:9.0f} seeds/s ({dt:.2f} s)")
    if not pyg_loader_available():
        print("   PyG NeighborLoader: unavailable (no torch-sparse / pyg-lib): not measured")
        return
    from torch_geometric.loader import NeighborLoader

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pyg = NeighborLoader(h, num_neighbors=fan, batch_size=bs, input_nodes=("paper", seeds),
                             shuffle=True)
    n_pyg, dt_pyg, _ = _timed_epoch(pyg, lambda b: b["paper"].batch_size)
    print(f"   PyG NeighborLoader (torch-sparse): {n_pyg / dt_pyg:9.0f} seeds/s ({dt_pyg:.2f} s); "
          f"ours / PyG = {dt_pyg / dt:.2f}x (per seed: {n_pyg / dt_pyg:.0f} vs {n / dt:.0f})")


def pyg_temporal_available() -> bool:
    """PyG's temporal sampling runs in pyg-lib only (torch-sparse has none)."""
    import importlib.util
    return importlib.util.find_spec("pyg_lib") is not None


def temporal_link_section(data, fan, bs, num_links) -> None:
    """2c. Temporal links: our loader with an edge-level time and ``edge_label_time``
    (``temporal_strategy`` uniform and last) against the same loader without time
    (disjoint, so the trees are alike), and PyG's LinkNeighborLoader where pyg-lib runs
    it (its temporal sampling has no torch-sparse path)."""
    from graph_adapter.sampling import FixedSizeLinkNeighborLoader

    g = torch.Generator().manual_seed(3)
    cols = torch.randperm(data.num_edges, generator=g)[:num_links]
    eli = data.edge_index[:, cols]
    data = copy.copy(data)
    data.time = torch.randint(0, 1000, (data.num_edges,), generator=g)
    elt = data.time[cols]
    print(f"\n2c. temporal links: {eli.size(1)} supervision edges, batch_size={bs}, binary "
          f"negatives 1:1, num_neighbors={fan}, an edge-level time in 0..999, each link at "
          f"its own edge's time")
    rates = {}
    for name, kw in (("disjoint, no time", {"disjoint": True}),
                     ("temporal uniform", {"time_attr": "time", "edge_label_time": elt}),
                     ("temporal last", {"time_attr": "time", "edge_label_time": elt,
                                        "temporal_strategy": "last"})):
        t = time.perf_counter()
        LL = FixedSizeLinkNeighborLoader(data, fan, eli, batch_size=bs, shuffle=True, **kw)
        built = time.perf_counter() - t
        n, dt, _ = _timed_epoch(LL, lambda f: int((f["input_id"] >= 0).sum()))
        rates[name] = n / dt
        print(f"   ours, {name}: built in {built:.2f} s, budget {LL.budget}; "
              f"{n / dt:9.0f} supervision edges/s ({dt:.2f} s)")
        _print_fill(LL.stats)
    base = rates["disjoint, no time"]
    print(f"   time's cost: uniform {base / rates['temporal uniform']:.2f}x, last "
          f"{base / rates['temporal last']:.2f}x the untimed disjoint loader's time")
    if not pyg_temporal_available():
        print("   PyG LinkNeighborLoader (temporal): could not run (its temporal sampling "
              "needs pyg-lib, not installable here): not measured")
        return
    from torch_geometric.loader import LinkNeighborLoader

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pyg = LinkNeighborLoader(data, num_neighbors=fan, edge_label_index=eli, batch_size=bs,
                                 shuffle=True, neg_sampling="binary", time_attr="time",
                                 edge_label_time=elt)
    n_pyg, dt_pyg, _ = _timed_epoch(pyg, lambda b: int(b.input_id.numel()))
    print(f"   PyG LinkNeighborLoader (pyg-lib, temporal uniform): {n_pyg / dt_pyg:9.0f} "
          f"supervision edges/s; ours / PyG = {rates['temporal uniform'] / (n_pyg / dt_pyg):.2f}x")


def hetero_link_section(fan, bs, num_links) -> None:
    """6b. Hetero links: FixedSizeLinkNeighborLoader on a HeteroData (``author writes
    paper`` supervision edges, binary negatives 1:1): build time, fill, supervision
    edges/s against PyG's LinkNeighborLoader on the same graph, side by side."""
    from graph_adapter.sampling import FixedSizeLinkNeighborLoader

    h = hetero_graph(100_000, 50_000, 400_000, 1_000_000)
    et = ("author", "writes", "paper")
    cols = torch.randperm(400_000, generator=torch.Generator().manual_seed(2))[:num_links]
    eli = h[et].edge_index[:, cols]
    print(f"\n6b. hetero links: paper 100000 / author 50000 nodes, writes + rev_writes 400000 "
          f"each, cites 1000000; {num_links} {et} supervision edges, batch_size={bs}, binary "
          f"negatives 1:1, num_neighbors={fan} for every edge type")
    t = time.perf_counter()
    L = FixedSizeLinkNeighborLoader(h, fan, edge_label_index=(et, eli), batch_size=bs,
                                    shuffle=True)
    print(f"   FixedSizeHeteroLinkNeighborLoader built in {time.perf_counter() - t:.2f} s: "
          f"{L.budget}, {L.slots} supervision slots")
    n, dt, _ = _timed_epoch(L, lambda f: int((f["__".join(et) + "/input_id"] >= 0).sum()))
    _print_fill(L.stats)
    print(f"   ours (padded dicts): {n / dt:9.0f} supervision edges/s ({dt:.2f} s)")
    if not pyg_loader_available():
        print("   PyG LinkNeighborLoader: unavailable (no torch-sparse / pyg-lib): not measured")
        return
    from torch_geometric.loader import LinkNeighborLoader

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pyg = LinkNeighborLoader(h, num_neighbors=fan, edge_label_index=(et, eli),
                                 batch_size=bs, shuffle=True, neg_sampling="binary")
    n_pyg, dt_pyg, _ = _timed_epoch(pyg, lambda b: int(b[et].input_id.numel()))
    print(f"   PyG LinkNeighborLoader (torch-sparse): {n_pyg / dt_pyg:9.0f} supervision "
          f"edges/s ({dt_pyg:.2f} s); ours / PyG = {dt_pyg / dt:.2f}x")


def _pyg_method(args, base, data, L, train, test, fan, bs, loader_ok, workers):
    """Eager PyG: its ``NeighborLoader`` (``workers`` processes) + the model, Adam."""
    model = copy.deepcopy(base)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    fb = FixedSizeNeighborLoader(data, fan, bs, input_nodes=train, shuffle=True, budget=L.budget)
    tb = FixedSizeNeighborLoader(data, fan, bs, input_nodes=test, budget=L.budget, seed=1)
    correct = [0]

    def train_step(b):
        opt.zero_grad()
        out = model(b.x, b.edge_index)[: b.batch_size]
        F.cross_entropy(out, b.y[: b.batch_size]).backward()
        opt.step()

    def infer_step(b):
        pred = model(b.x, b.edge_index)[: b.batch_size].argmax(-1)
        correct[0] += int((pred == b.y[: b.batch_size]).sum())

    def train_epoch():
        model.train()
        return _timed_epoch(pyg_batches(data, train, fan, bs, True, loader_ok, fb, workers),
                            lambda b: b.batch_size, train_step)

    def infer():
        model.eval()
        correct[0] = 0
        with torch.no_grad():
            n, wall, cpu = _timed_epoch(pyg_batches(data, test, fan, bs, False, loader_ok, tb,
                                                    workers), lambda b: b.batch_size, infer_step)
        return n, correct[0] / n, wall, cpu

    return train_epoch, infer, (0.0, 0.0)


def _ours_method(args, base, data, L, train, test, fan, bs, backend, **loader_kw):
    """``FixedSizeNeighborLoader`` (``loader_kw``: ``prefetch`` / ``num_workers``) +
    ``ipu_wrap`` (``backend``: ``None`` eager, or compiled with inductor). The first
    call of each mode (the compile) runs before the timed epochs and is reported apart:
    forward + backward without an optimizer step, then an eval call, so the parameters
    and Adam's state are those of a model that never ran."""
    model = copy.deepcopy(base)
    w = ipu_wrap(model, loss_fn=lambda out, b: masked_cross_entropy(out, b["y"], b["seed_mask"]))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    tr = FixedSizeNeighborLoader(data, fan, bs, input_nodes=train, shuffle=True,
                                 budget=L.budget, **loader_kw)
    te = FixedSizeNeighborLoader(data, fan, bs, input_nodes=test, budget=L.budget, seed=1,
                                 **loader_kw)
    step = w if backend is None else graph_adapter.compile(w, backend, background=False)
    ev = w if backend is None else graph_adapter.compile(w, "inductor_eval")
    flat = te.batch(0, 0)
    w.train()
    t = time.perf_counter()
    step(flat)["loss"].backward()
    first_train = time.perf_counter() - t
    opt.zero_grad(set_to_none=True)
    w.eval()
    t = time.perf_counter()
    with torch.no_grad():
        ev(flat)
    first_eval = time.perf_counter() - t
    correct = [0]

    def train_step(f):
        opt.zero_grad()
        step(f)["loss"].backward()
        opt.step()

    def infer_step(f):
        b = _seeds_in(f)
        out = ev(f)["output"]
        correct[0] += int((out[:b].argmax(-1) == f["y"][:b]).sum())

    def train_epoch():
        w.train()
        return _timed_epoch(tr, _seeds_in, train_step)

    def infer():
        w.eval()
        correct[0] = 0
        with torch.no_grad():
            n, wall, cpu = _timed_epoch(te, _seeds_in, infer_step)
        return n, correct[0] / n, wall, cpu

    return train_epoch, infer, (first_train, first_eval)


def training_section(args, data, L, train, test, fan, bs, loader_ok) -> None:
    """3. Training and inference seeds/s, every method on its own copy of one model,
    interleaved: each of ``--epochs`` rounds runs one training epoch and one inference
    pass of every method, the order rotated each round (the machine's load changes
    alike for all); wall-clock rates (median over the rounds) and CPU seconds (this
    process's threads + the reaped DataLoader workers). PyG's loader runs with 0 and
    with ``--workers`` worker processes; ours in the caller's thread, with a
    prefetching thread (``prefetch=2``) and with ``--workers`` processes."""
    W = args.workers
    print(f"\n3. GraphSAGE 2x128, {args.epochs} epochs (rounds, interleaved), Adam 1e-2; test "
          f"accuracy on {test.numel()} nodes after the last")
    print("   eager PyG batches: " + ("PyG NeighborLoader (torch-sparse)" if loader_ok else
                                      "our sampler's unpadded subgraphs (PyG's sampler missing: "
                                      "no worker rows for it)"))
    torch.manual_seed(0)
    base = GraphSAGE(args.dim, 128, num_layers=2, out_channels=args.classes)
    common = (args, base, data, L, train, test, fan, bs)
    specs = [("eager PyG", lambda: _pyg_method(*common, loader_ok, 0))]
    if W and loader_ok:
        specs.append((f"eager PyG, num_workers={W}", lambda: _pyg_method(*common, loader_ok, W)))
    specs.append(("ipu_wrap eager (padded)", lambda: _ours_method(*common, None)))
    if not args.no_compile:
        specs.append(("ipu_wrap + inductor", lambda: _ours_method(*common, "inductor")))
        specs.append(("ipu_wrap + inductor, prefetch=2",
                      lambda: _ours_method(*common, "inductor", prefetch=2)))
        if W:
            specs.append((f"ipu_wrap + inductor, num_workers={W}",
                          lambda: _ours_method(*common, "inductor", num_workers=W)))
    methods = []
    for name, make in specs:
        t = time.perf_counter()
        methods.append((name,) + make())
        print(f"   set up {name} in {time.perf_counter() - t:.1f} s")
    runs = {name: {"train": [], "infer": [], "acc": 0.0} for name, *_ in methods}
    for r in range(args.epochs):
        k = r % len(methods)
        for name, train_epoch, infer, _ in methods[k:] + methods[:k]:
            n, wall, cpu = train_epoch()
            runs[name]["train"].append((n / wall, cpu))
            n, acc, wall, cpu = infer()
            runs[name]["infer"].append((n / wall, cpu))
            runs[name]["acc"] = acc
        print(f"   round {r + 1} of {args.epochs} done, load average {os.getloadavg()[0]:.1f}")

    def med(name, mode):
        return statistics.median(v[0] for v in runs[name][mode])

    ref = methods[0][0]
    ref_w = methods[1][0] if W and loader_ok else None

    def cpu(name, mode):
        return statistics.median(v[1] for v in runs[name][mode])

    print(f"   wall: seeds/s, median of {args.epochs} rounds [min-max], 'vs PyG' against eager "
          f"PyG with 0 workers" + (f", 'vs w{W}' with {W}" if ref_w else "") + "; CPU: seconds "
          "an epoch (median; threads + reaped workers), 'CPU vs PyG' = PyG's CPU s / this one's")
    head = (f"{'seeds/s':>20s} {'vs PyG':>7s} " + (f"{'vs w' + str(W):>6s} " if ref_w else "") +
            f"{'CPU s':>6s} {'CPU vs PyG':>10s}")
    print(f"   {'':38s} {'training':^{len(head)}s} {'inference':^{len(head)}s}")
    print(f"   {'method':38s} {head} {head} {'test acc':>8s} {'1st step s':>11s}")
    for name, _, _, (ft, fe) in methods:
        cells = []
        for mode in ("train", "infer"):
            rates = [v[0] for v in runs[name][mode]]
            rate = f"{med(name, mode):.0f} [{min(rates):.0f}-{max(rates):.0f}]"
            cells.append(f"{rate:>20s} {med(name, mode) / med(ref, mode):6.2f}x " +
                         (f"{med(name, mode) / med(ref_w, mode):5.2f}x " if ref_w else "") +
                         f"{cpu(name, mode):6.2f} {cpu(ref, mode) / cpu(name, mode):9.2f}x")
        print(f"   {name:38s} {cells[0]} {cells[1]} {runs[name]['acc']:8.3f} "
              f"{ft:5.1f}/{fe:5.1f}")
    print("   (1st step s: the first training / inference call, the compile, before the rounds)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--out-degree", type=float, default=10.0)
    ap.add_argument("--signal", type=float, default=0.15)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=2,
                    help="section 3: rounds; each trains every method one epoch, then infers")
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--workers", type=int, default=1,
                    help="section 3: worker processes of the PyG and our worker rows (0: none)")
    ap.add_argument("--link", action="store_true",
                    help="also section 2b: FixedSizeLinkNeighborLoader (fill, sampler rate vs "
                         "PyG's LinkNeighborLoader)")
    ap.add_argument("--link-edges", type=int, default=50_000,
                    help="supervision edges of section 2b (a random subset of the edges)")
    ap.add_argument("--temporal-link", action="store_true",
                    help="also section 2c: temporal links (edge-level time) vs the untimed "
                         "disjoint loader, and PyG's where pyg-lib runs it")
    ap.add_argument("--hetero-link", action="store_true",
                    help="only section 6b: hetero links vs PyG's LinkNeighborLoader")
    ap.add_argument("--no-train", action="store_true", help="stop before section 3")
    ap.add_argument("--overlap", action="store_true",
                    help="section 3b instead of 3: one compiled model, our loader in the "
                         "caller's thread vs prefetch=2 vs --workers processes")
    ap.add_argument("--overlap-batches", type=int, default=40,
                    help="batches per loader and round in section 3b")
    ap.add_argument("--hetero", action="store_true",
                    help="only section 6: the hetero loader vs PyG's on a generated HeteroData")
    ap.add_argument("--profile-step", action="store_true",
                    help="only section 5: what one inference step spends its time on")
    ap.add_argument("--million", action="store_true",
                    help="only section 4: the 1M-node / 20M-edge targets (construction time, "
                         "memory, epoch speed vs PyG), each loader in a fresh process")
    ap.add_argument("--million-nodes", type=int, default=1_000_000)
    ap.add_argument("--million-seeds", type=float, default=0.5,
                    help="share of the nodes used as seeds in section 4's epoch")
    ap.add_argument("--fill-samples", type=int, default=1000,
                    help="samples for the from_loader rule (its default: 1000)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    fan, bs = [10, 5], args.batch_size
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__} ({args.threads} threads), load average at start "
          f"{os.getloadavg()[0]:.1f}")
    if args.hetero_link:
        hetero_link_section(fan, bs, args.link_edges)
        print(f"\nload average at end {os.getloadavg()[0]:.1f}")
        return
    if args.hetero:
        hetero_section(fan, bs)
        print(f"\nload average at end {os.getloadavg()[0]:.1f}")
        return
    if args.million:
        million_section(args, fan, bs)
        print(f"\nload average at end {os.getloadavg()[0]:.1f}")
        return

    t = time.perf_counter()
    data = sbm_graph(args.nodes, args.classes, args.out_degree, 0.8, args.signal, args.dim, 0)
    print(f"SBM: {data.num_nodes} nodes, {data.num_edges} edges (avg degree "
          f"{data.num_edges / data.num_nodes:.1f}), {args.classes} classes, built in "
          f"{time.perf_counter() - t:.1f} s")
    if args.profile_step:
        profile_section(data, fan, bs, args.threads)
        print(f"\nload average at end {os.getloadavg()[0]:.1f}")
        return
    perm = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(1))
    train = perm[: data.num_nodes // 2]
    test = perm[data.num_nodes * 3 // 4:]

    t = time.perf_counter()
    L = FixedSizeNeighborLoader(data, fan, bs, input_nodes=train, shuffle=True)
    print(f"FixedSizeNeighborLoader: built (CSC + budget fit) in {time.perf_counter() - t:.2f} s,"
          f" budget {L.budget}, {len(L)} batches an epoch")

    # -- 1. fill at one shape -------------------------------------------------
    sizes = []
    for c in range(len(L)):
        s = L.sample(L.chunk_seeds(0, c), 0, c)
        sizes.append((s.num_nodes, s.num_edges))
    more = []
    c, e = 0, 1  # up to 1000 batches, cycling epochs, as from_loader does
    while len(sizes) + len(more) < args.fill_samples:
        s = L.sample(L.chunk_seeds(e, c), e, c)
        more.append((s.num_nodes, s.num_edges))
        c += 1
        if c == len(L):
            c, e = 0, e + 1
    allsz = sizes + more
    pop_n = max(n for n, _ in allsz) + 1
    pop_e = max(m for _, m in allsz) + 1
    worst_n, worst_e = bs * (1 + 10 + 50), bs * (10 + 50)
    cap_n, cap_e = int(L.budget.nodes) - 2, int(L.budget.edges)
    real_n = sum(min(n, cap_n) for n, _ in sizes)
    real_e = sum(min(m, cap_e) for _, m in sizes)
    nb = len(sizes)
    print(f"\n1. fill over one epoch ({nb} batches; from_loader rule over {len(allsz)} samples)")
    print(f"   {'sizing':44s} {'nodes':>7s} {'edges':>7s} {'node fill':>9s} {'edge fill':>9s}")
    for name, N, E, rn, re_ in (
            ("ours: q99 of 32 sampled batches (+2 pad)", int(L.budget.nodes), cap_e, real_n, real_e),
            ("poptorch_geometric from_loader (max + 1)", pop_n, pop_e,
             sum(n for n, _ in sizes), sum(m for _, m in sizes)),
            ("worst case B(1+10+50), B(10+50)", worst_n, worst_e,
             sum(n for n, _ in sizes), sum(m for _, m in sizes))):
        print(f"   {name:44s} {N:7d} {E:7d} {rn / (nb * N):9.1%} {re_ / (nb * E):9.1%}")
    trimmed = sum(n > cap_n or m > cap_e for n, m in sizes)
    print(f"   ours: {trimmed} of {nb} sampled subgraphs over the budget (trimmed, counted)")

    # -- 2. sampler seeds/s ------------------------------------------------------
    print("\n2. sampler only, one epoch of training seeds (main process)")
    loader_ok = pyg_loader_available()
    n_ours, dt_ours, _ = _timed_epoch(L, _seeds_in)
    print(f"   ours (padded dicts): {n_ours / dt_ours:9.0f} seeds/s ({dt_ours:.2f} s)")
    if loader_ok:
        n_pyg, dt_pyg, _ = _timed_epoch(pyg_batches(data, train, fan, bs, True, True, None),
                                        lambda b: b.batch_size)
        print(f"   PyG NeighborLoader (torch-sparse): {n_pyg / dt_pyg:9.0f} seeds/s "
              f"({dt_pyg:.2f} s); ours / PyG = {dt_pyg / dt_ours:.2f}x")
    else:
        print("   PyG NeighborLoader: unavailable (no torch-sparse / pyg-lib): not measured")

    if args.link:
        link_section(data, fan, bs, args.link_edges, loader_ok)
    if args.temporal_link:
        temporal_link_section(data, fan, bs, args.link_edges)
    if args.overlap:
        overlap_section(args, data, L, train, fan, bs)
    if args.no_train or args.overlap:
        return

    # -- 3. training and inference -----------------------------------------------
    training_section(args, data, L, train, test, fan, bs, loader_ok)
    print(f"\nload average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
