"""Resident memory of the loaders on many tiny graphs, side by side.

    python -m graph_adapter.app.bench.memory [--graphs 100000] [--batch 64]

Each loader runs in a fresh process: the dataset (``--graphs`` graphs of 3-6
nodes) is built first, then the resident set size (RSS, from
``/proc/self/statm``) is read before building the loader and after one full
epoch.  The table prints the growth next to the size of the
``FixedSizeLoader``'s columnar copy (the bytes of its columns), which is the
memory it needs by design; the goal is the copy plus at most 20%.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
from typing import Dict, Optional, Sequence

__all__ = ["rss_mib", "measure", "main"]


def rss_mib() -> float:
    """This process's resident set size in MiB (Linux)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


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


def _run(kind: str, n: int, batch: int, q) -> None:
    """In a fresh process: RSS growth of one loader over one epoch."""
    import gc

    import torch

    torch.set_num_threads(1)
    import graph_adapter as ga

    ds = _dataset(n)
    gc.collect()
    before = rss_mib()
    copy_mib = 0.0
    if kind == "pyg":
        from torch_geometric.loader import DataLoader

        loader = DataLoader(ds, batch_size=batch)
    else:
        budget = ga.Budget.tight(ds[:2000], batch)
        loader = ga.FixedSizeLoader(ds, budget)
        copy_mib = sum(v.numel() * v.element_size()
                       for v in loader.collator.scan.columns.values()) / 2**20
    built = rss_mib()
    for _ in loader:
        pass
    gc.collect()
    q.put({"kind": kind, "built": built - before, "epoch": rss_mib() - before,
           "copy": copy_mib})


def measure(kind: str, n: int, batch: int) -> Dict[str, float]:
    """RSS growth (MiB) of ``kind`` ("pyg" or "fixed") in a fresh process."""
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
    print(f"\n# resident memory growth, {args.graphs} graphs of 3-6 nodes, batches of "
          f"{args.batch} (fresh process each)")
    print("| loader | after building (MiB) | after one epoch (MiB) | vs columnar copy |")
    print("|---|---:|---:|---:|")
    print(f"| PyG DataLoader | {pyg['built']:.1f} | {pyg['epoch']:.1f} | |")
    ratio = fixed["epoch"] / max(fixed["copy"], 1e-9)
    print(f"| FixedSizeLoader (columnar copy {fixed['copy']:.1f} MiB) | {fixed['built']:.1f} | "
          f"{fixed['epoch']:.1f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
