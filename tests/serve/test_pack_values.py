"""The host refuses, before any call, the values an artifact must not be given: codes
outside the embedding table they index (negative ones included: ONNX's ``Gather`` wraps
them to another row), NaN/inf where the contract forbids them, graphs of 0 nodes, graphs
past the largest served. Each refusal names the graph and key; valid values pass.

Contracts are built by hand here (no export): the rules are the contract's fields
(``codes``, ``low``, ``finite``, ``max_nodes`` / ``max_edges``), read back from JSON.
"""
import dataclasses
import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from graph_adapter.serve import (CodeRangeError, Contract, EmptyGraphError, GraphInputError,
                                 GraphTooLargeError, InputField, NonFiniteError, OutputField)
from graph_adapter.serve.ops import NumpyOps, TorchOps
from graph_adapter.serve.pack import check_served_size, read_request

TABLES = (5, 3)  # x: two code columns, tables of 5 and 3 rows


def _contract(value_rules=True, x_codes=TABLES, finite=True, low=0, **kw):
    inputs = (InputField("x", "feature", "node", "int64", (None, 2),
                         codes=x_codes if value_rules else None,
                         low=low if value_rules else None),
              InputField("pos", "feature", "node", "float32", (None, 2),
                         finite=finite if value_rules else None),
              InputField("edge_index", "feature", "edge", "int64", (2, None), inc="nodes"),
              InputField("batch", "reserved", "node", "int64", (40,)))
    c = Contract("onnx", 40, 60, 4, inputs, (OutputField("out", "graph", "float32", (4, 1)),),
                 value_rules=value_rules, **kw)
    return Contract.from_json(c.to_json())  # (as a server reads it)


def _graph(rng, n):
    return {"x": np.stack([rng.integers(0, t, n) for t in TABLES], 1).astype(np.int64),
            "pos": rng.standard_normal((n, 2)).astype(np.float32),
            "edge_index": np.stack([np.arange(n), (np.arange(n) + 1) % n]).astype(np.int64)}


def _ops(numpy):
    return NumpyOps() if numpy else TorchOps()


def _req(graphs, numpy):
    return graphs if numpy else [{k: torch.from_numpy(v) for k, v in g.items()} for g in graphs]


def test_value_rules_round_trip_as_json_and_need_version_4():
    c = _contract(max_nodes=30, max_edges=50)
    d = json.loads(c.to_json())
    assert d["contract_version"] == 4 and d["value_rules"] is True
    assert c.features[0].codes == TABLES and c.features[0].low == 0
    assert c.features[1].finite is True and (c.max_nodes, c.max_edges) == (30, 50)
    old = _contract(value_rules=False)
    d = json.loads(old.to_json())
    assert d["contract_version"] == 1 and "codes" not in d["inputs"][0]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2 ** 31), sizes=st.lists(st.integers(1, 8), min_size=1, max_size=5),
       bad=st.one_of(st.none(), st.tuples(st.integers(0, 4), st.integers(0, 7), st.integers(0, 1),
                                          st.integers(-300, 300))),
       numpy=st.booleans())
def test_a_code_is_refused_exactly_when_outside_its_column_s_table(seed, sizes, bad, numpy):
    """(``read_request``: what ``Predictor.check`` and ``predict`` read a request by.)"""
    rng = np.random.default_rng(seed)
    graphs = [_graph(rng, n) for n in sizes]
    want = None
    if bad is not None:
        g, row, col, value = bad
        g, row = g % len(graphs), row % sizes[g % len(graphs)]
        graphs[g]["x"][row, col] = value
        if not 0 <= value < TABLES[col]:
            want = (g, row, col, value)
    c = _contract()
    try:
        read_request(c, _ops(numpy), _req(graphs, numpy), set())
    except CodeRangeError as e:
        assert want is not None, str(e)
        # the first bad value is named: the one set (every other code is valid)
        assert (e.graph, e.key, e.column) == (want[0], "x", want[2]), str(e)
        assert f"holds {want[3]} at node row {want[1]}, column {want[2]}" in str(e)
        assert f"0 .. {TABLES[want[2]] - 1}" in str(e)
    else:
        assert want is None


@pytest.mark.parametrize("numpy", [True, False])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_floats_are_refused_unless_the_export_data_held_some(value, numpy):
    rng = np.random.default_rng(0)
    graphs = [_graph(rng, 4), _graph(rng, 3)]
    graphs[1]["pos"][2, 1] = value
    with pytest.raises(NonFiniteError) as info:
        read_request(_contract(), _ops(numpy), _req(graphs, numpy), set())
    assert (info.value.graph, info.value.key) == (1, "pos")
    assert "node row 2, column 1" in str(info.value)
    read_request(_contract(finite=False), _ops(numpy), _req(graphs, numpy), set())  # allowed


@pytest.mark.parametrize("numpy", [True, False])
def test_a_graph_of_no_nodes_is_refused_by_name(numpy):
    rng = np.random.default_rng(0)
    empty = {"x": np.zeros((0, 2), np.int64), "pos": np.zeros((0, 2), np.float32),
             "edge_index": np.zeros((2, 0), np.int64)}
    with pytest.raises(EmptyGraphError) as info:
        read_request(_contract(), _ops(numpy), _req([_graph(rng, 3), empty], numpy), set())
    assert info.value.graph == 1 and info.value.key in ("x", "pos")  # a node-level key
    assert isinstance(info.value, GraphInputError)


@pytest.mark.parametrize("numpy", [True, False])
def test_an_old_contract_refuses_negative_codes_and_nan_but_knows_no_table(numpy):
    rng = np.random.default_rng(0)
    c = _contract(value_rules=False)
    g = _graph(rng, 3)
    g["x"][1, 0] = 99  # past the table: not known to an old contract (the call fails)
    read_request(c, _ops(numpy), _req([g], numpy), set())
    g["x"][1, 0] = -1
    with pytest.raises(CodeRangeError, match="-1 at node row 1, column 0"):
        read_request(c, _ops(numpy), _req([g], numpy), set())
    g = _graph(rng, 3)
    g["pos"][0, 0] = np.nan
    with pytest.raises(NonFiniteError):
        read_request(c, _ops(numpy), _req([g], numpy), set())


def test_an_integer_feature_without_a_table_is_checked_only_as_recorded():
    rng = np.random.default_rng(0)
    g = _graph(rng, 3)
    g["x"][0, 0] = -5
    read_request(_contract(x_codes=None, low=None), NumpyOps(), [g], set())  # data held negatives
    with pytest.raises(CodeRangeError, match="valid codes there are 0 or more"):
        read_request(_contract(x_codes=None, low=0), NumpyOps(), [g], set())
    g["x"][0, 0] = 10 ** 6  # no table: any non-negative code
    read_request(_contract(x_codes=None, low=0), NumpyOps(), [g], set())
    g["x"][0, 0], g["x"][0, 1] = 0, 10 ** 6  # a column that indexes no table
    read_request(_contract(x_codes=(5, None)), NumpyOps(), [g], set())


@given(nodes=st.integers(1, 40), edges=st.integers(0, 60))
def test_the_largest_graph_served_is_exactly_max_nodes_and_max_edges(nodes, edges):
    from graph_adapter.serve.pack import Graph

    c = _contract(max_nodes=20, max_edges=30)
    g = Graph({}, nodes, edges, (), 3)
    if nodes <= 20 and edges <= 30:
        check_served_size(c, [g])
    else:
        with pytest.raises(GraphTooLargeError, match="at most 20 nodes and 30 edges") as info:
            check_served_size(c, [g])
        assert info.value.graph == 3


def test_a_float_feature_cast_to_codes_in_the_model_is_checked_as_codes():
    rng = np.random.default_rng(0)
    base = _contract()
    inputs = tuple(dataclasses.replace(f, codes=(None, 6)) if f.key == "pos" else f
                   for f in base.inputs)
    c = Contract.from_json(dataclasses.replace(base, inputs=inputs).to_json())
    g = _graph(rng, 3)
    g["pos"][:, 1] = [0.0, 5.0, 2.0]
    read_request(c, NumpyOps(), [g], set())
    g["pos"][2, 1] = 6.0
    with pytest.raises(CodeRangeError, match="holds 6.0 at node row 2, column 1"):
        read_request(c, NumpyOps(), [g], set())
