"""graph_adapter.tuning.rewrites.project_aggregate: ``mm(aggregate(x[src]), W)``
with fewer output than input channels becomes ``aggregate((x @ W)[src])`` (sum or mean,
PyG's scatter form), outputs kept; left alone where the aggregate is read elsewhere or
the product widens; the post-grad pass runs it and keys inductor's cache by it."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from graph_adapter.tuning.rewrites import project_aggregate as P
from graph_adapter.tuning import registry


def transpose_thin_matmuls_pass():
    """A fresh post-grad pass of a training graph: the registry's enabled rewrites."""
    return registry.graph_pass("post_grad", False, {})

ATEN = torch.ops.aten


def _graph(fn, *inputs):
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn, tracing_mode="fake")(*inputs)


def _aggregate(x, src, dst, n, mean, select):
    """PyG's ``scatter(x[src], dst, reduce="sum" | "mean")`` as its ATen ops."""
    e, c = src.numel(), x.size(1)
    rows = x.index_select(0, src) if select else x[src]
    s = x.new_zeros(n, c).scatter_add(0, dst.view(-1, 1).expand(e, c), rows)
    if not mean:
        return s
    cnt = x.new_zeros(n).scatter_add(0, dst, x.new_ones(e)).clamp(min=1)
    return s / cnt.view(-1, 1).expand(n, c)


def _scatter_widths(gm):
    return sorted(int(node.meta["val"].shape[1]) for node in gm.graph.nodes
                  if node.target is ATEN.scatter_add.default and node.meta["val"].dim() == 2)


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 30), e=st.integers(0, 60), c=st.integers(1, 24), k=st.integers(1, 24),
       mean=st.booleans(), select=st.booleans(), bias=st.booleans(), seed=st.integers(0, 99))
def test_projected_where_it_narrows_and_equal(n, e, c, k, mean, select, bias, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, dtype=torch.float64, generator=g)
    src = torch.randint(0, n, (e,), generator=g)
    dst = torch.randint(0, n, (e,), generator=g)
    w = torch.randn(k, c, dtype=torch.float64, generator=g)
    b = torch.randn(k, dtype=torch.float64, generator=g)

    def fn(x, src, dst, w, b):
        a = _aggregate(x, src, dst, n, mean, select)
        return torch.addmm(b, a, w.t()) if bias else torch.mm(a, w.t())

    gm = _graph(fn, x, src, dst, w, b)
    want = 1 if k < c else 0
    assert P.project_before_aggregate(gm.graph) == want
    gm.recompile()
    if want:  # the rows are gathered and summed k wide, never c wide
        assert c not in _scatter_widths(gm) and k in _scatter_widths(gm)
    torch.testing.assert_close(gm(x, src, dst, w, b), fn(x, src, dst, w, b))
    assert P.project_before_aggregate(gm.graph) == 0  # never twice


def test_left_alone_where_the_aggregate_is_read_elsewhere():
    # a training forward keeps the aggregate for the weight's gradient: projecting would
    # compute both
    x, w = torch.randn(10, 16), torch.randn(4, 16)
    src, dst = torch.randint(0, 10, (30,)), torch.randint(0, 10, (30,))

    def fn(x, src, dst, w):
        a = _aggregate(x, src, dst, 10, True, False)
        return torch.mm(a, w.t()), a

    gm = _graph(fn, x, src, dst, w)
    assert P.project_before_aggregate(gm.graph) == 0

    def not_zeros(x, src, dst, w):  # a scatter into x itself, not into zeros
        s = x.scatter_add(0, dst.view(-1, 1).expand(30, 16), x[src])
        return torch.mm(s, w.t())

    gm = _graph(not_zeros, x, src, dst, w)
    assert P.project_before_aggregate(gm.graph) == 0


def test_switch_and_cache_key():
    x, w = torch.randn(10, 16), torch.randn(4, 16)
    src, dst = torch.randint(0, 10, (30,)), torch.randint(0, 10, (30,))
    fn = lambda x, s, d, w: torch.mm(_aggregate(x, s, d, 10, True, False), w.t())  # noqa: E731
    gm = _graph(fn, x, src, dst, w)
    on = str(transpose_thin_matmuls_pass().uuid())
    with registry.disabled("project_before_aggregate"):
        p = transpose_thin_matmuls_pass()
        p(_graph(fn, x, src, dst, w).graph)
        off = str(p.uuid())
    assert "project_before_aggregate" not in p.fired
    assert on != off and "project_before_aggregate.v2" in on
    assert "project_before_aggregate" not in off
    # the post-grad pass runs it (on again)
    p = transpose_thin_matmuls_pass()
    p(gm.graph)
    assert p.rewritten >= 1 and 16 not in _scatter_widths(gm)


@pytest.mark.extended
def test_compiled_sage_inference_equal_and_projected():
    # PyG's SAGEConv 32 -> 4 (mean): its inference graph is rewritten, outputs as eager
    from torch_geometric.nn import SAGEConv

    import graph_adapter as ga

    torch.manual_seed(0)
    conv = SAGEConv(32, 4).eval()
    x, ei = torch.randn(50, 32), torch.randint(0, 50, (2, 200))
    fired = {}
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(conv, backend="inductor", fullgraph=True,
                            options=ga.tuning.cpu_settings.config_patches(
                                cpu_inference=True, fired=fired) | {"fx_graph_cache": False}
                            )(x, ei)
    assert fired["project_before_aggregate"] == 1
    torch.testing.assert_close(got, conv(x, ei), rtol=1e-5, atol=1e-5)


# -- the gather form: a sum over a table of rows (layout="sources") ----------------------

def _source_graph(fn, *inputs):
    """``fn`` traced with :func:`source_aggregate`'s compiled form (slot by slot)."""
    import unittest.mock

    with unittest.mock.patch.object(torch.compiler, "is_compiling", lambda: True):
        return _graph(fn, *inputs)


def _widths_gathered(gm):
    return sorted({int(node.meta["val"].shape[1]) for node in gm.graph.nodes
                   if node.target is ATEN.index.Tensor and node.meta["val"].dim() == 2})


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 30), r=st.integers(1, 30), d=st.integers(1, 6), c=st.integers(1, 24),
       k=st.integers(1, 24), mean=st.booleans(), bias=st.booleans(), seed=st.integers(0, 99))
def test_gather_form_projected_where_it_narrows_and_equal(n, r, d, c, k, mean, bias, seed):
    from graph_adapter.nn.static_layout import source_aggregate

    r = min(r, n)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, dtype=torch.float64, generator=g)
    table = torch.randint(0, n + 1, (r, d), generator=g)  # n: the padding id
    w = torch.randn(k, c, dtype=torch.float64, generator=g)
    b = torch.randn(k, dtype=torch.float64, generator=g)

    def fn(x, table, w, b):
        a = source_aggregate(x, table, n, mean)
        return torch.addmm(b, a, w.t()) if bias else torch.mm(a, w.t())

    gm = _source_graph(fn, x, table, w, b)
    want = 1 if k < c else 0
    assert P.project_before_aggregate(gm.graph) == want
    gm.recompile()
    if want:  # the rows are gathered k wide, never c wide
        assert _widths_gathered(gm) == [k]
    torch.testing.assert_close(gm(x, table, w, b), fn(x, table, w, b))
    assert P.project_before_aggregate(gm.graph) == 0  # never twice


def test_gather_form_left_alone_where_read_elsewhere_or_larger():
    from graph_adapter.nn.static_layout import source_aggregate

    x, w = torch.randn(10, 16), torch.randn(4, 16)
    table = torch.randint(0, 11, (6, 3))

    def kept(x, table, w):  # the aggregate read again (a training forward keeps it)
        a = source_aggregate(x, table, 10, True)
        return torch.mm(a, w.t()), a

    assert P.project_before_aggregate(_source_graph(kept, x, table, w).graph) == 0

    def fewer_rows(x, table, w):  # 4 rows out of 10 gathered rows: projecting costs more
        return torch.mm(source_aggregate(x, table[:4], 4, False), w.t())

    assert P.project_before_aggregate(_source_graph(fewer_rows, x, table, w).graph) == 0

    def not_per_row(x, table, w, y):  # divided by a [R, C] value: not a per-row scale
        return torch.mm(source_aggregate(x, table, 10, False) / y, w.t())

    y = torch.rand(10, 16) + 1
    assert P.project_before_aggregate(_source_graph(not_per_row, x, table, w, y).graph) == 0
