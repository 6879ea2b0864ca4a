"""``python benchmarks/bench_layout.py``: the selection it reports, and the GPU-only variant
refused without a GPU (cheap backends; no timing is checked)."""
import json

import pytest
import torch
from torch_geometric.nn import GINConv, global_add_pool

from benchmarks.harness import layout
from graph_adapter.backends.select import CANDIDATES
from graph_adapter.batching import Budget, FixedSizeLoader
from graph_adapter.nn import masked_mse_loss

from _padding import random_graphs


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 8)
        self.conv = GINConv(torch.nn.Linear(8, 8))
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x, edge_index, batch):
        h = self.conv(self.lin(x), edge_index).relu()
        return self.head(global_add_pool(h, batch)).squeeze(-1)


def _loss(out, b):
    return masked_mse_loss(out, b.y, b.graph_mask)


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_the_layout_benchmark_reports_a_choice_per_mode():
    torch.manual_seed(0)
    graphs = random_graphs(torch.Generator().manual_seed(3), 24)
    flats = list(FixedSizeLoader(graphs, Budget(nodes=64, edges=128, graphs=8), shuffle=False,
                                 layout="hyb", layout_widths=(1, 1)))
    res = layout.selection(Net(), _loss, flats, steps=1, backend="eager")
    assert set(res) == {"train", "infer"}
    for c in res.values():
        assert sorted(c["medians"]) == sorted(CANDIDATES) and c["winner"] in CANDIDATES
        assert all(len(v) == 1 for v in c["samples"].values()) and c["trial_s"] > 0
    json.dumps(res)


def test_the_layout_benchmark_asks_for_a_gpu_for_the_cuda_graph_variant():
    with pytest.raises(SystemExit, match="need --device cuda"):
        layout.main(["--variants", "wrap_inductor_cudagraphs"])
