"""graph_adapter.tuning.rewrites.unfuse_bias: a CPU inference graph's ``addmm``
becomes ``mm`` + an add where the add fuses (pointwise users, or a thin product), outputs
kept; CPU inference compiles run it before the thin-matmul rewrite."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from graph_adapter.tuning import cpu_settings as I
from graph_adapter.tuning import registry
from graph_adapter.tuning.rewrites import transpose_thin_matmuls
from graph_adapter.tuning.rewrites.unfuse_bias import unfuse_bias_addmm

ATEN = torch.ops.aten


def _graph(fn, *inputs):
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn, tracing_mode="fake")(*inputs)


def _count(gm, target) -> int:
    return sum(n.target is target for n in gm.graph.nodes)


def _sage(x, aggr, wl, bl, wr):
    """SAGEConv's ``lin_l(aggr) + lin_r(x)``, then a relu (a pointwise user)."""
    return torch.relu(torch.addmm(bl, aggr, wl.t()) + torch.mm(x, wr.t()))


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 60), k=st.integers(1, 20), cols=st.integers(1, 40),
       chained=st.booleans())
def test_rewritten_where_the_add_fuses_and_equal(rows, k, cols, chained):
    g = torch.Generator().manual_seed(rows * 100 + cols)
    x, aggr = (torch.randn(rows, k, dtype=torch.float64, generator=g) for _ in range(2))
    wl, wr = (torch.randn(cols, k, dtype=torch.float64, generator=g) for _ in range(2))
    bl = torch.randn(cols, dtype=torch.float64, generator=g)
    if chained:  # addmm(addmm(bias, a, w), x, w'): the form inductor's CPU graphs have
        fn = lambda x, a, wl, bl, wr: torch.relu(  # noqa: E731
            torch.addmm(torch.addmm(bl, a, wl.t()), x, wr.t()))
    else:
        fn = _sage
    gm = _graph(fn, x, aggr, wl, bl, wr)
    before = _count(gm, ATEN.addmm.default)
    assert unfuse_bias_addmm(gm.graph) == before >= 1
    gm.recompile()
    assert _count(gm, ATEN.addmm.default) == 0
    torch.testing.assert_close(gm(x, aggr, wl, bl, wr), fn(x, aggr, wl, bl, wr))
    assert unfuse_bias_addmm(gm.graph) == 0  # never twice


def test_left_alone_where_the_add_would_not_fuse():
    # the addmm feeds a matmul (not pointwise) and its product is not thin: ATen's copy
    # of the bias costs no more than an add kernel of its own would
    a, w, b, w2 = torch.randn(40, 8), torch.randn(32, 8), torch.randn(32), torch.randn(32, 32)
    gm = _graph(lambda a, w, b, w2: torch.mm(torch.addmm(b, a, w.t()), w2), a, w, b, w2)
    assert unfuse_bias_addmm(gm.graph) == 0
    # alpha / beta other than 1, and a graph output of 16+ columns: left alone too
    gm = _graph(lambda a, w, b: torch.addmm(b, a, w.t(), beta=2.0), a, w, b)
    assert unfuse_bias_addmm(gm.graph) == 0
    gm = _graph(lambda a, w, b: torch.addmm(b, a, w.t()), a, w, b)
    assert unfuse_bias_addmm(gm.graph) == 0


def test_a_thin_output_is_rewritten_and_then_transposed():
    # [5020-like rows, 8] output (GraphSAGE's last layer): the mm is computed transposed
    # and the add goes into the copy back
    a, w, b = torch.randn(64, 16), torch.randn(8, 16), torch.randn(8)
    gm = _graph(lambda a, w, b: torch.addmm(b, a, w.t()), a, w, b)
    assert unfuse_bias_addmm(gm.graph) == 1
    assert transpose_thin_matmuls(gm.graph) == 1
    gm.recompile()
    torch.testing.assert_close(gm(a, w, b), torch.addmm(b, a, w.t()))


def test_cpu_inference_config_runs_it_before_the_thin_pass():
    from torch._inductor.custom_graph_pass import CustomGraphPass

    p = I.config_patches(cpu_inference=True)["post_grad_custom_post_pass"]
    assert isinstance(p, CustomGraphPass)
    uuid = str(p.uuid())
    assert uuid.index("unfuse_bias_addmm") < uuid.index("transpose_thin_matmuls")
    a, w, b = torch.randn(64, 16), torch.randn(8, 16), torch.randn(8)
    gm = _graph(lambda a, w, b: torch.addmm(b, a, w.t()), a, w, b)
    p(gm.graph)
    # the thin rewrite saw the mm
    assert p.fired["unfuse_bias_addmm"] == 1 and p.fired["transpose_thin_matmuls"] >= 1
    # training graphs keep the thin pass alone; the registry turns it off
    assert "unfuse_bias_addmm" not in str(I.config_patches()["post_grad_custom_post_pass"].uuid())
    with registry.disabled("unfuse_bias_addmm"):
        off = I.config_patches(cpu_inference=True)["post_grad_custom_post_pass"]
    assert "unfuse_bias_addmm" not in str(off.uuid())


def test_compiled_sage_inference_is_rewritten_and_equal():
    pytest.importorskip("torch_geometric")
    import graph_adapter as ga
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(0)
    model = GraphSAGE(6, 16, num_layers=2, out_channels=3).eval()
    n, e = 30, 80
    flat = {"x": torch.randn(n, 6), "edge_index": torch.randint(0, n, (2, e))}
    from graph_adapter.batching import Budget, collate_padded
    from torch_geometric.data import Data

    batch = collate_padded([Data(**flat)], Budget(nodes=40, edges=100, graphs=2))
    compiled = ga.compile(ga.ipu_wrap(model), "inductor", background=False)
    compiled.eval()
    with torch.no_grad():
        out = compiled(batch)["output"][:n]
        ref = model(flat["x"], flat["edge_index"])
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
