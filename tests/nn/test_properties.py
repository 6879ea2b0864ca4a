"""Padding invariance at the edge of the format: a fully padded batch (a
loader's tail, a rank with fewer batches) changes nothing.  (Fully padded
micro-batches under the IPU emulator: tests/ipu/test_emulator.py.)

A fully padded batch has no real graph: in train() the wrapped model's loss is
0, every gradient is 0 and no BatchNorm buffer moves (not even
``num_batches_tracked``), so an optimizer step on it is a no-op for SGD.
"""
import copy

import pytest
import torch
from hypothesis import assume, given
from torch_geometric.data import Data

from graph_adapter import Budget, Collator, ipu_wrap
from graph_adapter.nn import masked_loss

from strategies import model_graph_lists, paddings
from test_invariance import make


def _collator(graphs, padding):
    """A Collator of ``graphs`` (indices 0..len-1) padded by ``padding``.

    The dataset gets one more graph (2 nodes, 0 edges, never collated) so that
    ``y [1]`` is graph-level by the row-count rule even when every drawn graph
    has one node or one edge (a tie the rule breaks towards node/edge)."""
    tie_breaker = Data(x=torch.zeros(2, 4), edge_index=torch.zeros(2, 0, dtype=torch.long),
                       y=torch.zeros(1))
    return Collator(list(graphs) + [tie_breaker], _budget(graphs, padding))


def _budget(graphs, padding):
    n = sum(d.num_nodes for d in graphs)
    e = sum(d.num_edges for d in graphs)
    # (+1: every batch keeps 2 padding nodes, paddings() draws >= 1)
    G = len(graphs) + padding[2]
    # the no-empty-padding-slot rule (FORMAT.md): nodes >= graphs + largest graph - 1
    N = max(n + padding[0] + 1, G + max(max(d.num_nodes for d in graphs) - 1, 0))
    E = e + padding[1]
    assume(len({N, E, G}) == 3)  # the documented rule: a row count tells its level
    return Budget(nodes=N, edges=E, graphs=G)


# gin_bn: BatchNorm buffers; functional: every pooling/aggregation path (the
# others add no new padding path, and test_invariance covers them)
@pytest.mark.parametrize("name", ["gin_bn", "functional"])
@given(graphs=model_graph_lists(), padding=paddings())
def test_fully_padded_batch_changes_nothing_in_train(name, graphs, padding):
    torch.manual_seed(0)
    model = make(name)
    before = copy.deepcopy(model.state_dict())
    wrapped = ipu_wrap(model, loss_fn=masked_loss("mse")).train()
    empty = _collator(graphs, padding).empty()
    assert not bool(empty["graph_mask"].any()) and not bool(empty["node_mask"].any())
    out = wrapped(empty)
    assert float(out["loss"]) == 0.0
    assert bool(torch.isfinite(out["output"]).all())
    out["loss"].backward()
    for pn, p in model.named_parameters():
        assert p.grad is None or not bool(p.grad.any()), pn
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), f"{k} moved on a batch without real graphs"
