"""The text ``graph-adapter demo`` prints, but for the joining of its parts.

:class:`DemoReport` is the base class of :class:`~graph_adapter.app.demo.results.DemoResult`
that formats it: the header, the table of the runs side by side and the notes under it;
:meth:`DemoResult.report <graph_adapter.app.demo.results.DemoResult.report>` joins them, each
line wrapped by :func:`wrap`. Its methods read the result's fields; it holds none of its
own.
"""
from __future__ import annotations

import math
import textwrap
from typing import List, Optional, Tuple

import torch

from ..models import MODELS
from .run_stats import PROBE_STEPS, WARMUP_FACTOR, RunStats

__all__ = ["DemoReport", "wrap"]


class DemoReport:
    """The parts of :meth:`DemoResult.report <graph_adapter.app.demo.results.DemoResult.report>`
    (a base class of :class:`~graph_adapter.app.demo.results.DemoResult`: ``self`` is the
    result)."""

    def _header(self) -> List[str]:
        c, b = self.config, self.budget
        note = f" ({self.backend_note})" if self.backend_note else ""
        return [
            f"graph_adapter demo: {c.model} ({MODELS[c.model]}), {c.layers} layers x {c.hidden}",
            f"data: {self.num_graphs} molecules from {self._source()} (target TPSA, A^2); "
            f"{self.num_bad_smiles} bad rows skipped",
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
        """The setting as ``--layout`` names it, and the tables it fitted."""
        layout = self.config.layout
        if self.layout_widths is None:
            return f"; layout: PyG's scatter (--layout {layout})"
        widths = "/".join(str(w) for w in self.layout_widths)
        spills = "/".join(str(k) for k in self.layout_spills or ())
        return (f"; layout {layout!r}: neighbour tables {widths} wide (in/out)"
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
                f"training wall time{_cache_state(r.first_step_cache, r.first_step_precompiled)})")
        if saved <= 0:
            return f"{head} never pays back at these speeds"
        epochs = math.ceil(r.first_step_seconds / saved)
        verdict = (f"is paid back within this run's {self.config.epochs} epochs"
                   if epochs <= self.config.epochs else f"pays back after {epochs} epochs")
        return (f"{head} {verdict} of {self.num_train} graphs at these speeds ({saved:.2f} s "
                f"saved an epoch){_cache_hint(r.first_step_cache)}")

    def _footer(self, explain: bool = False) -> List[str]:
        """Under the table: what the run comes to (end to end, steady ratios, payback),
        what to know about it (backends, repeatability, load), where the time went; the
        method notes [1]-[4] with ``explain``, else one line naming ``--explain``."""
        lines = self._summary() + self._caveats()
        lines.append(f"test MAE baseline (predict the training mean): {self.mean_mae:.2f}")
        lines.append(self._where_time_went())
        if self.config.plot:
            lines.append(f"plot written to {self.config.plot}")
        if explain:
            return lines + self._method_notes()
        return lines + ["[1]-[4], bad rows: graph-adapter demo --explain; the MAE's spread over "
                        "seeds: --seeds N"]

    def _end_to_end(self, r: RunStats, e: RunStats) -> str:
        """Training wall time with the compile against eager PyG's: what a user waits."""
        ratio = r.train_seconds / e.train_seconds if e.train_seconds > 0 else float("nan")
        how = (f"{r.background}; then waited {r.background_wait_seconds:.0f} s before the "
               f"timed rounds" if r.background else "compile included")
        return (f"end to end: {r.name} trained in {r.train_seconds:.1f} s ({how}), "
                f"eager PyG in {e.train_seconds:.1f} s: {ratio:.2f}x the wall time over "
                f"{self.config.epochs} epochs")

    def _summary(self) -> List[str]:
        """The end-to-end line, the steady-state ratios and the payback of each run
        against eager PyG."""
        e, lines = self.eager, []
        if e is None or e.epoch_graphs_per_second <= 0 or e.eval_graphs_per_second <= 0:
            return lines
        for r in self.runs():
            if r is e:
                continue
            lines.append(self._end_to_end(r, e))
            t_med, t_lo, t_hi = r.training_ratio(e)
            t_rounds = (f" (median of {self._kept_train_rounds()} interleaved rounds, "
                        f"range {t_lo:.2f}-{t_hi:.2f})" if r.train_round_seconds and
                        e.train_round_seconds else " (in the runs' own epochs)")
            med, lo, hi = r.inference_ratio(e)
            rounds = (f"median of {self._kept_rounds()} interleaved rounds, range "
                      f"{lo:.2f}-{hi:.2f}; " if r.infer_round_seconds else "")
            lines.append(f"{r.name} / eager PyG, steady graphs/s: training {t_med:.2f}x"
                         f"{t_rounds}, inference {med:.2f}x ({rounds}same model, loss, "
                         f"optimizer and data, measured in this run)")
            payback = self._payback(r, e)
            if payback:
                lines.append(payback)
        return lines

    def _caveats(self) -> List[str]:
        """What qualifies the figures: another backend for training, a run that does not
        repeat, compiles inside timed rounds, a busy machine."""
        c, lines = self.config, []
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
        return lines

    def _where_time_went(self) -> str:
        parts = [f"loading molecules {self.load_seconds:.0f} s"] + [
            f"{r.name} {r.run_seconds:.0f} s" for r in self.runs()]
        if self.train_rounds:
            parts.append(f"training rounds {self.train_rounds_seconds:.0f} s")
        if self.infer_rounds:
            parts.append(f"inference rounds {self.infer_rounds_seconds:.0f} s")
        return f"total {self.total_seconds:.0f} s ({', '.join(parts)})"

    def _method_notes(self) -> List[str]:
        """The footnotes of the table's [1]-[4] (``--explain``)."""
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
        lines.append("bad rows: SMILES rdkit cannot parse, or rows without a numeric target "
                     "(left out of both runs)")
        return lines

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


def wrap(lines: List[str], width: int) -> List[str]:
    """Each line wrapped at ``width``; continuation lines indented by two spaces."""
    out: List[str] = []
    for line in lines:
        out += textwrap.wrap(line, width, subsequent_indent="  ", break_on_hyphens=False) or [""]
    return out


def _count(n: int, noun: str) -> str:
    """``"1 thread"``, ``"2 threads"``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _entries(n: int) -> str:
    return f"{n} precompiled {'entry' if n == 1 else 'entries'}"


def _cache_state(cache: Tuple[int, int], precompiled: Tuple[int, int] = (0, 0)) -> str:
    """``"; cold cache: 3 graphs compiled"`` and the like (empty without inductor);
    precompiled entries (``--precompile``) loaded (nothing traced) or saved are named."""
    hits, compiled = cache
    loaded, saved = precompiled
    if loaded and not (hits or compiled or saved):
        return f"; {_entries(loaded)} loaded, nothing traced or compiled"
    if hits == compiled == 0:
        state = ""
    elif compiled == 0:
        state = f"; warm cache: {_count(hits, 'graph')} from inductor's cache, none compiled"
    else:
        state = (f"; {'cold' if hits == 0 else 'partly warm'} cache: {_count(compiled, 'graph')} "
                 f"compiled" + (f", {hits} from the cache" if hits else ""))
    if saved:
        state += f"{', ' if state else '; '}{_entries(saved)} saved for the next run"
    return state


def _cache_hint(cache: Tuple[int, int]) -> str:
    """What a second run changes: a cold compile's graphs are in the cache now."""
    hits, compiled = cache
    if compiled == 0:
        return ""
    return ("; the compiled graphs are now in inductor's cache (TORCHINDUCTOR_CACHE_DIR): run "
            "the demo again and this line shows the first step and the epochs with a warm "
            "cache")
