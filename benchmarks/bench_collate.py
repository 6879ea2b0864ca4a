"""Padded collate vs ``Batch.from_data_list`` + padding, side by side.

    python benchmarks/bench_collate.py [--graphs 64] [--repeats 300] [--threads 1]
                                       [--runs 1] [--budgets fit,tight]

A thin entry point: the benchmark is :mod:`benchmarks.harness.collate`
(``python benchmarks/bench_all.py`` runs it too).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout

from benchmarks.harness.collate import main  # noqa: E402

if __name__ == "__main__":
    main()
