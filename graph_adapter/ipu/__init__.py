"""The IPU path: one description of a run, the poptorch backend, a CPU emulator.

One module a job:

* :mod:`~graph_adapter.ipu.options`: :class:`IPUOptions` describes a run once
  for every IPU backend (device iterations ``D``, replication ``R``, gradient
  accumulation ``A``, output mode; ``F = D * R * A`` micro-batches a host batch);
* :mod:`~graph_adapter.ipu.inputs`: what poptorch does to inputs (names,
  int64/float64 narrowing, the dim-0 split into ``F`` micro-batches);
* :mod:`~graph_adapter.ipu.poptorch_backend`: ``"poptorch"``, i.e.
  ``poptorch.trainingModel`` / ``inferenceModel`` on the dispatcher (never
  ``Jit.traceModel(True)``), the PyG arg parser, the identity-loss wrapper;
  poptorch is imported lazily: importing graph_adapter never imports it;
* :mod:`~graph_adapter.ipu.emulator`: ``"ipu-emulator"``, on CPU what poptorch
  does with inputs, outputs and optimizer steps (:class:`IPUEmulator`);
* :mod:`~graph_adapter.ipu.entry`: :func:`compile_ipu`, which
  ``graph_adapter.compile`` calls for both backends;
* :mod:`~graph_adapter.ipu.state`: buffers and parameters keep their storage
  in forward (poptorch's reassignment rule);
* :mod:`~graph_adapter.ipu.poptorch_emulation`: :func:`emulate_poptorch`, an
  emulated ``poptorch`` module (in ``sys.modules``) on top of the emulator,
  for code written against poptorch itself (lightning-graphcore, scripts);
* :mod:`~graph_adapter.ipu.dispatcher`: the dispatcher's rules (no value
  reads, no data-dependent shapes, no host moves, ops with a handler) as
  watches on a CPU forward, which the emulation enforces and
  :mod:`graph_adapter.checker` reports;
* :mod:`~graph_adapter.ipu.sdk`: :func:`import_poptorch`, the one import of
  the real poptorch.

It may import :mod:`graph_adapter.nn`, :mod:`graph_adapter.format`,
:mod:`graph_adapter.batching` and :mod:`graph_adapter.sampling`; never
``checker``, ``backends``, ``lightning`` or ``app``.

What was verified in poptorch's sources, and what is assumed, is written down
in ``docs/ipu.md``.
"""
from .inputs import host_micro_batch, map_tensors, named_tensors, narrow
from .poptorch_backend import (
    PoptorchRunner,
    build_poptorch,
    import_poptorch,
    make_pyg_arg_parser,
    register_pyg_arg_parser,
)
from .options import OUTPUT_MODES, IPUOptions
from .emulator import BatchDimensionError, EmulatorError, IPUEmulator, collect_outputs
from .entry import IPU_BACKENDS, compile_ipu
from .poptorch_emulation import emulate_poptorch
from .dispatcher import (ADVICE, KINDS, NO_FAKE_KERNEL, POPTORCH_MESSAGES, DispatchWatch, Finding,
                         FunctionWatch, NoFakeKernel, dispatcher_rules, where, with_via)
from .state import reassigned_state, state_addresses

__all__ = [
    "OUTPUT_MODES",
    "IPUOptions",
    "IPUEmulator",
    "EmulatorError",
    "BatchDimensionError",
    "emulate_poptorch",
    "IPU_BACKENDS",
    "compile_ipu",
    "import_poptorch",
    "narrow",
    "map_tensors",
    "named_tensors",
    "host_micro_batch",
    "collect_outputs",
    "PoptorchRunner",
    "build_poptorch",
    "register_pyg_arg_parser",
    "make_pyg_arg_parser",
    # the dispatcher's rules (graph_adapter.checker runs them)
    "ADVICE", "KINDS", "NO_FAKE_KERNEL", "POPTORCH_MESSAGES", "DispatchWatch", "Finding",
    "FunctionWatch", "NoFakeKernel", "dispatcher_rules", "where", "with_via",
    "reassigned_state", "state_addresses",
]
