"""The eager wrapper's overhead, counted in ATen ops and Python calls (and, under
callgrind, instructions).

    python benchmarks/bench_opcount.py [--ops] [--instructions [--limit 256]]

A thin entry point: the benchmark is :mod:`benchmarks.harness.opcount`.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout

from benchmarks.harness.opcount import main  # noqa: E402

if __name__ == "__main__":
    main()
