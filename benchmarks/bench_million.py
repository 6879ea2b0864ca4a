"""A million small graphs in an InMemoryDataset: FixedSizeLoader against PyG's DataLoader.

    python benchmarks/bench_million.py [--graphs 1000000] [--batch 64]

A thin entry point: the benchmark is :mod:`benchmarks.harness.million`
(``python benchmarks/bench_all.py --only million`` runs it too).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout

from benchmarks.harness.million import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
