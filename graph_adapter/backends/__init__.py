"""``graph_adapter.compile(wrapped, backend=...)``: one compile per budget and mode.

Backends are one registry (:func:`register_backend`, in the spirit of
``torch.utils._pytree``'s node registry): a table from a name to how to build
the compiled model. The built-in ones:

* ``"inductor"``: ``torch.compile(wrapped, fullgraph=True, dynamic=False)``,
  tuned by the registered tuner (:mod:`~graph_adapter.backends.tuner`): with
  :mod:`graph_adapter.tuning`, its graph rewrites and CPU settings; without it,
  inductor's ``compile_fx`` as it is.
* ``"inductor_cudagraphs"``: the same with CUDA graphs (``mode="reduce-overhead"``):
  one recorded graph per budget and mode, replayed every step; CUDA models
  only (:class:`CudaGraphEngine`; unmeasured on a GPU so far).
* ``"aot_eager"``: the same through Dynamo + AOTAutograd without code
  generation (cheap; what the tests use to count compiles).
* ``"eager"``: no compiler, same checks and bookkeeping.
* ``"export"``: ``torch.export.export(wrapped, (flat,))`` per signature;
  :meth:`Compiled.save` / :func:`load` keep the program with its input
  signature as JSON (``torch.export.save`` + an extra file).
* ``"poptorch"`` / ``"ipu-emulator"``: :func:`graph_adapter.ipu.compile_ipu`
  (importing graph_adapter never imports poptorch).

* ``"inductor_eval"``: inductor in eval mode, no compiler in training mode
  (one object; ``.train()`` / ``.eval()`` switch the engine).

``"auto"`` is not an entry: :func:`resolve_backend`, the one place it is
resolved, makes it ``"poptorch"`` when ``poptorch`` is importable, else what
:data:`AUTO_RULE` names for the model's device and each mode: ``"inductor"`` in
both modes (the fastest on the CPU: ``docs/benchmarks.md``, "Which backend auto
picks").

Every backend returns an object of one interface (:class:`CompiledModel`,
:mod:`~graph_adapter.backends.interface`):
call it with a flat dict, get a dict; ``.train()`` / ``.eval()`` /
``.training``; ``.compile_count``; ``.parameters()``; ``.steps_optimizer``
(True when a training call runs backward and the optimizer step itself, as
poptorch's ``trainingModel`` does; otherwise the caller does both) and
``.set_optimizer(opt)`` (push a changed learning rate where the backend keeps
its own copy). Callers never branch on the backend's name.

The in-process backends return a :class:`Compiled`, which records the
*signature* of each batch (keys, dtypes, shapes, without a micro-batch dim)
and the mode (``wrapped.training``). The first batch fixes the signature; a
batch whose signature differs raises :class:`ShapeChangedError` naming the
first key that differs, unless ``allow_new_shapes=True`` (then it compiles
once for the new budget). ``compile_count`` counts real compiles: calls of the
Dynamo backend (a graph compiled, for each mode/grad mode), programs exported,
or, for ``"eager"``, new (signature, mode) pairs. A batch with a leading
micro-batch dim ``F`` is run one micro-batch at a time; outputs are stacked on
a new dim 0 (``[F, ...]``; the loss becomes ``[F]``).

One module a job:

* :mod:`~graph_adapter.backends.registry`: the table (:class:`Backend`) and
  its reads: :func:`backend_names`, :func:`resolve_backend` (``"auto"``, by
  :data:`AUTO_RULE`), :func:`auto_engine`;
* :mod:`~graph_adapter.backends.interface`: the typed interfaces (:class:`Engine`,
  with defaults for every member but ``run`` and ``compile_count``;
  :class:`EngineSettings`; :class:`CompiledModel`; :class:`CompileStats`, what a
  compiled model's ``stats`` say);
* :mod:`~graph_adapter.backends.tuner`: the hook of a tuning wing (:class:`Tuner`,
  :func:`register_tuner`, :func:`active_tuner`); the core never imports the wing;
* :mod:`~graph_adapter.backends.engines`: how an in-process backend runs one
  micro-batch (:class:`DynamoEngine`,
  :class:`CudaGraphEngine`, :class:`EagerEngine`, :class:`ExportEngine`,
  :class:`PerModeEngine`);
* :mod:`~graph_adapter.backends.compiled`: :func:`compile`,
  :func:`register_backend`, :class:`Compiled` (the signature checks, the
  engine's calls) and the built-in backends' registration (:data:`BACKENDS`);
* :mod:`~graph_adapter.backends.ddp`: ``compile(DistributedDataParallel(wrapped))``
  (:class:`CompiledDDP`: DDP's forward eager around the compiled wrapped module);
* :mod:`~graph_adapter.backends.select`: ``compile(..., select="measure")``,
  the candidates (compiled, compiled on PyG's scatter path, the eager
  wrapper) timed at a mode's first steps and the fastest kept
  (:class:`Selected`, :class:`Measure`, :class:`Choice`);
* :mod:`~graph_adapter.backends.program`: a program's input signature
  (:func:`signature_of`, :class:`ShapeChangedError`, the micro-batch loop)
  and saved exports (:func:`save_program`, :func:`load`,
  :class:`LoadedProgram`);

It may import every earlier stage (:mod:`graph_adapter.format`, ``batching``,
``sampling``, ``nn``, ``ipu``, ``checker``, ``serve``); never
``tuning`` (it plugs in through :mod:`~graph_adapter.backends.tuner`),
``lightning`` or ``app``.
"""
from typing import Tuple

from . import engines, program, registry, select
from .compiled import BACKENDS, Compiled, compile, register_backend
from .ddp import CompiledDDP
from .engines import (DynamoEngine, PerModeEngine, has_rnn, precompile_refusal, rnn_settings,
                      compile_in_this_process)
from .interface import (CompiledModel, CompileStats, Engine, EngineSettings, InProcessModel,
                        merge_atomic)
from .program import ShapeChangedError, load, signature_of
from .registry import AUTO_RULE, Backend, auto_engine, backend_names, device_of, resolve_backend
from .select import Choice, Measure, Selected
from .tuner import (InductorCompile, PrecompiledCalls, Tuner, active_tuner, register_tuner,
                    tuning_needed)

__all__ = [
    "compile", "Compiled", "CompiledModel", "InProcessModel", "CompileStats",
    "ShapeChangedError", "load",
    "signature_of", "BACKENDS", "Backend", "register_backend", "backend_names",
    "resolve_backend", "AUTO_RULE", "auto_engine", "PerModeEngine", "Selected", "Measure",
    "Choice", "precompiled_counts", "has_rnn", "rnn_settings", "CompiledDDP",
    # the typed engine interface and the tuning hook
    "Engine", "EngineSettings", "DynamoEngine", "Tuner", "InductorCompile", "PrecompiledCalls",
    "register_tuner", "active_tuner", "tuning_needed", "merge_atomic", "precompile_refusal",
    "compile_in_this_process", "device_of",
]


def precompiled_counts() -> Tuple[int, int]:
    """``(loaded, saved)``: precompiled entries (``compile(..., precompile=True)``) this
    process loaded from an earlier process's artifact (each a first call without a
    trace) and saved for a later one, so far (``(0, 0)`` without a tuning wing).
    Process-wide, like inductor's cache counters (``torch._dynamo.utils.counters``):
    take differences around a call."""
    tuner = active_tuner()
    return (0, 0) if tuner is None else tuner.precompiled_counts()
