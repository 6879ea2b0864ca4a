"""Where the node demo's inference time goes: the adapter and eager PyG side by side.

``graph-adapter demo --task node`` times inference over the test seeds on
batches sampled beforehand (both sides), so its figure is the model calls
only. This script rebuilds that setting (the demo's graph, loaders, model and
weights; no training: the rates do not depend on the weights) and times, in
interleaved rounds in one process (each round runs every row once, in turn,
so a busy machine slows them alike; within a round each row runs ``--passes`` passes
back to back and its round time is their median, as the demo times them, a pass in
steady state: one pass right after another row's, or after any pause, runs slower):

* ``adapter``: the demo's inference pass: ``compiled(flat)["output"]`` on the
  test loader's padded batches, the accuracy counted on the seed rows, compiled
  as the demo compiles it (``inference_model``: the module wrapped without the
  loss, the ``INFER_OPTIONS`` of its layout for inductor on the CPU);
* ``adapter, training settings``: the same through the training model (its
  loss, its settings: what the demo ran before ``inference_model``);
* ``eager PyG``: the demo's eager pass: the plain model on the unpadded
  subgraphs of the same sampler (or PyG's ``NeighborLoader``'s, where pyg-lib
  or torch-sparse is installed), ``[:batch_size]`` rows counted;

and the parts of the adapter's pass, each alone over the same batches:

* ``host checks``: ``signature_of`` + the bounds check ``Compiled`` runs
  before each call (``check_before_call``);
* ``guards``: Dynamo's guard evaluation of the compiled entry (read through
  Dynamo's debug accessor; ``n/a`` where this torch lacks it);
* ``loader``: sampling and padding the test batches (``list(test_loader)``),
  against the eager side's subgraphs (not in either pass's time).

``--options JSON`` adds a row compiled with those inductor options (no loss).
``--unprojected`` adds the row ``adapter, unprojected``: the demo's inference compiled
without the post-grad rewrites that project before an aggregation
(:mod:`graph_adapter.tuning.rewrites.project_aggregate`) and merge thin
products of one operand (:mod:`~graph_adapter.tuning.rewrites.shared_left`),
their before/after in one process.
Where the demo's test loader carries aggregation tables (``INFER_LAYOUT``: each row's
in-edge sources, ``layout="sources"``; ``--layout`` picks another), the row
``adapter, no tables`` runs the same batches without them (PyG's scatter path, a
compile of its own with that path's settings), and under ``--layout hyb``
``--in-width D`` adds a row whose tables have in-width ``D`` (and the spill capacity
that width needs).
``--infer-batch-size B[,B2...]`` adds the same two passes with ``B`` seeds a batch on
both sides (the adapter's loader fits its own budget for them): the lever of
running inference on larger batches. Every row reports the median of the
rounds and the median of the per-round ratios to eager PyG (wall), the median
CPU times' ratio, and the best round's ratio (the closest to a quiet machine on
a busy one: a 2-thread round there ranges over 20x) and the median minor page
faults of a pass (glibc hands freed 1-2 MB buffers back to the OS in some processes
and not in others: eager PyG's pass then faults 8-10k times and takes 2x as long); the
run checks that the compiled outputs equal the plain model's on the real rows of each
batch (so a faster row computes the same thing).

    python benchmarks/bench_node_inference.py [--threads 1] [--rounds 15] [--passes 3]
        [--infer-batch-size 750,1500] [--options JSON] [--backend inductor] [--verbose]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from typing import Callable, Dict, List, Optional

import torch


def _guard_check(compiled) -> Optional[Callable[[dict], bool]]:
    """Dynamo's guard check of the compiled entry, as a callable of the batch, or None."""
    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list

        fn = compiled._engine._fn  # the engine's torch.compile'd entry (benchmark only)
        orig = fn._torchdynamo_orig_callable
        code = orig.__code__
        entries = _debug_get_cache_entry_list(code)
        gm = entries[0].guard_manager
        names = code.co_freevars
        cells = dict(zip(names, (c.cell_contents for c in orig.__closure__)))
    except Exception:  # noqa: BLE001 (a torch without the accessor: the row says n/a)
        return None

    def check(flat: dict) -> bool:
        return gm.check({"flat": flat, **cells})
    return check


def main(argv: Optional[List[str]] = None) -> Dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--passes", type=int, default=3,
                    help="passes of a row in a row within a round, their median its time "
                         "(1: one pass a row a round)")
    ap.add_argument("--backend", default="inductor")
    ap.add_argument("--infer-batch-size", default="",
                    help="also time both sides with this many seeds a batch (comma-separated)")
    ap.add_argument("--options", default="",
                    help="also time a second compile with these inductor options (JSON)")
    ap.add_argument("--verbose", action="store_true", help="print every round's times")
    ap.add_argument("--unprojected", action="store_true",
                    help="also time a compile without the project-before-aggregate and "
                         "shared-operand rewrites")
    ap.add_argument("--nodes", type=int, default=0, help="graph size (0: the demo's default)")
    ap.add_argument("--layout", default="demo", choices=["demo", "none", "hyb", "sources"],
                    help="the test loader's tables (demo: node.INFER_LAYOUT)")
    ap.add_argument("--in-width", type=int, default=0,
                    help="also time tables of this in-width (0: only the demo's)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    import graph_adapter as ga
    from graph_adapter.app.demo.node import (NodeDemoConfig, eager_batches, inference_model,
                                             make_graph, make_model, middle, minor_faults,
                                             pyg_sampler_available)
    from graph_adapter.backends.program import signature_of
    from graph_adapter.format import bounds_plan, check_before_call
    from graph_adapter.nn import masked_cross_entropy
    from graph_adapter.sampling import FixedSizeNeighborLoader

    if args.layout != "demo":
        from graph_adapter.app.demo import node as node_demo

        node_demo.INFER_LAYOUT = None if args.layout == "none" else args.layout
    cfg = NodeDemoConfig(progress=False, **({"nodes": args.nodes} if args.nodes else {}))
    load0 = os.getloadavg()[0]
    g = make_graph(cfg)
    use_pyg = pyg_sampler_available()
    plain = make_model(cfg).eval()
    mine = make_model(cfg)
    mine.load_state_dict(plain.state_dict())
    wrapped = ga.ipu_wrap(mine, loss_fn=lambda out, b: masked_cross_entropy(
        out, b["y"], b["seed_mask"]))
    # the demo's inference model (inference_model: no loss, INFER_OPTIONS on the CPU; one
    # more for each larger-batch row) and the training model itself (before)
    compiled = inference_model(wrapped, args.backend, None)
    before = ga.compile(wrapped, args.backend, background=False)
    compiled.eval()

    t = time.perf_counter()
    test_batches = list(g.test_loader)
    t_loader = time.perf_counter() - t
    seeded = [(f, g.test_loader.seeds_in(f)) for f in test_batches]  # as the demo holds them
    t = time.perf_counter()
    eager_test = list(eager_batches(g.data, g.test, cfg, False, 0, use_pyg))
    t_eager_loader = time.perf_counter() - t

    def ours_pass(batches, model=None) -> Callable[[], float]:
        model = model or compiled

        def run() -> float:
            right = 0
            t0 = time.perf_counter()
            with torch.no_grad():
                for flat, b in batches:
                    out = model(flat)["output"]
                    right += int((out[:b].argmax(-1) == flat["y"][:b]).sum())
            return time.perf_counter() - t0
        return run

    def pyg_pass(batches) -> Callable[[], float]:
        def run() -> float:
            right = 0
            t0 = time.perf_counter()
            with torch.no_grad():
                for x, ei, y, b in batches:
                    right += int((plain(x, ei)[:b].argmax(-1) == y[:b]).sum())
            return time.perf_counter() - t0
        return run

    plans = {signature_of(f): bounds_plan(f) for f in test_batches[:1]}

    def host_checks() -> float:
        t0 = time.perf_counter()
        for flat in test_batches:
            sig = signature_of(flat)
            check_before_call(flat, False, plans[sig])
        return time.perf_counter() - t0

    t = time.perf_counter()
    ours_pass(seeded)()  # the inference compile
    compile_s = time.perf_counter() - t
    guard = _guard_check(compiled)

    def guards() -> float:
        t0 = time.perf_counter()
        with torch.no_grad():
            for flat in test_batches:
                guard(flat)
        return time.perf_counter() - t0

    # the same computation: compiled outputs equal the plain model's on the real rows
    worst = 0.0
    with torch.no_grad():
        for flat in test_batches:
            nm, em = flat["node_mask"], flat["edge_mask"]
            ref = plain(flat["x"][nm], flat["edge_index"][:, em])
            worst = max(worst, float((compiled(flat)["output"][nm] - ref).abs().max()))

    ours_pass(seeded, before)()  # its inference compile
    rows: Dict[str, Callable[[], float]] = {
        "adapter": ours_pass(seeded), "eager PyG": pyg_pass(eager_test),
        "adapter, training settings": ours_pass(seeded, before),
        "host checks": host_checks}
    if guard is not None:
        rows["guards"] = guards
    big_info = ""
    counts: Dict[str, int] = {}
    for B in [int(b) for b in str(args.infer_batch_size).split(",") if b.strip()]:
        big = FixedSizeNeighborLoader(g.data, list(cfg.num_neighbors), B, input_nodes=g.test,
                                      seed=cfg.seed,  # as the demo's infer_batch_size=B
                                      layout=g.test_loader.layout)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            big_batches = [(f, big.seeds_in(f)) for f in big]
        bcfg = NodeDemoConfig(**{**cfg.__dict__, "batch_size": B})
        big_eager = list(eager_batches(g.data, g.test, bcfg, False, 0, use_pyg))
        big_model = inference_model(wrapped, args.backend, None)
        t = time.perf_counter()
        ours_pass(big_batches, big_model)()
        big_info += (f"; batch {B}: budget {big.budget.to_dict()}, {len(big_batches)} batches, "
                     f"compile {time.perf_counter() - t:.1f} s")
        counts[f"adapter, batch {B}"] = counts[f"eager PyG, batch {B}"] = len(big_batches)
        rows[f"adapter, batch {B}"] = ours_pass(big_batches, big_model)
        rows[f"eager PyG, batch {B}"] = pyg_pass(big_eager)
    if test_batches and g.test_loader.layout is not None:
        from graph_adapter.backends.select import drop_layout_tables

        bare = [(drop_layout_tables(f), b) for f, b in seeded]
        # PyG's scatter path, compiled with its own settings (INFER_OPTIONS[None])
        bare_model = inference_model(wrapped, args.backend, None, None)
        ours_pass(bare, bare_model)()
        rows["adapter, no tables"] = ours_pass(bare, bare_model)
        if g.test_loader.layout == "sources":
            big_info += f"; source table {g.test_loader.source_shape} (rows, width)"
    if test_batches and g.test_loader.layout == "hyb":
        if args.in_width:
            tl = g.test_loader
            other_tl = FixedSizeNeighborLoader(
                g.data, list(cfg.num_neighbors), cfg.batch_size, input_nodes=g.test,
                seed=cfg.seed, budget=tl.budget, layout=tl.layout,
                layout_widths=(args.in_width, tl.layout_widths[1]))
            wide = [(f, other_tl.seeds_in(f)) for f in other_tl]
            wide_model = inference_model(wrapped, args.backend, None)
            ours_pass(wide, wide_model)()
            key = f"adapter, in-width {args.in_width}"
            rows[key] = ours_pass(wide, wide_model)
            big_info += f"; {key}: spills {other_tl.layout_spills}"
        big_info += (f"; tables: widths {g.test_loader.layout_widths}, spills "
                     f"{g.test_loader.layout_spills}")
    if args.unprojected:
        from graph_adapter.tuning import registry

        unprojected = inference_model(wrapped, args.backend, None)
        # read (and keyed) at the compile, which the first call runs
        with registry.disabled("project_before_aggregate", "merge_shared_left_mms"):
            ours_pass(seeded, unprojected)()
        rows["adapter, unprojected"] = ours_pass(seeded, unprojected)
    if args.options:
        import json

        other = ga.compile(ga.ipu_wrap(wrapped.model), args.backend,
                           options=json.loads(args.options), background=False)
        other.eval()
        ours_pass(seeded, other)()
        rows[f"adapter, {args.options}"] = ours_pass(seeded, other)
    for f in rows.values():  # warm-up
        f()
    times: Dict[str, List[float]] = {k: [] for k in rows}
    cpu: Dict[str, List[float]] = {k: [] for k in rows}  # process CPU time (all threads)
    faults: Dict[str, List[int]] = {k: [] for k in rows}  # minor page faults (the process)
    for _ in range(args.rounds):
        for k, f in rows.items():
            c0, f0 = time.process_time(), minor_faults()
            times[k].append(middle([f() for _ in range(args.passes)]))  # back to back
            cpu[k].append((time.process_time() - c0) / args.passes)
            faults[k].append((minor_faults() - f0) / args.passes)
        if args.verbose:
            print("round: " + ", ".join(f"{k} {v[-1] * 1e3:.1f}" for k, v in times.items()
                                        if not k.startswith(("host", "guards"))),
                  f"ms; load {os.getloadavg()[0]:.1f}", flush=True)
    load1 = os.getloadavg()[0]

    n = int(g.test.numel())
    print(f"node demo inference: {n} test seeds, batch {cfg.batch_size}, {len(test_batches)} "
          f"batches, budget {g.loader.budget.to_dict()}; backend {compiled.backend}, "
          f"{torch.get_num_threads()} thread(s), {args.rounds} interleaved rounds; "
          f"load {load0:.1f} -> {load1:.1f}")
    print(f"eager batches: {'PyG NeighborLoader' if use_pyg else 'our sampler, unpadded'}; "
          f"inference compile {compile_s:.1f} s; compiled vs plain on the real rows: max |diff| "
          f"{worst:.2e}{big_info}")
    print(f"loader alone (once): adapter {t_loader * 1e3:.1f} ms, eager side "
          f"{t_eager_loader * 1e3:.1f} ms (neither is in a pass's time)")
    result: Dict[str, float] = {}
    print(f"{'row':28s} {'ms a pass':>10s} {'seeds/s':>10s} {'us a batch':>11s} "
          f"{'vs eager PyG':>13s} {'CPU ms':>8s} {'CPU vs eager':>13s} {'best ms':>8s} "
          f"{'best vs eager':>14s}")
    for k, v in times.items():
        med = statistics.median(v)
        ref_key = "eager PyG" + (k[len("adapter"):] if k.startswith("adapter, batch") else "")
        per_batch = med / counts.get(k, len(test_batches))
        cmed = statistics.median(cpu[k])
        best, btxt = min(v), ""
        ctxt = ""
        if k.startswith("adapter"):
            ratio = statistics.median(a / b for a, b in zip(times[ref_key], v))
            rtxt = f"{ratio:.2f}x"
            result[k] = ratio
            ctxt = f"{statistics.median(cpu[ref_key]) / max(cmed, 1e-9):.2f}x"
            btxt = f"{min(times[ref_key]) / max(best, 1e-9):.2f}x"
        elif k.startswith("eager"):
            rtxt = ctxt = btxt = "1.00x"
        else:
            rtxt = f"{med / statistics.median(times['adapter']):.1%} of it"
        print(f"{k:28s} {med * 1e3:10.2f} {n / med:10,.0f} {per_batch * 1e6:11.0f} {rtxt:>13s} "
              f"{cmed * 1e3:8.1f} {ctxt:>13s} {best * 1e3:8.2f} {btxt:>14s} "
              f"{statistics.median(faults[k]):7.0f}")
    return result


if __name__ == "__main__":
    main()
