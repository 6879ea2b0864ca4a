"""The demo behind ``graph-adapter demo``: a stock PyG GNN on real molecules, through the adapter.

What :func:`run_demo` does, in order:

1. loads rdkit's 5000 NCI molecules (:func:`graph_adapter.app.datasets.load_nci5k`,
   target: TPSA) and splits them into train and test (seeded);
2. learns a budget with :meth:`Budget.fit <graph_adapter.batching.budget.Budget.fit>`
   (from graph sizes only, never targets) and packs the training split with
   :class:`~graph_adapter.batching.loader.FixedSizeLoader`;
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
   holding :data:`~graph_adapter.app.demo.results.TRAIN_ROUND_GRAPHS` real
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
8. returns a :class:`~graph_adapter.app.demo.results.DemoResult`; its ``report()``
   formats it.

Every run goes through the same epoch loop (:func:`train_epochs`) and the same
evaluation loop (:func:`evaluate`); they differ only in their step functions.
Throughput is steady state, from the interleaved rounds, after every compile:
the leading rounds in which any run was slower than
:data:`~graph_adapter.app.demo.results.WARMUP_FACTOR` x its median round are left
out (:func:`~graph_adapter.app.demo.results.warmup_rounds`); a run's rate is its
round's graphs over its median round, a ratio the median of the per-round
ratios (:func:`~graph_adapter.app.demo.results.round_ratios`). The runs train one
after the other (each in its own epochs: interleaving epochs would run three
models, three optimizers and three progress bars in lockstep), and a whole
process or period of this virtual machine can run 20% slower than another:
timed that way the training ratio to eager PyG moved from 1.11x to 1.40x in
three quiet runs. Each run's own epochs are still timed (every step; the
leading steps slower than that factor x the run's median step, the compile
among them, left out: :func:`~graph_adapter.app.demo.results.warmup_steps`) and
reported second.
The settings are one :class:`~graph_adapter.app.demo.config.DemoConfig`, built here once
and passed down. The models live in :mod:`graph_adapter.app.models`, the figures and the
report in :mod:`graph_adapter.app.demo.results`; the runs, their loops, the interleaved
rounds and the repeat probe in :mod:`graph_adapter.app.demo.timing`.
"""
from __future__ import annotations

import copy
import dataclasses
import os
import time
from typing import Any, Dict, List, Optional, Tuple

import torch

import graph_adapter as ga
from graph_adapter.backends import resolve_backend
from graph_adapter.batching import fit_layout_widths

from ..datasets import load_nci5k
from ..models import MODELS, AtomBondEncoder, MolRegressor, build_model
from ..preflight import DemoSettingError, check_demo_settings
from .config import DemoConfig, loader_layout
from .results import DemoResult, RunStats, write_plot
from .timing import (Timed, evaluate, known_nondeterminism, log, mode_backend, time_interleaved,
                     time_rounds, train_adapter, train_epochs, train_pyg)

__all__ = ["MODELS", "DemoConfig", "DemoResult", "RunStats", "AtomBondEncoder", "MolRegressor",
           "build_model", "run_demo", "train_epochs", "evaluate", "time_interleaved",
           "write_plot"]


# --------------------------------------------------------------------------
#: the layout tables' ``(layout_widths, layout_spills)`` (``(None, None)``: no tables)
Tables = Tuple[Optional[Tuple[int, int]], Optional[Tuple[int, int]]]


def _tables(graphs, budget, layout: str) -> Tables:
    """The layout tables' sizes fitted on every molecule (as the budget), so that the
    train and test loaders give one compiled model batches of one shape."""
    name = loader_layout(layout)
    return fit_layout_widths(graphs, budget.graphs, name) if name else (None, None)


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
        log(f"graph-adapter demo: warning: {warning}")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(cfg.deterministic or was_deterministic)
    try:
        return _run(cfg)
    finally:
        torch.use_deterministic_algorithms(was_deterministic)


@dataclasses.dataclass
class _Molecules:
    """The loaded molecules and their seeded train / test split, with the training
    targets' mean and standard deviation (the model's output scale)."""

    graphs: List[Any]
    num_bad: int
    load_seconds: float
    train: List[Any]
    test: List[Any]
    y_mean: float
    y_std: float
    y_test: torch.Tensor


def _load(cfg: DemoConfig) -> _Molecules:
    """rdkit's NCI molecules (``cfg.limit``, ``cfg.path``), split by ``cfg.seed``."""
    log("loading rdkit's NCI first_5k molecules (from_smiles) ...", cfg.progress)
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
    return _Molecules(graphs, n_bad, load_seconds, train, test, y_mean, y_std, y_test)


def _pad_to_max(graphs, batch_graphs: int) -> float:
    """The node efficiency of pad-to-max with a fixed graph count (graphium /
    poptorch_geometric default sizing: largest graph x k real graphs + 1 padding node)."""
    import numpy as np

    n_nodes = np.array([d.num_nodes for d in graphs], dtype=np.float64)
    k = min(batch_graphs, len(graphs))
    return float(n_nodes.mean() * k / (n_nodes.max() * k + 1))


@dataclasses.dataclass
class _Runs:
    """Every run, trained and evaluated: the adapter's figures, its loader's statistics,
    its compiled model, its epoch-1 node fill and layout tables, and every run ready for
    the interleaved rounds (the adapter's first)."""

    adapter: RunStats
    loader_stats: Any
    compiled: Any
    fill: List[float]
    tables: Tables
    timed: List[Timed]

    def stats(self, name: str) -> Optional[RunStats]:
        """The figures of the run called ``name`` (``None``: not run)."""
        return {t.stats.name: t.stats for t in self.timed}.get(name)


def _train_runs(cfg: DemoConfig, mols: _Molecules, budget, backend: str) -> _Runs:
    """The adapter's run, then eager PyG's and (``cfg.pyg_compile``) PyG compiled's, from
    the same initial weights."""
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, cfg.hidden, cfg.layers, mols.y_mean, mols.y_std)
    pyg_model = copy.deepcopy(model)  # same initial weights; ipu_wrap edits norms in place
    fill: List[float] = []
    # the HYB spill adds with scatter_add (nn/static_layout.SPILL_ADD), which poptorch
    # handles: the IPU backends keep the layout too
    tables = _tables(mols.graphs, budget, cfg.layout)
    adapter, st, compiled, adapter_timed = train_adapter(model, mols.train, mols.test, budget,
                                                         cfg, backend, fill, tables)
    timed = [adapter_timed]
    if cfg.eager_baseline:
        timed.append(train_pyg(copy.deepcopy(pyg_model), mols.train, mols.test, cfg,
                               compiled=False))
    if cfg.pyg_compile:
        timed.append(train_pyg(copy.deepcopy(pyg_model), mols.train, mols.test, cfg,
                               compiled=True))
    return _Runs(adapter, st, compiled, fill, tables, timed)


def _nondeterminism(cfg: DemoConfig, runs: _Runs) -> Dict[str, str]:
    """Run name -> why its training will not repeat bit for bit, for the runs that won't."""
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    out = {}
    checked = ((runs.adapter, mode_backend(runs.compiled, training=True),
                getattr(runs.compiled, "atomic_adds", None)),
               (runs.stats("PyG compiled"), cfg.pyg_compile_backend, None))  # None: assume atomics
    for run, run_backend, atomic in checked:
        cause = known_nondeterminism(run_backend, threads, deterministic, atomic)
        if run is not None and cause:
            out[run.name] = cause
    return out


def _run(cfg: DemoConfig) -> DemoResult:
    """:func:`run_demo` once its settings are checked."""
    t_all = time.perf_counter()
    load_start = os.getloadavg()[0]
    mols = _load(cfg)
    # The budget sees graph sizes only (no targets): fit on every molecule so
    # that no test graph is too big for it.
    budget = ga.Budget.fit(mols.graphs, min(cfg.batch_graphs, len(mols.graphs)), seed=cfg.seed)
    backend, note = resolve_backend(cfg.backend)
    runs = _train_runs(cfg, mols, budget, backend)
    # after every training run and every compile: the runs' training, then their
    # inference, side by side (0 compiles expected in either: every step compiled in its
    # epochs or its MAE pass)
    rounds = time_rounds(runs.timed, cfg, runs.compiled, backend)
    result = _result(cfg, mols, budget, backend, note, runs, rounds)
    result.mean_mae = float((mols.y_test - mols.y_mean).abs().mean())
    result.total_seconds = time.perf_counter() - t_all
    result.load_average = [load_start, os.getloadavg()[0]]
    if cfg.plot:
        write_plot(result, cfg.plot)
    return result


def _result(cfg: DemoConfig, mols: _Molecules, budget, backend: str, note: str, runs: _Runs,
            rounds) -> DemoResult:
    """The :class:`DemoResult` of a run's parts (its timings but the whole run's)."""
    st, compiled = runs.loader_stats, runs.compiled
    return DemoResult(
        config=cfg, num_graphs=len(mols.graphs), num_bad_smiles=mols.num_bad,
        num_train=len(mols.train), num_test=len(mols.test), backend=backend, backend_note=note,
        budget={"nodes": budget.nodes, "edges": budget.edges, "graphs": budget.graphs},
        node_efficiency=st.node_efficiency, edge_efficiency=st.edge_efficiency,
        graph_efficiency=st.graph_efficiency,
        pad_to_max_node_efficiency=_pad_to_max(mols.graphs, cfg.batch_graphs),
        batch_node_fill=runs.fill, adapter=runs.adapter, eager=runs.stats("eager PyG"),
        pyg_compiled=runs.stats("PyG compiled"),
        load_seconds=mols.load_seconds, cpu_count=os.cpu_count() or 0,
        threads=torch.get_num_threads(),
        training_backend=mode_backend(compiled, training=True),
        inference_backend=mode_backend(compiled, training=False),
        nondeterminism=_nondeterminism(cfg, runs),
        layout_widths=runs.tables[0], layout_spills=runs.tables[1],
        infer_rounds=cfg.infer_rounds, infer_rounds_seconds=rounds.infer_seconds,
        infer_round_compiles=rounds.infer_compiles,
        train_rounds=cfg.train_rounds if any(t.stats.train_round_seconds for t in runs.timed) else 0,
        train_rounds_seconds=rounds.train_seconds, train_round_compiles=rounds.train_compiles)
