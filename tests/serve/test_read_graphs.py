"""``read_graphs`` (the fast path ``predict`` checks requests with: numpy arrays for
ONNX, torch tensors for pt2) gives exactly
``read_graph``'s results and errors, graph by graph: the same features (arrays, dtypes,
casts), sizes, ignored keys, and the same named error for the first bad graph."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from graph_adapter.serve import Contract, InputField
from graph_adapter.serve.ops import NumpyOps, TorchOps
from graph_adapter.serve.pack import read_graph, read_graphs

CONTRACT = Contract("onnx", 64, 128, 8, (
    InputField("x", "feature", "node", "float32", (None, 3)),
    InputField("edge_index", "feature", "edge", "int64", (2, None), "nodes"),
    InputField("edge_attr", "feature", "edge", "int64", (None, 2)),
    InputField("u", "feature", "graph", "float32", (1, 4)),
    InputField("batch", "reserved", "node", "int64", (64,))), ())

#: ways a request graph may differ from what the contract takes
FLAWS = ("none", "float64 x", "int32 edge_index", "missing x", "x width", "edge rows",
         "u rows", "extra key", "num_nodes key", "list x", "torch x", "a Data-like object",
         "subclass", "grad x")


class _Obj:
    def __init__(self, d):
        self.__dict__.update(d)

    def keys(self):
        return list(self.__dict__)


class _Sub(np.ndarray):
    pass


def _graph(n, e, flaw, rng, tensors=False):
    g = {"x": rng.standard_normal((n, 3)).astype(np.float32),
         "edge_index": rng.integers(0, n, (2, e)).astype(np.int64),
         "edge_attr": rng.integers(0, 5, (e, 2)).astype(np.int64),
         "u": rng.standard_normal((1, 4)).astype(np.float32)}
    if flaw == "float64 x":
        g["x"] = g["x"].astype(np.float64)
    elif flaw == "int32 edge_index":
        g["edge_index"] = g["edge_index"].astype(np.int32)
    elif flaw == "missing x":
        del g["x"]
    elif flaw == "x width":
        g["x"] = np.zeros((n, 2), np.float32)
    elif flaw == "edge rows":
        g["edge_attr"] = g["edge_attr"][:max(e - 1, 0)]
    elif flaw == "u rows":
        g["u"] = np.zeros((2, 4), np.float32)
    elif flaw == "extra key":
        g["smiles"] = "CCO"
    elif flaw == "num_nodes key":
        g["num_nodes"] = n
    elif flaw == "list x":
        g["x"] = g["x"].tolist()
    elif flaw == "torch x":
        g["x"] = torch.from_numpy(g["x"])
    elif flaw == "subclass":
        g["x"] = g["x"].view(_Sub)
    if tensors:  # a pt2 user's request: torch tensors
        g = {k: torch.from_numpy(v) if type(v) is np.ndarray else v for k, v in g.items()}
    if flaw == "grad x":
        g["x"] = torch.as_tensor(g["x"]).requires_grad_()
    return _Obj(g) if flaw == "a Data-like object" else g


def _outcome(fn):
    try:
        return "ok", fn()
    except Exception as e:  # noqa: BLE001 - compared by type and text
        return type(e).__name__, str(e)


def _same(a, b):
    assert a[0] == b[0]
    if a[0] != "ok":
        assert a[1] == b[1]
        return
    for x, y in zip(a[1], b[1], strict=True):
        assert (x.nodes, x.edges, x.ignored, x.position) == (y.nodes, y.edges, y.ignored,
                                                              y.position)
        assert list(x.features) == list(y.features)
        for k in x.features:
            assert type(x.features[k]) is type(y.features[k])
            assert x.features[k].dtype == y.features[k].dtype
            assert getattr(x.features[k], "requires_grad", False) is \
                getattr(y.features[k], "requires_grad", False)
            np.testing.assert_array_equal(np.asarray(_plain(x.features[k])),
                                          np.asarray(_plain(y.features[k])))


def _plain(a):
    return a.detach() if isinstance(a, torch.Tensor) else a


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.integers(0, 9), st.sampled_from(FLAWS)),
                min_size=1, max_size=6), st.integers(0, 2 ** 16), st.booleans())
def test_read_graphs_gives_what_read_graph_gives_graph_by_graph(specs, seed, tensors):
    rng = np.random.default_rng(seed)
    graphs = [_graph(n, e, flaw, rng, tensors) for n, e, flaw in specs]
    for ops in (NumpyOps(), TorchOps()):
        _same(_outcome(lambda: read_graphs(CONTRACT, ops, graphs)),
              _outcome(lambda: [read_graph(CONTRACT, ops, g, i) for i, g in enumerate(graphs)]))


def test_the_fast_path_takes_the_request_arrays_as_they_are():
    rng = np.random.default_rng(0)
    g = _graph(4, 5, "none", rng)
    got, = read_graphs(CONTRACT, NumpyOps(), [g])
    assert all(got.features[k] is g[k] for k in g)
    assert (got.nodes, got.edges, got.ignored) == (4, 5, ())
    t = _graph(4, 5, "none", rng, tensors=True)
    got, = read_graphs(CONTRACT, TorchOps(), [t])
    assert all(got.features[k] is t[k] for k in t)


def test_a_contract_without_node_features_counts_nodes_by_num_nodes():
    c = Contract("onnx", 16, 32, 4, (
        InputField("edge_index", "feature", "edge", "int64", (2, None), "nodes"),), ())
    g = {"edge_index": np.zeros((2, 3), np.int64), "num_nodes": 5}
    got, = read_graphs(c, NumpyOps(), [g])
    assert (got.nodes, got.edges, got.ignored) == (5, 3, ())
    with pytest.raises(Exception, match="num_nodes"):
        read_graphs(c, NumpyOps(), [{"edge_index": np.zeros((2, 3), np.int64)}])
