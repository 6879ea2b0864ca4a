"""The loops every run of the demo shares: its epochs (:func:`train_epochs`), its
evaluation (:func:`evaluate`) and its interleaved timing rounds (:func:`time_interleaved`).

Every run (the adapter's, eager PyG's, PyG compiled's) goes through the same loops; the
runs differ only in their step functions (:data:`Step`, :data:`EvalStep`). The runs live
in :mod:`graph_adapter.app.demo_runs`, the demo that runs them in
:mod:`graph_adapter.app.demo`.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Callable, Dict, Hashable, Iterable, List, Sequence, Tuple

import torch

from graph_adapter.backends import precompiled_counts

from .results import RunStats

__all__ = ["Step", "EvalStep", "log", "inductor_cache_counts", "train_epochs", "evaluate", "time_interleaved"]

#: one training step: a batch -> (its loss as a float, the number of real graphs in it)
Step = Callable[[Any], Tuple[float, int]]
#: one evaluation step: a batch -> (sum of absolute errors over its real graphs, their number)
EvalStep = Callable[[Any], Tuple[float, int]]


# --------------------------------------------------------------------------
# the loops both runs share
# --------------------------------------------------------------------------
def _progress(total: int, desc: str, enabled: bool, initial: int = 0):
    """A tqdm bar on stderr, or ``None`` (disabled, or tqdm not installed).

    ``initial`` steps are counted as done but not timed: tqdm's rate (and so its
    ETA) is ``(n - initial) / elapsed``, so a bar opened after a compile never
    averages the compile in."""
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True,
                initial=initial)


def inductor_cache_counts() -> Tuple[int, int]:
    """Inductor's FX graph cache so far in this process: (graphs served from the cache,
    graphs compiled: misses and bypasses). Read from ``torch._dynamo.utils.counters``,
    which inductor keeps whether or not anyone asks."""
    from torch._dynamo.utils import counters
    c = counters["inductor"]
    return c["fxgraph_cache_hit"], c["fxgraph_cache_miss"] + c["fxgraph_cache_bypass"]


def log(msg: str, enabled: bool = True) -> None:
    if enabled:
        print(msg, file=sys.stderr, flush=True)


def train_epochs(stats: RunStats, step: Step, batches: Callable[[int], Iterable[Any]],
                 epochs: int, *, label: str, shape_of: Callable[[Any], Hashable],
                 end_epoch: Callable[[int], None] = lambda epoch: None,
                 progress: bool = True, compiles: bool = False) -> None:
    """Train ``epochs`` epochs, recording the figures in ``stats`` (in place).

    Args:
        stats: filled in: ``steps``, ``train_graphs``, ``epoch_loss`` (mean
            loss per real graph, one per epoch), ``step_seconds`` and
            ``step_graphs`` (each step: its time, data loading excluded, and
            its real graphs), ``first_step_seconds`` (the compile, for
            compiled backends), ``train_seconds``, ``epochs``,
            ``distinct_shapes`` (of epoch 1). ``batches_per_epoch`` must be
            set (the progress bar's length).
        step: one optimizer step on a batch (see :data:`Step`).
        batches: ``batches(epoch)`` iterates that epoch's batches (and sets
            the model's train mode, the loader's epoch...).
        shape_of: a batch's shape, to count the distinct shapes a compiler sees.
        label: the run's name in the progress output.
        end_epoch: called after each epoch (learning-rate schedule...).
        compiles: the first step compiles: say so before it (nothing moves for
            a while). The progress bar opens after the first step, whatever
            the backend, so that no compile feeds its ETA.
    """
    total = epochs * stats.batches_per_epoch
    bar = None
    shapes = set()
    t_start = time.perf_counter()
    for epoch in range(epochs):
        loss_sum, graphs_sum = 0.0, 0
        for batch in batches(epoch):
            if epoch == 0:
                shapes.add(shape_of(batch))
            if stats.steps == 0 and compiles:
                log(f"{label}: compiling the training step (the first step) ...", progress)
            cache_before = inductor_cache_counts() if stats.steps == 0 else (0, 0)
            pre_before = precompiled_counts() if stats.steps == 0 else (0, 0)
            t0 = time.perf_counter()
            loss, graphs = step(batch)
            dt = time.perf_counter() - t0
            loss_sum += loss * graphs
            graphs_sum += graphs
            if stats.steps == 0:
                stats.first_step_seconds = dt
                after = inductor_cache_counts()
                stats.first_step_cache = (after[0] - cache_before[0], after[1] - cache_before[1])
                pre = precompiled_counts()
                stats.first_step_precompiled = (pre[0] - pre_before[0], pre[1] - pre_before[1])
                bar = _progress(total, label, progress, initial=1)
            elif bar is not None:
                bar.update(1)
            stats.step_seconds.append(dt)
            stats.step_graphs.append(graphs)
            stats.steps += 1
            stats.train_graphs += graphs
            if bar is not None:
                bar.set_postfix(epoch=epoch + 1, loss=f"{loss:.2f}", refresh=False)
        stats.epoch_loss.append(loss_sum / max(1, graphs_sum))
        end_epoch(epoch)
        if bar is None:
            log(f"{label} epoch {epoch + 1}/{epochs}: train L1 {stats.epoch_loss[-1]:.2f}",
                progress)
    stats.train_seconds = time.perf_counter() - t_start
    stats.epochs = epochs
    # counted, not planned: what the epochs really yielded
    stats.batches_per_epoch = round(stats.steps / max(1, epochs))
    stats.mean_graphs_per_batch = stats.train_graphs / max(1, stats.steps)
    if bar is not None:
        bar.close()
    stats.distinct_shapes = len(shapes)


def _infer(stats: RunStats, step: EvalStep, batches: Iterable[Any]) -> List[float]:
    """``step`` on every batch without gradients; each step's time and real graphs are
    appended to ``stats.infer_step_*``. Returns each batch's sum of absolute errors."""
    errs: List[float] = []
    with torch.no_grad():
        for batch in batches:
            t0 = time.perf_counter()
            err, graphs = step(batch)
            stats.infer_step_seconds.append(time.perf_counter() - t0)
            stats.infer_step_graphs.append(graphs)
            errs.append(err)
    return errs


def evaluate(stats: RunStats, step: EvalStep, batches: Iterable[Any]) -> List[float]:
    """The test MAE and the pass's step times, recorded in ``stats`` (no gradients).

    Fills ``test_mae``, ``eval_graphs``, ``eval_batches``, ``eval_seconds``
    and ``eval_first_step_seconds`` (the compile, for compiled backends) from
    one pass over ``batches`` (the test split). Returns each batch's sum of
    absolute errors (the reference of the repeat check of the timed rounds).
    """
    t_start = time.perf_counter()
    errs = _infer(stats, step, batches)
    stats.eval_seconds = time.perf_counter() - t_start
    n = sum(stats.infer_step_graphs)
    stats.eval_batches = len(errs)
    stats.eval_first_step_seconds = stats.infer_step_seconds[0] if errs else 0.0
    stats.eval_graphs = n
    stats.test_mae = sum(errs) / max(1, n)
    return errs


def time_interleaved(runs: Dict[str, Tuple[Callable[[Any], Tuple[float, int]], Sequence[Any]]],
                     rounds: int, clock: Callable[[], float] = time.perf_counter,
                     grad: bool = False) -> Dict[str, Tuple[List[float], List[List[float]]]]:
    """Each run's step over its batches, in ``rounds`` interleaved rounds.

    A round runs every run once over all its batches, in turn, so that the runs
    of one round share the machine's state of the moment (other work, the
    CPU's speed): their ratio is steady even where the absolute rates are not.
    Round ``i`` starts with run ``i mod len(runs)`` (the order rotates: no run
    always follows the same one).

    Args:
        runs: name -> ``(step, batches)``: ``step(batch)`` returns ``(value,
            real graphs)``: an evaluation step (:data:`EvalStep`: the sum of
            absolute errors over the batch's real graphs) or, with ``grad``, a
            training step (:data:`Step`: the loss; it steps the optimizer, so
            the caller puts the state back afterwards); ``batches`` is a
            sequence, the same every round (collated once: no data loading in
            the times).
        rounds: how many rounds.
        clock: the timer (a fake one in tests).
        grad: run with gradients (training steps); without (the default), under
            ``torch.no_grad()``.

    Returns:
        name -> ``(seconds, values)``: ``seconds[r]`` is round ``r``'s time of
        that run, the sum of its steps' times (step time only); ``values[r]``
        its steps' first values in round ``r`` (per-batch error sums: to
        check that inference repeats; losses).
    """
    names = list(runs)
    out: Dict[str, Tuple[List[float], List[List[float]]]] = {k: ([], []) for k in names}
    with torch.enable_grad() if grad else torch.no_grad():
        for r in range(rounds):
            for i in range(len(names)):
                name = names[(r + i) % len(names)]
                step, batches = runs[name]
                seconds, errs = 0.0, []
                for batch in batches:
                    t0 = clock()
                    err, _ = step(batch)
                    seconds += clock() - t0
                    errs.append(err)
                out[name][0].append(seconds)
                out[name][1].append(errs)
    return out
