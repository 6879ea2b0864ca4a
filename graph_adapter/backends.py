"""``graph_adapter.compile(wrapped, backend=...)``: one compile per budget and mode.

Backends:

* ``"inductor"``: ``torch.compile(wrapped, fullgraph=True, dynamic=False)``;
  with more than one CPU thread, ``aten.index_add`` (the gradient of PyG's
  gathers) is kept as ATen's kernel instead of generated atomic adds
  (``index_add_fallback``).
* ``"aot_eager"``: the same through Dynamo + AOTAutograd without code
  generation (cheap; what the tests use to count compiles).
* ``"eager"``: no compiler, same checks and bookkeeping.
* ``"export"``: ``torch.export.export(wrapped, (flat,))`` per signature;
  :meth:`Compiled.save` / :func:`load` keep the program with its input
  signature as JSON (``torch.export.save`` + an extra file).
* ``"auto"``: ``"poptorch"`` when ``poptorch`` is importable, else
  ``"inductor"``.
* ``"poptorch"`` / ``"ipu-emulator"``: delegated to
  ``graph_adapter.ipu.compile_ipu`` (imported lazily: importing
  graph_adapter never imports poptorch).

The returned :class:`Compiled` records the *signature* of each batch (keys,
dtypes, shapes, without a micro-batch dim) and the mode
(``wrapped.training``). The first batch fixes the signature; a batch whose
signature differs raises :class:`ShapeChangedError` naming the first key
that differs, unless ``allow_new_shapes=True`` (then it compiles once for the
new budget). ``compile_count`` counts real compiles: calls of the Dynamo
backend (a graph compiled, for each mode/grad mode), programs exported, or,
for ``"eager"``, new (signature, mode) pairs.

A batch with a leading micro-batch dim ``F`` is run one micro-batch at a
time; outputs are stacked on a new dim 0 (``[F, ...]``; the loss becomes
``[F]``).
"""
from __future__ import annotations

import itertools
import json
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import torch
from torch import Tensor, nn

from . import static
from .wrap import has_micro_batch_dim

__all__ = ["compile", "Compiled", "ShapeChangedError", "load", "signature_of", "BACKENDS",
           "resolve_backend", "backend_names"]

BACKENDS = ("auto", "inductor", "aot_eager", "eager", "export", "poptorch", "ipu-emulator")


def backend_names() -> Tuple[str, ...]:
    """Every name ``compile(backend=...)`` accepts, ``"auto"`` included."""
    return BACKENDS


def resolve_backend(name: str) -> Tuple[str, str]:
    """``(concrete backend, note)`` for a backend name; the one place ``"auto"`` is resolved.

    ``"auto"`` -> ``("poptorch", "auto: poptorch found")`` when poptorch is
    importable, else ``("inductor", "auto: poptorch not installed")``; a
    concrete name -> ``(name, "")``. Unknown names raise ``ValueError``.
    """
    if name not in BACKENDS:
        raise ValueError(f"backend={name!r}; choose one of {BACKENDS}")
    if name != "auto":
        return name, ""
    try:
        import poptorch  # noqa: F401
    except ImportError:
        return "inductor", "auto: poptorch not installed"
    return "poptorch", "auto: poptorch found"

Signature = Tuple[Tuple[str, str, Tuple[int, ...]], ...]


class ShapeChangedError(ValueError):
    """A batch's keys, dtypes or shapes differ from those the model was compiled for."""


def signature_of(flat: Mapping[str, Tensor]) -> Signature:
    """``((key, dtype, shape), ...)`` in key order (shapes without a micro-batch dim)."""
    strip = has_micro_batch_dim(flat) if "graph_mask" in flat else False
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
            return f"key {k!r} has shape {n[k][1]}, the compiled program takes {o[k][1]}"
    return "signatures differ"


def _use_index_add_fallback(setting: Optional[bool]) -> bool:
    if setting is not None:
        return bool(setting)
    # inductor's own policy for scatter_reduce(sum) on CPU
    # (config.cpp.fallback_scatter_reduce_sum): atomic adds lose to ATen's
    # kernel when more than one thread runs the generated loop.
    return torch.get_num_threads() != 1


def _inductor_decompositions(index_add_fallback: bool) -> Optional[Dict[Any, Callable]]:
    """Inductor's decomposition table, without ``aten.index_add`` when asked.

    The gradient of ``index_select`` (every PyG gather ``x[edge_index[j]]``) is
    an ``index_add``; inductor decomposes it into an ``index_put`` with
    ``accumulate=True``, generated as a loop of atomic adds. Without the
    decomposition ``aten::index_add`` (in inductor's fallback allow list) runs
    ATen's kernel instead.
    """
    if not index_add_fallback:
        return None
    from torch._inductor.decomposition import select_decomp_table

    table = dict(select_decomp_table())
    for op in list(table):
        if getattr(op, "overloadpacket", None) is torch.ops.aten.index_add:
            del table[op]
    return table


class _CountingBackend:
    """A Dynamo backend that counts how often it is asked to compile a graph."""

    def __init__(self, name: str, options: Optional[Dict[str, Any]] = None,
                 index_add_fallback: Optional[bool] = None):
        self.name = name
        self.options = options
        self.index_add_fallback = index_add_fallback
        self.count = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: List[Any]):
        self.count += 1
        if self.name == "inductor":
            from torch._inductor import config
            from torch._inductor.compile_fx import compile_fx

            decomps = _inductor_decompositions(_use_index_add_fallback(self.index_add_fallback))
            with config.patch(self.options or {}):
                return compile_fx(gm, example_inputs, decompositions=decomps)
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


class Compiled:
    """What :func:`compile` returns: call it with flat dicts.

    Attributes:
        wrapped: the ``ipu_wrap``-ped module (parameters are shared).
        backend: the backend name.
        compile_count: compiles so far (see the module doc).
        signatures: the admitted input signatures.
    """

    def __init__(self, wrapped: nn.Module, backend: str, allow_new_shapes: bool = False,
                 options: Optional[Dict[str, Any]] = None, strict: bool = False,
                 index_add_fallback: Optional[bool] = None):
        self.wrapped = wrapped
        self.backend = backend
        self.allow_new_shapes = allow_new_shapes
        self.strict = strict
        self.signatures: List[Signature] = []
        self._seen: set = set()
        self._eager_count = 0
        self._programs: Dict[Tuple[Signature, bool], Any] = {}
        self._modules: Dict[Tuple[Signature, bool], Callable] = {}
        self._counter: Optional[_CountingBackend] = None
        self._fn: Optional[Callable] = None
        model = getattr(wrapped, "model", wrapped)
        static.install(model)
        if backend in ("inductor", "aot_eager"):
            self._counter = _CountingBackend(backend, options, index_add_fallback)
            self._fn = torch.compile(_own_entry(wrapped), backend=self._counter, fullgraph=True,
                                     dynamic=False)

    # ------------------------------------------------------------------
    @property
    def compile_count(self) -> int:
        if self._counter is not None:
            return self._counter.count
        if self.backend == "export":
            return len(self._programs)
        return self._eager_count

    def train(self, mode: bool = True) -> "Compiled":
        self.wrapped.train(mode)
        return self

    def eval(self) -> "Compiled":
        return self.train(False)

    @property
    def training(self) -> bool:
        return self.wrapped.training

    def parameters(self):
        return self.wrapped.parameters()

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

    def __call__(self, flat: Mapping[str, Tensor]) -> Dict[str, Tensor]:
        sig = signature_of(flat)
        self._admit(sig)
        if has_micro_batch_dim(flat) and flat["graph_mask"].size(0) > 1:
            outs = [self._run({k: v[i] for k, v in flat.items()}, sig)
                    for i in range(flat["graph_mask"].size(0))]
            return {k: torch.stack([o[k] for o in outs]) for k in outs[0]}
        return self._run(flat, sig)

    def _run(self, flat: Mapping[str, Tensor], sig: Signature) -> Dict[str, Tensor]:
        key = (sig, self.wrapped.training)
        if self.backend == "eager":
            if (key, torch.is_grad_enabled()) not in self._seen:
                self._seen.add((key, torch.is_grad_enabled()))
                self._eager_count += 1
            return self.wrapped(flat)
        if self._fn is not None:
            return self._fn(flat)
        if self.backend == "export":
            mod = self._modules.get(key)
            if mod is None:
                flat = dict(flat)
                ep = torch.export.export(self.wrapped, (flat,), strict=self.strict)
                self._programs[key] = ep
                mod = self._modules[key] = ep.module()
            return mod(dict(flat))
        raise ValueError(f"unknown backend {self.backend!r}")

    # ------------------------------------------------------------------
    @property
    def programs(self) -> Dict[Tuple[Signature, bool], Any]:
        """``{(signature, training): ExportedProgram}`` (export backend)."""
        return dict(self._programs)

    def save(self, path: str, which: int = 0) -> None:
        """Save an exported program (the ``which``-th) with its signature (export backend)."""
        if self.backend != "export":
            raise ValueError("save() needs backend='export'")
        if not self._programs:
            raise ValueError("nothing exported yet: call the compiled model on one batch first")
        (sig, training), ep = list(self._programs.items())[which]
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
    """A saved export: call it with flat dicts of the saved signature."""

    backend = "export"
    compile_count = 0

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
        if has_micro_batch_dim(flat) and flat["graph_mask"].size(0) > 1:
            outs = [self._module({k: v[i] for k, v in flat.items()})
                    for i in range(flat["graph_mask"].size(0))]
            return {k: torch.stack([o[k] for o in outs]) for k in outs[0]}
        return self._module(dict(flat))


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


def compile(wrapped: nn.Module, backend: str = "auto", *, allow_new_shapes: bool = False,
            options: Optional[Dict[str, Any]] = None, optimizer: Any = None,
            strict: bool = False, index_add_fallback: Optional[bool] = None,
            **kwargs: Any) -> Any:
    """Compile an ``ipu_wrap``-ped model for fixed-size batches.

    Args:
        wrapped: the module ``ipu_wrap`` returned.
        backend: one of :data:`BACKENDS`.
        allow_new_shapes: admit batches of a new budget (one more compile each)
            instead of raising :class:`ShapeChangedError`.
        options: inductor config overrides (``"inductor"``), or poptorch
            options (``"poptorch"``/``"ipu-emulator"``).
        optimizer: for the poptorch backends (training).
        strict: strict ``torch.export`` (``"export"``).
        index_add_fallback: ``"inductor"`` on CPU: run the gradient of
            ``index_select`` (PyG's gathers) with ATen's ``index_add`` kernel
            instead of generated atomic adds. ``None`` (default): when torch
            uses more than one thread at compile time (inductor's own rule
            for ``scatter_reduce``).

    Returns:
        A :class:`Compiled` (or, for the IPU backends, what
        ``graph_adapter.ipu.compile_ipu`` returns).
    """
    backend, _ = resolve_backend(backend)
    if backend in ("poptorch", "ipu-emulator"):
        from .ipu import compile_ipu

        if allow_new_shapes:
            kwargs["allow_new_shapes"] = True
        return compile_ipu(wrapped, backend, options=options, optimizer=optimizer, **kwargs)
    if kwargs:
        raise TypeError(f"unexpected keyword arguments for backend {backend!r}: {sorted(kwargs)}")
    return Compiled(wrapped, backend, allow_new_shapes=allow_new_shapes, options=options, strict=strict,
                    index_add_fallback=index_add_fallback)
