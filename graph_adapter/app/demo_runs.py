"""The demo's runs: the adapter's (:func:`train_adapter`: FixedSizeLoader, ipu_wrap and
compile) and plain PyG's, eager or under ``torch.compile(dynamic=True)``
(:func:`train_pyg`), each trained in its own epochs, evaluated, and left ready for the
interleaved rounds of :mod:`graph_adapter.app.demo_rounds`.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Dict, List, Tuple

import torch
from torch import nn

import graph_adapter as ga
from graph_adapter.format import loss_of

from .demo_loops import EvalStep, evaluate, log, train_epochs
from .demo_rounds import (Timed, Training, first_graphs, graphs_compiled, measure_mae,
                          quiet_dynamo)
from .repeat import repeat_gap
from .results import TRAIN_ROUND_GRAPHS, DemoConfig, RunStats

__all__ = ["train_adapter", "mode_backend", "train_pyg"]


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
    compiled = ga.compile(wrapped, backend, optimizer=opt,
                          **({"precompile": True} if cfg.precompile else {}))

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
    training = None
    if not compiled.steps_optimizer:  # (the optimizer state inside a backend is not restorable)
        loader.set_epoch(0)
        stats.repeat_gap = repeat_gap(step, loader, [wrapped], opt)
        loader.set_epoch(0)  # epoch 1's first batches, for the interleaved training rounds
        training = Training(step, *first_graphs(
            loader, lambda flat: int(flat["graph_mask"].sum()),
            min(TRAIN_ROUND_GRAPHS, len(train))), [wrapped], opt, compiled)
    compiled.eval()
    if mode_backend(compiled, training=False) != "eager":
        log(f"graph_adapter [{backend}]: compiling for inference (the first test batch) ...",
            cfg.progress)
    timed = measure_mae(stats, eval_step, list(test_loader))
    timed.training = training
    if backend != "eager":  # (eager's count is of programs run, not compiles)
        stats.compiles_training = compiles_after_training
        stats.compiles = int(compiled.compile_count)
    stats.test_mae_eager_eval = _eval_eager(model, test, cfg.batch_graphs)
    stats.run_seconds = time.perf_counter() - t_run
    return stats, loader_stats, compiled, timed


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
