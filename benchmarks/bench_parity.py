"""Training parity: the demo's eager PyG and graph_adapter runs over seeds 0-7.

    python benchmarks/bench_parity.py [--seeds 0 1 ...] [--models gine gin]
                                      [--backend eager] [--threads 1] [--log FILE]

A thin entry point: the sweep is :mod:`benchmarks.harness.parity`.  Each seed is one ``graph-adapter demo``
process (about 2 min each on a quiet 2-core machine; much longer when shared).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout

from benchmarks.harness.parity import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
