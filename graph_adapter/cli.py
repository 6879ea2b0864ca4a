"""The ``graph-adapter`` command (also ``python -m graph_adapter``).

Subcommands:

* ``graph-adapter demo``: train a stock PyG GNN on rdkit's NCI-5k molecules
  through the adapter, next to eager PyG, and print a report
  (:mod:`graph_adapter.demo`).
* ``graph-adapter bench``: run the benchmark scripts of ``benchmarks/`` (a
  source checkout) and print their tables.
* ``graph-adapter check package.module:factory``: what poptorch's dispatcher
  would reject, found on CPU (:func:`graph_adapter.check.check_main`).

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
        description="Run the benchmark scripts of a source checkout's benchmarks/ directory "
                    "and print their tables.")
    bench.add_argument("--only", nargs="*", default=None, metavar="NAME",
                       help="benchmarks to run (default: all): " + ", ".join(BENCHMARKS))
    bench.add_argument("--dir", default=None, help="the benchmarks directory "
                                                   "(default: next to the package)")
    bench.add_argument("--quick", action="store_true",
                       help="fewer repeats (a smoke run; figures are noisier)")

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
#: name -> (script, argv for a normal run, argv for --quick)
BENCHMARKS = {
    "collate": ("bench_collate.py", [], ["--repeats", "30"]),
    "efficiency": ("bench_efficiency.py", [], ["--epochs", "1"]),
    "throughput": ("bench_throughput.py", [], ["--limit", "1000", "--repeats", "1"]),
}


def _bench_dir(explicit: Optional[str]) -> Optional[str]:
    if explicit:
        return explicit
    here = os.path.dirname(os.path.abspath(__file__))
    cand = os.path.join(os.path.dirname(here), "benchmarks")
    return cand if os.path.isdir(cand) else None


def _load_script(path: str, name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_graph_adapter_bench_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    d = os.path.dirname(path)
    added = d not in sys.path
    if added:
        sys.path.insert(0, d)
    spec.loader.exec_module(mod)
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


def _run_bench(args) -> int:
    import platform
    import time

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
    print(f"# graph_adapter benchmarks\n\nmachine: {platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads\n")
    summary = []
    for name in names:
        script, argv, quick = BENCHMARKS[name]
        path = os.path.join(bdir, script)
        if not os.path.isfile(path):
            summary.append((name, "missing", f"{script} not found in {bdir}"))
            continue
        t0 = time.perf_counter()
        try:
            mod = _load_script(path, name)
            main = getattr(mod, "main")
            script_argv = list(quick if args.quick else argv)
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                ret = _call_main(main, script, script_argv)
            out = buf.getvalue()
        except SystemExit as e:  # argparse in a script
            summary.append((name, "failed", f"exit {e.code}"))
            continue
        except Exception as e:  # noqa: BLE001 - report and go on with the others
            summary.append((name, "failed", f"{type(e).__name__}: {e}"))
            continue
        dt = time.perf_counter() - t0
        print(f"## {name} ({script}, {dt:.0f} s)\n")
        print(out.rstrip() + "\n")
        if isinstance(ret, int) and ret not in (0,):
            summary.append((name, "failed", f"returned {ret}"))
        else:
            summary.append((name, "ok", f"{dt:.0f} s"))
    print("## summary\n")
    print("| benchmark | status | note |\n|---|---|---|")
    for row in summary:
        print("| " + " | ".join(row) + " |")
    return 0 if all(s[1] == "ok" for s in summary) else 1


# --------------------------------------------------------------------------
def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``graph-adapter`` and ``python -m graph_adapter``; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "check":
        from .check import check_main

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
