"""ONNX artifacts give the same predictions at any onnxruntime thread count.

onnxruntime's ``ScatterND(reduction="add")`` splits its update rows over the intra-op
threads and adds into shared rows without a lock: at 2+ threads rows whose index
repeats lose updates (wide rows, some 1500+ of them a call). ``export`` used to write
PyG's sum aggregation that way; it now sums sorted segments, which every kernel
computes the same at any thread count. Models 128 channels wide (GCN, GIN, GATv2,
max aggregation with a max pool, TransformerConv, GATConv), calls of some 6000 edges
whose targets are in random order, served at 1, 2 and 4 threads three times each,
equal the eager model on every graph. (Before the change GCN, GIN and GATv2 failed
here: a graph or two wrong by up to 1.2 at 2 threads, or the export refused.)
"""
import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("onnxruntime", reason="the serve extra (onnx, onnxscript, onnxruntime)")

from torch_geometric.data import Data  # noqa: E402
from torch_geometric.nn import (GATConv, GATv2Conv, GCNConv, GINConv, SAGEConv,  # noqa: E402
                                TransformerConv, global_add_pool, global_max_pool)

from graph_adapter import serve  # noqa: E402
from graph_adapter.exporter import export  # noqa: E402
from graph_adapter.batching import Budget, FixedSizeLoader  # noqa: E402
from graph_adapter.nn import ipu_wrap  # noqa: E402

from serve._serving import eager_per_graph  # noqa: E402

WIDE = 128
TOL = 1e-4  # the ONNX tolerance export checks (graph_adapter.exporter.TOLERANCE)


def wide_graphs(num, seed):
    """Graphs of 100-200 nodes, ~4 random edges a node in random order (so that the rows
    a call adds into one node come from all over its edges), with categorical node and
    edge columns (0-3, as ``from_smiles`` gives them)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(num):
        n = int(torch.randint(100, 201, (1,), generator=g))
        ei = torch.randint(0, n, (2, 4 * n), generator=g)
        out.append(Data(x=torch.randint(0, 4, (n, 9), generator=g), edge_index=ei,
                        edge_attr=torch.randint(0, 3, (ei.size(1), 3), generator=g),
                        y=torch.randn(1, 1, generator=g)))
    return out


class GCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = GCNConv(9, WIDE), GCNConv(WIDE, 32)

    def forward(self, x, edge_index, batch):
        h = self.c1(x.float(), edge_index).relu()
        return global_add_pool(self.c2(h, edge_index), batch)


class GIN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = GINConv(nn.Sequential(nn.Linear(9, WIDE), nn.ReLU(), nn.Linear(WIDE, WIDE)))
        self.c2 = GINConv(nn.Linear(WIDE, 32))

    def forward(self, x, edge_index, batch):
        h = self.c1(x.float(), edge_index).relu()
        return global_add_pool(self.c2(h, edge_index), batch)


class Attention(nn.Module):
    """4 heads of 32 channels (128 wide) with bond features, then one head, add pool."""

    def __init__(self, conv=GATv2Conv):
        super().__init__()
        self.c1 = conv(9, WIDE // 4, heads=4, edge_dim=3)
        self.c2 = conv(WIDE, 32, heads=1, edge_dim=3)

    def forward(self, x, edge_index, edge_attr, batch):
        e = edge_attr.float()
        h = self.c1(x.float(), edge_index, e).relu()
        return global_add_pool(self.c2(h, edge_index, e), batch)


class MaxMin(nn.Module):
    """Max then min aggregation, max pool."""

    def __init__(self):
        super().__init__()
        self.c1 = SAGEConv(9, WIDE, aggr="max")
        self.c2 = SAGEConv(WIDE, 32, aggr="min")

    def forward(self, x, edge_index, batch):
        h = self.c1(x.float(), edge_index).relu()
        return global_max_pool(self.c2(h, edge_index), batch)


MODELS = {"GCN": (GCN, False), "GIN": (GIN, False), "GATv2": (Attention, True),
          "max aggregation + max pool": (MaxMin, False),
          "GATConv": (lambda: Attention(GATConv), True),
          "TransformerConv": (lambda: Attention(TransformerConv), True)}


def _serve_at_thread_counts(name, tmp_path):
    torch.manual_seed(0)
    graphs = wide_graphs(24, seed=3)
    loader = FixedSizeLoader(graphs, Budget.fit(graphs, 8))
    make, edges = MODELS[name]
    model = make().eval()
    path = str(tmp_path / "m.onnx")
    contract = export(ipu_wrap(model).eval(), loader, path, format="onnx")
    assert contract.edges >= 4000 and contract.dropped_inputs == (
        ("y",) if edges else ("edge_attr", "y"))
    keys = [f.key for f in contract.features]
    requests = [{k: d[k].numpy() for k in keys} for d in graphs]
    call = (lambda m, b: m(b.x, b.edge_index, b.edge_attr, b.batch)) if edges else \
        (lambda m, b: m(b.x, b.edge_index, b.batch))
    ref = torch.stack([r[0] for r in eager_per_graph(model, graphs, call)]).numpy()
    for threads in (1, 2, 4):
        predictor = serve.load(path, threads=threads)
        for rep in range(3):
            got = np.stack(predictor.predict(requests))
            bad = ~np.isclose(got, ref, atol=TOL, rtol=TOL)
            assert not bad.any(), (f"{name}: {int(bad.any(1).sum())} of {len(graphs)} graphs "
                                   f"wrong at {threads} threads (run {rep + 1}), up to "
                                   f"{float(np.abs(got - ref).max()):.3g}")


@pytest.mark.parametrize("name", ["GCN", "GIN", "GATv2", "max aggregation + max pool"])
def test_wide_models_give_eager_predictions_at_1_2_and_4_threads(name, tmp_path):
    _serve_at_thread_counts(name, tmp_path)


@pytest.mark.slow
@pytest.mark.extended  # ~13 s: CI's second step (GATv2 stands for attention in the main suite)
@pytest.mark.parametrize("name", ["GATConv", "TransformerConv"])
def test_other_attention_layers_give_eager_predictions_at_1_2_and_4_threads(name, tmp_path):
    _serve_at_thread_counts(name, tmp_path)
