"""Throughput of a GIN on rdkit's NCI-5k molecules: PyG eager vs ipu_wrap eager/compiled.

    python benchmarks/bench_throughput.py [--limit 5000] [--batch 64] [--threads N]
                                          [--repeats 3] [--hidden 128]

A thin entry point: the benchmark is :mod:`benchmarks.harness.throughput`
(``python benchmarks/bench_all.py`` runs it too).
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

from benchmarks.harness.throughput import main  # noqa: E402

if __name__ == "__main__":
    main()
