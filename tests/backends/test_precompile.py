"""Precompiled entries (``backends/_precompile.py``, opt-in): the key tells apart
every change that needs another graph, a changed source never loads, PyG's and
the gradients' state is restored, and (slow) a second compiled model loads the
first one's entry, computes the same, and recompiles through the ordinary entry
when the model changes after the load."""
import copy
import importlib
import sys

import pytest
import torch
from torch import nn
from torch_geometric.nn import global_add_pool

from graph_adapter.backends.inductor import precompile as P
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
    from graph_adapter.backends.inductor import rewrites as _fx_rewrites

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
    monkeypatch.setattr(_fx_rewrites, "PASS_VERSION", _fx_rewrites.PASS_VERSION + 1)
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
    assert compile(_wrapped(), "inductor", precompile=False)._engine._pre is None
    assert compile(_wrapped(), "inductor")._engine._pre == {}


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
