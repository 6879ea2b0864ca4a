"""The application built on the library: the ``graph-adapter`` command and what it runs.

* :mod:`graph_adapter.app.cli`: the command line (``demo``, ``bench``, ``check``)
* :mod:`graph_adapter.app.demo`: ``graph-adapter demo``, a stock PyG GNN trained
  through the adapter next to eager PyG (its loops in :mod:`graph_adapter.app.demo_loops`,
  its interleaved rounds in :mod:`graph_adapter.app.demo_rounds`, its runs in
  :mod:`graph_adapter.app.demo_runs`; models in :mod:`graph_adapter.app.models`,
  figures and report in :mod:`graph_adapter.app.results`, with
  :mod:`graph_adapter.app.run_stats`, :mod:`graph_adapter.app.report` and
  :mod:`graph_adapter.app.plot`)
* :mod:`graph_adapter.app.datasets`: rdkit's NCI-5k molecules as PyG graphs
* :mod:`graph_adapter.app.zoo`: the PyG zoo table of ``docs/zoo.md`` (its rows in
  :mod:`graph_adapter.app.zoo_layers`, the red rows' causes in
  :mod:`graph_adapter.app.zoo_why`, the run of one row in :mod:`graph_adapter.app.zoo_run`)
* :mod:`graph_adapter.app.bench`: the benchmarks (``graph-adapter bench`` and the
  scripts of a source checkout's ``benchmarks/``)

The dependency goes one way: this subpackage imports the library's public
names (``import graph_adapter as ga``); nothing in the library imports it
(``python -m graph_adapter`` runs :func:`graph_adapter.app.cli.main`).

It may import every stage of the library (:mod:`graph_adapter.data`, ``nn``, ``ipu``,
``checker``, ``backends``, ``lightning``), their public names only.
"""
