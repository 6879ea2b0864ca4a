"""The demo's interleaved rounds: each run, once trained and evaluated, made ready to be
timed side by side with the others (:class:`Training`, :class:`Timed`), its training and
its inference timed in interleaved rounds (:func:`time_training`,
:func:`time_inference`: each round runs each run once, in turn), and the graphs compiled
meanwhile counted (:class:`CompileCount`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple

import torch
from torch import nn

from .demo_loops import EvalStep, Step, evaluate, log, time_interleaved
from .repeat import restore, snapshot
from .results import RunStats, warmup_rounds

__all__ = ["Training", "Timed", "measure_mae", "first_graphs", "time_inference",
           "time_training", "CompileCount", "quiet_dynamo", "graphs_compiled"]


@dataclasses.dataclass
class Training:
    """One run's training, ready for the interleaved training rounds: its training step
    (the one its epochs ran), a fixed list of its training batches (collated once), their
    real graphs, every module whose state a step changes and its optimizer (to put back
    afterwards), and what switches the run between train and eval mode (the compiled
    model, or the PyG module)."""

    step: Step
    batches: List[Any]
    graphs: int
    modules: List[nn.Module]
    optimizer: torch.optim.Optimizer
    mode: Any  # has .training and .train(bool)


@dataclasses.dataclass
class Timed:
    """One run's inference, ready for the interleaved rounds: its evaluation step (the
    model in eval mode, compiled where the run compiles), its test batches (collated
    once) and the MAE pass's per-batch errors (the reference of the repeat check); and
    its training for the training rounds (``None``: left out, its state cannot be put
    back)."""

    stats: RunStats
    step: EvalStep
    batches: List[Any]
    errors: List[float]
    training: Optional[Training] = None


def measure_mae(stats: RunStats, step: EvalStep, batches: List[Any]) -> Timed:
    """The test MAE (:func:`evaluate`: one pass, the inference compile in its first step)
    and what the interleaved rounds need afterwards."""
    return Timed(stats, step, batches, evaluate(stats, step, batches))


def first_graphs(batches: Iterable[Any], graphs_of: Callable[[Any], int],
                 graphs: int) -> Tuple[List[Any], int]:
    """The leading ``batches`` that hold at least ``graphs`` real graphs (all of them when
    they hold fewer), and the real graphs they hold."""
    out, n = [], 0
    for b in batches:
        if n >= graphs:
            break
        out.append(b)
        n += graphs_of(b)
    return out, n


def _errors_gap(a: Sequence[float], b: Sequence[float]) -> float:
    """How far apart two passes' per-batch errors came (0.0: bit for bit; NaN twice counts
    as a repeat, as in :func:`~graph_adapter.app.repeat.repeat_gap`)."""
    return max((0.0 if x == y or (x != x and y != y) else abs(x - y) for x, y in zip(a, b)),
               default=0.0)


def time_inference(timed: List[Timed], rounds: int, progress: bool) -> float:
    """Every run's inference in ``rounds`` interleaved rounds (:func:`time_interleaved`);
    fills each run's ``infer_round_*`` and ``infer_repeat_gap`` (over every round and the
    MAE pass). Returns the seconds taken."""
    if not timed or rounds < 1:
        return 0.0
    log(f"timing inference: {rounds} interleaved rounds over the test split ...", progress)
    t0 = time.perf_counter()
    with quiet_dynamo():
        res = time_interleaved({t.stats.name: (t.step, t.batches) for t in timed}, rounds)
    seconds = time.perf_counter() - t0
    skip = warmup_rounds({name: secs for name, (secs, _) in res.items()})
    for t in timed:
        secs, errs = res[t.stats.name]
        t.stats.infer_round_seconds = secs
        t.stats.infer_round_graphs = t.stats.eval_graphs
        t.stats.infer_warmup_rounds = skip
        t.stats.infer_repeat_gap = max(_errors_gap(t.errors, e) for e in errs)
    return seconds


def time_training(timed: List[Timed], rounds: int, progress: bool,
                  clock: Callable[[], float] = time.perf_counter) -> float:
    """Every run's training step over its fixed batches in ``rounds`` interleaved rounds
    (:func:`time_interleaved` with gradients), the runs side by side as in inference;
    fills each run's ``train_round_*``. Returns the seconds taken (snapshots included).

    The rounds step the optimizers, so each run's state (weights, buffers such as
    BatchNorm's running statistics, optimizer state, the RNG) is copied before and put
    back after (as :func:`~graph_adapter.app.repeat.repeat_gap` does), and each run's
    mode too: nothing reported (the MAE, the losses, the inference rounds' repeat check)
    depends on whether the rounds ran. Runs without a ``training`` are left out (their
    training figures stay those of their own epochs), and so is a run alone (no ratio to
    take: its own epochs say as much)."""
    runs = [t for t in timed if t.training is not None]
    if len(runs) < 2 or rounds < 1:
        return 0.0
    graphs = min(t.training.graphs for t in runs)
    log(f"timing training: {rounds} interleaved rounds over about {graphs:,} training "
        f"graphs a run ...", progress)
    t0 = time.perf_counter()
    states = [snapshot(t.training.modules, t.training.optimizer) for t in runs]
    modes = [bool(t.training.mode.training) for t in runs]
    try:
        for t in runs:
            t.training.mode.train(True)
        with quiet_dynamo():
            res = time_interleaved({t.stats.name: (t.training.step, t.training.batches)
                                    for t in runs}, rounds, clock=clock, grad=True)
    finally:
        # (every snapshot holds the RNG state of before the rounds)
        for t, state, mode in zip(runs, states, modes):
            restore(state, t.training.modules, t.training.optimizer)
            t.training.mode.train(mode)
    seconds = time.perf_counter() - t0
    skip = warmup_rounds({name: secs for name, (secs, _) in res.items()})
    for t in runs:
        t.stats.train_round_seconds = res[t.stats.name][0]
        t.stats.train_round_graphs = t.training.graphs
        t.stats.train_warmup_rounds = skip
    return seconds


class CompileCount:
    """Graphs compiled since it was made: Dynamo's own counter and, for a backend
    that compiles outside Dynamo, the adapter's compiled model's count (eager's counts
    programs run, not compiles, so it is not read)."""

    def __init__(self, compiled: Any, backend: str) -> None:
        self.compiled = compiled if backend != "eager" else None
        self.dynamo, self.own = graphs_compiled(), self._own()

    def _own(self) -> int:
        return int(self.compiled.compile_count) if self.compiled is not None else 0

    def since(self) -> int:
        return max(graphs_compiled() - self.dynamo, self._own() - self.own)


@contextlib.contextmanager
def quiet_dynamo() -> Iterator[None]:
    """Dynamo's graph-break warnings off (PyG's route breaks at ``int(batch.max())``
    in every pooling call; the report counts the graphs compiled instead)."""
    logger = logging.getLogger("torch._dynamo")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def graphs_compiled() -> int:
    """Graphs Dynamo has compiled in this process so far (its own counter)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])
