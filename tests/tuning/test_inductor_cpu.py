"""graph_adapter.tuning.cpu_settings: what ``compile(..., "inductor")`` changes in inductor's
CPU training code keeps every number: the embedding gradient as ``index_add``
equals ATen's, boolean masks are recomputed (none saved for the backward) and
the gradients equal eager's, dropout's mask is never redrawn."""
import copy

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from graph_adapter.tuning import cpu_settings as I
from graph_adapter import compile, ipu_wrap
from graph_adapter.nn import masked_loss

from _padding import pad_batch, random_graphs

aten = torch.ops.aten


@given(vocab=st.integers(1, 12), rows=st.integers(0, 40), two_dims=st.booleans(),
       dim=st.integers(1, 5), pad=st.integers(-1, 11), seed=st.integers(0, 2**16))
def test_embedding_backward_as_index_add_equals_aten(vocab, rows, two_dims, dim, pad, seed):
    g = torch.Generator().manual_seed(seed)
    shape = (rows, 2) if two_dims else (rows,)
    index = torch.randint(0, vocab, shape, generator=g)
    grad = torch.randn(*shape, dim, generator=g, dtype=torch.float64)
    pad = pad if pad < vocab else -1
    ours = I._embedding_backward_as_index_add(grad, index, vocab, pad, False)
    ref = aten.embedding_dense_backward(grad, index, vocab, pad, False)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)


def test_embedding_backward_scale_grad_by_freq_keeps_inductors_decomposition():
    index = torch.tensor([0, 0, 2, 1, 0])
    grad = torch.randn(5, 3, dtype=torch.float64)
    ours = I._embedding_backward_as_index_add(grad, index, 4, -1, True)
    torch.testing.assert_close(ours, aten.embedding_dense_backward(grad, index, 4, -1, True))


def test_decomposition_table(monkeypatch):
    """With the fallback: no index_add decomposition, the embedding gradient is ours."""
    assert I.decompositions(False) is None
    table = I.decompositions(True)
    packets = {getattr(op, "overloadpacket", None): fn for op, fn in table.items()}
    assert aten.index_add not in packets
    assert packets[aten.embedding_dense_backward] is I._embedding_backward_as_index_add
    assert len(table) > 100  # the rest of inductor's table
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert I.use_index_add_fallback(None) is True
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert I.use_index_add_fallback(None) is False
    assert I.use_index_add_fallback(True) is True


class _EmbGNN(torch.nn.Module):
    """Embedding -> gather + relu + scatter (PyG-style message passing) -> sum: relu masks
    on edge and node rows, an embedding gradient, a gather gradient."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(5, 8)
        self.lin = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x, edge_index, batch):
        from torch_geometric.nn import global_add_pool
        from torch_geometric.utils import scatter

        h = self.emb(x[:, 0].long().clamp(0, 4))
        msg = torch.relu(h.index_select(0, edge_index[0]) + 1.0)  # PyG's gather
        h = torch.relu(self.lin(h + scatter(msg, edge_index[1], 0, dim_size=h.size(0))))
        return self.head(global_add_pool(h, batch)).squeeze(-1)


class _SavedDtypes:
    """A post-grad pass recording the dtypes of the tensors each forward graph computes
    and returns (its saved tensors among them). ``uuid() -> None`` keeps inductor from serving a cached graph."""

    def __new__(cls):
        from torch._inductor.custom_graph_pass import CustomGraphPass

        class Pass(CustomGraphPass):
            dtypes: list = []

            def __call__(self, graph):
                names = [n.name for n in graph.nodes if n.op == "placeholder"]
                if any(n.startswith("tangents") for n in names):
                    return  # a backward graph
                out = next(n for n in graph.nodes if n.op == "output")
                for a in out.args[0]:
                    v = getattr(a, "meta", {}).get("val")
                    # inputs handed through (the batch's masks) are not stored by a kernel
                    if isinstance(v, torch.Tensor) and a.op != "placeholder":
                        self.dtypes.append(v.dtype)

            def uuid(self):
                return None

        return Pass()


@pytest.mark.slow  # two real inductor compiles
# 2 threads is the case with the contrast (inductor alone adds atomically); 1 thread runs
# in CI's second step (extended), to keep the main suite under 10 minutes
@pytest.mark.parametrize("threads", [pytest.param(1, marks=pytest.mark.extended), 2])
def test_bool_masks_are_recomputed_and_gradients_equal_eager(threads):
    old = torch.get_num_threads()
    torch.set_num_threads(threads)  # 2: the index_add fallback for gathers and embeddings
    try:
        gen = torch.Generator().manual_seed(0)
        flat = pad_batch(random_graphs(gen, 4), 30, 61, 7)
        torch.manual_seed(0)
        base = ipu_wrap(_EmbGNN(), loss_fn=masked_loss("mse")).double()
        flat = {k: (v.double() if v.is_floating_point() else v) for k, v in flat.items()}
        grads = {}
        saved = {}
        for name, ours in (("ours", True), ("inductor's", False)):
            torch._dynamo.reset()
            m = copy.deepcopy(base)
            inspect = _SavedDtypes()
            opts = {"post_grad_custom_post_pass": inspect}
            if not ours:
                opts["joint_custom_post_pass"] = None
            c = compile(m, "inductor", options=opts, index_add_fallback=None if ours else False)
            c(flat)["loss"].backward()
            # read from the generated code: inductor adds atomically only in a parallel
            # loop, and ours keeps ATen's index_add for the gather and the embedding
            assert c.atomic_adds is (not ours and threads > 1), (name, c.atomic_adds)
            grads[name] = {k: p.grad.clone() for k, p in m.named_parameters()}
            saved[name] = list(inspect.dtypes)
        eager = copy.deepcopy(base)
        eager(flat)["loss"].backward()
        for name in grads:
            for k, p in eager.named_parameters():
                torch.testing.assert_close(grads[name][k], p.grad, rtol=1e-10, atol=1e-12,
                                           msg=lambda s: f"{name} {k}: {s}")
        assert torch.bool not in saved["ours"], saved["ours"]
        # the contrast that shows the check can fail: inductor alone saves relu masks
        assert torch.bool in saved["inductor's"], saved["inductor's"]
    finally:
        torch.set_num_threads(old)
        torch._dynamo.reset()


@pytest.mark.slow  # one real inductor compile
def test_dropout_mask_is_never_redrawn():
    """With the pass on, dropout's gradient still matches the mask its output shows
    (a mask redrawn in the backward would not). The pass leaves booleans downstream
    of random ops alone; the partitioner also refuses to recompute random ops, so
    this fails only if both give way."""
    p = I.recompute_bool_masks()
    w = torch.randn(64, dtype=torch.float64)

    def f(x):
        y = torch.nn.functional.dropout(torch.relu(x), 0.5, training=True) * w
        return y, y.sum()

    from graph_adapter.backends import EngineSettings
    from graph_adapter.tuning.inductor import compile_graph

    settings = EngineSettings("inductor", {"joint_custom_post_pass": p, "fx_graph_cache": False})

    torch._dynamo.reset()
    # no compile cache: a graph served from it is not passed through the pass again, and
    # `p.marked` below reads what the pass did (it failed on a warm cache)
    cf = torch.compile(f, backend=lambda gm, inputs: compile_graph(gm, inputs, settings).fn,
                       fullgraph=True)
    x = torch.randn(64, dtype=torch.float64, requires_grad=True)
    from torch._functorch import config as functorch_config
    with functorch_config.patch(enable_autograd_cache=False):
        y, s = cf(x)
    s.backward()
    kept = (y != 0).double()
    torch.testing.assert_close(x.grad, w * kept * 2.0)
    assert p.fired["recompute_bool_masks"] >= 1  # relu's mask was marked
    torch._dynamo.reset()


@given(rows=st.integers(1, 12), picks=st.integers(0, 30), dim=st.integers(1, 4),
       negative=st.booleans(), seed=st.integers(0, 2**16))
def test_index_put_as_index_add_equals_aten(rows, picks, dim, negative, seed):
    """The gradient of ``x[index]`` (negative ids too) as index_add equals index_put's."""
    g = torch.Generator().manual_seed(seed)
    index = torch.randint(0, rows, (picks,), generator=g)
    if negative:
        index = index - rows  # the same rows, counted from the end
    values = torch.randn(picks, dim, generator=g, dtype=torch.float64)
    zeros = torch.zeros(rows, dim, dtype=torch.float64)
    ours = I._index_put_as_index_add(zeros, [index], values, True)
    ref = aten.index_put(zeros, [index], values, True)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)


def test_index_put_other_forms_keep_inductors_lowering():
    z = torch.zeros(4, 3)
    i = torch.tensor([0, 1])
    assert I._index_put_as_index_add(z, [i], torch.ones(2, 3), False) is NotImplemented
    assert I._index_put_as_index_add(z, [i, i], torch.ones(2), True) is NotImplemented
    assert I._index_put_as_index_add(z, [i > 0], torch.ones(1, 3), True) is NotImplemented
    assert I._index_put_as_index_add(z, [i], torch.ones(3), True) is NotImplemented  # broadcast


@pytest.mark.slow  # one real inductor compile
def test_bracket_gather_gradient_adds_without_atomics_on_two_threads():
    """``x[index]``'s gradient runs ATen's index_add with more than one thread: no
    atomic adds in the generated code, and the gradient equals eager's."""
    from graph_adapter.backends import EngineSettings
    from graph_adapter.backends.engines import _CountingBackend

    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch._dynamo.reset()
        be = _CountingBackend(EngineSettings("inductor"))
        cf = torch.compile(lambda x, i: (torch.relu(x[i]) * 2.0).sum(), backend=be,
                           fullgraph=True)
        x = torch.randn(50, 8, dtype=torch.float64, requires_grad=True)
        i = torch.randint(0, 50, (400,), generator=torch.Generator().manual_seed(0))
        cf(x, i).backward()
        ours, x.grad = x.grad, None
        (torch.relu(x[i]) * 2.0).sum().backward()
        torch.testing.assert_close(ours, x.grad, rtol=0, atol=1e-12)
        assert be.atomic_adds is False
    finally:
        torch.set_num_threads(old)
        torch._dynamo.reset()


def _wrapped(model):
    return ipu_wrap(model, loss_fn=masked_loss("mse"))


class _ConvNet(torch.nn.Module):
    def __init__(self, conv, pool):
        super().__init__()
        self.conv, self.pool = conv, pool
        self.norm = torch.nn.BatchNorm1d(8)
        self.lin = torch.nn.Linear(8, 1)

    def forward(self, x, edge_index, batch):
        return self.lin(self.pool(torch.relu(self.norm(self.conv(x, edge_index))), batch)).squeeze(-1)


@pytest.mark.slow  # one real inductor compile each
# gat and edgeconv_maxpool (the slowest compiles) run in CI's second step (extended)
@pytest.mark.parametrize("layer", [pytest.param("gat", marks=pytest.mark.extended), "sage_max",
                                   pytest.param("edgeconv_maxpool",
                                                marks=pytest.mark.extended)])
def test_compiled_gradients_equal_eager_where_masks_come_from_max_and_softmax(layer):
    """Booleans from max aggregations, softmax's scatter max and max pooling are
    recomputed too (from a reduction's output): gradients still equal eager's, and
    nothing is added atomically at 2 threads."""
    from torch_geometric.nn import EdgeConv, GATConv, SAGEConv, global_add_pool, global_max_pool

    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        torch._dynamo.reset()
        torch.manual_seed(0)
        conv, pool = {
            "gat": (GATConv(4, 8), global_add_pool),
            "sage_max": (SAGEConv(4, 8, aggr="max"), global_add_pool),
            "edgeconv_maxpool": (EdgeConv(torch.nn.Sequential(torch.nn.Linear(8, 8),
                                                              torch.nn.ReLU())), global_max_pool),
        }[layer]
        w = _wrapped(_ConvNet(conv, pool).double())
        eager = copy.deepcopy(w)
        gen = torch.Generator().manual_seed(0)
        flat = pad_batch(random_graphs(gen, 4), 30, 61, 7)
        flat = {k: (v.double() if v.is_floating_point() else v) for k, v in flat.items()}
        c = compile(w, "inductor")
        c(flat)["loss"].backward()
        eager(flat)["loss"].backward()
        for (k, p), q in zip(w.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-10, atol=1e-12,
                                       msg=lambda s: f"{layer} {k}: {s}")
        assert c.atomic_adds is False
    finally:
        torch.set_num_threads(old)
        torch._dynamo.reset()


def test_cpu_inference_graphs_get_the_cpp_wrapper():
    x = torch.zeros(3)
    with torch.no_grad():
        assert I.is_cpu_inference([x, 2])
    assert not I.is_cpu_inference([x])  # grad mode: a backward may follow
    with torch.no_grad():
        assert not I.is_cpu_inference([x, torch.zeros(2, device="meta")])
    assert I.config_patches(cpu_inference=True)["cpp_wrapper"] is True
    assert "cpp_wrapper" not in I.config_patches()


def test_proxy_executor_notice_is_dropped_only_while_compiling():
    import logging

    class Keep(logging.Handler):  # on the logger itself: torch's loggers may not propagate
        def __init__(self):
            super().__init__(logging.WARNING)
            self.messages = []

        def emit(self, record):
            self.messages.append(record.getMessage())

    logger = logging.getLogger("torch._inductor.ir")
    kept = Keep()
    logger.addHandler(kept)
    try:
        msg = "%s is missing a c-shim implementation, using proxy executor as fallback"
        with I.quiet_proxy_executor_notice():
            logger.warning(msg, "aten.index_add.default")
            logger.warning("another warning")
        logger.warning(msg, "aten.index_add.default")
    finally:
        logger.removeHandler(kept)
    assert kept.messages == ["another warning", msg % "aten.index_add.default"]


@pytest.mark.slow
def test_compiled_inference_with_the_cpp_wrapper_equals_eager(monkeypatch):
    """An eval-mode model compiled under no_grad gets the C++ wrapper and gives eager's
    outputs."""
    from graph_adapter.app.models import build_model

    from _padding import molecule_like_graphs
    import graph_adapter as ga

    graphs = molecule_like_graphs(30, seed=2)
    flat = next(iter(ga.FixedSizeLoader(graphs, ga.Budget.fit(graphs, 10), layout="hyb")))
    torch.manual_seed(0)
    wrapped = ipu_wrap(build_model("gine", 16, 2)).eval()
    compiled = compile(wrapped, "inductor", options={"force_disable_caches": True})
    asked = []
    patches = I.config_patches
    monkeypatch.setattr(I, "config_patches", lambda **kw: asked.append(kw) or patches(**kw))
    with torch.no_grad():
        out, ref = compiled(flat)["output"], wrapped(flat)["output"]
    assert [kw["cpu_inference"] for kw in asked] == [True]
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.extended  # four small inductor compiles, two of them cold: ~13 s quiet
def test_the_compile_cache_keys_the_index_add_setting(tmp_path, monkeypatch):
    """Inductor's caches do not key the decomposition table: a graph compiled with
    atomic adds (``index_add_fallback=False``, or the default at 1 thread) was served
    to a later compile with the fallback, which then ran at 0.6x instead of 1.5x
    eager PyG (the demo's model, 2 threads, ``docs/benchmarks.md``)."""
    from torch._dynamo.utils import counters

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # cold, this test's own
    old = torch.get_num_threads()
    torch.set_num_threads(2)  # atomic adds only in a parallel loop
    try:
        flat = pad_batch(random_graphs(torch.Generator().manual_seed(0), 4), 30, 61, 7)
        torch.manual_seed(0)
        base = ipu_wrap(_EmbGNN(), loss_fn=masked_loss("mse"))

        def run(fallback):
            torch._dynamo.reset()
            counters.clear()
            c = compile(copy.deepcopy(base), "inductor", index_add_fallback=fallback)
            c(flat)["loss"].backward()
            return counters["aot_autograd"]["autograd_cache_hit"], c.atomic_adds

        assert run(False) == (0, True)  # cold: inductor's atomic scatter
        assert run(False) == (1, True)  # the cache works: the same setting is served
        # the other setting is compiled anew, without atomics (before the fix: (1, True));
        # since its decomposition table pickles by its recipe (DecompositionTable) its
        # graphs are cached too (before: bypassed, "unpicklable type
        # pybind11_detail_function_record"), so a second run is a hit of its own entry:
        assert run(True) == (0, False)
        assert run(True) == (1, False)
        assert run(False) == (1, True)  # and the first setting's entry is still there
    finally:
        torch.set_num_threads(old)
        torch._dynamo.reset()


def test_config_drops_the_wrappers_size_asserts():
    """Dynamo's guards check the inputs' sizes and strides already (CALL_PATCHES)."""
    assert I.config_patches()["size_asserts"] is False
    assert I.config_patches(cpu_inference=True)["size_asserts"] is False
