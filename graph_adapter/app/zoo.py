"""The PyG zoo through graph_adapter: one row per conv, model, norm, pool and aggregation.

``python -m graph_adapter.app.zoo [--write docs/zoo.md] [--only NAME ...]``

For every class/function in ``torch_geometric.nn.conv / aggr / norm / pool /
models.__all__`` this builds the layer (a small default: 8 features, 3 edge
features, 3-D positions) and, on padded batches of one budget:

* **eager**: ``ipu_wrap(layer)(padded)`` equals ``layer(unpadded)`` on real rows (eval);
* **compile**: ``torch.compile(fullgraph=True, backend="aot_eager")`` compiles
  once in train() and once in eval() over two batches of the budget;
* **export**: ``torch.export.export`` (non-strict) of the wrapped layer;
* **check**: :func:`graph_adapter.check` finds nothing poptorch would reject.

A built row with a red cell gets a note from :data:`WHY_NOT`: ``why:`` the
causes, each measured by a probe on the same batches (a probe that does not
reproduce its cause makes the note ``unexplained: ...``, which
``tests/test_zoo.py`` rejects), ``Instead:`` what a user does, and after
``->`` the results of that workaround, run like a row. A row that cannot be
built here (needs an optional package, a hetero graph, a sparse adjacency,
...) says why. The table between the markers of ``docs/zoo.md`` is
rewritten by ``--write`` (the whole table: not with ``--only``, which runs
and prints a few rows while developing).
"""
from __future__ import annotations

import argparse
import copy
import inspect
import os
import re
import sys
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import torch
from torch import nn

from torch_geometric.data import Batch, Data
from torch_geometric.nn import aggr as A, conv as C, models as M, norm as Nm, pool as P

from graph_adapter import check, ipu_wrap, static

F, EDGE_DIM = 8, 3
BUDGET = dict(nodes=40, edges=80, graphs=6)
BEGIN, END = "<!-- zoo:begin -->", "<!-- zoo:end -->"


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------
def _graphs(seed: int, num: int = 4) -> List[Data]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(num):
        n = int(torch.randint(2, 7, (1,), generator=gen))
        m = int(torch.randint(1, 2 * n + 1, (1,), generator=gen))
        ei = torch.randint(0, n, (2, m), generator=gen)
        out.append(Data(x=torch.randn(n, F, generator=gen), edge_index=ei,
                        edge_attr=torch.randn(m, EDGE_DIM, generator=gen),
                        pos=torch.randn(n, 3, generator=gen),
                        z=torch.randint(1, 9, (n,), generator=gen), y=torch.randn(1, generator=gen)))
    return out


def _pad(graphs: List[Data]) -> Tuple[Batch, Dict[str, torch.Tensor]]:
    """The batch and its padded flat dict (docs/dev/FORMAT.md), budget :data:`BUDGET`."""
    b = Batch.from_data_list(graphs)
    N, E, G = BUDGET["nodes"], BUDGET["edges"], BUDGET["graphs"]
    n, e, g = b.num_nodes, b.edge_index.size(1), b.num_graphs
    flat = {
        "x": torch.cat([b.x, b.x.new_zeros(N - n, F)]),
        "pos": torch.cat([b.pos, b.pos.new_zeros(N - n, 3)]),
        "z": torch.cat([b.z, b.z.new_ones(N - n)]),
        "edge_index": torch.cat([b.edge_index, torch.full((2, E - e), N - 1)], dim=1),
        "edge_attr": torch.cat([b.edge_attr, b.edge_attr.new_zeros(E - e, EDGE_DIM)]),
        "y": torch.cat([b.y, b.y.new_full((G - g,), float("nan"))]),
        "batch": torch.cat([b.batch, torch.full((N - n,), G - 1)]),
        "ptr": torch.cat([b.ptr, torch.full((G - g - 1,), n), torch.tensor([N])]),
        "node_mask": torch.arange(N) < n,
        "edge_mask": torch.arange(E) < e,
        "graph_mask": torch.arange(G) < g,
    }
    return b, flat


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
    "knn": "static inside a wrapped forward: tests/test_geometry.py",
    "knn_graph": "static inside a wrapped forward: tests/test_geometry.py",
    "radius": "static inside a wrapped forward: tests/test_geometry.py",
    "radius_graph": "static inside a wrapped forward: tests/test_geometry.py",
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


# --------------------------------------------------------------------------
# Rows that stay red: the cause as measured, and what a user does instead
# --------------------------------------------------------------------------
CELLS = ("eager", "compile", "export", "check")
#: A fixed bound on one graph's nodes (>= every graph of :func:`_graphs`): the
#: dense width the width-dependent aggregations get in their workaround.
WIDTH = 8


class _Width(nn.Module):
    """An aggregation called with a fixed dense width (``max_num_elements``)."""

    def __init__(self, aggr: nn.Module):
        super().__init__()
        self.aggr = aggr

    def forward(self, x, index):
        return self.aggr(x, index, max_num_elements=WIDTH)


class _FixedNegatives(nn.Module):
    """SuperGATConv trained on a given edge set: every edge (``edge_sample_ratio=1``)
    and ``E`` negatives passed in (here the reversed edges, standing in for a
    fixed number of negatives sampled on the host and padded, docs/migrating.md)."""

    def __init__(self, _: nn.Module):
        super().__init__()
        self.conv = C.SuperGATConv(F, F, heads=2, concat=False, edge_sample_ratio=1.0)

    def forward(self, x, edge_index):
        return self.conv(x, edge_index, neg_edge_index=edge_index.flip(0))


Probe = Callable[[nn.Module, Tuple[Batch, Batch], Dict[str, str]], Optional[str]]


@torch.no_grad()
def _width(model: nn.Module, batches, res) -> Optional[str]:
    """The aggregation's result changes with the dense width alone."""
    b = batches[0]
    layer = model.layer.eval()
    w = int(torch.bincount(b.batch).max())
    at_n = BUDGET["nodes"]
    d = (layer(b.x, b.batch) - layer(b.x, b.batch, max_num_elements=at_n)).abs().max().item()
    if d < 1e-6:
        return None
    return (f"each graph's result depends on the dense batch's width (PyG: the largest graph "
            f"of the batch, here {w}; the same graphs at width {at_n}, the node budget, "
            f"differ by {d:.2g}); a padded batch cannot know its largest graph statically")


def _rnn(model, batches, res) -> Optional[str]:
    """The compile cell is Dynamo refusing an RNN module."""
    if "Attempted to wrap RNN, GRU, or LSTM" not in res["compile"]:
        return None
    return "Dynamo refuses torch.nn.LSTM/GRU modules by default (config.allow_rnn=False)"


@torch.no_grad()
def _slots(model, batches, res) -> Optional[str]:
    """The aggregation's result on real graphs changes with one empty graph slot more."""
    b = batches[0]
    layer = model.layer.eval()
    g = b.num_graphs
    torch.manual_seed(0)
    a = layer(b.x, b.batch, dim_size=g)
    torch.manual_seed(0)
    c = layer(b.x, b.batch, dim_size=g + 1)[:g]
    d = (a - c).abs().max().item()
    if d < 1e-6:
        return None
    return (f"each graph's result depends on how many graph slots the batch has (one empty "
            f"slot more changes the real graphs' results by {d:.2g}: its regulariser averages "
            f"over all slots), so padding graph slots changes real results")


def _inner_grad(model, batches, res) -> Optional[str]:
    if "requires_grad=True" not in res["compile"]:
        return None
    return ("its forward optimises its output with torch.autograd.grad from a tensor it "
            "creates with requires_grad=True, which Dynamo refuses")


@torch.no_grad()
def _pooled_rows(model, batches, res) -> Optional[str]:
    """The pooled graph's node count comes from the data, not the budget."""
    seen = []
    for b in batches:
        rows = _call(model.eval(), b).size(0)
        if rows in (b.num_nodes, b.num_graphs):
            return None
        seen.append(f"{b.num_nodes} nodes -> {rows}")
    return (f"returns a pooled graph whose node count comes from the data ({', '.join(seen)}), "
            f"not from the budget: its output, edges and batch vector have no static shape")


def _sampling(model, batches, res) -> Optional[str]:
    """SuperGATConv's training-time edge sampling draws a random edge set per call."""
    b = batches[0]
    layer = model.layer.train()
    drawn = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        layer(b.x, b.edge_index)
        drawn.append(layer.att_x.detach().clone())
    if drawn[0].shape == drawn[1].shape and torch.equal(drawn[0], drawn[1]):
        return None
    k0, k1 = drawn[0].size(0), drawn[1].size(0)
    drew = f"{k0} and {k1} edges" if k0 != k1 else f"two different sets of {k0} edges"
    return (f"in train() its attention loss samples edges (dropout_edge, then "
            f"negative_sampling by rejection on the host): two seeds on one batch drew {drew}")


class Try(NamedTuple):
    """A workaround, run like a row: the layer as it uses it, and how it is compiled."""

    label: str  # e.g. "for inference (eval(), torch.no_grad())"
    variant: Callable[[nn.Module], nn.Module] = lambda m: m
    config: Tuple[Tuple[str, Any], ...] = ()  # torch._dynamo.config for the run
    modes: Tuple[bool, ...] = (True, False)  # train() modes compiled
    grad: bool = True  # compiled with gradients enabled
    cells: Tuple[str, ...] = ("eager", "compile", "export", "check")  # reported
    mkldnn: bool = True  # False: run under torch.backends.mkldnn.flags(enabled=False)


class WhyNot(NamedTuple):
    """Why a built row stays red, and what a user does instead (run by the script too)."""

    probes: Tuple[Probe, ...]  # each measures one stated cause, or returns None
    instead: str
    tries: Tuple[Try, ...] = ()


_WIDTH_FIX = (f"call it with a fixed max_num_elements= (a bound on any graph's nodes, here "
              f"{WIDTH}) in training and inference alike")
_POOL_FIX = ("pool to a fixed size inside the wrapped forward (MemPooling, SortAggregation: "
             "green rows here), or run this pooling and the layers after it outside ipu_wrap "
             "(eager, unpadded)")
_RNN = (("allow_rnn", True),)
#: nn.LSTM with allow_rnn: inference compiles; training on CPU only without
#: oneDNN's LSTM kernel (AOTAutograd cannot trace it): all three measured
_LSTM_TRIES = lambda v: (  # noqa: E731
    Try("for inference (eval(), torch.no_grad())", v, _RNN, (False,), grad=False),
    Try("for training", v, _RNN, (True,), cells=("compile",)),
    Try("for training without oneDNN", v, _RNN, (True,), cells=("compile",), mkldnn=False))
_LSTM_FIX = ("set torch._dynamo.config.allow_rnn = True and, to compile training on CPU, "
             "run it under torch.backends.mkldnn.flags(enabled=False) (AOTAutograd does not "
             "trace oneDNN's LSTM kernel)")
WHY_NOT: Dict[str, WhyNot] = {
    "LSTMAggregation": WhyNot((_width, _rnn), _WIDTH_FIX + "; " + _LSTM_FIX,
                              _LSTM_TRIES(_Width)),
    "GRUAggregation": WhyNot((_width, _rnn), _WIDTH_FIX + ", and set "
                             "torch._dynamo.config.allow_rnn = True", (Try("", _Width, _RNN),)),
    "LCMAggregation": WhyNot((_width,), _WIDTH_FIX, (Try("", _Width),)),
    "PatchTransformerAggregation": WhyNot((_width,), _WIDTH_FIX, (Try("", _Width),)),
    "Set2Set": WhyNot((_rnn,), _LSTM_FIX, _LSTM_TRIES(lambda m: m)),
    "EquilibriumAggregation": WhyNot((_slots, _inner_grad), "none that keeps its results under "
                                     "padding: run it on unpadded batches, outside ipu_wrap"),
    "SuperGATConv": WhyNot((_sampling,), "compile and export it for inference; to train it, "
                           "sample a fixed number of negative edges per batch on the host, pass "
                           "them as neg_edge_index and build it with edge_sample_ratio=1.0 "
                           "(docs/migrating.md)",
                           (Try("for inference (eval())", modes=(False,)),
                            Try("for training with fixed negatives", _FixedNegatives,
                                modes=(True,), cells=("compile",)))),
    "TopKPooling": WhyNot((_pooled_rows,), _POOL_FIX),
    "SAGPooling": WhyNot((_pooled_rows,), _POOL_FIX),
    "ASAPooling": WhyNot((_pooled_rows,), _POOL_FIX),
    "EdgePooling": WhyNot((_pooled_rows,), _POOL_FIX),
    "ClusterPooling": WhyNot((_pooled_rows,), _POOL_FIX),
}


def _summary(res: Dict[str, str], t: Try) -> str:
    if res["note"]:
        return res["note"]
    if all(res[k] == "ok" for k in t.cells):
        return "all four green" if len(t.cells) == 4 else " ".join(f"{k} ✅" for k in t.cells)
    return ", ".join(f"{k} " + ("✅" if res[k] == "ok" else f"❌ {res[k][:70]}") for k in t.cells)


def _why_not(family: str, name: str, factory: Callable, style: str, model: nn.Module,
             batches: Tuple[Batch, Batch], res: Dict[str, str]) -> str:
    """The note of a red row: ``why: <measured causes>. Instead: <workaround>: <its cells>``."""
    entry = WHY_NOT.get(name)
    if entry is None:
        return "unexplained: no cause recorded for this row (graph_adapter/app/zoo.py WHY_NOT)"
    causes = []
    for probe in entry.probes:
        try:
            cause = probe(model, batches, res)
        except Exception as e:  # noqa: BLE001 - the note reports it
            return f"unexplained: the probe {probe.__name__} failed: {_why(e)}"
        if cause is None:
            return (f"unexplained: the probe {probe.__name__} did not reproduce its cause "
                    f"(graph_adapter/app/zoo.py WHY_NOT)")
        causes.append(cause)
    tried = []
    for t in entry.tries:
        import torch._dynamo

        def workaround(variant=t.variant):
            return variant(factory())

        with torch._dynamo.config.patch(dict(t.config)), \
                torch.backends.mkldnn.flags(enabled=t.mkldnn and torch.backends.mkldnn.enabled):
            got = run_row(family, name, (workaround, style), why=False, modes=t.modes,
                          grad=t.grad)
        tried.append((f"{t.label}: " if t.label else "") + _summary(got, t))
    note = f"why: {'; '.join(causes)}. Instead: {entry.instead}"
    if tried:
        note += " -> " + "; ".join(tried)
    return note.replace("|", "/")


# --------------------------------------------------------------------------
# One row
# --------------------------------------------------------------------------
def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


_CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def _why(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    msg = re.sub(r"\s+", " ", msg).replace("|", "/")
    msg = msg.replace(_CHECKOUT, "")  # paths as the table shows them on any machine
    return f"{type(e).__name__}: {msg[:110]}"


def _call(model: nn.Module, data) -> torch.Tensor:
    return _first(model(data.x, data.edge_index, data.edge_attr, data.pos, data.z, data.batch))


def _invariant(model: nn.Module, b: Batch, flat) -> str:
    model = model.eval()
    ref = _call(model, b)
    w = ipu_wrap(copy.deepcopy(model), inputs="tensors").eval()
    out = w(flat)["output"]
    rows = flat["node_mask"] if out.size(0) == BUDGET["nodes"] and ref.size(0) == b.num_nodes else (
        flat["graph_mask"] if out.size(0) == BUDGET["graphs"] else None)
    if rows is None:
        return f"output rows {out.size(0)} (unpadded {ref.size(0)}): not a node or graph level result"
    got = out[rows]
    if got.shape != ref.shape:
        return f"shape {tuple(got.shape)} vs unpadded {tuple(ref.shape)}"
    err = (got - ref).abs().max().item() if ref.numel() else 0.0
    return "ok" if err < 1e-4 else f"differs by {err:.2g}"


def _compiles(model: nn.Module, flats, modes: Tuple[bool, ...] = (True, False),
              grad: bool = True) -> str:
    import torch._dynamo

    aot = torch._dynamo.lookup_backend("aot_eager")
    counts = []
    for train in modes:
        torch._dynamo.reset()
        n = [0]

        def counting(gm, ex):
            n[0] += 1
            return aot(gm, ex)

        w = ipu_wrap(copy.deepcopy(model), inputs="tensors").train(train)
        compiled = torch.compile(w, fullgraph=True, dynamic=False, backend=counting)
        with torch.set_grad_enabled(grad):
            for flat in flats:
                compiled(flat)
        counts.append(n[0])
    if counts == [1] * len(modes):
        return "ok"
    return "compiles " + ", ".join(f"{'train' if t else 'eval'} {c}" for t, c in zip(modes, counts))


def _exports(model: nn.Module, flat) -> str:
    w = ipu_wrap(copy.deepcopy(model), inputs="tensors").eval()
    torch.export.export(w, (flat,), strict=False)
    return "ok"


def _clean(model: nn.Module, flat) -> str:
    report = check(ipu_wrap(copy.deepcopy(model), inputs="tensors").eval(), flat)
    if report.ok:
        return "ok"
    f = report.errors[0]
    where = re.search(r"torch_geometric/[\w/]+\.py:\d+", f.message)
    return f"{f.kind}: {f.op.split(' (')[0]}" + (f" at {where.group(0)}" if where else "")


def run_row(family: str, name: str, entry: Any, why: bool = True,
            modes: Tuple[bool, ...] = (True, False), grad: bool = True) -> Dict[str, str]:
    """The four results of one row (``"ok"`` or why not) and a note.

    A built row with a red cell gets its note from :data:`WHY_NOT` (the cause
    as the probes measure it, the workaround and the workaround's own cells);
    ``why=False`` skips that (a workaround's own run). ``modes``: the
    ``train()`` modes compiled; ``grad``: compile with gradients enabled.
    """
    res = {"family": family, "name": name, "eager": "", "compile": "", "export": "", "check": "",
           "note": ""}
    if isinstance(entry, str):
        res["note"] = "not built: " + entry
        return res
    factory, style = entry if isinstance(entry, tuple) else (entry, "")
    try:
        torch.manual_seed(0)
        layer = factory()
        model = Row(family, layer, style)
        b, flat = _pad(_graphs(0))
        _call(model.eval(), b)
    except Exception as e:  # noqa: BLE001 - the table reports it
        res["note"] = "not built: " + _why(e)
        return res
    b1, flat1 = _pad(_graphs(1))
    steps = [("eager", lambda: _invariant(model, b, flat)),
             ("compile", lambda: _compiles(model, [flat, flat1], modes, grad)),
             ("export", lambda: _exports(model, flat)), ("check", lambda: _clean(model, flat))]
    for key, step in steps:
        try:
            res[key] = step()
        except Exception as e:  # noqa: BLE001
            res[key] = _why(e)
    if why and not all(res[k] == "ok" for k in CELLS):
        res["note"] = _why_not(family, name, factory, style, model, (b, b1), res)
    return res


# --------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------
def _cell(v: str) -> str:
    return "✅" if v == "ok" else ("" if not v else f"❌ {v}")


def table(results: List[Dict[str, str]]) -> str:
    lines = ["| family | name | eager = unpadded | one compile per mode | export | check (poptorch) | note |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['family']} | `{r['name']}` | {_cell(r['eager'])} | {_cell(r['compile'])} "
                     f"| {_cell(r['export'])} | {_cell(r['check'])} | {r['note']} |")
    green = sum(all(r[k] == "ok" for k in CELLS) for r in results)
    built = sum(not r["note"].startswith("not built") for r in results)
    why = sum(r["note"].startswith("why:") for r in results)
    lines.append("")
    lines.append(f"{green} of {built} built rows all green, {why} say why not (note); "
                 f"{len(results) - built} not built here (reason in the row).")
    return "\n".join(lines)


def write(path: str, text: str) -> None:
    with open(path) as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        raise ValueError(f"{path} has no {BEGIN} ... {END} markers")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(path, "w") as f:
        f.write(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", help="rewrite the table in this markdown file (docs/zoo.md)")
    p.add_argument("--only", nargs="*", help="row names to run")
    args = p.parse_args(argv)
    if args.only and args.write:
        p.error("--write rewrites the whole table; --only runs a few rows (print them "
                "without --write)")
    results = []
    for family, name, entry in rows():
        if args.only and name not in args.only:
            continue
        t = time.perf_counter()
        results.append(run_row(family, name, entry))
        print(f"{family:6s} {name:28s} {time.perf_counter() - t:5.1f}s "
              f"{[results[-1][k] for k in ('eager', 'compile', 'export', 'check')]} {results[-1]['note']}",
              file=sys.stderr, flush=True)
    text = table(results)
    if args.write:
        write(args.write, text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
