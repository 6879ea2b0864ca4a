"""Padding never changes results: ipu_wrap(model)(padded) == model(unpadded).

For GCN, GIN with a BatchNorm MLP, GAT, GraphSAGE and a model that pools
with the functional API without sizes, in train() and eval(): outputs of
real nodes/graphs, the loss, every parameter gradient and the BatchNorm
running statistics.
"""
import copy

import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given
from torch_geometric.data import Batch
from torch_geometric.nn import (GAT, GCN, GIN, GraphSAGE, global_add_pool, global_max_pool,
                                global_mean_pool)
from torch_geometric.nn.aggr import SoftmaxAggregation, SumAggregation
from torch_geometric.utils import scatter, softmax

from graph_adapter.nn import masked_loss
from graph_adapter.nn import ipu_wrap

from _padding import pad_batch, random_graphs
from strategies import model_graph_lists, paddings

ATOL = 2e-5


class GraphHead(torch.nn.Module):
    """A BasicGNN encoder, a pooling without ``size`` and a linear head: forward(data)."""

    def __init__(self, encoder, pool=global_mean_pool, hidden=8):
        super().__init__()
        self.encoder = encoder
        self.pool = pool
        self.head = torch.nn.Linear(hidden, 1)

    def forward(self, data):
        h = self.encoder(data.x, data.edge_index)
        return self.head(self.pool(h, data.batch)).squeeze(-1)


class Functional(torch.nn.Module):
    """Pooling through the functional API and aggregation modules, no sizes anywhere."""

    def __init__(self, f=4, hidden=8):
        super().__init__()
        self.lin = torch.nn.Linear(f, hidden)
        self.gate = torch.nn.Linear(hidden, 1)
        self.sum = SumAggregation()
        self.smx = SoftmaxAggregation(learn=True)
        self.head = torch.nn.Linear(5 * hidden, 1)

    def forward(self, x, edge_index, batch):
        h = self.lin(x).relu()
        # a node-level scatter over edges (size given: PyG's own max+1 would drop
        # trailing isolated nodes of the unpadded batch)
        h = h + scatter(h[edge_index[0]], edge_index[1], dim=0, reduce="sum", dim_size=x.size(0))
        a = softmax(self.gate(h), batch)
        pooled = torch.cat([
            global_add_pool(h * a, batch), global_mean_pool(h, batch), global_max_pool(h, batch),
            self.sum(h, batch), self.smx(h, batch)], dim=-1)
        return self.head(pooled).squeeze(-1)


def make(name):
    if name == "gcn":
        return GraphHead(GCN(4, 8, 2, 8))
    if name == "gin_bn":
        return GraphHead(GIN(4, 8, 2, 8, norm="batch_norm"), pool=global_add_pool)
    if name == "gat":
        return GraphHead(GAT(4, 8, 2, 8, heads=2), pool=global_max_pool)
    if name == "sage":
        return GraphHead(GraphSAGE(4, 8, 2, 8))
    if name == "functional":
        return Functional()
    raise KeyError(name)


MODELS = ["gcn", "gin_bn", "gat", "sage", "functional"]


def run_pair(name, graphs, extra_nodes, extra_edges, extra_graphs, train):
    torch.manual_seed(0)
    ref = make(name)
    mine = copy.deepcopy(ref)
    wrapped = ipu_wrap(mine, loss_fn=masked_loss("mse"))
    ref.train(train)
    wrapped.train(train)
    b = Batch.from_data_list(graphs)
    n, e, g = b.num_nodes, b.edge_index.size(1), b.num_graphs
    flat = pad_batch(graphs, n + extra_nodes, e + extra_edges, g + extra_graphs)

    if name == "functional":
        out_ref = ref(b.x, b.edge_index, b.batch)
    else:
        out_ref = ref(b)
    loss_ref = F.mse_loss(out_ref, b.y)
    loss_ref.backward()

    res = wrapped(flat)
    res["loss"].backward()

    gm = flat["graph_mask"]
    torch.testing.assert_close(res["output"][gm], out_ref, atol=ATOL, rtol=1e-4)
    assert res["output"].shape[0] == gm.numel()
    torch.testing.assert_close(res["loss"], loss_ref, atol=ATOL, rtol=1e-4)
    for (pn, p), (_, q) in zip(ref.named_parameters(), mine.named_parameters()):
        if p.grad is None:
            assert q.grad is None or q.grad.abs().max() < ATOL, pn
            continue
        torch.testing.assert_close(q.grad, p.grad, atol=ATOL, rtol=1e-4, msg=lambda m: f"{pn}: {m}")
    for (bn, p), (_, q) in zip(ref.named_buffers(), mine.named_buffers()):
        torch.testing.assert_close(q.float(), p.float(), atol=ATOL, rtol=1e-4, msg=lambda m: f"{bn}: {m}")


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("name", MODELS)
@given(graphs=model_graph_lists(nonempty_last=True), padding=paddings())
def test_padding_invariance(name, train, graphs, padding):
    """Drawn structure: 0-node and 0-edge graphs, self-loops, many empty graph slots."""
    n, e, g = (sum(d.num_nodes for d in graphs), sum(d.num_edges for d in graphs), len(graphs))
    N, E, G = n + padding[0], e + padding[1], g + padding[2]
    assume(len({N, E, G}) == 3)  # the documented rule: a row count tells its level
    if train and name == "gin_bn":
        assume(n >= 2)  # eager PyG's BatchNorm raises on fewer than 2 nodes in train()
    run_pair(name, graphs, *padding, train)


@pytest.mark.parametrize("name", ["gin_bn"])
def test_running_stats_over_steps(name):
    """Several train steps with an optimizer: parameters and running stats stay equal."""
    torch.manual_seed(0)
    ref = make(name)
    mine = copy.deepcopy(ref)
    wrapped = ipu_wrap(mine, loss_fn=masked_loss("mse"))
    opt_r = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt_m = torch.optim.SGD(mine.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        graphs = random_graphs(gen, 4)
        b = Batch.from_data_list(graphs)
        flat = pad_batch(graphs, b.num_nodes + 5, b.edge_index.size(1) + 3, 7)
        opt_r.zero_grad(); opt_m.zero_grad()
        F.mse_loss(ref(b), b.y).backward()
        wrapped(flat)["loss"].backward()
        opt_r.step(); opt_m.step()
    for (k, v), (_, w) in zip(ref.state_dict().items(), mine.state_dict().items()):
        torch.testing.assert_close(w.float(), v.float(), atol=1e-5, rtol=1e-4, msg=lambda m: f"{k}: {m}")


def test_gcn_self_loops_and_edge_weights():
    """Graphs with existing self-loops (GCN keeps their weight as the loop weight)."""
    from torch_geometric.nn import GCNConv

    torch.manual_seed(0)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = GCNConv(4, 3)

        def forward(self, x, edge_index, edge_weight):
            return self.conv(x, edge_index, edge_weight)

    ref = M()
    mine = copy.deepcopy(ref)
    gen = torch.Generator().manual_seed(3)
    graphs = random_graphs(gen, 3, self_loops=True)
    for d in graphs:
        loops = torch.arange(d.num_nodes).repeat(2, 1)
        d.edge_index = torch.cat([d.edge_index, loops[:, :1]], dim=1)
        d.edge_weight = torch.rand(d.edge_index.size(1), generator=gen) + 0.5
    b = Batch.from_data_list(graphs)
    flat = pad_batch(graphs, b.num_nodes + 2, b.edge_index.size(1) + 3, b.num_graphs + 1)
    w = ipu_wrap(mine)
    out = w(flat)["output"][flat["node_mask"]]
    torch.testing.assert_close(out, ref(b.x, b.edge_index, b.edge_weight), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("seed", [0, 1])
def test_padding_invariance_compiled_masked_norm(seed):
    """The masked BatchNorm math (what runs under a compiler) is padding invariant too."""
    from graph_adapter.backends import compile

    torch.manual_seed(0)
    ref = make("gin_bn")
    mine = copy.deepcopy(ref)
    c = compile(ipu_wrap(mine, loss_fn=masked_loss("mse")), "aot_eager")
    graphs = random_graphs(torch.Generator().manual_seed(seed), 4)
    b = Batch.from_data_list(graphs)
    flat = pad_batch(graphs, b.num_nodes + 3, b.edge_index.size(1) + 2, b.num_graphs + 2)
    out_ref = ref(b)
    F.mse_loss(out_ref, b.y).backward()
    res = c(flat)
    res["loss"].backward()
    torch.testing.assert_close(res["output"][flat["graph_mask"]], out_ref, atol=ATOL, rtol=1e-4)
    for (pn, p), (_, q) in zip(ref.named_parameters(), mine.named_parameters()):
        torch.testing.assert_close(q.grad, p.grad, atol=ATOL, rtol=1e-4, msg=lambda m: f"{pn}: {m}")
    for (bn, p), (_, q) in zip(ref.named_buffers(), mine.named_buffers()):
        torch.testing.assert_close(q.float(), p.float(), atol=ATOL, rtol=1e-4, msg=lambda m: f"{bn}: {m}")


# --------------------------------------------------------------------------
# Issue 15 item 1: statistics never move on rows that are not real
# --------------------------------------------------------------------------
@pytest.mark.parametrize("momentum", [0.1, None], ids=["momentum", "cumulative"])
def test_fully_padded_batch_moves_no_statistics(momentum):
    """A micro-batch without a real graph in train(): running_mean / running_var
    and num_batches_tracked stay bit-identical."""
    from graph_adapter.batching import Budget
    from graph_adapter.batching import Collator

    torch.manual_seed(0)
    model = make("gin_bn")
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm1d):
            m.momentum = momentum
    w = ipu_wrap(model, loss_fn=masked_loss("mse")).train()
    graphs = random_graphs(torch.Generator().manual_seed(0), 4)
    c = Collator(graphs, Budget(nodes=40, edges=60, graphs=6))
    w(c.collate_indices([0, 1]))  # statistics that are not the init values
    before = {k: v.clone() for k, v in model.state_dict().items()}
    w(c.empty())["loss"].backward()
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_loader_fill_batches_leave_running_stats_as_real_micro_batches_alone():
    """micro_batches=3, world_size=2: training over every micro-batch the loader
    yields (fill ones included) == training over the real micro-batches only."""
    from graph_adapter.batching import Budget
    from graph_adapter.format import split_micro_batches
    from graph_adapter.batching import FixedSizeLoader

    graphs = random_graphs(torch.Generator().manual_seed(2), 5)  # 5 graphs, 6 slots: fill
    budget = Budget(nodes=40, edges=60, graphs=4)
    micro = []
    padded = 0
    for rank in range(2):
        ld = FixedSizeLoader(graphs, budget, micro_batches=3, rank=rank, world_size=2)
        padded += ld.stats.padded_batches
        micro += [m for item in ld for m in split_micro_batches(item)]
    assert padded > 0 and len(micro) == 6
    torch.manual_seed(0)
    a = make("gin_bn")
    b = copy.deepcopy(a)
    wa = ipu_wrap(a, loss_fn=masked_loss("mse")).train()
    wb = ipu_wrap(b, loss_fn=masked_loss("mse")).train()
    for m in micro:
        wa(m)
        if m["graph_mask"].any():
            wb(m)
    for (k, v), (_, u) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(v, u), k
