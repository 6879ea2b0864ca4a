"""The demo behind ``graph-adapter demo``: a stock PyG GNN on real molecules, through the adapter.

What :func:`run_demo` does, in order:

1. loads rdkit's 5000 NCI molecules (:func:`graph_adapter.datasets.load_nci5k`,
   target: TPSA) and splits them into train and test (seeded);
2. learns a budget with :meth:`Budget.fit <graph_adapter.budget.Budget.fit>`
   (from graph sizes only, never targets) and packs the training split with
   :class:`~graph_adapter.loader.FixedSizeLoader`;
3. wraps the model with :func:`~graph_adapter.wrap.ipu_wrap` (masked L1 loss
   inside the compiled region) and compiles it with
   :func:`graph_adapter.backends.compile` (``"auto"``: poptorch where it is
   installed, else inductor);
4. trains ``epochs`` epochs, evaluates the MAE on the test split;
5. trains an identical copy of the model (same initial weights, same loss,
   same optimizer) in plain eager PyG, with ``torch_geometric.loader.DataLoader``
   over the same training split, in the same process, for the throughput and
   MAE comparison;
6. returns a :class:`DemoResult`; :meth:`DemoResult.report` formats it.

Every model is a stock PyG network between an atom/bond embedding (the
categorical features of ``from_smiles``) and a small regression head; the
adapter runs it unmodified.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import torch
from torch import Tensor, nn

__all__ = ["MODELS", "DemoConfig", "DemoResult", "AtomBondEncoder", "MolRegressor",
           "build_model", "run_demo", "main"]

#: ``--model`` choices: name -> description.
MODELS = {
    "gine": "GINEConv x L (edge features), BatchNorm, global_add_pool",
    "gin": "torch_geometric.nn.models.GIN (no edge features), global_add_pool",
    "gat": "torch_geometric.nn.models.GAT (GATv2, edge features), global_mean_pool",
    "attentivefp": "torch_geometric.nn.models.AttentiveFP (edge features, own readout)",
}


class AtomBondEncoder(nn.Module):
    """Sum of one embedding per categorical column (``from_smiles``'s atom or bond features)."""

    def __init__(self, vocab_sizes: List[int], dim: int):
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(n, dim) for n in vocab_sizes)

    def forward(self, codes: Tensor) -> Tensor:
        out = self.embeddings[0](codes[:, 0])
        for i in range(1, len(self.embeddings)):
            out = out + self.embeddings[i](codes[:, i])
        return out


class _GINE(nn.Module):
    """A stack of stock ``GINEConv`` layers with BatchNorm and ReLU."""

    def __init__(self, hidden: int, layers: int):
        super().__init__()
        from torch_geometric.nn import GINEConv
        from torch_geometric.nn.models import MLP

        self.convs = nn.ModuleList(
            GINEConv(MLP([hidden, hidden, hidden], norm=None), edge_dim=hidden)
            for _ in range(layers))
        self.norms = nn.ModuleList(nn.BatchNorm1d(hidden) for _ in range(layers))

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor) -> Tensor:
        for conv, norm in zip(self.convs, self.norms):
            x = torch.relu(norm(conv(x, edge_index, edge_attr)))
        return x


class MolRegressor(nn.Module):
    """Atom/bond embeddings -> a stock PyG GNN -> pooling -> MLP head, in target units.

    ``forward(x, edge_index, edge_attr, batch)`` is the usual PyG signature:
    ``ipu_wrap`` binds the flat dict's keys to it by name. The head's output
    is scaled by the training targets' standard deviation and shifted by
    their mean (fixed buffers), so the model predicts TPSA directly.
    """

    def __init__(self, name: str = "gine", hidden: int = 128, layers: int = 4,
                 y_mean: float = 0.0, y_std: float = 1.0):
        super().__init__()
        from torch_geometric.nn import models as pygm
        from torch_geometric.utils.smiles import e_map, x_map

        if name not in MODELS:
            raise ValueError(f"model={name!r}; choose one of {sorted(MODELS)}")
        self.name = name
        self.atom = AtomBondEncoder([len(v) for v in x_map.values()], hidden)
        self.bond = AtomBondEncoder([len(v) for v in e_map.values()], hidden)
        self.pool = None
        if name == "gine":
            self.gnn = _GINE(hidden, layers)
            self.pool = "add"
        elif name == "gin":
            self.gnn = pygm.GIN(hidden, hidden, layers, norm="batch_norm")
            self.pool = "add"
        elif name == "gat":
            self.gnn = pygm.GAT(hidden, hidden, layers, v2=True, heads=4, edge_dim=hidden)
            self.pool = "mean"
        else:  # attentivefp
            self.gnn = pygm.AttentiveFP(hidden, hidden, hidden, edge_dim=hidden,
                                        num_layers=layers, num_timesteps=2)
        self.head = pygm.MLP([hidden, hidden, 1], norm=None)
        self.register_buffer("y_mean", torch.tensor(float(y_mean)))
        self.register_buffer("y_std", torch.tensor(float(y_std)))

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, batch: Tensor) -> Tensor:
        from torch_geometric.nn import global_add_pool, global_mean_pool

        h = self.atom(x)
        e = self.bond(edge_attr)
        if self.name == "gine":
            h = self.gnn(h, edge_index, e)
        elif self.name == "gin":
            h = self.gnn(h, edge_index)
        elif self.name == "gat":
            h = self.gnn(h, edge_index, edge_attr=e)
        else:
            h = self.gnn(h, edge_index, e, batch)  # AttentiveFP pools itself
        if self.pool == "add":
            h = global_add_pool(h, batch)
        elif self.pool == "mean":
            h = global_mean_pool(h, batch)
        return self.head(h) * self.y_std + self.y_mean


def build_model(name: str = "gine", hidden: int = 128, layers: int = 4, y_mean: float = 0.0,
                y_std: float = 1.0) -> MolRegressor:
    """The demo's model (see :data:`MODELS`)."""
    return MolRegressor(name, hidden=hidden, layers=layers, y_mean=y_mean, y_std=y_std)


@dataclasses.dataclass
class DemoConfig:
    """Settings of :func:`run_demo` (the CLI flags of ``graph-adapter demo``)."""

    epochs: int = 10
    batch_graphs: int = 64
    seed: int = 0
    model: str = "gine"
    backend: str = "auto"
    hidden: int = 64
    layers: int = 4
    lr: float = 2e-3
    test_fraction: float = 0.1
    limit: Optional[int] = None  # use only the first `limit` molecules
    path: Optional[str] = None  # a SMILES,TPSA csv instead of rdkit's
    eager_baseline: bool = True
    progress: bool = True
    plot: Optional[str] = None  # write loss curves + padding histogram to this PNG
    threads: Optional[int] = None


@dataclasses.dataclass
class RunStats:
    """Training and evaluation figures of one run (adapter or eager PyG)."""

    name: str
    epochs: int = 0
    steps: int = 0
    train_graphs: int = 0  # graphs seen in training, all epochs
    train_seconds: float = 0.0  # all training epochs, wall clock
    first_step_seconds: float = 0.0  # includes the compile for compiled backends
    eval_seconds: float = 0.0
    eval_first_step_seconds: float = 0.0
    eval_graphs: int = 0
    eval_batches: int = 0
    batches_per_epoch: int = 0
    mean_graphs_per_batch: float = 0.0
    distinct_shapes: int = 0  # distinct (nodes, edges, graphs) batch shapes, epoch 1
    compiles: Optional[int] = None
    epoch_loss: List[float] = dataclasses.field(default_factory=list)
    test_mae: float = float("nan")
    # adapter run: its trained weights evaluated by plain eager PyG (unpadded batches)
    test_mae_eager_eval: float = float("nan")

    @property
    def train_graphs_per_second(self) -> float:
        """Steady-state training throughput: every step but the first (the compile)."""
        first_graphs = self.train_graphs / max(1, self.steps)
        t = self.train_seconds - self.first_step_seconds
        g = self.train_graphs - first_graphs
        if self.steps <= 1 or t <= 0:
            return self.train_graphs / self.train_seconds if self.train_seconds > 0 else float("nan")
        return g / t

    @property
    def eval_graphs_per_second(self) -> float:
        t = self.eval_seconds - self.eval_first_step_seconds
        if self.eval_batches <= 1 or t <= 0:
            return self.eval_graphs / self.eval_seconds if self.eval_seconds > 0 else float("nan")
        return self.eval_graphs * (1 - 1 / self.eval_batches) / t


@dataclasses.dataclass
class DemoResult:
    """Everything :func:`run_demo` measured; :meth:`report` prints it."""

    config: DemoConfig
    num_graphs: int
    num_bad_smiles: int
    num_train: int
    num_test: int
    backend: str
    backend_note: str
    budget: Dict[str, Any]
    node_efficiency: float
    edge_efficiency: float
    graph_efficiency: float
    pad_to_max_node_efficiency: float
    batch_node_fill: List[float]
    adapter: RunStats
    eager: Optional[RunStats]
    total_seconds: float = 0.0
    load_seconds: float = 0.0

    def as_dict(self) -> Dict[str, Any]:
        d = dataclasses.asdict(self)
        d["adapter"]["train_graphs_per_second"] = self.adapter.train_graphs_per_second
        d["adapter"]["eval_graphs_per_second"] = self.adapter.eval_graphs_per_second
        if self.eager is not None:
            d["eager"]["train_graphs_per_second"] = self.eager.train_graphs_per_second
            d["eager"]["eval_graphs_per_second"] = self.eager.eval_graphs_per_second
        return d

    def report(self) -> str:
        c = self.config
        a, e = self.adapter, self.eager
        b = self.budget
        lines = [
            "",
            f"graph_adapter demo: {c.model} ({MODELS[c.model]}), {c.layers} layers x {c.hidden}",
            f"data:    {self.num_graphs} molecules from rdkit's NCI first_5k (target TPSA, A^2); "
            f"{self.num_bad_smiles} unparsable SMILES skipped",
            f"split:   {self.num_train} train / {self.num_test} test (seed {c.seed})",
            f"budget:  Budget.fit(graphs_per_batch={c.batch_graphs}) -> nodes={b['nodes']}, "
            f"edges={b['edges']}, graphs={b['graphs']} (every batch has these shapes)",
            f"backend: {self.backend}{' (' + self.backend_note + ')' if self.backend_note else ''}; "
            f"torch {torch.__version__}, {torch.get_num_threads()} threads",
            "",
        ]
        rows = [("", f"graph_adapter [{self.backend}]", "eager PyG (DataLoader)" if e else "")]

        def both(label, fa, fe):
            rows.append((label, fa(a), fe(e) if e is not None else ""))

        pct = "{:.1%}".format
        rows.append(("padding efficiency nodes / edges / graphs",
                     f"{pct(self.node_efficiency)} / {pct(self.edge_efficiency)} / "
                     f"{pct(self.graph_efficiency)}", "no padding"))
        rows.append(("  pad-to-max nodes (largest graph x graph count)",
                     pct(self.pad_to_max_node_efficiency), ""))
        both("batches per epoch / mean graphs per batch",
             lambda r: f"{r.batches_per_epoch} / {r.mean_graphs_per_batch:.1f}",
             lambda r: f"{r.batches_per_epoch} / {r.mean_graphs_per_batch:.1f}")
        both("distinct batch shapes (epoch 1)", lambda r: str(r.distinct_shapes),
             lambda r: f"{r.distinct_shapes} (each a recompile for torch.compile(dynamic=False))")
        both("compiles (train + eval)", lambda r: str(r.compiles), lambda r: "0 (not compiled)")
        both("first training step, s", lambda r: f"{r.first_step_seconds:.2f}",
             lambda r: f"{r.first_step_seconds:.2f}")
        both("training throughput, graphs/s (steady)",
             lambda r: f"{r.train_graphs_per_second:,.0f}",
             lambda r: f"{r.train_graphs_per_second:,.0f}")
        both("training wall time, s (all epochs)", lambda r: f"{r.train_seconds:.1f}",
             lambda r: f"{r.train_seconds:.1f}")
        both("inference throughput, graphs/s (steady)",
             lambda r: f"{r.eval_graphs_per_second:,.0f}",
             lambda r: f"{r.eval_graphs_per_second:,.0f}")
        both(f"final train loss (L1, epoch {c.epochs})",
             lambda r: f"{r.epoch_loss[-1]:.2f}" if r.epoch_loss else "-",
             lambda r: f"{r.epoch_loss[-1]:.2f}" if r.epoch_loss else "-")
        both("test MAE (TPSA, A^2)", lambda r: f"{r.test_mae:.2f}", lambda r: f"{r.test_mae:.2f}")
        rows.append(("  same weights, evaluated by eager PyG", f"{a.test_mae_eager_eval:.2f}", ""))
        w0 = max(len(r[0]) for r in rows)
        w1 = max(len(r[1]) for r in rows)
        for r in rows:
            lines.append(f"{r[0]:<{w0}}  {r[1]:<{w1}}  {r[2]}".rstrip())
        lines.append("")
        if e is not None and a.train_graphs_per_second > 0 and e.train_graphs_per_second > 0:
            ratio = a.train_graphs_per_second / e.train_graphs_per_second
            lines.append(f"training throughput, adapter / eager: {ratio:.2f}x "
                         f"(same model, loss, optimizer and data, measured in this run)")
        lines.append(f"test MAE baseline (predict the training mean): {self._mean_mae:.2f}")
        lines.append(f"total {self.total_seconds:.0f} s (loading molecules {self.load_seconds:.0f} s)")
        if c.plot:
            lines.append(f"plot written to {c.plot}")
        return "\n".join(lines)

    _mean_mae: float = float("nan")


# --------------------------------------------------------------------------
def _progress(total: int, desc: str, enabled: bool):
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


def _check_plot_extra() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        from .datasets import MissingExtraError

        raise MissingExtraError(
            "--plot needs matplotlib; install the 'plot' extra: pip install -e \".[plot]\" "
            "(or pip install matplotlib)") from e


def _split(n: int, test_fraction: float, seed: int):
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=g).tolist()
    n_test = max(1, int(round(n * test_fraction))) if n > 1 else 0
    return sorted(perm[n_test:]), sorted(perm[:n_test])


def _resolve_backend(name: str):
    """``(backend, note)``: what ``"auto"`` becomes, and why."""
    if name != "auto":
        return name, ""
    try:
        import poptorch  # noqa: F401
    except ImportError:
        return "inductor", "auto: poptorch not installed"
    return "poptorch", "auto: poptorch found"


def _train_adapter(model: nn.Module, train, test, budget, cfg: DemoConfig, backend: str,
                   result_fill: List[float]):
    from .backends import compile as ga_compile
    from .loader import FixedSizeLoader
    from .losses import masked_loss
    from .wrap import ipu_wrap

    stats = RunStats(name="graph_adapter")
    loader = FixedSizeLoader(train, budget, shuffle=True, seed=cfg.seed)
    test_loader = FixedSizeLoader(test, budget, shuffle=False)
    wrapped = ipu_wrap(model, loss_fn=masked_loss("l1"))
    opt = torch.optim.Adam(wrapped.parameters(), lr=cfg.lr)
    sched = _scheduler(opt, cfg.epochs)
    ipu = backend in ("poptorch", "ipu-emulator")
    if ipu:
        train_model = ga_compile(wrapped, backend, optimizer=opt)
        eval_model = ga_compile(wrapped, backend, training=False)
    else:
        train_model = eval_model = ga_compile(wrapped, backend)

    stats.batches_per_epoch = len(loader)
    loader.set_epoch(0)
    loader_stats = loader.stats
    stats.mean_graphs_per_batch = loader_stats.mean_graphs_per_batch
    bar = _progress(cfg.epochs * len(loader), f"graph_adapter [{backend}]", cfg.progress)
    shapes = set()
    t_start = time.perf_counter()
    for epoch in range(cfg.epochs):
        loader.set_epoch(epoch)
        wrapped.train()
        loss_sum, graphs_sum = 0.0, 0
        for flat in loader:
            t0 = time.perf_counter()
            ng = int(flat["graph_mask"].sum())
            if epoch == 0:
                shapes.add(tuple(tuple(v.shape) for v in flat.values()))
                result_fill.append(float(flat["node_mask"].float().mean()))
            if ipu:
                out = train_model(flat)
                loss = out["loss"].float().mean()
            else:
                out = train_model(flat)
                loss = out["loss"]
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            lv = float(loss.detach())
            loss_sum += lv * ng
            graphs_sum += ng
            if stats.steps == 0:
                stats.first_step_seconds = time.perf_counter() - t0
            stats.steps += 1
            stats.train_graphs += ng
            if bar is not None:
                bar.set_postfix(epoch=epoch + 1, loss=f"{lv:.2f}", refresh=False)
                bar.update(1)
        stats.epoch_loss.append(loss_sum / max(1, graphs_sum))
        sched.step()
        if ipu and hasattr(train_model, "setOptimizer"):  # poptorch: push the new lr
            train_model.setOptimizer(opt)
        if bar is None:
            _log(f"graph_adapter [{backend}] epoch {epoch + 1}/{cfg.epochs}: "
                 f"train L1 {stats.epoch_loss[-1]:.2f}", cfg.progress)
    stats.train_seconds = time.perf_counter() - t_start
    stats.epochs = cfg.epochs
    if bar is not None:
        bar.close()
    stats.distinct_shapes = len(shapes)

    # evaluation
    wrapped.eval()
    if not ipu:
        eval_model.eval()
    abs_err, n = 0.0, 0
    t_start = time.perf_counter()
    with torch.no_grad():
        for i, flat in enumerate(test_loader):
            t0 = time.perf_counter()
            out = eval_model(flat)
            pred = out["output"].reshape(-1).float()
            y = flat["y"].reshape(-1).float()
            mask = flat["graph_mask"].reshape(-1).bool()
            abs_err += float(torch.where(mask, (pred - y).abs(), torch.zeros_like(pred)).sum())
            n += int(mask.sum())
            if i == 0:
                stats.eval_first_step_seconds = time.perf_counter() - t0
            stats.eval_batches += 1
    stats.eval_seconds = time.perf_counter() - t_start
    stats.eval_graphs = n
    stats.test_mae = abs_err / max(1, n)
    if ipu:
        stats.compiles = sum(int(getattr(m, "compile_count", 1)) for m in (train_model, eval_model))
    else:
        stats.compiles = int(train_model.compile_count)
    stats.test_mae_eager_eval = _eval_eager(model, test, cfg.batch_graphs)
    return stats, loader_stats


def _scheduler(opt, epochs: int):
    """Cosine decay of the learning rate over the epochs (same for both runs): the
    BatchNorm running statistics settle as the weights do, so eval-mode MAE is stable."""
    return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, epochs),
                                                      eta_min=0.05 * opt.param_groups[0]["lr"])


def _eval_eager(model: nn.Module, test, batch_size: int) -> float:
    """Test MAE of ``model`` in plain eager PyG (``DataLoader``, unpadded batches)."""
    from torch_geometric.loader import DataLoader

    model.eval()
    abs_err, n = 0.0, 0
    with torch.no_grad():
        for b in DataLoader(test, batch_size=batch_size, shuffle=False):
            pred = model(b.x, b.edge_index, b.edge_attr, b.batch)
            abs_err += float((pred.view(-1) - b.y.view(-1)).abs().sum())
            n += b.num_graphs
    return abs_err / max(1, n)


def _train_eager(model: nn.Module, train, test, cfg: DemoConfig) -> RunStats:
    import torch.nn.functional as F
    from torch_geometric.loader import DataLoader

    stats = RunStats(name="eager PyG")
    loader = DataLoader(train, batch_size=cfg.batch_graphs, shuffle=True,
                        generator=torch.Generator().manual_seed(cfg.seed))
    test_loader = DataLoader(test, batch_size=cfg.batch_graphs, shuffle=False)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    sched = _scheduler(opt, cfg.epochs)
    stats.batches_per_epoch = len(loader)
    stats.mean_graphs_per_batch = len(train) / max(1, len(loader))
    bar = _progress(cfg.epochs * len(loader), "eager PyG", cfg.progress)
    shapes = set()
    t_start = time.perf_counter()
    for epoch in range(cfg.epochs):
        model.train()
        loss_sum, graphs_sum = 0.0, 0
        for b in loader:
            t0 = time.perf_counter()
            if epoch == 0:
                shapes.add((b.num_nodes, b.num_edges, b.num_graphs))
            pred = model(b.x, b.edge_index, b.edge_attr, b.batch)
            loss = F.l1_loss(pred.view(-1), b.y.view(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            lv = float(loss.detach())
            loss_sum += lv * b.num_graphs
            graphs_sum += b.num_graphs
            if stats.steps == 0:
                stats.first_step_seconds = time.perf_counter() - t0
            stats.steps += 1
            stats.train_graphs += b.num_graphs
            if bar is not None:
                bar.set_postfix(epoch=epoch + 1, loss=f"{lv:.2f}", refresh=False)
                bar.update(1)
        stats.epoch_loss.append(loss_sum / max(1, graphs_sum))
        sched.step()
        if bar is None:
            _log(f"eager PyG epoch {epoch + 1}/{cfg.epochs}: train L1 {stats.epoch_loss[-1]:.2f}",
                 cfg.progress)
    stats.train_seconds = time.perf_counter() - t_start
    stats.epochs = cfg.epochs
    if bar is not None:
        bar.close()
    stats.distinct_shapes = len(shapes)
    model.eval()
    abs_err, n = 0.0, 0
    t_start = time.perf_counter()
    with torch.no_grad():
        for i, b in enumerate(test_loader):
            t0 = time.perf_counter()
            pred = model(b.x, b.edge_index, b.edge_attr, b.batch)
            abs_err += float((pred.view(-1) - b.y.view(-1)).abs().sum())
            n += b.num_graphs
            if i == 0:
                stats.eval_first_step_seconds = time.perf_counter() - t0
            stats.eval_batches += 1
    stats.eval_seconds = time.perf_counter() - t_start
    stats.eval_graphs = n
    stats.test_mae = abs_err / max(1, n)
    return stats


def write_plot(result: DemoResult, path: str) -> None:
    """Loss curves (both runs) and the histogram of per-batch node fill."""
    _check_plot_extra()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ep = list(range(1, len(result.adapter.epoch_loss) + 1))
    ax1.plot(ep, result.adapter.epoch_loss, marker="o", label=f"graph_adapter [{result.backend}]")
    if result.eager is not None:
        ax1.plot(ep, result.eager.epoch_loss, marker="s", label="eager PyG")
        ax1.axhline(result.eager.test_mae, color="C1", ls=":", label="eager PyG test MAE")
    ax1.axhline(result.adapter.test_mae, color="C0", ls=":", label="graph_adapter test MAE")
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("train L1 loss (TPSA, A^2)")
    ax1.set_title("loss curves")
    ax1.legend()
    ax2.hist([100 * f for f in result.batch_node_fill], bins=20, color="C2")
    ax2.axvline(100 * result.node_efficiency, color="k", ls="--",
                label=f"epoch mean {result.node_efficiency:.1%}")
    ax2.set_xlabel("real nodes / node budget, % (per batch)")
    ax2.set_ylabel("batches")
    ax2.set_title(f"padding: nodes={result.budget['nodes']}, edges={result.budget['edges']}, "
                  f"graphs={result.budget['graphs']}")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_demo(cfg: Optional[DemoConfig] = None, **overrides: Any) -> DemoResult:
    """Run the demo (see the module doc) and return what it measured.

    ``run_demo(epochs=1, limit=200, backend="eager")`` is a quick smoke run.
    Raises :class:`~graph_adapter.datasets.MissingExtraError` when rdkit (or,
    with ``plot``, matplotlib) is missing, ``FileNotFoundError`` when the
    molecule file is.
    """
    import numpy as np

    from .budget import Budget
    from .datasets import load_nci5k

    cfg = dataclasses.replace(cfg or DemoConfig(), **overrides)
    if cfg.model not in MODELS:
        raise ValueError(f"model={cfg.model!r}; choose one of {sorted(MODELS)}")
    if cfg.epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {cfg.epochs}")
    if cfg.batch_graphs < 1:
        raise ValueError(f"batch_graphs must be >= 1, got {cfg.batch_graphs}")
    from .backends import BACKENDS

    if cfg.backend not in BACKENDS:
        raise ValueError(f"backend={cfg.backend!r}; choose one of {BACKENDS}")
    if cfg.plot:
        _check_plot_extra()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t_all = time.perf_counter()
    _log("loading rdkit's NCI first_5k molecules (from_smiles) ...", cfg.progress)
    t0 = time.perf_counter()
    graphs, n_bad = load_nci5k(limit=cfg.limit, path=cfg.path)
    load_seconds = time.perf_counter() - t0
    if len(graphs) < 2:
        raise ValueError(f"need at least 2 molecules, got {len(graphs)}")
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
    budget = Budget.fit(graphs, min(cfg.batch_graphs, len(graphs)), seed=cfg.seed)
    # pad-to-max with a fixed graph count (graphium / poptorch_geometric default sizing:
    # largest graph x k real graphs + 1 padding node)
    n_nodes = np.array([d.num_nodes for d in graphs], dtype=np.float64)
    k = min(cfg.batch_graphs, len(graphs))
    pad_to_max = float(n_nodes.mean() * k / (n_nodes.max() * k + 1))

    backend, note = _resolve_backend(cfg.backend)
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
    result._mean_mae = float((y_test - y_mean).abs().mean())
    result.total_seconds = time.perf_counter() - t_all
    if cfg.plot:
        write_plot(result, cfg.plot)
    return result


def main(argv: Optional[List[str]] = None) -> int:
    """``graph-adapter demo`` (see :mod:`graph_adapter.cli`)."""
    from .cli import main as cli_main

    return cli_main(["demo", *(sys.argv[1:] if argv is None else argv)])
