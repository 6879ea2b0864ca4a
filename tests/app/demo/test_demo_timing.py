"""The demo's training is timed side by side: after every run has trained and been
evaluated, each run's training step goes over a fixed list of its training batches in
interleaved rounds (the runs of one round share the machine's speed of the moment), and
the runs' state is put back afterwards, so the rounds change no reported figure."""
import copy

import pytest
import torch
from torch import nn

from graph_adapter.app.demo import graph as demo, timing
from graph_adapter.app.cli import build_parser
from graph_adapter.app.demo.graph import run_demo
from graph_adapter.app.preflight import DemoSettingError
from graph_adapter.app.demo.results import REPORT_WIDTH, RunStats

pytest.importorskip("rdkit")

from _demo import TINY, _fresh_dynamo  # noqa: E402,F401  (an autouse fixture)


class _FakeClock:
    """Time moves only when a fake step says so."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class _Net(nn.Module):
    """A step changes its weights, BatchNorm's running statistics and Adam's state."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 1)
        self.norm = nn.BatchNorm1d(3)

    def forward(self, x):
        return self.lin(self.norm(x))


def _state(modules, opt):
    """Everything a training step changes, copied (bit-for-bit comparison)."""
    return ([copy.deepcopy(m.state_dict()) for m in modules], copy.deepcopy(opt.state_dict()))


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _training_run(name, clock, seconds, modes_seen, graphs_a_batch=4, batches=3):
    """A real training step (forward, backward, Adam) on a small net, taking
    ``seconds(round)`` fake seconds a batch; records the mode it ran in."""
    torch.manual_seed(len(name))
    net = _Net()
    opt = torch.optim.Adam(net.parameters(), lr=0.1)
    net.train()
    for _ in range(2):  # trained a little: Adam has state, BatchNorm statistics moved
        opt.zero_grad()
        net(torch.randn(graphs_a_batch, 3)).sum().backward()
        opt.step()
    net.eval()  # as after the MAE pass
    data = [torch.randn(graphs_a_batch, 3) for _ in range(batches)]
    calls = [0]

    def step(x):
        assert torch.is_grad_enabled()
        modes_seen.append((name, net.training))
        loss = net(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        clock.now += seconds(calls[0] // batches)
        calls[0] += 1
        return float(loss.detach()), graphs_a_batch

    stats = RunStats(name)
    training = timing.Training(step, data, graphs_a_batch * batches, [net], opt, net)
    return timing.Timed(stats, lambda b: (0.0, 0), [], [], training), net, opt


# --------------------------------------------------------------------------
# interleaving, rotation, warm-up (a fake clock)
# --------------------------------------------------------------------------
def test_training_rounds_run_with_gradients_each_run_once_a_round_in_rotating_turns():
    clock = _FakeClock()
    calls = []

    def step_of(name, seconds_a_batch):
        def step(batch):
            assert torch.is_grad_enabled()  # training steps: backward needs the graph
            calls.append((name, batch))
            clock.now += seconds_a_batch
            return float(batch), 2
        return step

    runs = {"a": (step_of("a", 1.0), [1, 2]), "b": (step_of("b", 2.0), [3]),
            "c": (step_of("c", 0.5), [4, 5])}
    with torch.no_grad():  # (the rounds turn gradients on themselves)
        res = timing.time_interleaved(runs, 4, clock=clock, grad=True)
    a, b, c = [("a", 1), ("a", 2)], [("b", 3)], [("c", 4), ("c", 5)]
    assert calls == a + b + c + b + c + a + c + a + b + a + b + c  # round r starts with r mod 3
    assert res == {"a": ([2.0] * 4, [[1.0, 2.0]] * 4), "b": ([2.0] * 4, [[3.0]] * 4),
                   "c": ([1.0] * 4, [[4.0, 5.0]] * 4)}


def test_time_training_fills_the_rounds_and_leaves_warmup_rounds_out_of_every_run():
    clock, modes = _FakeClock(), []
    # run a's first round is 4x slow (a warm-up); b is 2x slower than a, steadily,
    # except in round 3, when the whole machine is 3x slower (both runs)
    slow = {3: 3.0}
    ta, _, _ = _training_run("a", clock, lambda r: (4.0 if r == 0 else 1.0) * slow.get(r, 1.0),
                             modes)
    tb, _, _ = _training_run("b", clock, lambda r: 2.0 * slow.get(r, 1.0), modes)
    seconds = timing.time_training([ta, tb], 5, progress=False, clock=clock)
    assert seconds >= 0
    a, b = ta.stats, tb.stats
    assert a.train_round_seconds == [12.0, 3.0, 3.0, 9.0, 3.0]
    assert b.train_round_seconds == [6.0, 6.0, 6.0, 18.0, 6.0]
    assert a.train_round_graphs == b.train_round_graphs == 12
    assert a.train_warmup_rounds == b.train_warmup_rounds == 1  # a's rule, for both runs
    # every kept round's ratio is 2.0, round 3's slowdown included; the first round's is not
    assert a.training_ratio(b) == (2.0, 2.0, 2.0)
    assert a.train_graphs_per_second == 12 / 3.0 and b.train_graphs_per_second == 12 / 6.0
    assert all(mode for _, mode in modes)  # every step ran in train mode


def test_time_training_puts_state_and_mode_back():
    """Weights, BatchNorm statistics, Adam's state and the mode are as before, bit for
    bit; during the rounds the models were in train mode."""
    clock, modes = _FakeClock(), []
    runs = [_training_run(n, clock, lambda r: 1.0, modes) for n in ("a", "b")]
    before = [_state([net], opt) for _, net, opt in runs]
    rng = torch.get_rng_state()
    timing.time_training([t for t, _, _ in runs], 3, progress=False, clock=clock)
    assert len(modes) == 2 * 3 * 3 and all(mode for _, mode in modes)
    for (t, net, opt), state in zip(runs, before):
        assert not net.training  # back in eval mode, as the MAE pass left it
        assert _same(_state([net], opt), state), t.stats.name
        assert len(t.stats.train_round_seconds) == 3
    assert torch.equal(torch.get_rng_state(), rng)


def test_time_training_leaves_out_runs_that_cannot_be_put_back_and_a_run_alone():
    clock, modes = _FakeClock(), []
    ta, _, _ = _training_run("a", clock, lambda r: 1.0, modes)
    tb, _, _ = _training_run("b", clock, lambda r: 1.0, modes)
    tc, _, _ = _training_run("c", clock, lambda r: 1.0, modes)
    tc.training = None  # (an optimizer stepped inside the backend: no state to restore)
    timing.time_training([ta, tb, tc], 2, progress=False, clock=clock)
    assert len(ta.stats.train_round_seconds) == len(tb.stats.train_round_seconds) == 2
    assert tc.stats.train_round_seconds == []
    modes.clear()
    assert timing.time_training([tc, _training_run("d", clock, lambda r: 1.0, modes)[0]],
                                     2, progress=False) == 0.0
    assert modes == []  # a run alone: nothing to compare it with, not run


def test_first_graphs_takes_leading_batches_until_enough_real_graphs():
    sizes = [5, 7, 3, 9]
    assert timing.first_graphs(sizes, int, 12) == ([5, 7], 12)
    assert timing.first_graphs(sizes, int, 13) == ([5, 7, 3], 15)
    assert timing.first_graphs(sizes, int, 100) == (sizes, 24)  # fewer: every batch


def test_compile_count_reads_dynamo_and_the_adapters_own_count(monkeypatch):
    graphs = [10]
    monkeypatch.setattr(timing, "graphs_compiled", lambda: graphs[0])

    class Compiled:
        compile_count = 2

    c = Compiled()
    count = timing.CompileCount(c, "inductor")
    assert count.since() == 0
    c.compile_count = 3  # a backend compiling outside Dynamo
    assert count.since() == 1
    graphs[0] = 14
    assert count.since() == 4
    eager = timing.CompileCount(c, "eager")  # (eager's count is of programs run)
    c.compile_count = 9
    assert eager.since() == 0


# --------------------------------------------------------------------------
# the demo itself (small real runs)
# --------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_training_rounds_change_no_reported_figure(monkeypatch):
    """Each run's state right before the rounds is its state right after them, bit for
    bit (so the inference rounds that follow repeat the MAE pass's errors exactly), and
    the rounds trained the runs' own training steps on epoch 1's first batches."""
    seen = {}
    real = timing.time_training

    def spy(timed, rounds, progress, **kwargs):
        runs = [t for t in timed if t.training is not None]
        before = {t.stats.name: _state(t.training.modules, t.training.optimizer)
                  for t in runs}
        modes = {t.stats.name: t.training.mode.training for t in runs}
        out = real(timed, rounds, progress, **kwargs)
        for t in runs:
            seen[t.stats.name] = (
                _same(_state(t.training.modules, t.training.optimizer), before[t.stats.name]),
                t.training.mode.training == modes[t.stats.name])
        return out

    monkeypatch.setattr(timing, "time_training", spy)
    r = run_demo(backend="eager", train_rounds=3, **TINY)
    assert seen == {"graph_adapter": (True, True), "eager PyG": (True, True)}
    for run in r.runs():
        assert len(run.train_round_seconds) == 3 and run.train_round_graphs == r.num_train
        assert run.infer_repeat_gap == 0.0 and run.repeat_gap == 0.0
    assert r.train_round_compiles == 0 and r.train_rounds == 3
    # the same run without training rounds reports the same losses and errors
    plain = run_demo(backend="eager", train_rounds=0, **TINY)
    assert plain.train_rounds == 0 and all(not x.train_round_seconds for x in plain.runs())
    for a, b in zip(r.runs(), plain.runs()):
        assert (a.test_mae, a.epoch_loss, a.test_mae_eager_eval) == \
            (b.test_mae, b.epoch_loss, b.test_mae_eager_eval)
    flat = " ".join(plain.report().split())
    assert "training" in flat and "(in the runs' own epochs)" in flat
    assert "in its own epochs, run after run" not in plain.report()


@pytest.mark.extended  # PyG's dynamic=True route traced under aot_eager: ~15 s quiet
@pytest.mark.filterwarnings("ignore")
def test_compiled_runs_compile_nothing_in_the_training_rounds():
    """aot_eager for the adapter and PyG's route: every training graph exists after the
    epochs, so the rounds (train mode again after the MAE pass) compile none."""
    r = run_demo(backend="aot_eager", **{**TINY, "pyg_compile": True},
                 pyg_compile_backend="aot_eager", train_rounds=2, infer_rounds=2)
    assert r.train_round_compiles == 0 and r.infer_round_compiles == 0
    assert all(len(x.train_round_seconds) == 2 for x in r.runs())
    assert r.adapter.compiles == r.adapter.compiles_training + 1  # one inference compile


def test_report_gives_the_interleaved_training_ratio_and_keeps_the_epochs_figure():
    r = run_demo(backend="eager", train_rounds=2, **TINY)
    a, e = r.adapter, r.eager
    a.train_round_seconds, e.train_round_seconds = [8.0, 1.0, 1.0, 4.0], [8.0, 2.0, 6.0, 4.0]
    a.train_round_graphs, e.train_round_graphs = 20, 10
    a.train_warmup_rounds = e.train_warmup_rounds = 1
    r.train_rounds = 4
    text = r.report(explain=True)  # the method notes say how the rounds ran
    flat = " ".join(text.split())
    # per-round ratios (20 / a) / (10 / e) after the first: 4, 12, 2
    assert a.training_ratio(e) == (4.0, 2.0, 12.0)
    assert ("graph_adapter / eager PyG, steady graphs/s: training 4.00x (median of 3 "
            "interleaved rounds, range 2.00-12.00), inference") in flat
    assert text.splitlines()[[i for i, line in enumerate(text.splitlines())
                              if line.startswith("training, graphs/s")][0]].split()[-2:] \
        == ["20", "2"]  # 20 graphs over a's median kept round (1 s); 10 over e's (4 s)
    epochs = next(line for line in text.splitlines()
                  if line.startswith("  in its own epochs, run after run")).split()
    assert epochs[-2:] == [f"{a.epoch_graphs_per_second:,.0f}",
                           f"{e.epoch_graphs_per_second:,.0f}"]
    assert "in 4 interleaved rounds, its weights and optimizer state put back" in flat
    assert "(1 left out)" in flat
    d = r.as_dict()
    assert d["adapter"]["training_ratio_to_eager"] == [4.0, 2.0, 12.0]
    assert d["adapter"]["train_graphs_per_second"] == 20.0
    assert d["adapter"]["epoch_graphs_per_second"] == a.epoch_graphs_per_second
    assert "compiled during the timed training rounds" not in flat
    r.train_round_compiles = 1
    assert "1 graph compiled during the timed training rounds" in " ".join(r.report().split())
    assert max(len(line) for line in r.report().splitlines()) <= REPORT_WIDTH


def test_train_rounds_must_be_a_non_negative_int():
    for bad in (-1, 2.5, True, "3"):
        with pytest.raises(DemoSettingError, match="train_rounds"):
            run_demo(backend="eager", train_rounds=bad, **TINY)


def test_cli_passes_the_rounds_through(monkeypatch, capsys):
    from graph_adapter.app import cli

    seen = []

    class _Result:
        def report(self):
            return "report"

    monkeypatch.setattr(cli, "run_demo", lambda cfg: seen.append(cfg) or _Result())
    assert cli.main(["demo", "--train-rounds", "7", "--infer-rounds", "9", "--quiet"]) == 0
    assert cli.main(["demo", "--quiet"]) == 0
    assert [(c.train_rounds, c.infer_rounds) for c in seen] == [
        (7, 9), (demo.DemoConfig.train_rounds, demo.DemoConfig.infer_rounds)]
    assert "--train-rounds N" in build_parser()._subparsers._group_actions[0].choices[
        "demo"].format_help()


def test_cli_passes_background_through(monkeypatch):
    from graph_adapter.app import cli

    seen = []

    class _Result:
        def report(self):
            return "report"

    monkeypatch.setattr(cli, "run_demo", lambda cfg: seen.append(cfg) or _Result())
    for flags in (["--background"], ["--no-background"], []):
        assert cli.main(["demo", "--quiet", *flags]) == 0
    assert [c.background for c in seen] == [True, False, None]


@pytest.mark.extended  # ~30 s: the demo's runs and a compile in a child process
def test_a_background_run_trains_eagerly_then_reports_the_switch(monkeypatch):
    background = pytest.importorskip("graph_adapter.tuning.background")  # (the tuning wing)

    monkeypatch.setattr(background, "MEASURED_STEPS", 1)
    r = demo.run_demo(backend="aot_eager", background=True, eager_baseline=True, **TINY)
    text = " ".join(r.report().split())
    # a run this short cannot pay a cold compile back: it compiles after training
    assert "then compiled (train " in text and "too few steps to pay back a cold compile" in text
    assert "(eagerly for" in text
    assert "(train " in r.adapter.background and ", eval " in r.adapter.background, r.adapter
    assert r.adapter.compiles_training >= 1 and r.adapter.compiles > r.adapter.compiles_training


def _without_paragraphs(text, starts):
    """The report's lines without the wrapped paragraphs that begin with one of ``starts``."""
    out, skipping = [], False
    for line in text.splitlines():
        if not line.startswith("  "):
            skipping = any(line.startswith(s) for s in starts)
        if not skipping:
            out.append(line)
    return out


@pytest.mark.extended  # ~30 s: three runs and a compile in a child process
def test_the_default_report_fits_45_lines(monkeypatch):
    """The default report's form (adapter compiling in the background, eager PyG, PyG
    compiled) fits 45 lines, the caveats of a busy machine left out (they print on one
    only) and those of aot_eager's compile at the switch (inductor loads the child's
    entry there instead)."""
    background = pytest.importorskip("graph_adapter.tuning.background")  # (the tuning wing)

    monkeypatch.setattr(background, "MEASURED_STEPS", 1)
    r = demo.run_demo(backend="aot_eager", background=True,
                      **{**TINY, "pyg_compile": True, "pyg_compile_backend": "aot_eager"})
    lines = _without_paragraphs(r.report(), ("other work kept the CPUs busy",
                                             "1 graph compiled during the timed"))
    assert len(lines) <= 45, "\n".join(lines)
    assert any("PyG compiled" in x for x in lines) and any("--explain" in x for x in lines)
