"""Resident memory of the loaders on many tiny graphs, side by side.

    python benchmarks/bench_memory.py [--graphs 100000] [--batch 64]

Each loader runs in a fresh process: the dataset (``--graphs`` graphs of 3-6
nodes) is built first; then the same loader runs once on the first 100
graphs (the first loader of a process pages in code and sets up torch's
kernels, a few MiB once per process that do not grow with the data: printed
as "first use"), the heap's free pages are handed back to the OS (glibc's
``malloc_trim``, so that neither loader can hide growth in pages freed while
building the dataset), and the resident set size (RSS, from
``/proc/self/statm``) is read before building the loader, after building it
and after one full epoch.  The table prints the growth next to the size of
the ``FixedSizeLoader``'s columnar copy (the bytes of its columns), which is
the memory it needs by design: the goal is the copy plus at most 20%
(``ours / copy <= 1.2``).  All ratios come from this one run.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
from typing import Dict, Optional, Sequence

__all__ = ["rss_mib", "measure", "main"]

#: Graphs of the first-use run (not measured as growth).
_WARM = 100


def rss_mib() -> float:
    """This process's resident set size in MiB (Linux)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def trim_heap() -> None:
    """Hand the heap's free pages back to the OS (glibc; a no-op elsewhere)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _dataset(n: int):
    import torch
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        k = 3 + i % 4
        out.append(Data(x=torch.randn(k, 4, generator=g),
                        edge_index=torch.randint(0, k, (2, 2 * k), generator=g),
                        y=torch.randn(1, generator=g)))
    return out


def _loader(kind: str, ds, batch: int):
    import graph_adapter as ga

    if kind == "pyg":
        from torch_geometric.loader import DataLoader

        return DataLoader(ds, batch_size=batch)
    budget = ga.Budget.tight(ds[:2000], batch)
    return ga.FixedSizeLoader(ds, budget)


def _run(kind: str, n: int, batch: int, q) -> None:
    """In a fresh process: RSS growth of one loader over one epoch."""
    import gc

    import torch

    torch.set_num_threads(1)

    ds = _dataset(n)
    gc.collect()
    trim_heap()
    cold = rss_mib()
    for _ in _loader(kind, ds[:_WARM], batch):  # first use: code, not data
        pass
    gc.collect()
    trim_heap()
    before = rss_mib()
    copy_mib = 0.0
    loader = _loader(kind, ds, batch)
    if kind != "pyg":
        copy_mib = sum(v.numel() * v.element_size()
                       for v in loader.collator.scan.columns.values()) / 2**20
    built = rss_mib()
    for _ in loader:
        pass
    gc.collect()
    q.put({"kind": kind, "first_use": before - cold, "built": built - before,
           "epoch": rss_mib() - before, "copy": copy_mib})


def measure(kind: str, n: int, batch: int) -> Dict[str, float]:
    """RSS growth (MiB) of ``kind`` ("pyg" or "fixed") in a fresh process:
    ``built`` (after construction), ``epoch`` (after one epoch), ``copy`` (the
    columnar copy, 0 for PyG) and ``first_use`` (the one-off cost of the first
    loader of the process, measured on 100 graphs before the others)."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_run, args=(kind, n, batch, q))
    p.start()
    res = q.get()
    p.join()
    return res


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args(argv)
    pyg = measure("pyg", args.graphs, args.batch)
    fixed = measure("fixed", args.graphs, args.batch)
    copy = max(fixed["copy"], 1e-9)
    print(f"\n# resident memory growth, {args.graphs} graphs of 3-6 nodes, batches of "
          f"{args.batch} (fresh process each; columnar copy {fixed['copy']:.1f} MiB)")
    print("| loader | first use (MiB, once) | after building (MiB) | after one epoch (MiB) | "
          "epoch / columnar copy |")
    print("|---|---:|---:|---:|---:|")
    for name, r in (("PyG DataLoader", pyg), ("FixedSizeLoader", fixed)):
        print(f"| {name} | {r['first_use']:.1f} | {r['built']:.1f} | {r['epoch']:.1f} | "
              f"{r['epoch'] / copy:.2f}x |")
    print(f"FixedSizeLoader: {fixed['epoch'] / copy:.2f}x its columnar copy (goal <= 1.20x), "
          f"{fixed['epoch'] - pyg['epoch']:+.1f} MiB against PyG DataLoader "
          f"({fixed['epoch'] - fixed['copy']:.1f} MiB beyond the copy)")


if __name__ == "__main__":
    main()
