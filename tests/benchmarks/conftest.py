"""The tests of a source checkout's benchmarks (``benchmarks/``): the checkout's root on
``sys.path``, so that ``benchmarks.harness`` imports as the scripts import it (they run
from the root: ``python benchmarks/bench_all.py``)."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
