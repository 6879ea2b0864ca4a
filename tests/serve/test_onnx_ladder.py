"""A ladder of budgets in one ONNX model: an ``If`` branch a rung, chosen by the length
of the int64 input ``contract.onnx_rung_input``; ``serve`` runs each rung in a session
of its own (the rung's sizes as free dimension overrides: the choice folded away).

Fast (main suite): hand-built rung models (numpy + onnx helpers, no export) merged by
``ladder_model`` and served by ``serve.load``: each call runs the session of its rung
(static shapes: it refuses any other budget), a plain session dispatches by the rung
input, a rung's session has no ``If`` left, predictions are the model's for
every graph, in request order, none lost or repeated; a graph over the top rung gets the
named error; one-budget artifacts of before the ladder load as they did.
Extended (CI's second step, ~10 s of ONNX exports): the demo's GINE exported with
``ladder=True`` equals eager PyG for graphs of every rung size and mixed requests, also
in a process where torch cannot be imported.
"""
import dataclasses
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx", reason="the serve extra (onnx, onnxscript, onnxruntime)")
pytest.importorskip("onnxruntime", reason="the serve extra (onnx, onnxscript, onnxruntime)")

from onnx import TensorProto, helper  # noqa: E402

from graph_adapter import serve  # noqa: E402
from graph_adapter.exporter.onnx_rewrites import ladder_model  # noqa: E402
from graph_adapter.serve import (Contract, GraphTooLargeError, InputField,  # noqa: E402
                                 OutputField, Rung)
from graph_adapter.serve.pack import pack_call  # noqa: E402

RUNG_INPUT = "graph_adapter_rung"
#: (nodes, edges, graphs) of the hand-built rungs: one graph, a few, the bulk of many
BUDGETS = [(12, 1, 2), (60, 2, 9), (400, 3, 101)]


def _rung_model(N, G):
    """``h = 2 x`` (node-level, reshaped to a static ``[N, 2]``: another budget's call
    fails) and ``g`` = the sum of each graph's ``x`` rows (graph-level, ``[G, 2]``)."""
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["x2"]),
        helper.make_node("Reshape", ["x2", "shape"], ["h"]),
        helper.make_node("Unsqueeze", ["batch", "axis1"], ["b1"]),
        helper.make_node("ScatterND", ["zeros", "b1", "x"], ["g"], reduction="add"),
    ]
    inits = [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
             helper.make_tensor("shape", TensorProto.INT64, [2], [N, 2]),
             helper.make_tensor("axis1", TensorProto.INT64, [1], [1]),
             helper.make_tensor("zeros", TensorProto.FLOAT, [G, 2], [0.0] * (2 * G)),
             helper.make_tensor("unused", TensorProto.FLOAT, [1], [0.0])]
    graph = helper.make_graph(
        nodes, f"rung_{N}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, 2]),
         helper.make_tensor_value_info("batch", TensorProto.INT64, [N])],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, [N, 2]),
         helper.make_tensor_value_info("g", TensorProto.FLOAT, [G, 2])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def _contract(N, G, E=1, **kw):
    return Contract(format="onnx", nodes=N, edges=E, graphs=G,
                    inputs=(InputField("x", "feature", "node", "float32", (None, 2)),
                            InputField("batch", "reserved", "node", "int64", (N,))),
                    outputs=(OutputField("h", "node", "float32", (N, 2)),
                             OutputField("g", "graph", "float32", (G, 2))),
                    onnx_input_names=("x", "batch"), onnx_output_names=("h", "g"), **kw)


def _save(model, contract_json, path):
    entry = model.metadata_props.add()
    entry.key, entry.value = serve.ONNX_METADATA_KEY, contract_json
    onnx.save(model, str(path))
    return str(path)


def _ladder(path):
    models = [_rung_model(N, G) for N, _, G in BUDGETS]
    merged, dims = ladder_model(models, RUNG_INPUT)
    onnx.checker.check_model(merged)
    assert dims == {RUNG_INPUT: [1, 2, 3], "x_dim0": [12, 60, 400], "batch_dim0": [12, 60, 400]}
    N, E, G = BUDGETS[-1]
    rungs = tuple(Rung(n, e, g, f"rung{i}") for i, (n, e, g) in enumerate(BUDGETS))
    c = _contract(N, G, E, rungs=rungs, onnx_rung_input=RUNG_INPUT,
                  onnx_rung_dims={k: tuple(v) for k, v in dims.items()})
    return _save(merged, c.to_json(), path), c


def _graph(rng, n):
    return {"x": rng.standard_normal((n, 2)).astype(np.float32)}


def _assert_predicts(pred, graphs):
    assert len(pred) == len(graphs)
    for i, (p, g) in enumerate(zip(pred, graphs)):
        np.testing.assert_array_equal(p["h"], 2 * g["x"], err_msg=f"graph {i}")
        np.testing.assert_allclose(p["g"], g["x"].sum(0), rtol=1e-5, atol=1e-5,
                                   err_msg=f"graph {i}")


@pytest.fixture(scope="module")
def hand_ladder(tmp_path_factory):
    return _ladder(tmp_path_factory.mktemp("onnx_ladder") / "ladder.onnx")


def test_each_call_runs_the_session_of_its_rung(hand_ladder):
    path, c = hand_ladder
    assert serve.read_contract(path) == c
    assert json.loads(c.to_json())["contract_version"] == 2
    p = serve.load(path, threads=1)
    rng = np.random.default_rng(0)
    one = _graph(rng, 5)
    checked = p.check([one])
    top = pack_call(p.rungs[-1], p.ops, checked)  # a call of the top rung's budget
    for r, (N, _, G) in enumerate(BUDGETS):
        out = p.run_padded(pack_call(p.rungs[r], p.ops, checked), r)
        assert out["h"].shape == (N, 2) and out["g"].shape == (G, 2)
        np.testing.assert_array_equal(out["h"][:5], 2 * one["x"])
        if r != len(BUDGETS) - 1:  # another budget: the rung's session (static) refuses it
            with pytest.raises(Exception, match="(?i)dimension|shape"):
                p.run_padded(top, r)
    assert p.rung_calls == {"rung0": 2, "rung1": 2, "rung2": 1}
    assert p.run_padded(top)["g"].shape == (BUDGETS[-1][2], 2)  # no rung: the top one


def test_a_plain_session_runs_the_rung_its_input_names(hand_ladder):
    """Any onnxruntime session of the file (no overrides) runs rung ``i`` for a rung
    input of ``i + 1`` elements: every If runs, all but that rung's give no rows."""
    import onnxruntime as ort

    path, _ = hand_ladder
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    for r, (N, _, G) in enumerate(BUDGETS):
        x = rng.standard_normal((N, 2)).astype(np.float32)
        batch = np.minimum(np.arange(N) // 3, G - 1).astype(np.int64)
        h, g = sess.run(["h", "g"], {"x": x, "batch": batch,
                                     RUNG_INPUT: np.zeros(r + 1, np.int64)})
        np.testing.assert_array_equal(h, 2 * x)
        want = np.zeros((G, 2), np.float32)
        np.add.at(want, batch, x)
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)


def test_the_merged_model_keeps_weights_a_rung_and_drops_unread_ones(hand_ladder):
    model = onnx.load(hand_ladder[0])
    assert [i.name for i in model.graph.input] == ["x", "batch", RUNG_INPUT]
    dims = [[d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim]
            for i in model.graph.input]
    assert dims == [["x_dim0", 2], ["batch_dim0"], [RUNG_INPUT]]
    assert not model.graph.initializer  # each branch holds its own (no outer-scope reads)
    ifs = [n for n in model.graph.node if n.op_type == "If"]
    assert len(ifs) == 3  # one a rung, all at the top level (nested ones: no inlining)
    rungs = [a.g for n in ifs for a in n.attribute if a.name == "then_branch"]
    assert [b.name for b in rungs] == ["rung0", "rung1", "rung2"]
    for b in rungs:
        names = {i.name for i in b.initializer}
        assert names == {f"{b.name}/{k}" for k in ("two", "shape", "axis1", "zeros",
                                                   "x__static_shape", "batch__static_shape")}
        # the outer inputs are read through a Reshape to the rung's static shape
        pins = [n for n in b.node if n.op_type == "Reshape" and n.input[0] in ("x", "batch")]
        assert [n.input[0] for n in pins] == ["x", "batch"]


def test_a_rung_session_runs_the_rung_graph_alone(hand_ladder, tmp_path):
    """With a rung's sizes as free dimension overrides onnxruntime folds the choice away:
    the optimized graph has no If left (it runs that rung's nodes only)."""
    import onnxruntime as ort

    path, c = hand_ladder
    for i in range(len(c.rungs)):
        opts = ort.SessionOptions()
        for k, v in c.onnx_rung_dims.items():
            opts.add_free_dimension_override_by_name(k, v[i])
        opts.optimized_model_filepath = str(tmp_path / f"opt{i}.onnx")
        ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        ops = [n.op_type for n in onnx.load(opts.optimized_model_filepath).graph.node]
        assert "If" not in ops and "ScatterND" in ops, ops


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(1, 120), max_size=300), st.integers(0, 2 ** 16))
def test_mixed_requests_keep_order_and_every_graph_once(hand_ladder, sizes, seed):
    path, _ = hand_ladder
    p = _PREDICTORS.setdefault(path, serve.load(path, threads=1))
    rng = np.random.default_rng(seed)
    graphs = [_graph(rng, n) for n in sizes]
    before = dict(p.rung_calls), p.calls
    _assert_predicts(p.predict(graphs), graphs)  # any graph lost, repeated or moved fails
    calls = {k: v - before[0][k] for k, v in p.rung_calls.items()}
    assert sum(calls.values()) == p.calls - before[1]
    if len(sizes) == 1:  # one small graph: the one-graph rung
        assert calls == {"rung0": int(sizes[0] <= 10), "rung1": int(10 < sizes[0] <= 52),
                         "rung2": int(sizes[0] > 52)}


_PREDICTORS: dict = {}


def test_a_graph_over_the_top_rung_is_named_with_the_export_option(hand_ladder):
    p = serve.load(hand_ladder[0], threads=1)
    rng = np.random.default_rng(1)
    top = max(r.max_graph_nodes for r in p.contract.rungs)
    with pytest.raises(GraphTooLargeError) as e:
        p.predict([_graph(rng, 3), _graph(rng, top + 1)])
    msg = str(e.value)
    assert e.value.graph == 1 and "top rung" in msg and "nodes=400" in msg
    assert f"max_nodes={top + 1}" in msg and f"--max-nodes {top + 1}" in msg
    assert p.calls == 0  # refused before any call
    at_top = [_graph(rng, top)]
    _assert_predicts(p.predict(at_top), at_top)


@pytest.mark.parametrize("written_by", ["before ladders", "pt2 ladders"])
def test_one_budget_artifacts_of_earlier_versions_still_load(tmp_path, written_by):
    """A one-budget artifact's contract as earlier exports wrote it (version 1; no
    ``rungs`` key before ladders, ``"rungs": []`` with the .pt2 ones), and the model
    without a rung input."""
    N, G = 40, 5
    d = json.loads(_contract(N, G).to_json())
    assert d["contract_version"] == 1 and "onnx_rung_input" not in d
    if written_by == "before ladders":
        del d["rungs"]
    path = _save(_rung_model(N, G), json.dumps(d), tmp_path / "one.onnx")
    p = serve.load(path, threads=1)
    assert not p.contract.rungs and not p.rungs
    rng = np.random.default_rng(2)
    graphs = [_graph(rng, n) for n in (3, 30, 1, 8, 9, 12)]
    _assert_predicts(p.predict(graphs), graphs)
    assert p.calls == 2  # [3, 30, 1], [8, 9, 12]: 38 nodes a call


def test_a_rung_contract_without_its_input_is_refused(tmp_path):
    path, c = _ladder(tmp_path / "l.onnx")
    m = onnx.load(path)
    del m.metadata_props[:]
    for bad in (dataclasses.replace(c, onnx_rung_input=""),
                dataclasses.replace(c, onnx_rung_dims={"x_dim0": (12, 60)})):
        _save(m, bad.to_json(), tmp_path / "bad.onnx")
        del m.metadata_props[:]
        with pytest.raises(serve.ArtifactError, match="onnx_rung_input"):
            serve.load(str(tmp_path / "bad.onnx"))


# --------------------------------------------------------------- exported (extended)
KEYS = ["x", "edge_index", "edge_attr"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    import torch

    from graph_adapter.app.models import build_model
    from graph_adapter.exporter import export
    from graph_adapter.batching import Budget, FixedSizeLoader
    from graph_adapter.nn import ipu_wrap

    from _padding import molecule_like_graphs

    graphs = molecule_like_graphs(40, seed=3)
    loader = FixedSizeLoader(graphs, Budget.fit(graphs, 16))
    torch.manual_seed(0)
    model = build_model("gine", hidden=8, layers=1, y_mean=1.0, y_std=2.0).eval()
    big_n, big_e = 80, 150  # over the bulk rung's room (fit on graphs of 2-6 nodes)
    path = str(tmp_path_factory.mktemp("onnx_ladder") / "ladder.onnx")
    contract = export(ipu_wrap(model), loader, path, format="onnx", ladder=True,
                      max_nodes=big_n, max_edges=big_e, threads=1)
    return model, graphs, path, contract


def _sized(graphs, n, e, seed):
    import torch
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 2, (n, 9), generator=g)
    return Data(x=x, edge_index=torch.randint(0, n, (2, e), generator=g),
                edge_attr=torch.randint(0, 2, (e, 3), generator=g))


def _eager(model, graphs):
    import torch
    from torch_geometric.data import Batch

    model.eval()  # export restores the wrapper's mode (training), the model's with it
    with torch.no_grad():
        return [model(b.x, b.edge_index, b.edge_attr, b.batch).numpy()
                for b in (Batch.from_data_list([d]) for d in graphs)]


def _numpy(graphs):
    return [{k: d[k].numpy() for k in KEYS} for d in graphs]


def _assert_eager(got, want):
    bad = [i for i, (g, w) in enumerate(zip(got, want))
           if not np.allclose(np.asarray(g).reshape(w.shape), w, atol=1e-4, rtol=1e-4)]
    assert len(got) == len(want) and not bad, bad


@pytest.mark.extended  # three ONNX exports and their checks (~10 s, the fixture)
def test_exported_ladder_equals_eager_for_graphs_of_every_rung_size(exported):
    model, graphs, path, contract = exported
    assert len(contract.rungs) == 3 and contract.onnx_rung_input == "graph_adapter_rung"
    assert all(r.verified_max_abs_diff is not None and r.verified_max_abs_diff < 1e-4
               for r in contract.rungs)
    assert serve.read_contract(path) == contract
    p = serve.load(path, threads=1)
    # one graph filling each rung's per-graph room: each runs alone in that rung
    rungs = sorted(range(len(contract.rungs)), key=lambda i: contract.rungs[i].max_graph_nodes)
    for k, r in enumerate(rungs):
        rung = contract.rungs[r]
        g = _sized(graphs, rung.max_graph_nodes, min(rung.edges, 3 * rung.max_graph_nodes), k)
        before = dict(p.rung_calls)
        _assert_eager(p.predict(_numpy([g])), _eager(model, [g]))
        used = [q for q in p.rung_calls if p.rung_calls[q] != before[q]]
        assert len(used) == 1, used
    assert all(v >= 1 for v in p.rung_calls.values()), p.rung_calls
    top = max(r.max_graph_nodes for r in contract.rungs)
    with pytest.raises(GraphTooLargeError, match=f"max_nodes={top + 1}"):
        p.predict(_numpy([graphs[0], _sized(graphs, top + 1, 4, 9)]))


@pytest.mark.extended  # shares the fixture above
@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 39), st.booleans()), min_size=1, max_size=150),
       st.sampled_from([1, 2]))
def test_exported_ladder_mixed_requests_keep_order_and_equal_eager(exported, picks, threads):
    model, graphs, path, contract = exported
    p = _PREDICTORS.setdefault((path, threads), serve.load(path, threads=threads))
    big = _BIG.setdefault(path, _sized(graphs, 50, 90, 5))  # over the bulk rung's room
    request = [big if large else graphs[i] for i, large in picks]
    want = _EAGER.setdefault(path, _eager(model, graphs + [big]))
    got = p.predict(_numpy(request))
    _assert_eager(got, [want[-1] if large else want[i] for i, large in picks])


_BIG: dict = {}
_EAGER: dict = {}


@pytest.mark.extended  # a fresh interpreter (~3 s) on the fixture above
def test_exported_ladder_serves_where_torch_cannot_be_imported(exported, tmp_path):
    from serve._serving import serve_in_fresh_process

    model, graphs, path, contract = exported
    request = graphs[:7] + [_sized(graphs, 50, 90, 6)] + graphs[7:30]
    preds, info = serve_in_fresh_process(path, request, KEYS, str(tmp_path),
                                         blocked=("torch_geometric", "torch"))
    assert "torch" not in info["top_modules"] and "torch_geometric" not in info["top_modules"]
    _assert_eager([p[""] for p in preds], _eager(model, request))
