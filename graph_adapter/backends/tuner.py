"""The hook through which a tuning wing plugs into the compile core.

The core compiles without one: ``"inductor"`` is then plain
``torch.compile(fullgraph=True, dynamic=False)`` through inductor's
``compile_fx`` with inductor's own settings (no custom passes), ``background=None``
means off, and ``precompile=True`` / ``background=True`` raise a ``ValueError``
saying they need :mod:`graph_adapter.tuning`. Importing :mod:`graph_adapter.tuning`
(``import graph_adapter`` does, unless ``GRAPH_ADAPTER_TUNING=0`` is in the
environment) registers its :class:`Tuner` here with :func:`register_tuner`; the
engines ask :func:`active_tuner` at each compile. The core never imports the wing.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple

import torch
from torch import Tensor, nn

from .interface import Engine, EngineSettings

__all__ = ["InductorCompile", "PrecompiledCalls", "Tuner", "register_tuner", "active_tuner",
           "tuning_needed"]


@dataclasses.dataclass
class InductorCompile:
    """What a tuner's inductor compile of one graph returns."""

    #: the compiled graph's callable (what a Dynamo backend returns)
    fn: Callable[..., Any]
    #: whether its generated code adds with atomics (``None``: not read)
    atomic_adds: Optional[bool] = None
    #: the rewrites that fired on this graph: name -> count
    rewrites: Dict[str, int] = dataclasses.field(default_factory=dict)


class PrecompiledCalls(Protocol):
    """A Dynamo engine's precompiled entries, one per (signature, mode, grad mode)."""

    #: entries loaded from an earlier process's artifact so far
    loads: int

    def entry(self, flat: Dict[str, Tensor], key: Any) -> Optional[Callable[..., Any]]:
        """The entry that serves this call (loaded, or built and saved now), or ``None``
        (the ordinary ``torch.compile`` entry then runs it)."""
        ...

    def warm(self, flat: Dict[str, Tensor]) -> bool:
        """Load or build and save this call's entry; whether one is on disk now."""
        ...

    def has_saved_entry(self, flat: Dict[str, Tensor]) -> bool:
        """Whether an entry of this call is on disk."""
        ...

    def load_only(self, flat: Dict[str, Tensor], key: Any) -> bool:
        """Load this call's entry where one on disk serves it (never compiles)."""
        ...


class Tuner(Protocol):
    """What the compile core asks of a tuning wing."""

    name: str

    def compile_inductor(self, gm: torch.fx.GraphModule, example_inputs: List[Any],
                         settings: EngineSettings) -> InductorCompile:
        """Compile one Dynamo graph with inductor, tuned (``settings.options`` on top)."""
        ...

    def precompile_by_default(self) -> bool:
        """What ``precompile=None`` means."""
        ...

    def precompiled_calls(self, wrapped: nn.Module, entry: Callable[..., Any],
                          backend: Callable[..., Any],
                          settings: EngineSettings) -> PrecompiledCalls:
        """Precompiled entries of ``entry`` (the engine's traced function) compiled with
        the Dynamo ``backend``."""
        ...

    def precompiled_counts(self) -> Tuple[int, int]:
        """``(loaded, saved)`` precompiled entries in this process so far."""
        ...

    def plan_background(self, backend: str, engine: Any, wrapped: nn.Module,
                        background: Optional[bool], precompile: Optional[bool]) -> bool:
        """Whether this model compiles in the background (``background=None``: the
        wing's default); ``ValueError`` where asked for and impossible."""
        ...

    def in_background(self, wrapped: nn.Module, engine: Engine) -> Engine:
        """``engine`` behind a background compile."""
        ...


_ACTIVE: List[Tuner] = []


def register_tuner(tuner: Optional[Tuner]) -> None:
    """Make ``tuner`` the one the engines ask (``None``: none, the plain compile)."""
    _ACTIVE[:] = [] if tuner is None else [tuner]


def active_tuner() -> Optional[Tuner]:
    """The registered tuner, or ``None``."""
    return _ACTIVE[0] if _ACTIVE else None


def tuning_needed(what: str) -> ValueError:
    """The error of an argument that only the tuning wing serves, where none is registered."""
    return ValueError(
        f"compile(..., {what}) needs graph_adapter.tuning, which is not registered here "
        f"(not importable, or GRAPH_ADAPTER_TUNING=0 in the environment); leave it unset")

