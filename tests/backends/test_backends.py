"""graph_adapter.compile: one compile per budget and mode, clear errors on changed shapes."""
import copy
import os

import pytest
import torch
from torch_geometric.nn import GIN, global_mean_pool

from graph_adapter.backends import ShapeChangedError, compile, load
from graph_adapter.nn import masked_loss
from graph_adapter.nn import ipu_wrap

from _padding import pad_batch, random_graphs


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gin = GIN(4, 8, 2, 8, norm="batch_norm")
        self.head = torch.nn.Linear(8, 1)

    def forward(self, data):
        return self.head(global_mean_pool(self.gin(data.x, data.edge_index), data.batch)).squeeze(-1)


def batches(n, nodes=30, edges=60, graphs=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [pad_batch(random_graphs(gen, 4), nodes, edges, graphs) for _ in range(n)]


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def epoch(c, flats, opt=None):
    c.train()
    for f in flats:
        out = c(f)
        out["loss"].backward()
        if opt is not None:
            opt.step()
            opt.zero_grad()
    c.eval()
    with torch.no_grad():
        return [c(f) for f in flats]


def test_aot_eager_compiles_once_per_mode():
    torch.manual_seed(0)
    w = ipu_wrap(Net(), loss_fn=masked_loss("mse"))
    c = compile(w, "aot_eager")
    assert c.backend == "aot_eager" and c.compile_count == 0
    flats = batches(4)
    epoch(c, flats, torch.optim.SGD(w.parameters(), lr=0.01))
    assert c.compile_count == 2  # train + eval
    epoch(c, flats)
    assert c.compile_count == 2


def test_stats_is_always_an_object():
    """``compiled.stats`` says which rewrites fired (none under aot_eager) and, where a
    background compile runs, what it did (none here); a snapshot, frozen."""
    import dataclasses

    from graph_adapter.backends import CompileStats

    w = ipu_wrap(Net(), loss_fn=masked_loss("mse"))
    for c in (compile(w, "aot_eager"), compile(w, "eager"),
              compile(w, "aot_eager", select="measure")):
        c(batches(1)[0])
        assert isinstance(c.stats, CompileStats), type(c)
        assert c.stats.rewrites == {} and c.stats.background is None
        assert c.stats.summary() == "no rewrite fired"
        assert not hasattr(c, "rewrites")  # one home: stats.rewrites
        with pytest.raises(dataclasses.FrozenInstanceError):
            c.stats.background = None
    assert CompileStats({"b": 1, "a": 2}).summary() == "rewrites fired: a x2, b x1"


def test_compiled_matches_eager():
    torch.manual_seed(0)
    ref = ipu_wrap(Net(), loss_fn=masked_loss("mse"))
    w = copy.deepcopy(ref)
    c = compile(w, "aot_eager")
    f = batches(1)[0]
    out_c, out_e = c(f), ref(f)
    out_c["loss"].backward()
    out_e["loss"].backward()
    torch.testing.assert_close(out_c["output"], out_e["output"])
    for p, q in zip(ref.parameters(), w.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-6, rtol=1e-5)
    for p, q in zip(ref.buffers(), w.buffers()):
        torch.testing.assert_close(q, p)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "export"])
def test_changed_shape_raises(backend):
    w = ipu_wrap(Net(), loss_fn=masked_loss("mse")).eval()
    c = compile(w, backend)
    with torch.no_grad():
        c(batches(1)[0])
        with pytest.raises(ShapeChangedError, match=r"key 'batch' has shape \(31,\), the compiled program takes \(30,\)"):
            c(batches(1, nodes=31)[0])
        bad = dict(batches(1)[0])
        bad["x"] = bad["x"].double()
        with pytest.raises(ShapeChangedError, match="key 'x' has dtype float64"):
            c(bad)
        del bad["x"]
        with pytest.raises(ShapeChangedError, match="key 'x' is missing"):
            c(bad)
    assert c.compile_count == 1


def test_allow_new_shapes_compiles_once_more():
    w = ipu_wrap(Net(), loss_fn=masked_loss("mse")).eval()
    c = compile(w, "aot_eager", allow_new_shapes=True)
    with torch.no_grad():
        for f in batches(2) + batches(2, nodes=40, edges=70, graphs=7) + batches(1):
            c(f)
    assert c.compile_count == 2 and len(c.signatures) == 2


def test_micro_batches_split_and_stacked():
    w = ipu_wrap(Net(), loss_fn=masked_loss("mse")).eval()
    c = compile(w, "eager")
    fl = batches(3)
    stacked = {k: torch.stack([f[k] for f in fl]) for k in fl[0]}
    with torch.no_grad():
        out = c(stacked)
        assert out["loss"].shape == (3,)
        torch.testing.assert_close(out["output"][2], w(fl[2])["output"])
        one = c({k: v[:1] for k, v in stacked.items()})
    assert one["output"].shape == w(fl[0])["output"].shape
    assert c.compile_count == 1


def test_export_save_load(tmp_path):
    torch.manual_seed(0)
    w = ipu_wrap(Net(), loss_fn=masked_loss("mse")).eval()
    c = compile(w, "export")
    f = batches(1)[0]
    with torch.no_grad():
        ref = w(f)
        out = c(f)
    torch.testing.assert_close(out["output"], ref["output"])
    path = os.path.join(tmp_path, "model.pt2")
    c.save(path)
    loaded = load(path)
    assert loaded.training is False
    with torch.no_grad():
        torch.testing.assert_close(loaded(f)["output"], ref["output"])
        with pytest.raises(ShapeChangedError):
            loaded(batches(1, nodes=31)[0])


def test_export_trains_shared_parameters():
    torch.manual_seed(0)
    ref = ipu_wrap(Net(), loss_fn=masked_loss("mse"))
    w = copy.deepcopy(ref)
    c = compile(w, "export")
    f = batches(1)[0]
    c(f)["loss"].backward()
    ref(f)["loss"].backward()
    for p, q in zip(ref.parameters(), w.parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-6, rtol=1e-5)


def test_auto_and_ipu_dispatch(monkeypatch):
    w = ipu_wrap(Net())
    try:
        import poptorch  # noqa: F401
    except ImportError:
        assert compile(w, "auto").backend == "inductor"  # on CPU (AUTO_RULE)
    import graph_adapter.ipu as ipu

    called = {}

    def fake(wrapped, backend, options=None, optimizer=None, **kw):
        called.update(backend=backend, kw=kw)
        return "ipu-model"

    monkeypatch.setattr(ipu, "compile_ipu", fake)
    assert compile(w, "ipu-emulator", allow_new_shapes=True) == "ipu-model"
    assert called == {"backend": "ipu-emulator", "kw": {"allow_new_shapes": True}}
    with pytest.raises(ValueError, match="backend="):
        compile(w, "tpu")


def test_epoch_from_fixed_size_loader_compiles_once_per_mode():
    import graph_adapter.batching.loader as loader_mod
    from graph_adapter.batching import Budget

    gen = torch.Generator().manual_seed(0)
    dataset = random_graphs(gen, 60)
    budget = Budget.tight(dataset, 8)
    loader = loader_mod.FixedSizeLoader(dataset, budget, shuffle=True)
    torch.manual_seed(0)
    w = ipu_wrap(Net(), loss_fn=masked_loss("mse"))
    c = compile(w, "aot_eager")
    opt = torch.optim.SGD(w.parameters(), lr=0.01)
    for _ in range(2):
        c.train()
        n = 0
        for flat in loader:
            c(flat)["loss"].backward()
            opt.step()
            opt.zero_grad()
            n += 1
        assert n == len(loader) > 1
        c.eval()
        with torch.no_grad():
            for flat in loader:
                c(flat)
    assert c.compile_count == 2


@pytest.mark.slow
def test_inductor_inference_matches_eager():
    torch.manual_seed(0)
    w = ipu_wrap(Net(), loss_fn=masked_loss("mse")).eval()
    c = compile(w, "inductor")
    fl = batches(3)
    with torch.no_grad():
        for f in fl:
            torch.testing.assert_close(c(f)["output"], w(f)["output"], atol=1e-5, rtol=1e-4)
    assert c.compile_count == 1


@pytest.mark.slow
def test_inductor_index_add_fallback_gradients():
    """The gradient of a gather through ATen's index_add equals eager's."""
    from torch.profiler import profile

    from graph_adapter.backends import EngineSettings
    from graph_adapter.backends.engines import _CountingBackend

    def f(x, i):
        return (x.index_select(0, i) * 2.0).sum()

    be = _CountingBackend(EngineSettings("inductor", index_add_fallback=True))
    cf = torch.compile(f, backend=be, fullgraph=True)
    x = torch.randn(20, 4, requires_grad=True)
    i = torch.randint(0, 20, (60,), generator=torch.Generator().manual_seed(0))
    f(x, i).backward()
    ref, x.grad = x.grad, None
    with profile() as p:
        cf(x, i).backward()
    torch.testing.assert_close(x.grad, ref)
    assert any(e.key == "aten::index_add" for e in p.key_averages())


@pytest.mark.extended  # ten compiles (~7 s): CI's second step
def test_many_compiles_in_one_process_each_compile_once():
    # Dynamo's recompile limit (8) is per code object: every compile() gets an
    # entry of its own, so a notebook can compile more than 8 models.
    flat = batches(1)[0]
    for i in range(10):
        torch.manual_seed(i)
        c = compile(ipu_wrap(Net()).eval(), "aot_eager")
        with torch.no_grad():
            c(flat)
        assert c.compile_count == 1, i


# ---- the registry and the one interface --------------------------------------------------
def test_registry_names_and_auto():
    from graph_adapter.backends import BACKENDS, backend_names, register_backend, resolve_backend

    assert backend_names() == BACKENDS
    assert BACKENDS[0] == "auto"
    assert {"inductor", "aot_eager", "eager", "export", "poptorch", "ipu-emulator"} <= set(BACKENDS)
    assert resolve_backend("eager") == ("eager", "")
    name, note = resolve_backend("auto")
    assert (name, note) == ("poptorch", "auto: poptorch found") or \
        (name, note.split(";")[0]) == ("inductor", "auto: poptorch not installed")
    with pytest.raises(ValueError, match="ipu-emulator"):
        resolve_backend("tpu")
    with pytest.raises(ValueError, match="already registered"):
        register_backend("eager", engine=lambda w, s: None)
    with pytest.raises(ValueError, match="already registered"):
        register_backend("auto", lambda *a, **k: None)


def test_register_backend_build_and_engine(monkeypatch):
    from graph_adapter import backends as B
    from graph_adapter.backends import registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    built = {}

    def build(wrapped, name, **settings):
        built.update(name=name, settings=settings)
        return "model"

    B.register_backend("mine", build, doc="a test backend")
    assert "mine" in B.backend_names()
    assert compile(ipu_wrap(Net()), "mine", foo=1) == "model"
    assert built["name"] == "mine" and built["settings"]["foo"] == 1
    # an engine backend: Compiled does the checks, the engine runs one micro-batch
    B.register_backend("eager2", engine=B.engines.EagerEngine)
    w = ipu_wrap(Net()).eval()
    c = compile(w, "eager2")
    f = batches(1)[0]
    with torch.no_grad():
        torch.testing.assert_close(c(f)["output"], w(f)["output"])
    assert isinstance(c, B.Compiled) and c.backend == "eager2" and c.compile_count == 1
    with pytest.raises(TypeError, match="exactly one"):
        B.register_backend("neither")


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "export", "ipu-emulator"])
def test_one_interface_for_every_backend(backend):
    """The loop the demo runs, written once: no branch on the backend's name."""
    torch.manual_seed(0)
    w = ipu_wrap(Net(), loss_fn=masked_loss("mse"))
    opt = torch.optim.SGD(w.parameters(), lr=0.01)
    m = compile(w, backend, optimizer=opt)
    assert m.steps_optimizer == (backend == "ipu-emulator")
    flats = batches(2)
    before = [p.detach().clone() for p in m.parameters()]
    m.train()
    assert m.training and w.training
    for f in flats:
        out = m(f)
        loss = out["loss"].float().mean()
        if not m.steps_optimizer:
            opt.zero_grad()
            loss.backward()
            opt.step()
    m.set_optimizer(opt)
    assert any(not torch.equal(a, p) for a, p in zip(before, m.parameters()))
    m.eval()
    assert not m.training and not w.training
    with torch.no_grad():
        for f in flats:
            assert m(f)["output"].shape == f["graph_mask"].shape
    assert m.compile_count >= 2  # one per mode at least


def test_loaded_program_has_the_interface(tmp_path):
    w = ipu_wrap(Net()).eval()
    c = compile(w, "export")
    f = batches(1)[0]
    c(f)
    c.save(str(tmp_path / "p.pt2"))
    p = load(str(tmp_path / "p.pt2"))
    assert p.steps_optimizer is False and p.compile_count == 0
    assert p.eval() is p and not p.training
    assert sum(1 for _ in p.parameters()) > 0
    with pytest.raises(ValueError, match="eval mode"):
        p.train()


# ---- "auto": the engine of each mode (AUTO_RULE), no timing ------------------------------
def test_auto_compiles_both_modes_on_cpu(monkeypatch):
    from graph_adapter import backends as B

    if B.resolve_backend("auto")[0] == "poptorch":
        pytest.skip("poptorch installed: auto is poptorch")
    assert B.resolve_backend("auto", "cpu")[0] == "inductor"
    assert B.resolve_backend("auto", torch.device("cuda", 0))[0] == "inductor"
    assert [B.auto_engine("cpu", t) for t in (True, False)] == ["inductor", "inductor"]
    # a rule with an engine per mode resolves to the per-mode backend
    monkeypatch.setitem(B.AUTO_RULE, ("cpu", True), "eager")
    name, note = B.resolve_backend("auto", "cpu")
    assert name == "inductor_eval" and "training eager, inference inductor" in note


def test_inductor_eval_runs_eager_training_and_compiled_inference(monkeypatch):
    from graph_adapter import backends as B

    # the eval engine through Dynamo without code generation: counts its compiles cheaply
    monkeypatch.setattr(B.PerModeEngine, "eval_backend", "aot_eager")
    w = ipu_wrap(Net(), loss_fn=masked_loss("mse"))
    c = compile(w, "inductor_eval")
    f = batches(1)[0]
    c.train()
    assert c.mode_backend == "eager"
    c(f)["loss"].backward()
    train_engine, eval_engine = c._engine.engine_for(True), c._engine.engine_for(False)
    assert isinstance(train_engine, B.engines.EagerEngine) and eval_engine.compile_count == 0
    c.eval()
    assert c.mode_backend == "aot_eager"
    with torch.no_grad():
        out = c(f)["output"]
        torch.testing.assert_close(out, w(f)["output"])
    # only real compiles count: the eager training engine compiles nothing
    assert eval_engine.compile_count == 1 and c.compile_count == 1
    c.train()
    c(f)["loss"].backward()  # back to the eager engine: nothing compiled
    assert eval_engine.compile_count == 1 and c.compile_count == 1
