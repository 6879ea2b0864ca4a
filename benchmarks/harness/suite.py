"""Every benchmark's headline figures in one markdown table (``python benchmarks/bench_all.py``).

Each benchmark module of this package (:mod:`.collate`, :mod:`.efficiency`,
:mod:`.throughput`...) is also a script of ``benchmarks/`` with a fuller report; here
:func:`run_suite` calls their public functions and keeps one row per headline figure.
A benchmark that fails is reported under the table ("not run: why") and the exit code
is 1.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import sys
import warnings
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

import graph_adapter as ga

from graph_adapter.app.datasets import MissingExtraError, load_nci5k, require_rdkit
from . import collate, efficiency, layout, memory, model_table as models, throughput

__all__ = ["BENCHMARKS", "Row", "run_suite", "main"]

#: one table row: benchmark, measure, graph_adapter, baseline, what the baseline is, ratio
Row = Tuple[str, str, str, str, str, str]


class _Molecules:
    """rdkit's NCI-5k molecules (without ``smiles``), a budget for 64 graphs a batch, and
    their sizes; loaded on first use and shared by the benchmarks that need them."""

    def __init__(self) -> None:
        self._loaded = None

    def get(self):
        """``(graphs, sizes, budget)``."""
        if self._loaded is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ds, _ = load_nci5k()
            for d in ds:
                del d.smiles
            self._loaded = (ds, ga.graph_sizes(ds), ga.Budget.fit(ds, 64))
        return self._loaded


def _collate_rows(data: _Molecules, quick: bool, verbose: bool) -> List[Row]:
    ds, _, budget = data.get()
    torch.set_num_threads(1)
    try:
        ours, base = collate.median_ms(ds, budget, 30 if quick else 300)
    finally:
        torch.set_num_threads(os.cpu_count() or 1)
    return [("collate", "ms per batch of 64 molecules (median, 1 thread)", f"{ours:.2f}",
             f"{base:.2f}", "Batch.from_data_list + pad", f"{base / ours:.1f}x faster")]


def _efficiency_rows(data: _Molecules, quick: bool, verbose: bool) -> List[Row]:
    ds, sizes, budget = data.get()
    epochs = 1 if quick else 3
    ours, _ = efficiency.ours(sizes, budget, "greedy", epochs)
    ptm, _, _ = efficiency.fixed_count(sizes, 64, epochs)
    dyn, dyn_shapes = efficiency.dynamic_sampler(ds, sizes, budget.max_real_nodes, epochs)
    node, edge = ours["node_efficiency"], ours["edge_efficiency"]
    return [
        ("padding", "node slots holding real nodes (64 graphs a batch)", f"{node:.1%}",
         f"{ptm['node_efficiency']:.1%}", "pad-to-max, 64 graphs",
         f"{node / ptm['node_efficiency']:.1f}x"),
        ("padding", "edge slots holding real edges", f"{edge:.1%}",
         f"{ptm['edge_efficiency']:.1%}", "pad-to-max, 64 graphs",
         f"{edge / ptm['edge_efficiency']:.1f}x"),
        ("padding", "node slots holding real nodes", f"{node:.1%}",
         f"{dyn['node_efficiency']:.1%}", "PyG DynamicBatchSampler", ""),
        ("compiles", "distinct batch shapes per epoch (= compiles)", "1", f"{dyn_shapes:.0f}",
         "PyG DynamicBatchSampler", ""),
    ]


def _throughput_rows(data: _Molecules, quick: bool, verbose: bool) -> List[Row]:
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            res = throughput.main(["--limit", "1000", "--repeats", "1"] if quick else [])
    finally:
        if verbose:
            print(buf.getvalue())
    return [
        ("throughput", "training step, graphs/s (inductor, padded)",
         f"{res['train_compiled']:,.0f}", f"{res['train_pyg']:,.0f}", "eager PyG, unpadded",
         f"{res['train_compiled'] / res['train_pyg']:.2f}x"),
        ("throughput", "inference, graphs/s (inductor, padded)",
         f"{res['inf_compiled']:,.0f}", f"{res['inf_pyg']:,.0f}", "eager PyG, unpadded",
         f"{res['inf_compiled'] / res['inf_pyg']:.2f}x"),
        ("throughput", "training epoch incl. loading, s", f"{res['epoch_fsl_compiled_s']:.2f}",
         f"{res['epoch_pyg_s']:.2f}", "PyG DataLoader + eager",
         f"{res['epoch_pyg_s'] / res['epoch_fsl_compiled_s']:.2f}x"),
        ("compiles", "compiles, train + eval (inductor)", str(res["compiles"]), "", "", ""),
        ("compiles", "compile time train / eval, s",
         f"{res['compile_train_s']:.0f} / {res['compile_eval_s']:.0f}", "", "", ""),
    ]


def _layout_rows(data: _Molecules, quick: bool, verbose: bool) -> List[Row]:
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            res = layout.main(["--limit", "1000", "--rounds", "1"] if quick else [])
    finally:
        if verbose:
            print(buf.getvalue())
    rows = []
    for mode, what in (("train", "training step"), ("infer", "inference")):
        for k, name in (("wrap_eager", "ipu_wrap eager, padded"),
                        ("wrap_eager_trim", "ipu_wrap eager, trim=True"),
                        ("wrap_inductor", "inductor, scatter"),
                        ("wrap_inductor_ell", "inductor, ELL layout"),
                        ("wrap_inductor_hyb", "inductor, HYB layout")):
            if k not in res[mode]:  # the layouts' inference is the scatter path's
                continue
            rows.append(("layout", f"{what}, graphs/s ({name})",
                         f"{res[mode][k]:,.0f}", f"{res[mode]['pyg']:,.0f}", "eager PyG, unpadded",
                         f"{res['ratios'][k][mode]:.2f}x"))
    return rows


def _models_rows(data: _Molecules, quick: bool, verbose: bool) -> List[Row]:
    """One row per model of :data:`models.MODELS` and mode, and the geomeans (1 thread)."""
    ds, _, budget = data.get()
    if quick:
        ds = ds[:256]
        budget = ga.Budget.fit(ds, 64)
    torch.set_num_threads(1)
    try:
        res = {name: models.measure_model(name, ds, budget, rounds=1 if quick else 5)
               for name in models.MODELS}
    finally:
        torch.set_num_threads(os.cpu_count() or 1)
    if verbose:
        print(models.table(res))
    rows: List[Row] = []
    for name, r in res.items():
        for mode, what in (("train", "training step"), ("infer", "inference")):
            rows.append(("models", f"{models.MODELS[name][0]}: {what}, graphs/s (inductor, 1 thread)",
                         f"{r[mode + '_ours']:,.0f}", f"{r[mode + '_pyg']:,.0f}",
                         "eager PyG, unpadded", f"{r[mode]:.2f}x"))
    for mode, what in (("train", "training"), ("infer", "inference")):
        rows.append(("models", f"geomean over the models, {what}", "", "", "eager PyG",
                     f"{models.geomean([r[mode] for r in res.values()]):.2f}x"))
    return rows


def _memory_rows(data: _Molecules, quick: bool, verbose: bool) -> List[Row]:
    n = 20_000 if quick else 100_000
    pyg, ours = memory.measure("pyg", n, 64), memory.measure("fixed", n, 64)
    return [("memory", f"RSS growth over one epoch of {n} tiny graphs, MiB "
             f"(columnar copy {ours['copy']:.1f})", f"{ours['epoch']:.1f}", f"{pyg['epoch']:.1f}",
             "PyG DataLoader", f"{ours['epoch'] / max(ours['copy'], 1e-9):.2f}x the copy")]


#: ``--only`` names -> (progress message, rows function)
BENCHMARKS: Dict[str, Tuple[str, Callable[[_Molecules, bool, bool], List[Row]]]] = {
    "collate": ("collate", _collate_rows),
    "efficiency": ("efficiency", _efficiency_rows),
    "memory": ("memory (two fresh processes)", _memory_rows),
    "throughput": ("throughput (inductor compiles: a few minutes)", _throughput_rows),
    "layout": ("aggregation layout, scatter vs ELL (inductor compiles: a few minutes)",
               _layout_rows),
    "models": ("models table: six GNNs, compiled vs eager PyG (inductor compiles: minutes)",
               _models_rows),
    "ddp": ("data parallel: 1 process against 2 under torchrun (1 thread each)",
            lambda data, quick, verbose: _ddp_rows(quick)),
    "million": ("a million graphs in an InMemoryDataset (two fresh processes)",
                lambda data, quick, verbose: _million_rows(quick)),
}


def _ddp_rows(quick: bool) -> List[Row]:
    from . import ddp

    r = ddp.measure(400 if quick else 2000, 2 if quick else 3)
    return [("ddp", "graphs/s training, 2 processes (DDP, gloo, 1 thread each)",
             f"{r['2']['graphs_per_s']:,.0f}", f"{r['1']['graphs_per_s']:,.0f}",
             "1 process, 1 thread", f"{r['ratio']:.2f}x")]


def _million_rows(quick: bool) -> List[Row]:
    from . import million

    n = 100_000 if quick else 1_000_000
    r = million.measure(n, 64, 100 if quick else 400)
    ours, pyg = r["ours"], r["pyg"]
    return [("million", f"Budget.fit + FixedSizeLoader, s ({n} graphs, InMemoryDataset)",
             f"{ours['fit_s'] + ours['build_s']:.2f}", "", "goal <= 10 s", ""),
            ("million", "epoch, graphs/s", f"{ours['graphs_per_s']:,.0f}",
             f"{pyg['graphs_per_s']:,.0f}", "PyG DataLoader",
             f"{ours['graphs_per_s'] / pyg['graphs_per_s']:.1f}x"),
            ("million", "RSS growth after the epoch / dataset tensors",
             f"{ours['rss_epoch_mib'] / ours['dataset_mib']:.1%}", "", "goal <= 20%", "")]


def _print_table(rows: List[Row], quick: bool) -> None:
    print(f"\ngraph_adapter benchmarks{' (--quick)' if quick else ''}: {platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}, "
          f"data: rdkit's NCI first_5k molecules\n")
    head = ("benchmark", "measure", "graph_adapter", "baseline", "baseline is", "ratio")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")


def run_suite(only: Optional[Sequence[str]] = None, quick: bool = False,
              verbose: bool = False) -> int:
    """Run the benchmarks named in ``only`` (default: all of :data:`BENCHMARKS`), print
    one table; returns the exit code (0, 1 if a benchmark failed).

    ``quick``: fewer repeats and molecules (a smoke run). ``verbose``: also
    print the throughput benchmark's own report. Raises ``ValueError`` for an
    unknown name.
    """
    names = list(BENCHMARKS) if not only else list(only)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise ValueError(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")
    data = _Molecules()
    rows: List[Row] = []
    failed: List[Tuple[str, str]] = []
    for name in names:
        message, rows_of = BENCHMARKS[name]
        print(f"running {message} ...", file=sys.stderr, flush=True)
        try:
            rows += rows_of(data, quick, verbose)
        except Exception as e:  # noqa: BLE001  (reported under the table, exit code 1)
            failed.append((name, f"{type(e).__name__}: {e}"))
    _print_table(rows, quick)
    for name, why in failed:
        print(f"\n{name}: not run: {why}")
    return 1 if failed else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python benchmarks/bench_all.py [--only NAME ...] [--quick] [--verbose]``: the
    exit code of :func:`run_suite` (2 for an unknown name or without rdkit)."""
    ap = argparse.ArgumentParser(
        prog="python benchmarks/bench_all.py",
        description="Run graph_adapter's benchmarks (collate speed, padding efficiency against "
                    "pad-to-max and PyG's DynamicBatchSampler, compiles per epoch, step and "
                    "epoch throughput against eager PyG...) and print one table.")
    ap.add_argument("--only", nargs="*", default=None, metavar="NAME",
                    help="benchmarks to run (default: all): " + ", ".join(BENCHMARKS))
    ap.add_argument("--quick", action="store_true",
                    help="fewer repeats and molecules (a smoke run; figures are noisier)")
    ap.add_argument("--verbose", action="store_true",
                    help="also print the throughput benchmark's own output")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.only or ()) - set(BENCHMARKS))
    if unknown:
        ap.error(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")
    try:
        require_rdkit()  # the molecules most benchmarks run on
    except MissingExtraError as e:
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 2
    return run_suite(args.only, quick=args.quick, verbose=args.verbose)
