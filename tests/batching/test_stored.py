"""An InMemoryDataset read off its storage: the same sizes, plans and batches
as graph by graph; lazy datasets stream through DataLoader workers."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch_geometric.data import Data, Dataset, InMemoryDataset

from graph_adapter.batching import Budget
from graph_adapter.batching import FixedSizeLoader
from graph_adapter.batching import graph_sizes

SETTINGS = settings(deadline=None)


class Stored(InMemoryDataset):
    """An InMemoryDataset of the given graphs, collated once."""

    def __init__(self, graphs, transform=None):
        super().__init__(None, transform=transform)
        self.data, self.slices = self.collate(graphs)


class Lazy(Dataset):
    """A Dataset that builds each graph on access (as ``OnDiskDataset`` reads one)."""

    def __init__(self, graphs):
        super().__init__(None)
        self.graphs = graphs

    def len(self):
        return len(self.graphs)

    def get(self, i):
        return self.graphs[i].clone()


def make_graphs(sizes, seed=0, explicit_nodes=False):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, (n, e) in enumerate(sizes):
        e = e if n > 0 else 0
        d = Data(edge_index=torch.randint(0, max(n, 1), (2, e), generator=g),
                 edge_attr=torch.randn(e, 2, generator=g),
                 y=torch.randn(1, 1, generator=g), w=torch.tensor(float(i)),
                 smiles=f"C{i}")
        if explicit_nodes:  # no node attribute: PyG stores num_nodes on the side
            d.num_nodes = n
        else:
            d.x = torch.randn(n, 3, generator=g)
        out.append(d)
    return out


def batches(loader):
    return [{k: v.clone() for k, v in b.items()} for b in loader]


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert list(x) == list(y)
        for k in x:  # bit for bit (NaN padding included)
            assert x[k].dtype == y[k].dtype and x[k].shape == y[k].shape, k
            assert torch.equal(x[k].view(torch.uint8) if x[k].is_floating_point() else x[k],
                               y[k].view(torch.uint8) if y[k].is_floating_point() else y[k]), k


sizes_st = st.lists(st.tuples(st.integers(1, 9), st.integers(0, 16)), min_size=2, max_size=40)


@SETTINGS
@given(sizes=sizes_st, explicit=st.booleans(), subset=st.booleans(), seed=st.integers(0, 99))
def test_storage_path_gives_the_batches_of_the_graph_by_graph_path(sizes, explicit, subset,
                                                                    seed):
    ds = Stored(make_graphs(sizes, explicit_nodes=explicit))
    if subset:  # an index view (dataset[perm], shuffle()): rows gathered through indices
        perm = np.random.default_rng(seed).permutation(len(ds))[:max(2, len(ds) // 2)]
        ds = ds[torch.from_numpy(perm)]
    graphs = [ds[i] for i in range(len(ds))]
    np.testing.assert_array_equal(graph_sizes(ds).matrix, graph_sizes(graphs).matrix)
    budget = Budget.fit(ds, 4)
    assert budget == Budget.fit(graphs, 4) and budget.report == Budget.fit(graphs, 4).report
    kw = dict(shuffle=True, seed=seed, exclude=["smiles"])
    fast, slow = FixedSizeLoader(ds, budget, **kw), FixedSizeLoader(graphs, budget, **kw)
    assert fast.collator.scan.from_storage and not slow.collator.scan.from_storage
    assert fast.plan() == slow.plan()
    assert fast.schema == slow.schema
    assert_same(batches(fast), batches(slow))


def test_storage_path_does_not_copy_the_node_features():
    ds = Stored(make_graphs([(3, 4), (5, 2), (2, 0)]))
    scan = FixedSizeLoader(ds, Budget.fit(ds, 2), exclude=["smiles"]).collator.scan
    assert scan.columns["x"].data_ptr() == ds._data.x.data_ptr()
    assert scan.columns["edge_index"].data_ptr() == ds._data.edge_index.data_ptr()


def test_a_transform_reads_graph_by_graph():
    graphs = make_graphs([(3, 4), (5, 2), (2, 0)])
    ds = Stored(graphs, transform=lambda d: d)
    loader = FixedSizeLoader(ds, Budget.fit(ds, 2), exclude=["smiles"])
    assert not loader.collator.scan.from_storage
    assert not FixedSizeLoader(Stored(graphs), Budget.fit(ds, 2), transform=lambda d: d,
                               exclude=["smiles"]).collator.scan.from_storage


@pytest.mark.parametrize("chunk", [1, 2, 1 << 16])
def test_storage_path_names_the_graph_with_a_bad_index(monkeypatch, chunk):
    import graph_adapter.batching._scan as scan

    monkeypatch.setattr(scan, "_RANGE_CHUNK", chunk)  # the range check runs chunk by chunk
    graphs = make_graphs([(3, 4), (5, 2), (2, 3), (4, 4)])
    graphs[2].edge_index[0, 1] = 7  # out of its 2 nodes
    with pytest.raises(ValueError, match=r"dataset index 2: key 'edge_index' has an index "
                                         r"\[7, \d\] .*\[0, 2\)"):
        FixedSizeLoader(Stored(graphs), Budget(nodes=40, edges=41, graphs=4), exclude=["smiles"])


def test_lazy_dataset_streams_through_workers():
    graphs = make_graphs([(1 + i % 7, i % 11) for i in range(60)])
    lazy = Lazy(graphs)
    budget = Budget.fit(lazy, 8)
    kw = dict(shuffle=True, seed=3, exclude=["smiles"])
    ref = batches(FixedSizeLoader(graphs, budget, **kw))
    streamed = FixedSizeLoader(lazy, budget, columnar=False, num_workers=2, **kw)
    assert not streamed.collator.scan.from_storage
    assert_same(batches(streamed), ref)
