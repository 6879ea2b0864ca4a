"""One run's figures (:class:`RunStats`) and the rule they are taken by.

The warm-up left out of every steady-state figure (:data:`WARMUP_FACTOR`,
:func:`warmup_steps`, :func:`warmup_rounds`), the rates and the per-round ratios of the
interleaved rounds (:func:`steady_rate`, :func:`round_ratios`, :func:`median_range`).
Importable from :mod:`graph_adapter.app.demo.results` too.
"""
from __future__ import annotations

import dataclasses
import statistics
from typing import Callable, List, Mapping, Optional, Sequence, Tuple

__all__ = ["RunStats", "UNCOMPILED_BACKENDS", "WARMUP_FACTOR", "warmup_steps", "steady_rate",
           "warmup_rounds", "round_ratios", "median_range", "TRAIN_ROUND_GRAPHS",
           "PROBE_STEPS"]

#: Backends that run the module as it is: their ``compile_count`` counts the
#: (signature, mode) pairs seen, not compiles, so the report says "no compiler".
UNCOMPILED_BACKENDS = ("eager",)

#: The warm-up rule of the steady-state figures: the leading steps of a mode (training,
#: inference) slower than this multiple of that mode's median step are warm-up (the
#: compile, the first calls after it, lazily built optimizer state) and are left out.
WARMUP_FACTOR = 1.5

#: Training graphs each run steps over in one interleaved training round (the first
#: batches of its epoch 1 holding at least this many; the whole training split when it
#: is smaller): about 0.2-0.4 s a run at the demo's defaults on a quiet 2-core machine,
#: long enough that a moment's burst of other work is a small part of a round.
TRAIN_ROUND_GRAPHS = 2048

#: Training steps the repeat probe runs, twice
#: (:func:`~graph_adapter.app.demo.timing.repeat_gap`).
PROBE_STEPS = 3


def warmup_steps(seconds: Sequence[float], factor: float = WARMUP_FACTOR) -> int:
    """How many leading steps are warm-up: those before the first step that took at most
    ``factor`` x the median of all ``seconds`` (0 for fewer than 2 steps).

    A rule, not a fixed count: a compiled mode's first step (the compile) is always far
    above the median, and so are the slow steps that can follow it; an eager run whose
    first step is already steady loses nothing."""
    if len(seconds) < 2:
        return 0
    limit = factor * statistics.median(seconds)
    return next(i for i, s in enumerate(seconds) if s <= limit)  # (the median step is <= limit)


def steady_rate(seconds: Sequence[float], graphs: Sequence[int]) -> float:
    """Graphs per second over the steps after the warm-up (:func:`warmup_steps`); all
    steps when there are fewer than 2; NaN without any time measured."""
    k = warmup_steps(seconds)
    t = sum(seconds[k:])
    return sum(graphs[k:]) / t if t > 0 else float("nan")


def warmup_rounds(seconds: Mapping[str, Sequence[float]], factor: float = WARMUP_FACTOR) -> int:
    """How many leading interleaved rounds are warm-up: the most :func:`warmup_steps`
    leaves out of any one run's round times (``seconds``: run name -> each round's time).

    One count for every run: a round is kept or left out for all its runs at once, so
    that the per-round ratios (:func:`round_ratios`) pair runs timed side by side."""
    return max((warmup_steps(v, factor) for v in seconds.values()), default=0)


def round_ratios(seconds: Sequence[float], graphs: int, base_seconds: Sequence[float],
                 base_graphs: int, skip: int = 0) -> List[float]:
    """Each interleaved round's rate ratio of a run to a base run: ``(graphs /
    seconds[r]) / (base_graphs / base_seconds[r])`` for the rounds ``r >= skip``
    (``graphs``: real graphs in one pass of each; NaN for a round without time)."""
    return [(graphs * b) / (base_graphs * t) if t > 0 and b > 0 and base_graphs > 0
            else float("nan") for t, b in zip(seconds[skip:], base_seconds[skip:])]


def median_range(values: Sequence[float]) -> Tuple[float, float, float]:
    """``(median, min, max)`` of ``values`` (NaN three times when empty)."""
    if not values:
        return (float("nan"),) * 3
    return statistics.median(values), min(values), max(values)


def _round_rate(seconds: Sequence[float], graphs: int, skip: int) -> float:
    """``graphs`` over the median of the rounds after the first ``skip`` (NaN without
    time)."""
    kept = seconds[skip:]
    t = statistics.median(kept) if kept else 0.0
    return graphs / t if t > 0 else float("nan")


def _rounds_ratio(rounds: Tuple[Sequence[float], int, int],
                  base: Tuple[Sequence[float], int, int],
                  steady_ratio: Callable[[], float]) -> Tuple[float, float, float]:
    """``(median, min, max)`` of the per-round ratios of two runs' interleaved rounds
    (each ``(seconds per round, graphs a round, warm-up rounds)``; the larger warm-up
    is left out of both); without rounds in both, ``steady_ratio()`` three times."""
    (seconds, graphs, warm), (base_seconds, base_graphs, base_warm) = rounds, base
    if seconds and base_seconds:
        return median_range(round_ratios(seconds, graphs, base_seconds, base_graphs,
                                         max(warm, base_warm)))
    ratio = steady_ratio()
    return ratio, ratio, ratio


@dataclasses.dataclass
class RunStats:
    """Training and evaluation figures of one run (the adapter's, eager PyG's or PyG
    compiled's). Step times are of the step alone (forward, backward, optimizer step;
    data loading is in ``train_seconds``, not in them)."""

    name: str
    epochs: int = 0
    steps: int = 0
    train_graphs: int = 0  # graphs seen in training, all epochs
    train_seconds: float = 0.0  # all training epochs, wall clock, data loading included
    first_step_seconds: float = 0.0  # includes the compile for compiled backends
    # inductor's FX graph cache during the first training step: graphs served from the
    # cache, graphs compiled (a miss or a bypass); (0, 0) when nothing went through inductor
    first_step_cache: Tuple[int, int] = (0, 0)
    # precompiled entries (compile(..., precompile=True)) during the first training
    # step: loaded from an earlier run (no trace), saved for the next one
    first_step_precompiled: Tuple[int, int] = (0, 0)
    step_seconds: List[float] = dataclasses.field(default_factory=list)  # each training step
    step_graphs: List[int] = dataclasses.field(default_factory=list)  # real graphs in each
    eval_seconds: float = 0.0  # the test split's evaluation (the MAE), wall clock
    eval_first_step_seconds: float = 0.0  # includes the compile for compiled backends
    eval_graphs: int = 0
    eval_batches: int = 0
    # every step of the MAE pass over the test split (the first: the inference compile,
    # for compiled backends)
    infer_step_seconds: List[float] = dataclasses.field(default_factory=list)
    infer_step_graphs: List[int] = dataclasses.field(default_factory=list)
    # the interleaved inference rounds (run_demo: after every run's training and MAE
    # pass, each round runs each run once over its test batches, in turn): this run's
    # time in each round, step time only; the real graphs of one pass; the leading
    # rounds left out as warm-up (one count for every run: warmup_rounds)
    infer_round_seconds: List[float] = dataclasses.field(default_factory=list)
    infer_round_graphs: int = 0
    infer_warmup_rounds: int = 0
    # the interleaved training rounds (run_demo: after every run's training and MAE pass,
    # before the inference rounds; each round runs each run's training step once over its
    # fixed training batches, in turn, and the state is put back afterwards): this run's
    # time in each round, step time only; the real graphs of its batches; the leading
    # rounds left out as warm-up (one count for every run)
    train_round_seconds: List[float] = dataclasses.field(default_factory=list)
    train_round_graphs: int = 0
    train_warmup_rounds: int = 0
    batches_per_epoch: int = 0  # counted over the epochs trained (mean, rounded)
    mean_graphs_per_batch: float = 0.0  # real graphs per training step, counted
    distinct_shapes: int = 0  # distinct (nodes, edges, graphs) batch shapes, epoch 1
    compiles: Optional[int] = None  # graphs compiled after evaluation (None: no compiler)
    # compile(..., background=True): what ran eagerly, when each mode switched (the
    # compiled model's stats.summary()); seconds the run waited for the compiles after
    # its training and test pass, before the timed rounds
    background: Optional[str] = None
    background_wait_seconds: float = 0.0
    compiles_training: Optional[int] = None  # ... after training (None: not compiled)
    epoch_loss: List[float] = dataclasses.field(default_factory=list)
    # the same few steps run twice from one state, after training: how far apart their
    # losses came (0.0: bit for bit; None: not checked); see graph_adapter.app.demo.timing.repeat_gap
    repeat_gap: Optional[float] = None
    # the test split evaluated again and again (the MAE pass, then every interleaved
    # round): how far apart the per-batch absolute-error sums came (0.0: bit for bit)
    infer_repeat_gap: Optional[float] = None
    test_mae: float = float("nan")
    # adapter run: its trained weights evaluated by plain eager PyG (unpadded batches)
    test_mae_eager_eval: float = float("nan")
    run_seconds: float = 0.0  # the whole run: training, probes, evaluation, timing

    @property
    def warmup_training_steps(self) -> int:
        """Leading training steps left out of the steady figure (:func:`warmup_steps`)."""
        return warmup_steps(self.step_seconds)

    @property
    def warmup_inference_steps(self) -> int:
        """Leading inference rounds left out of the steady figure (``infer_warmup_rounds``);
        without rounds, leading steps of the MAE pass (:func:`warmup_steps`)."""
        if self.infer_round_seconds:
            return self.infer_warmup_rounds
        return warmup_steps(self.infer_step_seconds)

    @property
    def epoch_graphs_per_second(self) -> float:
        """Steady-state training throughput in the run's own epochs (the runs train one
        after the other): the steps after the warm-up (:func:`warmup_steps`), step time
        only."""
        return steady_rate(self.step_seconds, self.step_graphs)

    @property
    def train_graphs_per_second(self) -> float:
        """Steady-state training throughput: the round's training graphs over the median
        of the interleaved training rounds after the warm-up; without rounds, the run's
        own epochs (:attr:`epoch_graphs_per_second`)."""
        if self.train_round_seconds:
            return _round_rate(self.train_round_seconds, self.train_round_graphs,
                               self.train_warmup_rounds)
        return self.epoch_graphs_per_second

    def training_ratio(self, base: "RunStats") -> Tuple[float, float, float]:
        """``(median, min, max)`` over the interleaved training rounds of this run's
        training rate over ``base``'s, rounds after the warm-up; without rounds in both,
        the ratio of the steady rates of their own epochs three times."""
        return _rounds_ratio(
            (self.train_round_seconds, self.train_round_graphs, self.train_warmup_rounds),
            (base.train_round_seconds, base.train_round_graphs, base.train_warmup_rounds),
            lambda: self.epoch_graphs_per_second / base.epoch_graphs_per_second)

    @property
    def eval_graphs_per_second(self) -> float:
        """Steady-state inference throughput: one pass's graphs over the median of the
        interleaved rounds after the warm-up; without rounds, the MAE pass's steps
        after the warm-up (:func:`steady_rate`)."""
        if self.infer_round_seconds:
            return _round_rate(self.infer_round_seconds, self.infer_round_graphs,
                               self.infer_warmup_rounds)
        return steady_rate(self.infer_step_seconds, self.infer_step_graphs)

    def inference_ratio(self, base: "RunStats") -> Tuple[float, float, float]:
        """``(median, min, max)`` over the interleaved rounds of this run's inference rate
        over ``base``'s, rounds after the warm-up; without rounds in both, the ratio of
        the steady rates three times."""
        return _rounds_ratio(
            (self.infer_round_seconds, self.infer_round_graphs, self.infer_warmup_rounds),
            (base.infer_round_seconds, base.infer_round_graphs, base.infer_warmup_rounds),
            lambda: self.eval_graphs_per_second / base.eval_graphs_per_second)
