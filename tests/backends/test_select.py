"""compile(..., select="measure"): per mode, the fastest measured candidate serves.

Cheap backends only ("eager", "aot_eager") and fake clocks: what is tested is
the choice (who is timed, how often, who wins, who serves after), not speed.
"""
import copy
import json
import statistics

import pytest
import torch
from hypothesis import given, strategies as st
from torch_geometric.nn import GINConv, global_add_pool

from graph_adapter.backends import ShapeChangedError, compile
from graph_adapter.backends.select import (CANDIDATES, Measure, Selected, drop_layout_tables,
                                           has_layout_tables, pick)
from graph_adapter.batching import Budget
from graph_adapter.batching import FixedSizeLoader
from graph_adapter.nn import masked_mse_loss
from graph_adapter.nn import ipu_wrap

from _padding import random_graphs


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 8)
        self.conv = GINConv(torch.nn.Linear(8, 8))
        self.conv2 = GINConv(torch.nn.Linear(8, 8))
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x, edge_index, batch):
        h = self.conv(self.lin(x), edge_index).relu()
        h = self.conv2(h, edge_index).relu()
        return self.head(global_add_pool(h, batch)).squeeze(-1)


def _loss(out, b):
    return masked_mse_loss(out, b.y, b.graph_mask)


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _batches(layout, n=4, dtype=torch.float32):
    graphs = random_graphs(torch.Generator().manual_seed(3), 24)
    for g in graphs:
        g.x = g.x.to(dtype)
        g.y = g.y.to(dtype)
    loader = FixedSizeLoader(graphs, Budget(nodes=64, edges=128, graphs=8), shuffle=False,
                             layout=layout, **({"layout_widths": (1, 1)} if layout else {}))
    flats = list(loader)
    return [flats[i % len(flats)] for i in range(n)]


class FakeClock:
    """Seconds that advance only when the test says a step took that long."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _run_mode(sel, flats, costs, clock, steps, training, opt=None):
    """``steps`` calls in one mode; each advances the clock by its candidate's cost."""
    sel.train(training)
    for i in range(steps):
        flat = flats[i % len(flats)]
        if training:
            out = sel(flat)
            out["loss"].backward()
            opt.step()
            opt.zero_grad()
        else:
            with torch.no_grad():
                sel(flat)
        clock.t += costs[sel.serving]


def test_fake_clock_picks_the_fastest_per_mode_then_it_serves_every_call():
    torch.manual_seed(0)
    w = ipu_wrap(Net(), loss_fn=_loss)
    clock = FakeClock()
    sel = compile(w, "eager", select=Measure(steps=3, clock=clock))
    assert isinstance(sel, Selected) and sel.backend == "eager"
    flats = _batches("hyb")
    opt = torch.optim.SGD(w.parameters(), lr=0.01)
    n = 20
    _run_mode(sel, flats, {"compiled": 3.0, "compiled_scatter": 1.0, "eager": 2.0}, clock, n,
              True, opt)
    _run_mode(sel, flats, {"compiled": 0.25, "compiled_scatter": 0.5, "eager": 0.75}, clock, n,
              False)
    tr, inf = sel.choices["training"], sel.choices["inference"]
    assert tr.winner == "compiled_scatter" and inf.winner == "compiled"
    assert tr.medians == {"compiled": 3.0, "compiled_scatter": 1.0, "eager": 2.0}
    assert inf.medians == {"compiled": 0.25, "compiled_scatter": 0.5, "eager": 0.75}
    # each loser: one untimed call + 3 timed; the winner: everything else
    assert sel.served["training"] == {"compiled": 4, "compiled_scatter": n - 8, "eager": 4}
    assert sel.served["inference"] == {"compiled": n - 8, "compiled_scatter": 4, "eager": 4}
    json.dumps({m: c.as_dict() for m, c in sel.choices.items()})
    assert sel.atomic_adds is False  # no generated code ("eager")
    assert "training: compiled_scatter" in sel.report()


def test_the_scatter_candidate_runs_only_where_the_batch_has_tables():
    for layout, names, compiles in ((None, ["compiled", "eager"], 1),
                                    ("hyb", ["compiled", "compiled_scatter", "eager"], 2)):
        torch._dynamo.reset()
        torch.manual_seed(0)
        w = ipu_wrap(Net(), loss_fn=_loss)
        clock = FakeClock()
        sel = compile(w, "aot_eager", select=Measure(steps=1, clock=clock))
        flats = _batches(layout)
        assert has_layout_tables(flats[0]) == (layout is not None)
        _run_mode(sel, flats, {c: 1.0 for c in CANDIDATES}, clock, 8, True,
                  torch.optim.SGD(w.parameters(), lr=0.01))
        assert sorted(sel.choices["training"].medians) == sorted(names), layout
        assert sorted(sel.served["training"]) == sorted(names)
        # one training graph per compiled candidate: compile_count counts both compiles
        assert sel.compile_count == compiles, layout
        if layout is not None:
            seen = sel.candidate("compiled_scatter").signatures[0]
            assert not has_layout_tables(dict.fromkeys(seen))
            assert has_layout_tables(dict.fromkeys(sel.candidate("compiled").signatures[0]))


@pytest.mark.parametrize("winner", ["eager", "compiled"])
def test_eager_wins_when_the_compiled_steps_are_slower(winner):
    torch.manual_seed(0)
    net = Net()
    forwards = []  # forwards that ran outside a compiler (not while Dynamo traces)
    net.register_forward_hook(
        lambda *a: None if torch.compiler.is_compiling() else forwards.append(1))
    w = ipu_wrap(net, loss_fn=_loss)
    clock = FakeClock()
    sel = compile(w, "aot_eager", select=Measure(clock=clock))
    flats = _batches("hyb")
    slow = {"compiled": 5.0, "compiled_scatter": 4.0, "eager": 1.0}
    if winner == "compiled":
        slow = {"compiled": 1.0, "compiled_scatter": 4.0, "eager": 5.0}
    _run_mode(sel, flats, slow, clock, 16, False)
    assert sel.choices["inference"].winner == winner
    count, calls = sel.compile_count, len(forwards)
    before = dict(sel.served["inference"])
    _run_mode(sel, flats, {c: 1.0 for c in CANDIDATES}, clock, 5, False)
    assert sel.served["inference"] == {**before, winner: before[winner] + 5}
    assert sel.compile_count == count  # the winner compiles nothing more
    # the eager winner runs the module itself; the compiled one runs its graph
    assert len(forwards) - calls == (5 if winner == "eager" else 0)
    assert "training" not in sel.choices


@pytest.mark.parametrize("trim", [True, False])
def test_the_eager_candidate_runs_on_the_real_rows(trim):
    """Measure(eager_trim=True) (the default): eager PyG's cost, not the padded path's;
    the wrapper's own trim is put back, so its compiled calls never see it changed."""
    w = ipu_wrap(Net(), loss_fn=_loss)
    clock = FakeClock()
    sel = compile(w, "aot_eager", select=Measure(clock=clock, eager_trim=trim))
    _run_mode(sel, _batches(None), {c: 1.0 for c in CANDIDATES}, clock, 12, False)
    assert sel.served["inference"]["eager"] >= 4 and w.trim is False
    # the first eager call of a signature runs padded (it records the outputs' levels)
    assert w.trim_stats["trimmed"] == (sel.served["inference"]["eager"] - 1 if trim else 0)


def test_a_model_the_eager_candidate_cannot_trim_is_told_the_fix(monkeypatch):
    from graph_adapter.nn import _trim

    def refuse(self, res, counts):
        raise _trim.TrimError("output 'output' of the trimmed call is not the real count")

    monkeypatch.setattr(_trim.TrimPlan, "pad", refuse)
    w = ipu_wrap(Net(), loss_fn=_loss)
    clock = FakeClock()
    sel = compile(w, "eager", select=Measure(clock=clock, candidates=("eager",)))
    with pytest.raises(_trim.TrimError, match=r"not the real count \(compile\(select=\.\.\.\)'s "
                                              r"eager candidate runs trimmed: pass "
                                              r"select=Measure\(eager_trim=False\)"):
        _run_mode(sel, _batches(None), {"eager": 1.0}, clock, 3, False)
    assert w.trim is False


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("layout", [None, "hyb"])
def test_training_through_the_selector_equals_the_plain_wrapper(backend, layout):
    torch.manual_seed(0)
    net = Net().double()
    w_sel = ipu_wrap(net, loss_fn=_loss)
    w_ref = ipu_wrap(copy.deepcopy(net), loss_fn=_loss)
    # the real clock: whichever wins, the first 3 + 3 * 3 steps rotate over every candidate
    sel = compile(w_sel, backend, select="measure")
    flats = _batches(layout, n=14, dtype=torch.float64)
    opt_s = torch.optim.Adam(w_sel.parameters(), lr=0.01)
    opt_r = torch.optim.Adam(w_ref.parameters(), lr=0.01)
    sel.train()
    w_ref.train()
    for flat in flats:
        ls, lr = sel(flat)["loss"], w_ref(flat)["loss"]
        ls.backward()
        lr.backward()
        torch.testing.assert_close(ls, lr, rtol=0, atol=1e-12)
        for ps, pr in zip(w_sel.parameters(), w_ref.parameters()):
            torch.testing.assert_close(ps.grad, pr.grad, rtol=0, atol=1e-12)
        opt_s.step()
        opt_r.step()
        opt_s.zero_grad()
        opt_r.zero_grad()
    assert "training" in sel.choices
    assert len(sel.served["training"]) == (3 if layout else 2)
    for ps, pr in zip(w_sel.parameters(), w_ref.parameters()):
        torch.testing.assert_close(ps, pr, rtol=0, atol=1e-12)
    sel.eval()
    w_ref.eval()
    with torch.no_grad():
        for flat in flats:  # real rows only: the paths may leave different padding rows
            m = flat["graph_mask"]
            torch.testing.assert_close(sel(flat)["output"][m], w_ref(flat)["output"][m], rtol=0,
                                       atol=1e-12)


# --------------------------------------------------------------------------
# The rule, on stubs (no model): random step-time tables, mode switches
# --------------------------------------------------------------------------
class _StubModule(torch.nn.Module):
    def forward(self, flat):
        return {"output": flat["x"]}


class _StubCompiled:
    steps_optimizer = False
    backend = "stub"
    compile_count = 0

    def __call__(self, flat):
        return {"output": flat["x"]}


_FLAT = {"x": torch.zeros(3), "graph_mask": torch.ones(2, dtype=torch.bool)}
_TABLES = {**_FLAT, "in_slots": torch.zeros(3, 1, dtype=torch.long)}
_JUNK = 1000.0  # a step that must never be a sample (a warm-up, or cut by a mode switch)


@given(k=st.integers(1, 4), tables=st.booleans(),
       costs=st.lists(st.lists(st.integers(1, 20), min_size=4, max_size=4), min_size=3,
                      max_size=3),
       switches=st.lists(st.booleans(), max_size=30))
def test_the_winner_is_the_argmin_of_medians_of_exactly_k_timed_steps(k, tables, costs, switches):
    clock = FakeClock()
    mod = _StubModule()
    sel = Selected(mod, _StubCompiled, Measure(steps=k, clock=clock))
    names = [c for c in CANDIDATES if tables or c != "compiled_scatter"]
    table = {c: [float(v) for v in costs[i][:k]] for i, c in enumerate(CANDIDATES)}
    flat = _TABLES if tables else _FLAT
    done = {c: 0 for c in names}
    switches = list(switches)
    for _ in range(len(names) * (k + 1) + len(switches) + 1):
        mod.train()
        sel(flat)
        c = sel.serving
        if "training" in sel.choices:
            break
        first = sel.served["training"][c] == 1
        cut = bool(switches) and switches.pop(0)
        if first or cut:
            clock.t += _JUNK
        else:
            clock.t += table[c][done[c]]
            done[c] += 1
        if cut:  # an eval call in between: the training interval is dropped
            mod.eval()
            sel(flat)
            clock.t += _JUNK
    choice = sel.choices["training"]
    assert choice.samples == {c: table[c] for c in names}  # exactly k each, none of the junk
    medians = {c: statistics.median(table[c]) for c in names}
    assert choice.medians == medians
    best = min(medians.values())
    assert choice.winner == [c for c in names if medians[c] == best][0] == pick(medians)
    # each candidate served its warm-up and its k timed steps (a cut step serves again)
    assert all(sel.served["training"][c] >= k + 1 for c in names)
    mod.train()
    before = dict(sel.served["training"])
    for _ in range(5):
        sel(flat)
    assert sel.served["training"] == {**before, choice.winner: before[choice.winner] + 5}
    # the eval calls, each cut by the next training call, gave no inference samples
    assert "inference" not in sel.choices


def test_drop_layout_tables_keeps_every_other_key():
    flat = {**_TABLES, "out_slots": 1, "in_spill": 2, "out_spill": 3, "atom/in_slots": 4}
    assert drop_layout_tables(flat) == _FLAT
    assert not has_layout_tables(_FLAT)


def test_a_new_budget_raises_whoever_serves():
    torch.manual_seed(0)
    w = ipu_wrap(Net(), loss_fn=_loss).eval()
    clock = FakeClock()
    sel = compile(w, "eager", select=Measure(steps=1, clock=clock,
                                               candidates=("eager",)))
    flat = _batches(None)[0]
    with torch.no_grad():
        sel(flat)
        other = {k: v for k, v in flat.items() if k != "y"}
        with pytest.raises(ShapeChangedError, match="'y' is missing"):
            sel(other)
    assert sel.served["inference"] == {"eager": 1} and sel.compile_count == 0


@pytest.mark.parametrize("select, err, words", [
    ("fast", ValueError, "select='fast'"),
    (True, ValueError, "select=True"),
    (Measure(steps=0), ValueError, "steps=0"),
    (Measure(steps=True), ValueError, "steps=True"),
    (Measure(steps=2.0), ValueError, "steps=2.0"),
    (Measure(clock=3), TypeError, "clock=3"),
    (Measure(sync="x"), TypeError, "sync='x'"),
    (Measure(candidates=("pyg",)), ValueError, "candidates=\\('pyg',\\)"),
    (Measure(candidates=()), ValueError, "candidates=\\(\\)"),
    (Measure(candidates=("eager", "eager")), ValueError, "candidates="),
    (Measure(eager_trim=1), TypeError, "eager_trim=1"),
])
def test_bad_arguments_are_named(select, err, words):
    w = ipu_wrap(Net(), loss_fn=_loss)
    with pytest.raises(err, match=words):
        compile(w, "eager", select=select)


def test_backends_outside_the_process_are_refused():
    w = ipu_wrap(Net(), loss_fn=_loss)
    with pytest.raises(ValueError, match="'ipu-emulator', select=...\\): selection by measurement"):
        compile(w, "ipu-emulator", select="measure")
    with pytest.raises(ValueError, match="candidate"):
        Selected(w, _StubCompiled, Measure()).candidate("pyg")


def test_micro_batches_run_one_at_a_time_on_every_candidate():
    torch.manual_seed(0)
    net = Net().double()
    w = ipu_wrap(net, loss_fn=_loss).eval()
    ref = compile(ipu_wrap(copy.deepcopy(net), loss_fn=_loss).eval(), "eager")
    clock = FakeClock()
    sel = compile(w, "aot_eager", select=Measure(steps=1, clock=clock))
    graphs = random_graphs(torch.Generator().manual_seed(3), 40)
    for g in graphs:
        g.x, g.y = g.x.double(), g.y.double()
    flats = list(FixedSizeLoader(graphs, Budget(nodes=64, edges=128, graphs=8), shuffle=False,
                                 layout="hyb", layout_widths=(1, 1), micro_batches=2))
    served = set()
    with torch.no_grad():
        for i in range(8):
            flat = flats[i % len(flats)]
            got, want = sel(flat), ref(flat)
            served.add(sel.serving)
            m = flat["graph_mask"]
            assert got["output"].shape == want["output"].shape == m.shape  # [F, G]
            torch.testing.assert_close(got["output"][m], want["output"][m], rtol=0, atol=1e-12)
            clock.t += 1.0
    assert served == set(CANDIDATES)
