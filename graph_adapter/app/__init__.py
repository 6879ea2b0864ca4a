"""The application built on the library: the ``graph-adapter`` command and what it runs.

* :mod:`graph_adapter.app.cli`: the command line (``demo``, ``bench``, ``check``)
* :mod:`graph_adapter.app.demo`: ``graph-adapter demo``, a stock PyG GNN trained
  through the adapter next to eager PyG (models in :mod:`graph_adapter.app.models`,
  figures and report in :mod:`graph_adapter.app.results`)
* :mod:`graph_adapter.app.datasets`: rdkit's NCI-5k molecules as PyG graphs
* :mod:`graph_adapter.app.bench`: the benchmarks (``graph-adapter bench`` and the
  scripts of a source checkout's ``benchmarks/``)

The dependency goes one way: this subpackage imports the library's public
names (``import graph_adapter as ga``); nothing in the library imports it
(``python -m graph_adapter`` runs :func:`graph_adapter.app.cli.main`).
"""
