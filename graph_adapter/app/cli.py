"""The ``graph-adapter`` command (also ``python -m graph_adapter``).

Subcommands:

* ``graph-adapter demo``: train a stock PyG GNN on rdkit's NCI-5k molecules
  through the adapter, next to eager PyG, and print a report
  (:mod:`graph_adapter.app.demo.graph`).
* ``graph-adapter check package.module:factory``: what poptorch's dispatcher
  would reject, found on CPU (:mod:`graph_adapter.app.check_cli`).
* ``graph-adapter export package.module:factory OUT.pt2``: a servable artifact
  (:mod:`graph_adapter.app.export_cmd`, ``docs/deploy.md``).
* ``graph-adapter serve OUT.pt2 --port N``: that artifact over HTTP + JSON, concurrent
  requests merged (:func:`graph_adapter.serve.serve_main`; without PyG:
  ``python -m graph_adapter.serve``).

The benchmarks are not a subcommand: they measure the package and live in a source
checkout's ``benchmarks/`` (``python benchmarks/bench_all.py``).

Exit codes: 0 success, 1 a check failed, 2 a usage error or a missing
optional dependency / file (the message says what to install or where).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import sys
from typing import Any, Optional, Sequence

import graph_adapter as ga
from graph_adapter.backends import backend_names

from .demo.config import LAYOUTS, DemoConfig
from .demo.graph import MODELS, run_demo
from .demo.node import NodeDemoConfig
from .demo.results import seed_spread
from .preflight import DemoSettingError
from .usage import EXIT_USAGE, OneLineArgumentParser, usage_error

#: where ``graph-adapter demo`` writes its plot unless told (where matplotlib is installed)
DEFAULT_PLOT = "graph_adapter_demo.png"

__all__ = ["main", "build_parser"]

PROG = "graph-adapter"


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``demo`` (``check``, ``export`` and ``serve`` have their own: see
    :func:`main`)."""
    d = DemoConfig()
    p = OneLineArgumentParser(
        prog=PROG,
        description="graph_adapter: run unmodified PyTorch Geometric GNNs under compilers that "
                    "demand stable input shapes (poptorch/IPU, torch.compile, torch.export).")
    p.add_argument("--version", action="version", version=f"%(prog)s {ga.__version__}")
    sub = p.add_subparsers(dest="command", metavar="{demo,check,export,serve}")
    _add_demo(sub, d)
    sub.add_parser("check", add_help=False,
                   help="report what poptorch's dispatcher would reject (graph-adapter check -h)")
    sub.add_parser("export", add_help=False,
                   help="write a trained model as a .pt2/.onnx artifact that serves without "
                        "PyG (graph-adapter export -h)")
    sub.add_parser("serve", add_help=False,
                   help="serve an exported artifact over HTTP + JSON, merging concurrent "
                        "requests (graph-adapter serve -h)")
    return p


def _add_demo(sub: Any, d: DemoConfig) -> None:
    """``demo``'s parser: its flags' defaults are ``d``'s (one :class:`DemoConfig`)."""
    demo = sub.add_parser(
        "demo", help="train a stock PyG GNN on rdkit's 5000 molecules through the adapter",
        description="Load rdkit's NCI first_5k molecules (target TPSA), learn a budget, pack "
                    "with FixedSizeLoader, wrap a stock PyG model with ipu_wrap, compile it, "
                    "train, evaluate the test MAE, and compare with eager PyG on the same data "
                    "in the same run.")
    _add_demo_model_args(demo, d)
    _add_demo_run_args(demo, d)


def _add_demo_model_args(demo: argparse.ArgumentParser, d: DemoConfig) -> None:
    """``demo``'s training flags: epochs, batches, seed, model, backend, layout."""
    demo.add_argument("--epochs", type=int, default=d.epochs, help=f"default {d.epochs}")
    demo.add_argument("--batch-graphs", type=int, default=d.batch_graphs,
                      help=f"graphs per batch the budget is fitted for (and the eager "
                           f"DataLoader's batch_size); default {d.batch_graphs}")
    demo.add_argument("--seed", type=int, default=d.seed, help=f"default {d.seed}")
    demo.add_argument("--seeds", type=int, default=1, metavar="N",
                      help="run N seeds (--seed, --seed + 1, ...): the first one's report, then "
                           "each run's test MAE mean and range over them")
    demo.add_argument("--model", choices=sorted(MODELS), default=d.model,
                      help="; ".join(f"{k}: {v}" for k, v in MODELS.items()))
    demo.add_argument("--backend", default=d.backend, choices=backend_names(), metavar="NAME",
                      help=f"one of {', '.join(backend_names())}; auto: poptorch if installed, "
                           f"else inductor (training and inference; inductor_eval: eager "
                           f"training, no training compile); eager: no compiler; "
                           f"default {d.backend}")
    demo.add_argument("--layout", choices=LAYOUTS, default=d.layout,
                      help="FixedSizeLoader's aggregation layout: hyb (narrow neighbour tables "
                           "+ spill lists), ell (tables as wide as the largest degree), none "
                           f"(PyG's scatter); default {d.layout}")


def _add_demo_run_args(demo: argparse.ArgumentParser, d: DemoConfig) -> None:
    """``demo``'s other flags: the model's size, the data, the outputs, the runs and their
    rounds, the threads, the task."""
    demo.add_argument("--hidden", type=int, default=d.hidden, help=f"default {d.hidden}")
    demo.add_argument("--layers", type=int, default=d.layers, help=f"default {d.layers}")
    demo.add_argument("--lr", type=float, default=d.lr, help=f"default {d.lr}")
    demo.add_argument("--limit", type=int, default=None,
                      help="use only the first N molecules (a quick run)")
    demo.add_argument("--data", default=None, metavar="CSV",
                      help="a SMILES,TPSA file instead of rdkit's first_5k.tpsa.csv")
    demo.add_argument("--plot", default=None, metavar="FILE.png",
                      help="write loss curves and the padding histogram here (default, "
                           f"where matplotlib is installed: {DEFAULT_PLOT})")
    demo.add_argument("--no-plot", action="store_true", help="write no plot")
    demo.add_argument("--explain", action="store_true",
                      help="print how each figure of the report is measured")
    demo.add_argument("--json", default=None, metavar="FILE",
                      help="also write every measured figure as JSON")
    demo.add_argument("--no-eager", action="store_true",
                      help="skip the eager PyG comparison run")
    demo.add_argument("--no-pyg-compile", action="store_true",
                      help="skip the third run, eager PyG's model under "
                           "torch.compile(dynamic=True) (PyG's compile route; its compiles are "
                           "most of the demo's time with a cold compile cache)")
    demo.add_argument("--train-rounds", type=int, default=d.train_rounds, metavar="N",
                      help=f"interleaved rounds timing every run's training step side by "
                           f"side, after every run has trained (0: the runs' own epochs); "
                           f"default {d.train_rounds}")
    demo.add_argument("--infer-rounds", type=int, default=d.infer_rounds, metavar="N",
                      help=f"interleaved rounds timing every run's inference over the test "
                           f"split side by side; default {d.infer_rounds} (--task node: "
                           f"{NodeDemoConfig.infer_rounds})")
    demo.add_argument("--precompile", action="store_true",
                      help="compile the adapter's model with precompile=True (inductor): "
                           "each graph's Dynamo result is saved beside inductor's cache, and "
                           "a later run with the same settings loads it instead of tracing "
                           "the model again (opt-in; docs/compile.md)")
    demo.add_argument("--background", action=argparse.BooleanOptionalAction, default=None,
                      help="compile(..., background=True): the adapter trains eagerly while a "
                           "child process compiles, then switches to the compiled program "
                           "(--no-background: the first step compiles; default: on with "
                           "inductor)")
    demo.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    demo.add_argument("--deterministic", action="store_true",
                      help="torch.use_deterministic_algorithms(True) for the run: the same "
                           "settings give the same figures (compiled code may run slower)")
    demo.add_argument("--quiet", action="store_true", help="no progress output")
    demo.add_argument("--task", choices=("graph", "node"), default="graph",
                      help="graph: the molecules (default); node: node classification on a "
                           "generated large graph with FixedSizeNeighborLoader "
                           "(graph_adapter.app.demo.node; --nodes sets its size)")
    demo.add_argument("--nodes", type=int, default=None, help="--task node: graph size")


def _err(cmd: str, msg: str) -> None:
    usage_error(f"{PROG} {cmd}", msg)


def _plot_path(args: argparse.Namespace) -> Optional[str]:
    """``--plot FILE``, else :data:`DEFAULT_PLOT` where matplotlib imports; ``None`` with
    ``--no-plot`` (a plot asked for explicitly without matplotlib fails in the demo, named)."""
    if args.no_plot:
        return None
    if args.plot:
        return args.plot
    return DEFAULT_PLOT if importlib.util.find_spec("matplotlib") is not None else None


def _run_demo(args: argparse.Namespace) -> int:
    if args.task == "node":
        from .demo.node import run_node_cli

        return run_node_cli(args)
    cfg = DemoConfig(epochs=args.epochs, batch_graphs=args.batch_graphs, seed=args.seed,
                     model=args.model, backend=args.backend, hidden=args.hidden,
                     layout=args.layout,
                     layers=args.layers, lr=args.lr, limit=args.limit, path=args.data,
                     eager_baseline=not args.no_eager, pyg_compile=not args.no_pyg_compile,
                     progress=not args.quiet,
                     plot=_plot_path(args), threads=args.threads,
                     deterministic=args.deterministic, explain=args.explain,
                     train_rounds=args.train_rounds, infer_rounds=args.infer_rounds,
                     precompile=args.precompile, background=args.background)
    if args.seeds < 1:
        _err("demo", f"--seeds {args.seeds}: give the number of seeds to run, at least 1")
        return EXIT_USAGE
    try:
        result = run_demo(cfg)
    except (ImportError, FileNotFoundError, DemoSettingError) as e:
        # a missing extra (MissingExtraError is an ImportError), backend module or
        # molecule file, or a bad setting: found before the slow work; the message says
        # what to do
        _err("demo", str(e))
        return EXIT_USAGE
    print(result.report())
    if args.seeds > 1:  # the other seeds for their test MAE only: no timed rounds, no plot
        more = [run_demo(dataclasses.replace(cfg, seed=cfg.seed + k, plot=None, train_rounds=0,
                                             infer_rounds=1))
                for k in range(1, args.seeds)]
        print("\n".join(seed_spread([result] + more)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result.as_dict(), f, indent=2, default=str)
    return 0


# --------------------------------------------------------------------------
def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``graph-adapter`` and ``python -m graph_adapter``; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "check":
        from .check_cli import check_main

        return int(check_main(argv[1:]) or 0)
    if argv and argv[0] == "export":
        from .export_cmd import export_main

        return int(export_main(argv[1:]) or 0)
    if argv and argv[0] == "serve":  # the serving runtime only
        from graph_adapter.serve import serve_main

        return int(serve_main(argv[1:]) or 0)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    if args.command == "demo":
        return _run_demo(args)
    parser.print_help()  # pragma: no cover
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
