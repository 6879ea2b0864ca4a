"""The demo's report says only what is true for the run it describes: compiles as the
backend that ran counted them ("none" for eager), batches and graphs counted, steady-state
throughput by a stated warm-up rule, repeatability measured; every line fits 88 columns."""
import json
import math
import statistics

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import graph_adapter as ga
from graph_adapter.app.demo import graph as demo, timing
from graph_adapter.app.demo.graph import run_demo
from graph_adapter.app.demo.timing import repeat_gap
from graph_adapter.app.preflight import DemoSettingError
from graph_adapter.app.demo.results import (REPORT_WIDTH, WARMUP_FACTOR, RunStats, median_range,
                                       round_ratios, steady_rate, warmup_rounds, warmup_steps)

pytest.importorskip("rdkit")

from _demo import TINY, _fresh_dynamo  # noqa: E402,F401  (an autouse fixture)


def _row(report: str, label: str) -> str:
    return next(line for line in report.splitlines() if line.startswith(label))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_eager_backend_report_says_no_compiler_and_counts_what_ran():
    r = run_demo(backend="eager", **TINY)
    text = r.report()
    compiles = _row(text, "graphs compiled")
    assert compiles.split()[-2:] == ["none", "none"]
    assert r.adapter.compiles is None
    for run in (r.adapter, r.eager):
        assert run.batches_per_epoch == run.steps  # one epoch: counted, not planned
        assert run.mean_graphs_per_batch == pytest.approx(run.train_graphs / run.steps)
        assert run.train_graphs == r.num_train == sum(run.step_graphs)
        assert len(run.step_seconds) == run.steps
        assert run.repeat_gap == 0.0  # eager on CPU repeats bit for bit
        assert run.infer_repeat_gap == 0.0
        # the MAE pass over the test split, then the interleaved rounds over it again
        assert sum(run.infer_step_graphs) == r.num_test == run.infer_round_graphs
        assert len(run.infer_round_seconds) == r.infer_rounds == r.config.infer_rounds
        # training side by side too: over the first batches of epoch 1 (here: all of them)
        assert len(run.train_round_seconds) == r.train_rounds == r.config.train_rounds
        assert run.train_round_graphs == r.num_train
    assert _row(text, "deterministic").split()[-6:] == ["yes", "/", "yes"] * 2
    assert "not deterministic" not in text
    assert max(len(line) for line in text.splitlines()) <= REPORT_WIDTH


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_compiles_in_the_report_are_the_backends_own_count(monkeypatch):
    """aot_eager: the figures are the compiled model's compile_count, split at training's end."""
    seen = []
    real_compile = ga.compile

    def spy(*args, **kwargs):
        compiled = real_compile(*args, **kwargs)
        seen.append(compiled)
        return compiled

    monkeypatch.setattr(ga, "compile", spy)
    r = run_demo(backend="aot_eager", eager_baseline=False, **TINY)
    (compiled,) = seen
    assert r.adapter.compiles == compiled.compile_count
    trained, evaluated = (int(n) for n in _row(r.report(), "graphs compiled").split()[-3::2])
    assert trained == r.adapter.compiles_training >= 1 and evaluated >= 1
    assert trained + evaluated == compiled.compile_count


class _Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(()))
        self.register_buffer("calls", torch.zeros(()))  # state a step changes


def _step(model, opt):
    def step(batch):
        model.calls += 1
        loss = (model.w * batch).sum() * model.calls
        opt.zero_grad()
        loss.backward()
        opt.step()
        return float(loss), 1
    return step


@pytest.mark.parametrize("noisy", [False, True])
def test_repeat_gap_measures_and_restores(noisy):
    model = _Counter()
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    # the noisy step depends on something outside the restored state (a global counter)
    calls = iter(range(100))
    step = _step(model, opt)

    def noisy_step(batch):
        loss, n = step(batch)
        return loss + 1e-3 * next(calls), n

    gap = repeat_gap(noisy_step if noisy else step, [torch.ones(2)] * 5, [model], opt)
    assert (gap > 0) == noisy
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert opt.state_dict()["state"] == {}


def test_known_nondeterminism_is_inductor_training_on_several_threads_without_deterministic_mode():
    from graph_adapter.app.demo.timing import known_nondeterminism

    assert "atomic adds" in known_nondeterminism("inductor", 2, False)
    assert known_nondeterminism("inductor", 1, False) is None  # one thread: one order
    assert known_nondeterminism("inductor", 2, True) is None  # ATen's deterministic kernels
    assert known_nondeterminism("aot_eager", 2, False) is None  # ATen's CPU kernels
    # what Compiled.atomic_adds read from the generated code decides; unknown assumes atomics
    assert known_nondeterminism("inductor", 2, False, atomic_adds=False) is None
    assert "atomic adds" in known_nondeterminism("inductor", 2, False, atomic_adds=True)
    assert "atomic adds" in known_nondeterminism("inductor", 2, False, atomic_adds=None)
    assert known_nondeterminism("eager", 2, False) is None  # inductor_eval's training


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_report_says_when_a_run_is_not_deterministic():
    r = run_demo(backend="eager", eager_baseline=False, **TINY)
    r.nondeterminism = {"graph_adapter": "a cause"}
    text = r.report()
    assert _row(text, "deterministic").split()[-3:] == ["no", "/", "yes"]
    note = " ".join(text.split("[1]", 1)[1].split())
    assert "graph_adapter is not deterministic here (a cause)" in note
    assert "--deterministic" in note
    # the load average is in the header; a busy machine is named under the table
    # (the load at the end counts this run's own threads: 2 here)
    r.cpu_count, r.threads, r.load_average = 2, 2, [0.4, 3.9]
    assert "load average 0.4 at the start, 3.9 at the end" in " ".join(r.report().split())
    assert "other work kept the CPUs busy" not in r.report()
    for busy in ([0.4, 4.1], [2.1, 1.0]):
        r.load_average = busy
        assert "other work kept the CPUs busy" in " ".join(r.report().split()), busy


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_inference_that_does_not_repeat_is_reported(monkeypatch):
    """The test split's second pass is compared with the first: a step whose result
    depends on something outside the model (here a counter) is caught and named."""
    calls = iter(range(10_000))
    real = timing._eager_abs_error

    def noisy(model):
        step = real(model)

        def run(b):
            err, n = step(b)
            return err + 1e-3 * next(calls), n
        return run

    monkeypatch.setattr(timing, "_eager_abs_error", noisy)
    r = run_demo(backend="eager", **TINY)
    assert r.eager.infer_repeat_gap > 0 and r.adapter.infer_repeat_gap == 0.0
    text = r.report()
    assert _row(text, "deterministic").split()[-3:] == ["yes", "/", "no"]
    note = " ".join(text.split("[1]", 1)[1].split())
    assert (f"eager PyG is not deterministic here (the test split's passes (the MAE pass, "
            f"then {r.infer_rounds} timed rounds) gave errors up to") in note


# --------------------------------------------------------------------------
# steady state: the warm-up rule
# --------------------------------------------------------------------------
def test_warmup_rule_leaves_out_the_compile_and_the_slow_steps_after_it():
    steady = [0.010, 0.011, 0.009, 0.010, 0.012, 0.010]
    assert warmup_steps(steady) == 0  # an eager run loses nothing
    assert warmup_steps([30.0] + steady) == 1  # the compile
    assert warmup_steps([30.0, 0.8, 0.5] + steady) == 3  # slow steps right after it
    assert warmup_steps([0.011]) == 0 and warmup_steps([]) == 0
    graphs = [64] * 9
    assert steady_rate([30.0, 0.8, 0.5] + steady, graphs) == pytest.approx(64 * 6 / sum(steady))
    r = RunStats("x", step_seconds=[30.0] + steady, step_graphs=[64] * 7,
                 infer_step_seconds=[5.0, 0.001, 0.001], infer_step_graphs=[10, 10, 10])
    assert r.warmup_training_steps == 1 and r.warmup_inference_steps == 1
    assert r.eval_graphs_per_second == pytest.approx(20 / 0.002)


@given(st.lists(st.floats(1e-4, 1e3), min_size=2, max_size=40))
def test_warmup_rule_property(seconds):
    """Warm-up is a prefix: every step left out is slower than the limit, the first kept
    one is not; at least half the steps are kept (the median's half)."""
    k = warmup_steps(seconds)
    limit = WARMUP_FACTOR * statistics.median(seconds)
    assert all(s > limit for s in seconds[:k])
    assert seconds[k] <= limit
    assert k <= len(seconds) // 2


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_progress_bar_opens_after_the_first_step(monkeypatch):
    """No compile feeds the ETA: the bar opens once the first (compiling) step is done,
    with that step counted as done but untimed (tqdm's rate is (n - initial) / elapsed)."""
    opened = []
    stats = RunStats("x", batches_per_epoch=4)
    steps = []

    def fake_progress(total, desc, enabled, initial=0):
        opened.append((len(steps), total, initial))
        return None

    monkeypatch.setattr(timing, "_progress", fake_progress)

    def step(batch):
        steps.append(batch)
        return 1.0, 1

    timing.train_epochs(stats, step, lambda epoch: range(4), 2, label="x",
                        shape_of=lambda b: (), progress=True, compiles=True)
    assert opened == [(1, 8, 1)]
    assert len(stats.step_seconds) == stats.steps == 8


@pytest.mark.extended  # PyG's dynamic=True route traced: ~12 s quiet
@pytest.mark.filterwarnings("ignore")
def test_pyg_compile_route_is_a_third_column(monkeypatch):
    """The third run is eager PyG's model under torch.compile(dynamic=True); on aot_eager
    here (the same graphs, no code generation). Its graphs are Dynamo's own count."""
    r = run_demo(backend="eager", **{**TINY, "pyg_compile": True},
                 pyg_compile_backend="aot_eager")
    p = r.pyg_compiled
    assert p is not None and p.train_graphs == r.num_train
    assert p.compiles_training >= 1 and p.compiles >= p.compiles_training
    text = r.report()
    lines = text.splitlines()
    header = lines[lines.index(_row(text, "padding efficiency")) - 1]
    assert header.split() == ["graph_adapter", "eager", "PyG", "PyG", "compiled", "[3]"]
    compiles = _row(text, "graphs compiled").split()
    assert compiles[-3:] == [str(p.compiles_training), "/",
                             str(p.compiles - p.compiles_training)]
    assert "[3] PyG's documented compile route" not in text  # a method note: --explain
    assert "[3] PyG's documented compile route" in r.report(explain=True)
    assert "PyG compiled / eager PyG" in " ".join(text.split())
    assert max(len(line) for line in text.splitlines()) <= REPORT_WIDTH
    d = r.as_dict()
    assert d["pyg_compiled"]["warmup_training_steps"] == p.warmup_training_steps


def test_payback_line_is_the_compile_over_the_seconds_saved_an_epoch():
    """The footer says after how many epochs a training compile pays back, from the
    run's own steady speeds; no line without a compile, "never" when not faster."""
    r = run_demo(backend="eager", **TINY)
    a, e = r.adapter, r.eager
    assert r._payback(a, e) is None  # eager: a first step of well under a second
    a.train_round_seconds = e.train_round_seconds = []  # the epochs' figures, then
    a.first_step_seconds = 12.0
    a.step_seconds, a.step_graphs = [0.5] * 4, [100] * 4  # steady 200 graphs/s
    e.step_seconds, e.step_graphs = [1.0] * 4, [100] * 4  # steady 100 graphs/s
    saved = r.num_train / 100 - r.num_train / 200
    line = r._payback(a, e)
    assert f"first step 12.0 s" in line and f"({saved:.2f} s saved an epoch)" in line
    assert f"pays back after {math.ceil(12.0 / saved)} epochs of {r.num_train} graphs" in line
    assert "cache" not in line  # nothing went through inductor
    a.first_step_cache = (0, 3)  # a cold compile: says so, and what a second run changes
    line = r._payback(a, e)
    assert "cold cache: 3 graphs compiled" in line and "run the demo again" in line
    a.first_step_cache = (3, 0)  # warm: no hint, the state named
    line = r._payback(a, e)
    assert "warm cache: 3 graphs from inductor's cache, none compiled" in line
    assert "run the demo again" not in line
    a.first_step_cache, a.first_step_precompiled = (0, 0), (2, 0)  # --precompile, warm
    line = r._payback(a, e)
    assert "2 precompiled entries loaded, nothing traced or compiled" in line
    a.first_step_cache, a.first_step_precompiled = (0, 3), (0, 2)  # --precompile, cold
    line = r._payback(a, e)
    assert "cold cache: 3 graphs compiled, 2 precompiled entries saved for the next run" in line
    a.first_step_cache, a.first_step_precompiled = (3, 0), (0, 0)
    e.step_seconds = [50.0] * 4  # eager PyG at 2 graphs/s: 12 s paid back in epoch 1
    assert f"is paid back within this run's {r.config.epochs} epochs" in r._payback(a, e)
    e.step_seconds = [1.0] * 4
    a.step_seconds = [2.0] * 4  # slower than eager PyG: the compile never pays back
    assert r._payback(a, e).endswith("never pays back at these speeds")


def test_first_step_counts_inductor_cache_hits_and_compiles():
    """The demo's first training step records inductor's FX-cache counts of that step
    alone (the counters are process-wide: the step's difference, not the totals)."""
    from torch._dynamo.utils import counters

    from graph_adapter.app.demo.timing import train_epochs
    from graph_adapter.app.demo.results import RunStats

    _precompile = pytest.importorskip("graph_adapter.tuning.precompile")  # (the tuning wing)

    def step(batch):  # stands in for a compile: moves the counters as inductor would
        counters["inductor"]["fxgraph_cache_hit"] += batch[0]
        counters["inductor"]["fxgraph_cache_miss"] += batch[1]
        _precompile.COUNTS["loaded"] += batch[2]  # and as a precompiled entry's load
        return 1.0, 1

    counters["inductor"]["fxgraph_cache_hit"] += 5  # earlier work in the process
    _precompile.COUNTS["loaded"] += 4
    st = RunStats("x", batches_per_epoch=2)
    train_epochs(st, step, lambda epoch: [(2, 1, 1), (7, 7, 7)], 1, label="x", shape_of=len,
                 progress=False)
    assert st.first_step_cache == (2, 1) and st.first_step_precompiled == (1, 0)


def test_report_names_the_layout_and_train_and_test_share_its_tables():
    r = run_demo(backend="eager", eager_baseline=False, **TINY)  # default: layout "hyb"
    head = r.report()
    assert r.config.layout == "hyb" and "layout 'hyb': neighbour tables" in head
    assert len(r.layout_widths) == 2 and len(r.layout_spills) == 2
    none = run_demo(backend="eager", eager_baseline=False, layout="none", **TINY)
    assert none.layout_widths is None and none.layout_spills is None
    assert "layout: PyG's scatter (--layout none)" in none.report()
    assert json.loads(json.dumps(r.as_dict(), default=str))["config"]["layout"] == "hyb"
    # the same model, same data: the layout changes no number of the eager run
    assert none.adapter.test_mae == pytest.approx(r.adapter.test_mae, rel=1e-4)


# --------------------------------------------------------------------------
# inference timed in interleaved rounds
# --------------------------------------------------------------------------
class _FakeClock:
    """Time moves only when a fake step (or a fake data loader) says so."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class _SlowLoading(list):
    """Batches whose loading takes 100 fake seconds each: never in a round's time."""

    def __init__(self, items, clock):
        super().__init__(items)
        self.clock = clock

    def __iter__(self):
        for b in super().__iter__():
            self.clock.now += 100.0
            yield b


def test_time_interleaved_runs_each_run_once_a_round_in_rotating_turns():
    clock = _FakeClock()
    calls = []

    def step_of(name, seconds_a_batch):
        def step(batch):
            assert not torch.is_grad_enabled()
            calls.append((name, batch))
            clock.now += seconds_a_batch
            return float(batch), 1
        return step

    runs = {"a": (step_of("a", 1.0), _SlowLoading([1, 2], clock)),
            "b": (step_of("b", 2.0), _SlowLoading([3], clock)),
            "c": (step_of("c", 3.0), _SlowLoading([4, 5, 6], clock))}
    res = timing.time_interleaved(runs, 3, clock=clock)
    a, b, c = [("a", 1), ("a", 2)], [("b", 3)], [("c", 4), ("c", 5), ("c", 6)]
    assert calls == a + b + c + b + c + a + c + a + b  # round r starts with run r mod 3
    # step time only: the loading's 100 s never counts
    assert res == {"a": ([2.0] * 3, [[1.0, 2.0]] * 3), "b": ([2.0] * 3, [[3.0]] * 3),
                   "c": ([9.0] * 3, [[4.0, 5.0, 6.0]] * 3)}


def test_interleaved_ratio_is_the_median_of_the_per_round_ratios():
    # the whole machine 3x slower in rounds 2-4, every run alike: each round's ratio holds
    slow = [1, 1, 3, 3, 3, 1, 1]
    assert round_ratios([0.5 * f for f in slow], 100, slow, 100) == pytest.approx([2.0] * 7)
    assert round_ratios([1.0, 2.0], 50, [1.0, 1.0], 100) == pytest.approx([0.5, 0.25])
    assert round_ratios([5.0, 1.0, 2.0], 10, [5.0, 2.0, 2.0], 10, skip=1) == [2.0, 1.0]
    assert median_range([3.0, 1.0, 8.0]) == (3.0, 1.0, 8.0)
    # per-round ratios 2, 6, 1: median 2 (mean 3; the ratio of the median rates: 4)
    a = RunStats("a", infer_round_seconds=[1.0, 1.0, 4.0], infer_round_graphs=10)
    e = RunStats("e", infer_round_seconds=[2.0, 6.0, 4.0], infer_round_graphs=10)
    assert a.inference_ratio(e) == (2.0, 1.0, 6.0)
    assert a.eval_graphs_per_second == 10.0 and e.eval_graphs_per_second == 10 / 4
    # warm-up rounds: left out of every run alike (the most any run's rule leaves out)
    a.infer_warmup_rounds = e.infer_warmup_rounds = 1
    assert a.inference_ratio(e) == (3.5, 1.0, 6.0) and a.eval_graphs_per_second == 10 / 2.5
    assert a.warmup_inference_steps == 1


def test_warmup_rounds_is_the_most_any_run_leaves_out():
    assert warmup_rounds({"a": [5, 1, 1, 1, 1], "b": [1, 4, 1, 1, 1]}) == 1
    assert warmup_rounds({"a": [5, 1, 1, 1, 1], "b": [6, 6, 1, 1, 1]}) == 2
    assert warmup_rounds({"a": [1.0, 1.0]}) == 0 and warmup_rounds({}) == 0


@given(st.lists(st.floats(1e-3, 10.0), min_size=1, max_size=12),
       st.lists(st.floats(0.2, 5.0), min_size=1, max_size=12), st.floats(0.1, 10.0))
def test_a_machine_slower_in_some_rounds_moves_no_ratio(base, slowdown, speedup):
    """What interleaving is for: a slowdown that hits every run of a round alike (load,
    the virtual machine's speed) leaves every per-round ratio, so their median, as it is."""
    n = min(len(base), len(slowdown))
    base, slowdown = base[:n], slowdown[:n]
    fast = [t / speedup for t in base]
    steady = round_ratios(fast, 7, base, 7)
    moved = round_ratios([t * f for t, f in zip(fast, slowdown)], 7,
                         [t * f for t, f in zip(base, slowdown)], 7)
    assert moved == pytest.approx(steady) and steady == pytest.approx([speedup] * n)
    # (not warmup_steps(base) alone: rounding can move a step sitting on the limit)
    k = warmup_rounds({"a": base, "b": fast})
    assert k == max(warmup_steps(base), warmup_steps(fast)) <= n // 2


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_report_gives_the_interleaved_ratio_and_its_range():
    r = run_demo(backend="eager", **TINY)
    a, e = r.adapter, r.eager
    a.infer_round_seconds, e.infer_round_seconds = [1.0, 1.0, 4.0], [2.0, 6.0, 4.0]
    a.infer_round_graphs = e.infer_round_graphs = 10
    a.infer_warmup_rounds = e.infer_warmup_rounds = 0
    r.infer_rounds = 3
    # the training rounds too, so that a busy machine's warm-up rounds (left out of
    # the count) cannot change the text under test
    a.train_round_seconds, e.train_round_seconds = [1.0, 2.0, 1.0], [2.0, 3.0, 3.0]
    a.train_round_graphs = e.train_round_graphs = 10
    a.train_warmup_rounds = e.train_warmup_rounds = 0
    r.train_rounds = 3
    text = r.report(explain=True)  # the method notes say how the rounds ran
    flat = " ".join(text.split())
    t_med, t_lo, t_hi = a.training_ratio(e)
    assert ("graph_adapter / eager PyG, steady graphs/s: training "
            f"{t_med:.2f}x (median of {r.train_rounds} interleaved rounds, range "
            f"{t_lo:.2f}-{t_hi:.2f}), inference 2.00x "
            "(median of 3 interleaved rounds, range 1.00-6.00; same model") in flat
    assert "in 3 interleaved rounds (each round runs each run once, in turn" in flat
    assert _row(text, "inference, graphs/s").split()[-2:] == ["10", "2"]  # 10 / 4 s
    assert r.as_dict()["adapter"]["inference_ratio_to_eager"] == [2.0, 1.0, 6.0]
    assert "compiled during the timed inference rounds" not in flat
    r.infer_round_compiles = 2
    assert "2 graphs compiled during the timed inference rounds" in " ".join(r.report().split())
    assert max(len(line) for line in r.report().splitlines()) <= REPORT_WIDTH


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_inference_is_timed_after_every_run_has_trained(monkeypatch):
    """One interleaved timing, after the last training run, over each run's test batches."""
    events = []
    real_train, real_timed = timing.train_epochs, timing.time_interleaved

    def train(stats, *args, **kwargs):
        events.append(("train", stats.name))
        return real_train(stats, *args, **kwargs)

    def timed(runs, rounds, **kwargs):
        grad = kwargs.get("grad", False)
        with torch.enable_grad() if grad else torch.no_grad():
            graphs = tuple(sum(step(b)[1] for b in batches) for step, batches in runs.values())
        events.append(("train rounds" if grad else "rounds", tuple(runs), rounds, graphs))
        return real_timed(runs, rounds, **kwargs)

    monkeypatch.setattr(timing, "train_epochs", train)
    monkeypatch.setattr(timing, "time_interleaved", timed)
    r = run_demo(backend="eager", infer_rounds=4, train_rounds=3, **TINY)
    assert events == [("train", "graph_adapter"), ("train", "eager PyG"),
                      ("train rounds", ("graph_adapter", "eager PyG"), 3, (r.num_train,) * 2),
                      ("rounds", ("graph_adapter", "eager PyG"), 4, (r.num_test,) * 2)]
    assert r.infer_round_compiles == 0 and r.infer_rounds_seconds > 0
    assert r.train_round_compiles == 0 and r.train_rounds_seconds > 0
    for run in r.runs():
        assert len(run.infer_round_seconds) == 4 and len(run.train_round_seconds) == 3
        # (the spy's extra training steps were put back with the rounds': inference repeats)
        assert run.infer_repeat_gap == 0.0


def test_infer_rounds_must_be_a_positive_int():
    for bad in (0, -1, 2.5, True):
        with pytest.raises(DemoSettingError, match="infer_rounds"):
            run_demo(backend="eager", infer_rounds=bad, **TINY)


def test_layout_tables_are_fitted_as_a_loader_over_every_molecule_fits_them():
    """Every molecule (about 5 s): a subset fits other tables (spill lists of 72 from the
    first half against 105 from all, at 32 graphs a batch)."""
    from graph_adapter.app.datasets import load_nci5k

    graphs, _ = load_nci5k()
    for d in graphs:
        del d.smiles
    budget = ga.Budget.fit(graphs, 32, seed=0)
    for name in ("hyb", "ell"):
        c = ga.FixedSizeLoader(graphs, budget, layout=name).collator
        assert demo._tables(graphs, budget, name) == (c.layout_widths, c.layout_spills)
    assert demo._tables(graphs, budget, "none") == (None, None)
