"""Padding efficiency on rdkit's NCI molecules: our budgets and packers against
pad-to-max with a fixed graph count and PyG's DynamicBatchSampler.

    python benchmarks/bench_efficiency.py [--graphs 64 32] [--epochs 3]

A thin entry point: the benchmark is :mod:`benchmarks.harness.efficiency`
(``python benchmarks/bench_all.py`` runs it too).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout

from benchmarks.harness.efficiency import main  # noqa: E402

if __name__ == "__main__":
    main()
