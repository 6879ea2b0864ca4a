"""graph_adapter.tuning.rewrites.compose_linears: ``linear(linear(x))`` of a narrow
``x`` becomes one product of ``x`` (the composed weight), keeping outputs and gradients
(float64), only where the rule says and nothing else in between; inductor runs it in its
pre-grad pass, before the embedding-table projection."""
from typing import List, Optional

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from graph_adapter.tuning import rewrites as R
from graph_adapter.tuning import cpu_settings as I

from _rewritten import compiled_equals_eager, count_rewrite, rewritten_graph


class _Encode(nn.Module):
    """``x [rows, k]`` -> ``Linear(k, d)`` -> ``projections`` x ``Linear(d, d_out)``,
    summed (the float bond encoder + per-layer edge projections of a GINE stack);
    ``between``: an op between the two linears (then nothing may be rewritten)."""

    def __init__(self, k: int, d: int, d_out: int, bias1: bool, bias2: bool,
                 projections: int = 1, between: Optional[str] = None) -> None:
        super().__init__()
        self.enc = nn.Linear(k, d, bias=bias1)
        self.lins = nn.ModuleList(nn.Linear(d, d_out, bias=bias2) for _ in range(projections))
        self.between = between

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.enc(x)
        if self.between == "relu":
            h = h.relu()
        elif self.between == "scale":
            h = h * 2.0
        return sum(lin(h) for lin in self.lins)


def _rewritten(model: nn.Module, x: torch.Tensor):
    """``(compiled model, counts)``: Dynamo's graph of ``model`` with the rewrite, run
    eagerly with autograd (gradients are those of the rewritten graph)."""
    counts: List[int] = []

    def backend(gm: torch.fx.GraphModule, example_inputs):
        counts.append(R.compose_linears(gm.graph))
        gm.recompile()
        return gm.forward

    torch._dynamo.reset()
    fn = torch.compile(model, backend=backend, fullgraph=True, dynamic=False)
    fn(x)
    return fn, counts


@settings(deadline=None, max_examples=30)
@given(k=st.integers(1, 6), d=st.integers(1, 16), d_out=st.integers(1, 6),
       bias1=st.booleans(), bias2=st.booleans(), projections=st.integers(1, 3),
       rows=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_rewritten_where_the_rule_says_keeping_outputs_and_gradients(k, d, d_out, bias1, bias2,
                                                                     projections, rows, seed):
    torch.manual_seed(seed)
    model = _Encode(k, d, d_out, bias1, bias2, projections).double()
    x = torch.randn(rows, k, dtype=torch.float64, requires_grad=True)
    fn, counts = _rewritten(model, x)
    want = projections if R.compose_linears_rule(rows, k, d) else 0
    assert counts == [want]
    out = fn(x)
    ref = model(x)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    params = list(model.parameters()) + [x]
    grads = torch.autograd.grad(out.square().sum(), params)
    ref_grads = torch.autograd.grad(ref.square().sum(), params)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-11)


def test_rule_bounds():
    assert R.compose_linears_rule(2138, 3, 64) and R.compose_linears_rule(1041, 9, 64)
    assert R.compose_linears_rule(64, 32, 64)  # half the width: at the bound
    assert not R.compose_linears_rule(1041, 64, 64)  # as wide as the inner output
    assert not R.compose_linears_rule(1041, 33, 64)
    assert not R.compose_linears_rule(10, 3, 64)  # fewer rows than the composed product


def test_the_composed_product_replaces_the_outer_one():
    model = _Encode(3, 64, 64, True, True, projections=4).double()
    graph = rewritten_graph(model, R.compose_linears, 4, torch.randn(200, 3, dtype=torch.float64))
    linears = [n for n in graph.nodes if n.target in R.LINEAR]
    inner = [n for n in linears if n.args[0].op == "placeholder" and R.example_value(n) is not None]
    assert len(inner) == 1  # the inner linear is left for the dead-code passes ...
    assert not inner[0].users  # ... with no [200, 64] x [64, 64] product of it left
    of_x = [n for n in linears if n.args[0] is inner[0].args[0]]
    assert len(of_x) == 5  # itself and the 4 composed products of x [200, 3]


@pytest.mark.parametrize("between", ["relu", "scale"])
def test_anything_between_the_linears_is_left_alone(between):
    model = _Encode(3, 32, 8, True, True, between=between).double()
    x = torch.randn(50, 3, dtype=torch.float64)
    fn, counts = _rewritten(model, x)
    assert counts == [0]
    torch.testing.assert_close(fn(x), model(x))


def test_inductor_runs_it_in_the_pre_grad_pass():
    p = I.config_patches()["pre_grad_custom_pass"]
    model = _Encode(3, 32, 8, True, True, projections=2).double()
    graphs = []
    torch._dynamo.reset()
    torch.compile(model, backend=lambda gm, _: graphs.append(gm) or gm.forward,
                  fullgraph=True)(torch.randn(50, 3, dtype=torch.float64))
    before = p.rewritten
    p(graphs[0].graph)
    assert p.rewritten - before == 2
    assert "compose_linears.v1" in p.uuid() and "project_embedding_tables.v4" in p.uuid()


class _FloatGINE(nn.Module):
    """GINEConv x 2 on the float cast of categorical atom / bond columns (``Linear(3, D)``
    into each layer's edge ``lin``), BatchNorm, add pooling: ``forward(data)``."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        from torch_geometric.nn import GINEConv
        from torch_geometric.nn.models import MLP

        self.atom, self.bond = nn.Linear(9, d), nn.Linear(3, d)
        self.convs = nn.ModuleList(GINEConv(MLP([d, d, d], norm=None), edge_dim=d)
                                   for _ in range(2))
        self.norms = nn.ModuleList(nn.BatchNorm1d(d) for _ in range(2))
        self.head = nn.Linear(d, 1)

    def forward(self, data) -> torch.Tensor:
        from torch_geometric.nn import global_add_pool

        dtype = self.atom.weight.dtype
        x, e = self.atom(data.x.to(dtype)), self.bond(data.edge_attr.to(dtype))
        for conv, norm in zip(self.convs, self.norms):
            x = torch.relu(norm(conv(x, data.edge_index, e)))
        return self.head(global_add_pool(x, data.batch))


@pytest.mark.slow
@pytest.mark.extended  # ~16 s cold: CI's second step runs it (the suite's 10 minutes)
def test_compiled_gine_with_float_edge_features_equals_eager(request):
    """The compiled model's 2 edge projections are composed with the bond linear;
    outputs and gradients equal eager (float64)."""
    import graph_adapter as ga

    from _padding import molecule_like_graphs

    graphs = molecule_like_graphs(40, seed=1)
    budget = ga.Budget.fit(graphs, 16)
    flat = next(iter(ga.FixedSizeLoader(graphs, budget)))
    counts: List[int] = count_rewrite("compose_linears", request)
    torch.manual_seed(0)
    base = _FloatGINE().double()
    compiled_equals_eager(base, flat, grad_rtol=1e-9)
    assert sum(counts) == 2
