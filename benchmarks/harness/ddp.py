"""Data-parallel throughput: 1 process against 2, each at 1 thread, under ``torchrun``.

Runs :mod:`graph_adapter.app.ddp` (a GIN on synthetic graphs, ``FixedSizeLoader``
sharding, DDP on gloo) with ``--nproc_per_node 1`` and then ``2``, one thread a
process, and reads each rank's report. Throughput is over the epochs after the
first (the first pays the compile, if any): the real graphs all ranks trained,
divided by the slowest rank's time. On a 2-core machine the two ranks share the
cores with nothing else of theirs; on a busy machine the ratio says more about
the load than about DDP.

``python benchmarks/bench_ddp.py [--graphs 2000] [--epochs 3] [--backend eager]``;
``python benchmarks/bench_all.py --only ddp``.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence

__all__ = ["measure", "main"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(nproc: int, graphs: int, epochs: int, per_batch: int, backend: str) -> List[Dict]:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
               "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
               "-m", "graph_adapter.app.ddp", "--graphs", str(graphs), "--epochs", str(epochs),
               "--graphs-per-batch", str(per_batch), "--backend", backend, "--out", out]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"torchrun --nproc_per_node {nproc} failed:\n{done.stderr[-3000:]}")
        return [json.loads(open(os.path.join(out, f"rank{r}.json")).read()) for r in range(nproc)]


def _rate(reports: List[Dict]) -> Dict[str, Any]:
    """Graphs/s of a job over its epochs after the first."""
    graphs = sum(sum(r["epoch_graphs"][1:]) for r in reports)
    seconds = max(sum(r["epoch_s"][1:]) for r in reports)
    return {"graphs_per_s": graphs / seconds, "graphs": graphs, "seconds": seconds,
            "steps_per_rank": reports[0]["steps"], "compiles": reports[0]["compiles"]}


def measure(graphs: int = 2000, epochs: int = 3, per_batch: int = 64,
            backend: str = "eager") -> Dict[str, Any]:
    """``{"1": rate, "2": rate, "ratio": 2-process / 1-process graphs/s}``."""
    if epochs < 2:
        raise ValueError("epochs >= 2: the first epoch (the compile) is left out")
    one, two = (_rate(_run(n, graphs, epochs, per_batch, backend)) for n in (1, 2))
    return {"1": one, "2": two, "ratio": two["graphs_per_s"] / one["graphs_per_s"],
            "backend": backend, "graphs": graphs, "epochs": epochs, "per_batch": per_batch}


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", type=int, default=2000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--graphs-per-batch", type=int, default=64)
    ap.add_argument("--backend", default="eager")
    a = ap.parse_args(argv)
    r = measure(a.graphs, a.epochs, a.graphs_per_batch, a.backend)
    print(f"DDP on gloo, {a.graphs} synthetic graphs, {a.graphs_per_batch} a batch a rank, "
          f"backend {a.backend!r}, 1 thread a process, epochs 2-{a.epochs}:")
    for n in ("1", "2"):
        x = r[n]
        print(f"  {n} process(es): {x['graphs_per_s']:8.0f} graphs/s ({x['graphs']} graphs in "
              f"{x['seconds']:.2f} s, {x['steps_per_rank']} steps a rank)")
    print(f"  2 processes / 1: {r['ratio']:.2f}x")
    return r


if __name__ == "__main__":
    main()
