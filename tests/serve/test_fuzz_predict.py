"""Generated requests, valid and broken, against a ``.pt2`` and an ``.onnx`` artifact of
one small model (categorical node and edge codes through embedding tables, a float node
feature, GINE, a graph-level output).

Every answer is either the eager model's prediction for each graph (within the artifact's
tolerance) or a named :class:`~graph_adapter.serve.GraphInputError` naming the broken
graph (its position) and key; never another error, never an answer for a broken request.
Broken: a missing key, a wrong dtype or width, rows that disagree, a negative code or one
past its embedding table, NaN/inf, a graph of 0 nodes, an edge index outside its graph,
a graph over the largest served. Valid: extra keys, index keys of any integer dtype,
nested lists, empty requests, hubs (one node with every other as in-neighbour, which the
ONNX ladder's top rung must take whatever the tables' width).

The artifacts are exported once per module (an ONNX ladder with ``max_nodes``, a one-budget
``.pt2``); the main suite runs 200 requests on the ONNX one, CI's extended step 200 on
the ``.pt2`` and 10,000 a format.
"""
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

pytest.importorskip("onnxruntime", reason="the serve extra (onnx, onnxscript, onnxruntime)")

from torch_geometric.data import Data  # noqa: E402
from torch_geometric.nn import GINEConv, global_add_pool  # noqa: E402

from graph_adapter import serve  # noqa: E402
from graph_adapter.app.models import AtomBondEncoder  # noqa: E402
from graph_adapter.batching import Budget, FixedSizeLoader  # noqa: E402
from graph_adapter.exporter import export  # noqa: E402
from graph_adapter.nn import ipu_wrap  # noqa: E402

ATOM_VOCAB = (7, 3)  # x: two code columns, embedding tables of 7 and 3 rows
BOND_VOCAB = (4,)  # edge_attr: one code column
MAX_NODES = 24  # the ONNX ladder's largest single graph (max_edges derived from the data)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.atom = AtomBondEncoder(list(ATOM_VOCAB), 8)
        self.bond = AtomBondEncoder(list(BOND_VOCAB), 8)
        self.lin = nn.Linear(2, 8)
        self.conv = GINEConv(nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)),
                             edge_dim=8)
        self.head = nn.Linear(8, 1)

    def forward(self, x, pos, edge_index, edge_attr, batch):
        h = self.atom(x) + self.lin(pos)
        h = self.conv(h, edge_index, self.bond(edge_attr)).relu()
        return self.head(global_add_pool(h, batch))


def _codes(rng, n, vocab):
    return np.stack([rng.integers(0, v, n) for v in vocab], 1).astype(np.int64)


def _ring(rng, n, hub=False):
    """A ring of ``n`` nodes (both directions: ``2 n`` edges); ``hub``: a ring one way,
    and an edge from every other node into node 0 (in-degree ``n``, ``2 n - 1`` edges)."""
    i = np.arange(n)
    if n == 1:
        return np.zeros((2, 0), np.int64)
    if hub:
        src, dst = np.concatenate([i, i[1:]]), np.concatenate([(i + 1) % n, np.zeros(n - 1, int)])
    else:
        src, dst = np.concatenate([i, (i + 1) % n]), np.concatenate([(i + 1) % n, i])
    return np.stack([src, dst]).astype(np.int64)


def _graph(rng, n, hub=False):
    ei = _ring(rng, n, hub)
    return {"x": _codes(rng, n, ATOM_VOCAB),
            "pos": rng.standard_normal((n, 2)).astype(np.float32),
            "edge_index": ei, "edge_attr": _codes(rng, ei.shape[1], BOND_VOCAB)}


def _data():
    rng = np.random.default_rng(0)
    out = []
    for k in range(24):
        g = _graph(rng, int(rng.integers(3, 11)))
        out.append(Data(x=torch.from_numpy(g["x"]), pos=torch.from_numpy(g["pos"]),
                        edge_index=torch.from_numpy(g["edge_index"]),
                        edge_attr=torch.from_numpy(g["edge_attr"]), y=torch.zeros(1, 1)))
    return out


@pytest.fixture(scope="module")
def trained():
    torch.manual_seed(0)
    model = Net().eval()
    data = _data()
    return model, ipu_wrap(model), FixedSizeLoader(data, Budget.fit(data, 4))


@pytest.fixture(scope="module")
def onnx_path(trained, tmp_path_factory):
    _, wrapped, loader = trained
    path = str(tmp_path_factory.mktemp("fuzz") / "m.onnx")
    export(wrapped, loader, path, format="onnx", ladder=True, max_nodes=MAX_NODES)
    return path


@pytest.fixture(scope="module")
def onnx_predictor(onnx_path):
    return serve.load(onnx_path, threads=1)


@pytest.fixture(scope="module")
def pt2_predictor(trained, tmp_path_factory):
    _, wrapped, loader = trained
    path = str(tmp_path_factory.mktemp("fuzz") / "m.pt2")
    export(wrapped, loader, path, threads=1)  # one budget: one compile
    return serve.load(path, threads=1)


#: the ONNX artifact in the main suite; the .pt2 (a compile of ~20-40 s) in CI's extended
#: step, where its requests run through the same host checks on torch tensors
#: (``test_pack_values.py`` holds those for numpy and torch alike in the main suite)
FORMATS = ["onnx", pytest.param("pt2", marks=pytest.mark.extended)]


@pytest.fixture
def served(request, trained):
    return trained[0], request.getfixturevalue(f"{request.param}_predictor")


def _eager(model, g):
    t = {k: torch.as_tensor(np.asarray(v)) for k, v in g.items() if k in
         ("x", "edge_index", "edge_attr")}
    t["pos"] = torch.as_tensor(np.asarray(g["pos"], dtype=np.float32))
    with torch.no_grad():
        return model(t["x"], t["pos"], t["edge_index"].long(), t["edge_attr"],
                     torch.zeros(len(t["x"]), dtype=torch.long))[0].numpy()


def _largest(p):
    """The most nodes one graph may have in this artifact."""
    c = p.contract
    if c.max_nodes is not None:
        return c.max_nodes
    return max([c.max_graph_nodes] + [r.max_graph_nodes for r in c.rungs])


def _largest_valid(p):
    """The most nodes of a generated valid graph (``2 n`` edges) this artifact serves."""
    c = p.contract
    edges = c.max_edges if c.max_edges is not None else max([c.edges] +
                                                             [r.edges for r in c.rungs])
    return min(_largest(p), edges // 2)


#: how a graph of a request is broken: name -> (expected error, expected key)
BREAKS = {
    "missing": (serve.MissingFeatureError, "pos"),
    "dtype": (serve.FeatureDtypeError, "x"),
    "width": (serve.FeatureShapeError, "x"),
    "rows": (serve.FeatureShapeError, ("pos", "x")),  # (the later of the two is named)
    "negative": (serve.CodeRangeError, None),  # x or edge_attr: set below
    "past_table": (serve.CodeRangeError, None),
    "nan": (serve.NonFiniteError, "pos"),
    "inf": (serve.NonFiniteError, "pos"),
    "empty": (serve.EmptyGraphError, ("x", "pos")),  # (a node-level key)
    "edge_out": (serve.EdgeIndexError, "edge_index"),
    "edge_negative": (serve.EdgeIndexError, "edge_index"),
    "too_large": (serve.GraphTooLargeError, None),
    "edge_dtype": (serve.FeatureDtypeError, "edge_index"),
    # every feature an empty list: no per-graph shape to read (x is [n, 2])
    "empty_lists": ((serve.FeatureShapeError, serve.EmptyGraphError), ("x", "pos", "edge_attr")),
}


def _break(rng, g, how, largest):
    """``g`` broken as ``how`` says; the key the error must name."""
    n = len(g["x"])
    key = BREAKS[how][1]
    if how == "missing":
        del g["pos"]
    elif how == "dtype":
        g["x"] = g["x"].astype(np.float32)
    elif how == "width":
        g["x"] = np.concatenate([g["x"], g["x"][:, :1]], 1)
    elif how == "rows":
        pos = np.asarray(g["pos"], dtype=np.float32)
        g["pos"] = np.concatenate([pos, pos[:1]], 0)
    elif how in ("negative", "past_table"):
        key = "edge_attr" if rng.random() < 0.3 and len(g["edge_attr"]) else "x"
        vocab = BOND_VOCAB if key == "edge_attr" else ATOM_VOCAB
        a = g[key].copy()
        r, c = int(rng.integers(0, len(a))), int(rng.integers(0, a.shape[1]))
        a[r, c] = -int(rng.integers(1, 200)) if how == "negative" else \
            vocab[c] + int(rng.integers(0, 200))
        g[key] = a
    elif how in ("nan", "inf"):
        a = np.array(g["pos"], dtype=np.float32)
        a[int(rng.integers(0, n)), int(rng.integers(0, 2))] = \
            np.nan if how == "nan" else (np.inf if rng.random() < 0.5 else -np.inf)
        g["pos"] = a
    elif how == "empty":
        g.update(x=np.zeros((0, 2), np.int64), pos=np.zeros((0, 2), np.float32),
                 edge_index=np.zeros((2, 0), np.int64), edge_attr=np.zeros((0, 1), np.int64))
    elif how in ("edge_out", "edge_negative"):
        a = np.array(g["edge_index"])
        if not a.shape[1]:
            a = np.zeros((2, 1), np.int64)
            g["edge_attr"] = np.zeros((1, 1), np.int64)
        a[int(rng.integers(0, 2)), int(rng.integers(0, a.shape[1]))] = \
            n + int(rng.integers(0, 5)) if how == "edge_out" else -int(rng.integers(1, 5))
        g["edge_index"] = a
    elif how == "edge_dtype":
        g["edge_index"] = np.asarray(g["edge_index"]).astype(np.float32)
    elif how == "empty_lists":
        g.update(x=[], pos=[], edge_index=[[], []], edge_attr=[])
    elif how == "too_large":
        g.update(_graph(rng, largest + int(rng.integers(1, 4))))
    return key


def _request(p, seed, sizes, hubs, extras):
    rng = np.random.default_rng(seed)
    most = _largest_valid(p)
    graphs = [_graph(rng, min(n, most), hub) for n, hub in zip(sizes, hubs)]
    for i, g in enumerate(graphs):
        if extras[i % len(extras)] == "label":
            g["y"] = np.zeros(1, np.float32)  # a key the model does not read
        elif extras[i % len(extras)] == "int32_index":
            g["edge_index"] = g["edge_index"].astype(np.int32)  # any integer index dtype
        elif extras[i % len(extras)] == "lists":
            g["edge_index"] = g["edge_index"].tolist()
            g["pos"] = g["pos"].tolist()
    return rng, graphs


def _check(model, p, graphs, broken, at, rng):
    key = None
    if broken is not None and graphs:
        at = at % len(graphs)
        key = _break(rng, graphs[at], broken, _largest(p))
    try:
        preds = p.predict(graphs)
    except serve.GraphInputError as e:
        assert broken is not None and graphs, f"a valid request refused: {e}"
        want, _ = BREAKS[broken]
        assert isinstance(e, want), (broken, type(e).__name__, str(e))
        assert e.graph == at, (broken, e.graph, at, str(e))
        if isinstance(key, tuple):
            assert e.key in key, (broken, e.key, key, str(e))
        elif key is not None:
            assert e.key == key, (broken, e.key, key, str(e))
        assert f"graph {at}" in str(e)
        return "refused"
    assert broken is None or not graphs, f"{broken} at graph {at} answered"
    assert len(preds) == len(graphs)
    tol = p.contract.tolerance
    for g, pred in zip(graphs, preds):
        ref = _eager(model, g)
        got = np.asarray(pred)
        assert got.shape == ref.shape
        assert np.all(np.abs(got - ref) <= 10 * (tol["atol"] + tol["rtol"] * np.abs(ref))), \
            (got, ref)
    return "answered"


_sizes = st.lists(st.integers(1, MAX_NODES), min_size=0, max_size=5)
_breaks = st.one_of(st.none(), st.none(), st.sampled_from(sorted(BREAKS)))


def _fuzz(served, examples):
    model, p = served
    seen = {"answered": 0, "refused": 0}

    @settings(max_examples=examples, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(seed=st.integers(0, 2 ** 31), sizes=_sizes, hubs=st.lists(st.booleans(), min_size=5,
                                                                       max_size=5),
           broken=_breaks, at=st.integers(0, 4),
           extras=st.lists(st.sampled_from(["none", "label", "int32_index", "lists"]),
                           min_size=1, max_size=3))
    def run(seed, sizes, hubs, broken, at, extras):
        rng, graphs = _request(p, seed, sizes, hubs, extras)
        seen[_check(model, p, graphs, broken, at, rng)] += 1

    run()
    return seen


@pytest.mark.parametrize("served", FORMATS, indirect=True)
def test_generated_requests_are_answered_as_eager_or_refused_by_name(served):
    seen = _fuzz(served, 200)
    assert seen["answered"] > 20 and seen["refused"] > 20, seen


@pytest.mark.extended  # 10,000 requests a format (a few minutes)
@pytest.mark.parametrize("served", ["onnx", "pt2"], indirect=True)
def test_ten_thousand_generated_requests(served):
    seen = _fuzz(served, 10_000)
    print(f"{served[1].format}: {seen}")  # (``-s``: answered as eager / refused by name)
    assert seen["answered"] + seen["refused"] == 10_000


@pytest.mark.parametrize("served", FORMATS, indirect=True)
def test_a_hub_as_large_as_served_is_answered_as_eager(served):
    """One node with every other node as in-neighbour, the largest graph served: past
    the ONNX tables' width on all but a few edges, taken by the top rung all the same."""
    model, p = served
    n = _largest(p)
    rng = np.random.default_rng(1)
    hub = _graph(rng, n, hub=True)
    if p.contract.max_edges is not None:
        assert hub["edge_index"].shape[1] <= p.contract.max_edges
    (pred,) = p.predict([hub])
    np.testing.assert_allclose(np.asarray(pred), _eager(model, hub), rtol=1e-3, atol=1e-3)


def test_the_onnx_ladder_serves_exactly_up_to_max_nodes(onnx_predictor):
    p = onnx_predictor
    c = p.contract
    assert c.max_nodes == MAX_NODES
    # derived from the data: its densest graphs have 2 edges a node (rings)
    assert c.max_edges == math.ceil(MAX_NODES * 2)
    rng = np.random.default_rng(2)
    with pytest.raises(serve.GraphTooLargeError, match=f"at most {MAX_NODES} nodes"):
        p.predict([_graph(rng, 3), _graph(rng, MAX_NODES + 1)])


@pytest.mark.parametrize("served", FORMATS, indirect=True)
def test_the_contract_records_each_code_column_s_table(served):
    _, p = served
    f = {f.key: f for f in p.contract.features}
    assert f["x"].codes == ATOM_VOCAB and f["x"].low == 0
    assert f["edge_attr"].codes == BOND_VOCAB
    assert f["pos"].finite is True and f["pos"].codes is None
    assert p.contract.value_rules


def test_a_program_process_names_value_errors_as_in_process(onnx_path):
    """The server's program process (``ProcessPredictor``) refuses the same values by the
    same names: a decoder's columns are checked in the child, a list of graphs here."""
    from graph_adapter.serve.columns import join
    from graph_adapter.serve.pack import read_graphs
    from graph_adapter.serve.processes.program import ProcessPredictor

    pp = ProcessPredictor(onnx_path, threads=1)
    try:
        rng = np.random.default_rng(3)
        graphs = [_graph(rng, 4), _graph(rng, 5)]
        graphs[1]["x"][2, 0] = -1
        cols = join(pp.contract, pp.ops, read_graphs(pp.contract, pp.ops, graphs))
        for request in (cols, graphs):
            with pytest.raises(serve.CodeRangeError) as info:
                pp.predict(request)
            assert (info.value.graph, info.value.key) == (1, "x")
        graphs[1]["x"][2, 0] = 0
        assert len(pp.predict(graphs)) == 2  # the child still serves
    finally:
        pp.close()
