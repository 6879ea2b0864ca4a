"""``compile()``, :func:`register_backend` and :class:`Compiled` (the in-process backends' model).

:func:`compile` looks the backend up in :mod:`~graph_adapter.backends.registry`
and calls its build: for the backends registered with an ``engine``
(:mod:`~graph_adapter.backends.engines`), a :class:`Compiled`, which checks
each batch's signature and runs the engine one micro-batch at a time; for the
IPU ones, :func:`graph_adapter.ipu.compile_ipu`. The built-in backends are
registered at the end of this module.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

import torch
from torch import Tensor, nn

from .. import ipu
from ..nn import static
from ..format import (DIAGNOSED, LAYOUT_KEYS, BoundsPlan, bounds_plan, check_before_call,
                      named_error)
from .engines import (CudaGraphEngine, DynamoEngine, EagerEngine, ExportEngine, PerModeEngine,
                      precompile_refusal, generates_code, precompile_refused, traces)
from .interface import CompiledModel, CompileStats, Engine, EngineSettings
from .program import CompiledHost, Signature, per_micro_batch, save_program, signature_of
from .ddp import CompiledDDP, is_ddp
from .registry import Backend, add_backend, backend_entry, backend_names, device_of
from .select import Measure, Selected, measure_settings
from .tuner import active_tuner, tuning_needed

__all__ = ["CompiledModel", "Compiled", "compile", "register_backend", "BACKENDS"]


# --------------------------------------------------------------------------
# Compiled: what the in-process backends return
# --------------------------------------------------------------------------
class Compiled(CompiledHost):
    """What :func:`compile` returns for an in-process backend: call it with flat dicts.

    The caller runs backward and the optimizer step (``steps_optimizer`` is False).

    Attributes:
        wrapped: the ``ipu_wrap``-ped module (parameters are shared).
        backend: the backend name.
        compile_count: compiles so far (see :mod:`graph_adapter.backends`);
            with ``background=True``, the children's compiles included.
        signatures: the admitted input signatures.
        stats: a :class:`~graph_adapter.backends.interface.CompileStats`: the rewrites
            that fired and, with a background compile, what it did.
    """

    steps_optimizer = False

    def __init__(self, wrapped: nn.Module, backend: str, allow_new_shapes: bool = False,
                 options: Optional[Dict[str, Any]] = None, strict: bool = False,
                 index_add_fallback: Optional[bool] = None, check_bounds: Optional[bool] = None,
                 precompile: Optional[bool] = None, background: Optional[bool] = None):
        entry = backend_entry(backend, device_of(wrapped))
        if entry.engine is None:
            raise ValueError(f"backend {backend!r} does not run in this process; use compile()")
        self.wrapped = wrapped
        self.backend = entry.name
        self.allow_new_shapes = allow_new_shapes
        self.strict = strict
        self.signatures: List[Signature] = []
        static.install(getattr(wrapped, "model", wrapped))
        if precompile and not (isinstance(entry.engine, type)
                               and issubclass(entry.engine, DynamoEngine)):
            raise precompile_refused(entry.name, precompile_refusal(
                entry.name, wrapped, False, entry.engine))
        background = self._background(entry, wrapped, background, precompile)
        if background and entry.name == "inductor":
            precompile = True  # the child hands its compile over as a precompiled entry
        engine = entry.engine(wrapped, EngineSettings(entry.name, options, strict,
                                                      index_add_fallback, precompile))
        if not isinstance(engine, Engine):
            raise TypeError(f"backend {entry.name!r}: its engine {type(engine).__name__} does "
                            f"not implement graph_adapter.backends.Engine (subclass it)")
        tuner = active_tuner()
        if background and tuner is not None:
            engine = tuner.in_background(wrapped, engine)
        self._engine: Engine = engine
        self.check_bounds = check_bounds
        self._bounds: Dict[Signature, BoundsPlan] = {}  # per signature; empty: not checked

    @staticmethod
    def _background(entry: Backend, wrapped: nn.Module, background: Optional[bool],
                    precompile: Optional[bool]) -> bool:
        """Whether this model compiles in the background: the tuner decides
        (``background=None``: its default); without one, never."""
        tuner = active_tuner()
        if tuner is None:
            if background:
                raise tuning_needed("background=True")
            return False
        return tuner.plan_background(entry.name, entry.engine, wrapped, background, precompile)

    # ---- the compiled-model interface ------------------------------------
    @property
    def stats(self) -> CompileStats:
        """What this model's compiles did so far: ``.rewrites``, the graph rewrites of
        :mod:`graph_adapter.tuning` that fired (name -> count); ``.background``, with a
        background compile, how many calls ran eagerly and when each mode switched
        (``graph_adapter.tuning.BackgroundStats``), else ``None``."""
        return CompileStats(dict(self._engine.rewrites), self._engine.background_stats)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """With ``background=True``: block until no background compile runs or waits
        (at most ``timeout`` seconds); whether none does. Without: ``True``."""
        return self._engine.wait(timeout)

    def close(self) -> None:
        """Stop a running background compile (its mode stays eager); else nothing."""
        self._engine.close()

    def expect_calls(self, n: int) -> None:
        """With ``background=True``: the run makes about ``n`` more calls (the training
        steps left), so a cold compile that cannot pay back within them starts after
        them (``graph_adapter.tuning.BackgroundEngine.expect_calls``). Without:
        nothing (the first call compiles in any case)."""
        self._engine.expect_calls(n)

    @property
    def compile_count(self) -> int:
        return self._engine.compile_count

    @property
    def atomic_adds(self) -> Optional[bool]:
        """Whether the code compiled so far adds with atomics (sums in an order that
        changes from run to run on more than one thread): read from inductor's
        generated code by the tuning wing; ``False`` for backends that generate none;
        ``None`` when it could not be read (or no tuning wing reads it)."""
        return self._engine.atomic_adds

    @property
    def mode_backend(self) -> str:
        """The backend that runs batches in the current mode (``"inductor_eval"``:
        ``"eager"`` in training mode, ``"inductor"`` in eval mode)."""
        if isinstance(self._engine, PerModeEngine):
            return self._engine.train_backend if self.training else self._engine.eval_backend
        return self.backend

    def __call__(self, flat: Mapping[str, Tensor]) -> Dict[str, Tensor]:
        sig = signature_of(flat)
        self._admit(sig)
        key = (sig, self.wrapped.training)
        # ipu_wrap(check_inputs="values") reads values in eager calls only; a traced
        # forward cannot, so the values are checked here, on the host, before the call.
        values = getattr(self.wrapped, "check_inputs", None) == "values" and \
            traces(self._engine, key[1])
        plan = self._bounds.get(sig)
        if plan is None:
            plan = self._bounds[sig] = self._plan_bounds(flat)
        check_before_call(flat, values, plan)
        self._engine.begin_call()  # a step mark (CUDA graphs)
        self._engine.before_call(flat, key)  # background: eager or compiled
        try:
            return per_micro_batch(lambda mb: self._engine.run(mb, key), flat)
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
        it runs there only with ``check_bounds=True``. The layout tables
        (``LAYOUT_KEYS``) are checked on the CPU whatever the engine: their gathers
        clamp each id and mask the padding id, so an out-of-range id would read as
        padding under ATen's kernels too, not raise.
        """
        want = self.check_bounds
        on_cpu = all(v.device.type == "cpu" for v in flat.values() if isinstance(v, Tensor))
        if want is None:
            if not (generates_code(self._engine) and on_cpu):
                return tuple(p for p in bounds_plan(flat) if p[0] in LAYOUT_KEYS) \
                    if on_cpu else ()
            want = True
        return bounds_plan(flat) if want else ()

    # ---- export ------------------------------------------------------------
    @property
    def programs(self) -> Dict[Tuple[Signature, bool], Any]:
        """``{(signature, training): ExportedProgram}`` (export backend)."""
        return dict(self._engine.programs)

    def save(self, path: str, which: int = 0) -> None:
        """Save an exported program (the ``which``-th) with its signature (export backend)."""
        if not isinstance(self._engine, ExportEngine):
            raise ValueError("save() needs backend='export'")
        if not self._engine.programs:
            raise ValueError("nothing exported yet: call the compiled model on one batch first")
        (sig, training), ep = list(self._engine.programs.items())[which]
        save_program(ep, path, sig, training)


# --------------------------------------------------------------------------
# compile()
# --------------------------------------------------------------------------
# Over 80 lines for its docstring: the user-facing reference of every argument.
def compile(wrapped: nn.Module, backend: str = "auto", *, allow_new_shapes: bool = False,
            options: Optional[Dict[str, Any]] = None, optimizer: Any = None,
            strict: bool = False, index_add_fallback: Optional[bool] = None,
            check_bounds: Optional[bool] = None,
            select: Union[None, str, Measure] = None, precompile: Optional[bool] = None,
            background: Optional[bool] = None, **kwargs: Any) -> CompiledModel:
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
            or ends the process). Costs one ``aminmax`` per index key (well
            under 1% of a compiled inference call, docs/compile.md); on a GPU
            each check waits for the device, so it is off there unless
            ``True``. The other backends run ATen kernels, which raise, and
            the bad value is named after the failure. ``"poptorch"``: checked
            on the host before each call unless ``False`` (what the IPU does
            with a bad index is not known); ``"ipu-emulator"`` runs the
            forward eagerly, which names a bad value itself.
        select: ``None`` (default): the backend's compiled model. ``"measure"``
            (or a :class:`~graph_adapter.backends.select.Measure`): a
            :class:`~graph_adapter.backends.select.Selected` that times, at
            the first steps of each mode, the compiled model on the batch as
            it comes, the compiled model without the layout tables (where the
            batch has them; a second compile) and the eager wrapper, and keeps
            the fastest median (``.choices``). In-process backends only.
        precompile: ``"inductor"`` on the CPU, with :mod:`graph_adapter.tuning`
            (without it ``True`` raises ``ValueError``): save each graph's whole Dynamo
            result (torch's ``aot_compile``) beside inductor's caches and let a
            later process with the same model, budget, settings and sources load
            it instead of tracing the model again (docs/wrapping.md).
            ``None`` (default): on where the model compiles in the background
            (its child hands the program over as an entry), else off unless
            ``GRAPH_ADAPTER_PRECOMPILE=1`` was in the environment at import;
            ``False`` turns both off; ``True`` for another backend or device
            raises ``ValueError``. Otherwise opt-in: torch marks the API experimental, and
            a loaded entry does not see a function of the model replaced at run
            time (:mod:`graph_adapter.tuning.precompile`).
        background: ``"inductor"`` on the CPU (and ``"aot_eager"``), with
            :mod:`graph_adapter.tuning` (without it ``None`` is off and ``True`` raises
            ``ValueError``): run each new
            (budget, mode) eagerly, through the wrapped module itself (on the real
            rows only with ``ipu_wrap(trim=True)``), while a forked child process
            compiles it and saves a precompiled entry; the first call after the
            child is done loads that entry (about a second) and the calls after
            it run compiled. The model, the optimizer state and the buffers are
            the same objects throughout. ``.stats.background`` says how many calls
            ran eagerly and when each mode switched, ``.wait()`` blocks until the
            compiles are done, ``.close()`` stops them. A child that fails
            leaves its mode eager and warns once with the reason.
            ``None`` (default): on for ``"inductor"`` with a CPU model where
            precompiled entries can serve it (``graph_adapter.tuning.BACKGROUND_DEFAULT``; not
            in a distributed run, not in a daemon process, not with
            ``precompile=False``), else off, silently; ``True`` where it
            cannot serve raises ``ValueError`` naming why (a GPU model, an IPU
            backend: poptorch compiles before its first step).
            :mod:`graph_adapter.tuning.background`.
        kwargs: backend-specific (see :func:`graph_adapter.ipu.compile_ipu`);
            the in-process backends take none.

    Returns:
        A :class:`CompiledModel`: a :class:`Compiled` for the in-process
        backends, what :func:`graph_adapter.ipu.compile_ipu` returns for the
        IPU ones; for a ``DistributedDataParallel`` module, a
        :class:`~graph_adapter.backends.ddp.CompiledDDP` that runs DDP around
        the compiled wrapped module (DDP's own forward does not trace whole).

    Raises:
        ValueError: an unknown ``backend``; options that cannot go together, each
            named (``background=True`` / ``precompile=True`` where they cannot serve,
            ``select=`` with a DDP module, with ``background=True`` or with a backend
            that does not run in this process; a DDP module with a backend that steps
            the optimizer itself); ``"inductor_cudagraphs"`` for a model off CUDA.
        TypeError: a keyword argument the backend does not take.
        ShapeChangedError: (at call time) a batch of another budget than the
            compiled one, without ``allow_new_shapes=True``.
        InputValueError: (at call time) an index out of its range: found by the bounds
            check before the call, or named after an ATen kernel's failure.

    Example:
        ```python
        import torch
        from torch_geometric.datasets import FakeDataset
        from torch_geometric.nn import GCN

        import graph_adapter as ga

        graphs = FakeDataset(num_graphs=16, avg_num_nodes=10, num_channels=8)
        loader = ga.FixedSizeLoader(graphs, ga.Budget.tight(graphs, 4))
        model = ga.compile(ga.ipu_wrap(GCN(8, 16, 2)), backend="aot_eager")  # "auto": inductor
        with torch.no_grad():
            outs = [model(batch)["output"] for batch in loader]  # one budget: one compile
        ```
    """
    if is_ddp(wrapped):  # DDP's forward does not trace: compile what it wraps
        if select is not None:
            raise ValueError("compile(DistributedDataParallel(...), select=...): measure on "
                             "one process (compile the wrapped module), then wrap in DDP")
        inner = compile(wrapped.module, backend, allow_new_shapes=allow_new_shapes,
                        options=options, optimizer=optimizer, strict=strict,
                        index_add_fallback=index_add_fallback, check_bounds=check_bounds,
                        precompile=precompile, background=background, **kwargs)
        if inner.steps_optimizer:
            raise ValueError(f"compile(DistributedDataParallel(...), {backend!r}): that backend "
                             f"runs its own step; DDP needs one the caller steps (inductor, "
                             f"aot_eager, eager)")
        return CompiledDDP(wrapped, inner)
    entry = backend_entry(backend, device_of(wrapped))
    if precompile is not None:
        kwargs["precompile"] = precompile
    if background is not None:
        kwargs["background"] = background
    if select is not None:
        if background:
            raise ValueError("compile(..., select=..., background=True): selection times the "
                             "compiled program at the first steps, which background=True runs "
                             "eagerly; pass one of the two")
        kwargs["background"] = False  # (whatever the tuning wing's default says)
        measure = measure_settings(select)
        if entry.engine is None:
            raise ValueError(f"compile({entry.name!r}, select=...): selection by measurement "
                             f"runs candidates in this process; backend {entry.name!r} does not")
        return Selected(wrapped, lambda: entry.build(
            wrapped, entry.name, allow_new_shapes=allow_new_shapes, options=options,
            optimizer=optimizer, strict=strict, index_add_fallback=index_add_fallback,
            check_bounds=check_bounds, **kwargs), measure, allow_new_shapes=allow_new_shapes)
    return entry.build(wrapped, entry.name, allow_new_shapes=allow_new_shapes, options=options,
                       optimizer=optimizer, strict=strict,
                       index_add_fallback=index_add_fallback, check_bounds=check_bounds,
                       **kwargs)


def _build_compiled(wrapped: nn.Module, name: str, *, allow_new_shapes: bool = False,
                    options: Optional[Dict[str, Any]] = None, optimizer: Any = None,
                    strict: bool = False, index_add_fallback: Optional[bool] = None,
                    check_bounds: Optional[bool] = None, precompile: Optional[bool] = None,
                    background: Optional[bool] = None, **kwargs: Any) -> Compiled:
    """The build of every engine backend (``optimizer`` unused: the caller steps it)."""
    if kwargs:
        raise TypeError(f"unexpected keyword arguments for backend {name!r}: {sorted(kwargs)}")
    return Compiled(wrapped, name, allow_new_shapes=allow_new_shapes, options=options,
                    strict=strict, index_add_fallback=index_add_fallback,
                    check_bounds=check_bounds, precompile=precompile, background=background)


def _build_ipu(wrapped: nn.Module, name: str, *, allow_new_shapes: bool = False,
               options: Any = None, optimizer: Any = None, strict: bool = False,
               index_add_fallback: Optional[bool] = None, check_bounds: Optional[bool] = None,
               precompile: Optional[bool] = None, background: Optional[bool] = None,
               **kwargs: Any) -> Any:
    """The build of the IPU backends (``strict`` and ``index_add_fallback`` do not
    apply; ``check_bounds`` goes to the poptorch runner, which checks host batches)."""
    if precompile:
        raise precompile_refused(name, f"precompiled entries serve backend 'inductor' only, "
                                       f"not {name!r}")
    if background:
        raise ValueError(f"compile({name!r}, background=True): poptorch compiles its program "
                         f"before the first step, by design; pass background=False")
    if check_bounds is not None:
        kwargs["check_bounds"] = check_bounds
    if allow_new_shapes:
        kwargs["allow_new_shapes"] = True
    # Looked up on the package at call time, so that it can be replaced (tests do).
    return ipu.compile_ipu(wrapped, name, options=options, optimizer=optimizer, **kwargs)


# --------------------------------------------------------------------------
# register_backend() and the built-in backends
# --------------------------------------------------------------------------
def register_backend(name: str, build: Optional[Callable[..., Any]] = None, *,
                     engine: Optional[Callable[..., Any]] = None, doc: str = "") -> None:
    """Add a backend: give ``build`` (returns a :class:`CompiledModel`) or an ``engine``.

    With ``engine``, :class:`Compiled` does the signature checks and the
    micro-batch loop and the engine runs one micro-batch (see the built-in
    engines, :mod:`graph_adapter.backends.engines`). Raises ``ValueError`` for
    a name already taken.
    """
    if name in backend_names():  # "auto" included
        raise ValueError(f"backend {name!r} is already registered")
    if (build is None) == (engine is None):
        raise TypeError("register_backend needs exactly one of build= and engine=")
    add_backend(Backend(name, build if build is not None else _build_compiled, doc, engine))


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
