"""``graph_adapter.compile(wrapped, backend=...)``: one compile per budget and mode.

Backends are one registry (:func:`register_backend`, in the spirit of
``torch.utils._pytree``'s node registry): a table from a name to how to build
the compiled model. The built-in ones:

* ``"inductor"``: ``torch.compile(wrapped, fullgraph=True, dynamic=False)``,
  with the CPU training settings of :mod:`graph_adapter.backends._inductor_cpu`
  (boolean masks recomputed in the backward instead of stored; with more
  than one thread the gradients of gathers and embeddings as ATen's
  ``index_add``, ``index_add_fallback``).
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
:data:`AUTO_RULE` measured fastest for the model's device and each mode:
``"inductor"`` in both modes (``docs/benchmarks.md``, "Which backend auto
picks").

Every backend returns an object of one interface (:class:`CompiledModel`):
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
"""
from __future__ import annotations

import dataclasses
import itertools
import json
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Protocol, Tuple

import torch
from torch import Tensor, nn

from . import _inductor_cpu
from .. import ipu
from ..nn import static
from ..data.values import DIAGNOSED, BoundsPlan, bounds_plan, check_before_call, named_error
from ..data.spec import SpecError
from ..data.format import (
    GRAPH_MASK,
    LAYOUT_KEYS,
    has_micro_batch_dim,
    num_micro_batches,
    split_micro_batches,
    stack_micro_batches,
)

__all__ = [
    "compile", "Compiled", "CompiledModel", "ShapeChangedError", "load", "signature_of",
    "BACKENDS", "Backend", "register_backend", "backend_names", "resolve_backend",
    "AUTO_RULE", "auto_engine", "PerModeEngine",
]

AUTO = "auto"

#: What ``"auto"`` runs without poptorch, per (device type, training mode):
#: measured with ``graph_adapter/app/bench/layout.py`` and ``throughput.py``
#: (docs/benchmarks.md, "Which backend auto picks"). On CPU, with the settings
#: of :mod:`graph_adapter.backends._inductor_cpu`, compiled training ran 1.3-1.4x eager
#: PyG (the demo's GINE) and 1.1x (a GIN 4 x 128), compiled inference
#: 1.3-1.7x: inductor in both modes, as on GPUs (unmeasured there: chosen for
#: CUDA graphs). ``"inductor_eval"`` keeps training eager (no training compile:
#: short runs).
AUTO_RULE: Dict[Tuple[str, bool], str] = {
    ("cpu", True): "inductor", ("cpu", False): "inductor",
    ("cuda", True): "inductor", ("cuda", False): "inductor",
}

Signature = Tuple[Tuple[str, str, Tuple[int, ...]], ...]


class ShapeChangedError(SpecError, ValueError):
    """A batch's keys, dtypes or shapes differ from those the model was compiled for.

    A :class:`~graph_adapter.data.spec.SpecError`, as the wrapped model's own input
    checks are: ``except SpecError`` catches both."""


class CompiledModel(Protocol):
    """The one interface of what :func:`compile` returns, for every backend."""

    #: True when a training call runs backward and the optimizer step itself.
    steps_optimizer: bool

    def __call__(self, flat: Mapping[str, Tensor]) -> Dict[str, Tensor]: ...
    def train(self, mode: bool = True) -> "CompiledModel": ...
    def eval(self) -> "CompiledModel": ...
    @property
    def training(self) -> bool: ...
    @property
    def compile_count(self) -> int: ...
    def parameters(self) -> Iterator[nn.Parameter]: ...
    def set_optimizer(self, optimizer: torch.optim.Optimizer) -> None: ...


# --------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Backend:
    """One registry entry.

    Attributes:
        name: what ``compile(backend=...)`` takes.
        build: ``build(wrapped, name, *, allow_new_shapes, options, optimizer,
            strict, index_add_fallback, **kwargs) -> CompiledModel``.
        doc: one line for help texts.
        engine: for backends that :class:`Compiled` drives in this process:
            ``engine(wrapped, settings) -> engine`` running one micro-batch
            (``run(flat, key)``, ``compile_count``); ``build`` is then ``Compiled``.
    """

    name: str
    build: Callable[..., Any]
    doc: str = ""
    engine: Optional[Callable[..., Any]] = None


_REGISTRY: Dict[str, Backend] = {}


def register_backend(name: str, build: Optional[Callable[..., Any]] = None, *,
                     engine: Optional[Callable[..., Any]] = None, doc: str = "") -> None:
    """Add a backend: give ``build`` (returns a :class:`CompiledModel`) or an ``engine``.

    With ``engine``, :class:`Compiled` does the signature checks and the
    micro-batch loop and the engine runs one micro-batch (see the built-in
    engines below). Raises ``ValueError`` for a name already taken.
    """
    if name == AUTO or name in _REGISTRY:
        raise ValueError(f"backend {name!r} is already registered")
    if (build is None) == (engine is None):
        raise TypeError("register_backend needs exactly one of build= and engine=")
    _REGISTRY[name] = Backend(name, build if build is not None else _build_compiled, doc, engine)


def backend_names() -> Tuple[str, ...]:
    """Every name ``compile(backend=...)`` accepts, ``"auto"`` included."""
    return (AUTO, *_REGISTRY)


def auto_engine(device_type: str, training: bool) -> str:
    """The backend :data:`AUTO_RULE` runs for one device type and mode
    (device types other than ``"cpu"`` follow ``"cuda"``'s rule)."""
    return AUTO_RULE[("cpu" if device_type == "cpu" else "cuda", bool(training))]


def resolve_backend(name: str, device: Any = "cpu") -> Tuple[str, str]:
    """``(concrete backend, note)`` for a backend name; the one place ``"auto"`` is resolved.

    ``"auto"`` -> ``("poptorch", "auto: poptorch found")`` when poptorch is
    importable, else by :data:`AUTO_RULE` for ``device`` (a ``torch.device``
    or its type; :func:`compile` passes the model's): ``"inductor"`` on CPU
    and elsewhere today (a rule that picks different engines per mode
    resolves to the per-mode backend, e.g. ``"inductor_eval"``). A concrete
    name -> ``(name, "")``. Unknown names raise
    ``ValueError``.
    """
    if name != AUTO and name not in _REGISTRY:
        raise ValueError(f"backend={name!r}; choose one of {backend_names()}")
    if name != AUTO:
        return name, ""
    try:
        import poptorch  # noqa: F401  (only whether it imports)
    except ImportError:
        dev = torch.device(device).type
        train, infer = auto_engine(dev, True), auto_engine(dev, False)
        if train == infer:
            return train, f"auto: poptorch not installed; {train} on {dev}"
        concrete = _PER_MODE[(train, infer)]
        return concrete, (f"auto: poptorch not installed; on {dev} training {train}, "
                          f"inference {infer} (fastest measured)")
    return "poptorch", "auto: poptorch found"


def _device_of(wrapped: nn.Module) -> torch.device:
    """The device of the model's first parameter (CPU without parameters)."""
    p = next(iter(wrapped.parameters()), None)
    return torch.device("cpu") if p is None else p.device


def _backend(name: str, device: Any = "cpu") -> Backend:
    """The registry entry of ``name`` (``"auto"`` resolved for ``device``)."""
    return _REGISTRY[resolve_backend(name, device)[0]]


# --------------------------------------------------------------------------
# Signatures
# --------------------------------------------------------------------------
def signature_of(flat: Mapping[str, Tensor]) -> Signature:
    """``((key, dtype, shape), ...)`` in key order (shapes without a micro-batch dim)."""
    strip = has_micro_batch_dim(flat) if GRAPH_MASK in flat else False
    out = []
    for k in sorted(flat):
        v = flat[k]
        shape = tuple(v.shape[1:] if strip else v.shape)
        out.append((k, str(v.dtype).replace("torch.", ""), shape))
    return tuple(out)


def _describe_change(old: Signature, new: Signature) -> str:
    o = {k: (d, s) for k, d, s in old}
    n = {k: (d, s) for k, d, s in new}
    for k in sorted(set(o) | set(n)):
        if k not in n:
            return f"key {k!r} is missing (the compiled program takes it: dtype {o[k][0]}, shape {o[k][1]})"
        if k not in o:
            return f"key {k!r} is new (dtype {n[k][0]}, shape {n[k][1]}); the compiled program does not take it"
        if o[k][0] != n[k][0]:
            return f"key {k!r} has dtype {n[k][0]}, the compiled program takes {o[k][0]}"
        if o[k][1] != n[k][1]:
            hint = (" (a layout table: loaders that fitted their layouts apart, e.g. train and "
                    "test; fit it once on every graph and pass that loader's "
                    "collator.layout_widths / layout_spills to both)"
                    if k.rsplit("/", 1)[-1] in LAYOUT_KEYS else "")
            return f"key {k!r} has shape {n[k][1]}, the compiled program takes {o[k][1]}{hint}"
    return "signatures differ"


def _per_micro_batch(run: Callable[[Dict[str, Tensor]], Dict[str, Tensor]],
                     flat: Mapping[str, Tensor]) -> Dict[str, Tensor]:
    """``run`` on each micro-batch of ``flat``, outputs stacked on a new dim 0 (``[F, ...]``)."""
    if GRAPH_MASK in flat and num_micro_batches(flat) > 1:
        return stack_micro_batches([run(mb) for mb in split_micro_batches(flat)])
    return run(dict(flat))


# --------------------------------------------------------------------------
# Engines: how an in-process backend runs one micro-batch
# --------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class EngineSettings:
    """What ``compile()`` passes to an engine."""

    backend: str
    options: Optional[Dict[str, Any]] = None
    strict: bool = False
    index_add_fallback: Optional[bool] = None


class _CountingBackend:
    """A Dynamo backend that counts how often it is asked to compile a graph."""

    def __init__(self, name: str, options: Optional[Dict[str, Any]] = None,
                 index_add_fallback: Optional[bool] = None):
        self.name = name
        self.options = options
        self.index_add_fallback = index_add_fallback
        self.count = 0
        # whether inductor's generated code adds atomically (see _inductor_cpu.compile_and_scan)
        self.atomic_adds: Optional[bool] = False

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: List[Any]):
        self.count += 1
        if self.name == "inductor":
            from torch._inductor import config
            from torch._inductor.compile_fx import compile_fx

            fallback = _inductor_cpu.use_index_add_fallback(self.index_add_fallback)
            decomps = _inductor_cpu.decompositions(fallback)
            patches = {**_inductor_cpu.config_patches(
                cpu_inference=_inductor_cpu.is_cpu_inference(example_inputs)),
                **(self.options or {})}
            # the decomposition table is not in inductor's cache key: put it there
            patches["post_grad_custom_pre_pass"] = _inductor_cpu.key_decompositions(
                fallback, patches.get("post_grad_custom_pre_pass", config.post_grad_custom_pre_pass))
            with config.patch(patches), \
                    _inductor_cpu.quiet_proxy_executor_notice():
                fn, atomic = _inductor_cpu.compile_and_scan(
                    lambda: compile_fx(gm, example_inputs, decompositions=decomps))
            self.atomic_adds = _inductor_cpu.merge_atomic(self.atomic_adds, atomic)
            return fn
        return torch._dynamo.lookup_backend(self.name)(gm, example_inputs)


_entries = itertools.count()


def _own_entry(wrapped: nn.Module) -> Callable[[Mapping[str, Tensor]], Dict[str, Tensor]]:
    """``wrapped.__call__`` behind a function with a code object of its own.

    Dynamo keeps its compiled graphs, and its recompile limit (8), per code
    object. Compiling the module itself would share ``nn.Module._call_impl``'s
    code with every other compiled module in the process, so the ninth
    ``compile()`` of a notebook session would fail under ``fullgraph=True``.
    A fresh code object gives each :class:`Compiled` its own cache and limit.
    """
    def entry(flat):
        return wrapped(flat)

    entry.__code__ = entry.__code__.replace(co_name=f"graph_adapter_entry_{next(_entries)}")
    return entry


class DynamoEngine:
    """``"inductor"`` / ``"aot_eager"``: ``torch.compile(fullgraph=True, dynamic=False)``."""

    def __init__(self, wrapped: nn.Module, settings: EngineSettings) -> None:
        self._counter = _CountingBackend(settings.backend, settings.options,
                                         settings.index_add_fallback)
        self._fn = torch.compile(_own_entry(wrapped), backend=self._counter, fullgraph=True,
                                 dynamic=False)

    @property
    def compile_count(self) -> int:
        """Graphs the Dynamo backend was asked to compile."""
        return self._counter.count

    @property
    def atomic_adds(self) -> Optional[bool]:
        """Whether inductor's code for this model adds atomically (``None``: unknown)."""
        return self._counter.atomic_adds if self._counter.name == "inductor" else False

    def run(self, flat: Dict[str, Tensor], key: Any) -> Dict[str, Tensor]:
        # Dynamo guards on the mode and shapes itself; ``key`` is not needed.
        return self._fn(flat)


class CudaGraphEngine(DynamoEngine):
    """``"inductor_cudagraphs"``: inductor with CUDA graphs (``mode="reduce-overhead"``).

    Static shapes are what CUDA graphs need: one graph is recorded per budget
    and mode, then replayed, so a step costs one launch instead of one per
    kernel. Inductor copies each batch into the graph's static input buffers;
    feed batches already on the GPU (``FixedSizeLoader(..., device="cuda",
    pin_memory=True)`` copies them without blocking). A replay reuses its
    output buffers: each call marks a new step
    (``torch.compiler.cudagraph_mark_step_begin``, once per call, however many
    micro-batches), so an output is valid until the next call; clone what you
    keep longer (inductor raises if a stale
    output is read). The model must be on a CUDA device: on any other,
    inductor would silently run without graphs, so this raises instead.
    """

    def __init__(self, wrapped: nn.Module, settings: EngineSettings) -> None:
        device = _device_of(wrapped)
        if device.type != "cuda":
            raise ValueError(
                f"backend 'inductor_cudagraphs' records CUDA graphs, but the model's parameters "
                f"are on {device}; move the model to the GPU first (wrapped.to('cuda')), or use "
                f"backend='inductor' on this device.")
        options = {"triton.cudagraphs": True, **(settings.options or {})}
        super().__init__(wrapped, dataclasses.replace(settings, backend="inductor",
                                                      options=options))

    def begin_call(self) -> None:
        """A new step: the replays of the last call may now be overwritten. Once per
        :class:`Compiled` call, not per micro-batch: the micro-batches of one call
        (and their saved activations) all stay valid until its backward."""
        torch.compiler.cudagraph_mark_step_begin()


class EagerEngine:
    """``"eager"``: the module itself; a compile is a new (signature, mode, grad mode)."""

    def __init__(self, wrapped: nn.Module, settings: EngineSettings) -> None:
        self._wrapped = wrapped
        self._seen: set = set()

    @property
    def compile_count(self) -> int:
        return len(self._seen)

    def run(self, flat: Dict[str, Tensor], key: Any) -> Dict[str, Tensor]:
        self._seen.add((key, torch.is_grad_enabled()))
        return self._wrapped(flat)


class ExportEngine:
    """``"export"``: one ``torch.export`` program per (signature, mode)."""

    def __init__(self, wrapped: nn.Module, settings: EngineSettings) -> None:
        self._wrapped = wrapped
        self._strict = settings.strict
        self.programs: Dict[Tuple[Signature, bool], Any] = {}
        self._modules: Dict[Tuple[Signature, bool], Callable] = {}

    @property
    def compile_count(self) -> int:
        return len(self.programs)

    def run(self, flat: Dict[str, Tensor], key: Any) -> Dict[str, Tensor]:
        mod = self._modules.get(key)
        if mod is None:
            ep = torch.export.export(self._wrapped, (dict(flat),), strict=self._strict)
            self.programs[key] = ep
            mod = self._modules[key] = ep.module()
        return mod(dict(flat))


class PerModeEngine:
    """One engine for training mode and another for eval mode (``"inductor_eval"``:
    eager training, inductor inference); ``compile_count`` counts real compiles
    only (the eager engine's count is of signatures seen, not of compiles)."""

    train_backend = "eager"
    eval_backend = "inductor"

    def __init__(self, wrapped: nn.Module, settings: EngineSettings) -> None:
        self._engines = {
            mode: _REGISTRY[name].engine(wrapped, dataclasses.replace(settings, backend=name))
            for mode, name in ((True, self.train_backend), (False, self.eval_backend))}

    @property
    def compile_count(self) -> int:
        names = {True: self.train_backend, False: self.eval_backend}
        return sum(e.compile_count for mode, e in self._engines.items() if names[mode] != "eager")

    @property
    def atomic_adds(self) -> Optional[bool]:
        """Whether either mode's generated code adds atomically (``None``: unknown)."""
        return _inductor_cpu.merge_atomic(*(getattr(e, "atomic_adds", False)
                                            for e in self._engines.values()))

    def engine_for(self, training: bool) -> Any:
        """The engine that runs batches in this mode."""
        return self._engines[bool(training)]

    def run(self, flat: Dict[str, Tensor], key: Any) -> Dict[str, Tensor]:
        return self._engines[key[1]].run(flat, key)  # key: (signature, training)


def _traces(engine: Any, training: bool) -> bool:
    """Whether ``engine`` runs the wrapped forward traced (not eagerly) in this mode."""
    if isinstance(engine, PerModeEngine):
        return _traces(engine.engine_for(training), training)
    return not isinstance(engine, EagerEngine)


def _generates_code(engine: Any) -> bool:
    """Whether ``engine`` runs code that inductor generated (in either mode)."""
    if isinstance(engine, PerModeEngine):
        return any(_generates_code(e) for e in engine._engines.values())
    return isinstance(engine, DynamoEngine) and engine._counter.name == "inductor"


#: The registered per-mode backend of each (training, inference) pair of AUTO_RULE.
_PER_MODE = {("eager", "inductor"): "inductor_eval"}


# --------------------------------------------------------------------------
# Compiled: what the in-process backends return
# --------------------------------------------------------------------------
class Compiled:
    """What :func:`compile` returns for an in-process backend: call it with flat dicts.

    The caller runs backward and the optimizer step (``steps_optimizer`` is False).

    Attributes:
        wrapped: the ``ipu_wrap``-ped module (parameters are shared).
        backend: the backend name.
        compile_count: compiles so far (see the module doc).
        signatures: the admitted input signatures.
    """

    steps_optimizer = False

    def __init__(self, wrapped: nn.Module, backend: str, allow_new_shapes: bool = False,
                 options: Optional[Dict[str, Any]] = None, strict: bool = False,
                 index_add_fallback: Optional[bool] = None, check_bounds: Optional[bool] = None):
        entry = _backend(backend, _device_of(wrapped))
        if entry.engine is None:
            raise ValueError(f"backend {backend!r} does not run in this process; use compile()")
        self.wrapped = wrapped
        self.backend = entry.name
        self.allow_new_shapes = allow_new_shapes
        self.strict = strict
        self.signatures: List[Signature] = []
        static.install(getattr(wrapped, "model", wrapped))
        self._engine = entry.engine(wrapped, EngineSettings(entry.name, options, strict,
                                                             index_add_fallback))
        self.check_bounds = check_bounds
        self._bounds: Dict[Signature, BoundsPlan] = {}  # per signature; empty: not checked

    # ---- the compiled-model interface ------------------------------------
    @property
    def compile_count(self) -> int:
        return self._engine.compile_count

    @property
    def atomic_adds(self) -> Optional[bool]:
        """Whether the code compiled so far adds with atomics (sums in an order that
        changes from run to run on more than one thread): read from inductor's
        generated code; ``False`` for backends that generate none; ``None``
        when it could not be read."""
        return getattr(self._engine, "atomic_adds", False)

    @property
    def mode_backend(self) -> str:
        """The backend that runs batches in the current mode (``"inductor_eval"``:
        ``"eager"`` in training mode, ``"inductor"`` in eval mode)."""
        if isinstance(self._engine, PerModeEngine):
            return self._engine.train_backend if self.training else self._engine.eval_backend
        return self.backend

    def train(self, mode: bool = True) -> "Compiled":
        self.wrapped.train(mode)
        return self

    def eval(self) -> "Compiled":
        return self.train(False)

    @property
    def training(self) -> bool:
        return self.wrapped.training

    def parameters(self) -> Iterator[nn.Parameter]:
        return self.wrapped.parameters()

    def set_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Nothing to do: the caller steps its own optimizer."""

    def __call__(self, flat: Mapping[str, Tensor]) -> Dict[str, Tensor]:
        sig = signature_of(flat)
        self._admit(sig)
        key = (sig, self.wrapped.training)
        # ipu_wrap(check_inputs="values") reads values in eager calls only; a traced
        # forward cannot, so the values are checked here, on the host, before the call.
        values = getattr(self.wrapped, "check_inputs", None) == "values" and \
            _traces(self._engine, key[1])
        plan = self._bounds.get(sig)
        if plan is None:
            plan = self._bounds[sig] = self._plan_bounds(flat)
        check_before_call(flat, values, plan)
        begin = getattr(self._engine, "begin_call", None)  # engines that need a step mark
        if begin is not None:
            begin()
        try:
            return _per_micro_batch(lambda mb: self._engine.run(mb, key), flat)
        except DIAGNOSED as exc:
            # Only after a failure (nothing on the happy path): a compiled kernel's
            # "index out of bounds" names no key; a bad value in the batch is named.
            err = named_error(flat, exc)
            if err is None:
                raise
            raise err from exc

    def _plan_bounds(self, flat: Mapping[str, Tensor]) -> BoundsPlan:
        """The index bounds to check before each call of this signature (``()``: none).

        ``check_bounds=None`` checks where the engine generates code (inductor)
        and the index tensors are on the CPU: generated code has no Python
        error for an out-of-range index (it reads or writes out of bounds, or
        ends the process from an OpenMP region), while ATen's kernels (eager,
        aot_eager, export) raise one that :func:`named_error` explains after
        the fact. On a GPU the check would wait for the device every call, so
        it runs there only with ``check_bounds=True``.
        """
        want = self.check_bounds
        if want is None:
            want = _generates_code(self._engine) and all(
                v.device.type == "cpu" for v in flat.values() if isinstance(v, Tensor))
        return bounds_plan(flat) if want else ()

    def _admit(self, sig: Signature) -> None:
        if sig in self.signatures:
            return
        if self.signatures and not self.allow_new_shapes:
            raise ShapeChangedError(
                f"graph_adapter.compile({self.backend!r}): this batch does not fit the compiled "
                f"program: {_describe_change(self.signatures[0], sig)}. Every batch must come from "
                f"one budget (FixedSizeLoader pads to it); to compile once more for a new budget "
                f"pass allow_new_shapes=True."
            )
        self.signatures.append(sig)

    # ---- export ------------------------------------------------------------
    @property
    def programs(self) -> Dict[Tuple[Signature, bool], Any]:
        """``{(signature, training): ExportedProgram}`` (export backend)."""
        return dict(getattr(self._engine, "programs", {}))

    def save(self, path: str, which: int = 0) -> None:
        """Save an exported program (the ``which``-th) with its signature (export backend)."""
        if not isinstance(self._engine, ExportEngine):
            raise ValueError("save() needs backend='export'")
        if not self._engine.programs:
            raise ValueError("nothing exported yet: call the compiled model on one batch first")
        (sig, training), ep = list(self._engine.programs.items())[which]
        save_program(ep, path, sig, training)


def save_program(ep: Any, path: str, sig: Signature, training: bool) -> None:
    meta = {
        "format": "graph_adapter.export/1",
        "signature": [[k, d, list(s)] for k, d, s in sig],
        "training": training,
    }
    # torch.export.save pickles example_inputs: drop them (they hold a batch
    # of the user's data and are not needed to run the program).
    saved = getattr(ep, "_example_inputs", None)
    try:
        ep._example_inputs = None
        torch.export.save(ep, path, extra_files={"graph_adapter.json": json.dumps(meta)})
    finally:
        ep._example_inputs = saved


class LoadedProgram:
    """A saved export: call it with flat dicts of the saved signature.

    Its mode is the one it was exported in: ``.train(mode)`` for the other
    mode raises ``ValueError``.
    """

    backend = "export"
    compile_count = 0
    steps_optimizer = False

    def __init__(self, ep: Any, meta: Dict[str, Any]):
        self.program = ep
        self.signature: Signature = tuple((k, d, tuple(s)) for k, d, s in meta["signature"])
        self.training = bool(meta["training"])
        self._module = ep.module()

    def __call__(self, flat: Mapping[str, Tensor]) -> Dict[str, Tensor]:
        sig = signature_of(flat)
        if sig != self.signature:
            raise ShapeChangedError(
                f"loaded program: {_describe_change(self.signature, sig)}; it was exported for "
                f"one budget only."
            )
        return _per_micro_batch(self._module, flat)

    def train(self, mode: bool = True) -> "LoadedProgram":
        if bool(mode) != self.training:
            raise ValueError(f"this program was exported in {'train' if self.training else 'eval'} "
                             f"mode; export it again in the other mode")
        return self

    def eval(self) -> "LoadedProgram":
        return self.train(False)

    def parameters(self) -> Iterator[nn.Parameter]:
        return self._module.parameters()

    def set_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Nothing to do: the caller steps its own optimizer."""


def load(path: str) -> LoadedProgram:
    """Load a program saved by :meth:`Compiled.save`."""
    extra = {"graph_adapter.json": ""}
    ep = torch.export.load(path, extra_files=extra)
    if not extra["graph_adapter.json"]:
        raise ValueError(f"{path} was not saved by graph_adapter (no graph_adapter.json inside)")
    meta = json.loads(extra["graph_adapter.json"])
    if meta.get("format") != "graph_adapter.export/1":
        raise ValueError(f"{path}: unknown format {meta.get('format')!r}")
    return LoadedProgram(ep, meta)


# --------------------------------------------------------------------------
# compile()
# --------------------------------------------------------------------------
def compile(wrapped: nn.Module, backend: str = "auto", *, allow_new_shapes: bool = False,
            options: Optional[Dict[str, Any]] = None, optimizer: Any = None,
            strict: bool = False, index_add_fallback: Optional[bool] = None,
            check_bounds: Optional[bool] = None, **kwargs: Any) -> Any:
    """Compile an ``ipu_wrap``-ped model for fixed-size batches.

    Args:
        wrapped: the module ``ipu_wrap`` returned.
        backend: one of :data:`BACKENDS` (:func:`backend_names`); ``"auto"``
            is resolved for the device of ``wrapped``'s parameters
            (:func:`resolve_backend`).
        allow_new_shapes: admit batches of a new budget (one more compile each)
            instead of raising :class:`ShapeChangedError`.
        options: inductor config overrides (``"inductor"``), or poptorch
            options (``"poptorch"``/``"ipu-emulator"``).
        optimizer: the optimizer of training. Backends that step it
            themselves (``steps_optimizer``: the IPU ones) take it here and
            start in training mode; the others leave stepping to the caller.
        strict: strict ``torch.export`` (``"export"``).
        index_add_fallback: ``"inductor"`` on CPU: run the gradient of
            ``index_select`` (PyG's gathers) with ATen's ``index_add`` kernel
            instead of generated atomic adds. ``None`` (default): when torch
            uses more than one thread at compile time (inductor's own rule
            for ``scatter_reduce``).
        check_bounds: check every index key of each batch against its range
            (``[0, N)`` node ids, ``batch`` in ``[0, G)``, the layout tables)
            before the compiled call, and raise :class:`InputValueError`
            naming the key, position and value. ``None`` (default): where the
            backend generates code (``"inductor"``, ``"inductor_eval"``) and
            the batch is on the CPU, because inductor's code does not raise a
            Python error for a bad index (it reads or writes out of bounds,
            or ends the process). Costs one ``aminmax`` per index key (5-26
            us a call for the demo's batches, docs/wrapping.md); on a GPU
            each check waits for the device, so it is off there unless
            ``True``. The other backends run ATen kernels, which raise, and
            the bad value is named after the failure. ``"poptorch"``: checked
            on the host before each call unless ``False`` (what the IPU does
            with a bad index is not measured); ``"ipu-emulator"`` runs the
            forward eagerly, which names a bad value itself.
        kwargs: backend-specific (see :func:`graph_adapter.ipu.compile_ipu`);
            the in-process backends take none.

    Returns:
        A :class:`CompiledModel`: a :class:`Compiled` for the in-process
        backends, what :func:`graph_adapter.ipu.compile_ipu` returns for the
        IPU ones.
    """
    entry = _backend(backend, _device_of(wrapped))
    return entry.build(wrapped, entry.name, allow_new_shapes=allow_new_shapes, options=options,
                       optimizer=optimizer, strict=strict,
                       index_add_fallback=index_add_fallback, check_bounds=check_bounds,
                       **kwargs)


def _build_compiled(wrapped: nn.Module, name: str, *, allow_new_shapes: bool = False,
                    options: Optional[Dict[str, Any]] = None, optimizer: Any = None,
                    strict: bool = False, index_add_fallback: Optional[bool] = None,
                    check_bounds: Optional[bool] = None, **kwargs: Any) -> Compiled:
    """The build of every engine backend (``optimizer`` unused: the caller steps it)."""
    if kwargs:
        raise TypeError(f"unexpected keyword arguments for backend {name!r}: {sorted(kwargs)}")
    return Compiled(wrapped, name, allow_new_shapes=allow_new_shapes, options=options,
                    strict=strict, index_add_fallback=index_add_fallback,
                    check_bounds=check_bounds)


def _build_ipu(wrapped: nn.Module, name: str, *, allow_new_shapes: bool = False,
               options: Any = None, optimizer: Any = None, strict: bool = False,
               index_add_fallback: Optional[bool] = None, check_bounds: Optional[bool] = None,
               **kwargs: Any) -> Any:
    """The build of the IPU backends (``strict`` and ``index_add_fallback`` do not
    apply; ``check_bounds`` goes to the poptorch runner, which checks host batches)."""
    if check_bounds is not None:
        kwargs["check_bounds"] = check_bounds
    if allow_new_shapes:
        kwargs["allow_new_shapes"] = True
    # Looked up on the package at call time, so that it can be replaced (tests do).
    return ipu.compile_ipu(wrapped, name, options=options, optimizer=optimizer, **kwargs)


register_backend("inductor", engine=DynamoEngine,
                 doc="torch.compile(fullgraph=True, dynamic=False) with inductor")
register_backend("inductor_cudagraphs", engine=CudaGraphEngine,
                 doc="inductor with CUDA graphs (reduce-overhead): one replay a step; CUDA only")
register_backend("aot_eager", engine=DynamoEngine,
                 doc="Dynamo + AOTAutograd without code generation (cheap; counts compiles)")
register_backend("eager", engine=EagerEngine, doc="no compiler, same checks and bookkeeping")
register_backend("inductor_eval", engine=PerModeEngine,
                 doc="inductor in eval mode, eager (no compiler) in training mode")
register_backend("export", engine=ExportEngine,
                 doc="torch.export per signature; save()/load() keep the program")
for _name, _build in ipu.IPU_BACKENDS.items():
    register_backend(_name, _build_ipu, doc=(_build.__doc__ or "").strip().splitlines()[0])

#: Every accepted backend name, "auto" included (the registry's names at import).
BACKENDS = backend_names()
