"""FixedSizeNeighborLoader(layout="hyb"): the graph-level loader's aggregation tables on
sampled batches: the same batches plus valid tables of one shape for every batch, and
the same real-row outputs of PyG models whose aggregation runs over them."""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data
from torch_geometric.nn import GraphSAGE

import graph_adapter as ga
from graph_adapter.batching import DegreeWidthError
from graph_adapter.checker import value_problems
from graph_adapter.format import ELL_IN, ELL_OUT, SPILL_IN, SPILL_OUT
from graph_adapter.sampling import FixedSizeNeighborLoader
from graph_adapter.sampling.layout import fanout_in_width


def _graph(n: int, m: int, seed: int, feat: int = 4) -> Data:
    g = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(n, feat, generator=g),
                edge_index=torch.randint(0, n, (2, m), generator=g))


@st.composite
def setups(draw):
    n = draw(st.integers(8, 60))
    fan = draw(st.lists(st.sampled_from([-1, 1, 2, 3, 6]), min_size=1, max_size=3))
    disjoint = draw(st.booleans())
    return dict(data=_graph(n, draw(st.integers(1, 400)), draw(st.integers(0, 10 ** 6))),
                num_neighbors=fan, batch_size=draw(st.integers(1, 9)),
                replace=draw(st.booleans()), disjoint=disjoint,
                directed=disjoint or draw(st.booleans()), seed=draw(st.integers(0, 99)))


def _signature(flat):
    return {k: (v.dtype, tuple(v.shape)) for k, v in flat.items()}


def _model(aggr: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return GraphSAGE(4, 8, num_layers=2, out_channels=3, aggr=aggr).double().eval()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups(), aggr=st.sampled_from(["mean", "add"]))
def test_tables_keep_the_batches_and_the_real_row_outputs(setup, aggr):
    plain_loader = FixedSizeNeighborLoader(**setup)
    loader = FixedSizeNeighborLoader(**setup, budget=plain_loader.budget, layout="hyb")
    model = _model(aggr)
    wrapped = ga.ipu_wrap(model)
    sigs = set()
    with torch.no_grad():
        for bare, flat in zip(plain_loader, loader):
            assert set(flat) - set(bare) == {ELL_IN, ELL_OUT, SPILL_IN, SPILL_OUT}
            for k in bare:  # every other key as without the layout
                assert torch.equal(bare[k], flat[k]), k
            assert value_problems(flat) == []  # the tables' ranges and padding ids
            sigs.add(tuple(sorted(_signature(flat).items())))
            nm, em = flat["node_mask"], flat["edge_mask"]
            ref = model(flat["x"][nm].double(), flat["edge_index"][:, em])
            out = wrapped({**flat, "x": flat["x"].double()})["output"][nm]
            torch.testing.assert_close(out, ref)
    assert len(sigs) == 1  # one shape for every batch: one compile


def test_default_widths_from_the_fanouts_hold_every_batch():
    data = _graph(400, 4000, 1)
    loader = FixedSizeNeighborLoader(data, [10, 5], 32, layout="hyb", seed=3)
    assert loader.layout_widths[0] == 5 == fanout_in_width([10, 5], True)
    assert loader.layout_spills[0] == 32 * (10 - 5)  # only seeds pass width 5
    for epoch in range(3):
        loader.set_epoch(epoch)
        for flat in loader:  # a batch over the spill capacity would raise here
            seeds = int(flat["seed_mask"].sum())
            spilled = int((flat["in_spill"][0] < flat["edge_index"].size(1)).sum())
            assert spilled <= seeds * 5
    # no fanout bound (induced subgraphs, -1): every edge may spill
    induced = FixedSizeNeighborLoader(data, [10, 5], 32, layout="hyb", directed=False)
    assert induced.layout_spills == (int(induced.budget.edges),) * 2
    assert fanout_in_width([-1, 5], True) is None
    # another loader takes the same shapes
    other = FixedSizeNeighborLoader(data, [10, 5], 32, layout="hyb", budget=loader.budget,
                                    layout_widths=loader.layout_widths,
                                    layout_spills=loader.layout_spills, seed=9)
    assert _signature(next(iter(other))) == _signature(next(iter(loader)))


def test_unknown_layout_and_bad_widths_are_named():
    data = _graph(50, 200, 2)
    with pytest.raises(ValueError, match="layout='ell'"):
        FixedSizeNeighborLoader(data, [3], 8, layout="ell")
    with pytest.raises(ValueError, match="layout_widths"):
        FixedSizeNeighborLoader(data, [3], 8, layout="hyb", layout_widths=(0, 2))
    small = FixedSizeNeighborLoader(data, [3], 8, layout="hyb", layout_widths=(1, 1),
                                    layout_spills=(1, 1))
    with pytest.raises(DegreeWidthError, match=r"layout_spills=\(1, 1\)\): pass larger "
                                               r"layout_spills"):
        next(iter(small))


def test_compiled_inference_over_the_tables_equals_the_plain_model():
    # under torch.compile the slot sums are unrolled (static_layout._slot_sum)
    data = _graph(300, 2400, 4)
    loader = FixedSizeNeighborLoader(data, [6, 3], 16, layout="hyb", seed=1)
    model = _model("mean").float()
    compiled = ga.compile(ga.ipu_wrap(model), "inductor", background=False)
    compiled.eval()
    with torch.no_grad():
        for flat in list(loader)[:2]:
            nm, em = flat["node_mask"], flat["edge_mask"]
            ref = model(flat["x"][nm], flat["edge_index"][:, em])
            torch.testing.assert_close(compiled(flat)["output"][nm], ref, rtol=1e-5,
                                       atol=1e-5)
