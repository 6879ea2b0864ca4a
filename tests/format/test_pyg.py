"""graph_adapter.format.pyg: each helper agrees with PyG's public behaviour.

If a PyG release renames one of the internals behind these helpers, the test
of that helper fails here, not somewhere inside a loader or a compiled forward.
"""
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Batch, Data, HeteroData, InMemoryDataset

from graph_adapter.format import pyg


def _graphs(sizes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [Data(x=torch.randn(n, 2, generator=g),
                 edge_index=torch.randint(0, n, (2, 2 * n), generator=g)) for n in sizes]


def test_global_store_is_the_store_of_the_public_attributes():
    d = _graphs([3])[0]
    assert pyg.global_store(d)["x"] is d.x
    h = HeteroData()
    h["paper"].x = torch.zeros(2, 1)
    h.y = torch.ones(1)
    assert pyg.global_store(h)["y"] is h.y and "x" not in pyg.global_store(h)


def test_store_mapping_reads_and_writes_the_attributes():
    d = _graphs([4])[0]
    m = pyg.store_mapping(pyg.global_store(d))
    assert set(m) == set(d.keys())
    m["z"] = torch.arange(4)
    assert torch.equal(d.z, torch.arange(4))


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=5))
def test_collate_info_round_trips_to_data_list(sizes):
    b = Batch.from_data_list(_graphs(sizes))
    slice_dict, inc_dict = pyg.collate_info(b)
    assert slice_dict is not None and inc_dict is not None
    c = Batch(x=b.x, edge_index=b.edge_index, batch=b.batch, ptr=b.ptr)
    assert pyg.collate_info(c) == (None, None)
    pyg.set_collate_info(c, slice_dict, inc_dict)
    pyg.set_num_graphs(c, len(sizes))
    assert c.num_graphs == len(sizes)
    for a, r in zip(b.to_data_list(), c.to_data_list()):
        assert torch.equal(a.x, r.x) and torch.equal(a.edge_index, r.edge_index)


def test_graph_num_nodes_is_the_per_graph_count_pyg_keeps():
    g = [Data(num_nodes=n) for n in (2, 5)]
    b = Batch.from_data_list(g)
    store = pyg.global_store(b)
    assert pyg.graph_num_nodes(store) == [2, 5]
    c = Batch.from_data_list([Data(num_nodes=1)])
    pyg.set_graph_num_nodes(pyg.global_store(c), [7])
    assert pyg.graph_num_nodes(pyg.global_store(c)) == [7]
    assert pyg.graph_num_nodes(pyg.global_store(_graphs([3])[0])) is None


def test_typed_stores_are_the_node_and_edge_stores():
    h = HeteroData()
    h["a"].x = torch.zeros(2, 1)
    h["a", "r", "a"].edge_index = torch.zeros(2, 1, dtype=torch.long)
    nodes, edges = pyg.typed_stores(h)
    assert list(nodes) == h.node_types and list(edges) == h.edge_types
    assert nodes["a"] is h["a"]


class _Set(InMemoryDataset):
    def __init__(self, graphs):
        super().__init__(None)
        self.data, self.slices = self.collate(graphs)


def test_in_memory_data_and_indices_are_the_collated_rows_and_the_view():
    graphs = _graphs([2, 3, 4])
    ds = _Set(graphs)
    assert torch.equal(pyg.in_memory_data(ds).x, torch.cat([g.x for g in graphs]))
    assert pyg.dataset_indices(ds) is None
    view = ds[[2, 0]]
    assert list(pyg.dataset_indices(view)) == [2, 0] == list(view.indices())


def test_made_from_rides_on_the_rebuilt_batch_not_among_its_attributes():
    from graph_adapter.format import flatten, unflatten

    b = Batch.from_data_list(_graphs([2, 3]))
    flat, spec = flatten(b)
    out = unflatten(flat, spec)
    assert pyg.made_from(out) is spec and pyg.made_from(b) is None
    assert set(out.keys()) == set(b.keys())
    pyg.set_made_from(b, spec)
    assert pyg.made_from(b) is spec and "_graph_adapter_spec" not in b.keys()
