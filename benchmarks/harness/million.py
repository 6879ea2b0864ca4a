"""A million small graphs in a PyG ``InMemoryDataset``: set-up time, memory, epoch speed.

    python benchmarks/bench_million.py [--graphs 1000000] [--batch 64]
                                               [--pyg-batches 400]

The dataset: ``--graphs`` graphs repeating 16 synthetic molecule-like graphs
(4-20 nodes, float features ``[N, 8]``, edge features ``[E, 4]``, a graph
label), collated once with ``InMemoryDataset.collate``.  Each loader runs in a
fresh process that builds the dataset first, hands the heap's free pages back
to the OS (``malloc_trim``), then reads its resident set size (RSS) before the
loader and after it:

* ``FixedSizeLoader``: ``Budget.fit`` + construction time (read off the
  dataset's slices and storage, no per-graph Python), RSS growth after
  construction and after one full epoch, and the epoch's graphs/s;
* PyG's ``DataLoader`` (``batch_size=--batch``): graphs/s over the first
  ``--pyg-batches`` batches (a full epoch takes minutes) and the RSS growth
  over them (PyG's ``InMemoryDataset`` caches every graph it hands out).

The ratios printed side by side are from this one run.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import time
from typing import Dict

__all__ = ["build_dataset", "dataset_mib", "measure", "main"]


def build_dataset(n: int):
    """An ``InMemoryDataset`` of ``n`` graphs cycling through 16 templates."""
    import torch
    from torch_geometric.data import Data, InMemoryDataset

    g = torch.Generator().manual_seed(0)
    templates = []
    for t in range(16):
        k = 4 + (t * 7) % 17
        ring = torch.arange(k)
        # a chain closed into a ring plus a few chords, both directions (molecule-like)
        src = torch.cat([ring, torch.randint(0, k, (t % 4,), generator=g)])
        dst = torch.cat([(ring + 1) % k, torch.randint(0, k, (t % 4,), generator=g)])
        ei = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
        templates.append(Data(x=torch.randn(k, 8, generator=g), edge_index=ei,
                              edge_attr=torch.randn(ei.shape[1], 4, generator=g),
                              y=torch.randn(1, generator=g)))

    class Million(InMemoryDataset):
        def __init__(self):
            super().__init__(None)
            self.data, self.slices = self.collate([templates[i % 16] for i in range(n)])

    return Million()


def dataset_mib(ds) -> float:
    """The bytes of the dataset's own tensors (storage and slices), in MiB."""
    import torch
    from graph_adapter.format.pyg import global_store, in_memory_data

    own = [v for v in global_store(in_memory_data(ds)).values() if isinstance(v, torch.Tensor)]
    own += list(ds.slices.values())
    return sum(t.numel() * t.element_size() for t in own) / 2**20


def _run(kind: str, n: int, batch: int, pyg_batches: int, q) -> None:
    """In a fresh process: one loader's set-up, memory and speed."""
    import gc

    import torch

    from .memory import rss_mib, trim_heap

    torch.set_num_threads(1)
    import graph_adapter as ga

    ds = build_dataset(n)
    gc.collect()
    out: Dict[str, float] = {"dataset_mib": dataset_mib(ds)}
    trim_heap()  # no free heap pages left from building the dataset to hide growth in
    before = rss_mib()
    if kind == "pyg":
        from torch_geometric.loader import DataLoader

        loader = DataLoader(ds, batch_size=batch, shuffle=True)
        t0 = time.perf_counter()
        graphs = 0
        for i, b in enumerate(loader):
            graphs += b.num_graphs
            if i + 1 == pyg_batches:
                break
        out["graphs_per_s"] = graphs / (time.perf_counter() - t0)
        out["rss_epoch_mib"] = rss_mib() - before
    else:
        t0 = time.perf_counter()
        budget = ga.Budget.fit(ds, batch)
        t1 = time.perf_counter()
        loader = ga.FixedSizeLoader(ds, budget, shuffle=True)
        t2 = time.perf_counter()
        out.update(fit_s=t1 - t0, build_s=t2 - t1, rss_built_mib=rss_mib() - before,
                   from_storage=float(loader.collator.scan.from_storage))
        t0 = time.perf_counter()
        graphs = 0
        for b in loader:
            graphs += int(b["graph_mask"].sum())
        out["graphs_per_s"] = graphs / (time.perf_counter() - t0)
        out["epoch_graphs"] = graphs
        out["rss_epoch_mib"] = rss_mib() - before
    q.put(out)


def measure(n: int = 1_000_000, batch: int = 64, pyg_batches: int = 400
            ) -> Dict[str, Dict[str, float]]:
    """``{"ours": {...}, "pyg": {...}}``, each measured in a fresh process."""
    ctx = mp.get_context("spawn")
    res = {}
    for kind in ("ours", "pyg"):
        q = ctx.Queue()
        p = ctx.Process(target=_run, args=(kind, n, batch, pyg_batches, q))
        p.start()
        res[kind] = q.get()
        p.join()
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graphs", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--pyg-batches", type=int, default=400)
    a = ap.parse_args(argv)
    r = measure(a.graphs, a.batch, a.pyg_batches)
    ours, pyg = r["ours"], r["pyg"]
    ds = ours["dataset_mib"]
    print(f"{a.graphs} graphs, dataset tensors {ds:.0f} MiB, {a.batch} graphs a batch, "
          f"1 thread")
    print(f"Budget.fit {ours['fit_s']:.2f} s + FixedSizeLoader {ours['build_s']:.2f} s = "
          f"{ours['fit_s'] + ours['build_s']:.2f} s (goal <= 10 s; read off the storage: "
          f"{bool(ours['from_storage'])})")
    print("| loader | graphs/s | RSS growth | growth / dataset |")
    print("|---|---:|---:|---:|")
    print(f"| FixedSizeLoader, after construction | | {ours['rss_built_mib']:.0f} MiB | "
          f"{ours['rss_built_mib'] / ds:.1%} |")
    print(f"| FixedSizeLoader, full epoch ({ours['epoch_graphs']:.0f} graphs) | "
          f"{ours['graphs_per_s']:.0f} | {ours['rss_epoch_mib']:.0f} MiB | "
          f"{ours['rss_epoch_mib'] / ds:.1%} |")
    print(f"| PyG DataLoader, first {a.pyg_batches} batches | {pyg['graphs_per_s']:.0f} | "
          f"{pyg['rss_epoch_mib']:.0f} MiB | {pyg['rss_epoch_mib'] / ds:.1%} |")
    print(f"epoch speed: FixedSizeLoader {ours['graphs_per_s'] / pyg['graphs_per_s']:.1f}x "
          f"PyG DataLoader (goal >= 5x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
