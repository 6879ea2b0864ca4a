"""ipu_wrap on heterogeneous batches from FixedSizeLoader: padding changes nothing."""
import copy

import torch
from hypothesis import given
from hypothesis import strategies as st
from torch_geometric.data import Batch, HeteroData
from torch_geometric.nn import HeteroConv, SAGEConv, global_mean_pool

import graph_adapter as ga

from strategies import ab_hetero_graphs


def _graphs(seed, n=10):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        h = HeteroData()
        na = int(torch.randint(1, 5, (1,), generator=g))
        nb = int(torch.randint(1, 4, (1,), generator=g))
        h["a"].x = torch.randn(na, 3, generator=g)
        h["b"].x = torch.randn(nb, 3, generator=g)
        ea, eb = int(torch.randint(0, 6, (1,), generator=g)), int(torch.randint(0, 5, (1,), generator=g))
        h["a", "r", "b"].edge_index = torch.stack(
            [torch.randint(0, na, (ea,), generator=g), torch.randint(0, nb, (ea,), generator=g)])
        h["b", "s", "a"].edge_index = torch.stack(
            [torch.randint(0, nb, (eb,), generator=g), torch.randint(0, na, (eb,), generator=g)])
        h.y = torch.randn(1, generator=g)
        out.append(h)
    return out


class HeteroNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = HeteroConv({("a", "r", "b"): SAGEConv(3, 8), ("b", "s", "a"): SAGEConv(3, 8)})
        self.lin = torch.nn.Linear(8, 1)
        self.sized = False  # the eager reference passes size= (see the property test)

    def forward(self, data):
        h = self.conv(data.x_dict, data.edge_index_dict)
        # no size=: the static substitution supplies the graph count
        size = data.num_graphs if self.sized else None
        return self.lin(global_mean_pool(h["a"], data["a"].batch, size=size)).squeeze(-1)


def _loss(out, batch):
    return ga.losses.masked_mse_loss(out, batch.y, batch.graph_mask)


@given(data=st.lists(ab_hetero_graphs(), min_size=1, max_size=10),
       graphs_per_batch=st.integers(1, 6))
def test_hetero_padding_invariance_outputs_and_gradients(data, graphs_per_batch):
    """Drawn structure: empty node types, 0-edge types, batches with many empty slots."""
    loader = ga.FixedSizeLoader(data, ga.Budget.fit(data, graphs_per_batch))
    torch.manual_seed(0)
    plain = HeteroNet()
    wrapped = ga.ipu_wrap(copy.deepcopy(plain), loss_fn=_loss)
    # eager PyG pools without a size to batch.max() + 1 rows, which drops a trailing
    # graph without `a` nodes; the reference says the size (the wrapped model does not)
    plain.sized = True
    for flat in loader:
        real = loader.collator.unpad(flat)
        batch = Batch.from_data_list(real)
        out = wrapped(flat)
        ref = plain(batch)
        g = batch.num_graphs
        torch.testing.assert_close(out["output"][:g], ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out["loss"], torch.nn.functional.mse_loss(ref, batch.y), atol=1e-5, rtol=1e-5)
        plain.zero_grad()
        wrapped.zero_grad()
        out["loss"].backward()
        torch.nn.functional.mse_loss(ref, batch.y).backward()
        for (name, p), q in zip(plain.named_parameters(), wrapped.model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, atol=1e-5, rtol=1e-5, msg=name)


def test_hetero_compiles_once_per_epoch():
    data = _graphs(0, n=16)
    loader = ga.FixedSizeLoader(data, ga.Budget.fit(data, 4), shuffle=True)
    torch.manual_seed(0)
    wrapped = ga.ipu_wrap(HeteroNet(), loss_fn=_loss)
    compiled = ga.compile(wrapped, backend="aot_eager")
    for _ in range(2):
        for flat in loader:
            compiled(flat)["loss"].backward()
    assert compiled.compile_count == 1
