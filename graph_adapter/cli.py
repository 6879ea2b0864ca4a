"""The ``graph-adapter`` command (also ``python -m graph_adapter``).

Subcommands:

* ``graph-adapter demo``: train a stock PyG GNN on rdkit's NCI-5k molecules
  through the adapter, next to eager PyG, and print a report
  (:mod:`graph_adapter.demo`).
* ``graph-adapter bench``: run the benchmarks of ``benchmarks/`` (a source
  checkout: collate, padding efficiency, compiles, throughput) and print one
  table.
* ``graph-adapter check package.module:factory``: what poptorch's dispatcher
  would reject, found on CPU (:func:`graph_adapter.checker.check_main`).

Exit codes: 0 success, 1 a check failed, 2 a usage error or a missing
optional dependency / file (the message says what to install or where).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from typing import List, Optional, Sequence

__all__ = ["main", "build_parser"]

PROG = "graph-adapter"


def _version() -> str:
    try:
        from . import __version__

        return __version__
    except Exception:  # pragma: no cover
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    from .demo import MODELS, DemoConfig

    d = DemoConfig()
    p = argparse.ArgumentParser(
        prog=PROG,
        description="graph_adapter: run unmodified PyTorch Geometric GNNs under compilers that "
                    "demand stable input shapes (poptorch/IPU, torch.compile, torch.export).")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", metavar="{demo,bench,check}")

    demo = sub.add_parser(
        "demo", help="train a stock PyG GNN on rdkit's 5000 molecules through the adapter",
        description="Load rdkit's NCI first_5k molecules (target TPSA), learn a budget, pack "
                    "with FixedSizeLoader, wrap a stock PyG model with ipu_wrap, compile it, "
                    "train, evaluate the test MAE, and compare with eager PyG on the same data "
                    "in the same run.")
    demo.add_argument("--epochs", type=int, default=d.epochs, help=f"default {d.epochs}")
    demo.add_argument("--batch-graphs", type=int, default=d.batch_graphs,
                      help=f"graphs per batch the budget is fitted for (and the eager "
                           f"DataLoader's batch_size); default {d.batch_graphs}")
    demo.add_argument("--seed", type=int, default=d.seed, help=f"default {d.seed}")
    demo.add_argument("--model", choices=sorted(MODELS), default=d.model,
                      help="; ".join(f"{k}: {v}" for k, v in MODELS.items()))
    demo.add_argument("--backend", default=d.backend,
                      help="auto (poptorch if installed, else inductor), inductor, aot_eager, "
                           "eager, poptorch, ipu-emulator; default auto")
    demo.add_argument("--hidden", type=int, default=d.hidden, help=f"default {d.hidden}")
    demo.add_argument("--layers", type=int, default=d.layers, help=f"default {d.layers}")
    demo.add_argument("--lr", type=float, default=d.lr, help=f"default {d.lr}")
    demo.add_argument("--limit", type=int, default=None,
                      help="use only the first N molecules (a quick run)")
    demo.add_argument("--data", default=None, metavar="CSV",
                      help="a SMILES,TPSA file instead of rdkit's first_5k.tpsa.csv")
    demo.add_argument("--plot", default=None, metavar="FILE.png",
                      help="write loss curves and the padding histogram (needs the 'plot' extra)")
    demo.add_argument("--json", default=None, metavar="FILE",
                      help="also write every measured figure as JSON")
    demo.add_argument("--no-eager", action="store_true",
                      help="skip the eager PyG comparison run")
    demo.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    demo.add_argument("--quiet", action="store_true", help="no progress output")

    bench = sub.add_parser(
        "bench", help="run the benchmarks (collate, padding efficiency, throughput)",
        description="Run the benchmarks of a source checkout's benchmarks/ directory (collate "
                    "speed, padding efficiency against pad-to-max and PyG's DynamicBatchSampler, "
                    "compiles per epoch, step and epoch throughput against eager PyG) and print "
                    "one table.")
    bench.add_argument("--only", nargs="*", default=None, metavar="NAME",
                       help="benchmarks to run (default: all): " + ", ".join(BENCHMARKS))
    bench.add_argument("--dir", default=None, help="the benchmarks directory "
                                                   "(default: next to the package)")
    bench.add_argument("--quick", action="store_true",
                       help="fewer repeats and molecules (a smoke run; figures are noisier)")
    bench.add_argument("--verbose", action="store_true",
                       help="also print the throughput script's own output")

    sub.add_parser("check", add_help=False,
                   help="report what poptorch's dispatcher would reject (graph-adapter check -h)")
    return p


def _err(cmd: str, msg: str) -> None:
    print(f"{PROG} {cmd}: {msg}", file=sys.stderr)


def _run_demo(args) -> int:
    from .datasets import MissingExtraError
    from .demo import DemoConfig, run_demo

    cfg = DemoConfig(epochs=args.epochs, batch_graphs=args.batch_graphs, seed=args.seed,
                     model=args.model, backend=args.backend, hidden=args.hidden,
                     layers=args.layers, lr=args.lr, limit=args.limit, path=args.data,
                     eager_baseline=not args.no_eager, progress=not args.quiet,
                     plot=args.plot, threads=args.threads)
    try:
        result = run_demo(cfg)
    except MissingExtraError as e:
        _err("demo", str(e))
        return 2
    except FileNotFoundError as e:
        _err("demo", str(e))
        return 2
    except ValueError as e:
        _err("demo", str(e))
        return 2
    print(result.report())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result.as_dict(), f, indent=2, default=str)
    return 0


# --------------------------------------------------------------------------
# bench
# --------------------------------------------------------------------------
#: the benchmark scripts ``graph-adapter bench`` runs (in ``benchmarks/``)
BENCHMARKS = {
    "collate": "bench_collate.py",
    "efficiency": "bench_efficiency.py",
    "throughput": "bench_throughput.py",
}


def _bench_dir(explicit: Optional[str]) -> Optional[str]:
    if explicit:
        return explicit
    here = os.path.dirname(os.path.abspath(__file__))
    cand = os.path.join(os.path.dirname(here), "benchmarks")
    return cand if os.path.isdir(cand) else None


def _load_script(path: str, name: str):
    import importlib.util

    # imported under its own name (bench_throughput, ...) and registered, as
    # `python benchmarks/<script>` would have it importable: Dynamo imports the
    # module of every class it traces
    modname = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    d = os.path.dirname(path)
    if d not in sys.path:
        sys.path.insert(0, d)
    sys.modules[modname] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(modname, None)
        raise
    return mod


def _call_main(main, script: str, argv: List[str]):
    """Call a script's ``main(argv)``, or ``main()`` with ``sys.argv`` set."""
    import inspect

    try:
        takes_argv = len(inspect.signature(main).parameters) > 0
    except (TypeError, ValueError):
        takes_argv = False
    if takes_argv:
        return main(argv)
    saved = sys.argv
    sys.argv = [script, *argv]
    try:
        return main()
    finally:
        sys.argv = saved


def _bench_collate(mod, ds, budget, repeats: int):
    """Median ms of the loader's columnar collate vs ``Batch.from_data_list`` + pad."""
    import statistics
    import time

    import torch

    from .collate import Collator

    col = Collator(ds, budget)
    sizes = col.sizes.matrix
    g = torch.Generator().manual_seed(0)
    k = budget.graphs - 1
    batches = []
    while len(batches) < repeats:
        idx = torch.randperm(len(ds), generator=g)[:min(k, 64)].tolist()
        n, e = sizes[idx].sum(axis=0)
        if n <= budget.nodes - 1 and e <= budget.edges:
            batches.append(idx)
    ours, base = [], []
    for idx in batches[:5]:
        col.collate_indices(idx)
        mod.pyg_collate_and_pad([ds[i] for i in idx], budget)
    for idx in batches:
        t0 = time.perf_counter()
        mod.pyg_collate_and_pad([ds[i] for i in idx], budget)
        t1 = time.perf_counter()
        col.collate_indices(idx)
        t2 = time.perf_counter()
        base.append(t1 - t0)
        ours.append(t2 - t1)
    return statistics.median(ours) * 1e3, statistics.median(base) * 1e3


def _run_bench(args) -> int:
    import platform
    import time
    import warnings

    import torch

    bdir = _bench_dir(args.dir)
    if bdir is None:
        _err("bench", "no benchmarks/ directory: the benchmarks ship with a source checkout "
                      "(git clone ...; pip install -e .), or pass --dir")
        return 2
    names = list(BENCHMARKS) if not args.only else list(args.only)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        _err("bench", f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")
        return 2
    mods, failed = {}, []
    for name in names:
        path = os.path.join(bdir, BENCHMARKS[name])
        if not os.path.isfile(path):
            failed.append((name, f"{BENCHMARKS[name]} missing in {bdir}"))
            continue
        try:
            mods[name] = _load_script(path, name)
        except Exception as e:  # noqa: BLE001
            failed.append((name, f"cannot import {BENCHMARKS[name]}: {type(e).__name__}: {e}"))
    rows = []  # (benchmark, measure, graph_adapter, baseline, baseline name, ratio)
    quick = args.quick
    if "collate" in mods or "efficiency" in mods:
        from .budget import Budget
        from .datasets import load_nci5k
        from .packing import graph_sizes

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds, _ = load_nci5k()
        for d in ds:
            del d.smiles
        sizes = graph_sizes(ds)
        budget = Budget.fit(ds, 64)
    if "collate" in mods:
        _log_bench("collate")
        try:
            torch.set_num_threads(1)
            ours, base = _bench_collate(mods["collate"], ds, budget, 30 if quick else 300)
            rows.append(("collate", "ms per batch of 64 molecules (median, 1 thread)",
                         f"{ours:.2f}", f"{base:.2f}", "Batch.from_data_list + pad",
                         f"{base / ours:.1f}x faster"))
        except Exception as e:  # noqa: BLE001
            failed.append(("collate", f"{type(e).__name__}: {e}"))
        finally:
            torch.set_num_threads(os.cpu_count() or 1)
    if "efficiency" in mods:
        _log_bench("efficiency")
        m = mods["efficiency"]
        epochs = 1 if quick else 3
        try:
            ours, _ = m.ours(sizes, budget, "greedy", epochs)
            ptm, ptm_budget, _ = m.fixed_count(sizes, 64, epochs)
            dyn, dyn_shapes = m.dynamic_sampler(ds, sizes, budget.nodes - 1, epochs)
            rows.append(("padding", "node slots holding real nodes (64 graphs a batch)",
                         f"{ours['node_efficiency']:.1%}", f"{ptm['node_efficiency']:.1%}",
                         "pad-to-max, 64 graphs", f"{ours['node_efficiency'] / ptm['node_efficiency']:.1f}x"))
            rows.append(("padding", "edge slots holding real edges",
                         f"{ours['edge_efficiency']:.1%}", f"{ptm['edge_efficiency']:.1%}",
                         "pad-to-max, 64 graphs", f"{ours['edge_efficiency'] / ptm['edge_efficiency']:.1f}x"))
            rows.append(("padding", "node slots holding real nodes",
                         f"{ours['node_efficiency']:.1%}", f"{dyn['node_efficiency']:.1%}",
                         "PyG DynamicBatchSampler", ""))
            rows.append(("compiles", "distinct batch shapes per epoch (= compiles)", "1",
                         f"{dyn_shapes:.0f}", "PyG DynamicBatchSampler", ""))
        except Exception as e:  # noqa: BLE001
            failed.append(("efficiency", f"{type(e).__name__}: {e}"))
    if "throughput" in mods:
        _log_bench("throughput (inductor compiles: a few minutes)")
        argv = ["--limit", "1000", "--repeats", "1"] if quick else []
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                res = _call_main(mods["throughput"].main, BENCHMARKS["throughput"], argv)
            if not isinstance(res, dict):
                raise TypeError("bench_throughput.main() returned no results dict")
            rows.append(("throughput", "training step, graphs/s (inductor, padded)",
                         f"{res['train_compiled']:,.0f}", f"{res['train_pyg']:,.0f}",
                         "eager PyG, unpadded", f"{res['train_compiled'] / res['train_pyg']:.2f}x"))
            rows.append(("throughput", "inference, graphs/s (inductor, padded)",
                         f"{res['inf_compiled']:,.0f}", f"{res['inf_pyg']:,.0f}",
                         "eager PyG, unpadded", f"{res['inf_compiled'] / res['inf_pyg']:.2f}x"))
            rows.append(("throughput", "training epoch incl. loading, s",
                         f"{res['epoch_fsl_compiled_s']:.2f}", f"{res['epoch_pyg_s']:.2f}",
                         "PyG DataLoader + eager",
                         f"{res['epoch_pyg_s'] / res['epoch_fsl_compiled_s']:.2f}x"))
            rows.append(("compiles", "compiles, train + eval (inductor)", str(res["compiles"]),
                         "", "", ""))
            rows.append(("compiles", "compile time train / eval, s",
                         f"{res['compile_train_s']:.0f} / {res['compile_eval_s']:.0f}", "", "", ""))
        except Exception as e:  # noqa: BLE001
            failed.append(("throughput", f"{type(e).__name__}: {e}"))
        if args.verbose:
            print(buf.getvalue())
    print(f"\ngraph_adapter benchmarks{' (--quick)' if quick else ''}: {platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}, "
          f"data: rdkit's NCI first_5k molecules\n")
    head = ("benchmark", "measure", "graph_adapter", "baseline", "baseline is", "ratio")
    table = [head] + rows
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
    for name, why in failed:
        print(f"\n{name}: not run: {why}")
    return 1 if failed else 0


def _log_bench(name: str) -> None:
    print(f"running {name} ...", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``graph-adapter`` and ``python -m graph_adapter``; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "check":
        from .checker import check_main

        return int(check_main(argv[1:]) or 0)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "demo":
        return _run_demo(args)
    if args.command == "bench":
        return _run_bench(args)
    parser.print_help()  # pragma: no cover
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
