"""A stand-in for graphium 2.4.7's two methods that test ``torch.prod(torch.as_tensor(...))``.

The tested lines are written exactly as graphium ships them
(``graphium/nn/base_layers.py`` ``FCLayer.forward``,
``graphium/nn/architectures/global_architectures.py``
``FullGraphMultiTaskNetwork.forward``); the rest is a small GINE network.
graphium itself is not installed in the main suite (its own venv: ``.ci/graphium``).
"""
import torch
from torch import nn
from torch_geometric.nn import GINEConv, global_add_pool


class FCLayer(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.linear = nn.Linear(in_dim, out_dim)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if torch.prod(torch.as_tensor(h.shape[:-1])) == 0:
            h = torch.zeros(list(h.shape[:-1]) + [self.linear.out_features], device=h.device, dtype=h.dtype)
            return h
        h = self.linear(h)
        return torch.relu(h)


class FCLayerChild(FCLayer):
    """A zero-argument ``super()`` in a patched method keeps working."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if torch.prod(torch.as_tensor(h.shape[:-1])) == 0:
            return super().forward(h)
        return super().forward(h) + 0


class FullGraphMultiTaskNetwork(nn.Module):
    def __init__(self, node_in=4, edge_in=3, hidden=8):
        super().__init__()
        torch.manual_seed(0)
        self.pre_nn = FCLayerChild(node_in, hidden)
        self.pre_nn_edges = FCLayer(edge_in, hidden)
        self.conv = GINEConv(nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU()), edge_dim=hidden)
        self.head = nn.Linear(hidden, 1)

    def forward(self, g):
        h = self.pre_nn.forward(g.x)
        if self.pre_nn_edges is not None:
            e = g.edge_attr
            if torch.prod(torch.as_tensor(e.shape[:-1])) == 0:
                e = torch.zeros(
                    list(e.shape[:-1]) + [self.pre_nn_edges.out_dim], device=e.device, dtype=e.dtype
                )
            else:
                e = self.pre_nn_edges.forward(e)
        h = self.conv(h, g.edge_index, e)
        return self.head(global_add_pool(h, g.batch, size=g.num_graphs)).squeeze(-1)


TARGETS = ((__name__, "FCLayer.forward"), (__name__, "FCLayerChild.forward"),
           (__name__, "FullGraphMultiTaskNetwork.forward"))
