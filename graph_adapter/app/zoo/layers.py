"""The zoo's layer table: every class/function of ``torch_geometric.nn.conv / aggr / norm
/ pool / models.__all__`` as a row (:func:`rows`): how to build it (a small default: 8
features, 3 edge features, 3-D positions) and call it (:class:`Row`, :func:`call`), or
why it is not built here. Run by :mod:`graph_adapter.app.zoo.run`, tabled by
:mod:`graph_adapter.app.zoo.table`.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List, Tuple

import torch
from torch import nn

from torch_geometric.nn import aggr as A, conv as C, models as M, norm as Nm, pool as P

from graph_adapter.nn import static

__all__ = ["F", "EDGE_DIM", "BUDGET", "CONV", "AGGR", "NORM", "POOL", "MODEL", "FAMILIES", "Row",
           "rows", "call"]

F, EDGE_DIM = 8, 3
BUDGET = dict(nodes=40, edges=80, graphs=6)


# --------------------------------------------------------------------------
# The rows: name -> (factory, how to call it) or a reason it is not built
# --------------------------------------------------------------------------
def _lin(i: int, o: int) -> nn.Module:
    return nn.Sequential(nn.Linear(i, o), nn.ReLU(), nn.Linear(o, o))


_DEG = torch.tensor([0, 4, 6, 4, 2, 1])
CONV: Dict[str, Any] = {
    "GINConv": lambda: C.GINConv(_lin(F, F)),
    "GINEConv": (lambda: C.GINEConv(_lin(F, F), edge_dim=EDGE_DIM), "ea"),
    "NNConv": (lambda: C.NNConv(F, F, nn.Linear(EDGE_DIM, F * F)), "ea"),
    "CGConv": (lambda: C.CGConv(F, dim=EDGE_DIM), "ea"),
    "GMMConv": (lambda: C.GMMConv(F, F, dim=EDGE_DIM, kernel_size=2), "ea"),
    "PDNConv": (lambda: C.PDNConv(F, F, edge_dim=EDGE_DIM, hidden_channels=8), "ea"),
    "GATConv": lambda: C.GATConv(F, F, heads=2, concat=False),
    "GATv2Conv": lambda: C.GATv2Conv(F, F, heads=2, concat=False),
    "TransformerConv": lambda: C.TransformerConv(F, F, heads=2, concat=False),
    "ChebConv": lambda: C.ChebConv(F, F, K=3),
    "TAGConv": lambda: C.TAGConv(F, F),
    "ARMAConv": lambda: C.ARMAConv(F, F),
    "APPNP": lambda: C.APPNP(K=3, alpha=0.1),
    "AGNNConv": lambda: C.AGNNConv(),
    "GatedGraphConv": lambda: C.GatedGraphConv(F, num_layers=2),
    "SGConv": lambda: C.SGConv(F, F, K=2),
    "SSGConv": lambda: C.SSGConv(F, F, alpha=0.1),
    "EdgeConv": lambda: C.EdgeConv(_lin(2 * F, F)),
    "DynamicEdgeConv": lambda: C.DynamicEdgeConv(_lin(2 * F, F), k=3),
    "GravNetConv": lambda: C.GravNetConv(F, F, space_dimensions=2, propagate_dimensions=4, k=3),
    "PointNetConv": (lambda: C.PointNetConv(_lin(F + 3, F)), "pos"),
    "PPFConv": (lambda: C.PPFConv(_lin(F + 4, F)), "pos_normal"),
    "PointTransformerConv": (lambda: C.PointTransformerConv(F, F), "pos"),
    "PointGNNConv": (lambda: C.PointGNNConv(_lin(3, 3), _lin(F + 3, F), _lin(F, F)), "pos"),
    "FeaStConv": lambda: C.FeaStConv(F, F, heads=2),
    "LEConv": lambda: C.LEConv(F, F),
    "PNAConv": lambda: C.PNAConv(F, F, ["mean", "max", "min", "std"], ["identity", "amplification"], _DEG),
    "GENConv": lambda: C.GENConv(F, F),
    "GCN2Conv": (lambda: C.GCN2Conv(F, alpha=0.1), "x0"),
    "FiLMConv": lambda: C.FiLMConv(F, F),
    "SuperGATConv": lambda: C.SuperGATConv(F, F, heads=2, concat=False),
    "FAConv": (lambda: C.FAConv(F), "x0"),
    "EGConv": lambda: C.EGConv(F, F, num_heads=2, num_bases=2),
    "GeneralConv": lambda: C.GeneralConv(F, F),
    "LGConv": lambda: C.LGConv(),
    "GPSConv": (lambda: C.GPSConv(F, C.GINConv(_lin(F, F)), heads=2), "batch"),
    "AntiSymmetricConv": lambda: C.AntiSymmetricConv(F),
    "DirGNNConv": lambda: C.DirGNNConv(C.GCNConv(F, F)),
    "MixHopConv": lambda: C.MixHopConv(F, F),
    "DNAConv": (lambda: C.DNAConv(F, heads=2), "dna"),
    "HypergraphConv": lambda: C.HypergraphConv(F, F),
    "ClusterGCNConv": lambda: C.ClusterGCNConv(F, F),
    "MFConv": lambda: C.MFConv(F, F),
    "WLConvContinuous": lambda: C.WLConvContinuous(),
    "SimpleConv": lambda: C.SimpleConv(),
    "RGCNConv": (lambda: C.RGCNConv(F, F, num_relations=2), "etype"),
    "FastRGCNConv": (lambda: C.FastRGCNConv(F, F, num_relations=2), "etype"),
    "RGATConv": (lambda: C.RGATConv(F, F, num_relations=2), "etype"),
    "SignedConv": "needs positive and negative edge sets (SignedGCN's input), not one graph",
    "WLConv": "integer colour refinement (torch.unique): a hashing pre-process, not a trainable layer",
    "PANConv": "returns a SparseTensor-based M matrix (torch_sparse SparseTensor)",
    "SplineConv": "needs torch_spline_conv (not installed here)",
    "XConv": "needs torch_cluster's knn inside (its own import; not installed here)",
    "MeshCNNConv": "needs mesh edge adjacency (4 neighbours per edge), not a graph batch",
    "HGTConv": "hetero graphs (x_dict/edge_index_dict): see docs/wrapping.md for hetero",
    "HEATConv": "needs node_type/edge_type vectors of a heterogeneous graph",
    "HeteroConv": "hetero graphs: see docs/wrapping.md",
    "HANConv": "hetero graphs: see docs/wrapping.md",
    "CuGraphSAGEConv": "CUDA only (pylibcugraphops)", "CuGraphGATConv": "CUDA only (pylibcugraphops)",
    "CuGraphRGCNConv": "CUDA only (pylibcugraphops)", "FusedGATConv": "CUDA only (dgNN)",
    "MessagePassing": "the base class",
}
AGGR: Dict[str, Any] = {
    "MultiAggregation": lambda: A.MultiAggregation(["mean", "max", "std"]),
    "PowerMeanAggregation": lambda: A.PowerMeanAggregation(learn=True),
    "SoftmaxAggregation": lambda: A.SoftmaxAggregation(learn=True),
    "QuantileAggregation": lambda: A.QuantileAggregation(0.5),
    "LSTMAggregation": lambda: A.LSTMAggregation(F, F),
    "GRUAggregation": lambda: A.GRUAggregation(F, F),
    "Set2Set": lambda: A.Set2Set(F, processing_steps=2),
    "DegreeScalerAggregation": lambda: A.DegreeScalerAggregation("mean", "amplification", _DEG),
    "SortAggregation": lambda: A.SortAggregation(k=4),
    "GraphMultisetTransformer": lambda: A.GraphMultisetTransformer(F, k=4, heads=2),
    "AttentionalAggregation": lambda: A.AttentionalAggregation(nn.Linear(F, 1)),
    "EquilibriumAggregation": lambda: A.EquilibriumAggregation(F, F, [8]),
    "MLPAggregation": lambda: A.MLPAggregation(F, F, max_num_elements=BUDGET["nodes"], num_layers=1),
    "DeepSetsAggregation": lambda: A.DeepSetsAggregation(nn.Linear(F, F), nn.Linear(F, F)),
    "SetTransformerAggregation": lambda: A.SetTransformerAggregation(F, heads=2),
    "LCMAggregation": lambda: A.LCMAggregation(F, F),
    "PatchTransformerAggregation": lambda: A.PatchTransformerAggregation(
        F, F, patch_size=2, hidden_channels=F, heads=2),
    "Aggregation": "the base class",
}
NORM: Dict[str, Any] = {
    "BatchNorm": lambda: Nm.BatchNorm(F), "InstanceNorm": lambda: Nm.InstanceNorm(F),
    "LayerNorm": lambda: Nm.LayerNorm(F), "GraphNorm": lambda: Nm.GraphNorm(F),
    "DiffGroupNorm": lambda: Nm.DiffGroupNorm(F, 2),
    # MessageNorm(x, msg) rescales a message by the node's norm: msg here is a
    # per-row function of x (no mixing of padding rows into real ones)
    "MessageNorm": (lambda: Nm.MessageNorm(learn_scale=True), "msg"), "HeteroBatchNorm": "hetero (per-type statistics)",
    "HeteroLayerNorm": "hetero (per-type statistics)",
}
POOL: Dict[str, Any] = {
    "global_add_pool": lambda: _Fn(P.global_add_pool), "global_mean_pool": lambda: _Fn(P.global_mean_pool),
    "global_max_pool": lambda: _Fn(P.global_max_pool),
    "TopKPooling": (lambda: P.TopKPooling(F, ratio=0.5), "select"),
    "SAGPooling": (lambda: P.SAGPooling(F, ratio=0.5), "select"),
    "ASAPooling": (lambda: P.ASAPooling(F, ratio=0.5), "select"),
    "PANPooling": "takes PANConv's SparseTensor M matrix",
    "EdgePooling": (lambda: P.EdgePooling(F), "select"),
    "ClusterPooling": (lambda: P.ClusterPooling(F), "select"),
    "MemPooling": (lambda: P.MemPooling(F, F, heads=2, num_clusters=2), "mem"),
    "knn": "static inside a wrapped forward: tests/nn/test_geometry.py",
    "knn_graph": "static inside a wrapped forward: tests/nn/test_geometry.py",
    "radius": "static inside a wrapped forward: tests/nn/test_geometry.py",
    "radius_graph": "static inside a wrapped forward: tests/nn/test_geometry.py",
}
for _n in ("KNNIndex", "L2KNNIndex", "MIPSKNNIndex", "ApproxL2KNNIndex", "ApproxMIPSKNNIndex",
           "approx_knn", "approx_knn_graph"):
    POOL[_n] = "faiss index (host-side search), not a forward op"
for _n in ("max_pool", "avg_pool", "max_pool_x", "avg_pool_x", "max_pool_neighbor_x",
           "avg_pool_neighbor_x", "graclus", "voxel_grid", "fps", "nearest"):
    POOL[_n] = "cluster assignment by torch_cluster (not installed here); data-dependent cluster count"
MODEL: Dict[str, Any] = {
    "MLP": (lambda: M.MLP([F, 16, F]), "x"),
    "GCN": lambda: M.GCN(F, 16, 2), "GraphSAGE": lambda: M.GraphSAGE(F, 16, 2),
    "GIN": lambda: M.GIN(F, 16, 2, norm="batch_norm"), "GAT": lambda: M.GAT(F, 16, 2, heads=2),
    "PNA": lambda: M.PNA(F, 16, 2, aggregators=["mean", "max"], scalers=["identity"], deg=_DEG),
    "EdgeCNN": lambda: M.EdgeCNN(F, 16, 2),
    "AttentiveFP": (lambda: M.AttentiveFP(F, 16, 1, EDGE_DIM, num_layers=2, num_timesteps=2), "afp"),
    "SchNet": (lambda: _host_reference(M.SchNet(hidden_channels=16, num_filters=16,
                                                num_interactions=2, num_gaussians=10,
                                                cutoff=2.5, max_num_neighbors=8)), "schnet"),
    "DeepGCNLayer": lambda: M.DeepGCNLayer(C.GENConv(F, F), nn.LayerNorm(F), nn.ReLU(), block="res+"),
    "GraphUNet": "TopKPooling inside: the pooled graph's size is data-dependent",
    "DimeNet": "triplets through torch_sparse SparseTensor (data-dependent count)",
    "DimeNetPlusPlus": "triplets through torch_sparse SparseTensor (data-dependent count)",
    "ViSNet": "builds its graph with radius_graph then SparseTensor ops (not covered)",
    "GNNFF": "triplets through torch_sparse SparseTensor (data-dependent count)",
}
for _n in ("JumpingKnowledge", "HeteroJumpingKnowledge", "MetaLayer", "InnerProductDecoder",
           "to_captum_model", "to_captum_input", "captum_output_to_dicts", "MaskLabel",
           "GroupAddRev"):
    MODEL.setdefault(_n, "a building block or utility, not a model over one graph batch")
for _n in ("Node2Vec", "MetaPath2Vec", "DeepGraphInfomax", "GAE", "VGAE", "ARGA", "ARGVA",
           "SignedGCN", "RENet", "TGNMemory", "LabelPropagation", "CorrectAndSmooth", "RECT_L",
           "LINKX", "LightGCN", "GPSE", "GPSENodeEncoder", "LPFormer", "SGFormer", "Polynormer",
           "ARLinkPredictor", "PMLP", "NeuralFingerprint"):
    MODEL.setdefault(_n, "full-graph / link-level / sampling model, not a mini-batch graph model")

FAMILIES = [("conv", C, CONV), ("aggr", A, AGGR), ("norm", Nm, NORM), ("pool", P, POOL),
            ("model", M, MODEL)]


class _RadiusGraph(nn.Module):
    """SchNet's interaction graph: the static one inside a wrapped forward, else
    computed on the host in plain torch (no torch_cluster here for the reference)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, pos, batch):
        if static.current_frame() is not None:
            return self.inner(pos, batch)
        d = torch.cdist(pos, pos)
        near = (d <= self.inner.cutoff) & (batch.view(-1, 1) == batch.view(1, -1))
        near &= ~torch.eye(pos.size(0), dtype=torch.bool)
        center, nb = near.nonzero().t()
        ei = torch.stack([nb, center])
        return ei, (pos[ei[0]] - pos[ei[1]]).norm(dim=-1)


def _host_reference(model: nn.Module) -> nn.Module:
    model.interaction_graph = _RadiusGraph(model.interaction_graph)
    return model


class _Fn(nn.Module):
    def __init__(self, fn: Callable):
        super().__init__()
        self.fn = fn

    def forward(self, x, batch):
        return self.fn(x, batch)


class Row(nn.Module):
    """Calls ``layer`` the way its family and style need; forward(x, edge_index, ...)."""

    def __init__(self, family: str, layer: nn.Module, style: str):
        super().__init__()
        self.family, self.layer, self.style = family, layer, style

    def forward(self, x, edge_index, edge_attr, pos, z, batch):
        f, s, layer = self.family, self.style, self.layer
        if f == "aggr":
            return layer(x, batch)
        if s == "msg":
            return layer(x, torch.tanh(x).flip(-1))
        if f == "norm":
            params = inspect.signature(layer.forward).parameters
            return layer(x, batch) if "batch" in params else layer(x)
        if f == "pool" and s == "":
            return layer(x, batch)
        if s == "select":
            return layer(x, edge_index, batch=batch)[0]
        if s == "mem":
            return layer(x, batch)[0]
        if s == "ea":
            return layer(x, edge_index, edge_attr)
        if s == "pos":
            return layer(x, pos, edge_index)
        if s == "pos_normal":
            return layer(x, pos, pos, edge_index)
        if s == "batch":
            return layer(x, edge_index, batch)
        if s == "x0":
            return layer(x, x, edge_index)
        if s == "dna":
            return layer(x.unsqueeze(1).repeat(1, 2, 1), edge_index)
        if s == "etype":
            return layer(x, edge_index, edge_attr[:, 0].gt(0).long())
        if s == "x":
            return layer(x)
        if s == "afp":
            return layer(x, edge_index, edge_attr, batch)
        if s == "schnet":
            return layer(z, pos, batch)
        return layer(x, edge_index)


def rows() -> List[Tuple[str, str, Any]]:
    """Every (family, name, entry) PyG ships; names without an entry try ``cls(F, F)``."""
    out = []
    for family, module, table in FAMILIES:
        for name in module.__all__:
            entry = table.get(name)
            if entry is None:
                cls = getattr(module, name)
                entry = (lambda c=cls: _default(c))
            out.append((family, name, entry))
    return out


def _default(cls):
    try:
        return cls(F, F)
    except TypeError:
        return cls()


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def call(model: nn.Module, data) -> torch.Tensor:
    return _first(model(data.x, data.edge_index, data.edge_attr, data.pos, data.z, data.batch))
