"""The backend registry: a table from a name to how to build the compiled model.

In the spirit of ``torch.utils._pytree``'s node registry. This module holds the
table and its reads (:func:`backend_names`, :func:`resolve_backend`, the one
place ``"auto"`` is resolved, by :data:`AUTO_RULE`); :func:`register_backend`,
which writes it, lives in :mod:`graph_adapter.backends.compiled` (an engine
backend's build is :class:`~graph_adapter.backends.compiled.Compiled`, which
reads this table: the table sits below both).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from torch import nn

__all__ = [
    "AUTO", "AUTO_RULE", "Backend", "add_backend", "get_backend", "backend_entry",
    "backend_names", "auto_engine", "resolve_backend", "device_of",
]

AUTO = "auto"

#: What ``"auto"`` runs without poptorch, per (device type, training mode): inductor
#: in both modes, the fastest on the CPU (with :mod:`graph_adapter.tuning`;
#: docs/benchmarks.md, "Which backend auto picks") and chosen on GPUs for CUDA graphs.
#: ``"inductor_eval"`` keeps training eager (no training compile: short runs).
AUTO_RULE: Dict[Tuple[str, bool], str] = {
    ("cpu", True): "inductor", ("cpu", False): "inductor",
    ("cuda", True): "inductor", ("cuda", False): "inductor",
}

#: The registered per-mode backend of each (training, inference) pair of AUTO_RULE.
_PER_MODE = {("eager", "inductor"): "inductor_eval"}


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


def add_backend(entry: Backend) -> None:
    """Put ``entry`` in the table (what :func:`register_backend` does once it has
    the build). Raises ``ValueError`` for a name already taken."""
    if entry.name == AUTO or entry.name in _REGISTRY:
        raise ValueError(f"backend {entry.name!r} is already registered")
    _REGISTRY[entry.name] = entry


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


def get_backend(name: str) -> Backend:
    """The registry entry of a registered (concrete) name; ``KeyError`` for any other."""
    return _REGISTRY[name]


def backend_entry(name: str, device: Any = "cpu") -> Backend:
    """The registry entry of ``name`` (``"auto"`` resolved for ``device``)."""
    return _REGISTRY[resolve_backend(name, device)[0]]


def device_of(wrapped: nn.Module) -> torch.device:
    """The device of the model's first parameter (CPU without parameters)."""
    p = next(iter(wrapped.parameters()), None)
    return torch.device("cpu") if p is None else p.device
