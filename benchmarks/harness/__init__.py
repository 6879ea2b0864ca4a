"""What the benchmark scripts of ``benchmarks/`` share: one module a benchmark.

* :mod:`.suite`: :func:`run_suite`, every benchmark's headline figures in one table
  (``python benchmarks/bench_all.py``);
* :mod:`.collate`: the padded collate against ``Batch.from_data_list`` + padding;
* :mod:`.efficiency`: padding efficiency against pad-to-max and PyG's ``DynamicBatchSampler``;
* :mod:`.throughput`: step and epoch throughput, compiled (inductor) against eager PyG;
* :mod:`.layout`: the aggregation layouts (scatter, ELL, HYB) under inductor;
* :mod:`.model_table`: the "models" table, six GNNs compiled against eager PyG;
* :mod:`.memory`, :mod:`.million`: the loaders' memory on many small graphs, a million
  graphs in an ``InMemoryDataset``;
* :mod:`.opcount`: the eager wrapper's overhead, counted in ATen ops and Python calls;
* :mod:`.parity`: the training-parity seed sweep;
* :mod:`.ddp`: 1 process against 2 under torchrun;
* :mod:`.value_check`: the cost of ``check_inputs="values"``.
* :mod:`.procs`: a process tree's pids and memory, read from ``/proc`` (the serving
  benchmarks).

Each but the suite has ``main(argv)``, the full report its thin script in
``benchmarks/`` runs (``python benchmarks/bench_collate.py``...). The harness imports
the installed package the way a user does (``graph_adapter`` and ``graph_adapter.app``);
nothing in the package imports it.
"""
import os

#: the checkout's root (the directory above ``benchmarks/``): where child processes run
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

__all__ = ["ROOT"]
