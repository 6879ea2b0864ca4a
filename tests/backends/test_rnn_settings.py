"""Issue 27 item 5: ``compile`` runs RNN-based PyG layers (Set2Set, LSTM aggregation)
unmodified, training and inference, with Dynamo's ``allow_rnn`` (and oneDNN off for
training) set for the call only and restored after. ``aot_eager`` runs the same Dynamo
trace and AOTAutograd as inductor (where both failures come from) without its codegen."""
import pytest
import torch
from torch_geometric.nn import Set2Set
from torch_geometric.nn.aggr import LSTMAggregation

import graph_adapter as ga
from graph_adapter.nn import ipu_wrap

from _padding import pad_batch, random_graphs


class Pool(torch.nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.lin = torch.nn.Linear(4, 8)
        self.pool = Set2Set(8, processing_steps=2) if kind == "set2set" else \
            LSTMAggregation(8, 8)
        self.kind = kind

    def forward(self, x, edge_index, batch):
        h = self.lin(x)
        if self.kind == "set2set":
            return self.pool(h, batch, dim_size=5)
        return self.pool(h, batch, dim_size=5, max_num_elements=12)


def _flat():
    graphs = random_graphs(torch.Generator().manual_seed(0), 3)
    n = sum(g.num_nodes for g in graphs)
    e = sum(g.edge_index.size(1) for g in graphs)
    return pad_batch(graphs, n + 2, e + 3, 5)


@pytest.mark.parametrize("kind", ["set2set", "lstm_aggr"])
def test_rnn_layers_compile_in_both_modes_with_scoped_settings(kind):
    torch.manual_seed(0)
    flat = _flat()
    w = ipu_wrap(Pool(kind), loss_fn=lambda out, b: out[b.graph_mask].pow(2).mean())
    before = (torch._dynamo.config.allow_rnn, torch.backends.mkldnn.enabled)
    c = ga.compile(w, backend="aot_eager")
    real = flat["graph_mask"]
    for training in (True, False):
        w.train(training)
        c.train(training)
        with torch.set_grad_enabled(training):
            got = c(flat)
            want = w(flat)
        torch.testing.assert_close(got["output"][real], want["output"][real])
        if training:
            got["loss"].backward()
            assert all(p.grad is not None for p in w.parameters())
        assert (torch._dynamo.config.allow_rnn, torch.backends.mkldnn.enabled) == before
    assert c.compile_count == 2


def test_a_model_without_rnn_gets_no_setting():
    from graph_adapter.backends.engines import has_rnn

    assert has_rnn(Pool("set2set")) and not has_rnn(torch.nn.Linear(2, 2))
