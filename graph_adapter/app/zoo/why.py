"""The zoo's rows that stay red: for each, the causes (:data:`WHY_NOT`: probes that
measure each one on the row's own batches) and what a user does instead, with the
workarounds the script runs like rows (:class:`Try`). Used by
:func:`graph_adapter.app.zoo.run.run_row` for the note of a red row.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

import torch
from torch import nn

from torch_geometric.data import Batch
from torch_geometric.nn import conv as C

from .layers import BUDGET, F, call

__all__ = ["CELLS", "WIDTH", "Probe", "Try", "WhyNot", "WHY_NOT"]


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
        rows = call(model.eval(), b).size(0)
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
# RNN layers (Set2Set, LSTM/GRU aggregation): compile() sets Dynamo's allow_rnn and, for
# training, turns oneDNN off for each call of a model holding an nn.RNNBase
# (graph_adapter/backends/engines.py, rnn_settings), so Set2Set's row is green and the
# aggregations' rows are red only for their width.
WHY_NOT: Dict[str, WhyNot] = {
    "LSTMAggregation": WhyNot((_width,), _WIDTH_FIX, (Try("", _Width),)),
    "GRUAggregation": WhyNot((_width,), _WIDTH_FIX, (Try("", _Width),)),
    "LCMAggregation": WhyNot((_width,), _WIDTH_FIX, (Try("", _Width),)),
    "PatchTransformerAggregation": WhyNot((_width,), _WIDTH_FIX, (Try("", _Width),)),
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
