"""Precompiled entries: a warm process skips Dynamo's trace (opt-in, ``ENABLED``).

Inductor's FX graph cache and AOTAutograd's cache already give a second process
the compiled kernels; what it still pays at its first step is Dynamo tracing the
model again. torch 2.13's ``torch.compile(...).aot_compile(((flat,), {}))``
keeps the whole Dynamo result (the transformed bytecode, the guards, the
AOTAutograd forward and backward and their inductor code) as torch's own
serialized artifact; ``torch.compiler.load_compiled_function`` brings it back
without tracing. :class:`~graph_adapter.backends.engines.DynamoEngine` uses one
per (signature, mode, grad mode) when ``ENABLED``:

* **where**: ``$TORCHINDUCTOR_CACHE_DIR/graph_adapter_precompiled/<key>.bin``
  (torch's artifact, written atomically), beside ``<key>.json`` (what the key
  was made of, for people; never read back to decide anything);
* **the key** (:func:`artifact_key`, sha256 of a JSON document): torch and
  Python versions and executable, graph_adapter's FX pass versions, the backend, its options
  and the ``index_add`` fallback, the thread count (inductor's CPU code bakes
  it in), the batch's keys, dtypes, shapes, strides and devices, the training
  flag of every submodule and the grad mode, and the model's structure: every
  submodule's class and public attributes (:func:`_describe`: plain values,
  containers, callables by bytecode and closure contents, such as the loss
  function's), every parameter's and buffer's name, shape, dtype, device and
  ``requires_grad``;
* **stale code never runs**: the artifact records the source lines of every
  function Dynamo traced and their checksum; a load compares them with the
  files as they are now (:func:`sources_unchanged`) and recompiles on any
  difference (a changed ``forward`` of the model, of PyG, of graph_adapter);
* **guards**: the loaded entry runs its own serialized guards on every call
  (the guards Dynamo can serialize: the batch's tensors, the modules' flags and
  attributes, the parameters; not identity guards on functions and modules,
  which the source check and the key stand in for). A call whose guards fail
  (the model changed in this process) goes to the ordinary ``torch.compile``
  entry, which recompiles as it would without precompile, and the loaded
  entry is dropped for that key. Global guards are kept where serializable,
  so a module global that ``forward`` reads is checked too.

Only ``"inductor"`` on the CPU and models without an ``nn.RNNBase`` use it.
The wrapped module itself is never serialized: torch pickles it as external
data (``external_data={"wrapped": ...}``), given back at the load.

Torch 2.13 rebuilds a stub of every guarded module when it loads the guards
(``GuardsStatePickler``); PyG's ``MessagePassing.__setstate__`` cannot rebuild
from a stub (``'_Missing' object has no attribute 'implements'``), so the load
runs with ``nn.Module.__setstate__`` in its place (:func:`_plain_setstate`),
restored after.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import sys
from typing import Any, Callable, Dict, Iterator, Mapping, Optional

import torch
from torch import Tensor, nn

__all__ = ["ENABLED", "COUNTS", "artifact_key", "artifact_dir", "sources_unchanged",
           "grads_set_aside", "load", "save", "serializable_guards"]

log = logging.getLogger(__name__)

#: Use precompiled entries (opt-in: set it, or ``GRAPH_ADAPTER_PRECOMPILE=1`` before import).
ENABLED = os.environ.get("GRAPH_ADAPTER_PRECOMPILE") == "1"

#: Entries this process loaded from disk (each skipped a trace) and saved, so far:
#: process-wide, as inductor's own cache counters are (``backends.precompiled_counts``).
COUNTS = {"loaded": 0, "saved": 0}

_FORMAT = "graph_adapter.precompile/1"
_PLAIN = (bool, int, float, str, type(None))


def artifact_dir() -> str:
    """Where the artifacts live: beside inductor's own caches."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return os.path.join(cache_dir(), "graph_adapter_precompiled")


def _describe(v: Any, depth: int = 0) -> Any:
    """A JSON-able, process-independent description of a module attribute that a
    trace may bake in (``None``: a submodule, listed on its own). Callables are
    described by module, name, bytecode and closure contents (``masked_loss("l1")``
    and ``masked_loss("mse")`` differ only in a closure cell: Dynamo's guard on it
    is one that cannot be saved), containers element by element, other objects by
    type and plain attributes; three levels deep."""
    if isinstance(v, _PLAIN):
        return [type(v).__name__, v]
    if isinstance(v, nn.Module):
        return None
    if isinstance(v, Tensor):
        return ["tensor", list(v.shape), str(v.dtype), str(v.device), v.requires_grad]
    if depth >= 3:
        return ["deep", type(v).__qualname__]
    if isinstance(v, (tuple, list)):
        return [type(v).__name__, [_describe(x, depth + 1) for x in v]]
    if isinstance(v, dict):
        return ["dict", [[repr(k), _describe(x, depth + 1)] for k, x in v.items()]]
    if isinstance(v, functools.partial):
        return ["partial", _describe(v.func, depth + 1), _describe(v.args, depth + 1),
                _describe(v.keywords, depth + 1)]
    code = getattr(v, "__code__", None)
    if callable(v) and code is not None:
        cells = []
        for cell in getattr(v, "__closure__", None) or ():
            try:
                cells.append(_describe(cell.cell_contents, depth + 1))
            except ValueError:  # an empty cell
                cells.append("empty")
        return ["function", getattr(v, "__module__", None), v.__qualname__,
                getattr(v, "__name__", None),
                hashlib.sha256(code.co_code + repr(code.co_names).encode()).hexdigest()[:16],
                cells, _describe(getattr(v, "__defaults__", None), depth + 1)]
    if callable(v) and not hasattr(v, "__dict__"):  # builtins, C functions
        return ["builtin", getattr(v, "__module__", None), getattr(v, "__qualname__", repr(type(v)))]
    return ["object", f"{type(v).__module__}.{type(v).__qualname__}",
            [[k, _describe(x, depth + 1)] for k, x in sorted(getattr(v, "__dict__", {}).items())
             if not k.startswith("__")]]


def _structure(wrapped: nn.Module) -> list:
    """Every submodule: name, class, training flag, plain attributes; every
    parameter and buffer: name, shape, dtype, device, requires_grad."""
    mods = []
    for name, m in wrapped.named_modules():
        attrs = {k: _describe(v) for k, v in sorted(vars(m).items())
                 if not k.startswith("_") or k in ("_requested_inputs",)}
        mods.append([name, f"{type(m).__module__}.{type(m).__qualname__}", m.training,
                     {k: v for k, v in attrs.items() if v is not None}])
    tensors = [[kind, name, list(t.shape), str(t.dtype), str(t.device), t.requires_grad]
               for kind, it in (("p", wrapped.named_parameters()), ("b", wrapped.named_buffers()))
               for name, t in it]
    return [mods, tensors]


def _pass_versions() -> Dict[str, int]:
    from . import rewrites as _fx_rewrites, cpu_settings as _inductor_cpu

    return {"fx_rewrites": _fx_rewrites.PASS_VERSION, "inductor_cpu": _inductor_cpu.PASS_VERSION}


def artifact_key(wrapped: nn.Module, flat: Mapping[str, Tensor], settings: Any) -> Dict[str, Any]:
    """What an artifact is valid for (a JSON-able dict; :func:`digest` hashes it)."""
    import torch_geometric

    batch = [[k, str(v.dtype), list(v.shape), list(v.stride()), str(v.device)]
             for k, v in flat.items()]  # in dict order: Dynamo guards on it
    return {
        "format": _FORMAT,
        "torch": torch.__version__, "python": sys.version, "pyg": torch_geometric.__version__,
        # one environment's artifacts only: another venv may trace other code paths
        # (PyG takes torch_scatter's kernels where it is installed)
        "executable": sys.executable,
        "passes": _pass_versions(),
        "backend": settings.backend,
        "options": repr(sorted((settings.options or {}).items())),
        "index_add_fallback": repr(settings.index_add_fallback),
        "threads": torch.get_num_threads(),
        "grad": torch.is_grad_enabled(),
        "batch": batch,
        "model": _structure(wrapped),
    }


def digest(key: Mapping[str, Any]) -> str:
    """The artifact's file name: 40 hex digits of the key's sha256."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:40]


def sources_unchanged(source_info: Any) -> bool:
    """Whether every source range the artifact traced still reads the same now."""
    import linecache

    from torch._dynamo.package import _hash_source

    for src in source_info.inlined_sources:
        mod = sys.modules.get(src.module)
        path = getattr(mod, "__file__", None)
        if path is None:
            return False
        linecache.checkcache(path)
        lines = linecache.getlines(path)[src.firstlineno - 1:src.lastlineno - 1]
        if _hash_source("".join(lines)) != src.checksum:
            return False
    return True


@contextlib.contextmanager
def _plain_setstate() -> Iterator[None]:
    """PyG's ``MessagePassing.__setstate__`` replaced by ``nn.Module``'s (module docstring)."""
    try:
        from torch_geometric.nn.conv import MessagePassing
    except ImportError:  # no PyG: nothing to replace
        yield
        return
    saved = MessagePassing.__dict__.get("__setstate__")
    MessagePassing.__setstate__ = nn.Module.__setstate__
    try:
        yield
    finally:
        if saved is None:
            del MessagePassing.__setstate__
        else:
            MessagePassing.__setstate__ = saved


@contextlib.contextmanager
def grads_set_aside(wrapped: nn.Module) -> Iterator[None]:
    """Every parameter's ``.grad`` set to ``None`` while an entry is compiled to be
    saved, and put back after: torch pickles a guarded tensor with its ``.grad``,
    which is in no guard tree, and its load then fails ("assigned grad expected to
    be a Tensor or None but got grad of type _Missing": an inference entry compiled
    after a training step)."""
    params = list(wrapped.parameters())
    grads = [p.grad for p in params]
    for p in params:
        p.grad = None
    try:
        yield
    finally:
        for p, g in zip(params, grads):
            p.grad = g


def load(key: Mapping[str, Any], wrapped: nn.Module) -> Optional[Callable]:
    """The precompiled entry of ``key``, or ``None`` (none saved, unreadable, made by
    other sources: each logged and answered by a compile, never raised)."""
    from . import host_checks as _host_checks

    path = os.path.join(artifact_dir(), digest(key) + ".bin")
    if not os.path.exists(path):
        return None
    try:
        with open(path, "rb") as fh, _plain_setstate(), _host_checks.remembered_host_checks():
            fn = torch.compiler.load_compiled_function(fh, external_data={"wrapped": wrapped})
    except Exception as exc:  # a torch artifact we cannot read: compile instead
        log.warning("graph_adapter: precompiled entry %s not loaded (%s: %s); compiling",
                    path, type(exc).__name__, exc)
        return None
    if not sources_unchanged(fn.source_info()):
        log.info("graph_adapter: precompiled entry %s traced other sources; compiling", path)
        return None
    COUNTS["loaded"] += 1
    return fn


def save(key: Mapping[str, Any], fn: Any, wrapped: nn.Module) -> None:
    """Write ``fn`` (an ``aot_compile`` result) and its key's description, atomically."""
    d = artifact_dir()
    os.makedirs(d, exist_ok=True)
    name = digest(key)
    fn.save_compiled_function(os.path.join(d, name + ".bin"), external_data={"wrapped": wrapped})
    tmp = os.path.join(d, f".{name}.json.{os.getpid()}")
    with open(tmp, "w") as fh:
        json.dump(key, fh, indent=1, sort_keys=True)
    os.replace(tmp, os.path.join(d, name + ".json"))
    COUNTS["saved"] += 1


def serializable_guards(entries: Any) -> list:
    """The ``guard_filter_fn`` of an entry to be saved: every guard Dynamo can
    serialize, globals included (torch's default for ``aot_compile`` drops globals)."""
    from torch._dynamo.guards import CheckFunctionManager

    bad = CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES
    # Dynamo names the scope of some closures after an object id ("___unnamed_scope_<id>"):
    # a guard on such a name fails in any other process, so it cannot be kept
    return [not (e.guard_type in bad or any(t in bad for t in e.derived_guard_types)
                 or "___unnamed_scope_" in e.name)
            for e in entries]
