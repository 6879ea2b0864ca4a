"""The demo's timing: every run, its epochs, its evaluation and the interleaved rounds.

One module for what the demo times, in the order it runs:

* the runs (:func:`train_adapter`: FixedSizeLoader, ipu_wrap and compile;
  :func:`train_pyg`: plain PyG, eager or under ``torch.compile(dynamic=True)``), each
  trained in its own epochs and evaluated, then left ready for the rounds
  (:class:`Timed`, :class:`Training`);
* the loops every run shares: its epochs (:func:`train_epochs`), its evaluation
  (:func:`evaluate`) and the interleaved rounds (:func:`time_interleaved`); the runs
  differ only in their step functions (:data:`Step`, :data:`EvalStep`);
* the interleaved rounds of training and inference (:func:`time_rounds`, built on
  :func:`time_training` and :func:`time_inference`: each round runs each run once, in
  turn), the graphs compiled meanwhile (:class:`CompileCount`);
* whether a run repeats bit for bit (:func:`repeat_gap`, measured, and
  :func:`known_nondeterminism`, read from the settings), with the state copy that
  puts a run back (:func:`snapshot`, :func:`restore`).

The settings come in one :class:`~graph_adapter.app.demo.config.DemoConfig`, built once
by :func:`~graph_adapter.app.demo.graph.run_demo` and passed down; the figures go into
each run's :class:`~graph_adapter.app.demo.run_stats.RunStats`.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import sys
import time
from typing import (Any, Callable, Dict, Hashable, Iterable, Iterator, List, Optional, Sequence,
                    Tuple)

import torch
from torch import nn

import graph_adapter as ga
from graph_adapter.backends import precompiled_counts
from graph_adapter.format import loss_of

from ..torch_internals import dynamo_counters
from .config import DemoConfig, loader_layout
from .run_stats import PROBE_STEPS, TRAIN_ROUND_GRAPHS, RunStats, warmup_rounds

__all__ = [
    # the loops
    "Step", "EvalStep", "log", "inductor_cache_counts", "train_epochs", "evaluate",
    "time_interleaved",
    # whether a run repeats
    "repeat_gap", "known_nondeterminism", "snapshot", "restore", "PROBE_STEPS",
    # the interleaved rounds
    "Training", "Timed", "measure_mae", "first_graphs", "time_inference", "time_training",
    "RoundTimes", "time_rounds", "CompileCount", "quiet_dynamo", "graphs_compiled",
    # the runs
    "train_adapter", "mode_backend", "train_pyg",
]

#: one training step: a batch -> (its loss as a float, the number of real graphs in it)
Step = Callable[[Any], Tuple[float, int]]
#: one evaluation step: a batch -> (sum of absolute errors over its real graphs, their number)
EvalStep = Callable[[Any], Tuple[float, int]]

# --------------------------------------------------------------------------
# the loops every run shares
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
    c = dynamo_counters()["inductor"]
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


# --------------------------------------------------------------------------
# whether a run repeats bit for bit (measured, not assumed)
# --------------------------------------------------------------------------
# repeat_gap runs the same few training steps twice from the same state and returns how
# far apart their losses came: 0.0 is bit for bit; anything else means a kernel sums in
# an order that changes from call to call (atomic adds on several threads), and a whole
# run's final test error varies from run to run with it. The state is put back after.
def snapshot(modules: Sequence[nn.Module], optimizer: torch.optim.Optimizer) -> Tuple[Any, ...]:
    """A copy of a run's training state: the modules' state dicts (weights and buffers),
    the optimizer's state and the RNG (:func:`restore` puts it back)."""
    return ([copy.deepcopy(m.state_dict()) for m in modules],
            copy.deepcopy(optimizer.state_dict()), torch.get_rng_state())


def restore(state: Tuple[Any, ...], modules: Sequence[nn.Module],
            optimizer: torch.optim.Optimizer) -> None:
    """Put back what :func:`snapshot` copied."""
    # load_state_dict copies into the existing tensors: compiled code keeps its inputs
    for m, sd in zip(modules, state[0]):
        m.load_state_dict(sd)
    optimizer.load_state_dict(copy.deepcopy(state[1]))
    torch.set_rng_state(state[2])


def repeat_gap(step: Callable[[Any], Tuple[float, int]], batches: Iterable[Any],
               modules: Sequence[nn.Module], optimizer: torch.optim.Optimizer,
               steps: int = PROBE_STEPS) -> float:
    """The largest difference between the losses of ``steps`` steps run twice from one state.

    Args:
        step: one training step (forward, backward, optimizer step) on a batch,
            returning ``(loss, graphs)``.
        batches: at least one batch; the first ``steps`` are used.
        modules: every module whose state a step changes (parameters, buffers).
        optimizer: the optimizer ``step`` steps.

    Returns:
        ``0.0`` when both passes gave the same losses bit for bit.
    """
    sample: List[Any] = []
    for batch in batches:
        sample.append(batch)
        if len(sample) == steps:
            break
    state = snapshot(modules, optimizer)
    losses = []
    for _ in range(2):
        restore(state, modules, optimizer)
        losses.append([step(b)[0] for b in sample])
    restore(state, modules, optimizer)
    # NaN twice counts as a repeat (the run is broken, but repeatably so)
    return max((0.0 if a == b or (a != a and b != b) else abs(a - b)
                for a, b in zip(*losses)), default=0.0)


def known_nondeterminism(backend: str, threads: int, deterministic: bool,
                         atomic_adds: Optional[bool] = None) -> Optional[str]:
    """Why training on ``backend`` with these settings will not repeat bit for bit, or ``None``.

    ``backend`` is the one that runs the training steps (``"eager"`` under
    ``"inductor_eval"``). Inductor's generated CPU kernels may accumulate
    gradients with atomic adds (``index_put`` with ``accumulate=True``: an
    embedding's gradient, PyG's gathers'); on more than one thread their order
    changes from run to run, so sums differ in the last bits and training
    drifts apart over hundreds of steps. A short probe (:func:`repeat_gap`)
    often misses it (two threads rarely collide in a few steps), so the code
    is read instead: ``atomic_adds`` is what
    :attr:`graph_adapter.backends.Compiled.atomic_adds` found in the code it
    generated (``graph_adapter.compile`` keeps ATen's ``index_add`` for
    gathers and embeddings on more than one thread, so the demo's models
    have none); ``None`` (unknown, e.g. PyG's own ``torch.compile`` route)
    assumes they are there. ``torch.use_deterministic_algorithms(True)``
    makes inductor call ATen's deterministic kernels instead; one thread has
    no order to change.
    """
    if backend == "inductor" and threads > 1 and not deterministic and atomic_adds is not False:
        return (f"inductor's CPU kernels accumulate some gradients with atomic adds on "
                f"{threads} threads, in an order that changes from run to run")
    return None


# --------------------------------------------------------------------------
# the interleaved rounds
# --------------------------------------------------------------------------
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
    as a repeat, as in :func:`repeat_gap`)."""
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
    back after (as :func:`repeat_gap` does), and each run's
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
    return int(dynamo_counters()["stats"]["unique_graphs"])


@dataclasses.dataclass
class RoundTimes:
    """What :func:`time_rounds` measured: the seconds the training and the inference rounds
    took, and the graphs compiled during each (0 expected: every step compiled before)."""

    train_seconds: float
    train_compiles: int
    infer_seconds: float
    infer_compiles: int


def time_rounds(timed: List[Timed], cfg: DemoConfig, compiled: Any, backend: str) -> RoundTimes:
    """The runs' training rounds, then their inference rounds, side by side
    (``cfg.train_rounds`` and ``cfg.infer_rounds`` of them), after every training run and
    every compile; counts the graphs compiled meanwhile (Dynamo's and the adapter's
    ``compiled``'s, for ``backend``)."""
    count = CompileCount(compiled, backend)
    train_seconds = time_training(timed, cfg.train_rounds, cfg.progress)
    train_compiles = count.since()
    count = CompileCount(compiled, backend)
    infer_seconds = time_inference(timed, cfg.infer_rounds, cfg.progress)
    return RoundTimes(train_seconds, train_compiles, infer_seconds, count.since())


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


# --------------------------------------------------------------------------
# the runs
# --------------------------------------------------------------------------
def train_adapter(model: nn.Module, train, test, budget, cfg: DemoConfig, backend: str,
                  result_fill: List[float], tables: Tuple[Any, Any]):
    """Train and evaluate ``model`` through FixedSizeLoader + ipu_wrap + compile.

    Returns ``(stats, loader_stats, compiled, timed)`` (``timed``: its inference, for
    the interleaved rounds); appends each epoch-1 batch's node fill (real nodes /
    node budget) to ``result_fill``. ``tables``: see :func:`_loaders`.
    """
    t_run = time.perf_counter()
    stats = RunStats(name="graph_adapter")
    loader, test_loader = _loaders(train, test, budget, cfg, tables)
    # trim: where a step runs eagerly (backend "eager"; "inductor_eval"'s training) the
    # model sees the real rows only, as eager PyG does; compiled calls stay padded
    wrapped = ga.ipu_wrap(model, loss_fn=ga.masked_loss("l1"), trim=True)
    opt = torch.optim.Adam(wrapped.parameters(), lr=cfg.lr)
    sched = _scheduler(opt, cfg.epochs)
    # one compiled model for training and evaluation (.train() / .eval()); backends that
    # step the optimizer inside the compiled program (steps_optimizer: the IPU ones) take it
    compiled = _compile_adapter(wrapped, backend, opt, cfg, cfg.epochs * len(loader))

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

    train_mode_backend = mode_backend(compiled, training=True)
    train_epochs(stats, step, batches, cfg.epochs, label=f"graph_adapter [{backend}]",
                 end_epoch=end_epoch, progress=cfg.progress,
                 compiles=train_mode_backend != "eager",
                 shape_of=lambda flat: tuple(tuple(v.shape) for v in flat.values()))
    compiles_after_training = int(compiled.compile_count)
    # background compiles: done before anything is compared or timed, so that every pass
    # after training runs one program (an eager pass beside a compiled one would differ by
    # float rounding and read as nondeterminism)
    _wait_for_background(stats, compiled, f"graph_adapter [{backend}]", cfg.progress)
    training = None
    if not compiled.steps_optimizer:  # (the optimizer state inside a backend is not restorable)
        loader.set_epoch(0)
        stats.repeat_gap = repeat_gap(step, loader, [wrapped], opt)
        loader.set_epoch(0)  # epoch 1's first batches, for the interleaved training rounds
        training = Training(step, *first_graphs(
            loader, lambda flat: int(flat["graph_mask"].sum()),
            min(TRAIN_ROUND_GRAPHS, len(train))), [wrapped], opt, compiled)
    timed = _test_pass(stats, compiled, eval_step, list(test_loader), backend, cfg.progress)
    timed.training = training
    if backend != "eager":  # (eager's count is of programs run, not compiles)
        stats.compiles_training = compiles_after_training
    _wait_for_background(stats, compiled, f"graph_adapter [{backend}]", cfg.progress)
    if backend != "eager":
        stats.compiles = int(compiled.compile_count)
    stats.test_mae_eager_eval = _eval_eager(model, test, cfg.batch_graphs)
    stats.run_seconds = time.perf_counter() - t_run
    return stats, loader_stats, compiled, timed


def _loaders(train, test, budget, cfg: DemoConfig, tables: Tuple[Any, Any]) -> Tuple[Any, Any]:
    """The training (shuffled) and test FixedSizeLoaders of ``cfg.layout``, with its
    tables' ``(layout_widths, layout_spills)`` fitted on every molecule: one shape for
    the train and test batches of one compiled model."""
    kw = dict(layout=loader_layout(cfg.layout), layout_widths=tables[0],
              layout_spills=tables[1])
    return (ga.FixedSizeLoader(train, budget, shuffle=True, seed=cfg.seed, **kw),
            ga.FixedSizeLoader(test, budget, shuffle=False, **kw))


def _test_pass(stats: RunStats, compiled: Any, eval_step: EvalStep, batches: List[Any],
               backend: str, progress: bool) -> Timed:
    """The test MAE pass in eval mode; with background compiles, the inference compile is
    started by one call and waited for first, so the pass and the timed rounds after it
    run one program."""
    compiled.eval()
    if mode_backend(compiled, training=False) != "eager":
        log(f"graph_adapter [{backend}]: compiling for inference (the first test batch) ...",
            progress)
    if getattr(compiled, "stats", None) is not None:
        with torch.no_grad():
            eval_step(batches[0])
        _wait_for_background(stats, compiled, f"graph_adapter [{backend}]", progress)
    return measure_mae(stats, eval_step, batches)


def _compile_adapter(wrapped: nn.Module, backend: str, opt: Any, cfg: DemoConfig,
                     steps: int) -> Any:
    """The adapter's compiled model. The run's length is known: a cold background compile
    that cannot pay back within the training ``steps`` starts after them (for the test
    pass and the timed rounds), all threads kept until then."""
    compiled = ga.compile(wrapped, backend, optimizer=opt, **_compile_flags(cfg, backend))
    if hasattr(compiled, "expect_calls"):  # (the IPU backends' compiled models have none)
        compiled.expect_calls(steps)
    return compiled


def _compile_flags(cfg: DemoConfig, backend: str) -> Dict[str, bool]:
    """``compile()``'s precompile and background flags for the adapter's run; the demo's
    default with inductor: train at once (eager) while a child process compiles."""
    background = backend == "inductor" if cfg.background is None else cfg.background
    # background=False said aloud: the library's default is on
    return {**({"precompile": True} if cfg.precompile else {}), "background": background}


def _wait_for_background(stats: RunStats, compiled: Any, label: str, progress: bool) -> None:
    """With background compiles: wait for them (after training, and for the inference
    compile before the test pass), so that the passes after training run the compiled
    program; the waits add up in ``stats``, with what ran eagerly."""
    # (the IPU backends' compiled models have no stats; no background compile: None)
    if getattr(getattr(compiled, "stats", None), "background", None) is None:
        return
    t_wait = time.perf_counter()
    log(f"{label}: waiting for the background compiles ...", progress)
    compiled.wait()
    stats.background_wait_seconds += time.perf_counter() - t_wait
    keys = compiled.stats.background.keys
    stats.background = _background_line(keys)
    # the training mode's compiles, wherever they finished (some children end after
    # training): its children's (a graph this process compiled at a switch counts in
    # the total only)
    stats.compiles_training = sum(k["compiles"] for k in keys if k["mode"].startswith("train"))


def _background_line(keys: List[Dict[str, Any]]) -> str:
    """The report's short form of ``compiled.stats.background``: eager training steps,
    each mode's compile time, and any mode that stayed eager (why, cut short)."""
    trains = [k for k in keys if k["mode"].startswith("train")]
    train = sum(k["eager_calls"] for k in trains)
    done = [f"{k['mode'].split('+')[0]} {'loaded in ' if k.get('loaded') else ''}"
            f"{k['compile_s']:.{1 if k.get('loaded') else 0}f} s" for k in keys
            if k["state"] in ("compiled", "ready") and k["compile_s"] is not None]
    eager = [f"{k['mode']} stayed eager: {(k['why'] or '')[:60]}" for k in keys
             if k["state"] == "eager"]
    loaded = any(k.get("loaded") for k in trains)  # warm: a saved compile, no child
    done_s = f" ({', '.join(done)})" if done else ""
    if any(k.get("deferred") for k in trains):
        how = (f"eagerly for {train} steps, then compiled{done_s}: too few steps to pay back "
               + ("loading the saved compile" if loaded else "a cold compile"))
    elif loaded:
        how = f"trained eagerly for {train} steps, then on the saved compile{done_s}"
    else:
        how = f"trained eagerly for {train} steps while compiling in the background{done_s}"
    return "; ".join([how] + eager)


def mode_backend(compiled: Any, training: bool) -> str:
    """The backend that runs ``compiled``'s batches in one mode (``"inductor_eval"``:
    eager training, inductor inference); the backend's own name where it has one engine."""
    was = compiled.training
    compiled.train(training)
    try:
        return str(getattr(compiled, "mode_backend", getattr(compiled, "backend", "")))
    finally:
        compiled.train(was)


def train_pyg(model: nn.Module, train, test, cfg: DemoConfig, compiled: bool) -> Timed:
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
    graphs_before = graphs_compiled()

    def batches(epoch: int):
        model.train()
        return loader

    def step(b) -> Tuple[float, int]:
        loss = F.l1_loss(fn(b.x, b.edge_index, b.edge_attr, b.batch).view(-1), b.y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss.detach()), b.num_graphs

    with quiet_dynamo() if compiled else contextlib.nullcontext():
        train_epochs(stats, step, batches, cfg.epochs, label=stats.name,
                     end_epoch=lambda epoch: sched.step(), progress=cfg.progress,
                     compiles=compiled,
                     shape_of=lambda b: (b.num_nodes, b.num_edges, b.num_graphs))
        graphs_after_training = graphs_compiled()
        stats.repeat_gap = repeat_gap(step, loader, [model], opt)
        model.eval()
        if compiled:
            log(f"{stats.name}: compiling for inference (the first test batch) ...",
                cfg.progress)
        timed = measure_mae(stats, _eager_abs_error(fn), list(test_loader))
    # epoch 1's first batches (a fresh loader, seeded as the training one), for the
    # interleaved training rounds
    timed.training = Training(step, *first_graphs(
        shuffled(), lambda b: int(b.num_graphs), min(TRAIN_ROUND_GRAPHS, len(train))),
        [model], opt, model)
    if compiled:
        stats.compiles_training = graphs_after_training - graphs_before
        stats.compiles = graphs_compiled() - graphs_before
    stats.run_seconds = time.perf_counter() - t_run
    return timed
