"""graph_adapter.tuning.rewrites.dedupe_pure_ops: an ATen graph's repeated
computations (an inference graph's per-layer ``gcn_norm``) are computed once, results
unchanged; writes, random draws and written buffers are never merged."""
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from graph_adapter.tuning import rewrites as R
from graph_adapter.tuning import cpu_settings as I


def _norm(deg, row, col):
    dis = deg.pow(-0.5)
    return dis[row] * dis[col]


def _two_layers(x, deg, row, col):
    """Two layers, each computing the same edge norm (as GCNConv without ``cached``)."""
    for _ in range(2):
        x = x.new_zeros(x.shape).index_add(0, col, x[row] * _norm(deg, row, col).view(-1, 1))
    return x


def _inputs():
    g = torch.Generator().manual_seed(0)
    row, col = torch.randint(0, 7, (20,), generator=g), torch.randint(0, 7, (20,), generator=g)
    return torch.randn(7, 4, generator=g), torch.rand(7, generator=g) + 1, row, col


def _count(gm, op) -> int:
    return sum(n.target is op for n in gm.graph.nodes)


def test_per_layer_copies_computed_once_and_equal():
    args = _inputs()
    gm = make_fx(_two_layers, tracing_mode="fake")(*args)
    aten = torch.ops.aten
    assert _count(gm, aten.pow.Tensor_Scalar) == 2
    assert R.dedupe_pure_ops(gm.graph) > 0
    gm.recompile()
    assert _count(gm, aten.pow.Tensor_Scalar) == 1
    # the layers' own work stays: two aggregations of different x
    assert _count(gm, aten.index_add.default) == 2
    torch.testing.assert_close(gm(*args), _two_layers(*args), rtol=0, atol=0)
    assert R.dedupe_pure_ops(gm.graph) == 0


def test_written_buffers_and_random_draws_are_left_alone():
    def fn(x):
        a = torch.zeros(3)
        b = torch.zeros(3)
        a.add_(x)  # each fresh buffer written in place: merging them would share writes
        b.mul_(x)
        return a, b, torch.rand(3), torch.rand(3)  # two draws, not one

    gm = make_fx(fn)(torch.ones(3))  # real tracing: in-place ops stay in place
    assert R.dedupe_pure_ops(gm.graph) == 0


def test_no_read_is_merged_across_a_write():
    """``x * 2``, ``x.add_(1)``, ``x * 2`` (one graph input read before and after its
    write, as a hand-built ATen graph has it): the two products differ."""
    aten = torch.ops.aten
    g = torch.fx.Graph()
    x = g.placeholder("x")
    first = g.call_function(aten.mul.Tensor, (x, 2))
    g.call_function(aten.add_.Tensor, (x, 1))
    second = g.call_function(aten.mul.Tensor, (x, 2))
    g.output((first, second))
    assert R.dedupe_pure_ops(g) == 0
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    a, b = gm(torch.ones(3))
    torch.testing.assert_close(b, a + 2)


def test_inductor_runs_it_in_the_post_grad_pass():
    p = I.config_patches()["post_grad_custom_post_pass"]
    assert "dedupe_pure_ops.v1" in str(p.uuid())
    gm = make_fx(_two_layers, tracing_mode="fake")(*_inputs())
    before = p.rewritten
    p(gm.graph)
    assert p.rewritten - before > 0
