"""What a demo run is configured with (:class:`DemoConfig`) and what it measured.

:class:`RunStats` holds one training run's figures (the adapter's or eager
PyG's), :class:`DemoResult` the whole run's; :meth:`DemoResult.report` formats
it as the text ``graph-adapter demo`` prints, :func:`write_plot` draws it.

:class:`RunStats` and the rule its figures are taken by live in
:mod:`graph_adapter.app.run_stats`, the report's parts in :mod:`graph_adapter.app.report`
and the plot in :mod:`graph_adapter.app.plot`; every name is importable from here.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional

from .plot import check_plot_extra, write_plot
from .report import DemoReport, wrap
from .run_stats import (TRAIN_ROUND_GRAPHS, UNCOMPILED_BACKENDS, WARMUP_FACTOR, RunStats,
                        median_range, round_ratios, steady_rate, warmup_rounds, warmup_steps)

__all__ = ["DemoConfig", "RunStats", "DemoResult", "write_plot", "check_plot_extra",
           "UNCOMPILED_BACKENDS", "WARMUP_FACTOR", "warmup_steps", "steady_rate",
           "warmup_rounds", "round_ratios", "median_range", "TRAIN_ROUND_GRAPHS"]

#: The report's line width (fits a terminal and the docs' code blocks).
REPORT_WIDTH = 88


@dataclasses.dataclass
class DemoConfig:
    """Settings of :func:`run_demo` (the CLI flags of ``graph-adapter demo``)."""

    epochs: int = 10
    batch_graphs: int = 64
    seed: int = 0
    model: str = "gine"
    backend: str = "auto"
    # FixedSizeLoader's aggregation layout (None, "ell", "hyb"): HYB's narrow neighbour
    # tables were the steadiest compiled training and the fastest inference measured
    # (docs/benchmarks.md); fitted on every molecule, shared by train and test loaders
    layout: Optional[str] = "hyb"
    hidden: int = 64
    layers: int = 4
    lr: float = 2e-3
    test_fraction: float = 0.1
    limit: Optional[int] = None  # use only the first `limit` molecules
    path: Optional[str] = None  # a SMILES,TPSA csv instead of rdkit's
    eager_baseline: bool = True
    # a third run: eager PyG's model under torch.compile(dynamic=True) (PyG's documented
    # compile route) on the same DataLoader batches
    pyg_compile: bool = True
    # the Dynamo backend of that run ("inductor": torch.compile's default, PyG's route;
    # the tests pass "aot_eager", which compiles nothing but counts the same graphs)
    pyg_compile_backend: str = "inductor"
    progress: bool = True
    plot: Optional[str] = None  # write loss curves + padding histogram to this PNG
    threads: Optional[int] = None
    # torch.use_deterministic_algorithms(True) for the run: compiled kernels fall back to
    # ATen's deterministic ones instead of multi-threaded atomic adds
    deterministic: bool = False
    # inference is timed after every run has trained and compiled, in this many
    # interleaved rounds over the test split (each round runs each run once, in turn)
    infer_rounds: int = 30
    # training too, before those: each run's training step over the same number of
    # training graphs (TRAIN_ROUND_GRAPHS) in this many interleaved rounds, its weights and
    # optimizer state put back afterwards (0: the training figures of the runs' own
    # epochs, run after run)
    train_rounds: int = 15
    # compile(..., precompile=True) for the adapter's model (inductor only): a later run
    # with the same settings loads each graph's Dynamo result instead of tracing again
    precompile: bool = False


@dataclasses.dataclass
class DemoResult(DemoReport):
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
    #: eager PyG's model under torch.compile(dynamic=True) on the same DataLoader batches
    pyg_compiled: Optional[RunStats] = None
    total_seconds: float = 0.0
    load_seconds: float = 0.0
    #: the 1-minute load average when the run started and when it ended (os.getloadavg)
    load_average: List[float] = dataclasses.field(default_factory=list)
    cpu_count: int = 0
    threads: int = 0
    #: the backends the adapter's training and inference steps ran on ("eager" and
    #: "inductor" under "inductor_eval"; both the backend itself otherwise)
    training_backend: str = ""
    inference_backend: str = ""
    #: why each run's training will not repeat bit for bit (known, not probed):
    #: run name -> cause; a run that is not named has no known cause
    nondeterminism: Dict[str, str] = dataclasses.field(default_factory=dict)
    #: the adapter's layout: {"name", "widths", "spills"}, or None (PyG's scatter)
    layout: Optional[Dict[str, Any]] = None
    #: interleaved inference rounds run (after every training run; 0: none) and their
    #: wall time
    infer_rounds: int = 0
    infer_rounds_seconds: float = 0.0
    #: graphs compiled during the timed rounds (0 expected: every run compiled its
    #: evaluation step in its MAE pass; otherwise the rounds' times include compiles)
    infer_round_compiles: int = 0
    #: interleaved training rounds run (before the inference rounds; 0: none, the
    #: training figures are the runs' own epochs), their wall time (snapshots and
    #: restores included) and the graphs compiled meanwhile (0 expected: every run
    #: compiled its training step in its epochs)
    train_rounds: int = 0
    train_rounds_seconds: float = 0.0
    train_round_compiles: int = 0

    def runs(self) -> List[RunStats]:
        """The runs of this demo, in the report's column order."""
        return [r for r in (self.adapter, self.eager, self.pyg_compiled) if r is not None]

    def as_dict(self) -> Dict[str, Any]:
        d = dataclasses.asdict(self)
        for key in ("adapter", "eager", "pyg_compiled"):
            run = getattr(self, key)
            if run is not None:
                d[key]["train_graphs_per_second"] = run.train_graphs_per_second
                d[key]["epoch_graphs_per_second"] = run.epoch_graphs_per_second
                d[key]["eval_graphs_per_second"] = run.eval_graphs_per_second
                d[key]["warmup_training_steps"] = run.warmup_training_steps
                d[key]["warmup_inference_steps"] = run.warmup_inference_steps
                # (median, min, max) of the per-round ratios to eager PyG's inference
                d[key]["inference_ratio_to_eager"] = (
                    list(run.inference_ratio(self.eager)) if self.eager is not None
                    and self.eager.eval_graphs_per_second > 0 else None)
                # the same for training (interleaved rounds; without them, the epochs')
                d[key]["training_ratio_to_eager"] = (
                    list(run.training_ratio(self.eager)) if self.eager is not None
                    and self.eager.epoch_graphs_per_second > 0 else None)
        d["_mean_mae"] = self._mean_mae
        return d

    def report(self, width: int = REPORT_WIDTH) -> str:
        """The text ``graph-adapter demo`` prints; no line is longer than ``width``."""
        lines = [""] + wrap(self._header(), width) + [""]
        lines += self._table()
        lines.append("")
        lines += wrap(self._footer(), width)
        return "\n".join(lines)

    _mean_mae: float = float("nan")
