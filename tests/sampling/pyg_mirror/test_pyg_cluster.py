"""PyG 2.8's ``test/loader/test_cluster.py``, scenario by scenario, against
:class:`~graph_adapter.sampling.FixedSizeClusterLoader` through ``loader.to_pyg(batch)``
(PyG's expectations, our own words).

| PyG test | here | status |
|---|---|---|
| test_cluster_gcn | test_cluster_gcn | passing: the partition PyG's test feeds `ClusterData._partition` given as `partition=`; `partptr` / `node_perm` as PyG's; batches equal `data.subgraph(n_id)` with edges sorted by source (`sort_edge_index`), edge attributes alike. PyG's `edge_perm` (the permuted order of all edges) has no counterpart: a batch's `e_id` holds its edges' ids |
| test_keep_inter_cluster_edges | test_keep_inter_cluster_edges | passing (`keep_inter_cluster_edges=True`; `ClusterData[i]`'s layout through `to_pyg`) |
| test_cluster_gcn_correctness[csr, csc] | test_cluster_gcn_correctness[csr, csc] | passing on a synthetic graph (PyG's uses Cora, a download) |

The METIS step itself (PyG: `@withMETIS`) is tests/sampling/test_cluster_metis.py's; here
the partitions are given, so every scenario runs without METIS.
"""
from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.datasets import FakeDataset
from torch_geometric.utils import sort_edge_index

from graph_adapter.sampling import FixedSizeClusterLoader

from _pyg_mirror import pyg_batches

_ADJ = torch.tensor([[1, 1, 1, 0, 1, 0],
                     [1, 1, 0, 1, 0, 1],
                     [1, 0, 1, 0, 1, 0],
                     [0, 1, 0, 1, 0, 1],
                     [1, 0, 1, 0, 1, 0],
                     [0, 1, 0, 1, 0, 1]])
_PART = torch.tensor([0, 1, 0, 1, 0, 1])


def _six(n_id: bool) -> Data:
    ei = _ADJ.nonzero().t()
    data = Data(x=torch.arange(6.0).view(-1, 1).repeat(1, 2), edge_index=ei,
                edge_attr=torch.arange(ei.size(1)))
    if n_id:
        data.n_id = torch.arange(6)
    data.num_nodes = 6
    return data


def _like_subgraph(data: Data, batch: Data, n_id: torch.Tensor) -> None:
    """A batch is the induced subgraph of its nodes, edges sorted by source (PyG's check)."""
    want = data.subgraph(n_id)
    assert torch.equal(batch.x, want.x)
    ei, attr = sort_edge_index(want.edge_index, want.edge_attr)
    assert torch.equal(batch.edge_index, ei) and torch.equal(batch.edge_attr, attr)


def test_cluster_gcn():
    data = _six(n_id=True)
    loader = FixedSizeClusterLoader(data, batch_size=1, partition=_PART)
    assert loader.partptr.tolist() == [0, 3, 6]
    assert loader.node_perm.tolist() == [0, 2, 4, 1, 3, 5]
    batches = pyg_batches(loader)
    assert len(batches) == 2
    for batch in batches:
        batch.validate()
        assert batch.num_nodes == 3 and batch.n_id.size() == (3,)
        _like_subgraph(data, batch, batch.n_id)
    loader = FixedSizeClusterLoader(data, batch_size=2, partition=_PART, shuffle=False)
    (batch,) = pyg_batches(loader)
    batch.validate()
    assert batch.num_nodes == 6 and batch.n_id.size() == (6,)
    _like_subgraph(data, batch, batch.n_id)


def test_keep_inter_cluster_edges():
    data = _six(n_id=False)
    loader = FixedSizeClusterLoader(data, batch_size=1, partition=_PART,
                                    keep_inter_cluster_edges=True)
    for batch in pyg_batches(loader):
        # sources are the cluster's own rows; destinations reach past them (the other
        # cluster's nodes, in the partition's numbering)
        assert int(batch.edge_index[0].min()) == 0 and int(batch.edge_index[0].max()) == 2
        assert int(batch.edge_index[1].min()) == 0 and int(batch.edge_index[1].max()) > 2
        assert batch.edge_index.size(1) == batch.edge_attr.size(0)


@pytest.mark.parametrize("sparse_format", ["csr", "csc"])
def test_cluster_gcn_correctness(sparse_format):
    data = FakeDataset(avg_num_nodes=300, avg_degree=6, num_channels=8)[0]
    data.n_id = torch.arange(data.num_nodes)
    parts = torch.randint(0, 10, (data.num_nodes,), generator=torch.Generator().manual_seed(0))
    loader = FixedSizeClusterLoader(data, batch_size=3, partition=parts, shuffle=False,
                                    sparse_format=sparse_format, success_ratio=1.0)
    batches = pyg_batches(loader)
    assert len(batches) == 4 and loader.stats.trimmed_edges == 0
    for one in batches:
        one.validate()
        two = data.subgraph(one.n_id)
        assert one.num_nodes == two.num_nodes and one.num_edges == two.num_edges
        assert torch.equal(one.x, two.x)
        assert torch.equal(one.edge_index,
                           sort_edge_index(two.edge_index, sort_by_row=sparse_format == "csr"))
