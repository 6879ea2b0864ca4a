"""The demo's report says only what is true for the run it describes: compiles as the
backend that ran counted them ("no compiler" for eager), batches and graphs counted,
repeatability measured; every line fits 88 columns."""
import pytest
import torch

import graph_adapter as ga
from graph_adapter.app.demo import run_demo
from graph_adapter.app.repeat import repeat_gap
from graph_adapter.app.results import REPORT_WIDTH

pytest.importorskip("rdkit")

TINY = dict(limit=40, epochs=1, hidden=8, layers=1, batch_graphs=16, progress=False)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield


def _row(report: str, label: str) -> str:
    return next(line for line in report.splitlines() if line.startswith(label))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_eager_backend_report_says_no_compiler_and_counts_what_ran():
    r = run_demo(backend="eager", **TINY)
    text = r.report()
    compiles = _row(text, "compiles")
    assert "no compiler" in compiles and not any(ch.isdigit() for ch in compiles)
    assert r.adapter.compiles is None
    for run in (r.adapter, r.eager):
        assert run.batches_per_epoch == run.steps  # one epoch: counted, not planned
        assert run.mean_graphs_per_batch == pytest.approx(run.train_graphs / run.steps)
        assert run.train_graphs == r.num_train
        assert run.repeat_gap == 0.0  # eager on CPU repeats bit for bit
    assert _row(text, "deterministic [2]").split()[2:] == ["yes", "yes"]
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
    trained, evaluated = (int(n) for n in _row(r.report(), "compiles").split()[-3::2])
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


def test_known_nondeterminism_is_inductor_on_several_threads_without_deterministic_mode():
    from graph_adapter.app.repeat import known_nondeterminism

    assert "atomic adds" in known_nondeterminism("inductor", 2, False)
    assert known_nondeterminism("inductor", 1, False) is None  # one thread: one order
    assert known_nondeterminism("inductor", 2, True) is None  # ATen's deterministic kernels
    assert known_nondeterminism("aot_eager", 2, False) is None  # ATen's CPU kernels


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_report_says_when_a_run_is_not_deterministic():
    r = run_demo(backend="eager", eager_baseline=False, **TINY)
    r.nondeterminism = "a cause"
    text = r.report()
    assert _row(text, "deterministic [2]").split()[2] == "no"
    note = " ".join(text.split("[1]", 1)[1].split())
    assert "not deterministic here (a cause)" in note and "--deterministic" in note
