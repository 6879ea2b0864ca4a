"""PyG 2.8's ``test/loader/test_neighbor_loader.py``, scenario by scenario, against our
node loaders through ``loader.to_pyg(batch)`` (PyG's expectations, our own words).

| PyG test | here | status |
|---|---|---|
| test_homo_neighbor_loader_basic[dtype, subgraph_type, filter_per_worker] | test_homo_basic[dtype, subgraph_type] | passing (directional, bidirectional, induced; int32 ids). `filter_per_worker` is a PyG DataLoader detail (where its filter runs): not applicable; `loader([0])` (a batch of chosen seeds): not applicable, build a loader with `input_nodes` |
| test_hetero_neighbor_loader_basic[dtype, subgraph_type] | test_hetero_basic[...], test_hetero_fanout_hop_mismatch | as above; the hop-count mismatch is refused with a `FanoutLengthError` (a `ValueError`) in PyG's wording, naming the edge type |
| test_homo_neighbor_loader_on_karate[subgraph_type] | test_homo_karate_full_fanouts_match_the_full_graph | passing (KarateClub is built into PyG: no download) |
| test_hetero_neighbor_loader_on_karate[subgraph_type] | test_hetero_karate_full_fanouts_match_the_full_graph | passing |
| test_temporal_hetero_neighbor_loader_on_karate | test_temporal_hetero_karate | passing |
| test_custom_neighbor_loader | test_feature_and_graph_store_batches_equal_the_data_batches | passing: the same batches from `(FeatureStore, GraphStore)` as from `Data` |
| test_custom_hetero_neighbor_loader | test_hetero_feature_and_graph_store | passing |
| test_custom_hetero_neighbor_loader_duplicate | test_hetero_store_one_type | passing |
| test_temporal_custom_neighbor_loader_on_karate | test_temporal_hetero_store_karate | passing (`time_attr` read from a feature-store column) |
| test_pyg_lib_and_torch_sparse_homo_equality / _hetero_equality | - | not applicable: compares two compiled sampler ops with each other (pyg-lib vs torch-sparse) |
| test_memmap_neighbor_loader | test_memmap_features_are_gathered | passing (`num_workers=0`: worker processes are covered by tests/sampling/test_neighbor.py) |
| test_homo_neighbor_loader_sampled_info | test_homo_sampled_info | passing |
| test_hetero_neighbor_loader_sampled_info | test_hetero_sampled_info | passing |
| test_neighbor_loader_mapping | test_mapping_n_id_e_id | passing |
| test_weighted_homo_neighbor_loader / _hetero_ | test_weighted_homo / test_weighted_hetero | passing |
| test_edge_level_temporal_homo_neighbor_loader / _hetero_ | test_edge_time_homo / test_edge_time_hetero | passing |
| test_neighbor_loader_with_tensor_frame | - | not applicable: torch_frame's TensorFrame (not installed; not a tensor the budget can pad) |
| test_neighbor_loader_input_id | test_hetero_input_id_of_a_mask | passing |
| test_temporal_neighbor_loader_single_link | test_temporal_single_link | passing |

Differences kept as choices (docs/large_graphs.md, "Moving from PyG's loaders"): a budget
may trim the farthest hop (`loader.stats`; here budgets are fitted with
`success_ratio=1.0` where a test counts nodes or edges); `len(loader)` counts batches
of a rank, as PyG's.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.datasets import KarateClub
from torch_geometric.nn import GraphConv, to_hetero
from torch_geometric.utils import is_undirected, sort_edge_index, to_undirected

from graph_adapter.batching import Budget
from graph_adapter.sampling import FanoutError, FixedSizeHeteroNeighborLoader, FixedSizeNeighborLoader

from _pyg_mirror import SUBGRAPH_TYPES, edges_are_input_edges, pyg_batches, random_edges, subgraph_kw

SUBGRAPHS = [pytest.param(st, id=st) for st in SUBGRAPH_TYPES]
FULL = dict(success_ratio=1.0)  # a budget that holds every fitted sample


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32], ids=["int64", "int32"])
@pytest.mark.parametrize("subgraph_type", SUBGRAPHS)
def test_homo_basic(subgraph_type, dtype):
    gen = torch.Generator().manual_seed(12345)
    data = Data(x=torch.arange(100), edge_index=random_edges(100, 100, 500, gen, dtype),
                edge_attr=torch.arange(500))
    loader = FixedSizeNeighborLoader(data, [5] * 2, batch_size=20, **subgraph_kw(subgraph_type))
    assert len(loader) == 5
    for i, batch in enumerate(pyg_batches(loader)):
        assert isinstance(batch, Data)
        assert batch.x.size(0) <= 100 and batch.n_id.size() == (batch.num_nodes,)
        assert batch.input_id.numel() == batch.batch_size == 20
        assert 0 <= int(batch.x.min()) and int(batch.x.max()) < 100
        assert 0 <= int(batch.edge_index.min()) and int(batch.edge_index.max()) < batch.num_nodes
        assert batch.edge_attr.size(0) == batch.edge_index.size(1)
        # the seeds come first, in input order
        assert torch.equal(batch.x[:20], torch.arange(20 * i, 20 * (i + 1)))
        if subgraph_type != "bidirectional":
            assert batch.e_id.size() == (batch.num_edges,)
            assert 0 <= int(batch.edge_attr.min()) and int(batch.edge_attr.max()) < 500
            assert edges_are_input_edges(batch.edge_index, data.edge_index, batch.x, batch.x)


def _hetero_graph(gen: torch.Generator, dtype=torch.int64) -> HeteroData:
    data = HeteroData()
    data["paper"].x = torch.arange(100)
    data["author"].x = torch.arange(100, 300)
    data["paper", "paper"].edge_index = random_edges(100, 100, 500, gen, dtype)
    data["paper", "paper"].edge_attr = torch.arange(500)
    data["paper", "author"].edge_index = random_edges(100, 200, 1000, gen, dtype)
    data["paper", "author"].edge_attr = torch.arange(500, 1500)
    data["author", "paper"].edge_index = random_edges(200, 100, 1000, gen, dtype)
    data["author", "paper"].edge_attr = torch.arange(1500, 2500)
    return data


def test_hetero_fanout_hop_mismatch():
    data = _hetero_graph(torch.Generator().manual_seed(0))
    fan = {("paper", "to", "paper"): [-1], ("paper", "to", "author"): [-1, -1],
           ("author", "to", "paper"): [-1, -1]}
    with pytest.raises(FanoutError, match="hops") as e:
        FixedSizeHeteroNeighborLoader(data, fan, 20, input_nodes=("paper", None))
    assert isinstance(e.value, ValueError)


def test_hetero_fanout_hop_mismatch_in_pyg_words():
    data = _hetero_graph(torch.Generator().manual_seed(0))
    fan = {("paper", "to", "paper"): [-1], ("paper", "to", "author"): [-1, -1],
           ("author", "to", "paper"): [-1, -1]}
    with pytest.raises(ValueError, match="hops must be the same across all"):
        FixedSizeHeteroNeighborLoader(data, fan, 20, input_nodes=("paper", None))


def roomy_budget(data: HeteroData) -> Budget:
    """A hetero budget no sample can exceed (every node, twice every edge: a bidirectional
    type holds its reverse's too), counts apart: PyG's batches are never trimmed."""
    nodes = {t: int(data[t].num_nodes) + 2 + i for i, t in enumerate(data.node_types)}
    top = max(nodes.values()) + 1
    edges = {"__".join(et): top + 2 * int(data[et].num_edges) + 1000 * (i + 1)
             for i, et in enumerate(data.edge_types)}
    return Budget(nodes=nodes, edges=edges, graphs=2)


@pytest.mark.parametrize("subgraph_type", SUBGRAPHS)
def test_hetero_basic(subgraph_type):
    data = _hetero_graph(torch.Generator().manual_seed(12345))
    loader = FixedSizeHeteroNeighborLoader(data, [10] * 2, 20, input_nodes=("paper", None),
                                           budget=roomy_budget(data), oversize="error",
                                           **subgraph_kw(subgraph_type))
    assert len(loader) == 5
    x = {"paper": 0, "author": 100}
    for batch in pyg_batches(loader):
        assert isinstance(batch, HeteroData) and batch.input_type == "paper"
        assert set(batch.node_types) == {"paper", "author"}
        assert batch["paper"].input_id.numel() == batch["paper"].batch_size == 20
        for t, lo in x.items():
            assert batch[t].n_id.size() == (batch[t].num_nodes,)
            if batch[t].num_nodes:
                assert lo <= int(batch[t].x.min()) and int(batch[t].x.max()) < lo + 100 * (1 + (t == "author"))
        assert set(batch.edge_types) == set(data.edge_types)
        for (src, rel, dst), lo, hi in ((("paper", "to", "paper"), 0, 500),
                                         (("paper", "to", "author"), 500, 1500),
                                         (("author", "to", "paper"), 1500, 2500)):
            store = batch[src, rel, dst]
            row, col = store.edge_index
            assert row.numel() == 0 or int(row.max()) < batch[src].num_nodes
            assert col.numel() == 0 or int(col.max()) < batch[dst].num_nodes
            if subgraph_type != "bidirectional":
                assert store.e_id.size() == (row.numel(),)
                if row.numel():
                    assert lo <= int(store.edge_attr.min()) and int(store.edge_attr.max()) < hi
                assert edges_are_input_edges(store.edge_index, data[src, rel, dst].edge_index,
                                             batch[src].x - x[src], batch[dst].x - x[dst])
            else:
                assert "e_id" not in store and "edge_attr" not in store
        if subgraph_type == "bidirectional":
            assert is_undirected(batch["paper", "paper"].edge_index)
            a = batch["paper", "author"].edge_index
            b = batch["author", "paper"].edge_index
            assert torch.equal(a, sort_edge_index(b.flip([0]), sort_by_row=False))
        assert not batch.has_isolated_nodes()


class _GNN(torch.nn.Module):
    def __init__(self, cin: int, hidden: int, cout: int):
        super().__init__()
        self.conv1, self.conv2 = GraphConv(cin, hidden), GraphConv(hidden, cout)

    def forward(self, x, edge_index, edge_weight=None):
        return self.conv2(self.conv1(x, edge_index, edge_weight).relu(), edge_index, edge_weight)


@pytest.mark.parametrize("subgraph_type", SUBGRAPHS)
def test_homo_karate_full_fanouts_match_the_full_graph(subgraph_type):
    torch.manual_seed(0)
    dataset = KarateClub()
    data = dataset[0]
    keep = data.edge_index[0] < data.edge_index[1]
    data.edge_index, data.edge_weight = to_undirected(data.edge_index[:, keep],
                                                      torch.rand(int(keep.sum())))
    seeds = torch.arange(5, 8)
    loader = FixedSizeNeighborLoader(data, [-1, -1], 3, input_nodes=seeds, oversize="error",
                                     **FULL, **subgraph_kw(subgraph_type))
    assert len(loader) == 1
    (batch,) = pyg_batches(loader)
    model = _GNN(dataset.num_features, 16, dataset.num_classes)
    full = model(data.x, data.edge_index, data.edge_weight)[seeds]
    part = model(batch.x, batch.edge_index, batch.edge_weight)[:batch.batch_size]
    assert torch.allclose(full, part, atol=1e-6)


@pytest.mark.parametrize("subgraph_type", SUBGRAPHS)
def test_hetero_karate_full_fanouts_match_the_full_graph(subgraph_type):
    torch.manual_seed(0)
    dataset = KarateClub()
    data = dataset[0]
    hetero = HeteroData()
    hetero["v"].x = data.x
    hetero["v", "v"].edge_index = data.edge_index
    loader = FixedSizeHeteroNeighborLoader(hetero, [-1, -1], 3,
                                           input_nodes=("v", torch.arange(5, 8)),
                                           oversize="error", **FULL, **subgraph_kw(subgraph_type))
    assert len(loader) == 1
    (batch,) = pyg_batches(loader)
    model = _GNN(dataset.num_features, 16, dataset.num_classes)
    hetero_model = to_hetero(model, hetero.metadata())
    full = model(data.x, data.edge_index)[5:8]
    part = hetero_model(batch.x_dict, batch.edge_index_dict)["v"][:batch["v"].batch_size]
    assert torch.allclose(full, part, atol=1e-6)


def test_temporal_hetero_karate():
    data = KarateClub()[0]
    hetero = HeteroData()
    hetero["v"].x = data.x
    hetero["v"].time = torch.arange(data.num_nodes, 0, -1)
    hetero["v", "v"].edge_index = data.edge_index
    loader = FixedSizeHeteroNeighborLoader(hetero, [-1, -1], 1, input_nodes=("v", None),
                                           time_attr="time")
    for batch in pyg_batches(loader):
        assert bool((batch["v"].time[0] >= batch["v"].time[1:]).all())


def _stores():
    from torch_geometric.testing import MyFeatureStore, MyGraphStore

    return MyFeatureStore(), MyGraphStore()


def test_feature_and_graph_store_batches_equal_the_data_batches():
    gen = torch.Generator().manual_seed(1)
    fs, gs = _stores()
    x, y = torch.arange(100, 300), torch.arange(100, 300)
    fs.put_tensor(x, group_name=None, attr_name="x", index=None)
    fs.put_tensor(y, group_name=None, attr_name="y", index=None)
    ei = torch.unique(random_edges(100, 100, 500, gen), dim=1)
    ei = ei[:, torch.randperm(ei.size(1), generator=gen)]
    gs.put_edge_index(edge_index=(ei[0], ei[1]), edge_type=None, layout="coo", size=(100, 100))
    data = Data(x=x, y=y, edge_index=ei, num_nodes=200)
    kw = dict(batch_size=20, input_nodes=torch.arange(100), **FULL)
    one = FixedSizeNeighborLoader(data, [-1] * 2, **kw)
    two = FixedSizeNeighborLoader((fs, gs), [-1] * 2, **kw)
    assert len(one) == len(two) == 5
    for b1, b2 in zip(pyg_batches(one), pyg_batches(two)):
        assert b1.num_nodes == b2.num_nodes and b1.num_edges == b2.num_edges
        assert b1.batch_size == b2.batch_size
        assert torch.equal(b1.x.sort()[0], b2.x.sort()[0])
        assert torch.equal(b1.y.sort()[0], b2.y.sort()[0])


def _hetero_store_pair(gen):
    from torch_geometric.utils import to_torch_csr_tensor

    fs, gs = _stores()
    data = HeteroData()
    for t, x in (("paper", torch.arange(100)), ("author", torch.arange(100, 300))):
        data[t].x = x
        fs.put_tensor(x, group_name=t, attr_name="x", index=None)
    ei = torch.unique(random_edges(100, 100, 500, gen), dim=1)
    data["paper", "to", "paper"].edge_index = ei
    gs.put_edge_index(edge_index=(ei[0], ei[1]), edge_type=("paper", "to", "paper"),
                      layout="coo", size=(100, 100))
    ei = torch.unique(random_edges(100, 200, 1000, gen), dim=1)
    data["paper", "to", "author"].edge_index = ei
    adj = to_torch_csr_tensor(ei, size=(100, 200))
    gs.put_edge_index(edge_index=(adj.crow_indices(), adj.col_indices()),
                      edge_type=("paper", "to", "author"), layout="csr", size=(100, 200))
    ei = torch.unique(random_edges(200, 100, 1000, gen), dim=1)
    data["author", "to", "paper"].edge_index = ei
    adj = to_torch_csr_tensor(ei.flip([0]), size=(100, 200))
    gs.put_edge_index(edge_index=(adj.col_indices(), adj.crow_indices()),
                      edge_type=("author", "to", "paper"), layout="csc", size=(200, 100))
    return data, fs, gs


def test_hetero_feature_and_graph_store():
    data, fs, gs = _hetero_store_pair(torch.Generator().manual_seed(2))
    kw = dict(input_nodes=("paper", torch.arange(100)), **FULL)
    one = FixedSizeHeteroNeighborLoader(data, [-1] * 2, 20, **kw)
    two = FixedSizeHeteroNeighborLoader((fs, gs), [-1] * 2, 20, **kw)
    assert len(one) == len(two)
    for b1, b2 in zip(pyg_batches(one), pyg_batches(two)):
        assert b1["paper"].batch_size == b2["paper"].batch_size
        for t in data.node_types:
            assert torch.equal(b1[t].x.sort()[0], b2[t].x.sort()[0])
        for et in data.edge_types:
            assert b1[et].num_edges == b2[et].num_edges


def test_hetero_store_one_type():
    fs, gs = _stores()
    fs.put_tensor(torch.arange(10), group_name="user", attr_name="x", index=None)
    ei = torch.unique(random_edges(10, 10, 20, torch.Generator().manual_seed(3)), dim=1)
    gs.put_edge_index(edge_index=(ei[0], ei[1]), edge_type=("user", "user", "user"),
                      layout="coo", size=(10, 10))
    loader = FixedSizeHeteroNeighborLoader((fs, gs), [-1] * 2, 10,
                                           input_nodes=("user", torch.arange(10)), **FULL)
    (batch,) = pyg_batches(loader)
    assert batch.node_types == ["user"] and batch["user"].num_nodes == 10
    assert batch.edge_types == [("user", "user", "user")]
    assert batch["user", "user", "user"].num_edges == ei.size(1)


def test_temporal_hetero_store_karate():
    data = KarateClub()[0]
    data.time = torch.arange(data.num_nodes, 0, -1)
    fs, gs = _stores()
    hetero = HeteroData()
    for name in ("x", "time"):
        fs.put_tensor(data[name], group_name="v", attr_name=name, index=None)
        hetero["v"][name] = data[name]
    gs.put_edge_index(data.edge_index, edge_type=("v", "to", "v"), layout="coo",
                      size=(data.num_nodes, data.num_nodes))
    hetero["v", "to", "v"].edge_index = data.edge_index
    kw = dict(input_nodes=("v", None), time_attr="time")
    one = FixedSizeHeteroNeighborLoader(hetero, [-1, -1], 128, **kw)
    two = FixedSizeHeteroNeighborLoader((fs, gs), [-1, -1], 128, **kw)
    for b1, b2 in zip(pyg_batches(one), pyg_batches(two)):
        assert torch.equal(b1["v"].time.sort()[0], b2["v"].time.sort()[0])


def test_memmap_features_are_gathered(tmp_path):
    path = str(tmp_path / "x.npy")
    x = np.memmap(path, dtype=np.float32, mode="w+", shape=(100, 32))
    x[:] = np.random.default_rng(0).standard_normal((100, 32))
    x.flush()
    data = Data(x=np.memmap(path, dtype=np.float32, mode="r", shape=(100, 32)),
                edge_index=random_edges(100, 100, 500, torch.Generator().manual_seed(4)))
    assert data.num_nodes == 100
    loader = FixedSizeNeighborLoader(data, [5] * 2, 20)
    batch = pyg_batches(loader)[0]
    assert batch.num_nodes <= 100
    assert isinstance(batch.x, torch.Tensor) and batch.x.size() == (batch.num_nodes, 32)
    assert torch.equal(batch.x, torch.from_numpy(np.asarray(x)[batch.n_id.numpy()]))


_INFO_EDGES = torch.tensor([[2, 3, 4, 5, 7, 7, 10, 11, 12, 13],
                            [0, 1, 2, 3, 2, 3, 7, 7, 7, 7]])


def test_homo_sampled_info():
    data = Data(edge_index=_INFO_EDGES, num_nodes=14)
    loader = FixedSizeNeighborLoader(data, [1, 2, 4], 2, **FULL)
    batch = pyg_batches(loader)[0]
    assert batch.num_sampled_nodes == [2, 2, 3, 4]
    assert batch.num_sampled_edges == [2, 4, 4]


def test_hetero_sampled_info():
    data = HeteroData()
    data["paper"].num_nodes = data["author"].num_nodes = 14
    for et in (("paper", "to", "paper"), ("paper", "to", "author"), ("author", "to", "paper")):
        data[et].edge_index = _INFO_EDGES
    loader = FixedSizeHeteroNeighborLoader(data, [1, 2, 4], 2, input_nodes=("paper", None),
                                           **FULL)
    batch = pyg_batches(loader)[0]
    assert batch["paper"].num_sampled_nodes == [2, 2, 3, 4]
    assert batch["author"].num_sampled_nodes == [0, 2, 3, 4]
    assert batch["paper", "to", "paper"].num_sampled_edges == [2, 4, 4]
    assert batch["paper", "to", "author"].num_sampled_edges == [0, 4, 4]
    assert batch["author", "to", "paper"].num_sampled_edges == [2, 4, 4]


def test_mapping_n_id_e_id():
    ei = torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 3, 5],
                       [1, 2, 3, 4, 5, 8, 6, 7, 9, 10, 6, 11]])
    data = Data(edge_index=ei, num_nodes=12)
    loader = FixedSizeNeighborLoader(data, [1], 2, shuffle=True)
    for batch in pyg_batches(loader):
        assert torch.equal(batch.n_id[batch.edge_index], data.edge_index[:, batch.e_id])


_W_EDGES = torch.tensor([[1, 3, 0, 4], [2, 2, 1, 3]])
_W = torch.tensor([0.0, 1.0, 0.0, 1.0])


def test_weighted_homo():
    data = Data(num_nodes=5, edge_index=_W_EDGES, edge_weight=_W)
    loader = FixedSizeNeighborLoader(data, [1] * 2, 1, input_nodes=torch.tensor([2]),
                                     weight_attr="edge_weight")
    assert len(loader) == 1
    (batch,) = pyg_batches(loader)
    assert batch.num_nodes == 3 and batch.n_id.tolist() == [2, 3, 4]
    assert batch.num_edges == 2
    assert batch.n_id[batch.edge_index].tolist() == [[3, 4], [2, 3]]


def test_weighted_hetero():
    data = HeteroData()
    data["paper"].num_nodes = 5
    data["paper", "to", "paper"].edge_index = _W_EDGES
    data["paper", "to", "paper"].edge_weight = _W
    loader = FixedSizeHeteroNeighborLoader(data, [1] * 2, 1,
                                           input_nodes=("paper", torch.tensor([2])),
                                           weight_attr="edge_weight")
    (batch,) = pyg_batches(loader)
    assert batch["paper"].num_nodes == 3 and batch["paper"].n_id.tolist() == [2, 3, 4]
    assert batch["paper", "to", "paper"].num_edges == 2
    glob = batch["paper"].n_id[batch["paper", "to", "paper"].edge_index]
    assert glob.tolist() == [[3, 4], [2, 3]]


_T_EDGES = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4], [1, 0, 2, 1, 3, 2, 4, 3]])


def test_edge_time_homo():
    data = Data(edge_index=_T_EDGES, edge_time=torch.arange(8), num_nodes=5)
    loader = FixedSizeNeighborLoader(data, [-1, -1], 1, input_time=torch.full((5,), 4),
                                     time_attr="edge_time")
    for batch in pyg_batches(loader):
        assert batch.edge_time.numel() == batch.num_edges
        assert batch.edge_time.numel() == 0 or int(batch.edge_time.max()) <= 4


def test_edge_time_hetero():
    data = HeteroData()
    data["A"].num_nodes = 5
    data["A", "A"].edge_index = _T_EDGES
    data["A", "A"].edge_time = torch.arange(8)
    loader = FixedSizeHeteroNeighborLoader(data, [-1, -1], 1, input_nodes=("A", None),
                                           input_time=torch.full((5,), 4), time_attr="edge_time")
    for batch in pyg_batches(loader):
        store = batch["A", "to", "A"]
        assert store.edge_time.numel() == store.num_edges
        assert store.edge_time.numel() == 0 or int(store.edge_time.max()) <= 4


def test_hetero_input_id_of_a_mask():
    gen = torch.Generator().manual_seed(5)
    data = HeteroData()
    data["a"].num_nodes, data["b"].num_nodes = 10, 12
    row = torch.randint(0, 10, (40,), generator=gen)
    col = torch.randint(0, 12, (40,), generator=gen)
    data["a", "b"].edge_index = torch.stack([row, col])
    data["b", "a"].edge_index = torch.stack([col, row])
    mask = torch.ones(10, dtype=torch.bool)
    mask[0] = False
    loader = FixedSizeHeteroNeighborLoader(data, [2, 2], 2, input_nodes=("a", mask))
    for i, batch in enumerate(pyg_batches(loader)):
        want = [2 * i + 1, 2 * i + 2] if i < 4 else [2 * i + 1]
        assert batch["a"].input_id.tolist() == want


def test_temporal_single_link():
    data = HeteroData()
    for t in "abc":
        data[t].x = torch.arange(10)
    data["b"].time = torch.arange(0, 10)
    data["c"].time = torch.arange(1, 11)
    loop = torch.arange(10).view(1, -1).repeat(2, 1)
    for et in (("a", "to", "b"), ("b", "to", "a"), ("a", "to", "c"), ("c", "to", "a")):
        data[et].edge_index = loop
    loader = FixedSizeHeteroNeighborLoader(data, [-1], 10, input_nodes=("a", None),
                                           time_attr="time", input_time=torch.arange(10))
    batch = pyg_batches(loader)[0]
    assert batch["a"].num_nodes == 10 and batch["b"].num_nodes == 10
    assert batch["c"].num_nodes == 0
