"""FixedSizeNeighborLoader(layout="sources"): each in-edge prefix row's sources as a table
(``in_sources``), the same batches otherwise, one shape for every batch, and the same
real-row outputs of PyG models whose sum or mean aggregation gathers through it (at
inference; training and other messages take PyG's path)."""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data
from torch_geometric.nn import GCN, GIN, GraphSAGE

import graph_adapter as ga
from graph_adapter.app.demo.node import sbm_graph
from graph_adapter.batching import DegreeWidthError
from graph_adapter.checker import value_problems
from graph_adapter.format import IN_SOURCES
from graph_adapter.nn import static_layout
from graph_adapter.sampling import FixedSizeNeighborLoader
from graph_adapter.sampling.layout import source_table, source_table_shape


def _graph(n: int, m: int, seed: int) -> Data:
    """A stochastic block model graph of ``n`` nodes, ``m / n`` out-edges a node, 4 features."""
    return sbm_graph(n, classes=3, out_degree=max(m / n, 0.5), dim=4, seed=seed)


@st.composite
def setups(draw):
    """Directed sampling with bounded fanouts (what the table needs), any other setting."""
    fanouts = draw(st.lists(st.sampled_from([0, 1, 2, 3, 6]), min_size=1, max_size=3))
    n = draw(st.integers(8, 60))
    data = _graph(n, draw(st.integers(1, 400)), draw(st.integers(0, 10 ** 6)))
    return dict(data=data, num_neighbors=fanouts, batch_size=draw(st.integers(1, 9)),
                replace=draw(st.booleans()), disjoint=draw(st.booleans()),
                seed=draw(st.integers(0, 99)))


def _models():
    torch.manual_seed(0)
    return {"sage mean": GraphSAGE(4, 8, num_layers=2, out_channels=3, aggr="mean"),
            "sage add": GraphSAGE(4, 8, num_layers=2, out_channels=3, aggr="add"),
            "gin": GIN(4, 8, num_layers=2, out_channels=3),
            "gcn": GCN(4, 8, num_layers=2, out_channels=3)}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups())
def test_source_tables_hold_every_real_in_edge_and_keep_the_outputs(setup):
    plain_loader = FixedSizeNeighborLoader(**setup)
    loader = FixedSizeNeighborLoader(**setup, budget=plain_loader.budget, layout="sources")
    R, D = loader.source_shape
    assert (R, D) == source_table_shape(setup["num_neighbors"], True, setup["batch_size"],
                                        int(loader.budget.nodes))
    models = {k: m.double().eval() for k, m in _models().items()}
    wrapped = {k: ga.ipu_wrap(m) for k, m in models.items()}
    for bare, flat in zip(plain_loader, loader):
        assert set(flat) - set(bare) == {IN_SOURCES}
        for k in bare:  # every other key as without the layout
            assert torch.equal(bare[k], flat[k]), k
        table = flat[IN_SOURCES]
        assert table.dtype == torch.int64 and tuple(table.shape) == (R, D)  # every batch
        assert value_problems(flat) == []
        N = flat["node_mask"].numel()
        ei = flat["edge_index"][:, flat["edge_mask"]]
        listed = sorted((r, int(s)) for r in range(R) for s in table[r] if int(s) != N)
        assert listed == sorted(zip(ei[1].tolist(), ei[0].tolist()))  # each real edge once
        nm = flat["node_mask"]
        flat = {k: v.double() if v.is_floating_point() else v for k, v in flat.items()}
        with torch.no_grad():
            for name, model in models.items():
                ref = model(flat["x"][nm], ei)
                torch.testing.assert_close(wrapped[name](flat)["output"][nm], ref, msg=name)


def test_the_table_is_used_where_the_messages_are_the_source_rows(monkeypatch):
    data = _graph(60, 400, 1)
    loader = FixedSizeNeighborLoader(data, [4, 3], 8, layout="sources")
    flat = next(iter(loader))
    calls = []
    real = static_layout.source_aggregate
    monkeypatch.setattr(static_layout, "source_aggregate",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    for name, model in _models().items():
        wrapped = ga.ipu_wrap(model.eval())
        del calls[:]
        with torch.no_grad():
            wrapped(flat)
        # GCN's messages are weighted (a new tensor): PyG's path
        assert len(calls) == (0 if name == "gcn" else 2), name
        del calls[:]
        # training: the second layer's messages carry a gradient (PyG's path); the first
        # layer's are rows of the data, which need none, so the table serves them
        wrapped(flat)["output"].sum().backward()
        assert len(calls) == (0 if name == "gcn" else 1), name


def test_compiled_with_the_table_equals_the_plain_model():
    data = _graph(80, 600, 2)
    loader = FixedSizeNeighborLoader(data, [5, 3], 8, layout="sources")
    model = _models()["sage mean"].eval()
    compiled = ga.compile(ga.ipu_wrap(model), "aot_eager", background=False)
    with torch.no_grad():
        for flat in loader:
            nm, em = flat["node_mask"], flat["edge_mask"]
            torch.testing.assert_close(compiled(flat)["output"][nm],
                                       model(flat["x"][nm], flat["edge_index"][:, em]))


def test_refused_where_no_fanout_bounds_the_in_degrees():
    data = _graph(30, 100, 3)
    for kwargs in (dict(num_neighbors=[3, -1]), dict(num_neighbors=[3, 2], directed=False)):
        with pytest.raises(ValueError, match="layout='hyb'"):
            FixedSizeNeighborLoader(data, batch_size=4, layout="sources", **kwargs)


def test_a_batch_past_the_table_names_the_node():
    edge_index = torch.tensor([[1, 2, 3, 4], [0, 0, 0, 5]])
    with pytest.raises(DegreeWidthError, match="node 5 has in-edges, past the 4 rows"):
        source_table(edge_index, 4, 8, (4, 3))
    with pytest.raises(DegreeWidthError, match="node 0 has 3 in-edges, more than"):
        source_table(edge_index[:, :3], 3, 8, (4, 2))
    got = source_table(edge_index[:, :3], 3, 8, (2, 3))[IN_SOURCES]
    assert got.tolist() == [[1, 2, 3], [8, 8, 8]]


def test_table_sizes_for_another_layout_are_refused_not_ignored():
    data = _graph(30, 100, 4)
    for layout in ("sources", None):
        for kwargs in (dict(layout_widths=(2, 2)), dict(layout_spills=(4, 4))):
            with pytest.raises(ValueError, match="layout='hyb'"):
                FixedSizeNeighborLoader(data, [3, 2], 4, layout=layout, **kwargs)
