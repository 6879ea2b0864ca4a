"""What a demo run measured (:class:`DemoResult`), and the names its tests and callers read.

Its settings are a :class:`~graph_adapter.app.demo.config.DemoConfig` (re-exported here).

:class:`RunStats` holds one training run's figures (the adapter's or eager
PyG's), :class:`DemoResult` the whole run's; :meth:`DemoResult.report` formats
it as the text ``graph-adapter demo`` prints, :func:`write_plot` draws it.

:class:`RunStats` and the rule its figures are taken by live in
:mod:`graph_adapter.app.demo.run_stats`, the report's parts in :mod:`graph_adapter.app.demo.report`
and the plot in :mod:`graph_adapter.app.demo.plot`; every name is importable from here.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

from .config import DemoConfig
from .plot import check_plot_extra, write_plot
from .report import DemoReport, wrap
from .run_stats import (TRAIN_ROUND_GRAPHS, UNCOMPILED_BACKENDS, WARMUP_FACTOR, RunStats,
                        median_range, round_ratios, steady_rate, warmup_rounds, warmup_steps)

__all__ = ["seed_spread", "DemoConfig", "RunStats", "DemoResult", "write_plot", "check_plot_extra",
           "UNCOMPILED_BACKENDS", "WARMUP_FACTOR", "warmup_steps", "steady_rate",
           "warmup_rounds", "round_ratios", "median_range", "TRAIN_ROUND_GRAPHS"]

#: The report's line width (fits a terminal and the docs' code blocks).
REPORT_WIDTH = 88


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
    #: the adapter's layout tables (``config.layout``'s), fitted on every molecule:
    #: FixedSizeLoader's ``layout_widths`` and (HYB) ``layout_spills``; None without tables
    layout_widths: Optional[Tuple[int, int]] = None
    layout_spills: Optional[Tuple[int, int]] = None
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
        d["_mean_mae"] = self.mean_mae  # the JSON key of earlier reports
        return d

    def report(self, width: int = REPORT_WIDTH, explain: Optional[bool] = None) -> str:
        """The text ``graph-adapter demo`` prints; no line is longer than ``width``.

        The table first, then what it comes to (end to end, steady ratios), then where
        the time went; ``explain`` (default: the run's ``--explain``) adds the method
        notes of the table's [1]-[4]."""
        explain = self.config.explain if explain is None else explain
        lines = [""] + wrap(self._header(), width) + [""]
        lines += self._table()
        lines.append("")
        lines += wrap(self._footer(explain), width)
        return "\n".join(lines)

    #: test MAE of predicting the training mean (the baseline the report names)
    mean_mae: float = float("nan")


def seed_spread(results: List["DemoResult"]) -> List[str]:
    """The test MAE of each run over the seeds of ``results`` (one demo a seed): its
    mean and range, so that one seed's difference is read against the spread."""
    seeds = [r.config.seed for r in results]
    lines = [f"test MAE (TPSA, A^2) over {len(results)} seeds ({', '.join(map(str, seeds))}):"]
    for key in ("adapter", "eager", "pyg_compiled"):
        runs = [getattr(r, key) for r in results]
        if any(run is None for run in runs):
            continue
        maes = [run.test_mae for run in runs]
        lines.append(f"  {runs[0].name}: mean {sum(maes) / len(maes):.2f}, range "
                     f"{min(maes):.2f}-{max(maes):.2f} (" + ", ".join(f"{m:.2f}" for m in maes)
                     + ")")
    return lines
