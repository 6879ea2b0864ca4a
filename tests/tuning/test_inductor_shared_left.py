"""graph_adapter.tuning.rewrites.shared_left: thin CPU products of one left
operand become one product of the concatenated weights whose column slices replace them,
outputs kept; wide products and products of different operands are left alone."""
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from graph_adapter.tuning.rewrites import shared_left as S
from graph_adapter.tuning import registry


def transpose_thin_matmuls_pass():
    """A fresh post-grad pass of a training graph: the registry's enabled rewrites."""
    return registry.graph_pass("post_grad", False, {})

ATEN = torch.ops.aten


def _graph(fn, *inputs):
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn, tracing_mode="fake")(*inputs)


def _mms(gm) -> int:
    return sum(n.target is ATEN.mm.default for n in gm.graph.nodes)


@settings(max_examples=12, deadline=None)
@given(rows=st.integers(1, 40), c=st.integers(1, 24),
       widths=st.lists(st.integers(1, 20), min_size=1, max_size=4), seed=st.integers(0, 99))
def test_thin_products_of_one_operand_merged_and_equal(rows, c, widths, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, c, dtype=torch.float64, generator=g)
    ws = [torch.randn(k, c, dtype=torch.float64, generator=g) for k in widths]

    def fn(x, *ws):  # each product read by its own pointwise op, then summed to one output
        return tuple(torch.relu(torch.mm(x, w.t())) * (i + 1) for i, w in enumerate(ws))

    gm = _graph(fn, x, *ws)
    thin = [k for k in widths if k in S.THIN_WIDTHS]
    kept, total = 0, 0  # as merge_shared_left_mms picks them: in order, up to the cap
    for k in thin:
        if total + k <= S.SHARED_MAX_WIDTH:
            kept, total = kept + 1, total + k
    want = kept - 1 if kept >= 2 else 0
    assert S.merge_shared_left_mms(gm.graph) == want
    gm.recompile()
    assert _mms(gm) == len(widths) - want
    for got, ref in zip(gm(x, *ws), fn(x, *ws)):
        torch.testing.assert_close(got, ref)
    assert S.merge_shared_left_mms(gm.graph) == 0  # never twice


def test_left_alone_for_other_operands_and_switch():
    x, y = torch.randn(30, 16), torch.randn(30, 16)
    w1, w2 = torch.randn(8, 16), torch.randn(8, 16)
    gm = _graph(lambda x, y, a, b: torch.mm(x, a.t()) + torch.mm(y, b.t()), x, y, w1, w2)
    assert S.merge_shared_left_mms(gm.graph) == 0
    # products that are graph outputs keep their own (contiguous) buffers
    gm = _graph(lambda x, a, b: (torch.mm(x, a.t()), torch.mm(x, b.t())), x, w1, w2)
    assert S.merge_shared_left_mms(gm.graph) == 0
    fn = lambda x, a, b: torch.mm(x, a.t()) + torch.mm(x, b.t())  # noqa: E731
    on = str(transpose_thin_matmuls_pass().uuid())
    with registry.disabled("merge_shared_left_mms"):
        p = transpose_thin_matmuls_pass()
        p(_graph(fn, x, w1, w2).graph)
        assert "merge_shared_left_mms" not in str(p.uuid()) and "merge_shared_left_mms" in on
    assert "merge_shared_left_mms" not in p.fired
    gm = _graph(fn, x, w1, w2)
    p = transpose_thin_matmuls_pass()  # the post-grad pass runs it before the thin rule
    p(gm.graph)
    gm.recompile()
    assert p.rewritten >= 1 and _mms(gm) == 1
    torch.testing.assert_close(gm(x, w1, w2), fn(x, w1, w2))
