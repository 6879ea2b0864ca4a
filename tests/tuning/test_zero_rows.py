"""graph_adapter.tuning.rewrites.zero_rows: ``mm(cat([S, zeros]), W)`` (the first
layer's aggregate under ``layout="sources"``: rows past the in-edge prefix are zero)
multiplies ``S`` only, outputs equal (up to the BLAS kernel's rounding); left alone
otherwise; run post-grad."""
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.fx.experimental.proxy_tensor import make_fx

from graph_adapter.tuning import registry
from graph_adapter.tuning import rewrites as R
from graph_adapter.tuning.rewrites.zero_rows import multiply_real_rows

ATEN = torch.ops.aten


def _mm_rows(gm):
    return sorted(int(n.meta["val"].shape[0]) for n in gm.graph.nodes
                  if n.target is ATEN.mm.default)


@settings(deadline=None, max_examples=20)
@given(r=st.integers(1, 20), pad=st.integers(1, 20), c=st.integers(1, 12), k=st.integers(1, 12),
       seed=st.integers(0, 99))
def test_only_the_real_rows_are_multiplied_and_outputs_equal(r, pad, c, k, seed):
    g = torch.Generator().manual_seed(seed)
    s, w = torch.randn(r, c, generator=g), torch.randn(c, k, generator=g)

    def fn(s, w):
        return torch.mm(torch.cat([s, s.new_zeros(pad, c)]), w)

    gm = make_fx(fn, tracing_mode="fake")(s, w)
    assert multiply_real_rows(gm.graph) == 1
    gm.recompile()
    assert _mm_rows(gm) == [r]
    torch.testing.assert_close(gm(s, w), fn(s, w))
    assert multiply_real_rows(gm.graph) == 0


def test_left_alone_where_the_rows_are_not_zero_or_read_elsewhere():
    s, w, y = torch.randn(5, 4), torch.randn(4, 3), torch.randn(2, 4)
    cases = [
        lambda s, w, y: torch.mm(torch.cat([s, y]), w),                     # not zeros
        lambda s, w, y: torch.mm(torch.cat([s.new_zeros(2, 4), s]), w),     # zeros first
        lambda s, w, y: (lambda a: (torch.mm(a, w), a))(torch.cat([s, s.new_zeros(2, 4)])),
        lambda s, w, y: torch.mm(torch.cat([s, s.new_zeros(5, 4)], 1).view(10, 4), w),
    ]
    for fn in cases:
        gm = make_fx(fn, tracing_mode="fake")(s, w, y)
        assert multiply_real_rows(gm.graph) == 0


def test_the_post_grad_pass_runs_it():
    s, w = torch.randn(6, 8), torch.randn(8, 3)
    gm = make_fx(lambda s, w: torch.mm(torch.cat([s, s.new_zeros(4, 8)]), w),
                 tracing_mode="fake")(s, w)
    p = registry.graph_pass("post_grad", False, {})
    p(gm.graph)
    assert p.fired["multiply_real_rows"] == 1 and _mm_rows(gm) == [6]
    assert "multiply_real_rows.v1" in str(p.uuid())
