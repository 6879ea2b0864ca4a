"""PyG layers whose own code needs the static mechanisms (issue 11, items 4 and 5).

Each: ipu_wrap(layer)(padded) equals layer(unpadded) on the real rows (a
property over random batches and paddings), and, where noted, ``check()``
finds nothing poptorch would reject.
"""
import copy

import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from torch_geometric.data import Batch
from torch_geometric.index import index2ptr
from torch_geometric.nn import ClusterGCNConv
from torch_geometric.nn.aggr import SortAggregation
import torch_geometric.utils as U

from graph_adapter import check
from graph_adapter.wrap import ipu_wrap

from _padding import pad_batch, random_graphs

ATOL = 2e-5


def padded_pair(seed, num_graphs, extra_nodes, extra_edges, extra_graphs, **kw):
    graphs = random_graphs(torch.Generator().manual_seed(seed), num_graphs, **kw)
    b = Batch.from_data_list(graphs)
    flat = pad_batch(graphs, b.num_nodes + extra_nodes, b.edge_index.size(1) + extra_edges,
                     b.num_graphs + extra_graphs)
    return b, flat


batches = st.tuples(st.integers(0, 10_000), st.integers(1, 5), st.integers(1, 4),
                    st.integers(0, 6), st.integers(1, 3))


@given(batches)
def test_remove_then_add_self_loops_leaves_exactly_n_loops(args):
    """The mechanism: after the static remove_self_loops there are no loops;
    after add_self_loops the loops are the N appended ones, in node order."""
    _, flat = padded_pair(*args)
    N = flat["node_mask"].numel()

    class M(torch.nn.Module):
        def forward(self, x, edge_index):
            ei, _ = U.remove_self_loops(edge_index)
            no_loops = (ei[0] != ei[1]).all()
            ei2, _ = U.add_self_loops(ei, num_nodes=x.size(0))
            ei3, _ = U.add_remaining_self_loops(edge_index)
            return {"no_loops": no_loops, "ei2": ei2, "ei3": ei3}

    out = ipu_wrap(M())(flat)
    assert bool(out["output/no_loops"])
    for k in ("output/ei2", "output/ei3"):
        ei = out[k]
        loops = ei[:, ei[0] == ei[1]]
        assert torch.equal(loops, torch.arange(N).repeat(2, 1)), k
        # nothing new flows into a real node: every non-loop edge into a real
        # node was a real edge of the input
        real = flat["node_mask"]
        into_real = ei[:, (ei[0] != ei[1]) & real[ei[1]]]
        e = flat["edge_mask"]
        src = flat["edge_index"][:, e & (flat["edge_index"][0] != flat["edge_index"][1])]
        assert sorted(map(tuple, into_real.t().tolist())) == sorted(map(tuple, src.t().tolist()))


@given(batches)
def test_cluster_gcn_equals_unpadded(args):
    b, flat = padded_pair(*args)
    torch.manual_seed(0)
    layer = ClusterGCNConv(4, 3, diag_lambda=0.5)
    ref = layer(b.x, b.edge_index)
    out = ipu_wrap(copy.deepcopy(layer))(flat)["output"]
    torch.testing.assert_close(out[flat["node_mask"]], ref, atol=ATOL, rtol=1e-4)


class _Sort(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        self.aggr = SortAggregation(k=k)

    def forward(self, x, batch):
        return self.aggr(x, batch)


class _Ptr(torch.nn.Module):
    def forward(self, x, batch):
        return index2ptr(batch)


@given(batches, st.integers(1, 8))
def test_sort_aggregation_equals_unpadded_and_is_clean(args, k):
    b, flat = padded_pair(*args)
    ref = _Sort(k)(b.x, b.batch)
    w = ipu_wrap(_Sort(k))
    out = w(flat)["output"]
    torch.testing.assert_close(out[flat["graph_mask"]], ref)
    # SortAggregation itself reads a value (new_full with a tensor fill) when
    # its dense width is below k; the static width is the node budget N.
    assume(flat["node_mask"].numel() >= k)
    assert check(w, flat).ok


@given(batches)
def test_index2ptr_without_size(args):
    b, flat = padded_pair(*args)
    w = ipu_wrap(_Ptr())
    out = w(flat)["output"]
    G = flat["graph_mask"].numel()
    assert out.shape == (G + 1,)
    torch.testing.assert_close(out[: b.num_graphs + 1], b.ptr)
    assert check(w, flat).ok
