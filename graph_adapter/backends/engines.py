"""Engines: how an in-process backend runs one micro-batch.

:class:`~graph_adapter.backends.compiled.Compiled` does the signature checks
and the micro-batch loop; its engine (the registry entry's ``engine``, built
with :class:`EngineSettings`) runs one micro-batch (``run(flat, key)``) and
counts its compiles (``compile_count``): :class:`DynamoEngine` (``"inductor"``,
``"aot_eager"``), :class:`CudaGraphEngine`, :class:`EagerEngine`,
:class:`ExportEngine` and :class:`PerModeEngine` (one engine a mode).

Guard policy (:class:`DynamoEngine`): every guard Dynamo builds is kept (no
``guard_filter_fn``, no ``skip_guard_eval_unsafe`` stance). ``Compiled`` checks
the batch on the host (keys, dtypes, shapes: ``program.signature_of``) and the
mode, but not the model's state, and the guards are what make a changed model
recompile instead of running a stale graph: one submodule put in ``eval()``, a
parameter's ``requires_grad`` or dtype changed, a plain module attribute or a
module global the forward reads changed (``tests/backends/test_guard_policy.py``;
a parameter loaded in place or replaced by a new ``Parameter`` needs no
recompile: the compiled code reads parameters through the module each call).
What they cost, measured side by side in one process (2026-12-01, 1 thread,
``python benchmarks/bench_models.py --overhead``): their evaluation alone
~35 us a call (GIN 4x8 or 4x128 + BatchNorm, 1,870 leaf guards, 833 evaluated
a call), and skipping it altogether, the most any guard policy could save,
0.7% of GIN 4x128's 15 ms training step (~100 us). In place, after the
kernels of a call, they cost more: 210-280 us of a 1.3 ms GCN 3x64 inference
call (15-20%; docs/benchmarks.md, "The fixed cost around a compiled call").
Still none is dropped: each protects a model change listed above, and no
cheaper evaluation of the same guards was found (recursive dict tags, the
batch as positional tensors: within noise).

Precompiled entries (opt-in, :mod:`~graph_adapter.backends.inductor.precompile`): with
``_precompile.ENABLED`` a :class:`DynamoEngine` (``"inductor"``, CPU, no RNN)
runs each (signature, mode, grad mode) through an entry saved by torch's
``aot_compile`` (an earlier process's, when its key and sources match and the
globals its trace read hold the values they had then, else one compiled now and
saved), so a warm process skips Dynamo's trace; where
that entry's saved guards fail, the ordinary entry above runs and recompiles.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import torch
from torch import Tensor, nn

from .inductor import cpu_settings as _inductor_cpu
from .inductor import host_checks as _host_checks
from .inductor import precompile as _precompile
from .registry import device_of, get_backend
from .program import Signature

__all__ = ["EngineSettings", "DynamoEngine", "CudaGraphEngine", "EagerEngine", "ExportEngine",
           "PerModeEngine", "traces", "generates_code", "has_rnn", "rnn_settings",
           "compile_in_this_process"]


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    """What ``compile()`` passes to an engine."""

    backend: str
    options: Optional[Dict[str, Any]] = None
    strict: bool = False
    index_add_fallback: Optional[bool] = None
    #: precompiled entries (``_precompile``): ``None`` follows ``_precompile.ENABLED``
    precompile: Optional[bool] = None


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
            # (the host checks: a warm process skips inductor's ISA probes and header
            # preprocessing where an earlier one ran them on the same files)
            with config.patch(patches), _host_checks.remembered_host_checks(), \
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


def compile_in_this_process() -> None:
    """Inductor compiles in this process from now on, without its pool of compile
    workers: a forked child (a background compile) inherits its parent's pool, whose
    pipes belong to the parent."""
    from torch._inductor import config

    config.compile_threads = 1


def has_rnn(module: nn.Module) -> bool:
    """Whether ``module`` holds a ``torch.nn`` RNN/LSTM/GRU (PyG's ``Set2Set``,
    ``LSTMAggregation``, ``GRUAggregation``, JumpingKnowledge ``mode="lstm"``)."""
    return any(isinstance(m, nn.RNNBase) for m in module.modules())


@contextlib.contextmanager
def rnn_settings():
    """What Dynamo needs to trace an ``nn.RNNBase``, for one compiled call, restored after:
    ``torch._dynamo.config.allow_rnn`` (off by default: Dynamo refuses to wrap RNNs), and
    with grad enabled (training, or eval() without no_grad: AOTAutograd traces a backward
    either way) oneDNN off (AOTAutograd cannot trace oneDNN's LSTM kernel: "expected all
    tensors_saved_with_vc_check to be Tensors"; docs/zoo.md)."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch._dynamo.config.patch(allow_rnn=True))
        if torch.is_grad_enabled():
            stack.enter_context(torch.backends.mkldnn.flags(enabled=False))
        yield


def precompile_refused(backend: str, why: str) -> ValueError:
    """The one error of ``compile(..., precompile=True)`` where entries cannot serve."""
    return ValueError(f"compile({backend!r}, precompile=True): {why}; leave precompile unset "
                      f"(or False) for this model and backend")


def precompile_refusal(backend: str, wrapped: nn.Module, rnn: bool, engine: type) -> str:
    """Why precompiled entries cannot serve this engine (``""``: they can)."""
    if backend != "inductor" or engine is not DynamoEngine:
        return f"precompiled entries serve backend 'inductor' only, not {backend!r}"
    if device_of(wrapped).type != "cpu":
        return f"precompiled entries serve models on the CPU only, not {device_of(wrapped)}"
    if rnn:
        return "precompiled entries do not serve models holding an nn.RNNBase"
    return ""


class DynamoEngine:
    """``"inductor"`` / ``"aot_eager"``: ``torch.compile(fullgraph=True, dynamic=False)``.

    ``precompiled_loads``: entries loaded from an earlier process's artifact
    (module docstring; they are not compiles and not in ``compile_count``).

    A model with an ``nn.RNNBase`` inside runs every call under :func:`rnn_settings`
    (the user's settings are untouched outside the call)."""

    def __init__(self, wrapped: nn.Module, settings: EngineSettings) -> None:
        self._counter = _CountingBackend(settings.backend, settings.options,
                                         settings.index_add_fallback)
        entry = _own_entry(wrapped)
        self._fn = torch.compile(entry, backend=self._counter, fullgraph=True, dynamic=False)
        self._rnn = has_rnn(wrapped)
        self._wrapped, self._settings = wrapped, settings
        #: entries loaded from a precompiled artifact (backends/_precompile.py)
        self.precompiled_loads = 0
        # (signature, mode, grad mode) -> (precompiled entry, or None: the ordinary entry;
        # the global state it was traced under)
        self._pre: Optional[Dict[Any, Any]] = None
        want = _precompile.ENABLED if settings.precompile is None else settings.precompile
        why_not = precompile_refusal(settings.backend, wrapped, self._rnn, type(self))
        if settings.precompile and why_not:
            raise precompile_refused(settings.backend, why_not)
        if want and not why_not:
            self._pre = {}
            # the same entry, compiled ahead with the guards that serialize (globals kept)
            self._aot = torch.compile(entry, backend=self._counter, fullgraph=True,
                                      dynamic=False,
                                      options={"guard_filter_fn": _precompile.serializable_guards})

    @property
    def runs_generated_code(self) -> bool:
        """Whether this engine's compiled calls run code inductor generated."""
        return self._counter.name == "inductor"

    @property
    def compile_count(self) -> int:
        """Graphs the Dynamo backend was asked to compile."""
        return self._counter.count

    @property
    def atomic_adds(self) -> Optional[bool]:
        """Whether inductor's code for this model adds atomically (``None``: unknown)."""
        return self._counter.atomic_adds if self._counter.name == "inductor" else False

    def run(self, flat: Dict[str, Tensor], key: Any) -> Dict[str, Tensor]:
        # Dynamo guards on the mode and shapes itself; ``key`` only picks a precompiled entry.
        if self._rnn:
            with rnn_settings():
                return self._fn(flat)
        if self._pre is not None:
            fn = self._precompiled(flat, key)
            if fn is not None:
                return fn.fn(flat)
        return self._fn(flat)

    def warm(self, flat: Dict[str, Tensor]) -> bool:
        """Compile this call without running inductor's code for it (the child of a
        background compile, :mod:`~graph_adapter.backends.background`); whether a
        precompiled entry for it is on disk now. With precompiled entries: load or
        build and save the call's entry; without (``"aot_eager"``, which generates
        no code): run the call once."""
        if self._pre is None:
            self._fn(flat)
            return False
        before = _precompile.COUNTS["saved"] + _precompile.COUNTS["loaded"]
        self._load_or_build(flat)
        return _precompile.COUNTS["saved"] + _precompile.COUNTS["loaded"] > before

    def has_saved_entry(self, flat: Dict[str, Tensor]) -> bool:
        """Whether a precompiled entry of this call is on disk (under any values of the
        globals its trace read): a background child would load it, not compile."""
        return self._pre is not None and _precompile.has_entry(self._key(flat))

    def load_only(self, flat: Dict[str, Tensor], key: Any) -> bool:
        """Load this call's precompiled entry where one on disk serves it now, and use it
        from the next call; whether it did (never compiles: ``False`` instead)."""
        if self._pre is None:
            return False
        ck = (key, torch.is_grad_enabled())
        if ck not in self._pre:
            fn = self._loaded(self._key(flat))
            if fn is None:
                return False
            self._pre[ck] = (fn, _precompile.global_state())
        return self._pre[ck][0] is not None

    def _precompiled(self, flat: Dict[str, Tensor], key: Any) -> Any:
        """The precompiled entry for this call whose guards pass, or ``None`` (then the
        ordinary entry runs: it recompiles where the model changed in this process)."""
        ck = (key, torch.is_grad_enabled())
        if ck not in self._pre:
            self._pre[ck] = (self._load_or_build(flat), _precompile.global_state())
        fn, traced_under = self._pre[ck]
        # the global state: the entry's serialized guards leave it out
        if fn is not None and not (_precompile.global_state() == traced_under
                                   and fn.guard_check(flat)):
            self._pre[ck] = (None, None)  # never retried: the ordinary entry owns this key now
            return None
        return fn

    def _key(self, flat: Dict[str, Tensor]) -> Dict[str, Any]:
        return _precompile.artifact_key(self._wrapped, flat, self._settings)

    def _loaded(self, key: Dict[str, Any]) -> Any:
        """An earlier process's entry of ``key`` that serves this process, or ``None``."""
        fn = _precompile.load(key, self._wrapped)
        if fn is not None:
            self.precompiled_loads += 1
        return fn

    def _load_or_build(self, flat: Dict[str, Tensor]) -> Any:
        """An earlier process's artifact for this call, else one compiled now and saved
        (``None`` where torch cannot build or save one: logged, and compiled as usual)."""
        key = self._key(flat)
        fn = self._loaded(key)
        if fn is not None:
            return fn
        try:
            with _precompile.grads_set_aside(self._wrapped):
                with _precompile.recording() as reads:  # the globals the trace reads
                    fn = self._aot.aot_compile(((flat,), {}))
                # not saved (a warning says why) where a global read cannot be recorded:
                # this process still runs the entry, traced under its own values
                _precompile.save(key, fn, self._wrapped, reads)
        except Exception as exc:  # torch's precompile is experimental: compile as usual
            _precompile.log.warning("graph_adapter: no precompiled entry (%s: %s); compiling "
                                    "as usual", type(exc).__name__, exc)
            return None
        return fn


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
        device = device_of(wrapped)
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
            mode: get_backend(name).engine(wrapped, dataclasses.replace(settings, backend=name))
            for mode, name in ((True, self.train_backend), (False, self.eval_backend))}

    @property
    def runs_generated_code(self) -> bool:
        """Whether either mode's engine runs code inductor generated."""
        return any(generates_code(e) for e in self._engines.values())

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


def traces(engine: Any, training: bool) -> bool:
    """Whether ``engine`` runs the wrapped forward traced (not eagerly) in this mode."""
    if isinstance(engine, PerModeEngine):
        return traces(engine.engine_for(training), training)
    return not isinstance(engine, EagerEngine)


def generates_code(engine: Any) -> bool:
    """Whether ``engine`` runs code that inductor generated (in either mode)."""
    return bool(getattr(engine, "runs_generated_code", False))
