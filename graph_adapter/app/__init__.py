"""The application built on the library: the ``graph-adapter`` command and what it runs.

One package a command, the small tools beside the command line:

* :mod:`graph_adapter.app.cli`: the ``graph-adapter`` command (``python -m graph_adapter``;
  ``demo``, ``check``, ``export``, ``serve``), its argument parser and exit codes
  (:mod:`graph_adapter.app.usage`);
* ``graph-adapter demo``: :mod:`graph_adapter.app.demo`; the molecule demo in
  :mod:`~graph_adapter.app.demo.graph`, the node demo (``--task node``) in
  :mod:`~graph_adapter.app.demo.node`, its settings in
  :mod:`~graph_adapter.app.demo.config`, its runs and their timing in
  :mod:`~graph_adapter.app.demo.timing`, its figures and report in
  :mod:`~graph_adapter.app.demo.results` (with ``run_stats``, ``report``, ``plot``);
* ``graph-adapter check``: :mod:`graph_adapter.app.check_cli`;
* ``graph-adapter export``: :mod:`graph_adapter.app.export_cmd`;
* ``python -m graph_adapter.app.zoo``: the PyG zoo table of ``docs/zoo.md``,
  :mod:`graph_adapter.app.zoo`;
* ``torchrun --nproc_per_node 2 -m graph_adapter.app.ddp``: data-parallel training
  with fixed-size batches, :mod:`graph_adapter.app.ddp`.

What several commands share: :mod:`graph_adapter.app.datasets` (rdkit's NCI-5k
molecules as PyG graphs; users import it too), :mod:`graph_adapter.app.models` (the
demo's models, which ``export`` and the preflight build too, and a source checkout's
benchmarks), :mod:`graph_adapter.app.preflight` (the demo's settings checked before any
slow work) and :mod:`graph_adapter.app.torch_internals` (the Dynamo
internals the app reads, one named helper each).

The dependency goes one way: this subpackage may import the library's stages
(:mod:`graph_adapter.format`, ``batching``, ``sampling``, ``nn``, ``ipu``,
``checker``, ``backends``, ``lightning``), their public names only; nothing in
the library imports it.
"""
__all__ = ["cli", "demo", "zoo", "datasets"]
