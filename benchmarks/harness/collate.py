"""Padded collate vs ``Batch.from_data_list`` + padding, side by side.

    python benchmarks/bench_collate.py [--graphs 64] [--repeats 300]

Not a test: prints times and ratios measured in the same process, interleaved
(round robin), medians over repeats.  Goal: >= 10x faster than
``Batch.from_data_list`` + padding for 64 molecule-sized graphs.
:func:`median_ms` is the figure ``python benchmarks/bench_all.py`` shows.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import warnings
from typing import List, Optional, Sequence, Tuple

import torch

import graph_adapter as ga

from graph_adapter.app.datasets import load_nci5k

__all__ = ["pyg_collate_and_pad", "random_batches", "median_ms", "run", "main"]


def pyg_collate_and_pad(data_list, budget):
    """The baseline: PyG's collate, then pad every tensor to the budget
    (same padding convention, same output keys)."""
    from torch_geometric.data import Batch

    b = Batch.from_data_list(data_list, exclude_keys=["smiles"])
    N, E, G = budget.nodes, budget.edges, budget.graphs
    n, e, g = b.num_nodes, b.num_edges, b.num_graphs
    out = {}
    out["x"] = torch.cat([b.x, b.x.new_zeros((N - n,) + b.x.shape[1:])])
    out["edge_attr"] = torch.cat([b.edge_attr, b.edge_attr.new_zeros((E - e,) +
                                                                    b.edge_attr.shape[1:])])
    out["edge_index"] = torch.cat([b.edge_index, b.edge_index.new_full((2, E - e), N - 1)], 1)
    out["y"] = torch.cat([b.y, b.y.new_full((G - g,) + b.y.shape[1:], float("nan"))])
    # padding nodes: one per padding graph slot while they last, the rest in G - 1
    ones = max(0, min(G - 1 - g, N - n - 1))
    counts = torch.tensor([1] * ones + [0] * (G - 1 - g - ones) + [N - n - ones])
    out["batch"] = torch.cat([b.batch, torch.repeat_interleave(torch.arange(g, G), counts)])
    out["ptr"] = torch.cat([b.ptr, n + counts.cumsum(0)])
    out["node_mask"] = torch.arange(N) < n
    out["edge_mask"] = torch.arange(E) < e
    out["graph_mask"] = torch.arange(G) < g
    return out


def main(argv: Optional[Sequence[str]] = None) -> None:
    """``python benchmarks/bench_collate.py [options]``: print the tables (see the module doc)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--graphs", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=1,
                    help="repeat the whole round robin; the table shows the median of the "
                         "per-run medians and their range")
    ap.add_argument("--budgets", default="fit,tight")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds, _ = load_nci5k()
        budgets = {"fit": ga.Budget.fit(ds, args.graphs), "tight": ga.Budget.tight(ds, args.graphs)}
    for label, budget in budgets.items():
        if label in args.budgets.split(","):
            run(ds, budget, label, args)


def run(ds, budget, label: str, args: argparse.Namespace) -> None:
    """Time the three collates on ``args.repeats`` random batches of ``args.graphs``
    graphs that fit ``budget``; print one markdown table."""
    col = ga.Collator(ds, budget, warn=False)
    lst = ga.Collator(ds, budget, columnar=False, warn=False)
    k = args.graphs
    batches = random_batches(col.sizes.matrix, budget, args.repeats, k)
    # sanity: same real rows
    a = col.collate_indices(batches[0])
    ref = pyg_collate_and_pad([ds[i] for i in batches[0]], budget)
    for key in ref:
        assert torch.equal(a[key].nan_to_num(), ref[key].nan_to_num()), key
    fns = {
        "Batch.from_data_list + pad": lambda idx: pyg_collate_and_pad([ds[i] for i in idx], budget),
        "Collator.collate (list of Data)": lambda idx: lst.collate([ds[i] for i in idx]),
        "Collator.collate_indices (columnar)": lambda idx: col.collate_indices(idx),
    }
    meds = {name: [] for name in fns}
    for _ in range(args.runs):
        times = {name: [] for name in fns}
        for idx in batches[:20]:  # warm up
            for f in fns.values():
                f(idx)
        for idx in batches:
            for name, f in fns.items():  # round robin: same conditions for all
                t0 = time.perf_counter()
                f(idx)
                times[name].append(time.perf_counter() - t0)
        for name in fns:
            meds[name].append(statistics.median(times[name]))
    base = statistics.median(meds["Batch.from_data_list + pad"])
    print(f"\n# padded collate, {k} NCI molecules a batch, Budget.{label}: {budget.nodes} "
          f"nodes / {budget.edges} edges / {budget.graphs} graphs")
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"torch {torch.__version__}, {args.threads} thread(s), median of {args.repeats} "
          f"batches a run, {args.runs} run(s)")
    print("| collate | median ms | speed-up vs PyG + pad | per-run speed-ups |")
    print("|---|---:|---:|---|")
    base_runs = meds["Batch.from_data_list + pad"]
    for name, ms in meds.items():
        m = statistics.median(ms)
        per = ", ".join(f"{b / x:.1f}" for b, x in zip(base_runs, ms))
        print(f"| {name} | {m * 1e3:.3f} | {base / m:.1f}x | {per} |")


def random_batches(sizes, budget, count: int, k: int, seed: int = 0) -> List[List[int]]:
    """``count`` random batches of ``k`` graph indices whose sizes fit ``budget``.

    ``sizes`` is the ``[num_graphs, 2]`` (nodes, edges) matrix of ``GraphSizes``;
    the budget keeps two padding nodes and its last graph slot for padding.
    """
    g = torch.Generator().manual_seed(seed)
    batches: List[List[int]] = []
    while len(batches) < count:
        idx = torch.randperm(len(sizes), generator=g)[:k].tolist()
        n, e = sizes[idx].sum(axis=0)
        if n <= budget.max_real_nodes and e <= budget.edges:
            batches.append(idx)
    return batches


def median_ms(ds, budget, repeats: int) -> Tuple[float, float]:
    """Median ms of the loader's columnar collate and of ``Batch.from_data_list`` + pad.

    Batches of ``min(budget.graphs - 1, 64)`` random graphs (``repeats`` of
    them, after 5 warm-up batches), timed one after the other on each batch.
    """
    col = ga.Collator(ds, budget)
    batches = random_batches(col.sizes.matrix, budget, repeats, min(budget.graphs - 1, 64))
    ours, base = [], []
    for idx in batches[:5]:
        col.collate_indices(idx)
        pyg_collate_and_pad([ds[i] for i in idx], budget)
    for idx in batches:
        t0 = time.perf_counter()
        pyg_collate_and_pad([ds[i] for i in idx], budget)
        t1 = time.perf_counter()
        col.collate_indices(idx)
        t2 = time.perf_counter()
        base.append(t1 - t0)
        ours.append(t2 - t1)
    return statistics.median(ours) * 1e3, statistics.median(base) * 1e3
