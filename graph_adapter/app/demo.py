"""The demo behind ``graph-adapter demo``: a stock PyG GNN on real molecules, through the adapter.

What :func:`run_demo` does, in order:

1. loads rdkit's 5000 NCI molecules (:func:`graph_adapter.app.datasets.load_nci5k`,
   target: TPSA) and splits them into train and test (seeded);
2. learns a budget with :meth:`Budget.fit <graph_adapter.budget.Budget.fit>`
   (from graph sizes only, never targets) and packs the training split with
   :class:`~graph_adapter.loader.FixedSizeLoader`;
3. wraps the model with :func:`~graph_adapter.wrap.ipu_wrap` (masked L1 loss
   inside the compiled region) and compiles it with
   :func:`graph_adapter.backends.compile` (``"auto"``: resolved by
   :func:`graph_adapter.backends.resolve_backend`), one compiled model for
   training and evaluation, whatever the backend;
4. trains ``epochs`` epochs, evaluates the MAE on the test split;
5. trains an identical copy of the model (same initial weights, same loss,
   same optimizer) in plain eager PyG, with ``torch_geometric.loader.DataLoader``
   over the same training split, in the same process, for the throughput and
   MAE comparison;
6. returns a :class:`~graph_adapter.app.results.DemoResult`; its ``report()``
   formats it.

Both runs go through the same epoch loop (:func:`train_epochs`) and the same
evaluation loop (:func:`evaluate`); they differ only in their step functions.
The models live in :mod:`graph_adapter.app.models`, the figures and the
report in :mod:`graph_adapter.app.results`.
"""
from __future__ import annotations

import copy
import dataclasses
import sys
import time
from typing import Any, Callable, Hashable, Iterable, List, Optional, Tuple

import torch
from torch import nn

import graph_adapter as ga
from graph_adapter.backends import resolve_backend
from graph_adapter.format import loss_of

from .datasets import load_nci5k
from .models import MODELS, AtomBondEncoder, MolRegressor, build_model
from .preflight import DemoSettingError, check_demo_settings
from .repeat import known_nondeterminism, repeat_gap
from .results import UNCOMPILED_BACKENDS, DemoConfig, DemoResult, RunStats, write_plot

__all__ = ["MODELS", "DemoConfig", "DemoResult", "RunStats", "AtomBondEncoder", "MolRegressor",
           "build_model", "run_demo", "train_epochs", "evaluate", "write_plot"]

#: one training step: a batch -> (its loss as a float, the number of real graphs in it)
Step = Callable[[Any], Tuple[float, int]]
#: one evaluation step: a batch -> (sum of absolute errors over its real graphs, their number)
EvalStep = Callable[[Any], Tuple[float, int]]


# --------------------------------------------------------------------------
# the loops both runs share
# --------------------------------------------------------------------------
def _progress(total: int, desc: str, enabled: bool):
    """A tqdm bar on stderr, or ``None`` (disabled, or tqdm not installed)."""
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True)


def _log(msg: str, enabled: bool = True) -> None:
    if enabled:
        print(msg, file=sys.stderr, flush=True)


def train_epochs(stats: RunStats, step: Step, batches: Callable[[int], Iterable[Any]],
                 epochs: int, *, label: str, shape_of: Callable[[Any], Hashable],
                 end_epoch: Callable[[int], None] = lambda epoch: None,
                 progress: bool = True) -> None:
    """Train ``epochs`` epochs, recording the figures in ``stats`` (in place).

    Args:
        stats: filled in: ``steps``, ``train_graphs``, ``epoch_loss`` (mean
            loss per real graph, one per epoch), ``first_step_seconds`` (the
            compile, for compiled backends), ``train_seconds``, ``epochs``,
            ``distinct_shapes`` (of epoch 1). ``batches_per_epoch`` must be
            set (the progress bar's length).
        step: one optimizer step on a batch (see :data:`Step`).
        batches: ``batches(epoch)`` iterates that epoch's batches (and sets
            the model's train mode, the loader's epoch...).
        shape_of: a batch's shape, to count the distinct shapes a compiler sees.
        label: the run's name in the progress output.
        end_epoch: called after each epoch (learning-rate schedule...).
    """
    bar = _progress(epochs * stats.batches_per_epoch, label, progress)
    shapes = set()
    t_start = time.perf_counter()
    for epoch in range(epochs):
        loss_sum, graphs_sum = 0.0, 0
        for batch in batches(epoch):
            t0 = time.perf_counter()
            if epoch == 0:
                shapes.add(shape_of(batch))
            loss, graphs = step(batch)
            loss_sum += loss * graphs
            graphs_sum += graphs
            if stats.steps == 0:
                stats.first_step_seconds = time.perf_counter() - t0
            stats.steps += 1
            stats.train_graphs += graphs
            if bar is not None:
                bar.set_postfix(epoch=epoch + 1, loss=f"{loss:.2f}", refresh=False)
                bar.update(1)
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


def evaluate(stats: RunStats, step: EvalStep, batches: Iterable[Any]) -> None:
    """The test MAE and inference timings, recorded in ``stats`` (no gradients).

    Fills ``test_mae``, ``eval_graphs``, ``eval_batches``, ``eval_seconds``
    and ``eval_first_step_seconds`` (the compile, for compiled backends).
    """
    abs_err, n = 0.0, 0
    t_start = time.perf_counter()
    with torch.no_grad():
        for i, batch in enumerate(batches):
            t0 = time.perf_counter()
            err, graphs = step(batch)
            abs_err += err
            n += graphs
            if i == 0:
                stats.eval_first_step_seconds = time.perf_counter() - t0
            stats.eval_batches += 1
    stats.eval_seconds = time.perf_counter() - t_start
    stats.eval_graphs = n
    stats.test_mae = abs_err / max(1, n)


def _scheduler(opt, epochs: int):
    """Cosine decay of the learning rate over the epochs (same for both runs): the
    BatchNorm running statistics settle as the weights do, so eval-mode MAE is stable."""
    return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, epochs),
                                                      eta_min=0.05 * opt.param_groups[0]["lr"])


def _eager_abs_error(model: nn.Module) -> EvalStep:
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
# the two runs
# --------------------------------------------------------------------------
def _train_adapter(model: nn.Module, train, test, budget, cfg: DemoConfig, backend: str,
                   result_fill: List[float]):
    """Train and evaluate ``model`` through FixedSizeLoader + ipu_wrap + compile.

    Returns ``(stats, loader_stats)``; appends each epoch-1 batch's node fill
    (real nodes / node budget) to ``result_fill``.
    """
    stats = RunStats(name="graph_adapter")
    loader = ga.FixedSizeLoader(train, budget, shuffle=True, seed=cfg.seed)
    test_loader = ga.FixedSizeLoader(test, budget, shuffle=False)
    wrapped = ga.ipu_wrap(model, loss_fn=ga.masked_loss("l1"))
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

    train_epochs(stats, step, batches, cfg.epochs, label=f"graph_adapter [{backend}]",
                 end_epoch=end_epoch, progress=cfg.progress,
                 shape_of=lambda flat: tuple(tuple(v.shape) for v in flat.values()))
    compiles_after_training = int(compiled.compile_count)
    if not compiled.steps_optimizer:  # (the optimizer state inside a backend is not restorable)
        loader.set_epoch(0)
        stats.repeat_gap = repeat_gap(step, loader, [wrapped], opt)
    compiled.eval()
    evaluate(stats, eval_step, test_loader)
    if backend not in UNCOMPILED_BACKENDS:  # (eager's count is of programs run, not compiles)
        stats.compiles_training = compiles_after_training
        stats.compiles = int(compiled.compile_count)
    stats.test_mae_eager_eval = _eval_eager(model, test, cfg.batch_graphs)
    return stats, loader_stats


def _train_eager(model: nn.Module, train, test, cfg: DemoConfig) -> RunStats:
    """Train and evaluate ``model`` in plain eager PyG (``DataLoader``, unpadded batches)."""
    import torch.nn.functional as F
    from torch_geometric.loader import DataLoader

    stats = RunStats(name="eager PyG")
    loader = DataLoader(train, batch_size=cfg.batch_graphs, shuffle=True,
                        generator=torch.Generator().manual_seed(cfg.seed))
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    sched = _scheduler(opt, cfg.epochs)
    stats.batches_per_epoch = len(loader)  # planned (the progress bar); counted in training

    def batches(epoch: int):
        model.train()
        return loader

    def step(b) -> Tuple[float, int]:
        loss = F.l1_loss(model(b.x, b.edge_index, b.edge_attr, b.batch).view(-1), b.y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss.detach()), b.num_graphs

    train_epochs(stats, step, batches, cfg.epochs, label="eager PyG",
                 end_epoch=lambda epoch: sched.step(),
                 progress=cfg.progress, shape_of=lambda b: (b.num_nodes, b.num_edges, b.num_graphs))
    stats.repeat_gap = repeat_gap(step, loader, [model], opt)
    model.eval()
    evaluate(stats, _eager_abs_error(model),
             DataLoader(test, batch_size=cfg.batch_graphs, shuffle=False))
    return stats


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
    eager_model = copy.deepcopy(model)  # same initial weights; ipu_wrap edits norms in place

    fill: List[float] = []
    adapter, st = _train_adapter(model, train, test, budget, cfg, backend, fill)
    eager = _train_eager(eager_model, train, test, cfg) if cfg.eager_baseline else None
    result = DemoResult(
        config=cfg, num_graphs=len(graphs), num_bad_smiles=n_bad, num_train=len(train),
        num_test=len(test), backend=backend, backend_note=note,
        budget={"nodes": budget.nodes, "edges": budget.edges, "graphs": budget.graphs},
        node_efficiency=st.node_efficiency, edge_efficiency=st.edge_efficiency,
        graph_efficiency=st.graph_efficiency, pad_to_max_node_efficiency=pad_to_max,
        batch_node_fill=fill, adapter=adapter, eager=eager, load_seconds=load_seconds)
    result.nondeterminism = known_nondeterminism(backend, torch.get_num_threads(),
                                                 torch.are_deterministic_algorithms_enabled())
    result._mean_mae = float((y_test - y_mean).abs().mean())
    result.total_seconds = time.perf_counter() - t_all
    if cfg.plot:
        write_plot(result, cfg.plot)
    return result
