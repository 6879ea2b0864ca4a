"""Padded collate vs ``Batch.from_data_list`` + padding, side by side.

    python benchmarks/bench_collate.py [--graphs 64] [--repeats 300] [--threads 1]
                                       [--runs 1] [--budgets fit,tight]

A thin entry point: the benchmark ships with the package
(:mod:`graph_adapter.app.bench.collate`; ``graph-adapter bench`` runs it too).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout

from graph_adapter.app.bench.collate import main  # noqa: E402

if __name__ == "__main__":
    main()
