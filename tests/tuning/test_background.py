"""``compile(..., background=True)`` (``backends/background.py``): eager calls while a
forked child compiles, then the compiled program, as one model.

With ``"aot_eager"`` (cheap; its child traces the call, the parent compiles at the
switch): training and inference across the switch equal a plain eager run (float64:
losses, gradients, parameters, Adam's state, BatchNorm's buffers); a switch whose
compiled steps are slower goes back to eager and says why; a child that fails warns
once and leaves its mode eager; a model changed after the switch recompiles (no stale
graph); an interpreter that exits with a compile running leaves no process behind;
refusals name why. (extended) With ``"inductor"``: the child's precompiled entry is
what the parent loads at the switch (no compile in the parent), and a process that
exits mid-compile waits for the entry, which the next process loads.
"""
import copy
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from torch import nn
from torch_geometric.nn import global_add_pool

import graph_adapter as ga
from graph_adapter.tuning import background as B
from graph_adapter.tuning import precompile as P

from _padding import pad_batch, random_graphs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Net(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.lin = nn.Linear(4, width)
        self.norm = nn.BatchNorm1d(width)
        self.head = nn.Linear(width, 1)
        self.scale = 1.0

    def forward(self, data):
        h = self.norm(self.lin(data.x).relu()) * self.scale  # (a bias right before
        # BatchNorm gets no gradient, and Adam turns its rounding noise into steps)
        return self.head(global_add_pool(h, data.batch)).squeeze(-1)


class ReadsItem(Net):
    def forward(self, data):  # a data-dependent Python branch: fullgraph cannot trace it
        if float(data.x.sum().item()) > 1e9:
            return self.head(global_add_pool(self.lin(data.x), data.batch)).squeeze(-1)
        return super().forward(data)


def _batches(n=10, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [{k: (v.double() if v.is_floating_point() else v)
             for k, v in pad_batch(random_graphs(gen, 4), 30, 60, 6).items()} for _ in range(n)]


def _pair(cls=Net):
    torch.manual_seed(0)
    model = cls().double()
    a = ga.ipu_wrap(model, loss_fn=ga.masked_loss("mse"), trim=True).train()
    return a, copy.deepcopy(a)


@pytest.fixture
def quick(monkeypatch):
    """Switch after two timed eager steps and keep the compiled program however it times."""
    monkeypatch.setattr(B, "MEASURED_STEPS", 2)
    monkeypatch.setattr(B, "SLOWER_BY", float("inf"))


def _train(model_call, wrapped, batches, wait_after=None, compiled=None, each=None):
    """Adam steps over ``batches``; ``each(i)`` after step ``i`` (checks of the state)."""
    opt = torch.optim.Adam(wrapped.parameters(), lr=1e-2)
    losses = []
    for i, flat in enumerate(batches):
        loss = model_call(flat)["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
        if i == wait_after:
            assert compiled.wait(120), compiled.stats.background.summary()
        if each is not None:
            each(i)
    return torch.stack(losses), opt


def test_training_across_the_switch_equals_plain_eager(quick):
    ref, bg = _pair()
    c = ga.compile(bg, "aot_eager", background=True)
    batches = _batches(10)
    want, ref_opt = _train(ref, ref, batches)
    got, opt = _train(c, bg, batches, wait_after=0, compiled=c)
    (info,) = c.stats.background.keys
    assert info["state"] == "compiled" and info["mode"] == "train", c.stats.background.summary()
    # call 0 started the child; wait() switched at call 1
    done = c.stats.background
    assert info["switched_at"] == 1 and done.eager_calls == 1 and done.compiled_calls == 9
    assert c.compile_count >= 1
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)
    for (name, p), q in zip(ref.named_parameters(), bg.parameters()):
        torch.testing.assert_close(q, p, rtol=0, atol=1e-10, msg=name)
        torch.testing.assert_close(opt.state[q]["exp_avg_sq"], ref_opt.state[p]["exp_avg_sq"],
                                   rtol=0, atol=1e-12, msg=name)
    for (name, b), b2 in zip(ref.named_buffers(), bg.buffers()):
        torch.testing.assert_close(b2, b, rtol=0, atol=1e-10, msg=name)


def test_inference_across_the_switch_equals_plain_eager(quick):
    ref, bg = _pair()
    ref.eval()
    bg.eval()
    c = ga.compile(bg, "aot_eager", background=True)
    with torch.no_grad():
        for i, flat in enumerate(_batches(8)):
            real = flat["graph_mask"].bool()  # (padded slots: zeros eager, anything compiled)
            torch.testing.assert_close(c(flat)["output"][real], ref(flat)["output"][real],
                                       rtol=0, atol=1e-12)
            if i == 0:
                assert c.wait(120)
    (info,) = c.stats.background.keys
    assert info["mode"] == "eval+no_grad" and info["state"] == "compiled"
    assert c.stats.background.compiled_calls == 7


def test_a_short_run_defers_a_cold_compile_past_its_calls_and_keeps_its_threads(quick):
    """expect_calls(n): a cold compile that cannot pay back within the run's n calls
    waits for the last of them; until then no child runs and no thread is given up;
    then it compiles and switches, and training across it equals plain eager."""
    ref, bg = _pair()
    c = ga.compile(bg, "aot_eager", background=True)
    batches = _batches(10)
    c.expect_calls(6)
    threads = torch.get_num_threads()

    def each(i):
        (info,) = c.stats.background.keys
        if i < 2:  # MEASURED_STEPS eager steps timed first (a step ends at the next call)
            assert info["state"] == "timing" and info["pid"] is None, c.stats.background.summary()
        elif i < 5:
            assert info["state"] == "deferred" and info["pid"] is None, c.stats.background.summary()
            assert "of the 3 calls left" in info["deferred"], info["deferred"]  # (from call 2)
            assert torch.get_num_threads() == threads
        elif i == 5:  # the last expected call starts the compile
            assert info["pid"] is not None, c.stats.background.summary()
            assert c.wait(120), c.stats.background.summary()

    got, _ = _train(c, bg, batches, each=each)
    (info,) = c.stats.background.keys
    assert info["state"] == "compiled" and info["switched_at"] == 6, c.stats.background.summary()
    assert "deferred past the run's expected calls" in c.stats.background.summary()
    want, _ = _train(ref, ref, batches)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


def test_a_long_run_or_wait_starts_the_compile_at_once(quick, monkeypatch):
    """Where the expected calls are long enough to pay a cold compile back, it starts
    after the timed steps; wait() starts a deferred one; negative counts are refused."""
    _, bg = _pair()
    c = ga.compile(bg, "aot_eager", background=True)
    c.expect_calls(1000)
    monkeypatch.setattr(B, "COLD_COMPILE_S", 0.0)
    for flat in _batches(3):
        c(flat)
    info = c.stats.background.keys[0]
    assert info["pid"] is not None and info["deferred"] is None
    assert c.wait(120)
    monkeypatch.setattr(B, "COLD_COMPILE_S", 1e9)
    _, bg2 = _pair()
    c2 = ga.compile(bg2, "aot_eager", background=True)
    c2.expect_calls(1000)
    for flat in _batches(3):
        c2(flat)
    assert c2.stats.background.keys[0]["state"] == "deferred"
    # switches at its next call
    assert c2.wait(120) and c2.stats.background.keys[0]["state"] == "ready"
    c2(_batches(1)[0])
    assert c2.stats.background.keys[0]["state"] == "compiled"
    with pytest.raises(ValueError, match="expect_calls"):
        c2.expect_calls(-1)


@pytest.mark.parametrize("serves", [True, False])
def test_a_warm_key_loads_its_entry_here_without_a_child(quick, monkeypatch, serves):
    """An entry on disk: the key runs MEASURED_STEPS eager steps on all threads and this
    process loads the entry (no child, no thread given up); where the entry turns out
    not to serve (its sources changed), a child compiles as for a cold key. Training
    across either switch equals plain eager."""
    from graph_adapter.backends import engines as E
    monkeypatch.setattr(E.DynamoEngine, "has_saved_entry", lambda self, flat: True)
    monkeypatch.setattr(E.DynamoEngine, "load_only", lambda self, flat, key: serves)
    ref, bg = _pair()
    c = ga.compile(bg, "aot_eager", background=True)
    threads = torch.get_num_threads()
    batches = _batches(8)

    def each(i):
        info = c.stats.background.keys[0]
        if i < 2:
            assert info["state"] == "warm" and torch.get_num_threads() == threads
        elif i == 2 and not serves:
            assert info["pid"] is not None, c.stats.background.summary()  # a child compiles instead
            assert c.wait(120)

    got, _ = _train(c, bg, batches, each=each)
    info = c.stats.background.keys[0]
    assert info["state"] == "compiled", c.stats.background.summary()
    if serves:
        assert info["pid"] is None and info["loaded"] and info["switched_at"] == 2
        assert "precompiled entry loaded in" in c.stats.background.summary()
        said = c.stats.background.summary()
        assert said.count("train:") == 1, said  # one part a key
    want, _ = _train(ref, ref, batches)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


def test_a_short_run_loads_a_warm_entry_after_its_calls(quick, monkeypatch):
    """expect_calls(n) on a warm key: where the calls left cannot pay the entry's load
    back (WARM_LOAD_S), the load waits for the first call after the expected ones (no call
    of the run pays it); with a cheap load it
    happens after the timed steps, as without a count. Training equals plain eager."""
    from graph_adapter.backends import engines as E
    loads = []
    monkeypatch.setattr(E.DynamoEngine, "has_saved_entry", lambda self, flat: True)
    monkeypatch.setattr(E.DynamoEngine, "load_only",
                        lambda self, flat, key: loads.append(key) or True)
    for cost, at in ((1e9, 6), (0.0, 2)):  # (6: the first call after the 6 expected)
        monkeypatch.setattr(B, "WARM_LOAD_S", cost)
        loads.clear()
        ref, bg = _pair()
        c = ga.compile(bg, "aot_eager", background=True)
        c.expect_calls(6)
        batches = _batches(8)

        def each(i):
            info = c.stats.background.keys[0]
            if 2 <= i < at:
                assert info["state"] == "deferred" and not loads, c.stats.background.summary()
                assert "loading its precompiled entry" in info["deferred"], info["deferred"]

        got, _ = _train(c, bg, batches, each=each)
        info = c.stats.background.keys[0]
        assert len(loads) == 1 and info["pid"] is None, c.stats.background.summary()
        assert info["state"] == "compiled" and info["switched_at"] == at, \
            c.stats.background.summary()
        assert ("its load deferred" in c.stats.background.summary()) == (at == 6)
        want, _ = _train(ref, ref, batches)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


def test_a_switch_that_is_slower_goes_back_to_eager_and_says_why(monkeypatch):
    monkeypatch.setattr(B, "MEASURED_STEPS", 2)
    monkeypatch.setattr(B, "SLOWER_BY", -1.0)  # any compiled step counts as slower
    ref, bg = _pair()
    c = ga.compile(bg, "aot_eager", background=True)
    batches = _batches(10)
    want, _ = _train(ref, ref, batches)
    got, _ = _train(c, bg, batches, wait_after=2, compiled=c)  # eager steps 0-2 timed
    (info,) = c.stats.background.keys
    assert info["state"] == "eager" and "compiled steps took" in info["why"], info
    assert info["compiled_step_s"] is not None and info["eager_step_s"] is not None
    # calls 3-5 compiled (the switch and the 2 timed), then eager again
    assert c.stats.background.compiled_calls == 3 and c.stats.background.eager_calls == 7, c.stats
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


def test_the_judge_interleaves_compiled_and_eager_steps_then_keeps_the_faster(monkeypatch):
    """After the switch, calls alternate compiled / eager until MEASURED_STEPS of each
    are timed (a slow moment of the machine hits both sides), then stay compiled; after
    wait() every call is compiled (the caller asked for the compiled program)."""
    monkeypatch.setattr(B, "MEASURED_STEPS", 2)
    monkeypatch.setattr(B, "SLOWER_BY", 100.0)  # judged, but never undone
    ref, bg = _pair()
    c = ga.compile(bg, "aot_eager", background=True)
    batches = _batches(10)
    c(batches[0])
    t0 = time.perf_counter()  # the child's end, seen without wait() (which turns it off)
    while c.stats.background.keys[0]["state"] != "ready":
        assert time.perf_counter() - t0 < 120, c.stats.background.summary()
        time.sleep(0.05)
    ran = []
    for flat in batches[1:]:
        before = c.stats.background.compiled_calls
        c(flat)
        ran.append(c.stats.background.compiled_calls - before)
    assert ran == [1, 0, 1, 0, 1, 1, 1, 1, 1], ran
    info = c.stats.background.keys[0]
    assert info["state"] == "compiled" and info["compiled_step_s"] is not None
    _, bg2 = _pair()
    c2 = ga.compile(bg2, "aot_eager", background=True)
    c2(batches[0])
    assert c2.wait(120)
    for flat in batches[1:6]:
        c2(flat)
    assert c2.stats.background.compiled_calls == 5


def test_a_failed_background_compile_warns_once_and_stays_eager(quick):
    ref, bg = _pair(ReadsItem)
    c = ga.compile(bg, "aot_eager", background=True)
    batches = _batches(6)
    c(batches[0])
    with pytest.warns(RuntimeWarning, match="train compile failed in its process") as rec:
        assert c.wait(120)
    assert len([w for w in rec if "failed in its process" in str(w.message)]) == 1
    (info,) = c.stats.background.keys
    assert info["state"] == "eager" and info["why"], info
    want, _ = _train(ref, ref, batches[1:])
    got, _ = _train(c, bg, batches[1:])
    assert c.stats.background.compiled_calls == 0
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


def test_a_model_changed_after_the_switch_recompiles(quick):
    ref, bg = _pair()
    c = ga.compile(bg, "aot_eager", background=True)
    batches = _batches(8)
    _train(c, bg, batches[:6], wait_after=0, compiled=c)
    assert c.stats.background.keys[0]["state"] == "compiled"
    before = c.compile_count
    bg.model.scale = 3.0  # read in forward (a graph input or a guard: never stale)
    bg.model.norm.eval()  # running statistics instead of the batch's: a new graph
    real = batches[6]["graph_mask"].bool()  # (same grad mode: the compiled key)
    out = c(batches[6])["output"][real]
    assert c.stats.background.compiled_calls == 6  # calls 1-6
    torch.testing.assert_close(out, bg(batches[6])["output"][real], rtol=0, atol=1e-12)
    assert c.compile_count > before


def test_the_child_runs_on_idle_time_and_this_process_keeps_its_threads():
    """By default a compile takes only CPU time the eager steps leave (SCHED_IDLE), and
    torch here keeps its thread count while it runs."""
    _, bg = _pair()
    threads = torch.get_num_threads()
    c = ga.compile(bg, "aot_eager", background=True)
    c(_batches(1)[0])
    pid = c.stats.background.keys[0]["pid"]
    assert pid is not None and torch.get_num_threads() == threads
    seen, end = None, time.perf_counter() + 10.0
    while time.perf_counter() < end:  # the child sets its policy first thing
        try:
            seen = os.sched_getscheduler(pid)
        except OSError:  # it ended already
            break
        if seen == os.SCHED_IDLE:
            break
        time.sleep(0.005)
    assert seen == os.SCHED_IDLE, seen
    assert c.wait(120) and torch.get_num_threads() == threads


def test_a_long_compile_gets_a_thread_after_GIVE_UP_AFTER_seconds(monkeypatch):
    """A child still compiling GIVE_UP_AFTER seconds after it started gets a core: torch
    here runs on one thread fewer until it ends, then on all again; stats say when."""
    from graph_adapter.backends import engines as E
    slow_warm = E.DynamoEngine.warm

    def warm(self, flat):  # (runs in the child: a compile that takes a while)
        time.sleep(1.5)
        return slow_warm(self, flat)

    monkeypatch.setattr(E.DynamoEngine, "warm", warm)
    monkeypatch.setattr(B, "GIVE_UP_AFTER", 0.5)
    _, bg = _pair()
    threads = torch.get_num_threads()
    c = ga.compile(bg, "aot_eager", background=True)
    batches = _batches(3)
    c(batches[0])
    assert torch.get_num_threads() == threads
    assert c.stats.background.keys[0]["thread_given_at_s"] is None
    time.sleep(0.7)
    c(batches[1])  # a call polls the child: past GIVE_UP_AFTER, still compiling
    info = c.stats.background.keys[0]
    assert info["state"] == "compiling" and info["thread_given_at_s"] >= 0.5, info
    assert torch.get_num_threads() == max(1, threads - 1)
    if os.geteuid() == 0:  # allowed to take it off idle time: a busy machine gives it turns
        assert os.sched_getscheduler(info["pid"]) == os.SCHED_OTHER
    assert c.wait(120) and torch.get_num_threads() == threads
    c(batches[2])
    assert "a thread given to its compile after" in c.stats.background.summary()
    said = c.stats.background.summary()
    assert said.count("train") == 1, said  # one part a key


def test_a_compiled_model_dropped_mid_compile_stops_its_child_and_gives_the_thread_back(
        monkeypatch):
    import gc

    monkeypatch.setattr(B, "GIVE_UP_AFTER", 0.0)  # the child gets a core from the start
    _, bg = _pair()
    threads = torch.get_num_threads()
    c = ga.compile(bg, "aot_eager", background=True)
    c(_batches(1)[0])
    pid = c.stats.background.keys[0]["pid"]
    assert torch.get_num_threads() == max(1, threads - 1)  # the child's core
    del c
    gc.collect()
    assert _gone(pid, within=10.0)
    assert torch.get_num_threads() == threads


def test_close_stops_the_running_compile_and_the_waiting_ones():
    _, bg = _pair()
    threads = torch.get_num_threads()
    c = ga.compile(bg, "aot_eager", background=True)
    batches = _batches(2)
    c(batches[0])  # train: its child starts
    bg.eval()
    with torch.no_grad():
        c(batches[1])  # eval+no_grad: waits its turn
    pid = c.stats.background.keys[0]["pid"]
    c.close()
    assert [(k["state"], k["why"]) for k in c.stats.background.keys] == \
        [("eager", "stopped by close()")] * 2
    assert _gone(pid) and torch.get_num_threads() == threads
    with torch.no_grad():
        c(batches[1])  # still answers, eagerly
    assert c.stats.background.compiled_calls == 0


@pytest.mark.parametrize("backend, match", [("eager", "serve backends 'inductor'"),
                                            ("ipu-emulator", "poptorch compiles")])
def test_background_true_where_it_cannot_serve_is_refused_by_name(backend, match):
    _, bg = _pair()
    with pytest.raises(ValueError, match=match):
        ga.compile(bg, backend, background=True)


def test_background_with_select_is_refused_and_the_default_reaches_compile(monkeypatch):
    _, bg = _pair()
    with pytest.raises(ValueError, match="pass one of the two"):
        ga.compile(bg, "aot_eager", background=True, select="measure")
    monkeypatch.setattr(B, "BACKGROUND_DEFAULT", True)
    # the default reaches compile()
    assert ga.compile(bg, "inductor").stats.background is not None
    assert ga.compile(bg, "inductor", precompile=False).stats.background is None
    assert ga.compile(bg, "aot_eager").stats.background is None  # inductor only by default
    ga.compile(bg, "inductor", select="measure")  # no ValueError: select turns it off


def test_the_default_stays_in_the_foreground_in_a_distributed_run_and_in_a_daemon(monkeypatch):
    """Every rank would fork a compile of its own; a data-loading worker cannot fork."""
    import multiprocessing
    from types import SimpleNamespace
    C = B
    monkeypatch.setattr(B, "BACKGROUND_DEFAULT", True)
    _, bg = _pair()
    with monkeypatch.context() as m:
        m.setattr(torch.distributed, "is_initialized", lambda: True)
        assert "distributed" in C._default_off_here()
        assert ga.compile(bg, "inductor").stats.background is None
    with monkeypatch.context() as m:
        m.setattr(multiprocessing, "current_process", lambda: SimpleNamespace(daemon=True))
        assert "daemon" in C._default_off_here()
        assert ga.compile(bg, "inductor").stats.background is None
    assert C._default_off_here() == ""


def test_an_rnn_model_is_refused_for_inductor_with_the_reason():
    class WithRNN(Net):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(8, 8)
    wrapped = ga.ipu_wrap(WithRNN(), loss_fn=ga.masked_loss("mse"))
    with pytest.raises(ValueError, match="precompiled entry"):
        ga.compile(wrapped, "inductor", background=True)
    # the default: compiled here
    assert ga.compile(wrapped, "inductor").stats.background is None


_EXIT_SCRIPT = textwrap.dedent("""
    import sys, torch, graph_adapter as ga
    sys.path.insert(0, {tests!r})
    from test_background import Net, _batches
    torch.manual_seed(0)
    w = ga.ipu_wrap(Net().double(), loss_fn=ga.masked_loss("mse")).train()
    c = ga.compile(w, {backend!r}, background=True)
    c(_batches(1)[0])["loss"].backward()
    print("child", c.stats.background.keys[0]["pid"], flush=True)
""")


def _run_exit_script(backend, env, timeout):
    script = _EXIT_SCRIPT.format(tests=os.path.join(ROOT, "tests", "tuning"),
                                 backend=backend)
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "tests"), **env}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=ROOT)


def _gone(pid, within=10.0):
    end = time.time() + within
    while time.time() < end:
        if not os.path.exists(f"/proc/{pid}"):
            return True
        time.sleep(0.05)
    return False


def test_exit_with_a_compile_running_leaves_no_process():
    r = _run_exit_script("aot_eager", {"GRAPH_ADAPTER_BACKGROUND_EXIT_WAIT": "0"}, 120)
    assert r.returncode == 0, r.stderr
    pid = int(r.stdout.split("child")[1])
    assert _gone(pid), f"compile process {pid} outlived its parent"
    assert "waiting up to 0 s for 1 background compile" in r.stderr


@pytest.mark.extended
def test_inductor_switch_loads_the_childs_entry_and_exit_keeps_it(tmp_path, monkeypatch):
    """The parent compiles nothing itself: it loads what its child saved; a process that
    exits mid-compile waits for its entry, which the next process loads."""
    monkeypatch.setattr(B, "MEASURED_STEPS", 2)
    monkeypatch.setattr(B, "SLOWER_BY", float("inf"))
    cache = str(tmp_path / "inductor")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", cache)
    torch._dynamo.reset()
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the child traces at one thread for two (seen red at two)
    try:
        ref, bg = _pair()
        c = ga.compile(bg, "inductor", background=True)
        batches = _batches(6)
        want, _ = _train(ref, ref, batches)
        loads = P.COUNTS["loaded"]
        got, _ = _train(c, bg, batches, wait_after=0, compiled=c)
        (info,) = c.stats.background.keys
        assert info["state"] == "compiled" and info["saved"], c.stats.background.summary()
        assert P.COUNTS["loaded"] == loads + 1  # the switch loaded the child's entry
        assert c.compile_count == info["compiles"], "the parent compiled at the switch"
        torch.testing.assert_close(got, want, rtol=0, atol=1e-9)
        _, bg2 = _pair()  # the entry on disk now: a second model loads it here, no child
        c2 = ga.compile(bg2, "inductor", background=True)
        got2, _ = _train(c2, bg2, batches)
        (info2,) = c2.stats.background.keys
        assert info2["loaded"] and info2["pid"] is None and c2.compile_count == 0, \
            c2.stats.background.summary()
        torch.testing.assert_close(got2, want, rtol=0, atol=1e-9)
    finally:
        torch.set_num_threads(threads)
        torch._dynamo.reset()

    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "second"),
           "GRAPH_ADAPTER_BACKGROUND_EXIT_WAIT": "600"}
    r = _run_exit_script("inductor", env, 900)
    assert r.returncode == 0, r.stderr
    assert _gone(int(r.stdout.split("child")[1]))
    entries = list((tmp_path / "second" / "graph_adapter_precompiled").glob("*.bin"))
    assert len(entries) == 1, r.stderr
