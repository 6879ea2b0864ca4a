"""The benchmarks, shipped with the package: ``graph-adapter bench`` runs them.

* :mod:`.collate`: the padded collate against ``Batch.from_data_list`` + padding
* :mod:`.efficiency`: padding efficiency against pad-to-max and PyG's ``DynamicBatchSampler``
* :mod:`.throughput`: step and epoch throughput, compiled (inductor) against eager PyG
* :mod:`.suite`: :func:`run_suite`, their headline figures in one table

Each of the first three has ``main(argv)``, the full report that the thin
scripts of a source checkout's ``benchmarks/`` run
(``python benchmarks/bench_collate.py``...).
"""
from .suite import BENCHMARKS, run_suite

__all__ = ["BENCHMARKS", "run_suite"]
