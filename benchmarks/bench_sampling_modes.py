"""The neighbour sampler's modes side by side: untimed, temporal, weighted, bidirectional.

One random graph (``--nodes`` nodes, ``--degree`` in-edges a node on average, node
times and edge times uniform in ``[0, 1000)``, edge weights uniform in ``[0, 1)``),
seeds ``--batch`` random nodes a sample, fanouts ``[10, 5]``. Each mode samples the
same seed batches (``sample_neighbors`` straight, no padding) in interleaved rounds
at one torch thread; the table gives milliseconds a sample and the ratio to the
untimed sampler (the Floyd-subset fast path). Temporal and weighted sampling take
the keyed path (every in-edge of the frontier is a candidate, a gather of its time
or weight and sorts of the candidates), so their cost grows with the frontier's
in-degree rather than with the fanout. The temporal rows also print the mean
sampled nodes, which the time filter lowers (seed times uniform over the span).

Run: ``python benchmarks/bench_sampling_modes.py [--nodes 100000 --degree 10 --rounds 3]``.
"""
from __future__ import annotations

import argparse
import time
from typing import Dict

import torch

from graph_adapter.sampling import CSC, sample_neighbors


def _modes(g: Dict[str, torch.Tensor]) -> Dict[str, dict]:
    return {
        "untimed (uniform, disjoint=False)": dict(),
        "untimed, disjoint": dict(disjoint=True),
        "node time, uniform": dict(node_time=g["node_time"]),
        "node time, last": dict(node_time=g["node_time"], temporal_strategy="last"),
        "edge time, uniform": dict(edge_time=g["edge_time"], seed_time=None),
        "weighted": dict(edge_weight=g["weight"]),
        "weighted, replace": dict(edge_weight=g["weight"], replace=True),
        "bidirectional": dict(subgraph_type="bidirectional"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--degree", type=int, default=10)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    N, E = args.nodes, args.nodes * args.degree
    ei = torch.randint(0, N, (2, E), generator=gen)
    g = dict(node_time=torch.randint(0, 1000, (N,), generator=gen),
             edge_time=torch.randint(0, 1000, (E,), generator=gen),
             weight=torch.rand(E, generator=gen))
    csc = CSC.from_edge_index(ei, N)
    batches = [torch.randperm(N, generator=gen)[:args.batch] for _ in range(args.samples)]
    times = [torch.randint(0, 1000, (args.batch,), generator=gen) for _ in batches]
    modes = _modes(g)
    best = {m: float("inf") for m in modes}
    nodes = {m: 0.0 for m in modes}
    for _ in range(args.rounds):
        for m, kw in modes.items():
            t = time.perf_counter()
            total = 0
            for i, seeds in enumerate(batches):
                k = dict(kw)
                if "seed_time" in k:
                    k["seed_time"] = times[i]
                s = sample_neighbors(csc, seeds, [10, 5], generator=torch.Generator()
                                     .manual_seed(i), **k)
                total += s.num_nodes
            best[m] = min(best[m], (time.perf_counter() - t) / len(batches))
            nodes[m] = total / len(batches)
    base = best["untimed (uniform, disjoint=False)"]
    print(f"graph: {N} nodes, {E} edges; {args.batch} seeds a sample, [10, 5]; "
          f"best of {args.rounds} rounds, 1 thread")
    print(f"{'mode':<36}{'ms / sample':>12}{'x untimed':>11}{'nodes':>9}")
    for m in modes:
        print(f"{m:<36}{best[m] * 1e3:>12.2f}{best[m] / base:>11.2f}{nodes[m]:>9.0f}")


if __name__ == "__main__":
    main()
