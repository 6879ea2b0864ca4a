"""The "models" table: compiled training and inference vs eager PyG, per model, geomean.

``python benchmarks/bench_models.py [--only gcn gin] [--limit 1000] [--rounds 5]
[--threads 1] [--layout model|none|ell|hyb] [--offset N] [--min-nodes N]``
(``--offset 3000``: a slice of NCI-5k no setting was tuned on; ``--min-nodes 25``:
larger molecules, another size distribution); see
:mod:`benchmarks.harness.model_table` (``python benchmarks/bench_all.py --only models``).

``python benchmarks/bench_models.py --overhead [--limit 640] [--rounds 7]``: what a
compiled call costs besides its kernels, side by side in one process (issue 24):

1. on a budget so small that kernels are negligible (2 molecules, GIN 4 x 8 +
   BatchNorm): Dynamo's guard evaluation alone (the cache entry's guard manager
   checked on the call's locals), the Dynamo-compiled entry called as the
   engine calls it with its guards and with guard evaluation skipped
   (``torch.compiler.set_stance(skip_guard_eval_unsafe=True)``: the ceiling of
   any guard policy, since no policy can check less than nothing), the
   ``Compiled`` call (the host-side signature and bounds checks on top) and a
   whole training step (forward + backward);
2. the GIN 4 x 128 + BatchNorm training step of the models table (``--limit``
   molecules, 64 a batch, one Adam step a batch) with Dynamo's guards and
   with their evaluation skipped, interleaved, and their ratio.

Every figure is this process's CPU time (best of ``--rounds`` interleaved rounds).
"""
import argparse
import copy
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from benchmarks.harness.model_table import main  # noqa: E402


def _guard_manager(compiled):
    """The guard manager of a ``Compiled``'s one Dynamo cache entry, and the locals
    its entry function runs with (``engines._own_entry``: ``flat`` and the closure's
    ``wrapped``)."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    code = compiled._engine._fn._torchdynamo_orig_callable.__code__
    entries = _debug_get_cache_entry_list(code)
    if len(entries) != 1:
        raise RuntimeError(f"expected one Dynamo cache entry, found {len(entries)}")
    return entries[0].guard_manager


def _leaf_guards(manager) -> int:
    """The number of leaf guards in a guard tree (its printed ``+- NAME:`` lines)."""
    return sum(1 for line in str(manager).splitlines()
               if "+- " in line and ":" in line.split("+- ", 1)[1].split(" ", 1)[0])


def _best_us(fns, rounds: int, calls: int):
    """Best-of-``rounds`` CPU microseconds a call of each of ``fns``, interleaved."""
    from benchmarks.harness.throughput import timed_interleaved

    def repeated(fn):
        def run():
            for _ in range(calls):
                fn()
        return run
    best = timed_interleaved({k: repeated(f) for k, f in fns.items()}, rounds,
                             clock=time.process_time)
    return {k: v / calls * 1e6 for k, v in best.items()}


def _skipping_guard_eval(fn):
    """``fn`` under ``set_stance(skip_guard_eval_unsafe=True)`` (only the guards that
    tell cache entries apart run; with one entry, none)."""
    import torch

    def run():
        with torch.compiler.set_stance("default", skip_guard_eval_unsafe=True):
            return fn()
    return run


def overhead(argv=None) -> dict:
    """Print and return the per-call overhead figures of the module docstring."""
    import torch
    from torch_geometric.nn.models import GIN

    import graph_adapter as ga
    from benchmarks.harness import model_table as M
    from benchmarks.harness.throughput import set_inductor_env, trainer
    from graph_adapter.app.datasets import load_nci5k

    set_inductor_env()
    ap = argparse.ArgumentParser(description="per-call overhead of a compiled call")
    ap.add_argument("--overhead", action="store_true")
    ap.add_argument("--limit", type=int, default=640)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--backend", default="inductor")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    load0 = os.getloadavg()[0]
    data, _ = load_nci5k(limit=args.limit)
    for d in data:
        del d.smiles
    res = {}

    # 1. a budget where kernels are negligible
    tiny = ga.Budget.fit(data[:2], 2)
    flat = next(iter(ga.FixedSizeLoader(data[:2], tiny, shuffle=False)))
    torch.manual_seed(0)
    wrapped = ga.ipu_wrap(M._Float(GIN(8, 8, 4, norm="batch_norm"), 8, edges=False),
                          loss_fn=M._wrapped_loss).train()
    c = ga.compile(wrapped, args.backend, background=False)
    c(flat)["loss"].backward()
    gm = _guard_manager(c)
    local = {"flat": flat, "wrapped": wrapped}
    if not gm.check(local):
        raise RuntimeError("the guard manager fails on the call's own locals: wrong locals")
    fn = c._engine._fn
    fns = {
        "guard evaluation alone": lambda: gm.check(local),
        "Dynamo entry, guards evaluated": lambda: fn(flat),
        "Dynamo entry, guard evaluation skipped": _skipping_guard_eval(lambda: fn(flat)),
        "Compiled call (host checks + entry)": lambda: c(flat),
        "training step (Compiled forward + backward)": lambda: c(flat)["loss"].backward(),
    }
    for f in fns.values():  # warm every path once
        f()
    tiny_us = _best_us(fns, args.rounds, 300)
    res["tiny"] = dict(tiny_us, leaf_guards=_leaf_guards(gm),
                       guards_executed=gm.check_verbose(local).num_guards_executed)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), backend "
          f"{args.backend}; best of {args.rounds} interleaved rounds, CPU time")
    print(f"\n1. GIN 4x8 + BatchNorm, training mode, {tiny} (kernels negligible): "
          f"{res['tiny']['leaf_guards']} leaf guards, {res['tiny']['guards_executed']} "
          f"executed a call")
    for k, v in tiny_us.items():
        print(f"   {k:46s} {v:8.1f} us")

    # 2. the models table's GIN training step, guards evaluated vs skipped
    budget = ga.Budget.fit(data, 64)
    flats = list(ga.FixedSizeLoader(data, budget, shuffle=False))
    base = M.build("gin")
    # one model, one optimizer, both ways in turn: the two variants differ in the
    # guard evaluation only (two models would differ in memory layout too)
    w = ga.ipu_wrap(copy.deepcopy(base), loss_fn=M._wrapped_loss).train()
    cc = ga.compile(w, args.backend, background=False)
    cc(flats[0])["loss"].backward()
    run = trainer(w, lambda f: cc(f)["loss"], flats)
    steps = {"guards evaluated": run, "guard evaluation skipped": _skipping_guard_eval(run)}
    gm2, loc2 = _guard_manager(cc), {"flat": flats[0], "wrapped": w}
    for f in steps.values():
        f()
    step_us = {k: v / len(flats) for k, v in
               _best_us(steps, args.rounds, 1).items()}
    guard_us = _best_us({"g": lambda: gm2.check(loc2)}, args.rounds, 300)["g"]
    res["gin"] = dict(step_us, guard_evaluation=guard_us, leaf_guards=_leaf_guards(gm2))
    a, b = step_us["guards evaluated"], step_us["guard evaluation skipped"]
    print(f"\n2. GIN 4x128 + BatchNorm training step (Adam), {budget}, {len(flats)} batches: "
          f"{res['gin']['leaf_guards']} leaf guards, their evaluation alone {guard_us:.1f} us")
    print(f"   guards evaluated          {a:9.1f} us a step")
    print(f"   guard evaluation skipped  {b:9.1f} us a step   ({a / b:.4f}x, "
          f"{a - b:+.1f} us)")
    print(f"\nload average (1 min) at start {load0:.2f}, at end {os.getloadavg()[0]:.2f} "
          f"({os.cpu_count()} cores)")
    return res


if __name__ == "__main__":
    if "--overhead" in sys.argv[1:]:
        overhead(sys.argv[1:])
    else:
        main()
