"""A ladder of budgets in one ``.pt2`` artifact: planning over rungs (fast, no compile)
and one exported ladder (slow: one AOTInductor compile a rung) against eager PyG."""
import dataclasses
import json
import zipfile

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graph_adapter import serve
from graph_adapter.serve import Contract, GraphTooLargeError, InputField, OutputField, Rung
from graph_adapter.serve.pack import Graph, plan_calls, plan_ladder

KEYS = ["x", "edge_index", "edge_attr"]


def _contract(rungs):
    inputs = (InputField("x", "feature", "node", "float32", (None, 4)),)
    top = max(rungs, key=lambda r: r.nodes + r.edges)
    return Contract(format="pt2", nodes=top.nodes, edges=top.edges, graphs=top.graphs,
                    inputs=inputs, outputs=(OutputField("out", "graph", "float32", (2, 1)),),
                    rungs=tuple(rungs))


RUNGS = (Rung(30, 70, 2, "rung0"), Rung(300, 700, 18, "rung1"),
         Rung(4000, 9000, 258, "rung2"), Rung(502, 1201, 2, "model"))


def _views(c):
    return [dataclasses.replace(c, nodes=r.nodes, edges=r.edges, graphs=r.graphs, rungs=())
            for r in c.rungs]


def test_contract_with_rungs_round_trips_as_json():
    c = _contract(RUNGS)
    text = c.to_json()
    assert json.loads(text)["contract_version"] == 2
    assert Contract.from_json(text) == c
    one = dataclasses.replace(c, rungs=())
    assert json.loads(one.to_json())["contract_version"] == 1 and "rungs" in one.to_json()
    assert Contract.from_json(one.to_json()) == one


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 500), st.integers(0, 1200)), max_size=700))
def test_plan_ladder_takes_every_graph_once_in_a_rung_that_holds_it(sizes):
    views = _views(_contract(RUNGS))
    graphs = [Graph({}, n, e, (), i) for i, (n, e) in enumerate(sizes)]
    calls = plan_ladder(views, graphs)
    seen = sorted(i for _, call in calls for i in call)
    assert seen == list(range(len(graphs)))
    for r, call in calls:
        c = views[r]
        # the call is one plan_calls would make for its rung: it fits
        assert plan_calls(c, [graphs[i] for i in call]) == [list(range(len(call)))]


def test_plan_ladder_uses_small_rungs_for_small_requests():
    views = _views(_contract(RUNGS))
    one = plan_ladder(views, [Graph({}, 20, 40)])
    assert one == [(0, [0])]
    many = plan_ladder(views, [Graph({}, 15, 30, (), i) for i in range(600)])
    assert [r for r, _ in many][0] == 2  # the bulk rung first


def test_graph_over_the_top_rung_names_it_and_the_export_option():
    views = _views(_contract(RUNGS))
    with pytest.raises(GraphTooLargeError) as e:
        plan_ladder(views, [Graph({}, 10, 10), Graph({}, 5000, 100, (), 1)])
    msg = str(e.value)
    assert "graph 1" in msg and "top rung" in msg and "nodes=4000" in msg
    assert "max_nodes=5000" in msg and "max_edges=100" in msg
    assert e.value.graph == 1


@pytest.fixture(scope="module")
def ladder(tmp_path_factory):
    from graph_adapter.app.models import build_model
    from graph_adapter.exporter import export
    from graph_adapter.batching import Budget, FixedSizeLoader
    from graph_adapter.nn import ipu_wrap

    from _padding import molecule_like_graphs

    graphs = molecule_like_graphs(40, seed=3)
    loader = FixedSizeLoader(graphs, Budget.fit(graphs, 16))
    torch.manual_seed(0)
    model = build_model("gine", hidden=8, layers=1, y_mean=1.0, y_std=2.0).eval()
    big_n = max(g.num_nodes for g in graphs) * 3
    big_e = max(g.num_edges for g in graphs) * 3
    path = str(tmp_path_factory.mktemp("ladder") / "ladder.pt2")
    contract = export(ipu_wrap(model), loader, path, ladder=True, max_nodes=big_n,
                      max_edges=big_e, threads=1)
    return model, graphs, path, contract, (big_n, big_e)


def _big_graph(graphs, n, e):
    from torch_geometric.data import Data

    g = graphs[0]
    x = g.x[torch.arange(n) % g.num_nodes]
    ei = torch.randint(0, n, (2, e))
    ea = g.edge_attr[torch.arange(e) % g.num_edges]
    return Data(x=x, edge_index=ei, edge_attr=ea)


def _eager(model, graphs):
    from torch_geometric.data import Batch

    model.eval()  # export restores the wrapper's mode (training), the model's with it
    with torch.no_grad():
        return [model(b.x, b.edge_index, b.edge_attr, b.batch)
                for b in (Batch.from_data_list([d]) for d in graphs)]


@pytest.mark.slow
@pytest.mark.extended  # three AOTInductor compiles (~60 s, the fixture): CI's second step
def test_ladder_artifact_lists_rungs_and_predicts_like_eager(ladder):
    model, graphs, path, contract, (n, e) = ladder
    assert len(contract.rungs) == 3  # 1 and 16 graphs (40 graphs: no 256), the top rung
    assert serve.read_contract(path) == contract
    with zipfile.ZipFile(path) as z:
        progs = {p.split("/")[3] for p in z.namelist() if "/data/aotinductor/" in p}
    assert progs == {r.program for r in contract.rungs}
    p = serve.load(path, threads=1)
    request = graphs[:5] + [_big_graph(graphs, n, e)] + graphs[5:]
    got = p.predict(request)
    want = _eager(model, request)
    bad = [i for i, (g, w) in enumerate(zip(got, want))
           if not torch.allclose(g.reshape(w.shape), w, atol=1e-4, rtol=1e-4)]
    assert not bad, (bad, p.plan(p.check(request)))
    assert sum(p.rung_calls.values()) == p.calls
    with pytest.raises(GraphTooLargeError, match="max_nodes="):
        p.predict([_big_graph(graphs, max(r.max_graph_nodes for r in contract.rungs) + 1, 4)])


@pytest.mark.slow
@pytest.mark.extended  # shares the fixture above
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(0, 39), min_size=1, max_size=120))
def test_ladder_mixed_requests_keep_order_and_equal_eager(ladder, picks):
    model, graphs, path, _, _ = ladder
    p = _PREDICTORS.setdefault(path, serve.load(path, threads=1))
    request = [graphs[i] for i in picks]
    got = p.predict(request)
    assert len(got) == len(request)
    want = _EAGER.setdefault(path, _eager(model, graphs))
    for i, g in zip(picks, got):
        torch.testing.assert_close(g.reshape(want[i].shape), want[i], atol=1e-4, rtol=1e-4)


_PREDICTORS: dict = {}
_EAGER: dict = {}


def test_ladder_arguments_are_named_before_any_compile(tmp_path):
    from graph_adapter.app.models import build_model
    from graph_adapter.exporter import export
    from graph_adapter.batching import Budget, FixedSizeLoader
    from graph_adapter.nn import ipu_wrap

    from _padding import molecule_like_graphs

    graphs = molecule_like_graphs(10, seed=1)
    loader = FixedSizeLoader(graphs, Budget.fit(graphs, 4))
    wrapped = ipu_wrap(build_model("gine", hidden=8, layers=1, y_mean=0.0, y_std=1.0))
    with pytest.raises(ValueError, match="ladder=True"):
        export(wrapped, loader, str(tmp_path / "m.pt2"), max_nodes=50)
    # (format="onnx" ladders are written too: tests/serve/test_onnx_ladder.py)
