"""graph_adapter.tuning.rewrites: ``linear(sum of embedding lookups)`` becomes lookups in
projected tables, keeping outputs and gradients (float64), and only where it
is exactly that pattern and pays; inductor runs it as its pre-grad pass."""
import copy
from typing import List, Sequence

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from graph_adapter.tuning import rewrites as R
from graph_adapter.tuning import cpu_settings as I

from _rewritten import compiled_equals_eager, count_rewrite, rewritten_graph


class _EncodeProject(nn.Module):
    """Sum of one embedding per column of ``codes``, then ``linears`` projections of it."""

    def __init__(self, vocab: Sequence[int], d_in: int, d_out: int, bias: bool = True,
                 linears: int = 1, **embedding_kwargs) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(n, d_in, **embedding_kwargs) for n in vocab)
        self.lins = nn.ModuleList(nn.Linear(d_in, d_out, bias=bias) for _ in range(linears))

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        h = self.embeddings[0](codes[:, 0])
        for i in range(1, len(self.embeddings)):
            h = h + self.embeddings[i](codes[:, i])
        return sum(lin(h).relu() for lin in self.lins)


def _rewritten(model: nn.Module, *inputs: torch.Tensor):
    """``(compiled model, counts)``: Dynamo's graph of ``model``, rewritten, run eagerly
    (with autograd, so gradients are those of the rewritten graph)."""
    counts: List[int] = []

    def backend(gm: torch.fx.GraphModule, example_inputs):
        counts.append(R.project_embedding_tables(gm.graph))
        gm.recompile()
        return gm.forward

    torch._dynamo.reset()  # one module class, many shapes: a fresh cache each time
    fn = torch.compile(model, backend=backend, fullgraph=True, dynamic=False)
    fn(*inputs)
    return fn, counts


def _codes(vocab: Sequence[int], rows: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randint(0, n, (rows,), generator=g) for n in vocab], dim=1)


def _outputs_and_grads(fn, model: nn.Module, codes: torch.Tensor):
    out = fn(codes)
    grads = torch.autograd.grad(out.square().sum(), list(model.parameters()))
    return out, grads


@given(vocab=st.lists(st.integers(1, 8), min_size=1, max_size=4),
       d_in=st.integers(1, 6), d_out=st.integers(1, 5), bias=st.booleans(),
       linears=st.integers(1, 2), extra_rows=st.integers(0, 30), seed=st.integers(0, 2**16))
def test_rewrite_keeps_outputs_and_gradients(vocab, d_in, d_out, bias, linears, extra_rows,
                                             seed):
    torch.manual_seed(seed)
    model = _EncodeProject(vocab, d_in, d_out, bias, linears).double()
    codes = _codes(vocab, 2 * sum(vocab) + extra_rows, seed)  # tables <= half the lookups
    fn, counts = _rewritten(model, codes)
    assert counts == [linears]
    ours, our_grads = _outputs_and_grads(fn, model, codes)
    ref, ref_grads = _outputs_and_grads(model, model, codes)
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)
    for a, b in zip(our_grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_linears_of_one_sum_share_one_stacked_table():
    model = _EncodeProject([5, 3, 2], 4, 4, linears=3).double()
    graph = rewritten_graph(model, R.project_embedding_tables, 3, _codes([5, 3, 2], 40, 0))
    assert sum(n.target is torch.cat for n in graph.nodes) == 1
    ops = [n.op for n in graph.nodes]  # the placeholders (tables among them) still come first
    assert ops.index("call_function") > max(i for i, op in enumerate(ops) if op == "placeholder")
    # no [rows, d_in] x [d_in, d_out] product of the summed lookups is left
    assert sum(n.target in R.LINEAR for n in graph.nodes) == 3


@pytest.mark.parametrize("case", ["padding_idx", "max_norm", "big_tables", "not_a_lookup"])
def test_other_forms_are_left_alone(case):
    vocab, rows = [6, 4], 40
    kwargs = {"padding_idx": {"padding_idx": 0}, "max_norm": {"max_norm": 1.0}}.get(case, {})
    if case == "big_tables":
        vocab, rows = [30, 20], 60  # 50 table rows > half of 60 lookups: no gain
    model = _EncodeProject(vocab, 4, 3, **kwargs).double()
    codes = _codes(vocab, rows, 1)
    if case == "not_a_lookup":
        class Mixed(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = model

            def forward(self, codes):
                h = self.inner.embeddings[0](codes[:, 0]) + codes[:, 1:2].double()
                return self.inner.lins[0](h)

        model = Mixed()
    ref = model(codes)
    fn, counts = _rewritten(model, codes)
    assert counts == [0]
    torch.testing.assert_close(fn(codes), ref)


def test_inductor_runs_the_rewrite_as_its_pre_grad_pass():
    patches = I.config_patches()
    from torch._inductor.custom_graph_pass import CustomGraphPass

    assert isinstance(patches["pre_grad_custom_pass"], CustomGraphPass)
    assert patches["pre_grad_custom_pass"].uuid() == (
        "graph_adapter.tuning.pre_grad:compose_linears.v1,project_embedding_tables.v4")


@pytest.mark.slow
@pytest.mark.extended  # ~8-35 s: CI's second step runs it (setup.cfg)
def test_demo_model_compiled_with_inductor_is_rewritten_and_keeps_gradients(request):
    """The demo's GINE: its 4 edge projections are rewritten; compiled outputs and
    gradients equal eager ones (float64); ``pre_grad_custom_pass=None`` turns it off."""
    import graph_adapter as ga
    from graph_adapter.app.models import build_model

    from _padding import molecule_like_graphs

    counts: List[int] = count_rewrite("project_embedding_tables", request)
    graphs = molecule_like_graphs(60, seed=0)
    budget = ga.Budget.fit(graphs, 24)  # ~100 edge rows: more than 2x the 30 bond rows
    flat = next(iter(ga.FixedSizeLoader(graphs, budget)))
    flat = {k: v.double() if v.is_floating_point() else v for k, v in flat.items()}
    torch.manual_seed(0)
    base = build_model("gine", 16, 2).double()
    options = {"force_disable_caches": True}  # a cache hit would skip the pass
    eager, wrapped = compiled_equals_eager(base, flat)
    assert sum(counts) == 2
    # the in-place updates of the step (BatchNorm's running statistics) happen too
    eager_buffers = dict(eager.named_buffers())
    for name, buf in wrapped.named_buffers():
        torch.testing.assert_close(buf, eager_buffers[name], rtol=1e-10, atol=1e-10,
                                   msg=lambda m, name=name: f"buffer {name}: {m}")
    # switched off: no rewrite (an inference compile, half the cost of a training one)
    counts.clear()
    off = ga.ipu_wrap(copy.deepcopy(base).eval())
    with torch.no_grad():
        out = ga.compile(off, "inductor", options={**options, "pre_grad_custom_pass": None})(flat)
        ref = ga.ipu_wrap(copy.deepcopy(base).eval())(flat)
    assert counts == []
    torch.testing.assert_close(out["output"], ref["output"], rtol=1e-10, atol=1e-10)


# -- transpose_thin_matmuls ---------------------------------------------------------

def _mm_graph(rows: int, inner: int, cols: int, a_t: bool, b_t: bool):
    """``make_fx`` graph of ``mm(a, b) * 2`` and its float64 inputs (``a_t``/``b_t``:
    the operand is a transposed view, as a weight gradient's ``g^T``)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    g = torch.Generator().manual_seed(rows * 1000 + cols)
    a = torch.randn(inner, rows, dtype=torch.float64, generator=g).t() if a_t else \
        torch.randn(rows, inner, dtype=torch.float64, generator=g)
    b = torch.randn(cols, inner, dtype=torch.float64, generator=g).t() if b_t else \
        torch.randn(inner, cols, dtype=torch.float64, generator=g)
    gm = make_fx(lambda a, b: torch.mm(a, b) * 2, tracing_mode="fake")(a, b)
    return gm, a, b


@given(rows=st.integers(1, 70), inner=st.integers(1, 40), cols=st.integers(1, 20),
       a_t=st.booleans(), b_t=st.booleans())
def test_thin_matmuls_rewritten_exactly_where_the_rule_says_and_equal(rows, inner, cols, a_t,
                                                                       b_t):
    gm, a, b = _mm_graph(rows, inner, cols, a_t, b_t)
    want = R.thin_matmul_rule(rows, cols)
    assert R.transpose_thin_matmuls(gm.graph) == int(want)
    gm.recompile()
    out = gm(a, b)
    torch.testing.assert_close(out, torch.mm(a, b) * 2)
    assert out.is_contiguous()
    mms = [n for n in gm.graph.nodes if n.target is torch.ops.aten.mm.default]
    assert len(mms) == 1
    if want:  # the product now has the long side as its columns
        assert tuple(mms[0].meta["val"].shape) == (cols, rows)
    assert R.transpose_thin_matmuls(gm.graph) == 0  # never rewritten twice


def test_thin_matmul_rule_bounds():
    assert R.thin_matmul_rule(128, 9) and R.thin_matmul_rule(64, 3) and R.thin_matmul_rule(16, 2)
    assert not R.thin_matmul_rule(128, 1)  # a matrix-vector product: MKL is fast
    assert not R.thin_matmul_rule(128, 16)  # 16 columns and more: as fast as it is
    assert not R.thin_matmul_rule(15, 3) and not R.thin_matmul_rule(20, 12)


def test_thin_matmuls_pass_is_a_cached_custom_pass_in_the_config():
    from torch._inductor.custom_graph_pass import CustomGraphPass

    p = I.config_patches()["post_grad_custom_post_pass"]
    assert isinstance(p, CustomGraphPass) and "transpose_thin_matmuls.v1" in str(p.uuid())
    gm, a, b = _mm_graph(40, 7, 5, True, False)
    p(gm.graph)
    assert p.rewritten == 1
