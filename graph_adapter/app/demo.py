"""The demo behind ``graph-adapter demo``: a stock PyG GNN on real molecules, through the adapter.

What :func:`run_demo` does, in order:

1. loads rdkit's 5000 NCI molecules (:func:`graph_adapter.app.datasets.load_nci5k`,
   target: TPSA) and splits them into train and test (seeded);
2. learns a budget with :meth:`Budget.fit <graph_adapter.data.budget.Budget.fit>`
   (from graph sizes only, never targets) and packs the training split with
   :class:`~graph_adapter.data.loader.FixedSizeLoader`;
3. wraps the model with :func:`~graph_adapter.nn.wrap.ipu_wrap` (masked L1 loss
   inside the compiled region) and compiles it with
   :func:`graph_adapter.backends.compile` (``"auto"``: resolved by
   :func:`graph_adapter.backends.resolve_backend`), one compiled model for
   training and evaluation, whatever the backend;
4. trains ``epochs`` epochs and evaluates the MAE on the test split (one
   pass: the inference compile, for compiled backends);
5. trains identical copies of the model (same initial weights, same loss,
   same optimizer) in plain eager PyG, with ``torch_geometric.loader.DataLoader``
   over the same training split, and (``pyg_compile``) the same under
   ``torch.compile(model, dynamic=True)`` (PyG's documented compile route), in
   the same process, for the throughput and MAE comparison;
6. times training of every run's (already compiled) training step over a
   fixed list of its training batches (the first ones of its epoch 1
   holding :data:`~graph_adapter.app.results.TRAIN_ROUND_GRAPHS` real
   graphs) in ``train_rounds`` interleaved rounds (:func:`time_interleaved`):
   each round runs each run once, in turn, so that the runs timed in one
   round share the machine's state of the moment (a burst of other work,
   this virtual machine's speed) and their ratio does not move with it; each
   run's weights, buffers, optimizer state and mode are put back afterwards,
   so the rounds change no reported figure;
7. times inference of every run's (already compiled) evaluation step over
   its test batches in ``infer_rounds`` interleaved rounds the same way;
   every round's errors are compared with the MAE pass's
   (``infer_repeat_gap``: the restored training state is checked there too);
8. returns a :class:`~graph_adapter.app.results.DemoResult`; its ``report()``
   formats it.

Every run goes through the same epoch loop (:func:`train_epochs`) and the same
evaluation loop (:func:`evaluate`); they differ only in their step functions.
Throughput is steady state, from the interleaved rounds, after every compile:
the leading rounds in which any run was slower than
:data:`~graph_adapter.app.results.WARMUP_FACTOR` x its median round are left
out (:func:`~graph_adapter.app.results.warmup_rounds`); a run's rate is its
round's graphs over its median round, a ratio the median of the per-round
ratios (:func:`~graph_adapter.app.results.round_ratios`). The runs train one
after the other (each in its own epochs: interleaving epochs would run three
models, three optimizers and three progress bars in lockstep), and a whole
process or period of this virtual machine can run 20% slower than another:
timed that way the training ratio to eager PyG moved from 1.11x to 1.40x in
three quiet runs. Each run's own epochs are still timed (every step; the
leading steps slower than that factor x the run's median step, the compile
among them, left out: :func:`~graph_adapter.app.results.warmup_steps`) and
reported second.
The models live in :mod:`graph_adapter.app.models`, the figures and the
report in :mod:`graph_adapter.app.results`.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import os
import sys
import time
from typing import (Any, Callable, Dict, Hashable, Iterable, Iterator, List, Optional,
                    Sequence, Tuple)

import torch
from torch import nn

import graph_adapter as ga
from graph_adapter.backends import resolve_backend
from graph_adapter.data.collate import Collator
from graph_adapter.data.format import loss_of

from .datasets import load_nci5k
from .models import MODELS, AtomBondEncoder, MolRegressor, build_model
from .preflight import DemoSettingError, check_demo_settings
from .repeat import known_nondeterminism, repeat_gap, restore, snapshot
from .results import (TRAIN_ROUND_GRAPHS, DemoConfig, DemoResult, RunStats, warmup_rounds,
                      write_plot)

__all__ = ["MODELS", "DemoConfig", "DemoResult", "RunStats", "AtomBondEncoder", "MolRegressor",
           "build_model", "run_demo", "train_epochs", "evaluate", "time_interleaved",
           "write_plot"]

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


def _log(msg: str, enabled: bool = True) -> None:
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
                _log(f"{label}: compiling the training step (the first step) ...", progress)
            t0 = time.perf_counter()
            loss, graphs = step(batch)
            dt = time.perf_counter() - t0
            loss_sum += loss * graphs
            graphs_sum += graphs
            if stats.steps == 0:
                stats.first_step_seconds = dt
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
            _log(f"{label} epoch {epoch + 1}/{epochs}: train L1 {stats.epoch_loss[-1]:.2f}",
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


def _errors_gap(a: Sequence[float], b: Sequence[float]) -> float:
    """How far apart two passes' per-batch errors came (0.0: bit for bit; NaN twice counts
    as a repeat, as in :func:`~graph_adapter.app.repeat.repeat_gap`)."""
    return max((0.0 if x == y or (x != x and y != y) else abs(x - y) for x, y in zip(a, b)),
               default=0.0)


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


@dataclasses.dataclass
class _Training:
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
class _Timed:
    """One run's inference, ready for the interleaved rounds: its evaluation step (the
    model in eval mode, compiled where the run compiles), its test batches (collated
    once) and the MAE pass's per-batch errors (the reference of the repeat check); and
    its training for the training rounds (``None``: left out, its state cannot be put
    back)."""

    stats: RunStats
    step: EvalStep
    batches: List[Any]
    errors: List[float]
    training: Optional[_Training] = None


def _measure_mae(stats: RunStats, step: EvalStep, batches: List[Any]) -> _Timed:
    """The test MAE (:func:`evaluate`: one pass, the inference compile in its first step)
    and what the interleaved rounds need afterwards."""
    return _Timed(stats, step, batches, evaluate(stats, step, batches))


def _first_graphs(batches: Iterable[Any], graphs_of: Callable[[Any], int],
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


def _time_inference(timed: List[_Timed], rounds: int, progress: bool) -> float:
    """Every run's inference in ``rounds`` interleaved rounds (:func:`time_interleaved`);
    fills each run's ``infer_round_*`` and ``infer_repeat_gap`` (over every round and the
    MAE pass). Returns the seconds taken."""
    if not timed or rounds < 1:
        return 0.0
    _log(f"timing inference: {rounds} interleaved rounds over the test split ...", progress)
    t0 = time.perf_counter()
    with _quiet_dynamo():
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


def _time_training(timed: List[_Timed], rounds: int, progress: bool,
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
    _log(f"timing training: {rounds} interleaved rounds over about {graphs:,} training "
         f"graphs a run ...", progress)
    t0 = time.perf_counter()
    states = [snapshot(t.training.modules, t.training.optimizer) for t in runs]
    modes = [bool(t.training.mode.training) for t in runs]
    try:
        for t in runs:
            t.training.mode.train(True)
        with _quiet_dynamo():
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


class _CompileCount:
    """Graphs compiled since it was made: Dynamo's own counter and, for a backend
    that compiles outside Dynamo, the adapter's compiled model's count (eager's counts
    programs run, not compiles, so it is not read)."""

    def __init__(self, compiled: Any, backend: str) -> None:
        self.compiled = compiled if backend != "eager" else None
        self.dynamo, self.own = _graphs_compiled(), self._own()

    def _own(self) -> int:
        return int(self.compiled.compile_count) if self.compiled is not None else 0

    def since(self) -> int:
        return max(_graphs_compiled() - self.dynamo, self._own() - self.own)


def _scheduler(opt, epochs: int):
    """Cosine decay of the learning rate over the epochs (same for both runs): the
    BatchNorm running statistics settle as the weights do, so eval-mode MAE is stable."""
    return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, epochs),
                                                      eta_min=0.05 * opt.param_groups[0]["lr"])


def _eager_abs_error(model: Callable[..., torch.Tensor]) -> EvalStep:
    """Evaluation step of ``model`` on a PyG ``Batch`` (unpadded): every graph is real."""
    def step(b) -> Tuple[float, int]:
        pred = model(b.x, b.edge_index, b.edge_attr, b.batch)
        return float((pred.view(-1) - b.y.view(-1)).abs().sum()), b.num_graphs
    return step


def _eval_eager(model: nn.Module, test, batch_size: int) -> float:
    """Test MAE of ``model`` in plain eager PyG (``DataLoader``, unpadded batches)."""
    from torch_geometric.loader import DataLoader

    model.eval()
    stats = RunStats(name="eager eval")
    evaluate(stats, _eager_abs_error(model), DataLoader(test, batch_size=batch_size, shuffle=False))
    return stats.test_mae


@contextlib.contextmanager
def _quiet_dynamo() -> Iterator[None]:
    """Dynamo's graph-break warnings off (PyG's route breaks at ``int(batch.max())``
    in every pooling call; the report counts the graphs compiled instead)."""
    logger = logging.getLogger("torch._dynamo")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _graphs_compiled() -> int:
    """Graphs Dynamo has compiled in this process so far (its own counter)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


# --------------------------------------------------------------------------
# the runs
# --------------------------------------------------------------------------
def _layout_of(graphs, budget, name: Optional[str]) -> Dict[str, Any]:
    """FixedSizeLoader's layout arguments, fitted on every molecule (as the budget), so
    that the train and test loaders give one compiled model batches of one shape."""
    if not name:
        return {}
    # (the collator is what fits the tables: a FixedSizeLoader builds one the same way)
    c = Collator(graphs, budget, layout=name)
    return {"layout": name, "layout_widths": c.layout_widths, "layout_spills": c.layout_spills}


def _train_adapter(model: nn.Module, train, test, budget, cfg: DemoConfig, backend: str,
                   result_fill: List[float], layout: Dict[str, Any]):
    """Train and evaluate ``model`` through FixedSizeLoader + ipu_wrap + compile.

    Returns ``(stats, loader_stats, compiled, timed)`` (``timed``: its inference, for
    the interleaved rounds); appends each epoch-1 batch's node fill (real nodes /
    node budget) to ``result_fill``.
    """
    t_run = time.perf_counter()
    stats = RunStats(name="graph_adapter")
    loader = ga.FixedSizeLoader(train, budget, shuffle=True, seed=cfg.seed, **layout)
    test_loader = ga.FixedSizeLoader(test, budget, shuffle=False, **layout)
    # trim: where a step runs eagerly (backend "eager"; "inductor_eval"'s training) the
    # model sees the real rows only, as eager PyG does; compiled calls stay padded
    wrapped = ga.ipu_wrap(model, loss_fn=ga.masked_loss("l1"), trim=True)
    opt = torch.optim.Adam(wrapped.parameters(), lr=cfg.lr)
    sched = _scheduler(opt, cfg.epochs)
    # one compiled model for training and evaluation (.train() / .eval()); backends that
    # step the optimizer inside the compiled program (steps_optimizer: the IPU ones) take it
    compiled = ga.compile(wrapped, backend, optimizer=opt)

    stats.batches_per_epoch = len(loader)  # planned (the progress bar); counted in training
    loader.set_epoch(0)
    loader_stats = loader.stats

    def batches(epoch: int):
        loader.set_epoch(epoch)
        compiled.train()
        for flat in loader:
            if epoch == 0:
                result_fill.append(float(flat["node_mask"].float().mean()))
            yield flat

    def step(flat) -> Tuple[float, int]:
        loss = loss_of(compiled(flat))
        if not compiled.steps_optimizer:
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        # (a backend with micro-batches returns one loss each: their mean)
        return float(loss.detach().float().mean()), int(flat["graph_mask"].sum())

    def end_epoch(epoch: int) -> None:
        sched.step()
        compiled.set_optimizer(opt)  # backends holding their own copy get the new lr

    def eval_step(flat) -> Tuple[float, int]:
        pred = compiled(flat)["output"].reshape(-1).float()
        y = flat["y"].reshape(-1).float()
        mask = flat["graph_mask"].reshape(-1).bool()
        return float(torch.where(mask, (pred - y).abs(), torch.zeros_like(pred)).sum()), int(mask.sum())

    train_mode_backend = _mode_backend(compiled, training=True)
    train_epochs(stats, step, batches, cfg.epochs, label=f"graph_adapter [{backend}]",
                 end_epoch=end_epoch, progress=cfg.progress,
                 compiles=train_mode_backend != "eager",
                 shape_of=lambda flat: tuple(tuple(v.shape) for v in flat.values()))
    compiles_after_training = int(compiled.compile_count)
    training = None
    if not compiled.steps_optimizer:  # (the optimizer state inside a backend is not restorable)
        loader.set_epoch(0)
        stats.repeat_gap = repeat_gap(step, loader, [wrapped], opt)
        loader.set_epoch(0)  # epoch 1's first batches, for the interleaved training rounds
        training = _Training(step, *_first_graphs(
            loader, lambda flat: int(flat["graph_mask"].sum()),
            min(TRAIN_ROUND_GRAPHS, len(train))), [wrapped], opt, compiled)
    compiled.eval()
    if _mode_backend(compiled, training=False) != "eager":
        _log(f"graph_adapter [{backend}]: compiling for inference (the first test batch) ...",
             cfg.progress)
    timed = _measure_mae(stats, eval_step, list(test_loader))
    timed.training = training
    if backend != "eager":  # (eager's count is of programs run, not compiles)
        stats.compiles_training = compiles_after_training
        stats.compiles = int(compiled.compile_count)
    stats.test_mae_eager_eval = _eval_eager(model, test, cfg.batch_graphs)
    stats.run_seconds = time.perf_counter() - t_run
    return stats, loader_stats, compiled, timed


def _mode_backend(compiled: Any, training: bool) -> str:
    """The backend that runs ``compiled``'s batches in one mode (``"inductor_eval"``:
    eager training, inductor inference); the backend's own name where it has one engine."""
    was = compiled.training
    compiled.train(training)
    try:
        return str(getattr(compiled, "mode_backend", getattr(compiled, "backend", "")))
    finally:
        compiled.train(was)


def _train_pyg(model: nn.Module, train, test, cfg: DemoConfig, compiled: bool) -> _Timed:
    """Train and evaluate ``model`` in plain PyG (``DataLoader``, unpadded batches): eager,
    or (``compiled``) under ``torch.compile(model, dynamic=True)``, PyG's documented
    route for variable-size batches, graph breaks and all. Returns its figures and its
    inference, for the interleaved rounds."""
    import torch.nn.functional as F
    from torch_geometric.loader import DataLoader

    t_run = time.perf_counter()
    stats = RunStats(name="PyG compiled" if compiled else "eager PyG")

    def shuffled() -> DataLoader:
        return DataLoader(train, batch_size=cfg.batch_graphs, shuffle=True,
                          generator=torch.Generator().manual_seed(cfg.seed))

    loader = shuffled()
    test_loader = DataLoader(test, batch_size=cfg.batch_graphs, shuffle=False)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    sched = _scheduler(opt, cfg.epochs)
    stats.batches_per_epoch = len(loader)  # planned (the progress bar); counted in training
    fn = torch.compile(model, dynamic=True, backend=cfg.pyg_compile_backend) if compiled else model
    graphs_before = _graphs_compiled()

    def batches(epoch: int):
        model.train()
        return loader

    def step(b) -> Tuple[float, int]:
        loss = F.l1_loss(fn(b.x, b.edge_index, b.edge_attr, b.batch).view(-1), b.y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss.detach()), b.num_graphs

    with _quiet_dynamo() if compiled else contextlib.nullcontext():
        train_epochs(stats, step, batches, cfg.epochs, label=stats.name,
                     end_epoch=lambda epoch: sched.step(), progress=cfg.progress,
                     compiles=compiled,
                     shape_of=lambda b: (b.num_nodes, b.num_edges, b.num_graphs))
        graphs_after_training = _graphs_compiled()
        stats.repeat_gap = repeat_gap(step, loader, [model], opt)
        model.eval()
        if compiled:
            _log(f"{stats.name}: compiling for inference (the first test batch) ...",
                 cfg.progress)
        timed = _measure_mae(stats, _eager_abs_error(fn), list(test_loader))
    # epoch 1's first batches (a fresh loader, seeded as the training one), for the
    # interleaved training rounds
    timed.training = _Training(step, *_first_graphs(
        shuffled(), lambda b: int(b.num_graphs), min(TRAIN_ROUND_GRAPHS, len(train))),
        [model], opt, model)
    if compiled:
        stats.compiles_training = graphs_after_training - graphs_before
        stats.compiles = _graphs_compiled() - graphs_before
    stats.run_seconds = time.perf_counter() - t_run
    return timed


# --------------------------------------------------------------------------
def _split(n: int, test_fraction: float, seed: int):
    """Seeded ``(train indices, test indices)``, each sorted; at least one test graph."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=g).tolist()
    n_test = max(1, int(round(n * test_fraction))) if n > 1 else 0
    return sorted(perm[n_test:]), sorted(perm[:n_test])


def run_demo(cfg: Optional[DemoConfig] = None, **overrides: Any) -> DemoResult:
    """Run the demo (see the module doc) and return what it measured.

    ``run_demo(epochs=1, limit=200, backend="eager")`` is a quick smoke run.
    Checks the settings first (:func:`~graph_adapter.app.preflight.check_demo_settings`):
    raises :class:`~graph_adapter.app.datasets.MissingExtraError` when rdkit
    (or, with ``plot``, matplotlib) is missing, ``ImportError`` when the
    backend's module (poptorch) is, ``FileNotFoundError`` when the molecule
    file is, :class:`~graph_adapter.app.preflight.DemoSettingError` for a bad
    setting; prints a warning line on stderr for a setting far from useful values.
    """
    cfg = dataclasses.replace(cfg or DemoConfig(), **overrides)
    for warning in check_demo_settings(cfg):  # raises before any slow work
        _log(f"graph-adapter demo: warning: {warning}")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(cfg.deterministic or was_deterministic)
    try:
        return _run(cfg)
    finally:
        torch.use_deterministic_algorithms(was_deterministic)


def _run(cfg: DemoConfig) -> DemoResult:
    """:func:`run_demo` once its settings are checked."""
    import numpy as np

    t_all = time.perf_counter()
    load_start = os.getloadavg()[0]
    _log("loading rdkit's NCI first_5k molecules (from_smiles) ...", cfg.progress)
    t0 = time.perf_counter()
    graphs, n_bad = load_nci5k(limit=cfg.limit, path=cfg.path)
    load_seconds = time.perf_counter() - t0
    if len(graphs) < 2:
        raise DemoSettingError(f"need at least 2 molecules, got {len(graphs)}")
    for d in graphs:  # strings stay out of the tensors (FixedSizeLoader drops them anyway)
        del d.smiles
    train_idx, test_idx = _split(len(graphs), cfg.test_fraction, cfg.seed)
    train = [graphs[i] for i in train_idx]
    test = [graphs[i] for i in test_idx]
    y_train = torch.cat([d.y.view(-1) for d in train])
    y_test = torch.cat([d.y.view(-1) for d in test])
    y_mean, y_std = float(y_train.mean()), float(y_train.std().clamp(min=1e-6)) if len(train) > 1 else 1.0

    # The budget sees graph sizes only (no targets): fit on every molecule so
    # that no test graph is too big for it.
    budget = ga.Budget.fit(graphs, min(cfg.batch_graphs, len(graphs)), seed=cfg.seed)
    # pad-to-max with a fixed graph count (graphium / poptorch_geometric default sizing:
    # largest graph x k real graphs + 1 padding node)
    n_nodes = np.array([d.num_nodes for d in graphs], dtype=np.float64)
    k = min(cfg.batch_graphs, len(graphs))
    pad_to_max = float(n_nodes.mean() * k / (n_nodes.max() * k + 1))

    backend, note = resolve_backend(cfg.backend)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, cfg.hidden, cfg.layers, y_mean, y_std)
    pyg_model = copy.deepcopy(model)  # same initial weights; ipu_wrap edits norms in place

    fill: List[float] = []
    layout = _layout_of(graphs, budget, cfg.layout)
    adapter, st, compiled, adapter_timed = _train_adapter(model, train, test, budget, cfg,
                                                          backend, fill, layout)
    training_backend = _mode_backend(compiled, training=True)
    timed = [adapter_timed]
    if cfg.eager_baseline:
        timed.append(_train_pyg(copy.deepcopy(pyg_model), train, test, cfg, compiled=False))
    if cfg.pyg_compile:
        timed.append(_train_pyg(copy.deepcopy(pyg_model), train, test, cfg, compiled=True))
    by_name = {t.stats.name: t.stats for t in timed}
    eager, pyg_compiled = by_name.get("eager PyG"), by_name.get("PyG compiled")
    # after every training run and every compile: the runs' training, then their
    # inference, side by side (0 compiles expected in either: every step compiled in its
    # epochs or its MAE pass)
    count = _CompileCount(compiled, backend)
    train_seconds = _time_training(timed, cfg.train_rounds, cfg.progress)
    train_compiles = count.since()
    count = _CompileCount(compiled, backend)
    infer_seconds = _time_inference(timed, cfg.infer_rounds, cfg.progress)
    round_compiles = count.since()
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    nondeterminism = {}
    runs = ((adapter, training_backend, getattr(compiled, "atomic_adds", None)),
            (pyg_compiled, cfg.pyg_compile_backend, None))  # None: not read, assume atomics
    for run, run_backend, atomic in runs:
        cause = known_nondeterminism(run_backend, threads, deterministic, atomic)
        if run is not None and cause:
            nondeterminism[run.name] = cause
    result = DemoResult(
        config=cfg, num_graphs=len(graphs), num_bad_smiles=n_bad, num_train=len(train),
        num_test=len(test), backend=backend, backend_note=note,
        budget={"nodes": budget.nodes, "edges": budget.edges, "graphs": budget.graphs},
        node_efficiency=st.node_efficiency, edge_efficiency=st.edge_efficiency,
        graph_efficiency=st.graph_efficiency, pad_to_max_node_efficiency=pad_to_max,
        batch_node_fill=fill, adapter=adapter, eager=eager, pyg_compiled=pyg_compiled,
        load_seconds=load_seconds, cpu_count=os.cpu_count() or 0, threads=threads,
        training_backend=training_backend,
        inference_backend=_mode_backend(compiled, training=False),
        nondeterminism=nondeterminism,
        layout={"name": layout["layout"], "widths": list(layout["layout_widths"]),
                "spills": list(layout["layout_spills"] or [])} if layout else None,
        infer_rounds=cfg.infer_rounds, infer_rounds_seconds=infer_seconds,
        infer_round_compiles=round_compiles,
        train_rounds=cfg.train_rounds if any(t.stats.train_round_seconds for t in timed) else 0,
        train_rounds_seconds=train_seconds, train_round_compiles=train_compiles)
    result._mean_mae = float((y_test - y_mean).abs().mean())
    result.total_seconds = time.perf_counter() - t_all
    result.load_average = [load_start, os.getloadavg()[0]]
    if cfg.plot:
        write_plot(result, cfg.plot)
    return result
