"""Resident memory of FixedSizeLoader and PyG's DataLoader on many tiny graphs.

    python benchmarks/bench_memory.py [--graphs 100000] [--batch 64]

A thin entry point: the benchmark is :mod:`benchmarks.harness.memory`
(``python benchmarks/bench_all.py --only memory`` runs it too).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout

from benchmarks.harness.memory import main  # noqa: E402

if __name__ == "__main__":
    main()
