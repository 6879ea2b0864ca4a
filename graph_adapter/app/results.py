"""What a demo run is configured with (:class:`DemoConfig`) and what it measured.

:class:`RunStats` holds one training run's figures (the adapter's or eager
PyG's), :class:`DemoResult` the whole run's; :meth:`DemoResult.report` formats
it as the text ``graph-adapter demo`` prints, :func:`write_plot` draws it.
"""
from __future__ import annotations

import dataclasses
import textwrap
from typing import Any, Dict, List, Optional

import torch

from .datasets import MissingExtraError
from .models import MODELS
from .repeat import PROBE_STEPS

__all__ = ["DemoConfig", "RunStats", "DemoResult", "write_plot", "check_plot_extra",
           "UNCOMPILED_BACKENDS"]

#: The report's line width (fits a terminal and the docs' code blocks).
REPORT_WIDTH = 88

#: Backends that run the module as it is: their ``compile_count`` counts the
#: (signature, mode) pairs seen, not compiles, so the report says "no compiler".
UNCOMPILED_BACKENDS = ("eager",)


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
    # torch.use_deterministic_algorithms(True) for the run: compiled kernels fall back to
    # ATen's deterministic ones instead of multi-threaded atomic adds
    deterministic: bool = False


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
    batches_per_epoch: int = 0  # counted over the epochs trained (mean, rounded)
    mean_graphs_per_batch: float = 0.0  # real graphs per training step, counted
    distinct_shapes: int = 0  # distinct (nodes, edges, graphs) batch shapes, epoch 1
    compiles: Optional[int] = None  # the compiled model's compile_count after evaluation
    compiles_training: Optional[int] = None  # ... after training (None: not compiled)
    epoch_loss: List[float] = dataclasses.field(default_factory=list)
    # the same few steps run twice from one state, after training: how far apart their
    # losses came (0.0: bit for bit; None: not checked); see graph_adapter.app.repeat
    repeat_gap: Optional[float] = None
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
    #: why the adapter's run will not repeat bit for bit (known, not probed), or None
    nondeterminism: Optional[str] = None

    def as_dict(self) -> Dict[str, Any]:
        d = dataclasses.asdict(self)
        d["adapter"]["train_graphs_per_second"] = self.adapter.train_graphs_per_second
        d["adapter"]["eval_graphs_per_second"] = self.adapter.eval_graphs_per_second
        if self.eager is not None:
            d["eager"]["train_graphs_per_second"] = self.eager.train_graphs_per_second
            d["eager"]["eval_graphs_per_second"] = self.eager.eval_graphs_per_second
        return d

    def report(self, width: int = REPORT_WIDTH) -> str:
        """The text ``graph-adapter demo`` prints; no line is longer than ``width``."""
        lines = [""] + _wrap(self._header(), width) + [""]
        lines += self._table()
        lines.append("")
        lines += _wrap(self._footer(), width)
        return "\n".join(lines)

    def _header(self) -> List[str]:
        c, b = self.config, self.budget
        return [
            f"graph_adapter demo: {c.model} ({MODELS[c.model]}), {c.layers} layers x {c.hidden}",
            f"data: {self.num_graphs} molecules from {self._source()} (target TPSA, A^2); "
            f"{self.num_bad_smiles} rows skipped (SMILES rdkit cannot parse, or no numeric target)",
            f"split: {self.num_train} train / {self.num_test} test (seed {c.seed})",
            f"budget: Budget.fit(graphs_per_batch={c.batch_graphs}) -> nodes={b['nodes']}, "
            f"edges={b['edges']}, graphs={b['graphs']} (every batch has these shapes)",
            f"backend: {self.backend}{' (' + self.backend_note + ')' if self.backend_note else ''}; "
            f"torch {torch.__version__}, {torch.get_num_threads()} threads",
        ]

    def _table(self) -> List[str]:
        a, e = self.adapter, self.eager
        rows = [("", f"graph_adapter [{self.backend}]", "eager PyG" if e else "")]

        def both(label, fa, fe=None):
            fe = fe or fa
            rows.append((label, fa(a), fe(e) if e is not None else ""))

        pct = "{:.1%}".format
        rows.append(("padding efficiency nodes/edges/graphs",
                     f"{pct(self.node_efficiency)}/{pct(self.edge_efficiency)}/"
                     f"{pct(self.graph_efficiency)}", "no padding"))
        rows.append(("  pad-to-max nodes (largest x count)", pct(self.pad_to_max_node_efficiency), ""))
        both("batches per epoch / graphs per batch",
             lambda r: f"{r.batches_per_epoch} / {r.mean_graphs_per_batch:.1f}")
        both("distinct batch shapes (epoch 1) [1]", lambda r: str(r.distinct_shapes))
        both("compiles (training / evaluation)", self._compiles, lambda r: "none (not compiled)")
        both("first training step, s", lambda r: f"{r.first_step_seconds:.2f}")
        both("training, graphs/s (steady)", lambda r: f"{r.train_graphs_per_second:,.0f}")
        both("training wall time, s (all epochs)", lambda r: f"{r.train_seconds:.1f}")
        both("inference, graphs/s (steady)", lambda r: f"{r.eval_graphs_per_second:,.0f}")
        both(f"final train L1 loss (epoch {self.config.epochs})",
             lambda r: f"{r.epoch_loss[-1]:.2f}" if r.epoch_loss else "-")
        both("test MAE (TPSA, A^2)", lambda r: f"{r.test_mae:.2f}")
        rows.append(("  same weights, eager PyG evaluation", f"{a.test_mae_eager_eval:.2f}", ""))
        both("deterministic [2]", self._deterministic)
        w0 = max(len(r[0]) for r in rows)
        w1 = max(len(r[1]) for r in rows)
        return [f"{r[0]:<{w0}}  {r[1]:<{w1}}  {r[2]}".rstrip() for r in rows]

    def _footer(self) -> List[str]:
        a, e, c = self.adapter, self.eager, self.config
        lines = ["[1] each distinct shape is a recompile for torch.compile(dynamic=False)",
                 f"[2] the first {PROBE_STEPS} training steps run twice from one state after "
                 f"training (then put back) gave the same losses bit for bit"]
        for r in (a, e):
            causes = [f"the same steps from the same state gave losses {r.repeat_gap:.1e} apart"
                      ] if r is not None and r.repeat_gap else []
            if r is a and self.nondeterminism:
                causes.append(self.nondeterminism)
            if causes:
                lines.append(f"{r.name} is not deterministic here ({'; '.join(causes)}): its test "
                             f"MAE varies from run to run; --deterministic makes it repeat")
        if e is not None and a.train_graphs_per_second > 0 and e.train_graphs_per_second > 0:
            ratio = a.train_graphs_per_second / e.train_graphs_per_second
            lines.append(f"training throughput, adapter / eager: {ratio:.2f}x (same model, loss, "
                         f"optimizer and data, measured in this run)")
        lines.append(f"test MAE baseline (predict the training mean): {self._mean_mae:.2f}")
        lines.append(f"total {self.total_seconds:.0f} s (loading molecules {self.load_seconds:.0f} s)")
        if c.plot:
            lines.append(f"plot written to {c.plot}")
        return lines

    _mean_mae: float = float("nan")

    def _deterministic(self, r: RunStats) -> str:
        """Known causes first (a short probe can miss them), then the probe's measurement."""
        if r is self.adapter and self.nondeterminism:
            return "no (see below)"
        if r.repeat_gap is None:
            return "not checked"
        return f"no ({r.repeat_gap:.1e} apart)" if r.repeat_gap else "yes"

    def _source(self) -> str:
        return self.config.path if self.config.path else "rdkit's NCI first_5k"

    def _compiles(self, r: RunStats) -> str:
        """The compiled model's own count (``compile_count``), split at the end of training."""
        if self.backend in UNCOMPILED_BACKENDS:
            return f"none ({self.backend}: no compiler)"
        if r.compiles is None or r.compiles_training is None:
            return "-"
        return f"{r.compiles_training} / {r.compiles - r.compiles_training}"


def _wrap(lines: List[str], width: int) -> List[str]:
    """Each line wrapped at ``width``; continuation lines indented by two spaces."""
    out: List[str] = []
    for line in lines:
        out += textwrap.wrap(line, width, subsequent_indent="  ", break_on_hyphens=False) or [""]
    return out


def write_plot(result: DemoResult, path: str) -> None:
    """Loss curves (both runs) and the histogram of per-batch node fill."""
    check_plot_extra()
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


def check_plot_extra() -> None:
    """Raise :class:`MissingExtraError` (naming the 'plot' extra) if matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        raise MissingExtraError(
            "--plot needs matplotlib; install the 'plot' extra: pip install -e \".[plot]\" "
            "(or pip install matplotlib)") from e
