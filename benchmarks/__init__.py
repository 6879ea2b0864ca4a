"""The benchmarks of a source checkout: ``python benchmarks/bench_<name>.py`` from its root.

Each ``bench_*.py`` script is one benchmark; the measurement code they share (and the
suite that prints every benchmark's headline figures in one table,
``python benchmarks/bench_all.py``) is in :mod:`benchmarks.harness`. None of it ships
with the installed package: it measures the package, it is not part of it.
"""
