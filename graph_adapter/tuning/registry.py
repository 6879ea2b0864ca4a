"""One registry of what the tuning wing changes in inductor: rewrites and settings.

In the spirit of ``torch.utils._pytree``'s one registry: every graph rewrite, and
every CPU setting that changes what inductor compiles, is one :class:`Entry`
with a name, a paragraph saying what it does and when it applies, the point
where it runs, a version (inductor caches compiled graphs by the versions of the
entries that ran, :func:`cache_key`) and the torch releases it was verified on.

Pass points (inductor has one slot a point, so one :func:`graph_pass` a point
runs the enabled entries of that point by their ``order``):

* ``"pre_grad"``: Dynamo's torch-level graph (``pre_grad_custom_pass``);
* ``"joint"``: AOTAutograd's joint forward + backward graph before it is
  partitioned (``joint_custom_post_pass``);
* ``"post_grad"``: the ATen graphs inductor lowers (``post_grad_custom_post_pass``);
* ``"exported"``: a ``torch.export`` program's ATen graph
  (:func:`graph_adapter.tuning.rewrite_exported`, for ``graph_adapter.export``);
* ``"config"``: a setting, inductor or functorch config values or a behaviour of
  the wing around the compile (no graph pass).

An entry is on when the running torch's ``major.minor`` is in its ``verified_on``
and no :func:`disabled` block turns it off. On a torch it was not verified on, it
is off (its graphs compile as inductor would without it), and one log line says
so, once a process an entry; ``GRAPH_ADAPTER_TUNING_UNVERIFIED=1`` in the
environment runs the unverified entries anyway (to verify them on a new torch).
Tests swap an entry's function with :func:`replaced`, never a module global.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import logging
import os
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

import torch
from torch import fx

__all__ = ["Entry", "POINTS", "register", "entries", "entry", "enabled", "function",
           "disabled", "replaced", "graph_pass", "fired", "cache_key", "run_point",
           "torch_release", "VERIFIED_ON"]

log = logging.getLogger("graph_adapter.tuning")

POINTS = ("pre_grad", "joint", "post_grad", "exported", "config")

#: The torch releases (``major.minor``) the built-in entries were verified on: their
#: tests (``tests/tuning/``, slow and extended ones included) pass there with every entry
#: on. CI runs the pinned release and the newest one.
VERIFIED_ON: Tuple[str, ...] = ("2.13", "2.15")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One rewrite or setting.

    Attributes:
        name: the registry's key (what ``compiled.stats.rewrites`` counts it by).
        doc: what it does and when it applies, one paragraph.
        points: where it runs (:data:`POINTS`; a rewrite may run at ``"pre_grad"``
            and on ``"exported"`` programs).
        version: bumped whenever what it does changes (part of inductor's cache key).
        order: where it runs among the entries of its point (lowest first).
        verified_on: the torch releases (``"2.13"``) its tests passed on.
        run: a graph rewrite: ``run(graph) -> how many places it rewrote``
            (``None`` for a setting).
        cpu_inference_only: applies to CPU inference graphs only.
        patches: a setting's inductor config values (``"config"`` point).
    """

    name: str
    doc: str
    points: Tuple[str, ...]
    version: str
    order: int = 0
    verified_on: Tuple[str, ...] = VERIFIED_ON
    run: Optional[Callable[[fx.Graph], int]] = None
    cpu_inference_only: bool = False
    patches: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        bad = [p for p in self.points if p not in POINTS]
        if bad or not self.points:
            raise ValueError(f"entry {self.name!r}: points {self.points}, not of {POINTS}")


_ENTRIES: Dict[str, Entry] = {}
_OFF: Dict[str, int] = collections.Counter()  # name -> open disabled() blocks
_SWAPPED: Dict[str, Callable[[fx.Graph], int]] = {}
_LOGGED: set = set()


def register(e: Entry) -> Entry:
    """Add ``e`` (``ValueError`` for a name already taken); returns it."""
    if e.name in _ENTRIES:
        raise ValueError(f"tuning entry {e.name!r} is already registered")
    _ENTRIES[e.name] = e
    return e


def entries(point: Optional[str] = None) -> List[Entry]:
    """The registered entries (of one point), in the order they run."""
    return sorted((e for e in _ENTRIES.values() if point is None or point in e.points),
                  key=lambda e: (POINTS.index(e.points[0]), e.order))


def entry(name: str) -> Entry:
    """The entry of ``name`` (``KeyError`` names the registered ones)."""
    try:
        return _ENTRIES[name]
    except KeyError:
        raise KeyError(f"no tuning entry {name!r}; registered: {sorted(_ENTRIES)}") from None


def torch_release(version: Optional[str] = None) -> str:
    """``major.minor`` of ``version`` (default: the running torch's)."""
    parts = (version or torch.__version__).split("+")[0].split(".")
    return ".".join(parts[:2])


def _verified(e: Entry) -> bool:
    release = torch_release()
    if release in e.verified_on or os.environ.get("GRAPH_ADAPTER_TUNING_UNVERIFIED") == "1":
        return True
    if e.name not in _LOGGED:
        _LOGGED.add(e.name)
        log.warning("graph_adapter.tuning: %s is off: not verified on torch %s (verified on "
                    "%s)", e.name, release, ", ".join(e.verified_on))
    return False


def enabled(name: str) -> bool:
    """Whether entry ``name`` is on: verified on this torch, not :func:`disabled`."""
    e = entry(name)
    return not _OFF[name] and _verified(e)


def function(name: str) -> Callable[[fx.Graph], int]:
    """The rewrite ``name`` runs (its :func:`replaced` stand-in inside such a block)."""
    e = entry(name)
    if name in _SWAPPED:
        return _SWAPPED[name]
    if e.run is None:
        raise ValueError(f"tuning entry {name!r} is a setting, not a rewrite")
    return e.run


@contextlib.contextmanager
def disabled(*names: str) -> Iterator[None]:
    """Entries ``names`` off inside the block (graphs compiled there; their cache key
    says so, so inductor's cache does not serve a graph compiled with them on)."""
    for name in names:
        entry(name)
        _OFF[name] += 1
    try:
        yield
    finally:
        for name in names:
            _OFF[name] -= 1


@contextlib.contextmanager
def replaced(name: str, fn: Callable[[fx.Graph], int]) -> Iterator[None]:
    """Rewrite ``name`` runs ``fn`` instead inside the block (tests count or alter a
    rewrite this way; compile with ``options={"force_disable_caches": True}``)."""
    entry(name)
    old = _SWAPPED.get(name)
    _SWAPPED[name] = fn
    try:
        yield
    finally:
        if old is None:
            _SWAPPED.pop(name, None)
        else:
            _SWAPPED[name] = old


def cache_key(point: Optional[str] = None, cpu_inference: bool = True) -> str:
    """The enabled entries' names and versions (of one point): what inductor's cache
    keys a compile by (a pass's ``uuid()``), and precompiled entries too."""
    parts = []
    for e in entries(point):
        if (e.cpu_inference_only and not cpu_inference) or not enabled(e.name):
            continue
        parts.append(f"{e.name}.v{e.version}" + (".swapped" if e.name in _SWAPPED else ""))
    return ",".join(parts)


def run_point(point: str, graph: fx.Graph, cpu_inference: bool = True,
              counts: Optional[Dict[str, int]] = None) -> Dict[str, int]:
    """Run the enabled rewrites of ``point`` on ``graph`` in order; add what each
    rewrote to ``counts`` (returned; names that rewrote nothing are left out)."""
    counts = collections.Counter() if counts is None else counts
    for e in entries(point):
        if e.run is None or (e.cpu_inference_only and not cpu_inference) \
                or not enabled(e.name):
            continue
        n = function(e.name)(graph)
        if n:
            counts[e.name] = counts.get(e.name, 0) + n
    return counts


@functools.lru_cache(maxsize=None)
def _pass_class() -> type:
    # Built on first use: importing torch._inductor costs about a second.
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class RegistryPass(CustomGraphPass):
        """One inductor pass slot: the registry's enabled rewrites of one point, in
        order; ``fired`` counts what each rewrote (name -> count)."""

        def __init__(self, point: str, cpu_inference: bool, fired: Dict[str, int]) -> None:
            self.point, self.cpu_inference, self.fired = point, cpu_inference, fired
            self.key = f"graph_adapter.tuning.{point}:{cache_key(point, cpu_inference)}"

        def __call__(self, graph: fx.Graph) -> None:
            run_point(self.point, graph, self.cpu_inference, self.fired)

        @property
        def rewritten(self) -> int:
            """Places rewritten so far, by every rewrite of this pass."""
            return sum(self.fired.values())

        def uuid(self) -> Any:  # inductor's cache keys compiled graphs by it
            return self.key

    return RegistryPass


def graph_pass(point: str, cpu_inference: bool, fired: Dict[str, int]) -> Any:
    """A ``CustomGraphPass`` (inductor caches by its ``uuid()``) running ``point``'s
    enabled rewrites, counting into ``fired``; ``None`` where none is enabled (the
    slot then keeps inductor's own value)."""
    if not cache_key(point, cpu_inference):
        return None
    return _pass_class()(point, cpu_inference, fired)


def fired(counts: Mapping[str, int]) -> Dict[str, int]:
    """A plain copy of a pass's counts (names with a count only)."""
    return {k: int(v) for k, v in counts.items() if v}
