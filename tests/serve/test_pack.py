"""The serving packer gives exactly the padded layout ``collate_padded`` gives (issue 26).

``graph_adapter.serve`` packs request graphs without PyG; the artifact was exported for
the collator's layout (``docs/dev/FORMAT.md``), so every key of every call must equal
``collate_padded``'s, padding rows included, for numpy (ONNX) and torch (pt2) alike.
"""
import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from graph_adapter.exporter import contract_inputs
from graph_adapter.batching import Budget
from graph_adapter.batching import Collator
from graph_adapter.serve import (Contract, EdgeIndexError, FeatureDtypeError, FeatureShapeError,
                                 GraphTooLargeError, MissingFeatureError)
from graph_adapter.serve.ops import NumpyOps, TorchOps
from graph_adapter.serve.pack import Graph, pack_call, plan_calls, read_graph

from _padding import molecule_like_graphs, untied
from strategies import graph_lists


def _contract(graphs, N, E, G):
    """The contract an export of this schema writes, and the collator's padded dict of
    ``graphs`` (None where they do not fit one batch)."""
    col = Collator(list(graphs), Budget(nodes=N, edges=E, graphs=G), warn=False)
    contract = Contract("onnx", N, E, G, contract_inputs(col, col.empty()), ())
    try:
        return contract, col.collate_indices(range(len(graphs)))
    except ValueError:
        return contract, None


def _as_dict_of_numpy(d):
    return {k: d[k].numpy() for k in d.keys() if isinstance(d[k], torch.Tensor)}


def _assert_same(packed, flat):
    assert list(packed) == list(flat)
    for k, v in flat.items():
        got = torch.as_tensor(np.asarray(packed[k]) if not isinstance(packed[k], torch.Tensor)
                              else packed[k])
        assert got.dtype == v.dtype, k
        torch.testing.assert_close(got, v, rtol=0, atol=0, equal_nan=True, msg=k)


@given(graph_lists(), st.integers(0, 2), st.integers(0, 3), st.integers(0, 3), st.booleans())
def test_packed_calls_equal_collate_padded(graphs, more_graphs, more_nodes, more_edges, numpy):
    n = sum(d.num_nodes for d in graphs)
    e = sum(d.edge_index.size(1) for d in graphs)
    G = len(graphs) + 1 + more_graphs
    biggest = max(d.num_nodes for d in graphs)
    N = max(n + max(2, G - len(graphs)), G + biggest - 1, G) + more_nodes  # Budget's own rules
    N, E, G = untied(N, max(e + more_edges, 1), G)
    contract, _ = _contract(graphs, N, E, G)
    ops = NumpyOps() if numpy else TorchOps()
    # numpy: plain dicts of numpy arrays (a server's request); torch: the PyG Data themselves
    reqs = [_as_dict_of_numpy(d) if numpy else d for d in graphs]
    checked = [read_graph(contract, ops, g, i) for i, g in enumerate(reqs)]
    calls = plan_calls(contract, checked)
    assert [i for c in calls for i in c] == list(range(len(graphs)))
    for call in calls:
        _, flat = _contract([graphs[i] for i in call], N, E, G)
        _assert_same(pack_call(contract, ops, [checked[i] for i in call]), flat)


@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 12)), min_size=1, max_size=40),
       st.integers(3, 8))
def test_calls_cover_every_graph_once_in_order_and_each_fits(sizes, G):
    N, E, G = untied(12 + G, 14, G)
    c = Contract("onnx", N, E, G, (), ())
    graphs = [Graph({}, n, e) for n, e in sizes]
    if any(n > c.max_graph_nodes or e > E for n, e in sizes):
        with pytest.raises(GraphTooLargeError):
            plan_calls(c, graphs)
        return
    calls = plan_calls(c, graphs)
    assert [i for call in calls for i in call] == list(range(len(sizes)))
    for call in calls:
        n, e, g = (sum(sizes[i][0] for i in call), sum(sizes[i][1] for i in call), len(call))
        assert g <= G - 1 and n <= N - 2 and e <= E and N - n >= G - g
    for a, b in zip(calls, calls[1:]):  # a call closes only when the next graph cannot fit
        n = sum(sizes[i][0] for i in a) + sizes[b[0]][0]
        e = sum(sizes[i][1] for i in a) + sizes[b[0]][1]
        assert len(a) + 1 > G - 1 or n > N - 2 or e > E or N - n < G - len(a) - 1


def test_many_graphs_are_packed_like_separate_collates():
    graphs = molecule_like_graphs(30, seed=3)
    contract, _ = _contract(graphs, *untied(24, 40, 5))
    ops = TorchOps()
    checked = [read_graph(contract, ops, g, i) for i, g in enumerate(graphs)]
    calls = plan_calls(contract, checked)
    assert len(calls) > 3
    for call in calls:
        ref = Collator([graphs[i] for i in call], Budget(nodes=contract.nodes, edges=contract.edges,
                                                         graphs=contract.graphs), warn=False)
        _assert_same(pack_call(contract, ops, [checked[i] for i in call]),
                     ref.collate_indices(range(len(call))))


@pytest.fixture
def mol():
    graphs = molecule_like_graphs(4, seed=1)
    for d in graphs:
        del d.y  # an export drops the labels the model never reads
    contract, _ = _contract(graphs, *untied(20, 30, 4))
    return contract, graphs


def _req(d, **change):
    out = {k: d[k] for k in ("x", "edge_index", "edge_attr")}
    out.update(change)
    return {k: v for k, v in out.items() if v is not None}


@pytest.mark.parametrize("ops", [NumpyOps(), TorchOps()], ids=["numpy", "torch"])
def test_bad_graphs_get_named_errors(mol, ops):
    contract, graphs = mol
    d = graphs[0]
    cases = [
        (_req(d, edge_attr=None), MissingFeatureError, "no feature 'edge_attr'"),
        (_req(d, x=d.x.float()), FeatureDtypeError, "'x' is float32, the artifact was exported for int64"),
        (_req(d, x=d.x[:, :5]), FeatureShapeError, "'x' has shape [%d, 5]" % d.num_nodes),
        (_req(d, edge_attr=d.edge_attr[:1]), FeatureShapeError, "but 'edge_attr' has 1"),
        (_req(d, edge_index=d.edge_index.view(-1)), FeatureShapeError, "'edge_index' has shape"),
    ]
    for req, err, text in cases:
        with pytest.raises(err, match="graph 2: ") as info:
            [read_graph(contract, ops, g, i) for i, g in enumerate([_req(d), _req(d), req])]
        assert text in str(info.value), (str(info.value), text)
        assert info.value.graph == 2


@pytest.mark.parametrize("ops", [NumpyOps(), TorchOps()], ids=["numpy", "torch"])
@pytest.mark.parametrize("shift", [-1, 1])
def test_an_edge_outside_its_graph_is_named(mol, ops, shift):
    contract, graphs = mol
    reqs = [_req(d) for d in graphs[:3]]
    ei = graphs[2].edge_index.clone()
    ei[0, -1] = -1 if shift < 0 else graphs[2].num_nodes  # one column off its graph
    reqs[2]["edge_index"] = ei
    checked = [read_graph(contract, ops, g, i) for i, g in enumerate(reqs)]
    with pytest.raises(EdgeIndexError, match=r"graph 2: 'edge_index' column %d .* outside its "
                       % (ei.size(1) - 1)) as info:
        pack_call(contract, ops, checked)
    assert info.value.graph == 2
    pack_call(contract, ops, checked[:2])  # the others are fine


def test_index_dtype_and_lists_are_accepted_as_the_same_values(mol):
    contract, graphs = mol
    d = graphs[0]
    ops = NumpyOps()
    ref = read_graph(contract, ops, _req(d), 0).features
    for req in (_req(d, edge_index=d.edge_index.int()), _req(d, x=d.x.tolist())):
        got = read_graph(contract, ops, req, 0).features
        for k in ref:
            assert got[k].dtype == ref[k].dtype and np.array_equal(got[k], ref[k]), k


def test_a_graph_larger_than_the_budget_is_named_and_never_cut(mol):
    contract, graphs = mol
    big = Graph({}, contract.max_graph_nodes + 1, 1)
    ok = Graph({}, 2, 1)
    with pytest.raises(GraphTooLargeError, match=r"graph 1 has %d nodes.*never cut" %
                       big.nodes) as info:
        plan_calls(contract, [ok, big, ok])
    assert info.value.graph == 1
    edges = Graph({}, 2, contract.edges + 1)
    with pytest.raises(GraphTooLargeError, match="graph 0 has 2 nodes and %d edges" % edges.edges):
        plan_calls(contract, [edges])
    assert plan_calls(contract, [Graph({}, contract.max_graph_nodes, contract.edges)]) == [[0]]
