"""Issue 15 item 2: gradients stay finite, and equal the unpadded model's, for
every aggregation and pool, including ops undefined on an empty set.

The padding convention (docs/dev/FORMAT.md) gives every padding graph slot a
padding node, so a per-graph op (the log of a sum, a max, a softmax) never
sees an empty set on a padding row; the packer and Budget.fit keep the room.
Batches come from the library's own Collator (not a hand-made pad).
"""
import copy

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Batch
from torch_geometric.nn import aggr as A
from torch_geometric.nn import global_add_pool, global_max_pool, global_mean_pool
from torch_geometric.utils import scatter

from graph_adapter.batching import Budget
from graph_adapter.batching import Collator
from graph_adapter.nn import masked_loss
from graph_adapter.nn import ipu_wrap

from _padding import random_graphs, untied


class LogSumExpPool(torch.nn.Module):
    """log(sum(exp(h))) per graph, written out: log(0) on an empty graph slot."""

    def forward(self, h, batch):
        return torch.log(scatter(h.exp(), batch, dim=0, reduce="sum"))


POOLS = {
    "sum": A.SumAggregation, "mean": A.MeanAggregation, "max": A.MaxAggregation,
    "min": A.MinAggregation, "mul": A.MulAggregation, "var": A.VarAggregation,
    "std": A.StdAggregation, "softmax": lambda: A.SoftmaxAggregation(learn=True),
    "softmax_t": lambda: A.SoftmaxAggregation(t=0.5), "powermean":
        lambda: A.PowerMeanAggregation(learn=True), "median": A.MedianAggregation,
    "logsumexp": LogSumExpPool,
    "global_add_pool": lambda: _Fn(global_add_pool), "global_mean_pool":
        lambda: _Fn(global_mean_pool), "global_max_pool": lambda: _Fn(global_max_pool),
}


class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, h, batch):
        return self.fn(h, batch)


class Model(torch.nn.Module):
    """A node MLP, one per-graph aggregation, a head: forward(x, edge_index, batch)."""

    def __init__(self, pool):
        super().__init__()
        self.lin = torch.nn.Linear(4, 6)
        self.pool = pool
        self.head = torch.nn.Linear(6, 1)

    def forward(self, x, edge_index, batch):
        h = self.lin(x).tanh() + 0.5
        return self.head(self.pool(h, batch)).squeeze(-1)


@pytest.mark.parametrize("name", sorted(POOLS))
@settings(deadline=None)
@given(seed=st.integers(0, 2**31 - 1), num=st.integers(1, 5), extra_graphs=st.integers(1, 4),
       extra_nodes=st.integers(0, 4), extra_edges=st.integers(0, 3))
def test_gradients_finite_and_equal_to_unpadded(name, seed, num, extra_graphs, extra_nodes,
                                                extra_edges):
    graphs = random_graphs(torch.Generator().manual_seed(seed), num)
    b = Batch.from_data_list(graphs)
    n, e, g = b.num_nodes, b.edge_index.size(1), b.num_graphs
    G = g + extra_graphs
    # room for one padding node per padding slot (what the packer keeps), and at
    # least the two padding nodes every batch keeps; a row more where N, E, G tie
    N, E, G = untied(n + max(G - g, 2) + extra_nodes, e + extra_edges, G)
    budget = Budget(nodes=N, edges=E, graphs=G)
    # (a 3-node graph in the dataset keeps y graph-level when every graph has 1 node)
    anchor = random_graphs(torch.Generator().manual_seed(0), 8)
    anchor = [d for d in anchor if d.num_nodes > 1][:1]
    flat = Collator(graphs + anchor, budget, warn=False).collate_indices(range(num))
    assert bool((flat["ptr"].diff()[g:] > 0).all()), "a padding graph slot is empty"

    torch.manual_seed(0)
    ref = Model(POOLS[name]())
    mine = copy.deepcopy(ref)
    out_ref = ref(b.x, b.edge_index, b.batch)
    F.mse_loss(out_ref, b.y).backward()
    res = ipu_wrap(mine, loss_fn=masked_loss("mse"))(flat)
    res["loss"].backward()

    torch.testing.assert_close(res["output"][flat["graph_mask"]], out_ref, atol=2e-5, rtol=1e-4)
    for (pn, p), (_, q) in zip(ref.named_parameters(), mine.named_parameters()):
        if p.grad is None:
            continue
        assert torch.isfinite(q.grad).all(), f"{name}: {pn} has a non-finite gradient"
        torch.testing.assert_close(q.grad, p.grad, atol=2e-5, rtol=1e-4,
                                   msg=lambda m: f"{name} {pn}: {m}")
