"""The ``.pt2`` (AOTInductor) path: export once (one compile, ~20 s cold), serve without PyG.

One artifact for the module (a module-scoped fixture): the demo's model, trained a few
steps, exported with ``format="pt2"``: the main suite's only AOTInductor compile, and
its only ``.pt2`` round trip through a fresh process (PyG blocked there).
"""
import json
import zipfile

import pytest
import torch

from graph_adapter import serve
from graph_adapter.app.models import build_model
from graph_adapter.exporter import export
from graph_adapter.batching import Budget
from graph_adapter.batching import FixedSizeLoader
from graph_adapter.nn import masked_loss
from graph_adapter.nn import ipu_wrap

from _padding import molecule_like_graphs
from serve._serving import eager_per_graph, serve_in_fresh_process

pytestmark = pytest.mark.slow
KEYS = ["x", "edge_index", "edge_attr"]


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    graphs = molecule_like_graphs(90, seed=7)
    loader = FixedSizeLoader(graphs, Budget.fit(graphs, 16), shuffle=True)
    model = build_model("gine", hidden=16, layers=2, y_mean=5.0, y_std=3.0)
    wrapped = ipu_wrap(model, loss_fn=masked_loss("mse"))
    opt = torch.optim.Adam(wrapped.parameters(), lr=1e-2)
    for flat in loader:
        opt.zero_grad()
        wrapped(flat)["loss"].backward()
        opt.step()
    wrapped.eval()
    path = str(tmp_path_factory.mktemp("pt2") / "demo.pt2")
    contract = export(wrapped, loader, path, threads=1)  # format="pt2" by default
    wrapped.loss_fn = None  # eager reference of requests without labels, as exported
    return path, contract, graphs, model.eval(), wrapped


def test_the_archive_carries_its_contract_as_json_and_no_pickle(artifact):
    path, contract, *_ = artifact
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        text = z.read(next(n for n in names if n.endswith("/extra/graph_adapter.json"))).decode()
    assert not [n for n in names if n.endswith((".pkl", ".pickle"))], names
    assert json.loads(text)["nodes"] == contract.nodes
    assert serve.read_contract(path) == contract
    assert contract.format == "pt2" and contract.verified_max_abs_diff <= 1e-5
    assert contract.threads == 1  # compiled for the server's thread count


@pytest.mark.extended  # a fresh interpreter loading the .pt2 (~10 s): CI's second step
def test_served_without_pyg_equals_the_trained_model(artifact, tmp_path):
    path, contract, graphs, model, _ = artifact
    preds, info = serve_in_fresh_process(path, graphs, KEYS, str(tmp_path))
    assert "torch_geometric" not in info["top_modules"] and info["calls"] >= 5
    ref = eager_per_graph(model, graphs, lambda m, b: m(b.x, b.edge_index, b.edge_attr, b.batch))
    for p, r in zip(preds, ref):
        torch.testing.assert_close(torch.from_numpy(p[""]), r[0], atol=1e-4, rtol=1e-4)


def test_padded_calls_equal_the_eager_wrapper_and_data_equals_dicts(artifact):
    path, contract, graphs, _, wrapped = artifact
    p = serve.load(path)
    for flat in p.pack(graphs[:40]):
        got = p.run_padded(flat)["output"]
        with torch.no_grad():
            ref = wrapped(flat)["output"]
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    as_data = p.predict(graphs[:40])  # PyG Data (y, an ignored key, included)
    as_dicts = p.predict([{k: d[k].numpy() for k in KEYS} for d in graphs[:40]])
    assert all(torch.equal(a, b) for a, b in zip(as_data, as_dicts))
    assert p.ignored_keys == {"y"}


def test_a_too_large_graph_is_named_before_any_call(artifact):
    path, contract, graphs, *_ = artifact
    p = serve.load(path)
    n = contract.max_graph_nodes + 1
    big = {"x": torch.zeros(n, 9, dtype=torch.long),
           "edge_index": torch.zeros(2, 1, dtype=torch.long),
           "edge_attr": torch.zeros(1, 3, dtype=torch.long)}
    with pytest.raises(serve.GraphTooLargeError, match=f"graph 3 has {n} nodes"):
        p.predict(list(graphs[:3]) + [big])
    assert p.calls == 0
