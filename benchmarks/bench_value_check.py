"""Cost of ``ipu_wrap(..., check_inputs="values")`` against the default, side by side.

    python benchmarks/bench_value_check.py [--limit 1000] [--graphs 64] [--rounds 15]
                                           [--threads 1] [--batches 12]

A thin entry point: the benchmark is :mod:`benchmarks.harness.value_check`.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout

from benchmarks.harness.value_check import main  # noqa: E402

if __name__ == "__main__":
    main()
