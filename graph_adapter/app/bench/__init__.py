"""The benchmarks, shipped with the package: ``graph-adapter bench`` runs them.

* :mod:`.suite`: :func:`run_suite`, every benchmark's headline figures in one table
  (``graph-adapter bench``);
* :mod:`.collate`: the padded collate against ``Batch.from_data_list`` + padding;
* :mod:`.efficiency`: padding efficiency against pad-to-max and PyG's ``DynamicBatchSampler``;
* :mod:`.throughput`: step and epoch throughput, compiled (inductor) against eager PyG;
* :mod:`.layout`: the aggregation layouts (scatter, ELL, HYB) under inductor;
* :mod:`.model_table`: the "models" table, six GNNs compiled against eager PyG;
* :mod:`.memory`, :mod:`.million`: the loaders' memory on many small graphs, a million
  graphs in an ``InMemoryDataset``;
* :mod:`.opcount`: the eager wrapper's overhead, counted in ATen ops and Python calls;
* :mod:`.parity`: the training-parity seed sweep (``graph-adapter bench parity``);
* :mod:`.value_check`: the cost of ``check_inputs="values"``.

Each but the suite has ``main(argv)``, the full report that the thin scripts of a
source checkout's ``benchmarks/`` run (``python benchmarks/bench_collate.py``...).
"""
from .suite import BENCHMARKS, run_suite

__all__ = ["BENCHMARKS", "run_suite"]
