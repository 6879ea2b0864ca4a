"""The demo's models: a stock PyG GNN between atom/bond embeddings and a regression head.

Every model is a stock PyG network between an embedding of the categorical
features ``torch_geometric.utils.from_smiles`` produces (9 atom columns, 3
bond columns) and a small MLP head; the adapter runs it unmodified.
"""
from __future__ import annotations

from typing import List

import torch
from torch import Tensor, nn

__all__ = ["MODELS", "AtomBondEncoder", "MolRegressor", "build_model"]

#: ``--model`` choices: name -> description.
MODELS = {
    "gine": "GINEConv x L (edge features), BatchNorm, global_add_pool",
    "gin": "torch_geometric.nn.models.GIN (no edge features), global_add_pool",
    "gat": "torch_geometric.nn.models.GAT (GATv2, edge features), global_mean_pool",
    "attentivefp": "torch_geometric.nn.models.AttentiveFP (edge features, own readout)",
}


class AtomBondEncoder(nn.Module):
    """Sum of one embedding per categorical column (``from_smiles``'s atom or bond features)."""

    def __init__(self, vocab_sizes: List[int], dim: int):
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(n, dim) for n in vocab_sizes)

    def forward(self, codes: Tensor) -> Tensor:
        out = self.embeddings[0](codes[:, 0])
        for i in range(1, len(self.embeddings)):
            out = out + self.embeddings[i](codes[:, i])
        return out


class _GINE(nn.Module):
    """A stack of stock ``GINEConv`` layers with BatchNorm and ReLU."""

    def __init__(self, hidden: int, layers: int):
        super().__init__()
        from torch_geometric.nn import GINEConv
        from torch_geometric.nn.models import MLP

        self.convs = nn.ModuleList(
            GINEConv(MLP([hidden, hidden, hidden], norm=None), edge_dim=hidden)
            for _ in range(layers))
        self.norms = nn.ModuleList(nn.BatchNorm1d(hidden) for _ in range(layers))

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor) -> Tensor:
        for conv, norm in zip(self.convs, self.norms):
            x = torch.relu(norm(conv(x, edge_index, edge_attr)))
        return x


class MolRegressor(nn.Module):
    """Atom/bond embeddings -> a stock PyG GNN -> pooling -> MLP head, in target units.

    ``forward(x, edge_index, edge_attr, batch)`` is the usual PyG signature:
    ``ipu_wrap`` binds the flat dict's keys to it by name. The head's output
    is scaled by the training targets' standard deviation and shifted by
    their mean (fixed buffers), so the model predicts TPSA directly.
    """

    def __init__(self, name: str = "gine", hidden: int = 128, layers: int = 4,
                 y_mean: float = 0.0, y_std: float = 1.0):
        super().__init__()
        from torch_geometric.nn import models as pygm
        from torch_geometric.utils.smiles import e_map, x_map

        if name not in MODELS:
            raise ValueError(f"model={name!r}; choose one of {sorted(MODELS)}")
        self.name = name
        self.atom = AtomBondEncoder([len(v) for v in x_map.values()], hidden)
        self.bond = AtomBondEncoder([len(v) for v in e_map.values()], hidden)
        self.pool = None
        if name == "gine":
            self.gnn = _GINE(hidden, layers)
            self.pool = "add"
        elif name == "gin":
            self.gnn = pygm.GIN(hidden, hidden, layers, norm="batch_norm")
            self.pool = "add"
        elif name == "gat":
            self.gnn = pygm.GAT(hidden, hidden, layers, v2=True, heads=4, edge_dim=hidden)
            self.pool = "mean"
        else:  # attentivefp
            self.gnn = pygm.AttentiveFP(hidden, hidden, hidden, edge_dim=hidden,
                                        num_layers=layers, num_timesteps=2)
        self.head = pygm.MLP([hidden, hidden, 1], norm=None)
        # shape [1], not 0-dim: with 0-dim buffers Dynamo read them as Python
        # floats (`.item()`) and then traced this whole model a second time in
        # eval mode (TensorifyScalarRestartAnalysis: two compiles for one graph)
        self.register_buffer("y_mean", torch.tensor([float(y_mean)]))
        self.register_buffer("y_std", torch.tensor([float(y_std)]))

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, batch: Tensor) -> Tensor:
        from torch_geometric.nn import global_add_pool, global_mean_pool

        h = self.atom(x)
        e = self.bond(edge_attr)
        if self.name == "gine":
            h = self.gnn(h, edge_index, e)
        elif self.name == "gin":
            h = self.gnn(h, edge_index)
        elif self.name == "gat":
            h = self.gnn(h, edge_index, edge_attr=e)
        else:
            h = self.gnn(h, edge_index, e, batch)  # AttentiveFP pools itself
        if self.pool == "add":
            h = global_add_pool(h, batch)
        elif self.pool == "mean":
            h = global_mean_pool(h, batch)
        return self.head(h) * self.y_std + self.y_mean


def build_model(name: str = "gine", hidden: int = 128, layers: int = 4, y_mean: float = 0.0,
                y_std: float = 1.0) -> MolRegressor:
    """The demo's model (see :data:`MODELS`)."""
    return MolRegressor(name, hidden=hidden, layers=layers, y_mean=y_mean, y_std=y_std)
