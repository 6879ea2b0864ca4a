"""A request given as ``Columns`` (one array a feature: what a server decodes a bulk
request into, and what its program's process packs from) predicts exactly what the same
graphs given one by one predict: every graph once, in request order, over one budget
or a ladder's rungs (a graph too large for the bulk rung runs alone in another), for
numpy and torch arrays, and an index outside its graph is named at the same position.

The program is a stand-in (numpy on the padded call: no compile), whose outputs on real
rows depend only on each graph's own rows, offsets and edges: packing, planning and
splitting are what is tested."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from graph_adapter.serve import Contract, EdgeIndexError, InputField, OutputField, Rung
from graph_adapter.serve.columns import Columns, concat, join
from graph_adapter.serve.ops import NumpyOps, TorchOps
from graph_adapter.serve.pack import read_graphs
from graph_adapter.serve.runtime import Predictor

FEATURES = (InputField("x", "feature", "node", "float32", (None, 3)),
            InputField("edge_index", "feature", "edge", "int64", (2, None), inc="nodes"),
            InputField("edge_attr", "feature", "edge", "float32", (None, 2)),
            InputField("u", "feature", "graph", "float32", ()))
OUTPUTS = (OutputField("h", "node", "float32", (None,)),
           OutputField("g", "graph", "float32", (None,)))
RUNGS = (Rung(24, 48, 3, "r0"), Rung(64, 160, 9, "r1"), Rung(100, 220, 2, "r2"))


def _contract(ladder):
    top = RUNGS[-1] if ladder else Rung(100, 220, 9, "model")
    inputs = FEATURES + (InputField("batch", "reserved", "node", "int64", (top.nodes,)),)
    return Contract("pt2", top.nodes, top.edges, top.graphs, inputs, OUTPUTS,
                    rungs=RUNGS if ladder else ())


def _program(flat, contract, program=None):
    """h = row sums of x plus, into each edge's target, its source's sum and its
    edge_attr sum; g = the sum of h over each graph slot, plus u."""
    torchy = isinstance(flat["x"], torch.Tensor)
    f = {k: np.asarray(v) for k, v in flat.items()}
    x, (src, dst) = f["x"].astype(np.float64), f["edge_index"]
    h = x.sum(1)
    np.add.at(h, dst, x[src].sum(1) + f["edge_attr"].sum(1))
    g = np.bincount(f["batch"], weights=h, minlength=contract.graphs) + f["u"]
    out = {"h": h.astype(np.float32), "g": g.astype(np.float32)}
    return {k: torch.from_numpy(v) for k, v in out.items()} if torchy else out


def _graphs(sizes, seed, torchy):
    rng = np.random.default_rng(seed)
    out = []
    for n, e in sizes:
        g = {"x": rng.normal(size=(n, 3)).astype(np.float32),
             "edge_index": rng.integers(0, n, (2, e)).astype(np.int64),
             "edge_attr": rng.normal(size=(e, 2)).astype(np.float32),
             "u": np.asarray(rng.normal(), dtype=np.float32), "y": np.zeros(1)}
        out.append({k: torch.from_numpy(v) for k, v in g.items()} if torchy else g)
    return out


def _same(a, b):
    assert len(a) == len(b)
    for p, q in zip(a, b):
        for k in ("h", "g"):
            assert type(p[k]) is type(q[k])
            np.testing.assert_array_equal(np.asarray(p[k]), np.asarray(q[k]))


sizes = st.lists(st.tuples(st.integers(1, 12), st.integers(0, 20)), min_size=1, max_size=30)


@settings(max_examples=40, deadline=None)
@given(sizes, st.lists(st.integers(0, 29), max_size=2), st.booleans(), st.booleans(),
       st.integers(0, 2 ** 32 - 1))
def test_columns_predict_what_the_graphs_predict_one_by_one(sizes, big, ladder, torchy, seed):
    sizes = list(sizes)
    for i in big:  # a graph only the top rung holds (the bulk rung takes 62 nodes)
        sizes.insert(min(i, len(sizes)), (80, 150))
    contract = _contract(ladder)
    ops = TorchOps() if torchy else NumpyOps()
    p = Predictor(contract, _program, ops)
    graphs = _graphs(sizes, seed, torchy)
    want = p.predict(graphs)
    cols = join(contract, ops, read_graphs(contract, ops, graphs))
    calls = p.calls
    _same(p.predict(cols), want)
    assert p.calls - calls == calls  # the same calls
    # two requests merged (as the server's batcher does), then split back
    a, b = cols.take(contract, 0, len(cols) // 2), cols.take(contract, len(cols) // 2, len(cols))
    _same(p.predict(concat(contract, ops, [a, b])), want)
    # and every graph is its own: predicted alone, it gets the same rows, which are the
    # stand-in's values on that graph unpadded
    for i in range(0, len(graphs), 7):
        _same(p.predict(cols.take(contract, i, i + 1)), want[i:i + 1])
        g = {k: np.asarray(v) for k, v in graphs[i].items()}
        alone = {**g, "batch": np.zeros(len(g["x"]), dtype=np.int64)}
        direct = _program(alone, Contract("pt2", len(g["x"]), 1, 1, contract.inputs, OUTPUTS))
        np.testing.assert_allclose(np.asarray(want[i]["h"]), direct["h"], rtol=1e-6)
        np.testing.assert_allclose(np.asarray(want[i]["g"]), direct["g"], rtol=1e-6)


@pytest.mark.parametrize("torchy", [False, True])
def test_an_index_outside_its_graph_is_named_at_its_position_either_way(torchy):
    contract = _contract(ladder=True)
    ops = TorchOps() if torchy else NumpyOps()
    p = Predictor(contract, _program, ops)
    graphs = _graphs([(3, 4)] * 12, 0, torchy)
    graphs[9]["edge_index"][1, 2] = 3  # graph 9 has nodes 0..2
    with pytest.raises(EdgeIndexError) as per_graph:
        p.predict(graphs)
    cols = join(contract, ops, read_graphs(contract, ops, graphs))
    with pytest.raises(EdgeIndexError) as columns:
        p.predict(cols)
    assert str(columns.value) == str(per_graph.value)
    assert columns.value.graph == per_graph.value.graph == 9
    assert p.calls == 0  # nothing ran: every call is checked before the first


def test_an_empty_request_predicts_nothing():
    contract = _contract(ladder=False)
    p = Predictor(contract, _program, NumpyOps())
    assert p.predict(Columns({f.key: None for f in FEATURES}, [], [], [])) == []
