"""PyG's trim_to_layer inside a wrapped, compiled forward on per-hop batches.

A 3-layer GraphSAGE (PyG's ``BasicGNN`` with ``num_sampled_nodes_per_hop=``)
compiled with ``fullgraph=True`` compiles once over every batch of a
``per_hop_budget`` loader, with and without trimming, in both input modes, and
its seed rows equal eager PyG's on the unpadded batch (PyG's layout, the real
per-hop counts); GCN and GAT too (their self-loop ops over trimmed rows); a
training step (autograd traced) too, loss and gradients."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.nn import GAT, GCN, GraphSAGE

import graph_adapter as ga
from graph_adapter.format import HOP_EDGES, HOP_NODES, SEED_MASK, unpad_batch
from graph_adapter.nn.losses import masked_cross_entropy
from graph_adapter.sampling import FixedSizeNeighborLoader

from _compile_count import compile_counted

FEAT, CLASSES = 6, 3
ATOL = 1e-5


def _data(n: int = 64, m: int = 320, seed: int = 0) -> Data:
    g = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(n, FEAT, generator=g), y=torch.randint(0, CLASSES, (n,), generator=g),
                edge_index=torch.randint(0, n, (2, m), generator=g))


def _loader(**kw) -> FixedSizeNeighborLoader:
    return FixedSizeNeighborLoader(_data(), [4, 3, 2], batch_size=8, shuffle=True,
                                   per_hop_budget=True, success_ratio=0.8, **kw)


def _sage() -> GraphSAGE:
    torch.manual_seed(0)
    return GraphSAGE(FEAT, 16, num_layers=3, out_channels=CLASSES)


class SeedNet(torch.nn.Module):
    """The user's code as with PyG's NeighborLoader: trim to the layer, keep the seeds' rows."""

    def __init__(self, trim: bool):
        super().__init__()
        self.gnn, self.trim = _sage(), trim

    def forward(self, data):
        if self.trim:
            out = self.gnn(data.x, data.edge_index,
                           num_sampled_nodes_per_hop=data.num_sampled_nodes,
                           num_sampled_edges_per_hop=data.num_sampled_edges)
        else:
            out = self.gnn(data.x, data.edge_index)
        return out[:data.num_sampled_nodes[0]]  # the seeds' block (PyG: [:batch_size])


def _batches(loader, epochs: int = 1):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*were trimmed")  # counted in loader.stats
        for _ in range(epochs):
            yield from loader


# untrimmed compiled SAGE on sampled batches is the plain path's (tests/sampling, extended here)
@pytest.mark.parametrize("trim", [pytest.param(False, marks=pytest.mark.extended), True])
def test_data_mode_compiles_once_and_gives_eager_pygs_seed_rows(trim):
    net = SeedNet(trim).eval()
    compiled, counter = compile_counted(ga.ipu_wrap(net, inputs="data"))
    n = 0
    with torch.no_grad():
        for flat in _batches(_loader()):
            out = compiled(flat)["output"]
            (d,) = unpad_batch(flat)
            seeds = int(flat[SEED_MASK].sum())
            assert torch.allclose(out[:seeds], net(d)[:seeds], atol=ATOL)  # eager PyG, real counts
            n += 1
    assert n > 4 and counter.count == 1  # every batch, one compile


# GCN / GAT: their self-loop ops run static over the trimmed rows (loops moved to
# padding rows of the seeds' block, which no layer cuts; graph_adapter/nn/static.py)
@pytest.mark.parametrize("cls", [GraphSAGE, GCN, pytest.param(GAT, marks=pytest.mark.extended)])
def test_tensors_mode_binds_the_per_hop_lists_and_trims(cls):
    torch.manual_seed(0)
    sage = cls(FEAT, 16, num_layers=3, out_channels=CLASSES).eval()
    bind = {"num_sampled_nodes_per_hop": HOP_NODES, "num_sampled_edges_per_hop": HOP_EDGES}
    compiled, counter = compile_counted(ga.ipu_wrap(sage, inputs="tensors", bind=bind))
    loader = _loader()
    blocks = list(loader.hop_budget.nodes)
    with torch.no_grad():
        for flat in _batches(loader):
            out = compiled(flat)["output"]
            # three layers over three hops: the rows of blocks 0 and 1 are left
            assert out.shape[0] == blocks[0] + blocks[1]
            (d,) = unpad_batch(flat)
            ref = sage(d.x, d.edge_index, num_sampled_nodes_per_hop=d.num_sampled_nodes,
                       num_sampled_edges_per_hop=d.num_sampled_edges)
            seeds = int(flat[SEED_MASK].sum())
            assert torch.allclose(out[:seeds], ref[:seeds], atol=ATOL)
            if cls is GraphSAGE:  # trimming changes no seed row (GCN's degrees: it does)
                untrimmed = sage(d.x, d.edge_index)
                assert torch.allclose(out[:seeds], untrimmed[:seeds], atol=ATOL)
    assert counter.count == 1


def _loss(out, batch):
    b = batch.num_sampled_nodes[0]
    return masked_cross_entropy(out, batch.y[:b], batch.seed_mask[:b])


def test_a_training_step_compiles_once_with_eager_pygs_loss_and_gradients():
    net = SeedNet(trim=True).train()
    ref = copy.deepcopy(net)
    compiled, counter = compile_counted(ga.ipu_wrap(net, inputs="data", loss_fn=_loss), aot=True)
    for i, flat in enumerate(_batches(_loader(), epochs=1)):
        if i == 4:
            break
        net.zero_grad()
        ref.zero_grad()
        loss = compiled(flat)["loss"]
        loss.backward()
        (d,) = unpad_batch(flat)
        seeds = int(flat[SEED_MASK].sum())
        want = torch.nn.functional.cross_entropy(ref(d)[:seeds], d.y[:seeds])
        want.backward()
        assert torch.allclose(loss, want, atol=ATOL)
        for (name, p), q in zip(net.named_parameters(), ref.parameters()):
            assert torch.allclose(p.grad, q.grad, atol=ATOL), name
    assert counter.count == 1


def test_eager_trim_of_the_wrapper_takes_the_padded_path_on_per_hop_batches():
    """``ipu_wrap(trim=True)`` slices real-row prefixes; per-hop batches have none (their
    masks are not prefixes, their per-hop keys have no level): every call runs padded,
    with the results of the plain wrapper."""
    net = SeedNet(trim=True).eval()
    plain, trimmed = ga.ipu_wrap(net, inputs="data"), ga.ipu_wrap(net, inputs="data", trim=True)
    with torch.no_grad():
        for flat in _batches(_loader()):
            assert torch.equal(trimmed(flat)["output"], plain(flat)["output"])
    assert trimmed.trim_stats["trimmed"] == 0 and trimmed.trim_stats["padded"] > 4


def test_batch_norm_on_trimmed_rows_pools_the_real_rows_only():
    """A masked BatchNorm on a trimmed ``x`` reads the node mask's prefix of the kept
    blocks: outputs and running statistics as eager PyG's on the unpadded batch."""
    torch.manual_seed(0)
    sage = GraphSAGE(FEAT, 16, num_layers=3, out_channels=CLASSES, norm="batch_norm").train()
    ref = copy.deepcopy(sage)
    bind = {"num_sampled_nodes_per_hop": HOP_NODES, "num_sampled_edges_per_hop": HOP_EDGES}
    compiled, counter = compile_counted(ga.ipu_wrap(sage, inputs="tensors", bind=bind))
    with torch.no_grad():
        for i, flat in enumerate(_batches(_loader())):
            if i == 3:
                break
            out = compiled(flat)["output"]
            (d,) = unpad_batch(flat)
            want = ref(d.x, d.edge_index, num_sampled_nodes_per_hop=d.num_sampled_nodes,
                       num_sampled_edges_per_hop=d.num_sampled_edges)
            seeds = int(flat[SEED_MASK].sum())
            assert torch.allclose(out[:seeds], want[:seeds], atol=ATOL)
    for (name, a), b in zip(sage.named_buffers(), ref.buffers()):
        assert torch.allclose(a.float(), b.float(), atol=ATOL), name
    assert counter.count == 1
