"""Every benchmark's headline figures in one markdown table.

    python benchmarks/bench_all.py [--only NAME ...] [--quick] [--verbose]

A thin entry point: the suite is :mod:`benchmarks.harness.suite` (``--only NAME``: one
benchmark, ``--quick``: a smoke run, fewer repeats and molecules).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout

from benchmarks.harness.suite import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
