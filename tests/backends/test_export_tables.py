"""ONNX artifacts sum edge rows into their target nodes over the packer's neighbour tables.

``export(..., format="onnx")`` writes PyG's sum aggregation (a ``ScatterElements`` add
on ``edge_index[1]``) as a ``Gather`` over ``in_slots`` (transposed) and a ``MatMul`` of
ones over its width, the edges past a node's width added from ``in_spill``: no sort inside the graph
(``TopK``) and no float64 prefix sums for those sums (the sorted-segment form, 2x
slower on the demo's model: ``benchmarks/bench_onnx_scatter.py``), the same bits at any
thread count. Sums on anything else keep the sorted segments (the pool over
``batch``, whose nodes are in graph order, without the sort). A graph with a hub past the width (spilled edges) and
a request whose hubs spill past one call's capacity still give eager's predictions.
"""
import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("onnxruntime", reason="the serve extra (onnx, onnxscript, onnxruntime)")

import onnx  # noqa: E402
from torch_geometric.data import Data  # noqa: E402
from torch_geometric.nn import GINConv, global_add_pool  # noqa: E402

from graph_adapter import serve  # noqa: E402
from graph_adapter.backends.export import export  # noqa: E402
from graph_adapter.batching import Budget  # noqa: E402
from graph_adapter.nn import ipu_wrap  # noqa: E402


class GIN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = GINConv(nn.Sequential(nn.Linear(3, 32), nn.ReLU(), nn.Linear(32, 32)))
        self.c2 = GINConv(nn.Linear(32, 8))

    def forward(self, x, edge_index, batch):
        return global_add_pool(self.c2(self.c1(x, edge_index).relu(), edge_index), batch)


def _graphs(num, seed, hub=0):
    """Ring-like graphs (in-degree 2) of 6-12 nodes; with ``hub``, node 0 of every third
    graph also takes an edge from each other node (in-degree up to ``hub``)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(num):
        n = int(torch.randint(6, 13, (1,), generator=g))
        src = torch.cat([torch.arange(n), torch.arange(n)])
        dst = torch.cat([(torch.arange(n) + 1) % n, (torch.arange(n) + 2) % n])
        if hub and i % 3 == 0:
            k = min(hub, n - 1)
            src, dst = torch.cat([src, torch.arange(1, k + 1)]), torch.cat([dst, torch.zeros(k)])
        out.append(Data(x=torch.randn(n, 3, generator=g),
                        edge_index=torch.stack([src, dst]).long()))
    return out


def _eager(model, graphs):
    with torch.no_grad():
        return np.stack([model(d.x, d.edge_index, torch.zeros(d.num_nodes, dtype=torch.long))[0]
                         .numpy() for d in graphs])


def test_edge_sums_read_tables_and_match_eager_with_hubs_at_1_2_4_threads(tmp_path):
    torch.manual_seed(0)
    model = GIN().eval()
    data = _graphs(12, seed=1)
    path = str(tmp_path / "m.onnx")
    contract = export(ipu_wrap(model), Budget.fit(data, 8), path, format="onnx", example=data[:6])
    shapes = {f.key: f.shape for f in contract.inputs}
    width, capacity = shapes["in_slots"][1], shapes["in_spill"][1]
    assert shapes["in_slots"][0] == contract.nodes and width >= 2
    proto = onnx.load(path)
    ops = [n.op_type for n in proto.graph.node]
    # two edge sums over the tables; the pool over batch: segments of the nodes in
    # graph order (no sort: no TopK anywhere)
    sums = [n for n in proto.graph.node if n.op_type == "MatMul"
            and n.input[0].startswith("graph_adapter_slot_ones")]  # a MatMul of ones a sum
    assert len(sums) == 2 and ops.count("TopK") == 0 and ops.count("CumSum")
    # hubs past the width spill; enough of them in one request to need several calls
    requests = _graphs(3 * capacity, seed=2, hub=width + 4)
    ref = _eager(model, requests)
    feed = [{"x": d.x.numpy(), "edge_index": d.edge_index.numpy()} for d in requests]
    for threads in (1, 2, 4):
        p = serve.load(path, threads=threads)
        for _ in range(2):
            got = np.stack(p.predict(feed))
            np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-4)
    assert p.calls > 2


def test_non_finite_values_stay_in_their_own_graph(tmp_path):
    torch.manual_seed(0)
    model = GIN().eval()
    data = _graphs(6, seed=3)
    path = str(tmp_path / "m.onnx")
    export(ipu_wrap(model), Budget.fit(data, 8), path, format="onnx", example=data[:6])
    feed = [{"x": d.x.numpy(), "edge_index": d.edge_index.numpy()} for d in data]
    feed[1]["x"] = feed[1]["x"].copy()
    feed[1]["x"][0, 0] = np.inf
    got = np.stack(serve.load(path, threads=2).predict(feed))
    ref = _eager(model, data)
    keep = [i for i in range(len(data)) if i != 1]
    np.testing.assert_allclose(got[keep], ref[keep], atol=1e-4, rtol=1e-4)
    assert not np.isfinite(got[1]).all()


class Encoded(nn.Module):
    """Three categorical columns looked up and summed (an atom encoder) plus a shift,
    one GIN layer."""

    def __init__(self):
        super().__init__()
        self.tables = nn.ModuleList(nn.Embedding(v, 16) for v in (7, 5, 3))
        self.shift = nn.Parameter(torch.randn(16))
        self.conv = GINConv(nn.Linear(16, 4))

    def forward(self, x, edge_index, batch):
        h = self.tables[0](x[:, 0]) + self.tables[1](x[:, 1]) + self.tables[2](x[:, 2]) \
            + self.shift
        return global_add_pool(self.conv(h, edge_index), batch)


def test_summed_lookups_become_one_lookup_of_a_combined_table(tmp_path):
    torch.manual_seed(0)
    model = Encoded().eval()
    data = _graphs(6, seed=4)
    for d in data:
        d.x = torch.stack([torch.randint(0, v, (d.num_nodes,)) for v in (7, 5, 3)], 1)
    path = str(tmp_path / "m.onnx")
    export(ipu_wrap(model), Budget.fit(data, 8), path, format="onnx", example=data)
    proto = onnx.load(path)
    tables = {i.name: tuple(i.dims) for i in proto.graph.initializer}
    looked_up = [tables[n.input[0]] for n in proto.graph.node
                 if n.op_type == "Gather" and n.input[0] in tables and len(tables[n.input[0]]) == 2]
    assert looked_up == [(7 * 5 * 3, 16)]  # one lookup instead of three
    assert not any(i.endswith("shift") for n in proto.graph.node for i in n.input)  # folded
    feed = [{"x": d.x.numpy(), "edge_index": d.edge_index.numpy()} for d in data]
    with torch.no_grad():
        ref = np.stack([model(d.x, d.edge_index, torch.zeros(d.num_nodes, dtype=torch.long))[0]
                        .numpy() for d in data])
    p = serve.load(path, threads=2)
    np.testing.assert_allclose(np.stack(p.predict(feed)), ref, atol=1e-5, rtol=1e-5)
    feed[2]["x"] = feed[2]["x"].copy()
    feed[2]["x"][0, 1] = 5  # outside the second table (5 rows): fails as the lookup did
    with pytest.raises(Exception, match="out of bounds|indices"):
        p.predict(feed)


def test_a_one_budget_artifact_fits_its_tables_on_the_loaders_graphs_as_a_ladder_does(
        tmp_path):
    """The width and spill capacity come from every graph export is given (the loader's
    dataset), by the rule each rung of a ladder uses (``fit_tables``), not from the few
    check batches: hubs only past the loader's first batches still fit one call."""
    from graph_adapter.backends.export.onnx import fit_tables
    from graph_adapter.batching import FixedSizeLoader

    torch.manual_seed(0)
    model = GIN().eval()
    # rings first (the check batches), then 3 hubs of in-degree 11 or more (7 or more past
    # a width of 4; under 0.5% of the nodes, so the width does not cover them)
    hubs = [d for d in _graphs(30, seed=6, hub=12)[::3] if d.num_nodes >= 10][:3]
    data = _graphs(80, seed=5) + hubs
    loader = FixedSizeLoader(data, Budget.fit(data, 4))
    path = str(tmp_path / "m.onnx")
    contract = export(ipu_wrap(model), loader, path, format="onnx")
    shapes = {f.key: f.shape for f in contract.inputs}
    width, capacity = shapes["in_slots"][1], shapes["in_spill"][1]
    assert (width, capacity) == fit_tables(data, contract.graphs)
    assert len(hubs) == 3 and width == 4 and capacity >= 3 * 7 > 16  # (16: the floor)
    p = serve.load(path, threads=1)
    feed = [{"x": d.x.numpy(), "edge_index": d.edge_index.numpy()} for d in hubs]
    np.testing.assert_allclose(np.stack(p.predict(feed)), _eager(model, hubs), atol=1e-4,
                               rtol=1e-4)


def test_the_check_batches_graphs_give_the_same_fit_as_the_graphs_themselves():
    """``write_onnx`` without data fits on the real graphs of its padded check batches."""
    from graph_adapter.backends.export.onnx import _case_graphs, fit_tables
    from graph_adapter.batching import Collator

    data = _graphs(5, seed=7, hub=9)
    col = Collator(data, Budget.fit(data, 8), warn=False)
    flat = col.collate_indices(range(len(data)))
    graphs = _case_graphs([(flat, None, flat)])
    assert [g.num_nodes for g in graphs] == [d.num_nodes for d in data]
    for g, d in zip(graphs, data):
        assert torch.equal(g.edge_index, d.edge_index)
    assert fit_tables(graphs, 6) == fit_tables(data, 6)
