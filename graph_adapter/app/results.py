"""What a demo run is configured with (:class:`DemoConfig`) and what it measured.

:class:`RunStats` holds one training run's figures (the adapter's or eager
PyG's), :class:`DemoResult` the whole run's; :meth:`DemoResult.report` formats
it as the text ``graph-adapter demo`` prints, :func:`write_plot` draws it.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import textwrap
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from .datasets import MissingExtraError
from .models import MODELS
from .repeat import PROBE_STEPS

__all__ = ["DemoConfig", "RunStats", "DemoResult", "write_plot", "check_plot_extra",
           "UNCOMPILED_BACKENDS", "WARMUP_FACTOR", "warmup_steps", "steady_rate",
           "warmup_rounds", "round_ratios", "median_range", "TRAIN_ROUND_GRAPHS"]

#: The report's line width (fits a terminal and the docs' code blocks).
REPORT_WIDTH = 88

#: Backends that run the module as it is: their ``compile_count`` counts the
#: (signature, mode) pairs seen, not compiles, so the report says "no compiler".
UNCOMPILED_BACKENDS = ("eager",)

#: The warm-up rule of the steady-state figures: the leading steps of a mode (training,
#: inference) slower than this multiple of that mode's median step are warm-up (the
#: compile, the first calls after it, lazily built optimizer state) and are left out.
WARMUP_FACTOR = 1.5

#: Training graphs each run steps over in one interleaved training round (the first
#: batches of its epoch 1 holding at least this many; the whole training split when it
#: is smaller): about 0.2-0.4 s a run at the demo's defaults on a quiet 2-core machine,
#: long enough that a moment's burst of other work is a small part of a round.
TRAIN_ROUND_GRAPHS = 2048


def warmup_steps(seconds: Sequence[float], factor: float = WARMUP_FACTOR) -> int:
    """How many leading steps are warm-up: those before the first step that took at most
    ``factor`` x the median of all ``seconds`` (0 for fewer than 2 steps).

    A rule, not a fixed count: a compiled mode's first step (the compile) is always far
    above the median, and so are the slow steps that can follow it; an eager run whose
    first step is already steady loses nothing."""
    if len(seconds) < 2:
        return 0
    limit = factor * statistics.median(seconds)
    return next(i for i, s in enumerate(seconds) if s <= limit)  # (the median step is <= limit)


def steady_rate(seconds: Sequence[float], graphs: Sequence[int]) -> float:
    """Graphs per second over the steps after the warm-up (:func:`warmup_steps`); all
    steps when there are fewer than 2; NaN without any time measured."""
    k = warmup_steps(seconds)
    t = sum(seconds[k:])
    return sum(graphs[k:]) / t if t > 0 else float("nan")


def warmup_rounds(seconds: Mapping[str, Sequence[float]], factor: float = WARMUP_FACTOR) -> int:
    """How many leading interleaved rounds are warm-up: the most :func:`warmup_steps`
    leaves out of any one run's round times (``seconds``: run name -> each round's time).

    One count for every run: a round is kept or left out for all its runs at once, so
    that the per-round ratios (:func:`round_ratios`) pair runs timed side by side."""
    return max((warmup_steps(v, factor) for v in seconds.values()), default=0)


def round_ratios(seconds: Sequence[float], graphs: int, base_seconds: Sequence[float],
                 base_graphs: int, skip: int = 0) -> List[float]:
    """Each interleaved round's rate ratio of a run to a base run: ``(graphs /
    seconds[r]) / (base_graphs / base_seconds[r])`` for the rounds ``r >= skip``
    (``graphs``: real graphs in one pass of each; NaN for a round without time)."""
    return [(graphs * b) / (base_graphs * t) if t > 0 and b > 0 and base_graphs > 0
            else float("nan") for t, b in zip(seconds[skip:], base_seconds[skip:])]


def median_range(values: Sequence[float]) -> Tuple[float, float, float]:
    """``(median, min, max)`` of ``values`` (NaN three times when empty)."""
    if not values:
        return (float("nan"),) * 3
    return statistics.median(values), min(values), max(values)


def _round_rate(seconds: Sequence[float], graphs: int, skip: int) -> float:
    """``graphs`` over the median of the rounds after the first ``skip`` (NaN without
    time)."""
    kept = seconds[skip:]
    t = statistics.median(kept) if kept else 0.0
    return graphs / t if t > 0 else float("nan")


def _rounds_ratio(rounds: Tuple[Sequence[float], int, int],
                  base: Tuple[Sequence[float], int, int],
                  steady_ratio: Callable[[], float]) -> Tuple[float, float, float]:
    """``(median, min, max)`` of the per-round ratios of two runs' interleaved rounds
    (each ``(seconds per round, graphs a round, warm-up rounds)``; the larger warm-up
    is left out of both); without rounds in both, ``steady_ratio()`` three times."""
    (seconds, graphs, warm), (base_seconds, base_graphs, base_warm) = rounds, base
    if seconds and base_seconds:
        return median_range(round_ratios(seconds, graphs, base_seconds, base_graphs,
                                         max(warm, base_warm)))
    ratio = steady_ratio()
    return ratio, ratio, ratio


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


@dataclasses.dataclass
class RunStats:
    """Training and evaluation figures of one run (the adapter's, eager PyG's or PyG
    compiled's). Step times are of the step alone (forward, backward, optimizer step;
    data loading is in ``train_seconds``, not in them)."""

    name: str
    epochs: int = 0
    steps: int = 0
    train_graphs: int = 0  # graphs seen in training, all epochs
    train_seconds: float = 0.0  # all training epochs, wall clock, data loading included
    first_step_seconds: float = 0.0  # includes the compile for compiled backends
    step_seconds: List[float] = dataclasses.field(default_factory=list)  # each training step
    step_graphs: List[int] = dataclasses.field(default_factory=list)  # real graphs in each
    eval_seconds: float = 0.0  # the test split's evaluation (the MAE), wall clock
    eval_first_step_seconds: float = 0.0  # includes the compile for compiled backends
    eval_graphs: int = 0
    eval_batches: int = 0
    # every step of the MAE pass over the test split (the first: the inference compile,
    # for compiled backends)
    infer_step_seconds: List[float] = dataclasses.field(default_factory=list)
    infer_step_graphs: List[int] = dataclasses.field(default_factory=list)
    # the interleaved inference rounds (run_demo: after every run's training and MAE
    # pass, each round runs each run once over its test batches, in turn): this run's
    # time in each round, step time only; the real graphs of one pass; the leading
    # rounds left out as warm-up (one count for every run: warmup_rounds)
    infer_round_seconds: List[float] = dataclasses.field(default_factory=list)
    infer_round_graphs: int = 0
    infer_warmup_rounds: int = 0
    # the interleaved training rounds (run_demo: after every run's training and MAE pass,
    # before the inference rounds; each round runs each run's training step once over its
    # fixed training batches, in turn, and the state is put back afterwards): this run's
    # time in each round, step time only; the real graphs of its batches; the leading
    # rounds left out as warm-up (one count for every run)
    train_round_seconds: List[float] = dataclasses.field(default_factory=list)
    train_round_graphs: int = 0
    train_warmup_rounds: int = 0
    batches_per_epoch: int = 0  # counted over the epochs trained (mean, rounded)
    mean_graphs_per_batch: float = 0.0  # real graphs per training step, counted
    distinct_shapes: int = 0  # distinct (nodes, edges, graphs) batch shapes, epoch 1
    compiles: Optional[int] = None  # graphs compiled after evaluation (None: no compiler)
    compiles_training: Optional[int] = None  # ... after training (None: not compiled)
    epoch_loss: List[float] = dataclasses.field(default_factory=list)
    # the same few steps run twice from one state, after training: how far apart their
    # losses came (0.0: bit for bit; None: not checked); see graph_adapter.app.repeat
    repeat_gap: Optional[float] = None
    # the test split evaluated again and again (the MAE pass, then every interleaved
    # round): how far apart the per-batch absolute-error sums came (0.0: bit for bit)
    infer_repeat_gap: Optional[float] = None
    test_mae: float = float("nan")
    # adapter run: its trained weights evaluated by plain eager PyG (unpadded batches)
    test_mae_eager_eval: float = float("nan")
    run_seconds: float = 0.0  # the whole run: training, probes, evaluation, timing

    @property
    def warmup_training_steps(self) -> int:
        """Leading training steps left out of the steady figure (:func:`warmup_steps`)."""
        return warmup_steps(self.step_seconds)

    @property
    def warmup_inference_steps(self) -> int:
        """Leading inference rounds left out of the steady figure (``infer_warmup_rounds``);
        without rounds, leading steps of the MAE pass (:func:`warmup_steps`)."""
        if self.infer_round_seconds:
            return self.infer_warmup_rounds
        return warmup_steps(self.infer_step_seconds)

    @property
    def epoch_graphs_per_second(self) -> float:
        """Steady-state training throughput in the run's own epochs (the runs train one
        after the other): the steps after the warm-up (:func:`warmup_steps`), step time
        only."""
        return steady_rate(self.step_seconds, self.step_graphs)

    @property
    def train_graphs_per_second(self) -> float:
        """Steady-state training throughput: the round's training graphs over the median
        of the interleaved training rounds after the warm-up; without rounds, the run's
        own epochs (:attr:`epoch_graphs_per_second`)."""
        if self.train_round_seconds:
            return _round_rate(self.train_round_seconds, self.train_round_graphs,
                               self.train_warmup_rounds)
        return self.epoch_graphs_per_second

    def training_ratio(self, base: "RunStats") -> Tuple[float, float, float]:
        """``(median, min, max)`` over the interleaved training rounds of this run's
        training rate over ``base``'s, rounds after the warm-up; without rounds in both,
        the ratio of the steady rates of their own epochs three times."""
        return _rounds_ratio(
            (self.train_round_seconds, self.train_round_graphs, self.train_warmup_rounds),
            (base.train_round_seconds, base.train_round_graphs, base.train_warmup_rounds),
            lambda: self.epoch_graphs_per_second / base.epoch_graphs_per_second)

    @property
    def eval_graphs_per_second(self) -> float:
        """Steady-state inference throughput: one pass's graphs over the median of the
        interleaved rounds after the warm-up; without rounds, the MAE pass's steps
        after the warm-up (:func:`steady_rate`)."""
        if self.infer_round_seconds:
            return _round_rate(self.infer_round_seconds, self.infer_round_graphs,
                               self.infer_warmup_rounds)
        return steady_rate(self.infer_step_seconds, self.infer_step_graphs)

    def inference_ratio(self, base: "RunStats") -> Tuple[float, float, float]:
        """``(median, min, max)`` over the interleaved rounds of this run's inference rate
        over ``base``'s, rounds after the warm-up; without rounds in both, the ratio of
        the steady rates three times."""
        return _rounds_ratio(
            (self.infer_round_seconds, self.infer_round_graphs, self.infer_warmup_rounds),
            (base.infer_round_seconds, base.infer_round_graphs, base.infer_warmup_rounds),
            lambda: self.eval_graphs_per_second / base.eval_graphs_per_second)


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
        lines = [""] + _wrap(self._header(), width) + [""]
        lines += self._table()
        lines.append("")
        lines += _wrap(self._footer(), width)
        return "\n".join(lines)

    def _header(self) -> List[str]:
        c, b = self.config, self.budget
        note = f" ({self.backend_note})" if self.backend_note else ""
        return [
            f"graph_adapter demo: {c.model} ({MODELS[c.model]}), {c.layers} layers x {c.hidden}",
            f"data: {self.num_graphs} molecules from {self._source()} (target TPSA, A^2); "
            f"{self.num_bad_smiles} rows skipped (SMILES rdkit cannot parse, or no numeric target)",
            f"split: {self.num_train} train / {self.num_test} test (seed {c.seed}); "
            f"{c.epochs} epochs, Adam lr {c.lr:g}, L1 loss",
            f"budget: Budget.fit(graphs_per_batch={c.batch_graphs}) -> nodes={b['nodes']}, "
            f"edges={b['edges']}, graphs={b['graphs']} (every batch has these shapes)"
            + self._layout_note(),
            f"graph_adapter backend: {self.backend}{note}",
            f"torch {torch.__version__}, {_count(self.threads or torch.get_num_threads(), 'thread')}, "
            f"{self.cpu_count or '?'} CPUs, load average {self._load()}",
        ]

    def _layout_note(self) -> str:
        lay = self.layout
        if not lay:
            return "; layout: PyG's scatter (--layout none)"
        widths = "/".join(str(w) for w in lay.get("widths", ()))
        spills = "/".join(str(k) for k in lay.get("spills") or ())
        return (f"; layout {lay['name']!r}: neighbour tables {widths} wide (in/out)"
                + (f", spill lists of {spills}" if spills else ""))

    def _busy(self) -> bool:
        """Whether other work kept every CPU busy: the 1-minute load average at the start,
        or at the end less this run's own threads, reached the CPU count."""
        if not (self.cpu_count and len(self.load_average) == 2):
            return False
        start, end = self.load_average
        return max(start, end - (self.threads or 1)) >= self.cpu_count

    def _load(self) -> str:
        if len(self.load_average) == 2:
            return f"{self.load_average[0]:.1f} at the start, {self.load_average[1]:.1f} at the end"
        return "unknown"

    def _table(self) -> List[str]:
        runs = self.runs()
        names = {id(self.adapter): "graph_adapter", id(self.eager): "eager PyG",
                 id(self.pyg_compiled): "PyG compiled [3]"}
        rows = [("", *(names[id(r)] for r in runs))]

        def each(label, f):
            rows.append((label, *(f(r) for r in runs)))

        pct = "{:.1%}".format
        each("padding efficiency nodes/edges/graphs",
             lambda r: (f"{pct(self.node_efficiency)}/{pct(self.edge_efficiency)}/"
                        f"{pct(self.graph_efficiency)}") if r is self.adapter else "no padding")
        rows.append(("  pad-to-max nodes (largest x count)", pct(self.pad_to_max_node_efficiency)))
        each("batches per epoch / graphs per batch",
             lambda r: f"{r.batches_per_epoch} / {r.mean_graphs_per_batch:.1f}")
        each("distinct batch shapes (epoch 1) [1]", lambda r: str(r.distinct_shapes))
        each("graphs compiled (train / infer)", self._compiles)
        each("first step, s (train / infer)",
             lambda r: f"{r.first_step_seconds:.1f} / {r.eval_first_step_seconds:.1f}")
        each("warm-up (steps; train / infer rounds)", self._warmup)
        each("training, graphs/s, steady [2]", lambda r: f"{r.train_graphs_per_second:,.0f}")
        if any(r.train_round_seconds for r in runs):  # the epochs' figure, second
            each("  in its own epochs, run after run",
                 lambda r: f"{r.epoch_graphs_per_second:,.0f}")
        each("inference, graphs/s, steady [2]", lambda r: f"{r.eval_graphs_per_second:,.0f}")
        each("training wall time, s (all epochs)", lambda r: f"{r.train_seconds:.1f}")
        each(f"final train L1 loss (epoch {self.config.epochs})",
             lambda r: f"{r.epoch_loss[-1]:.2f}" if r.epoch_loss else "-")
        each("test MAE (TPSA, A^2)", lambda r: f"{r.test_mae:.2f}")
        rows.append(("  same weights, eager PyG evaluation", f"{self.adapter.test_mae_eager_eval:.2f}"))
        each("deterministic (train / infer) [4]", self._deterministic)
        widths = [max(len(r[i]) for r in rows if len(r) > i) for i in range(len(rows[0]))]
        return ["  ".join(f"{cell:<{w}}" for cell, w in zip(r, widths)).rstrip() for r in rows]

    def _warmup(self, r: RunStats) -> str:
        """Leading steps of the run's epochs; leading training rounds (with rounds) and
        inference rounds (or MAE-pass steps) left out."""
        train = f"{r.warmup_training_steps}; {r.train_warmup_rounds} / " \
            if r.train_round_seconds else f"{r.warmup_training_steps}; - / "
        return train + str(r.warmup_inference_steps)

    def _payback(self, r: RunStats, e: RunStats) -> Optional[str]:
        """When ``r``'s training compile (its first step) pays for itself against eager
        PyG's epochs at the steady speeds of this run; ``None`` without a compile."""
        if r.first_step_seconds < 1.0 or r.train_graphs_per_second <= 0:
            return None
        saved = self.num_train / e.train_graphs_per_second - \
            self.num_train / r.train_graphs_per_second  # seconds an epoch
        head = (f"{r.name}'s training compile (first step {r.first_step_seconds:.1f} s, in its "
                f"training wall time)")
        if saved <= 0:
            return f"{head} never pays back at these speeds"
        return (f"{head} pays back after {math.ceil(r.first_step_seconds / saved)} epochs of "
                f"{self.num_train} graphs at these speeds ({saved:.2f} s saved an epoch); a "
                f"warm compile cache shortens it")

    def _footer(self) -> List[str]:
        c = self.config
        lines = ["[1] each distinct shape is a recompile for torch.compile(dynamic=False)",
                 "[2] steady state, step time only (data loading is in the wall time). "
                 + self._training_note() + " " + self._inference_note()]
        if self.pyg_compiled is not None:
            lines.append("[3] PyG's documented compile route: eager PyG's model under "
                         "torch.compile(dynamic=True), on the same DataLoader batches (graph "
                         "breaks included: a graph compiled is one piece between two breaks)")
        lines.append(f"[4] training: the first {PROBE_STEPS} training steps run twice from one "
                     f"state after training (then put back) gave the same losses bit for bit; "
                     f"inference: the test split's {self._passes()} gave the same errors bit "
                     f"for bit")
        if self.training_backend and self.training_backend != self.backend:
            lines.append(f"graph_adapter's training ran on {self.training_backend!r}, its "
                         f"inference on {self.inference_backend!r} ({self.backend}); "
                         f"--backend inductor compiles training too")
        for r in self.runs():
            causes = [] if self._training_repeats(r) is not False else (
                [self.nondeterminism[r.name]] if r.name in self.nondeterminism else
                [f"the same training steps from one state gave losses {r.repeat_gap:.1e} apart"])
            if r.infer_repeat_gap:
                causes.append(f"the test split's {self._passes()} gave errors up to "
                              f"{r.infer_repeat_gap:.1e} apart")
            if causes:
                fix = ("--deterministic makes it repeat" if not c.deterministic else
                       "--threads 1 makes it repeat")
                lines.append(f"{r.name} is not deterministic here ({'; '.join(causes)}): its test "
                             f"MAE varies from run to run; {fix}")
        e = self.eager
        if e is not None and e.epoch_graphs_per_second > 0 and e.eval_graphs_per_second > 0:
            for r in self.runs():
                if r is not e:
                    t_med, t_lo, t_hi = r.training_ratio(e)
                    t_rounds = (f" (median of {self._kept_train_rounds()} interleaved rounds, "
                                f"range {t_lo:.2f}-{t_hi:.2f})" if r.train_round_seconds and
                                e.train_round_seconds else " (in the runs' own epochs)")
                    med, lo, hi = r.inference_ratio(e)
                    rounds = (f"median of {self._kept_rounds()} interleaved rounds, range "
                              f"{lo:.2f}-{hi:.2f}; " if r.infer_round_seconds else "")
                    lines.append(
                        f"{r.name} / eager PyG, steady graphs/s: training {t_med:.2f}x"
                        f"{t_rounds}, inference {med:.2f}x ({rounds}same model, loss, "
                        f"optimizer and data, measured in this run)")
                    payback = self._payback(r, e)
                    if payback:
                        lines.append(payback)
        if self.train_round_compiles:
            lines.append(f"{_count(self.train_round_compiles, 'graph')} compiled during the "
                         f"timed training rounds: the training figures include compiles")
        if self.infer_round_compiles:
            lines.append(f"{_count(self.infer_round_compiles, 'graph')} compiled during the "
                         f"timed inference rounds: the inference figures include compiles")
        if self._busy():
            lines.append(f"other work kept the CPUs busy during this run (load average "
                         f"{self._load()}, {self.cpu_count} CPUs): times and throughput are "
                         f"lower and noisier than on a quiet machine; compare figures within "
                         f"one run only")
        lines.append(f"test MAE baseline (predict the training mean): {self._mean_mae:.2f}")
        parts = [f"loading molecules {self.load_seconds:.0f} s"] + [
            f"{r.name} {r.run_seconds:.0f} s" for r in self.runs()]
        if self.train_rounds:
            parts.append(f"training rounds {self.train_rounds_seconds:.0f} s")
        if self.infer_rounds:
            parts.append(f"inference rounds {self.infer_rounds_seconds:.0f} s")
        lines.append(f"total {self.total_seconds:.0f} s ({', '.join(parts)})")
        if c.plot:
            lines.append(f"plot written to {c.plot}")
        return lines

    _mean_mae: float = float("nan")

    def _rounds_run(self) -> int:
        """The interleaved rounds the runs have (the field, or counted: a result built
        by hand)."""
        return self.infer_rounds or max((len(r.infer_round_seconds) for r in self.runs()),
                                        default=0)

    def _kept_rounds(self) -> int:
        return self._rounds_run() - self.adapter.infer_warmup_rounds

    def _train_rounds_run(self) -> int:
        """The interleaved training rounds the runs have (the field, or counted)."""
        return self.train_rounds or max((len(r.train_round_seconds) for r in self.runs()),
                                        default=0)

    def _kept_train_rounds(self) -> int:
        warm = max((r.train_warmup_rounds for r in self.runs() if r.train_round_seconds),
                   default=0)
        return self._train_rounds_run() - warm

    def _training_note(self) -> str:
        epochs = (f"graphs/s over the steps after the warm-up = the leading steps slower "
                  f"than {WARMUP_FACTOR:g}x the run's median step (the compile among them)")
        timed = [r for r in self.runs() if r.train_round_seconds]
        if not timed:
            return f"Training: {epochs}; the runs train one after the other."
        n = self._train_rounds_run()
        lo, hi = (f(r.train_round_graphs for r in timed) for f in (min, max))
        graphs = f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"
        left = [r.name for r in self.runs() if not r.train_round_seconds]
        return (f"Training: after every run has trained and been evaluated, each run's "
                f"training step (forward, backward, optimizer step) is timed over the first "
                f"batches of its epoch 1 ({graphs} graphs) in {n} "
                f"interleaved rounds, its weights and optimizer state put back afterwards; "
                f"graphs/s = those graphs over the run's median round, a ratio = the median "
                f"of the per-round ratios; warm-up = the leading rounds in which any run was "
                f"slower than {WARMUP_FACTOR:g}x its median round ("
                f"{n - self._kept_train_rounds()} left out)"
                + (f"; {', '.join(left)}: its own epochs (its optimizer state cannot be "
                   f"put back)" if left else "")
                + f". In its own epochs (the runs one after the other): {epochs}.")

    def _passes(self) -> str:
        n = self._rounds_run()
        return f"passes (the MAE pass, then {n} timed rounds)" if n else "passes"

    def _inference_note(self) -> str:
        n = self._rounds_run()
        if not n:
            return (f"Inference: the MAE pass's steps after the leading ones slower than "
                    f"{WARMUP_FACTOR:g}x its median step")
        return (f"Inference: after every run has trained and compiled its evaluation step "
                f"(in its MAE pass), the runs are timed over the test split in {n} "
                f"interleaved rounds (each round runs each run once, in turn, so that the "
                f"runs of one round share the machine's state); graphs/s = the test split "
                f"over the run's median round, a ratio = the median of the per-round ratios; "
                f"warm-up = the leading rounds in which any run was slower than "
                f"{WARMUP_FACTOR:g}x its median round ({self.adapter.infer_warmup_rounds} "
                f"left out)")

    def _training_repeats(self, r: RunStats) -> Optional[bool]:
        """Known causes first (a short probe can miss them), then the probe's measurement."""
        if r.name in self.nondeterminism:
            return False
        return None if r.repeat_gap is None else not r.repeat_gap

    def _deterministic(self, r: RunStats) -> str:
        def word(repeats: Optional[bool]) -> str:
            return "?" if repeats is None else ("yes" if repeats else "no")

        infer = None if r.infer_repeat_gap is None else not r.infer_repeat_gap
        return f"{word(self._training_repeats(r))} / {word(infer)}"

    def _source(self) -> str:
        return self.config.path if self.config.path else "rdkit's NCI first_5k"

    def _compiles(self, r: RunStats) -> str:
        """The compiled model's own count, split at the end of training."""
        if r.compiles is None or r.compiles_training is None:
            return "none"
        return f"{r.compiles_training} / {r.compiles - r.compiles_training}"


def _wrap(lines: List[str], width: int) -> List[str]:
    """Each line wrapped at ``width``; continuation lines indented by two spaces."""
    out: List[str] = []
    for line in lines:
        out += textwrap.wrap(line, width, subsequent_indent="  ", break_on_hyphens=False) or [""]
    return out


def write_plot(result: DemoResult, path: str) -> None:
    """Loss curves (every run) and the histogram of per-batch node fill."""
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
    if result.pyg_compiled is not None:
        ax1.plot(ep, result.pyg_compiled.epoch_loss, marker="^", label="PyG compiled")
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


def _count(n: int, noun: str) -> str:
    """``"1 thread"``, ``"2 threads"``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
