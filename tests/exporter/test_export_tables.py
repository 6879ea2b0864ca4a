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
import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

pytest.importorskip("onnxruntime", reason="the serve extra (onnx, onnxscript, onnxruntime)")

import onnx  # noqa: E402
from torch_geometric.data import Data  # noqa: E402
from torch_geometric.nn import GINConv, global_add_pool  # noqa: E402

from graph_adapter import serve  # noqa: E402
from graph_adapter.exporter import export  # noqa: E402
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
    # GIN's edge rows are x_j: the padding slots' zero row is a zero row of x gathered
    # with them, not a Concat of the edge rows (test_the_padding_slots_zero_row_...)
    assert [r.op_type for r in _slot_rows(proto)] == ["Gather", "Gather"]
    # and no shape the exporter wrote is stale (the edge rows grew by that row)
    onnx.shape_inference.infer_shapes(proto, strict_mode=True)
    # nor an initializer nobody reads (the tables the zero rows replaced, the exporter's
    # leftovers: onnxruntime warns of each at every load)
    read = {x for n in proto.graph.node for x in n.input}
    assert [i.name for i in proto.graph.initializer if i.name not in read] == []
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
    p = serve.load(path, threads=2)
    with pytest.raises(serve.NonFiniteError, match="graph 1: feature 'x' holds inf"):
        p.predict(feed)  # the export data held no inf: refused by default
    # a contract whose export data held some (finite=False) lets it through: it must stay
    # in its own graph's rows
    p.contract = dataclasses.replace(p.contract, inputs=tuple(
        dataclasses.replace(f, finite=False) if f.key == "x" else f for f in p.contract.inputs))
    got = np.stack(p.predict(feed))
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
    feed[2]["x"][0, 1] = 5  # outside the second table (5 rows): refused before any call
    with pytest.raises(serve.CodeRangeError, match="graph 2: .* valid codes there are 0 .. 4"):
        p.predict(feed)
    feed[2]["x"][0, 1] = -1  # (a combined table's Gather would wrap it to another row)
    with pytest.raises(serve.CodeRangeError, match="graph 2: feature 'x' holds -1"):
        p.predict(feed)


def test_a_one_budget_artifact_fits_its_tables_on_the_loaders_graphs_as_a_ladder_does(
        tmp_path):
    """The width and spill capacity come from every graph export is given (the loader's
    dataset), by the rule each rung of a ladder uses (``fit_tables``), not from the few
    check batches: hubs only past the loader's first batches still fit one call."""
    from graph_adapter.exporter.onnx import fit_tables
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
    from graph_adapter.exporter.onnx import _case_graphs, fit_tables
    from graph_adapter.batching import Collator

    data = _graphs(5, seed=7, hub=9)
    col = Collator(data, Budget.fit(data, 8), warn=False)
    flat = col.collate_indices(range(len(data)))
    graphs = _case_graphs([(flat, None, flat)])
    assert [g.num_nodes for g in graphs] == [d.num_nodes for d in data]
    for g, d in zip(graphs, data):
        assert torch.equal(g.edge_index, d.edge_index)
    assert fit_tables(graphs, 6) == fit_tables(data, 6)


class GINE(nn.Module):
    """The demo's message, ``relu(x_j + edge_table[code])``, one layer (GINEConv)."""

    def __init__(self):
        super().__init__()
        from torch_geometric.nn import GINEConv

        self.bond = nn.Embedding(5, 16)
        self.lin = nn.Linear(3, 16)
        self.conv = GINEConv(nn.Linear(16, 4))

    def forward(self, x, edge_index, edge_attr, batch):
        h = self.conv(self.lin(x), edge_index, self.bond(edge_attr[:, 0]))
        return global_add_pool(h, batch)


def _slot_rows(proto):
    """The producers of the rows each table sum gathers (over the transposed ``in_slots``)."""
    producers = {o: n for n in proto.graph.node for o in n.output}
    return [producers[n.input[0]] for n in proto.graph.node
            if n.op_type == "Gather" and n.input[1] == "graph_adapter_slots_t"]


@pytest.mark.extended  # (two exports, each checked at three thread counts: 9 s)
def test_the_padding_slots_zero_row_is_computed_with_the_edge_rows_not_copied(tmp_path):
    """A table sum's padding slots read row ``E`` of the edge rows, a zero row: where the
    rows are ``Gather``s through ``Add``/``Relu`` (GINE's ``relu(x_j + e)``, GIN's
    ``x_j``) each lookup reads a zero row appended to its table (or to ``x``, fewer rows
    than the edges) instead of a ``Concat`` of ``E + 1`` edge rows a layer; the same
    predictions at 1, 2 and 4 threads; a NaN refused by name (no NaN in the export data)."""
    torch.manual_seed(0)
    data = _graphs(8, seed=8)
    for d in data:
        d.edge_attr = torch.randint(0, 5, (d.edge_index.shape[1], 1))
    for model, keys in ((GINE().eval(), ("x", "edge_index", "edge_attr")),
                        (GIN().eval(), ("x", "edge_index"))):
        path = str(tmp_path / f"{type(model).__name__}.onnx")
        export(ipu_wrap(model), Budget.fit(data, 8), path, format="onnx", example=data)
        rows = _slot_rows(onnx.load(path))
        assert rows and all(r.op_type != "Concat" for r in rows), [r.op_type for r in rows]
        feed = [{k: d[k].numpy() for k in keys} for d in data]
        # a NaN is refused by name before any call (the export data held none)
        bad = [dict(g) for g in feed]
        bad[1]["x"] = bad[1]["x"].copy()
        bad[1]["x"][0, 0] = np.nan
        with pytest.raises(serve.NonFiniteError, match="graph 1: feature 'x'"):
            serve.load(path, threads=1).predict(bad)
        with torch.no_grad():
            ref = np.stack([model(*[d[k] for k in keys], torch.zeros(d.num_nodes,
                                                                     dtype=torch.long))[0].numpy()
                            for d in data])
        first = None
        for threads in (1, 2, 4):
            got = np.stack(serve.load(path, threads=threads).predict(feed))
            first = got if first is None else first
            np.testing.assert_array_equal(got, first)
        np.testing.assert_allclose(first, ref, atol=1e-5, rtol=1e-5)


def _message_model(nodes, edges, width, rows, relu_add):
    """A hand-made ONNX model: edge rows ``relu(x[src] + table[code])`` (or ``x[src]``)
    summed into ``edge_index[1]`` as the exporter writes it (a ``ScatterElements`` add on
    an expanded row index)."""
    from onnx import TensorProto, helper, numpy_helper

    table = np.random.default_rng(rows).standard_normal((rows, width)).astype(np.float32)
    f, i = TensorProto.FLOAT, TensorProto.INT64
    nodes_ = [helper.make_node("Gather", ["ei", "zero"], ["src"], axis=0),
              helper.make_node("Gather", ["ei", "one"], ["dst"], axis=0),
              helper.make_node("Gather", ["x", "src"], ["xj"], axis=0)]
    if relu_add:
        nodes_ += [helper.make_node("Gather", ["table", "code"], ["e"], axis=0),
                   helper.make_node("Add", ["xj", "e"], ["pre"]),
                   helper.make_node("Relu", ["pre"], ["msg"])]
    else:
        nodes_ += [helper.make_node("Identity", ["xj"], ["msg"])]
    nodes_ += [helper.make_node("Reshape", ["dst", "col"], ["dst2"]),
               helper.make_node("Shape", ["msg"], ["shape"]),
               helper.make_node("Expand", ["dst2", "shape"], ["idx"]),
               helper.make_node("ConstantOfShape", ["zshape"], ["zeros"],
                                value=numpy_helper.from_array(np.zeros(1, np.float32))),
               helper.make_node("ScatterElements", ["zeros", "idx", "msg"], ["out"], axis=0,
                                reduction="add")]
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
             (("zero", 0), ("one", 1), ("col", [-1, 1]), ("zshape", [nodes, width]))]
    inits.append(numpy_helper.from_array(table, "table"))
    graph = helper.make_graph(nodes_, "m", [helper.make_tensor_value_info("x", f, [nodes, width]),
                                            helper.make_tensor_value_info("ei", i, [2, edges]),
                                            helper.make_tensor_value_info("code", i, [edges])],
                              [helper.make_tensor_value_info("out", f, [nodes, width])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), table


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_edge_rows_that_compute_their_zero_row_sum_to_the_same_bits(draw):
    """Property: the table sums with the zero row computed through the edge rows' lookups
    (:func:`computed_zero_rows`, run after the table sums or not) give the bits of the ``Concat`` form on any graph
    (any in-degrees, spilled edges, NaN and infinite features, fewer or more nodes than
    edges), and the eager sums on the real nodes."""
    import onnxruntime as ort

    from graph_adapter.exporter import onnx_rewrites as R
    from graph_adapter.exporter.onnx_rewrites._graph import ZERO_ROW
    from graph_adapter.serve.pack import in_tables

    nodes = draw.draw(st.integers(3, 12), label="nodes")
    real = draw.draw(st.integers(0, 30), label="real edges")
    edges = real + draw.draw(st.integers(0, 4), label="padding edges")
    width, rows = 3, draw.draw(st.integers(1, 6), label="table rows")
    relu_add = draw.draw(st.booleans(), label="relu(x_j + e)")
    src = draw.draw(st.lists(st.integers(0, nodes - 2), min_size=real, max_size=real))
    dst = draw.draw(st.lists(st.integers(0, nodes - 2), min_size=real, max_size=real))
    values = st.one_of(st.floats(-4, 4, width=32), st.sampled_from([np.nan, np.inf, -np.inf]))
    x = np.array(draw.draw(st.lists(values, min_size=nodes * width, max_size=nodes * width)),
                 np.float32).reshape(nodes, width)
    ei = np.full((2, edges), nodes - 1, np.int64)
    ei[0, :real], ei[1, :real] = src, dst
    code = np.array(draw.draw(st.lists(st.integers(0, rows - 1), min_size=edges,
                                       max_size=edges)), np.int64)
    slots, spill = in_tables(ei[1], real, nodes, 2, max(real, 1))
    feed = {"x": x, "ei": ei, "code": code, "s": slots, "k": spill}
    got = {}
    for computed in (False, True):
        model, table = _message_model(nodes, edges, width, rows, relu_add)
        assert R.table_row_scatters(model, "ei", "s", "k", nodes, 2, max(real, 1)) == 1
        if computed:
            R.computed_zero_rows(model)
        concats = [n for n in model.graph.node if n.op_type == "Concat"
                   and n.name.endswith(ZERO_ROW) and "msg" in n.input[:1]]
        # (kept: the Concat form, or x with no fewer rows than the edges)
        assert bool(concats) == (not computed or nodes >= edges)
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        sess = ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
        names = {i.name for i in model.graph.input}
        got[computed] = sess.run(["out"], {k: v for k, v in feed.items() if k in names})[0]
    np.testing.assert_array_equal(got[True], got[False])  # (NaNs equal too)
    msg = x[ei[0]] + (table[code] if relu_add else 0)
    msg = np.maximum(msg, 0) if relu_add else msg
    ref = np.zeros((nodes, width), np.float64)
    np.add.at(ref, ei[1, :real], msg[:real].astype(np.float64))
    np.testing.assert_allclose(got[True][:nodes - 1], ref[:nodes - 1].astype(np.float32),
                               rtol=1e-5, atol=1e-5)
