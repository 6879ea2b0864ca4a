"""A model that imports nothing of graph_adapter: a child process that cannot
import graph_adapter unpickles it (tests/nn/test_unwrap.py)."""
import torch
from torch import nn


class PlainNet(nn.Module):
    def __init__(self):
        super().__init__()
        from torch_geometric.nn import GIN, LayerNorm

        torch.manual_seed(0)
        self.gin = GIN(3, 8, 2, out_channels=4, norm="batch_norm")
        self.norm = LayerNorm(4, mode="graph")

    def forward(self, x, edge_index, batch):
        from torch_geometric.nn import global_add_pool

        return global_add_pool(self.norm(self.gin(x, edge_index), batch), batch).sum(-1,
                                                                                    keepdim=True)
