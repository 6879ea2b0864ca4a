"""Where the demo model's first compiled steps spend their time, cold and warm.

Runs the demo's model (``graph-adapter demo`` defaults: GINE 4 x 64 + BatchNorm,
HYB layout, ``Budget.fit`` over rdkit's NCI molecules at 64 graphs a batch, L1
loss, Adam) in fresh child processes on one inductor cache directory: the first
process compiles cold (a new temp directory unless ``--cache-dir``), the next
ones warm. Each child times its first training step (forward + backward +
optimizer step, compile included), its first inference call, and reports
Dynamo's ``compile_times()``, inductor's cache counters and the number of
``.so`` files it built.

    python benchmarks/bench_compile_time.py [--runs 2] [--threads 2] \
        [--option cpp_wrapper=true ...] [--limit 1000] [--precompile off|on|alternate]

``--option KEY=VALUE`` (repeatable) passes inductor options to
``graph_adapter.compile(options=...)`` (values parsed as JSON, else strings),
to measure a setting's cold-compile cost side by side with the default.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

_CHILD = textwrap.dedent(r"""
    import json, os, sys, time
    t_start = time.perf_counter()
    import torch
    torch.set_num_threads(int(os.environ["BENCH_THREADS"]))
    import graph_adapter as ga
    from graph_adapter.app.datasets import load_nci5k
    from graph_adapter.app.models import build_model
    from torch._dynamo.utils import counters, compile_times
    t_import = time.perf_counter() - t_start
    gcc = []  # (seconds, command) of every C++ compile, with --trace-gcc (1 compile thread)
    if os.environ.get("BENCH_TRACE_GCC"):
        import torch._inductor.cpp_builder as cb
        _run = cb._run_compile_cmd

        def _timed(cmd_line, cwd):
            t = time.perf_counter()
            _run(cmd_line, cwd)
            gcc.append((time.perf_counter() - t, cmd_line))
        cb._run_compile_cmd = _timed

    if os.environ.get("BENCH_PRECOMPILE"):  # backends/_precompile.py: skip Dynamo's trace
        from graph_adapter.tuning import precompile as _precompile
        _precompile.ENABLED = True
    if os.environ.get("BENCH_NO_REMEMBER"):  # inductor's own host checks, every process
        from graph_adapter.tuning import registry
        registry.disabled("remembered_host_checks").__enter__()  # for the whole process
    limit = int(os.environ["BENCH_LIMIT"]) or None
    options = json.loads(os.environ["BENCH_OPTIONS"]) or None
    graphs, _ = load_nci5k(limit=limit)
    for d in graphs:
        del d.smiles
    budget = ga.Budget.fit(graphs, 64, seed=0)
    torch.manual_seed(0)
    model = build_model("gine", 64, 4, 0.0, 1.0)
    # (one loader over every molecule fits the layout's tables on all of them, as the demo)
    loader = ga.FixedSizeLoader(graphs, budget, shuffle=False,
                                layout=os.environ["BENCH_LAYOUT"] or None)
    it = iter(loader)
    flat, flat2 = next(it), next(it)
    wrapped = ga.ipu_wrap(model, loss_fn=ga.masked_loss("l1"), trim=True)
    opt = torch.optim.Adam(wrapped.parameters(), lr=1e-3)
    compiled = ga.compile(wrapped, "inductor", optimizer=opt, options=options, background=False)

    def train_step(b):
        loss = compiled(b)["loss"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss)

    prof = None
    if os.environ.get("BENCH_PROFILE"):  # cProfile of the first training step
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    import resource
    c0, k0 = time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter(); loss1 = train_step(flat); t_train = time.perf_counter() - t0
    c1, k1 = time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_train = c1 - c0  # this process's CPU time (steadier than wall time under load)
    cpu_children = (k1.ru_utime + k1.ru_stime) - (k0.ru_utime + k0.ru_stime)
    if prof is not None:
        prof.disable()
        prof.dump_stats(os.environ["BENCH_PROFILE"])
    t0 = time.perf_counter(); train_step(flat2); t_train2 = time.perf_counter() - t0
    compiled.eval()
    t0 = time.perf_counter()
    with torch.no_grad():
        compiled(flat)["output"]
    t_infer = time.perf_counter() - t0
    cache = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    so = sum(f.endswith(".so") for _, _, fs in os.walk(cache) for f in fs)
    print("RESULT " + json.dumps({
        "import_s": t_import, "first_train_s": t_train, "first_train_cpu_s": cpu_train,
        "first_train_children_cpu_s": cpu_children, "second_train_s": t_train2,
        "first_infer_s": t_infer, "so_files_in_cache": so,
        "precompiled_loads": getattr(compiled._engine, "precompiled_loads", 0),
        "first_loss": loss1,
        "inductor": dict(counters["inductor"]), "aot": dict(counters["aot_autograd"]),
        "compile_times": compile_times(repr="str", aggregate=True),
        "gcc": gcc, "budget": [budget.nodes, budget.edges, budget.graphs]}))
""")


def _parse_option(text: str):
    key, _, value = text.partition("=")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def run_child(cache_dir: str, threads: int, limit: int, layout: str, options: dict,
              trace_gcc: bool = False, profile: str = "",
              remember: bool = True, precompile: bool = False) -> dict:
    """One fresh process on ``cache_dir``; what it printed (see :data:`_CHILD`) plus its wall time."""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache_dir, BENCH_THREADS=str(threads),
               BENCH_LIMIT=str(limit), BENCH_LAYOUT=layout, BENCH_OPTIONS=json.dumps(options))
    if profile:
        env["BENCH_PROFILE"] = profile
    if not remember:
        env["BENCH_NO_REMEMBER"] = "1"
    env.pop("BENCH_PRECOMPILE", None)
    if precompile:
        env["BENCH_PRECOMPILE"] = "1"
    if trace_gcc:  # in this process: inductor's compile workers would not see the patch
        env.update(BENCH_TRACE_GCC="1", TORCHINDUCTOR_COMPILE_THREADS="1")
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(out.stderr[-4000:])
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    result = json.loads(line[len("RESULT "):])
    result["process_wall_s"] = wall
    return result


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=2, help="processes on one cache (1 cold + warm)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--limit", type=int, default=0, help="molecules (0: all; the budget fits them)")
    p.add_argument("--layout", default="hyb", help="'' for none")
    p.add_argument("--cache-dir", default=None, help="default: a fresh temp dir (cold)")
    p.add_argument("--option", action="append", default=[], type=_parse_option)
    p.add_argument("--verbose", action="store_true", help="print compile_times")
    p.add_argument("--no-remember", action="store_true",
                   help="run inductor's host checks in every process (backends/_host_checks.py off)")
    p.add_argument("--side-by-side", action="store_true",
                   help="warm runs alternate: host-check records on, then off")
    p.add_argument("--profile", default="", help="cProfile the first training step into this file")
    p.add_argument("--trace-gcc", action="store_true",
                   help="time every C++ compile (runs them in the child: 1 compile thread)")
    p.add_argument("--precompile", choices=("off", "on", "alternate"), default="off",
                   help="precompiled entries (backends/_precompile.py): 'alternate' runs warm "
                        "processes off, on, off, on... after one process on that writes them")
    args = p.parse_args(argv)
    options = dict(args.option)
    cache = args.cache_dir or tempfile.mkdtemp(prefix="ga-compile-")
    print(f"cache {cache}; threads {args.threads}; options {options or 'default'}; "
          f"load average {os.getloadavg()[0]:.2f}")
    for i in range(args.runs):
        remember = not args.no_remember and not (args.side_by_side and i % 2 == 0 and i > 0)
        precompile = {"off": False, "on": True}.get(args.precompile, i == 0 or i % 2 == 0)
        r = run_child(cache, args.threads, args.limit, args.layout, options, args.trace_gcc,
                      args.profile, remember, precompile)
        ind = r["inductor"]
        print(f"run {i + 1} ({'cold' if i == 0 and not args.cache_dir else 'warm'}): "
              f"first train step {r['first_train_s']:.2f} s (CPU {r['first_train_cpu_s']:.2f} s + "
              f"subprocesses {r['first_train_children_cpu_s']:.2f} s), second {r['second_train_s']:.3f} s, "
              f"first inference {r['first_infer_s']:.2f} s, imports {r['import_s']:.2f} s, "
              f"process {r['process_wall_s']:.1f} s; fx cache hit/miss/bypass "
              f"{ind.get('fxgraph_cache_hit', 0)}/{ind.get('fxgraph_cache_miss', 0)}/"
              f"{ind.get('fxgraph_cache_bypass', 0)}; host-check records {'on' if remember else 'off'}; aot hit {r['aot'].get('autograd_cache_hit', 0)}; "
              f"precompile {'on' if precompile else 'off'} ({r['precompiled_loads']} loaded, "
              f"first loss {r['first_loss']!r}); "
              f".so in cache {r['so_files_in_cache']}; load {os.getloadavg()[0]:.2f}")
        if args.verbose:
            print(r["compile_times"])
        if r["gcc"]:
            secs = sorted((s for s, _ in r["gcc"]), reverse=True)
            print(f"  C++ compiles: {len(secs)}, {sum(secs):.1f} s summed, largest "
                  + ", ".join(f"{s:.1f}" for s in secs[:5]))
            if args.verbose:
                print("  slowest command: " + max(r["gcc"])[1])


if __name__ == "__main__":
    main()
