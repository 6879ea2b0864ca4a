"""``compile(wrapped, backend, select="measure")``: the path of each mode chosen by measurement.

:func:`~graph_adapter.backends.compiled.compile` with ``select=`` returns a
:class:`Selected`. It holds up to three *candidates*, each a way to run the
same function (same module, same weights, same loss) on a batch:

* ``"compiled"``: the backend's compiled model on the batch as it comes (with
  the layout tables ``in_slots`` / ``out_slots`` / spills, where the loader
  added them: ``FixedSizeLoader(..., layout="hyb"|"ell")``);
* ``"compiled_scatter"``: a second compiled model of the same backend on the
  batch without the layout keys (PyG's gather + scatter path). Only when the
  batch carries tables: without them it would be ``"compiled"`` again;
* ``"eager"``: the wrapped module itself (``wrapped(flat)``, no compiler), on
  the real rows only (``ipu_wrap(trim=True)``'s path, whatever the wrapper's
  own ``trim``; ``Measure(eager_trim=False)``: the padded path): the model as
  eager PyG runs it, plus the wrapper's Python (1-3%, docs/benchmarks.md).

Per mode (training: ``wrapped.training``; inference otherwise), at the first
calls of that mode: every candidate serves one call untimed (its compile, or
eager's first-call overhead), then the candidates serve the calls in rotation,
each timed, until each has ``steps`` timed steps; the call after that picks the
candidate with the smallest median step time, and it serves every later call
of the mode. The choice, with every measured time, is :attr:`Selected.choices`
(``{"training": Choice, "inference": Choice}``, JSON-able by
:meth:`Choice.as_dict`).

*A step* is the time from one call of a mode to the next call of the same
mode: in training it includes the caller's ``backward()`` and optimizer step,
which is where compiled paths and layouts differ most, and whatever else the
caller does between steps (the loader's next batch), which is the same for
every candidate. An interval that ends at a call of the other mode (``eval()``
between epochs) is dropped, not counted: the candidate serves once more. Every
step of the trial is a real step (the caller's optimizer steps follow as
usual), so training proceeds, whichever candidate serves it.

"Never slower than eager" holds on what was measured: the eager candidate is
one of those timed, so a compiled path wins only with a smaller median over
``steps`` steps; and since the eager candidate runs trimmed, that is eager
PyG's own cost on the real rows (within the wrapper's few percent), not the
padded path's (5-10% slower on molecules).
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from ..format import is_layout_key
from ..nn import TrimError
from .interface import CompileStats, InProcessModel, merge_atomic
from .program import CompiledHost, Signature, per_micro_batch, signature_of
from .registry import device_of

__all__ = ["CANDIDATES", "MODES", "Measure", "Choice", "Selected", "measure_settings",
           "drop_layout_tables", "has_layout_tables", "pick"]

#: Every candidate, in the order they first serve (and win ties).
CANDIDATES = ("compiled", "compiled_scatter", "eager")
#: The modes a choice is made for: ``wrapped.training`` True / False.
MODES = ("training", "inference")


@dataclasses.dataclass(frozen=True)
class Measure:
    """How :class:`Selected` measures (``compile(..., select=Measure(...))``).

    Attributes:
        steps: timed steps per candidate and mode before the choice (>= 1).
            Odd counts give a median that is one measured step.
        clock: seconds now (default :func:`time.perf_counter`); tests pass a fake.
        candidates: which of :data:`CANDIDATES` take part (``"compiled_scatter"``
            only ever where the batch carries layout tables).
        sync: called before each clock read of the trial; ``None``: waits for
            the GPU (``torch.cuda.synchronize``) when the model is on CUDA,
            nothing on the CPU.
        eager_trim: the ``"eager"`` candidate runs on the real rows only
            (``ipu_wrap(trim=True)``'s eager path; its first call of a
            signature runs padded); ``False``: the wrapper as configured.
    """

    steps: int = 3
    clock: Callable[[], float] = time.perf_counter
    candidates: Tuple[str, ...] = CANDIDATES
    sync: Optional[Callable[[], None]] = None
    eager_trim: bool = True


@dataclasses.dataclass(frozen=True)
class Choice:
    """The choice of one mode.

    Attributes:
        mode: ``"training"`` or ``"inference"``.
        winner: the candidate that serves every later call of the mode.
        medians: candidate -> median step time (seconds).
        samples: candidate -> its timed steps (seconds), in the order taken.
        steps: timed steps per candidate (``Measure.steps``).
    """

    mode: str
    winner: str
    medians: Dict[str, float]
    samples: Dict[str, List[float]]
    steps: int

    def as_dict(self) -> Dict[str, Any]:
        """Plain types only (``json.dumps`` takes it)."""
        return dataclasses.asdict(self)


def measure_settings(select: Union[str, Measure]) -> Measure:
    """The :class:`Measure` of a ``select=`` value (``"measure"``: the defaults);
    raises ``ValueError`` / ``TypeError`` naming the bad field."""
    if isinstance(select, str) and select == "measure":
        return Measure()
    if not isinstance(select, Measure):
        raise ValueError(f"compile(select={select!r}): pass None (no selection), \"measure\" or "
                         f"graph_adapter.backends.select.Measure(steps=, clock=, candidates=)")
    if isinstance(select.steps, bool) or not isinstance(select.steps, int) or select.steps < 1:
        raise ValueError(f"Measure(steps={select.steps!r}): the timed steps per candidate, an "
                         f"int >= 1")
    if not callable(select.clock):
        raise TypeError(f"Measure(clock={select.clock!r}): a function returning seconds, like "
                        f"time.perf_counter")
    if not isinstance(select.eager_trim, bool):
        raise TypeError(f"Measure(eager_trim={select.eager_trim!r}): True (the eager candidate "
                        f"on the real rows) or False (the padded path)")
    if select.sync is not None and not callable(select.sync):
        raise TypeError(f"Measure(sync={select.sync!r}): a function of no arguments, or None")
    cands = tuple(select.candidates)
    bad = [c for c in cands if c not in CANDIDATES]
    if bad or not cands or len(set(cands)) != len(cands):
        raise ValueError(f"Measure(candidates={select.candidates!r}): distinct names of "
                         f"{CANDIDATES}, at least one")
    return dataclasses.replace(select, candidates=tuple(c for c in CANDIDATES if c in cands))


def has_layout_tables(flat: Mapping[str, Any]) -> bool:
    """Whether the batch carries layout tables (keys of ``format.LAYOUT_KEYS``, any store)."""
    return any(is_layout_key(k) for k in flat)


def drop_layout_tables(flat: Mapping[str, Tensor]) -> Dict[str, Tensor]:
    """``flat`` without its layout keys: the wrapped model then runs PyG's scatter path."""
    return {k: v for k, v in flat.items() if not is_layout_key(k)}


def pick(medians: Mapping[str, float], order: Sequence[str] = CANDIDATES) -> str:
    """The candidate of the smallest median; a tie goes to the first in ``order``."""
    names = [c for c in order if c in medians]
    return min(names, key=lambda c: (medians[c], names.index(c)))


class _Trial:
    """One mode's measurement: who has served untimed, and the timed steps so far."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.warmed: set = set()
        self.samples: Dict[str, List[float]] = {n: [] for n in self.names}

    def next(self, steps: int) -> Tuple[Optional[str], bool]:
        """``(candidate, timed)`` for the next call; ``(None, False)`` once every
        candidate has ``steps`` timed steps."""
        for n in self.names:  # first every candidate once, untimed
            if n not in self.warmed:
                return n, False
        open_ = [n for n in self.names if len(self.samples[n]) < steps]
        if not open_:
            return None, False
        # rotation: the one with fewest timed steps (a dropped interval repeats its candidate)
        return min(open_, key=lambda n: (len(self.samples[n]), self.names.index(n))), True


class Selected(CompiledHost):
    """What ``compile(wrapped, backend, select=...)`` returns: a :class:`CompiledModel`
    that measures its candidates at the first steps of each mode and keeps the fastest.

    Call it with flat dicts, like :class:`~graph_adapter.backends.compiled.Compiled`
    (the caller runs backward and the optimizer step). Batches must keep one
    signature (:class:`ShapeChangedError` otherwise) unless ``allow_new_shapes``.

    Attributes:
        wrapped: the ``ipu_wrap``-ped module (every candidate shares its parameters).
        backend: the backend name of the compiled candidates.
        measure: the :class:`Measure` in use.
        choices: mode -> :class:`Choice`, once made.
        served: mode -> candidate -> calls served (trial and after).
        serving: the candidate that served the last call.
    """

    steps_optimizer = False

    def __init__(self, wrapped: nn.Module, build: Callable[[], InProcessModel], measure: Measure,
                 allow_new_shapes: bool = False) -> None:
        """``build()`` returns a fresh compiled model of the backend (a ``Compiled``);
        called once now and once more if ``"compiled_scatter"`` is measured."""
        self.wrapped = wrapped
        self.measure = measure
        self.allow_new_shapes = allow_new_shapes
        self._build = build
        self._compiled = build()  # also installs the static routing (static.install)
        if self._compiled.steps_optimizer:
            raise ValueError("compile(select=...) measures backends whose caller steps the "
                             "optimizer; this one steps it itself (an IPU backend)")
        self.backend: str = self._compiled.backend
        self._scatter: Optional[InProcessModel] = None
        if measure.sync is not None:
            self._sync: Callable[[], None] = measure.sync
        elif device_of(wrapped).type == "cuda":
            self._sync = torch.cuda.synchronize
        else:
            self._sync = lambda: None
        self.signatures: List[Signature] = []
        self.compile_call_extra = ", select=..."  # in the one-budget error
        self.choices: Dict[str, Choice] = {}
        self.served: Dict[str, Dict[str, int]] = {m: {} for m in MODES}
        self.serving: Optional[str] = None
        self._trials: Dict[str, _Trial] = {}
        self._pending: Optional[Tuple[str, str, float]] = None  # (mode, candidate, start)

    # ---- the compiled-model interface ------------------------------------
    @property
    def compile_count(self) -> int:
        """The compiles of every compiled candidate (eager's first calls are none)."""
        return sum(c.compile_count for c in (self._compiled, self._scatter) if c is not None)

    @property
    def atomic_adds(self) -> Optional[bool]:
        """Whether the code of any compiled candidate adds with atomics
        (:attr:`Compiled.atomic_adds`; ``None``: could not be read)."""
        return merge_atomic(*(c.atomic_adds
                              for c in (self._compiled, self._scatter) if c is not None))

    @property
    def stats(self) -> CompileStats:
        """The compiled candidates' compiles: the rewrites that fired in either (name ->
        count); no background compile (selection times compiled steps from the start)."""
        out: Dict[str, int] = {}
        for c in (self._compiled, self._scatter):
            for name, n in (c.stats.rewrites if c is not None else {}).items():
                out[name] = out.get(name, 0) + n
        return CompileStats(out)

    def __call__(self, flat: Mapping[str, Tensor]) -> Dict[str, Tensor]:
        self._admit(signature_of(flat))
        mode = MODES[0] if self.wrapped.training else MODES[1]
        choice = self.choices.get(mode)
        if choice is not None and self._pending is None:  # the steady state: one lookup
            return self._run(mode, choice.winner, flat)
        now = self._close_pending(mode)
        if choice is not None:
            return self._run(mode, choice.winner, flat)
        trial = self._trials.get(mode)
        if trial is None:
            trial = self._trials[mode] = _Trial(self._candidates(flat))
        name, timed = trial.next(self.measure.steps)
        if name is None:
            choice = self.choices[mode] = self._choose(mode, trial)
            return self._run(mode, choice.winner, flat)
        trial.warmed.add(name)
        if timed:
            if now is None:
                self._sync()
                now = self.measure.clock()
            self._pending = (mode, name, now)
        return self._run(mode, name, flat)

    # ---- the trial -----------------------------------------------------------
    def _close_pending(self, mode: str) -> Optional[float]:
        """End the timed step in flight at this call: a sample when it is of this
        mode, dropped when of the other. Returns the clock read (``None``: none)."""
        if self._pending is None:
            return None
        self._sync()
        now = self.measure.clock()
        p_mode, name, start = self._pending
        self._pending = None
        if p_mode == mode and mode not in self.choices:
            self._trials[mode].samples[name].append(float(now - start))
        return now

    def _candidates(self, flat: Mapping[str, Any]) -> List[str]:
        tables = has_layout_tables(flat)
        return [c for c in self.measure.candidates if c != "compiled_scatter" or tables]

    def _choose(self, mode: str, trial: _Trial) -> Choice:
        medians = {n: float(statistics.median(trial.samples[n])) for n in trial.names}
        samples = {n: list(trial.samples[n]) for n in trial.names}
        return Choice(mode, pick(medians, trial.names), medians, samples, self.measure.steps)

    def _run(self, mode: str, name: str, flat: Mapping[str, Tensor]) -> Dict[str, Tensor]:
        self.serving = name
        counts = self.served[mode]
        counts[name] = counts.get(name, 0) + 1
        if name == "compiled":
            return self._compiled(flat)
        if name == "compiled_scatter":
            if self._scatter is None:
                self._scatter = self._build()
            return self._scatter(drop_layout_tables(flat))
        return per_micro_batch(self._eager, flat)  # eager: the wrapper checks its inputs

    def _eager(self, flat: Mapping[str, Tensor]) -> Dict[str, Tensor]:
        """One eager call of the wrapped module, trimmed where :attr:`Measure.eager_trim`
        (the wrapper's own ``trim`` is put back after: its compiled calls never trim)."""
        w = self.wrapped
        if not self.measure.eager_trim or getattr(w, "trim", None) is not False:
            return w(flat)
        w.trim = True
        try:
            return w(flat)
        except TrimError as exc:
            raise TrimError(f"{exc} (compile(select=...)'s eager candidate runs trimmed: "
                            f"pass select=Measure(eager_trim=False) for this model)") from exc
        finally:
            w.trim = False

    def candidate(self, name: str) -> Any:
        """The object that runs candidate ``name``: a compiled model, or the wrapped
        module for ``"eager"`` (``None``: ``"compiled_scatter"`` not built yet)."""
        if name not in CANDIDATES:
            raise ValueError(f"candidate({name!r}): one of {CANDIDATES}")
        return {"compiled": self._compiled, "compiled_scatter": self._scatter,
                "eager": self.wrapped}[name]

    def report(self) -> str:
        """One line per mode chosen: the winner and every candidate's median (ms)."""
        lines = []
        for mode, c in self.choices.items():
            meds = ", ".join(f"{n} {1e3 * m:.2f} ms" for n, m in c.medians.items())
            lines.append(f"{mode}: {c.winner} (medians of {c.steps} steps: {meds})")
        return "\n".join(lines)
