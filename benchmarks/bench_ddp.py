"""Data-parallel throughput: 1 process against 2 under torchrun, 1 thread each.

    python benchmarks/bench_ddp.py [--graphs 2000] [--epochs 3] [--backend eager]

A thin entry point: the benchmark is :mod:`benchmarks.harness.ddp`
(``python benchmarks/bench_all.py --only ddp`` runs it too).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout

from benchmarks.harness.ddp import main  # noqa: E402

if __name__ == "__main__":
    main()
