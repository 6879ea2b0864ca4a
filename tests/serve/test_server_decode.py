"""Reading ``POST /predict`` bodies (``graph_adapter.serve.decode``), no artifact needed.

Every body form gives the same per-graph arrays: nested per-graph lists (read one numpy
call a key over the request, or graph by graph where that path cannot vouch for them),
the columnar JSON form (flat or nested columns) and the ``.npz`` body; with orjson and
with the standard library's JSON. Bad payloads get the named errors, the graph counted
within the request, as graph by graph.
"""
import io
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graph_adapter.serve import (FeatureDtypeError, FeatureShapeError, InputField,
                                 PayloadError, decode_graphs, decode_npz)
from graph_adapter.serve import decode as srv


class _Contract:
    """The features of a contract (all ``decode_graphs`` reads)."""

    features = (InputField("x", "feature", "node", "int64", (None, 3)),
                InputField("pos", "feature", "node", "float32", (None,)),
                InputField("edge_index", "feature", "edge", "int64", (2, None), inc="nodes"),
                InputField("edge_attr", "feature", "edge", "float32", (None, 2)),
                InputField("u", "feature", "graph", "float32", ()))


C = _Contract()
KEYS = [f.key for f in C.features]


def _graphs(draw_sizes, rng):
    out = []
    for n, e in draw_sizes:
        out.append({"x": rng.integers(-5, 50, (n, 3)),
                    "pos": rng.normal(size=n).astype(np.float32),
                    "edge_index": rng.integers(0, max(n, 1), (2, e)),
                    "edge_attr": rng.normal(size=(e, 2)).astype(np.float32),
                    "u": np.asarray(rng.normal(), dtype=np.float32)})
    return out


def _nested(graphs):
    return json.dumps({"graphs": [{k: g[k].tolist() for k in KEYS} for g in graphs]})


def _concat(graphs):
    return {"x": np.concatenate([g["x"] for g in graphs]),
            "pos": np.concatenate([g["pos"] for g in graphs]),
            "edge_index": np.concatenate([g["edge_index"] for g in graphs], axis=1),
            "edge_attr": np.concatenate([g["edge_attr"] for g in graphs]),
            "u": np.stack([g["u"] for g in graphs])}


def _counts(graphs):
    return {"num_nodes": [len(g["x"]) for g in graphs],
            "num_edges": [g["edge_index"].shape[1] for g in graphs]}


def _columnar(graphs, flat=True):
    cols = {k: (v.ravel() if flat else v).tolist() for k, v in _concat(graphs).items()}
    return json.dumps({**_counts(graphs), "columns": cols})


def _npz(graphs):
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in _counts(graphs).items()}, **_concat(graphs))
    return buf.getvalue()


def _graph_by_graph(body):
    """The reading graph by graph (the path every error comes from)."""
    old = srv._bulk_arrays
    srv._bulk_arrays = lambda *a: None
    try:
        return decode_graphs(body, C)
    finally:
        srv._bulk_arrays = old


def _same(got, want):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        for k in KEYS:
            a, b = np.asarray(g[k]), np.asarray(w[k])
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), (i, k)


# orjson where installed (the serve extra's), never skipped: left out of the params
@pytest.fixture(params=["json"] + (["orjson"] if srv._orjson is not None else []))
def reader(request, monkeypatch):
    if request.param == "json":
        monkeypatch.setattr(srv, "_orjson", None)  # the standard library's
    return request.param


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 7)), min_size=1, max_size=9),
       st.integers(0, 2 ** 32 - 1))
def test_every_body_form_gives_the_npz_bodys_arrays(sizes, seed):
    graphs = _graphs(sizes, np.random.default_rng(seed))
    want = decode_npz(_npz(graphs), C)
    for orjson in (srv._orjson, None):
        srv_orjson, srv._orjson = srv._orjson, orjson
        try:
            body = _nested(graphs)
            _same(decode_graphs(body.encode(), C), want)
            _same(_graph_by_graph(body.encode()), want)
            _same(decode_graphs(_columnar(graphs).encode(), C), want)
            _same(decode_graphs(_columnar(graphs, flat=False).encode(), C), want)
        finally:
            srv._orjson = srv_orjson
    for g, w in zip(want, graphs):  # and they are the graphs sent
        np.testing.assert_array_equal(g["x"], w["x"])
        np.testing.assert_allclose(g["edge_attr"], w["edge_attr"])


def _refused(body):
    with pytest.raises((PayloadError, FeatureDtypeError, FeatureShapeError)) as e:
        decode_graphs(body.encode() if isinstance(body, str) else body, C)
    return e.value


def test_nested_lists_that_the_bulk_read_cannot_vouch_for_get_the_graph_by_graph_errors(
        reader):
    graphs = [{k: g[k].tolist() for k in KEYS}
              for g in _graphs([(3, 2), (2, 1), (4, 3)], np.random.default_rng(0))]
    bad = {  # (graph, key): a value, and the error graph by graph names
        "fraction": (2, "x", [[0.5, 1, 2]] * 4, FeatureDtypeError),
        "ragged": (1, "x", [[1, 2, 3], [1, 2]], FeatureShapeError),
        "wide": (1, "x", [[1, 2, 3, 4]] * 2, None),  # shape: named later by predict
        "string": (0, "pos", ["a", "b", "c"], FeatureDtypeError),
        "null": (2, "edge_attr", [[None, 1.0]] * 3, FeatureDtypeError),
        "edge rows": (1, "edge_index", [[0, 1], [1]], FeatureShapeError),
        "a number": (0, "x", 7, None),
    }
    for what, (i, key, value, error) in bad.items():
        req = [dict(g) for g in graphs]
        req[i][key] = value
        body = json.dumps({"graphs": req}).encode()
        if error is None:  # read as it is; predict names its shape
            got, want = decode_graphs(body, C), _graph_by_graph(body)
            assert np.asarray(got[i][key]).shape == np.asarray(want[i][key]).shape, what
            continue
        e = _refused(body)
        with pytest.raises(error) as ref:
            _graph_by_graph(body)
        assert type(e) is error and str(e) == str(ref.value), what
        assert (e.graph, e.key) == (i, key), what


def test_a_columnar_body_names_what_is_wrong_with_it(reader):
    graphs = _graphs([(3, 2), (2, 0), (4, 3)], np.random.default_rng(1))
    doc = json.loads(_columnar(graphs))
    cols = doc["columns"]

    def body(**change):
        return json.dumps({**doc, **change})

    e = _refused(body(columns=[1, 2]))
    assert isinstance(e, PayloadError) and '"columns": {key: list' in str(e)
    e = _refused(json.dumps({"columns": cols}))
    assert isinstance(e, PayloadError) and "num_nodes" in str(e)
    e = _refused(body(num_nodes=[3, -2, 4]))
    assert isinstance(e, PayloadError) and ">= 0" in str(e)
    e = _refused(body(num_nodes=[3, 2.5, 4]))
    assert isinstance(e, PayloadError) and "integers" in str(e)
    e = _refused(body(columns={**cols, "x": cols["x"][:-1]}))
    assert isinstance(e, PayloadError) and "'x'" in str(e) and "27" in str(e)
    e = _refused(body(columns={**cols, "x": [[1, 2, 3], [4, 5]]}))
    assert isinstance(e, PayloadError) and "rectangular" in str(e)
    e = _refused(json.dumps({"num_nodes": doc["num_nodes"], "columns": cols}))
    assert isinstance(e, PayloadError) and "num_edges" in str(e)
    x = list(cols["x"])
    x[3 * 3 + 4] = 1.5  # a fraction in graph 1's rows (graph 0 has 3 nodes of 3 values)
    e = _refused(body(columns={**cols, "x": x}))
    assert isinstance(e, FeatureDtypeError) and (e.graph, e.key) == (1, "x")
    assert "graph 1" in str(e) and "int64" in str(e)
    ei = np.asarray(cols["edge_index"], dtype=object).reshape(2, -1)
    ei[1, 3] = "2"  # graph 2's first edge (graphs 0, 1: 2 and 0 edges)
    e = _refused(body(columns={**cols, "edge_index": ei.tolist()}))
    assert isinstance(e, FeatureDtypeError) and (e.graph, e.key) == (2, "edge_index")
    got = decode_graphs(body(columns={k: v for k, v in cols.items() if k != "u"}).encode(), C)
    assert "u" not in got[0] and len(got) == 3  # a missing key: predict names it


def test_an_empty_columnar_request_and_graphs_without_edges(reader):
    graphs = _graphs([(2, 0), (1, 0)], np.random.default_rng(2))
    _same(decode_graphs(_columnar(graphs).encode(), C), decode_npz(_npz(graphs), C))
    _same(decode_graphs(_nested(graphs).encode(), C), decode_npz(_npz(graphs), C))
    assert decode_graphs(json.dumps({"num_nodes": [], "num_edges": [], "columns": {}})
                         .encode(), C) == []


def test_nan_and_infinity_are_refused_and_written_as_null_with_either_codec(reader):
    """``NaN`` / ``Infinity`` are not JSON: a body holding one is a 400 whichever codec
    reads it (the standard library alone would read them), and a prediction that is not
    finite is written ``null`` by both (the standard library alone would write ``NaN``)."""
    for body in (b'{"graphs": [{"x": [[NaN, 1, 2]]}]}', b'[{"u": Infinity}]'):
        with pytest.raises(PayloadError, match="not valid JSON"):
            decode_graphs(body, C)
    doc = {"predictions": [[float("nan"), 1.5], float("inf"), {"y": -float("inf")}]}
    assert json.loads(srv.json_dumps(doc)) == {"predictions": [[None, 1.5], None, {"y": None}]}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.lists(st.one_of(st.booleans(), st.integers(-3, 9)),
                                  min_size=3, max_size=3), min_size=1, max_size=4),
                min_size=1, max_size=5),
       st.lists(st.one_of(st.booleans(), st.floats(-2, 2, width=32)), min_size=1, max_size=4))
def test_true_and_false_in_a_number_feature_are_1_and_0_read_alone_or_in_bulk(xs, pos):
    """JSON booleans in an integer or float feature read as 1/0 on every path: a graph
    of booleans alone, booleans among numbers, read in bulk or graph by graph, or as a
    column; the arrays equal those of the numbers 1/0 sent instead."""
    def graph(x, p):
        return {"x": x, "pos": p[:len(x)] + [0.0] * (len(x) - len(p)),
                "edge_index": [[0], [0]], "edge_attr": [[True, 0.5]], "u": True}

    reqs = [graph(x, pos) for x in xs]
    as_numbers = json.loads(json.dumps(reqs).replace("true", "1").replace("false", "0"))
    want = _graph_by_graph(json.dumps({"graphs": as_numbers}).encode())
    for orjson in (srv._orjson, None):
        srv_orjson, srv._orjson = srv._orjson, orjson
        try:
            for k in range(len(reqs)):  # each graph alone (the graph-by-graph read)
                _same(decode_graphs(json.dumps([reqs[k]]).encode(), C), want[k:k + 1])
            body = json.dumps({"graphs": reqs}).encode()
            _same(decode_graphs(body, C), want)
            _same(_graph_by_graph(body), want)
        finally:
            srv._orjson = srv_orjson


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 7)), min_size=2, max_size=9),
       st.integers(0, 2 ** 32 - 1), st.sampled_from(["clean", "label", "int32 index",
                                                     "float64 x", "missing u",
                                                     "edge rows disagree"]))
def test_a_request_read_as_columns_is_what_the_per_graph_check_reads(sizes, seed, flaw):
    """``decode_request`` hands a bulk request on as checked ``Columns`` only where the
    per-graph path (``decode_graphs`` + ``read_graphs``) would take every graph as it is:
    the same arrays, dtypes, counts and ignored keys; anything else goes graph by graph."""
    from graph_adapter.serve.columns import Columns
    from graph_adapter.serve.ops import NumpyOps
    from graph_adapter.serve.pack import column_graphs, read_graphs

    graphs = _graphs(sizes, np.random.default_rng(seed))
    for g in graphs:
        g["x"] = g["x"].astype(np.float64) if flaw == "float64 x" else g["x"]
        g["edge_index"] = g["edge_index"].astype(np.int32) if flaw == "int32 index" \
            else g["edge_index"]
    contract = _Contract()
    if flaw == "float64 x":  # a float feature whose JSON numbers may be ints or floats
        contract.features = (InputField("x", "feature", "node", "float32", (None, 3)),) + \
            C.features[1:]
    keys = [k for k in KEYS if not (flaw == "missing u" and k == "u")]
    nested = {"graphs": [{**{k: g[k].tolist() for k in keys},
                          **({"y": [1.0]} if flaw == "label" else {})} for g in graphs]}
    columnar = json.loads(_columnar(graphs))
    columnar["columns"] = {k: v for k, v in columnar["columns"].items() if k in keys}
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in _counts(graphs).items()},
             **{k: v for k, v in _concat(graphs).items() if k in keys})
    bodies = [("json", json.dumps(nested).encode()), ("columnar", json.dumps(columnar).encode()),
              ("npz", buf.getvalue())]
    if flaw == "edge rows disagree":  # graph 1: one edge_attr row more than its edges
        nested["graphs"][1]["edge_attr"].append([0.5, 0.5])
        bodies = [("json", json.dumps(nested).encode())]
    rows = sum(n for n, _ in sizes) and sum(e for _, e in sizes)
    for form, body in bodies:
        got = srv.decode_request(body, srv.NPZ_TYPE if form == "npz" else "application/json",
                                 contract)
        # every clean JSON form (numbers read to the contract's dtype) comes as columns
        # (per-graph lists only where every key has rows: else the bulk read leaves them
        # to the graph by graph read); an .npz of another dtype than the contract's is
        # cast or refused graph by graph, and a missing feature is named there
        vouched = flaw not in ("missing u", "edge rows disagree") and (flaw in ("clean", "label") or form != "npz") \
            and bool(rows or form != "json")
        assert isinstance(got, Columns) == vouched, (form, flaw)
        if not vouched:
            continue
        # what the per-graph path makes of the same body: graph dicts, then the check
        per = (decode_npz if form == "npz" else decode_graphs)(body, contract)
        want = read_graphs(contract, NumpyOps(), per)
        assert got.nodes == [w.nodes for w in want] and got.edges == [w.edges for w in want]
        assert set(got.ignored) == {k for w in want for k in w.ignored}, form
        for g, w in zip(column_graphs(got, contract), want):
            for f in contract.features:
                a, b = g.features[f.key], w.features[f.key]
                assert a.dtype == b.dtype and a.shape == b.shape, (form, f.key)
                np.testing.assert_array_equal(a, b)
