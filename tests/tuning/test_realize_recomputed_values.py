"""graph_adapter.tuning.rewrites.realize_recomputed_values: the values inductor's CPU
loops would recompute per edge or per vector (a per-node value gathered per edge, a
per-row value broadcast along the channels: GCN's ``deg^-1/2`` and edge norm) are
stored once, results unchanged; nothing else is touched; inductor runs it post-grad."""
import copy
from typing import List

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.fx.experimental.proxy_tensor import make_fx

from graph_adapter.tuning import rewrites as R
from graph_adapter.tuning import cpu_settings as I
from torch._inductor import inductor_prims  # noqa: F401  (registers the op below)

from _rewritten import count_rewrite

_FORCE = torch.ops.prims.inductor_force_stride_order.default


def _gcn_message(x, deg, row, col):
    """GCN's normalised aggregation as PyG's ``gcn_norm`` + ``propagate`` compute it:
    ``x [N, D]``, ``deg [N]``, ``row``/``col`` ``[E]``."""
    dis = deg.pow(-0.5)
    dis = dis.masked_fill(dis == float("inf"), 0)
    norm = dis[row] * dis[col]
    return x.new_zeros(x.shape).index_add(0, col, x[row] * norm.view(-1, 1))


def _inputs(n: int, e: int, d: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    row, col = torch.randint(0, n, (e,), generator=g), torch.randint(0, n, (e,), generator=g)
    deg = torch.zeros(n, dtype=torch.float64).index_add(0, col, torch.ones(e, dtype=torch.float64))
    return torch.randn(n, d, dtype=torch.float64, generator=g), deg, row, col


def _stored(gm: torch.fx.GraphModule) -> List[str]:
    """What each inserted store holds: the name of the op it stores."""
    return sorted(str(n.args[0].target) for n in gm.graph.nodes if n.target is _FORCE)


@settings(deadline=None, max_examples=25)
@given(n=st.integers(1, 12), e=st.integers(1, 30), d=st.integers(1, 20), seed=st.integers(0, 999))
def test_gcn_norm_stored_where_recomputed_and_results_equal(n, e, d, seed):
    args = _inputs(n, e, d, seed)
    gm = make_fx(_gcn_message, tracing_mode="fake")(*args)
    done = R.realize_recomputed_values(gm.graph)
    want = []
    if e > n and n > 1:  # deg^-1/2 (masked) read at 2 x E edge ends, more than N nodes
        want.append("aten.masked_fill.Scalar")
    if d > 1 and e > 1:  # the per-edge norm [E, 1] times the [E, D] messages
        want.append("aten.mul.Tensor")
    assert _stored(gm) == sorted(want) and done == len(want)
    gm.recompile()
    torch.testing.assert_close(gm(*args), _gcn_message(*args), rtol=0, atol=0)
    assert R.realize_recomputed_values(gm.graph) == 0  # never stored twice


def test_other_forms_are_left_alone():
    def fn(x, w, b, idx, v):
        y = x * w.view(1, -1) + b  # per-channel vectors: broadcast along a leading dim
        z = (v * 2)[idx]  # a per-node value gathered at fewer positions than it has
        return y + v.view(-1, 1), z  # a graph input broadcast: stored already

    g = torch.Generator().manual_seed(0)
    args = (torch.randn(30, 8, generator=g), torch.randn(8, generator=g),
            torch.randn(8, generator=g), torch.randint(0, 30, (10,), generator=g),
            torch.randn(30, generator=g))
    gm = make_fx(fn, tracing_mode="fake")(*args)
    assert R.realize_recomputed_values(gm.graph) == 0


def test_inductor_runs_it_in_the_post_grad_pass():
    p = I.config_patches()["post_grad_custom_post_pass"]
    assert "realize_recomputed_values.v2" in str(p.uuid())
    gm = make_fx(_gcn_message, tracing_mode="fake")(*_inputs(6, 20, 8, 0))
    before = p.rewritten
    p(gm.graph)
    assert p.rewritten - before == 2


@pytest.mark.slow
def test_compiled_gcn_eval_stores_the_norm_and_equals_eager(request):
    """PyG's GCN compiled by inductor for inference (scatter layout): the norms are
    stored (counted), outputs equal the eager wrapped model's (float64)."""
    import graph_adapter as ga
    from torch import nn
    from torch_geometric.nn.models import GCN

    from _padding import molecule_like_graphs

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.gcn = GCN(9, 16, 2)

        def forward(self, data):
            return self.gcn(data.x.to(torch.float64), data.edge_index)

    counts: List[int] = count_rewrite("realize_recomputed_values", request)
    graphs = molecule_like_graphs(40, seed=2)
    flat = next(iter(ga.FixedSizeLoader(graphs, ga.Budget.fit(graphs, 16))))
    torch.manual_seed(0)
    base = Model().double().eval()
    with torch.no_grad():
        out = ga.compile(ga.ipu_wrap(copy.deepcopy(base)), "inductor",
                         options={"force_disable_caches": True})(flat)
        ref = ga.ipu_wrap(copy.deepcopy(base))(flat)
    assert sum(counts) >= 2  # per layer: the gathered deg^-1/2 and the broadcast norm
    mask = flat["node_mask"]
    torch.testing.assert_close(out["output"][mask], ref["output"][mask], rtol=1e-10, atol=1e-10)


def test_a_boolean_mask_broadcast_along_the_channels_stays_inline():
    # where(ids < n, x[ids], 0) of layout="sources": the [R, 1] mask is one compare,
    # cheaper to recompute than to load, and a stored one kept inductor from vectorising
    # the masked gather; the same shape of float values is stored (GCN's norm)
    x, ids = torch.randn(8, 16), torch.randint(0, 9, (12,))

    def masked(x, ids):
        keep = (ids < 8).view(-1, 1)
        return torch.where(keep, x[ids.clamp(max=7)], torch.zeros(()))

    def scaled(x, ids):
        w = (ids.to(x.dtype) + 1).sqrt().view(-1, 1)
        return x[ids.clamp(max=7)] * w

    gm = make_fx(masked, tracing_mode="fake")(x, ids)
    assert R.realize_recomputed_values(gm.graph) == 0
    gm = make_fx(scaled, tracing_mode="fake")(x, ids)
    assert R.realize_recomputed_values(gm.graph) == 1
