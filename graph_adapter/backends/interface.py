"""The typed interfaces of the compile core: engines and compiled models.

:class:`Engine` is what a registry entry's ``engine`` builds and what
:class:`~graph_adapter.backends.compiled.Compiled` drives: it runs one
micro-batch (``run(flat, key)``) and counts its compiles (``compile_count``).
Every other member has a default here, so that an engine states only what it
does differently (the built-in ones subclass :class:`Engine`); ``Compiled``
calls them directly, never probing for them.

:class:`CompiledModel` is what :func:`~graph_adapter.backends.compile` returns
for every backend; :class:`InProcessModel` adds what the in-process backends'
models (``Compiled``) also answer, and :class:`CompileStats` what their ``stats`` say.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterator, Mapping, Optional, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

__all__ = ["EngineSettings", "Engine", "CompiledModel", "InProcessModel", "CompileStats",
           "merge_atomic"]


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    """What ``compile()`` passes to an engine."""

    backend: str
    options: Optional[Dict[str, Any]] = None
    strict: bool = False
    index_add_fallback: Optional[bool] = None
    #: precompiled entries (needs :mod:`graph_adapter.tuning`): ``None`` follows the
    #: tuning wing's default (off without it)
    precompile: Optional[bool] = None


@runtime_checkable
class Engine(Protocol):
    """How an in-process backend runs one micro-batch (a registry entry's ``engine``,
    called as ``engine(wrapped, settings: EngineSettings)``).

    Required: :meth:`run` and :attr:`compile_count`. The rest have defaults (an engine
    that subclasses this class inherits them): no step mark, nothing before a call,
    traced in both modes, no generated code, no atomic adds, no rewrites, no
    exported programs, no background compile.
    """

    def run(self, flat: Dict[str, Tensor], key: Any) -> Dict[str, Tensor]:
        """Run one micro-batch; ``key`` is ``(signature, training)``."""
        ...

    @property
    def compile_count(self) -> int:
        """Real compiles so far (see :mod:`graph_adapter.backends`)."""
        ...

    # ---- members with defaults --------------------------------------------------
    def begin_call(self) -> None:
        """Once per :class:`Compiled` call, before its micro-batches (a new step)."""

    def before_call(self, flat: Mapping[str, Tensor], key: Any) -> None:
        """Once per call, with the whole batch, before its micro-batches run."""

    def traces(self, training: bool) -> bool:
        """Whether this engine runs the wrapped forward traced (not eagerly) in a mode."""
        return True

    @property
    def runs_generated_code(self) -> bool:
        """Whether the compiled calls run code inductor generated."""
        return False

    @property
    def atomic_adds(self) -> Optional[bool]:
        """Whether the generated code adds with atomics (``None``: unknown)."""
        return False

    @property
    def rewrites(self) -> Dict[str, int]:
        """Which graph rewrites fired in this engine's compiles: name -> count."""
        return {}

    @property
    def programs(self) -> Dict[Any, Any]:
        """``{(signature, training): ExportedProgram}`` (the export engine)."""
        return {}

    @property
    def background_stats(self) -> Any:
        """What a background compile did so far (``None``: none runs)."""
        return None

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until no background compile runs (at most ``timeout`` s); whether none does."""
        return True

    def close(self) -> None:
        """Stop a running background compile."""

    def expect_calls(self, n: int) -> None:
        """The run makes about ``n`` more calls (a background compile may use it)."""


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


@dataclasses.dataclass(frozen=True)
class CompileStats:
    """What an in-process compiled model's compiles did so far (``compiled.stats``;
    each read is a new snapshot).

    Attributes:
        rewrites: which graph rewrites of :mod:`graph_adapter.tuning` fired: name -> how
            many times (empty without the wing, or where every graph came from inductor's
            cache: a cached graph is not rewritten again; a background compile's child
            counts its own, not here).
        background: with a background compile (``compile(..., background=...)``), what
            it did: ``graph_adapter.tuning.BackgroundStats`` (how many calls ran eagerly,
            when each mode switched, ``.keys``); ``None`` where none runs.
    """

    rewrites: Dict[str, int] = dataclasses.field(default_factory=dict)
    background: Any = None

    def summary(self) -> str:
        """One line for people: the background compile's summary (where one runs) and the
        rewrites that fired."""
        fired = ", ".join(f"{name} x{n}" for name, n in sorted(self.rewrites.items()))
        parts = [] if self.background is None else [self.background.summary()]
        return "; ".join(parts + [f"rewrites fired: {fired}" if fired else "no rewrite fired"])


class InProcessModel(CompiledModel, Protocol):
    """A :class:`CompiledModel` of an in-process backend (``Compiled``, ``Selected``)."""

    backend: str

    @property
    def atomic_adds(self) -> Optional[bool]: ...
    @property
    def stats(self) -> CompileStats: ...


def merge_atomic(*found: Optional[bool]) -> Optional[bool]:
    """What several compiles' atomic-add answers say together: ``True`` if any graph adds
    atomically, else ``None`` if any could not be read, else ``False``."""
    return True if True in found else (None if None in found else False)
