"""Aggregation layout under inductor: PyG's scatter vs the ELL tables (layout="ell").

    python benchmarks/bench_layout.py [--threads 2] [--limit N] [--rounds 5]
                                      [--batch 64] [--hidden 64]

A thin entry point: the benchmark is :mod:`benchmarks.harness.layout`
(``python benchmarks/bench_all.py --only layout`` runs it too).
"""
import os
import sys
import tempfile

# inductor reads these when torch is imported (importing graph_adapter imports it): set
# them first (the defaults of benchmarks.harness.throughput.set_inductor_env)
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR",
                      os.path.join(tempfile.gettempdir(), "graph_adapter_bench_inductor"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout

from benchmarks.harness.layout import main  # noqa: E402

if __name__ == "__main__":
    main()
