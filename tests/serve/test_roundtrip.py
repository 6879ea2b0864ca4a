"""Export -> load -> the trained model's predictions (issue 26).

ONNX artifacts of the demo's model (GINE + BatchNorm, graph-level), served in a fresh
process where ``torch_geometric`` and ``torch`` cannot be imported (onnxruntime + numpy
only: the one ONNX round trip through a subprocess; ``tests/serve/test_pt2.py`` has the
``.pt2`` one), and of zoo models served in this process (the same runtime): GIN and GAT,
node-level outputs split per graph; SchNet, whose radius graph is built inside the
wrapped forward with a static size. Hetero models are refused by name.
"""
import pytest
import torch
from torch import nn

pytest.importorskip("onnxruntime", reason="the serve extra (onnx, onnxscript, onnxruntime)")

from graph_adapter import serve  # noqa: E402
from graph_adapter.app.models import build_model  # noqa: E402
from graph_adapter.app.zoo.layers import MODEL  # noqa: E402
from graph_adapter.exporter import UnsupportedExportError, export  # noqa: E402
from graph_adapter.batching import Budget
from graph_adapter.batching import FixedSizeLoader
from graph_adapter.nn import masked_loss
from graph_adapter.nn import ipu_wrap
from torch_geometric.data import Data, HeteroData  # noqa: E402

from _padding import molecule_like_graphs  # noqa: E402
from serve._serving import eager_per_graph, serve_in_fresh_process  # noqa: E402

ATOL = 1e-4  # the ONNX tolerance export checks (graph_adapter.exporter.TOLERANCE)


def _trained(model, loader, steps=3):
    """A few real training steps through the wrapper (BatchNorm statistics move too)."""
    wrapped = ipu_wrap(model, loss_fn=masked_loss("mse"))
    opt = torch.optim.SGD(wrapped.parameters(), lr=1e-3)
    wrapped.train()
    for _, flat in zip(range(steps), loader):
        opt.zero_grad()
        wrapped(flat)["loss"].backward()
        opt.step()
    return wrapped.eval()


def _requests(graphs, keys):
    """Request dicts of numpy arrays, as a client sends them."""
    return [{k: d[k].numpy() for k in keys} for d in graphs]


def _float_graphs(num, features, seed, pos=False):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(num):
        n = int(torch.randint(2, 8, (1,), generator=g))
        m = int(torch.randint(1, 2 * n + 1, (1,), generator=g))
        d = Data(x=torch.randn(n, features, generator=g),
                 edge_index=torch.randint(0, n, (2, m), generator=g), y=torch.randn(1, generator=g))
        if pos:
            d.pos = torch.randn(n, 3, generator=g)
            d.z = torch.randint(1, 10, (n,), generator=g)
        out.append(d)
    return out


def test_demo_model_served_without_pyg_or_torch_equals_the_trained_model(tmp_path):
    graphs = molecule_like_graphs(120, seed=5)
    loader = FixedSizeLoader(graphs, Budget.fit(graphs, 16), shuffle=True)
    model = build_model("gine", hidden=16, layers=2, y_mean=3.0, y_std=2.0)
    wrapped = _trained(model, loader)
    contract = export(wrapped, loader, str(tmp_path / "demo.onnx"), format="onnx")
    assert contract.dropped_inputs == ("y",)  # labels are not part of a request
    assert [f.level for f in contract.outputs] == ["graph"]
    assert wrapped.loss_fn is not None and not wrapped.training  # restored
    preds, info = serve_in_fresh_process(str(tmp_path / "demo.onnx"), graphs,
                                         ["x", "edge_index", "edge_attr"], str(tmp_path),
                                         blocked=("torch_geometric", "torch"))
    assert info["calls"] > 5  # 120 graphs: many padded calls
    assert "torch" not in info["top_modules"] and "torch_geometric" not in info["top_modules"]
    model.eval()
    ref = eager_per_graph(model, graphs, lambda m, b: m(b.x, b.edge_index, b.edge_attr, b.batch))
    for p, r in zip(preds, ref):
        assert p[""].shape == (1,)
        torch.testing.assert_close(torch.from_numpy(p[""]), r[0], atol=ATOL, rtol=ATOL)


class _NodeModel(nn.Module):
    """A zoo model returning node embeddings: forward(x, edge_index)."""

    def __init__(self, name):
        super().__init__()
        self.inner = MODEL[name]()

    def forward(self, x, edge_index):
        return self.inner(x, edge_index)


@pytest.mark.parametrize("name", ["GIN", "GAT"])
def test_zoo_node_level_outputs_are_split_per_graph(name, tmp_path):
    torch.manual_seed(0)
    graphs = _float_graphs(40, 8, seed=1)
    loader = FixedSizeLoader(graphs, Budget.fit(graphs, 8))
    model = _NodeModel(name)
    wrapped = ipu_wrap(model)
    with torch.no_grad():  # BatchNorm statistics of real rows (GIN), then evaluate
        wrapped.train()
        for flat in loader:
            wrapped(flat)
    wrapped.eval()
    path = str(tmp_path / f"{name}.onnx")
    contract = export(wrapped, loader, path, format="onnx")
    assert [f.level for f in contract.outputs] == ["node"]
    predictor = serve.load(path, threads=1)  # in this process: the demo's test above
    preds = predictor.predict(_requests(graphs, ["x", "edge_index"]))  # serves without PyG
    assert predictor.calls >= 5
    ref = eager_per_graph(model.eval(), graphs, lambda m, b: m(b.x, b.edge_index))
    for d, p, r in zip(graphs, preds, ref):
        assert p.shape == (d.num_nodes, 16)
        torch.testing.assert_close(torch.from_numpy(p), r, atol=ATOL, rtol=ATOL)


class _SchNet(nn.Module):
    """The zoo's SchNet: its radius graph is static inside the wrapped forward (and exact
    on the host for the eager reference)."""

    def __init__(self):
        super().__init__()
        self.inner = MODEL["SchNet"][0]()

    def forward(self, z, pos, batch):
        return self.inner(z, pos, batch)


def test_schnet_with_its_radius_graph_inside_the_model_is_served(tmp_path):
    torch.manual_seed(0)
    graphs = _float_graphs(30, 1, seed=2, pos=True)
    for d in graphs:
        del d.x
    loader = FixedSizeLoader(graphs, Budget.fit(graphs, 8))
    model = _SchNet().eval()
    wrapped = ipu_wrap(model).eval()
    path = str(tmp_path / "schnet.onnx")
    contract = export(wrapped, loader, path, format="onnx")
    assert {f.key for f in contract.features} == {"z", "pos"}
    preds = serve.load(path, threads=1).predict(_requests(graphs, ["z", "pos"]))
    ref = eager_per_graph(model, graphs, lambda m, b: m(b.z, b.pos, b.batch))
    for p, r in zip(preds, ref):
        torch.testing.assert_close(torch.from_numpy(p), r[0], atol=ATOL, rtol=ATOL)


def test_hetero_models_are_refused_by_name(tmp_path):
    graphs = []
    for i in range(6):
        h = HeteroData()
        h["a"].x = torch.randn(3 + i % 2, 2)
        h["b"].x = torch.randn(2, 2)
        h["a", "r", "b"].edge_index = torch.tensor([[0, 1], [1, 0]])
        graphs.append(h)
    loader = FixedSizeLoader(graphs, Budget(nodes={"a": 31, "b": 32}, edges={"a__r__b": 30},
                                            graphs=12))
    with pytest.raises(UnsupportedExportError, match="hetero graphs .* not supported"):
        export(ipu_wrap(nn.Linear(2, 2)), loader, str(tmp_path / "h.onnx"), format="onnx")
    assert not (tmp_path / "h.onnx").exists()
