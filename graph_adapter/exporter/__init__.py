"""The export stage: ``export(wrapped, loader_or_budget, path)``, one deployable artifact
of a wrapped model.

The stage is ``graph_adapter.exporter``, not ``graph_adapter.export``, as the checker's
is ``graph_adapter.checker`` for ``graph_adapter.check``: ``graph_adapter.export`` is
the function users call, and a subpackage of that name would be set as the package's
attribute by Python's import system (``import graph_adapter.export as E`` would then
give the function or the module depending on what was imported first). Users write
``graph_adapter.export(...)`` and ``from graph_adapter.exporter import
ExportMismatchError``.

The inference-mode graph of an ``ipu_wrap``-ped model (``eval()``, no loss) is captured
with ``torch.export`` on one padded batch of the budget, then compiled:

* ``format="pt2"``: ``torch._inductor.aoti_compile_and_package``, an AOTInductor package
  (a zip: a shared library of the model, weights inside) that runs on torch alone;
* ``format="onnx"``: ``torch.onnx.export(exported_program, dynamo=True)`` (from the
  exported program: exporting the wrapper directly fails), run by onnxruntime.

Before compiling, the exported program gets the graph rewrites the compile path gives
inductor (:func:`rewritten_program`, from :mod:`graph_adapter.tuning` where it is
installed: a linear of a sum of embedding lookups projects the tables); the ONNX model
gets the rewrites of :data:`~graph_adapter.exporter.onnx_rewrites.REWRITES` (its row-wise
scatter adds summed over neighbour tables or as sorted segments, which onnxruntime
computes the same at any thread count, ...). All keep the function; ``rewrite=False``
turns them off.

The artifact carries its input contract as JSON (:class:`graph_adapter.serve.Contract`:
the budget, every input key with its level, dtype and per-graph shape, every output with
its level), in the ``.pt2`` archive's ``extra/graph_adapter.json`` or the ONNX model's
``metadata_props``; nothing is pickled. Inputs the program never reads (``y``, labels, a
feature the forward names but ignores) are left out of it, so requests need not carry
them. Before the file is written the artifact runs on a few padded batches (the ONNX one
twice each, at the server's thread count and at 2 and 4 threads) and must equal the
eager wrapper within :data:`TOLERANCE` every time (else :class:`ExportMismatchError`,
naming the output, the batch and the threads).

``ladder=``: several budgets in one artifact (``docs/deploy.md``, a ladder of budgets):
a ``.pt2`` archive of one AOTInductor program a rung, or one ONNX model whose rungs are
``If`` branches on an int64 input (:data:`ONNX_RUNG_INPUT`); each rung traced and
checked on its own batches.

One module a job (each imports only those above it in this list):

* :mod:`~graph_adapter.exporter.errors`: the errors ``export`` raises on purpose;
* :mod:`~graph_adapter.exporter.contract`: the contract's fields, the formats and
  their tolerance, what the serving packer refuses;
* :mod:`~graph_adapter.exporter.trace`: the inference module, its trace, the
  compile path's rewrite, the inputs the program never reads;
* :mod:`~graph_adapter.exporter.batches`: the padded batches traced and checked on;
* :mod:`~graph_adapter.exporter.checks`: the artifact against eager on the real rows;
* :mod:`~graph_adapter.exporter.ladder`: the rungs of a ladder and their batches;
* :mod:`~graph_adapter.exporter.onnx_rewrites`: rewrites of the ONNX model, one
  module a rewrite run in the order of its registry (deterministic row scatters, ...),
  and the ladder's one model;
* :mod:`~graph_adapter.exporter.pt2` and :mod:`~graph_adapter.exporter.onnx`:
  each format's writer (one budget or a ladder);
* :mod:`~graph_adapter.exporter.api`: :func:`export` itself.

It may import :mod:`graph_adapter.contract` (the reserved keys), ``format``,
``batching``, ``nn``, ``serve`` and, where it is installed, ``tuning`` (every earlier
stage); never ``lightning`` or ``app``.
"""
from __future__ import annotations

from .api import export
from .contract import FORMATS, TOLERANCE, contract_inputs
from .errors import ExportError, ExportMismatchError, UnsupportedExportError
from .ladder import LADDER_GRAPHS, ladder_budgets
from .onnx import CHECK_RUNS, CHECK_THREADS, ONNX_RUNG_INPUT
from .trace import rewritten_program

__all__ = ["export", "ExportError", "UnsupportedExportError", "ExportMismatchError",
           "TOLERANCE", "FORMATS", "CHECK_THREADS", "CHECK_RUNS", "contract_inputs",
           "rewritten_program", "LADDER_GRAPHS", "ladder_budgets", "ONNX_RUNG_INPUT"]
