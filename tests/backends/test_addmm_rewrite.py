"""``accumulate_full_addmm``: inductor's ``addmm`` of a full-size addend nothing reads after
accumulates into it, ``addmm_`` (``graph_adapter.backends._fx_rewrites``); bias-broadcast
``addmm`` and addends read later are left alone."""
import copy

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from graph_adapter.backends import _fx_rewrites as R
from graph_adapter.backends import _inductor_cpu as I

_aten = torch.ops.aten


def _operands(rows=50, inner=20, cols=24, dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*s, dtype=dtype, generator=g)
            for s in ((rows, inner), (inner, cols), (rows, cols), (cols,))]


def _targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_dead_full_size_addend_is_accumulated_into_and_results_equal():
    a, b, c, bias = _operands()

    def f(a, b, c, bias):
        full = torch.addmm(c * 2, a, b).relu()  # a fresh addend nothing else reads
        return full + torch.addmm(bias, a, b) + torch.addmm(bias[None] * 3, a, b)

    gm = make_fx(f, tracing_mode="fake")(a, b, c, bias)
    assert _targets(gm).count(_aten.addmm.default) == 3
    assert R.accumulate_full_addmm(gm.graph) == 1
    gm.recompile()
    t = _targets(gm)
    assert t.count(_aten.addmm.default) == 2 and t.count(_aten.addmm_.default) == 1
    # both broadcast biases are still the addend of an addmm
    kept = [n.args[0] for n in gm.graph.nodes if n.target is _aten.addmm.default]
    assert all(tuple(k.meta["val"].shape) != (50, 24) for k in kept)
    torch.testing.assert_close(gm(a, b, c, bias), f(a, b, c, bias), rtol=1e-12, atol=1e-12)
    assert R.accumulate_full_addmm(gm.graph) == 0  # never rewritten twice


def _addend_graph(case):
    a, b, c, _ = _operands()
    if case == "graph_input":  # a placeholder: a parameter, a saved tensor, the caller's
        return make_fx(lambda a, b, c: torch.addmm(c, a, b), tracing_mode="fake")(a, b, c)
    if case == "read_later":  # the addend is read after the product
        def f(a, b, c):
            h = c * 2
            return torch.addmm(h, a, b) * h
        return make_fx(f, tracing_mode="fake")(a, b, c)
    if case == "returned":  # the addend is an output (the forward's saved tensors are)
        def f(a, b, c):
            h = c * 2
            return torch.addmm(h, a, b), h
        return make_fx(f, tracing_mode="fake")(a, b, c)
    if case == "view":  # a view of a tensor read later: writing it would change that
        return make_fx(lambda a, b, c: (torch.addmm(c.view(50, 24), a, b), c),
                       tracing_mode="fake")(a, b, c.reshape(-1))
    if case == "unsafe_view":  # a view its schema does not declare, of a tensor returned
        def f(a, b, c):
            h = c * 2
            return torch.ops.aten._unsafe_view.default(h, [50, 24]).addmm(a, b), h
        return make_fx(f, tracing_mode="fake")(a, b, c)
    if case == "scaled":  # beta / alpha other than 1
        return make_fx(lambda a, b, c: torch.addmm(c * 2, a, b, beta=0.5),
                       tracing_mode="fake")(a, b, c)
    if case == "transposed":  # not contiguous
        return make_fx(lambda a, b, c: torch.addmm((c * 2).t().contiguous().t(), a, b),
                       tracing_mode="fake")(a, b, c)
    ai, bi, ci = (x.long() for x in (a, b, c))  # integer products are not rewritten
    return make_fx(lambda a, b, c: torch.addmm(c * 2, a, b), tracing_mode="fake")(ai, bi, ci)


@pytest.mark.parametrize("case", ["graph_input", "read_later", "returned", "view", "unsafe_view",
                                  "scaled",
                                  "transposed", "integer"])
def test_other_addmm_forms_are_left_alone(case):
    gm = _addend_graph(case)
    assert _targets(gm).count(_aten.addmm.default) == 1
    assert R.accumulate_full_addmm(gm.graph) == 0


def test_addmm_pass_is_a_cached_custom_pass_in_the_config_before_the_thin_one():
    from torch._inductor.custom_graph_pass import CustomGraphPass

    passes = I.config_patches()["post_grad_custom_post_pass"]
    assert all(isinstance(p, CustomGraphPass) for p in passes)
    assert ["AccumulateFullAddmm" in str(p.uuid()) for p in passes] == [True, False]
    assert "TransposeThinMatmuls" in str(passes[1].uuid())
    a, b, c, _ = _operands()
    gm = make_fx(lambda a, b, c: torch.addmm(c * 2, a, b), tracing_mode="fake")(a, b, c)
    passes[0](gm.graph)
    assert passes[0].rewritten == 1


@pytest.mark.slow  # one real inductor compile (training)
def test_compiled_sage_training_step_is_rewritten_and_keeps_gradients(monkeypatch):
    """SAGEConv's ``lin_l(aggr) + lin_r(x)`` is an ``addmm`` of a full-size addend after
    inductor's patterns: the pass rewrites it, and the compiled step's outputs and
    gradients equal eager's (float64)."""
    import graph_adapter as ga
    from torch_geometric.nn import GraphSAGE

    from _padding import pad_batch, random_graphs

    counts = []
    orig = R.accumulate_full_addmm
    monkeypatch.setattr(R, "accumulate_full_addmm", lambda g: counts.append(orig(g)) or counts[-1])
    flat = pad_batch(random_graphs(torch.Generator().manual_seed(0), 6, features=8), 40, 90, 7)
    flat = {k: v.double() if v.is_floating_point() else v for k, v in flat.items()}
    torch.manual_seed(0)
    base = GraphSAGE(8, 16, num_layers=2, out_channels=8).double()
    loss = ga.masked_loss("mse", target="x", level="node")
    eager = ga.ipu_wrap(copy.deepcopy(base), loss_fn=loss)
    wrapped = ga.ipu_wrap(copy.deepcopy(base), loss_fn=loss)
    # a cache hit would skip the pass
    compiled = ga.compile(wrapped, "inductor", options={"force_disable_caches": True})
    out, ref = compiled(flat), eager(flat)
    grads = torch.autograd.grad(out["loss"], list(wrapped.parameters()))
    ref_grads = torch.autograd.grad(ref["loss"], list(eager.parameters()))
    assert sum(counts) >= 1, counts  # forward (lin_l + lin_r) and backward graphs
    torch.testing.assert_close(out["output"], ref["output"], rtol=1e-10, atol=1e-10)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    torch._dynamo.reset()
