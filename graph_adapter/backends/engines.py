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
What they cost a call is in ``docs/dev/RESULTS.md`` ("Guards"); none is dropped: each
protects a model change listed above.

Tuning (:mod:`~graph_adapter.backends.tuner`): ``"inductor"`` compiles each graph
through the registered tuner (:mod:`graph_adapter.tuning`: its rewrites and CPU
settings), or, with none, through inductor's ``compile_fx`` as it is. Precompiled
entries (``precompile=True``, the tuner's) let a :class:`DynamoEngine`
(``"inductor"``, CPU, no RNN) run each (signature, mode, grad mode) through an
entry an earlier process saved, so a warm process skips Dynamo's trace; where that
entry's guards fail, the ordinary entry runs and recompiles.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import torch
from torch import Tensor, nn

from .interface import Engine, EngineSettings, merge_atomic
from .program import Signature
from .registry import device_of, get_backend
from .tuner import InductorCompile, PrecompiledCalls, active_tuner, tuning_needed

__all__ = ["EngineSettings", "Engine", "DynamoEngine", "CudaGraphEngine", "EagerEngine",
           "ExportEngine", "PerModeEngine", "traces", "generates_code", "has_rnn",
           "rnn_settings", "compile_in_this_process", "precompile_refusal",
           "precompile_refused", "plain_inductor"]


def plain_inductor(gm: torch.fx.GraphModule, example_inputs: List[Any],
                   options: Optional[Mapping[str, Any]]) -> InductorCompile:
    """Inductor's own compile of one graph (``compile_fx``), ``options`` as config
    patches: what ``"inductor"`` runs without a tuner."""
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx

    with config.patch(dict(options or {})):
        return InductorCompile(compile_fx(gm, example_inputs))


class _CountingBackend:
    """A Dynamo backend that counts how often it is asked to compile a graph, and for
    ``"inductor"`` compiles it through the registered tuner (or inductor as it is)."""

    def __init__(self, settings: EngineSettings):
        self.name = settings.backend
        self.settings = settings
        self.count = 0
        # whether inductor's generated code adds atomically (None: not read)
        self.atomic_adds: Optional[bool] = False
        # each compile's count of the rewrites that fired, kept live: a training graph's
        # backward is compiled later, at its first backward, and adds to its count then
        self._fired: List[Mapping[str, int]] = []

    @property
    def rewrites(self) -> Dict[str, int]:
        """The rewrites that fired in these compiles so far: name -> count."""
        out: Dict[str, int] = collections.Counter()
        for fired in self._fired:
            out.update(fired)
        return dict(out)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: List[Any]):
        self.count += 1
        if self.name == "inductor":
            tuner = active_tuner()
            done = plain_inductor(gm, example_inputs, self.settings.options) if tuner is None \
                else tuner.compile_inductor(gm, example_inputs, self.settings)
            self.atomic_adds = merge_atomic(self.atomic_adds, done.atomic_adds)
            self._fired.append(done.rewrites)
            return done.fn
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


def precompile_refusal(backend: str, wrapped: nn.Module, rnn: bool, engine: Any) -> str:
    """Why precompiled entries cannot serve this engine (``""``: they can)."""
    if backend != "inductor" or engine is not DynamoEngine:
        return f"precompiled entries serve backend 'inductor' only, not {backend!r}"
    if device_of(wrapped).type != "cpu":
        return f"precompiled entries serve models on the CPU only, not {device_of(wrapped)}"
    if rnn:
        return "precompiled entries do not serve models holding an nn.RNNBase"
    return ""


class DynamoEngine(Engine):
    """``"inductor"`` / ``"aot_eager"``: ``torch.compile(fullgraph=True, dynamic=False)``.

    ``precompiled_loads``: entries loaded from an earlier process's artifact
    (module docstring; they are not compiles and not in ``compile_count``).

    A model with an ``nn.RNNBase`` inside runs every call under :func:`rnn_settings`
    (the user's settings are untouched outside the call)."""

    def __init__(self, wrapped: nn.Module, settings: EngineSettings) -> None:
        self._counter = _CountingBackend(settings)
        entry = _own_entry(wrapped)
        self._fn = torch.compile(entry, backend=self._counter, fullgraph=True, dynamic=False)
        self._rnn = has_rnn(wrapped)
        self._wrapped, self._settings = wrapped, settings
        #: the precompiled entries (the tuner's), or ``None``: off
        self.precompiled: Optional[PrecompiledCalls] = None
        tuner = active_tuner()
        if settings.precompile and tuner is None:
            raise tuning_needed("precompile=True")
        want = settings.precompile if settings.precompile is not None else \
            tuner is not None and tuner.precompile_by_default()
        why_not = precompile_refusal(settings.backend, wrapped, self._rnn, type(self))
        if settings.precompile and why_not:
            raise precompile_refused(settings.backend, why_not)
        if want and not why_not and tuner is not None:
            self.precompiled = tuner.precompiled_calls(wrapped, entry, self._counter, settings)

    @property
    def precompiled_loads(self) -> int:
        """Entries loaded from a precompiled artifact (not compiles)."""
        return 0 if self.precompiled is None else self.precompiled.loads

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

    @property
    def rewrites(self) -> Dict[str, int]:
        """The rewrites that fired in this engine's compiles (name -> count)."""
        return self._counter.rewrites

    def run(self, flat: Dict[str, Tensor], key: Any) -> Dict[str, Tensor]:
        # Dynamo guards on the mode and shapes itself; ``key`` only picks a precompiled entry.
        if self._rnn:
            with rnn_settings():
                return self._fn(flat)
        if self.precompiled is not None:
            fn = self.precompiled.entry(flat, key)
            if fn is not None:
                return fn(flat)
        return self._fn(flat)

    def warm(self, flat: Dict[str, Tensor]) -> bool:
        """Compile this call without running inductor's code for it (the child of a
        background compile); whether a precompiled entry for it is on disk now. With
        precompiled entries: load or build and save the call's entry; without
        (``"aot_eager"``, which generates no code): run the call once."""
        if self.precompiled is None:
            self._fn(flat)
            return False
        return self.precompiled.warm(flat)

    def has_saved_entry(self, flat: Dict[str, Tensor]) -> bool:
        """Whether a precompiled entry of this call is on disk: a background child
        would load it, not compile."""
        return self.precompiled is not None and self.precompiled.has_saved_entry(flat)

    def load_only(self, flat: Dict[str, Tensor], key: Any) -> bool:
        """Load this call's precompiled entry where one on disk serves it now, and use it
        from the next call; whether it did (never compiles: ``False`` instead)."""
        return self.precompiled is not None and self.precompiled.load_only(flat, key)


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


class EagerEngine(Engine):
    """``"eager"``: the module itself; a compile is a new (signature, mode, grad mode)."""

    def __init__(self, wrapped: nn.Module, settings: EngineSettings) -> None:
        self._wrapped = wrapped
        self._seen: set = set()

    @property
    def compile_count(self) -> int:
        return len(self._seen)

    def traces(self, training: bool) -> bool:
        return False

    def run(self, flat: Dict[str, Tensor], key: Any) -> Dict[str, Tensor]:
        self._seen.add((key, torch.is_grad_enabled()))
        return self._wrapped(flat)


class ExportEngine(Engine):
    """``"export"``: one ``torch.export`` program per (signature, mode)."""

    def __init__(self, wrapped: nn.Module, settings: EngineSettings) -> None:
        self._wrapped = wrapped
        self._strict = settings.strict
        self._programs: Dict[Tuple[Signature, bool], Any] = {}
        self._modules: Dict[Tuple[Signature, bool], Callable] = {}

    @property
    def programs(self) -> Dict[Any, Any]:
        """``{(signature, training): ExportedProgram}``, in the order exported."""
        return self._programs

    @property
    def compile_count(self) -> int:
        return len(self._programs)

    def run(self, flat: Dict[str, Tensor], key: Any) -> Dict[str, Tensor]:
        mod = self._modules.get(key)
        if mod is None:
            ep = torch.export.export(self._wrapped, (dict(flat),), strict=self._strict)
            self._programs[key] = ep
            mod = self._modules[key] = ep.module()
        return mod(dict(flat))


class PerModeEngine(Engine):
    """One engine for training mode and another for eval mode (``"inductor_eval"``:
    eager training, inductor inference); ``compile_count`` counts real compiles
    only (the eager engine's count is of signatures seen, not of compiles)."""

    train_backend = "eager"
    eval_backend = "inductor"

    def __init__(self, wrapped: nn.Module, settings: EngineSettings) -> None:
        self._engines: Dict[bool, Engine] = {
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
        return merge_atomic(*(e.atomic_adds for e in self._engines.values()))

    @property
    def rewrites(self) -> Dict[str, int]:
        """The rewrites that fired in either mode's compiles (name -> count)."""
        out: Dict[str, int] = collections.Counter()
        for e in self._engines.values():
            out.update(e.rewrites)
        return dict(out)

    def traces(self, training: bool) -> bool:
        return self._engines[bool(training)].traces(training)

    def engine_for(self, training: bool) -> Engine:
        """The engine that runs batches in this mode."""
        return self._engines[bool(training)]

    def run(self, flat: Dict[str, Tensor], key: Any) -> Dict[str, Tensor]:
        return self._engines[key[1]].run(flat, key)  # key: (signature, training)


def traces(engine: Engine, training: bool) -> bool:
    """Whether ``engine`` runs the wrapped forward traced (not eagerly) in this mode."""
    return engine.traces(training)


def generates_code(engine: Engine) -> bool:
    """Whether ``engine`` runs code that inductor generated (in either mode)."""
    return engine.runs_generated_code
