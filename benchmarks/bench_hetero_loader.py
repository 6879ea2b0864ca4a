"""FixedSizeHeteroNeighborLoader's modes side by side: workers, disjoint, PyG's sampler.

The graph and seeds are ``bench_large_graph.py --hetero``'s (100,000 papers, 50,000
authors, 400,000 ``writes`` + reverses, 1,000,000 ``cites``; 50,000 paper seeds,
``batch_size=512``, ``[10, 5]`` per edge type). Each mode's epoch is timed in
interleaved rounds in one process (wall seconds: the workers' CPU is not this
process's); fill and trims from ``loader.stats``. A check that the batches of
``num_workers=2`` equal those of ``num_workers=0`` runs on the first round.

Run: ``python benchmarks/bench_hetero_loader.py [--rounds 2 --threads 1]``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_large_graph import hetero_graph  # noqa: E402 (the --hetero section's graph)

from graph_adapter.sampling import FixedSizeHeteroNeighborLoader
from graph_adapter.sampling import pyg_sampler_backend

MODES = {  # name: loader keywords
    "ours, 0 workers": dict(),
    "ours, 2 workers": dict(num_workers=2),
    "ours, disjoint": dict(disjoint=True),
    "pyg sampler": dict(sampler="pyg"),
}


def _epoch(loader, keep: bool):
    t = time.perf_counter()
    kept = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trims: counted in loader.stats
        for flat in loader:
            if keep:
                kept.append(flat)
    return time.perf_counter() - t, kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{os.cpu_count()} cores, torch {torch.__version__} ({args.threads} threads), "
          f"load average at start {os.getloadavg()[0]:.2f}")
    h = hetero_graph(100_000, 50_000, 400_000, 1_000_000)
    seeds = torch.randperm(100_000, generator=torch.Generator().manual_seed(1))[:50_000]
    modes = dict(MODES)
    if pyg_sampler_backend() is None:
        print("pyg sampler: no pyg-lib / torch-sparse here: not measured")
        modes.pop("pyg sampler")
    loaders = {}
    for name, kw in modes.items():
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PyG: NeighborSampler without pyg-lib
            loaders[name] = FixedSizeHeteroNeighborLoader(h, [10, 5], 512,
                                                          input_nodes=("paper", seeds),
                                                          shuffle=True, **kw)
        print(f"{name:>16}: built in {time.perf_counter() - t:.2f} s, {loaders[name].budget}")
    times = {n: [] for n in loaders}
    for r in range(args.rounds):
        kept = {}
        for name, L in loaders.items():
            L.set_epoch(r)
            dt, kept[name] = _epoch(L, keep=r == 0 and "workers" in name)
            times[name].append(dt)
        if r == 0:
            a, b = kept["ours, 0 workers"], kept["ours, 2 workers"]
            same = len(a) == len(b) and all(
                fa.keys() == fb.keys() and all(torch.equal(fa[k], fb[k]) for k in fa)
                for fa, fb in zip(a, b))
            print(f"batches of 2 workers == batches of 0 workers (round 0): {same}")
    base = min(times["ours, 0 workers"])
    print(f"\n{'mode':>16} {'best epoch s':>12} {'seeds/s':>9} {'vs 0 workers':>12} "
          f"{'node fill':>9} {'edge fill':>9} {'trimmed':>8}")
    for name, L in loaders.items():
        best = min(times[name])
        st = L.stats
        print(f"{name:>16} {best:12.2f} {seeds.numel() / best:9.0f} {base / best:11.2f}x "
              f"{st.node_efficiency:9.3f} {st.edge_efficiency:9.3f} "
              f"{st.trimmed_batches:4d}/{st.batches}")
    print("all rounds (s): " + "; ".join(f"{n}: {', '.join(f'{t:.2f}' for t in ts)}"
                                          for n, ts in times.items()))
    print(f"load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
