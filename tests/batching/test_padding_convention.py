"""Every padded batch has at least two padding nodes (issue 11, item 4).

The static ``remove_self_loops`` turns a self-loop into a padding edge
``(P, N - 1)`` from the first padding node to the last; that edge is no loop
only when ``P != N - 1``, i.e. with two or more padding nodes.  The budget
reserves them (``budget.RESERVED_NODES``: ``capacity()`` is ``nodes - 2``),
so ``ClusterGCNConv`` (which counts exactly ``N`` loops after
``add_self_loops``) equals the unpadded layer on every loader batch,
including the budgets that used to leave exactly one padding node.
"""
import copy

import pytest
import torch
from hypothesis import given, strategies as st
from torch_geometric.data import Batch, Data
from torch_geometric.nn import ClusterGCNConv

from graph_adapter.batching import RESERVED_NODES, Budget
from graph_adapter.batching import FixedSizeLoader
from graph_adapter.nn import ipu_wrap

from _padding import untied


def graphs_of(node_counts, seed=0, loops=True, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in node_counts:
        e = 2 * n if n else 0
        ei = torch.randint(0, max(n, 1), (2, e), generator=g)
        if loops and n:
            ei[:, :1] = 0  # at least one self-loop in every non-empty graph
        out.append(Data(x=torch.randn(n, 4, generator=g, dtype=dtype), edge_index=ei,
                        num_nodes=n))
    return out


def padding_nodes(batch):
    return int((~batch["node_mask"]).sum())


counts_st = st.lists(st.integers(0, 9), min_size=1, max_size=40)


@given(counts_st, st.sampled_from(["fit", "tight", "hand"]), st.integers(1, 8),
       st.sampled_from(["greedy", "histogram"]), st.integers(1, 3), st.integers(1, 2))
def test_every_loader_batch_has_two_padding_nodes(counts, how, k, packer, micro, world):
    graphs = graphs_of(counts)
    if how == "fit":
        budget = Budget.fit(graphs, k, num_samples=50)
    elif how == "tight":
        budget = Budget.tight(graphs, k)
    else:  # hand-made, tight for the largest graph: capacity is nodes - 2, and
        # N - G >= n - 1 so that the largest graph alone leaves no empty padding
        # slot (a node or edge slot more where N, E, G would tie: Budget refuses it);
        # N >= G also where every graph is empty (a padding node for each padding slot)
        N, E, G = untied(max(max(counts) + RESERVED_NODES, k + max(max(counts), 1)),
                         2 * max(counts) + 1, k + 1, grow="nodes")
        budget = Budget(nodes=N, edges=E, graphs=G)
    assert budget.capacity()[0][0] == budget.nodes - 2
    seen = 0
    for rank in range(world):
        loader = FixedSizeLoader(graphs, budget, packer=packer, shuffle=True,
                                 micro_batches=micro, rank=rank, world_size=world)
        for item in loader:
            for m in (item["node_mask"].reshape(-1, budget.nodes)):
                assert int((~m).sum()) >= 2
            seen += int(item["graph_mask"].sum())
            # every budget (fit, tight, hand): no empty padding graph slot either
            ptr = item["ptr"].reshape(-1, budget.graphs + 1)
            assert bool((ptr.diff(dim=1) > 0).logical_or(
                item["graph_mask"].reshape(-1, budget.graphs)).all())
    assert seen == len(graphs)  # every graph exactly once


def test_hand_made_budgets_too_small_get_named_errors():
    with pytest.raises(ValueError, match=r"Budget.nodes must be >= 2.*2 padding nodes"):
        Budget(nodes=1, edges=4, graphs=2)
    with pytest.raises(ValueError, match=r"Budget.nodes\['a'\] must be >= 2"):
        Budget(nodes={"a": 1, "b": 3}, edges={"a__r__b": 2}, graphs=2)
    # a graph of N - 1 nodes fitted the old one-padding-node rule; now it is
    # oversize, named with the budget's rule
    graphs = graphs_of([3, 5, 2])
    with pytest.raises(ValueError, match=r"at most 4 real nodes \(2 padding nodes "
                                         r"reserved\).*dataset index 1 has 5 nodes"):
        FixedSizeLoader(graphs, Budget(nodes=6, edges=10, graphs=4))
    assert Budget(nodes=6, edges=10, graphs=4).max_real_nodes == 4


def _unpadded_and_padded(layer, graphs, budget, packer="greedy"):
    """(out, grads) of ``layer`` on every loader batch through ipu_wrap, against
    the same layer on the unpadded batch of the same graphs, in float64."""
    loader = FixedSizeLoader(graphs, budget, packer=packer)
    plan = loader.plan()
    pads = []
    for ids, flat in zip(plan, loader):
        pads.append(padding_nodes(flat))
        ref_layer, pad_layer = copy.deepcopy(layer), copy.deepcopy(layer)
        b = Batch.from_data_list([graphs[i] for i in ids])
        ref = ref_layer(b.x, b.edge_index)
        w = torch.linspace(-1, 1, ref.numel(), dtype=ref.dtype).reshape(ref.shape)
        (ref * w).sum().backward()
        out = ipu_wrap(pad_layer)(flat)["output"]
        real = out[flat["node_mask"]]
        torch.testing.assert_close(real, ref)
        (real * w).sum().backward()
        for (name, p), (_, q) in zip(ref_layer.named_parameters(),
                                     pad_layer.named_parameters()):
            torch.testing.assert_close(q.grad, p.grad, msg=lambda m: f"{name}: {m}")
    return pads


@pytest.mark.parametrize("diag_lambda", [0.0, 0.5])
def test_cluster_gcn_through_loader_equals_unpadded(diag_lambda):
    torch.manual_seed(0)
    layer = ClusterGCNConv(4, 3, diag_lambda=diag_lambda).double()
    graphs = graphs_of([3, 5, 2, 4, 6, 1, 3])
    n = sum(d.num_nodes for d in graphs)
    # Budget.tight of all graphs in one batch: under the old one-node rule its
    # N was n + 1 (exactly one padding node); now n + 2
    tight = Budget.tight(graphs, len(graphs))
    assert tight.nodes == n + 2
    pads = _unpadded_and_padded(layer, graphs, tight)
    assert pads == [2]
    # a hand-made budget of n + 1 rows (one padding node for all graphs under the
    # old rule): the packer now splits them, each batch keeping two
    hand = Budget(nodes=n + 1, edges=4 * n, graphs=len(graphs) + 1)
    pads = _unpadded_and_padded(layer, graphs, hand)
    assert len(pads) >= 2 and min(pads) >= 2
    # exactly two padding nodes in every batch, both packers
    for packer in ("greedy", "histogram"):
        # graphs=3: N - G = 5 keeps the 6-node graph's padding slots non-empty
        pads = _unpadded_and_padded(layer, graphs, Budget(nodes=8, edges=30, graphs=3), packer)
        assert min(pads) >= 2 and 2 in pads


@given(st.lists(st.integers(1, 7), min_size=1, max_size=12), st.integers(1, 6),
       st.integers(0, 10_000))
def test_cluster_gcn_equals_unpadded_on_fitted_budgets(counts, k, seed):
    torch.manual_seed(seed)
    layer = ClusterGCNConv(4, 3, diag_lambda=0.3).double()
    graphs = graphs_of(counts, seed=seed)
    budget = Budget.tight(graphs, k) if seed % 2 else Budget.fit(graphs, k, num_samples=50)
    pads = _unpadded_and_padded(layer, graphs, budget)
    assert min(pads) >= 2
