"""Cluster-GCN on the SBM graph: METIS (pymetis) vs a random partition, side by side.

The graph is ``bench_large_graph.py``'s (``sbm_graph(100_000, 10, 10.0, 0.8, 0.15,
32, 0)``: ~2M directed edges). For each partitioner: its time (CPU and wall), the
edge cut (undirected edges between parts, :func:`graph_adapter.sampling.cluster.edge_cut`),
and over one epoch of ``FixedSizeClusterLoader`` the slot fill (real node / edge slots
over the budget's) and the share of the graph's edges that are in some batch
(Cluster-GCN trains on those only). Ratios METIS / random printed at the end.

Run: ``python benchmarks/bench_cluster.py [--parts 200 --batch-size 4 --threads 1]``.
"""
from __future__ import annotations

import argparse
import os
import platform
import time
import warnings

import torch

from graph_adapter.app.demo.node import sbm_graph  # the generator bench_large_graph.py uses
from graph_adapter.sampling.cluster import (FixedSizeClusterLoader, edge_cut, metis_available,
                                        metis_csr)


def _epoch(loader: FixedSizeClusterLoader) -> dict:
    """One epoch's fill and edge coverage, and its CPU seconds."""
    t = time.process_time()
    edges = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a trimmed batch is counted in loader.stats
        for flat in loader:
            edges += int(flat["edge_mask"].sum())
    st = loader.stats
    return dict(node_fill=st.node_efficiency, edge_fill=st.edge_efficiency, edges=edges,
                trimmed=st.trimmed_edges, batches=st.batches, cpu=time.process_time() - t)


def _run(data, name: str, parts: int, bs: int, seed: int) -> dict:
    t, w = time.process_time(), time.perf_counter()
    if name == "random":
        g = torch.Generator().manual_seed(seed + 1)
        part = torch.randint(0, parts, (data.num_nodes,), generator=g)
        L = FixedSizeClusterLoader(data, batch_size=bs, partition=part, shuffle=True, seed=seed)
        cut = edge_cut(data.edge_index, data.num_nodes, part)
    else:
        L = FixedSizeClusterLoader(data, num_parts=parts, batch_size=bs, shuffle=True,
                                   seed=seed, metis_backend=name)
        cut = L.edge_cut
    build_cpu, build_wall = time.process_time() - t, time.perf_counter() - w
    out = dict(name=L.partitioner if name != "random" else "random", cut=cut,
               partition_s=L.partition_seconds, build_cpu=build_cpu, build_wall=build_wall,
               budget=str(L.budget), parts=L.num_parts)
    out.update(_epoch(L))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--parts", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=4, help="clusters per batch")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backend", default="pymetis", help="METIS backend (METIS_BACKENDS)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__} ({args.threads} threads), load average at start "
          f"{os.getloadavg()[0]:.2f}")
    ok, why = metis_available(args.backend)
    if not ok:
        raise SystemExit(f"METIS backend {args.backend!r} is not available: {why}")
    data = sbm_graph(args.nodes, 10, 10.0, 0.8, 0.15, 32, 0)
    M = metis_csr(data.edge_index, data.num_nodes)[1].numel() // 2
    print(f"SBM: {data.num_nodes} nodes, {data.num_edges} directed edges ({M} undirected), "
          f"10 blocks (80% of edges inside); {args.parts} parts, {args.batch_size} per batch")
    rows = [_run(data, n, args.parts, args.batch_size, args.seed)
            for n in (args.backend, "random")]
    print(f"\n{'partition':>12} {'part. s':>8} {'build cpu s':>11} {'edge cut':>10} "
          f"{'cut %':>6} {'node fill':>9} {'edge fill':>9} {'edges in a batch':>16} "
          f"{'epoch cpu s':>11}  budget")
    for r in rows:
        print(f"{r['name']:>12} {r['partition_s']:8.2f} {r['build_cpu']:11.2f} {r['cut']:10d} "
              f"{100 * r['cut'] / M:6.1f} {r['node_fill']:9.3f} {r['edge_fill']:9.3f} "
              f"{r['edges'] / data.num_edges:16.3f} {r['cpu']:11.2f}  {r['budget']} "
              f"({r['parts']} parts, {r['batches']} batches, {r['trimmed']} edges trimmed)")
    m, rnd = rows
    print(f"\nMETIS / random: edge cut {m['cut'] / rnd['cut']:.3f}x, edges in a batch "
          f"{m['edges'] / max(rnd['edges'], 1):.2f}x, node fill "
          f"{m['node_fill'] / rnd['node_fill']:.3f}x, edge fill "
          f"{m['edge_fill'] / rnd['edge_fill']:.3f}x")
    print(f"load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
