"""Precompiled entries (``backends/inductor/precompile.py``, opt-in): the key tells
apart every change that needs another graph, a changed source never loads, PyG's and
the gradients' state is restored, the globals a trace reads (a module's dict item,
float, list item and attribute, ``os.environ``, ``sys.argv``) are recorded and a
changed one is named, a global that cannot be recorded refuses the save with one
warning, (slow) a second compiled model loads the first one's entry, computes the
same, and recompiles through the ordinary entry when the model changes after the
load, and (slow) a later process whose globals hold other values recompiles and
equals eager, while one with the same values loads."""
import copy
import importlib
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from hypothesis import given, strategies as st
from torch import nn
from torch_geometric.nn import global_add_pool

from graph_adapter.tuning import precompile as P
from graph_adapter.tuning import registry
from graph_adapter.backends import compile
from graph_adapter.backends.engines import EngineSettings
from graph_adapter.nn import masked_loss
from graph_adapter.nn import ipu_wrap

from _padding import pad_batch, random_graphs


class Tiny(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.lin = nn.Linear(4, width)
        self.norm = nn.BatchNorm1d(width)
        self.head = nn.Linear(width, 1)
        self.shift = 0.0

    def forward(self, data):
        h = self.norm(self.lin(data.x)).relu() + self.shift
        return self.head(global_add_pool(h, data.batch)).squeeze(-1)


def _batch(nodes=30):
    return pad_batch(random_graphs(torch.Generator().manual_seed(0), 4), nodes, 60, 6)


def _wrapped(width=8):
    torch.manual_seed(0)
    return ipu_wrap(Tiny(width), loss_fn=masked_loss("mse")).train()


_SETTINGS = EngineSettings("inductor")


def _key(w, flat=None, settings=_SETTINGS):
    return P.digest(P.artifact_key(w, _batch() if flat is None else flat, settings))


def test_the_key_tells_apart_what_needs_another_graph(monkeypatch):
    """Equal for two models built alike; different for a width, a budget, a strided
    input, one submodule's mode, a frozen parameter, a plain attribute, the loss (a
    closure cell: Dynamo's guard on it cannot be saved), the grad mode, the options,
    the thread count and graph_adapter's pass version."""
    from graph_adapter.tuning import rewrites as _fx_rewrites

    base = _key(_wrapped())
    assert _key(_wrapped()) == base
    changed = {"width": _key(_wrapped(16)),
               "budget": _key(_wrapped(), _batch(nodes=31))}
    strided = dict(_batch())
    strided["x"] = strided["x"].t().contiguous().t()
    changed["strides"] = _key(_wrapped(), strided)
    for what, change in [("submodule mode", lambda w: w.model.norm.eval()),
                         ("requires_grad", lambda w: w.model.lin.requires_grad_(False)),
                         ("attribute", lambda w: setattr(w.model, "shift", 1.0))]:
        w = _wrapped()
        change(w)
        changed[what] = _key(w)
    torch.manual_seed(0)
    changed["loss kind"] = _key(ipu_wrap(Tiny(), loss_fn=masked_loss("l1")).train())
    torch.manual_seed(0)
    changed["loss target"] = _key(ipu_wrap(Tiny(), loss_fn=masked_loss("mse", target="x")).train())
    with torch.no_grad():
        changed["grad mode"] = _key(_wrapped())
    changed["options"] = _key(_wrapped(), settings=EngineSettings("inductor", {"cpp_wrapper": True}))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        changed["threads"] = _key(_wrapped())
    finally:
        torch.set_num_threads(threads)
    with registry.disabled("compose_linears"):
        changed["pass version"] = _key(_wrapped())
    same = [what for what, k in changed.items() if k == base]
    assert not same, same


def test_a_changed_source_is_not_loaded(tmp_path, monkeypatch):
    """``sources_unchanged`` reads the traced lines as the files are now: an edit of a
    traced function's lines fails it."""
    from torch._dynamo.package import InlinedSource, SourceInfo, _hash_source

    path = tmp_path / "traced_mod.py"
    path.write_text("def f(x):\n    return x + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("traced_mod")
    try:
        info = SourceInfo(inlined_sources={InlinedSource(
            module="traced_mod", firstlineno=1, lastlineno=3,
            checksum=_hash_source(path.read_text()), content="")})
        assert P.sources_unchanged(info)
        path.write_text("def f(x):\n    return x + 2\n")
        assert not P.sources_unchanged(info)
    finally:
        sys.modules.pop(mod.__name__, None)


def test_pyg_setstate_and_gradients_are_restored():
    from torch_geometric.nn.conv import MessagePassing

    before = MessagePassing.__dict__.get("__setstate__")
    with P._plain_setstate():
        assert MessagePassing.__setstate__ is nn.Module.__setstate__
    assert MessagePassing.__dict__.get("__setstate__") is before
    w = _wrapped()
    grads = [torch.full_like(p, 3.0) for p in w.parameters()]
    for p, g in zip(w.parameters(), grads):
        p.grad = g
    with P.grads_set_aside(w):
        assert all(p.grad is None for p in w.parameters())
    assert all(p.grad is g for p, g in zip(w.parameters(), grads))


@pytest.mark.parametrize("backend", ["aot_eager", "eager", "ipu-emulator"])
def test_precompile_true_where_it_cannot_serve_is_refused_by_name(backend):
    with pytest.raises(ValueError, match="precompile=True.*'inductor' only"):
        compile(_wrapped(), backend, precompile=True)


def test_precompile_false_wins_over_the_environment(monkeypatch):
    monkeypatch.setattr(P, "ENABLED", True)
    assert compile(_wrapped(), "inductor", precompile=False)._engine.precompiled is None
    assert compile(_wrapped(), "inductor")._engine.precompiled.calls == {}


@pytest.mark.slow
@pytest.mark.extended  # ~8-35 s: CI's second step runs it (setup.cfg)
def test_a_second_model_loads_the_entry_and_a_change_recompiles(tmp_path, monkeypatch):
    """With precompile on: the first compiled model compiles and saves; a second one,
    built alike, loads (no compile) and computes the same loss and gradients; its model
    then changed recompiles through the ordinary entry and equals eager; and an entry
    whose sources changed is not loaded."""
    # the artifacts in a temp dir; inductor's kernels in the suite's cache (a rerun is warm)
    monkeypatch.setattr(P, "artifact_dir", lambda: str(tmp_path / "graph_adapter_precompiled"))
    torch._dynamo.reset()
    flat = _batch()
    w1 = _wrapped()
    w2 = copy.deepcopy(w1)
    from graph_adapter.backends import precompiled_counts

    before = precompiled_counts()
    c1 = compile(w1, "inductor", precompile=True)
    c1(flat)["loss"].backward()
    assert c1.compile_count == 1 and c1._engine.precompiled_loads == 0
    assert precompiled_counts() == (before[0], before[1] + 1)  # saved, not loaded
    assert len(list((tmp_path / "graph_adapter_precompiled").glob("*.bin"))) == 1

    monkeypatch.setattr(P, "ENABLED", True)  # the environment's switch does the same
    c2 = compile(w2, "inductor")
    out = c2(flat)
    out["loss"].backward()
    assert c2._engine.precompiled_loads == 1 and c2.compile_count == 0
    assert precompiled_counts() == (before[0] + 1, before[1] + 1)  # what the demo reports
    w1.zero_grad()
    ref = c1(flat)
    ref["loss"].backward()
    torch.testing.assert_close(out["loss"], ref["loss"])
    for p, q in zip(w1.parameters(), w2.parameters()):
        torch.testing.assert_close(q.grad, p.grad)

    w2.model.shift = 0.5  # the loaded entry's guards fail: the ordinary entry compiles
    out = c2(flat)
    assert c2.compile_count == 1
    torch.testing.assert_close(out["output"], w2(flat)["output"])

    key = P.artifact_key(w1, flat, _SETTINGS)  # the saved entry's key
    assert P.load(key, w1) is not None
    monkeypatch.setattr(P, "sources_unchanged", lambda info: False)
    assert P.load(key, w1) is None
    torch._dynamo.reset()


def test_an_entry_traced_at_one_thread_for_two_runs_at_two_and_the_global_state_is_checked(
        tmp_path, monkeypatch):
    """A background compile's child traces at one torch thread for its parent's two (a
    forked OpenMP pool hangs at more): the parent loads its entry and runs it without a
    compile (Dynamo's guard on the thread count would fail there, and the parent recompiled
    at the switch: seen red). The rest of Dynamo's global state is still checked on every
    call: deterministic algorithms turned on after the load compile the ordinary entry."""
    monkeypatch.setattr(P, "artifact_dir", lambda: str(tmp_path / "graph_adapter_precompiled"))
    torch._dynamo.reset()
    threads = torch.get_num_threads()
    flat = _batch()
    w1 = _wrapped()
    w2 = copy.deepcopy(w1)
    torch.set_num_threads(1)
    try:
        with monkeypatch.context() as m:
            m.setattr(torch, "get_num_threads", lambda: 2)  # as the child does
            c1 = compile(w1, "inductor", precompile=True)
            c1(flat)
        torch.set_num_threads(2)
        c2 = compile(w2, "inductor", precompile=True)
        out = c2(flat)
        assert c2._engine.precompiled_loads == 1 and c2.compile_count == 0
        torch.testing.assert_close(out["loss"], w2(flat)["loss"])
        torch.use_deterministic_algorithms(True)
        try:
            c2(flat)
        finally:
            torch.use_deterministic_algorithms(False)
        assert c2.compile_count == 1
    finally:
        torch.set_num_threads(threads)
        torch._dynamo.reset()


class WithGIN(nn.Module):
    """PyG's GIN with BatchNorm in its MLPs (module level: entries pickle the class by name)."""

    def __init__(self):
        super().__init__()
        from torch_geometric.nn.models import GIN
        self.gnn = GIN(4, 8, 2, norm="batch_norm")
        self.head = nn.Linear(8, 1)

    def forward(self, data):
        h = self.gnn(data.x, data.edge_index)
        return self.head(global_add_pool(h, data.batch)).squeeze(-1)


@pytest.mark.extended  # two inductor compiles (~8 s): CI's second step; the main suite loads entries elsewhere
def test_an_entry_of_pyg_gin_loads(tmp_path, monkeypatch):
    """PyG's GIN (BatchNorm inside its MLPs): the load's stub of the wrapper lacks some
    submodules, and ``IPUWrapped.__setstate__`` (which masks the norms) failed on them
    (``'_Missing' object has no attribute 'named_modules'``): no entry of such a model
    ever loaded, and a background compile's parent compiled at the switch (seen red).
    A second model loads the entry and its guards pass (the stub's norms masked too)."""
    monkeypatch.setattr(P, "artifact_dir", lambda: str(tmp_path / "graph_adapter_precompiled"))
    torch._dynamo.reset()
    torch.manual_seed(0)
    w = ipu_wrap(WithGIN(), loss_fn=masked_loss("mse")).train()
    w2 = copy.deepcopy(w)
    flat = _batch()
    c = compile(w, "inductor", precompile=True)
    c(flat)["loss"].backward()
    c2 = compile(w2, "inductor", precompile=True)  # loads it, and its guards pass
    c2(flat)["loss"].backward()
    assert c2._engine.precompiled_loads == 1 and c2.compile_count == 0
    torch._dynamo.reset()


# ------------------------------------------------------------------ what a trace read
#: a model whose forward reads globals of every kind research code reads: a module-level
#: dict's item, a plain float, a list item, an imported module's attribute,
#: ``os.environ[...]``, ``os.environ.get`` of a variable that may be missing, ``sys.argv``
_CFG_MODULE = """
import os, sys
CONFIG = {"scale": 1.0}
OFFSET = 0.0
WEIGHTS = [1.0, 1.0]
GAIN = 1.0

def helper(h):
    h = h * CONFIG["scale"] + OFFSET * WEIGHTS[1]
    h = h + float(os.environ["GA_PC_SHIFT"]) + float(os.environ.get("GA_PC_MISSING", "0"))
    return h * 2 if "--double" in sys.argv else h
"""
_MODEL_MODULE = """
import torch
from torch import nn
from torch_geometric.nn import global_add_pool
import ga_pc_cfg as cfg

class ReadsGlobals(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, data):
        h = cfg.helper(self.lin(data.x).relu()) * cfg.GAIN
        return self.head(global_add_pool(h, data.batch)).squeeze(-1)
"""
#: values under which a process runs the model (``b`` changes every read of ``a``)
_VALUES = {"a": {"scale": 1.0, "offset": 0.0, "weight": 1.0, "gain": 1.0, "shift": "0",
                 "missing": None, "argv": []},
           "b": {"scale": 3.0, "offset": 0.5, "weight": 2.0, "gain": 2.0, "shift": "0.25",
                 "missing": "1", "argv": ["--double"]}}


def _write_modules(where):
    (where / "ga_pc_cfg.py").write_text(_CFG_MODULE)
    (where / "ga_pc_model.py").write_text(_MODEL_MODULE)


def _set_values(values, cfg):
    """Put ``values`` into the globals ``ga_pc_cfg``'s reads (and sys.argv, os.environ)."""
    cfg.CONFIG["scale"], cfg.OFFSET, cfg.GAIN = values["scale"], values["offset"], values["gain"]
    cfg.WEIGHTS[1] = values["weight"]
    os.environ["GA_PC_SHIFT"] = values["shift"]
    if values["missing"] is None:
        os.environ.pop("GA_PC_MISSING", None)
    else:
        os.environ["GA_PC_MISSING"] = values["missing"]
    sys.argv[1:] = values["argv"]


def _aliases():
    """Dynamo's aliases of the modules imported now (``__import_a_dot_b`` -> ``a.b``)."""
    return {"__import_" + n.replace(".", "_dot_"): n for n in list(sys.modules)}


def _recorded_reads(wrapped, flat):
    """The reads of one trace (Dynamo's ``"eager"`` backend: no inductor compile)."""
    def entry(batch):
        return wrapped(batch)

    torch._dynamo.reset()
    fn = torch.compile(entry, backend="eager", fullgraph=True, dynamic=False,
                       options={"guard_filter_fn": P.serializable_guards})
    with P.recording() as reads, torch.no_grad():
        fn(flat)
    reads.resolve(_aliases())
    torch._dynamo.reset()
    return reads


def test_the_reads_name_each_changed_global_environ_and_argv(tmp_path, monkeypatch):
    """Every global the trace read is recorded with its value, as JSON; the same values
    read the same, and each change of one (a dict item, a float, a list item, an
    imported module's attribute, a variable's value, a missing variable now set,
    ``sys.argv``) is named; put back, they read the same again."""
    _write_modules(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["prog"])
    monkeypatch.setenv("GA_PC_SHIFT", "0")
    try:
        import ga_pc_cfg as cfg
        import ga_pc_model

        _set_values(_VALUES["a"], cfg)
        torch.manual_seed(0)
        reads = _recorded_reads(ipu_wrap(ga_pc_model.ReadsGlobals()).eval(), _batch())
        assert not reads.refused, reads.refused
        entries = json.loads(json.dumps(reads.entries))  # as a later process reads them
        assert P.reads_differ(entries) is None
        names = {P.render(path) for path, _, _ in entries}
        assert {"ga_pc_cfg.CONFIG['scale']", "ga_pc_cfg.OFFSET", "ga_pc_cfg.WEIGHTS[1]",
                "ga_pc_model.cfg.GAIN", "ga_pc_cfg.sys.argv"} <= names, sorted(names)
        for what, expected in [("scale", "CONFIG['scale'] was 1.0, is 3.0"),
                               ("offset", "OFFSET was 0.0, is 0.5"),
                               ("weight", "WEIGHTS[1] was 1.0, is 2.0"),
                               ("gain", "cfg.GAIN was 1.0, is 2.0"),
                               ("shift", "environ._data[b'GA_PC_SHIFT'] was b'0', is b'0.25'"),
                               ("missing", "['GA_PC_MISSING'] set"),
                               ("argv", "sys.argv (len) was 1, is 2")]:
            _set_values(dict(_VALUES["a"], **{what: _VALUES["b"][what]}), cfg)
            why = P.reads_differ(entries)
            assert why is not None and expected in why, (what, why)
            _set_values(_VALUES["a"], cfg)
            assert P.reads_differ(entries) is None, what
    finally:
        for name in ("ga_pc_cfg", "ga_pc_model"):
            sys.modules.pop(name, None)


def test_a_global_that_cannot_be_recorded_refuses_the_save_once(tmp_path, monkeypatch):
    """A trace that read a global whose value JSON cannot write (a complex number) is
    not saved: one warning names the global, and no file is written."""
    (tmp_path / "ga_pc_marker.py").write_text("SCALE = 2 + 1j\n")
    (tmp_path / "ga_pc_marked.py").write_text(textwrap.dedent("""
        from torch import nn
        import ga_pc_marker as m

        class Marked(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(4, 1)

            def forward(self, data):
                return self.lin(data.x).squeeze(-1) * m.SCALE.real
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(P, "artifact_dir", lambda: str(tmp_path / "entries"))
    monkeypatch.setattr(P, "_WARNED", set())
    try:
        import ga_pc_marked

        w = ipu_wrap(ga_pc_marked.Marked()).eval()
        reads = _recorded_reads(w, _batch())
        assert reads.refused == {"ga_pc_marked.m.SCALE": "CONSTANT_MATCH of a builtins.complex"}
        key = P.artifact_key(w, _batch(), _SETTINGS)
        with pytest.warns(RuntimeWarning, match=r"not saved.*ga_pc_marked\.m\.SCALE.*complex"):
            assert P.save(key, object(), w, reads) is False
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # said once: a second refusal is silent
            assert P.save(key, object(), w, reads) is False
        assert not (tmp_path / "entries").exists()
    finally:
        for name in ("ga_pc_marker", "ga_pc_marked"):
            sys.modules.pop(name, None)


def test_a_set_of_functions_is_recorded_by_its_members_names(tmp_path, monkeypatch):
    """``f in SOME_SET`` with functions for members (graph_adapter's own sets of tensor
    methods are such; Dynamo guards each by its place in this process's set order):
    the set is recorded member by member, by name, and a member swapped for another
    is named; the save is not refused."""
    (tmp_path / "ga_pc_set.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn
        DOUBLED = {torch.relu, torch.tanh}

        class InSet(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(4, 1)

            def forward(self, data):
                out = self.lin(data.x).squeeze(-1)
                return out * 2 if torch.relu in DOUBLED else out
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import ga_pc_set

        reads = _recorded_reads(ipu_wrap(ga_pc_set.InSet()).eval(), _batch())
        assert not reads.refused, reads.refused
        entries = json.loads(json.dumps(reads.entries))
        assert ["members"] in [c for p, c, _ in entries if P.render(p) == "ga_pc_set.DOUBLED"]
        assert P.reads_differ(entries) is None
        ga_pc_set.DOUBLED.discard(torch.relu)
        ga_pc_set.DOUBLED.add(torch.sigmoid)  # as many members: one of them another
        assert P.reads_differ(entries).startswith("ga_pc_set.DOUBLED (members) was")
    finally:
        sys.modules.pop("ga_pc_set", None)


_PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=4)
    | st.binary(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=8)


def _typed(v):
    """``v`` with every value's type beside it: what a trace tells apart (1, 1.0, True)."""
    if isinstance(v, dict):
        return ["dict", [[k, _typed(x)] for k, x in v.items()]]
    if isinstance(v, (list, tuple)):
        return [type(v).__name__, [_typed(x) for x in v]]
    return [type(v).__name__, repr(v)]


@given(_PLAIN, _PLAIN)
def test_recorded_values_read_back_the_same_and_tell_apart_what_differs(a, b):
    """A recorded value reads back as the same JSON text after a round trip through
    the file, and two values record alike exactly where they are equal, type by type
    (1, 1.0 and True apart; a list from a tuple; dict order kept)."""
    text = json.dumps(P._enc(a))
    assert json.dumps(json.loads(text)) == text
    assert (text == json.dumps(P._enc(b))) == (_typed(a) == _typed(b))


_GLOBALS_CHILD = textwrap.dedent("""
    import json, os, sys
    values = json.loads(os.environ["GA_PC_VALUES"])
    import torch
    import ga_pc_cfg as cfg
    from ga_pc_model import ReadsGlobals
    from test_precompile import _batch, _set_values
    from graph_adapter.backends import compile
    from graph_adapter.nn import ipu_wrap

    _set_values(values, cfg)
    torch.manual_seed(0)
    wrapped = ipu_wrap(ReadsGlobals()).eval()
    flat = _batch()
    c = compile(wrapped, "inductor", precompile=True)
    with torch.no_grad():
        out, ref = c(flat)["output"], wrapped(flat)["output"]
    print("RESULT " + json.dumps({"loads": c._engine.precompiled_loads,
                                  "compiles": c.compile_count,
                                  "diff": float((out - ref).abs().max())}))
""")


def _run_globals_child(tmp_path, values):
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"),
               TORCHINDUCTOR_COMPILE_THREADS="1", GA_PC_VALUES=json.dumps(values),
               PYTHONPATH=os.pathsep.join([str(tmp_path / "modules"), here, os.path.dirname(here),
                                           os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", _GLOBALS_CHILD], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


@pytest.mark.slow
@pytest.mark.extended  # two inductor compiles in fresh processes: CI's second step runs it
def test_a_later_process_with_other_globals_recompiles(tmp_path):
    """Fresh processes on one temp cache: the first compiles and saves; a second with the
    same values loads it; a third whose globals hold other values (a dict item, a
    float, a list item, a module attribute, a variable, a missing variable set,
    sys.argv) does not load it: it compiles, and its outputs equal eager; a fourth
    with the first values loads the first entry again."""
    (tmp_path / "modules").mkdir()
    _write_modules(tmp_path / "modules")
    # "equal eager": within 1e-5, not to the bit (CPU inference rewrites such as the
    # projection before an aggregation change the order of a sum); a stale entry is ~60 off
    first = _run_globals_child(tmp_path, _VALUES["a"])
    assert (first["loads"], first["compiles"]) == (0, 1) and first["diff"] < 1e-5, first
    again = _run_globals_child(tmp_path, _VALUES["a"])
    assert (again["loads"], again["compiles"]) == (1, 0) and again["diff"] < 1e-5, again
    other = _run_globals_child(tmp_path, _VALUES["b"])
    assert other["diff"] < 1e-5, other  # the old code ran the first entry: off by ~60
    assert (other["loads"], other["compiles"]) == (0, 1), other
    back = _run_globals_child(tmp_path, _VALUES["a"])  # both entries kept: either loads
    assert (back["loads"], back["compiles"]) == (1, 0) and back["diff"] < 1e-5, back


def test_the_key_names_the_bias_rewrite_on_or_off(monkeypatch):
    """A CPU inference entry compiled with the addmm rewrite is another program than one
    without: the key's pass versions say which (an entry of the other never loads)."""
    on = P._pass_versions()
    with registry.disabled("unfuse_bias_addmm"):
        assert P._pass_versions() != on and set(P._pass_versions()) == set(on)
