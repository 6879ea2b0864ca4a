"""PyG's own test objects (those of its ``test/data/test_batch.py`` and ``test_data.py``,
rebuilt here): each round-trips through ``flatten`` / ``unflatten`` exactly (class, keys,
tensors with their subclass and metadata, non-tensor values, ``num_graphs``,
``to_data_list()``), and through ``FixedSizeLoader`` where a padded batch can hold it,
or is refused by name for the reason ``docs/errors.md`` gives.
"""
import dataclasses
import warnings

import pytest
import torch
from torch_geometric import EdgeIndex, Index
from torch_geometric.data import Batch, Data, HeteroData

import graph_adapter as ga
from graph_adapter.format import Spec, SpecFormatError, UnsupportedAttributeError, unpad_batch
from strategies import PairData  # PyG's recipe, shared


def _gen():
    return torch.Generator().manual_seed(0)


def _edges(g, n_src, n_dst, e):
    return torch.stack([torch.randint(0, n_src, (e,), generator=g),
                        torch.randint(0, n_dst, (e,), generator=g)])


def _ring(n):
    return torch.stack([torch.arange(n), torch.arange(n).roll(1)])


class NewDimData(Data):
    """``foo`` is stacked on a new leading dim (``__cat_dim__`` None), as PyG allows."""

    def __cat_dim__(self, key, value, *args, **kwargs):
        return None if key == "foo" else super().__cat_dim__(key, value, *args, **kwargs)


class BipartiteData(Data):
    """A bipartite ``edge_index`` incremented per row by a tensor ``[[n_s], [n_t]]``."""

    def __inc__(self, key, value, *args, **kwargs):
        if key == "edge_index":
            return torch.tensor([[self.x_s.size(0)], [self.x_t.size(0)]])
        return super().__inc__(key, value, *args, **kwargs)


class ConstIncData(Data):
    def __inc__(self, key, value, *args, **kwargs):
        return 2


def _basic(i, n):
    """Nodes with 1-D features, an int label, a str and a list of str (test_batch_basic)."""
    return Data(x=torch.arange(1.0, n + 1), y=i, edge_index=_ring(n), string=str(i),
                array=[str(j) for j in range(n)], num_nodes=n)


def _hetero(g, p, a):
    h = HeteroData()
    h["p"].x = torch.randn(p, 8, generator=g)
    h["a"].x = torch.randn(a, 8, generator=g)
    h["p", "a"].edge_index = _edges(g, p, a, 3 * p)
    h["p", "a"].edge_attr = torch.randn(3 * p, 4, generator=g)
    h["a", "p"].edge_index = _edges(g, a, p, 2 * a)
    h["a", "p"].edge_attr = torch.randn(2 * a, 4, generator=g)
    return h


def _recursive(g, n):
    """A dict of feature tensors and a list of edge indices (test_recursive_batch)."""
    return Data(x={"1": torch.randn(n // 3, 4, generator=g), "2": torch.randn(2 * n // 3, 6, generator=g)},
                edge_index=[_edges(g, n, n, 5), _edges(g, n, n, 7)], num_nodes=n)


def _nested_follow(g, k):
    return Data(xs=[torch.rand(k, 3, generator=g), torch.rand(k + 7, 4, generator=g)],
                a={"aa": torch.rand(2 * k, 3, generator=g)}, x=torch.rand(k + 6, 5, generator=g))


def _pair(g):
    return PairData(x_s=torch.randn(5, 16, generator=g), edge_index_s=torch.tensor([[0] * 4, [1, 2, 3, 4]]),
                    x_t=torch.randn(4, 16, generator=g), edge_index_t=torch.tensor([[0] * 3, [1, 2, 3]]))


def _time(g):
    """An edge-level ``time`` (test_data_time_handling)."""
    return Data(x=torch.randn(4, 12, generator=g), edge_index=_edges(g, 4, 4, 8),
                edge_attr=torch.rand(8, 16, generator=g), time=torch.arange(8), num_nodes=4)


def _weighted():
    """Integer node features, a one-row y, an integer edge_weight (test_data_subgraph)."""
    ei = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4], [1, 0, 2, 1, 3, 2, 4, 3]])
    return Data(x=torch.arange(5), y=torch.tensor([0.0]), edge_index=ei,
                edge_weight=torch.arange(8), num_nodes=5)


def _list_field():
    """A per-node Python list (test_data_subgraph_with_list_field)."""
    return Data(x=torch.arange(5), y=list(range(5)),
                edge_index=torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4], [1, 0, 2, 1, 3, 2, 4, 3]]))


#: name -> the object (built anew for each test)
ROUND_TRIPS = {
    "basic graph": lambda g: _basic(1, 3),
    "repeated edges (test_data)": lambda g: Data(x=torch.tensor([[1.0, 3, 5], [2, 4, 6]]).t(),
                                                 edge_index=torch.tensor([[0, 0, 1, 1, 2], [1, 1, 0, 2, 1]])),
    "integer edge_weight, batched": lambda g: Batch.from_data_list([_weighted(), _weighted()]),
    "a per-node list, batched": lambda g: Batch.from_data_list([_list_field(), _list_field()]),
    "no faces, num_nodes only (test_debug_data)": lambda g: Data(face=torch.zeros((3, 0), dtype=torch.long), num_nodes=10),
    "pos only, batched": lambda g: Batch.from_data_list([Data(pos=torch.randn(5, 3, generator=g), num_nodes=5),
                                                          Data(pos=torch.randn(4, 3, generator=g), num_nodes=4)]),
    "basic batch of one": lambda g: Batch.from_data_list([_basic(1, 3)]),
    "basic batch, follow_batch on a str": lambda g: Batch.from_data_list(
        [_basic(1, 3), _basic(2, 2), _basic(3, 4)], follow_batch=["string"]),
    "Index": lambda g: Batch.from_data_list(
        [Data(index=Index([0, 1, 1, 2], dim_size=3, is_sorted=True), num_nodes=3),
         Data(index=Index([0, 1, 1, 2, 2, 3], dim_size=4, is_sorted=True), num_nodes=4)]),
    "EdgeIndex": lambda g: Batch.from_data_list(
        [Data(edge_index=EdgeIndex([[0, 1, 1, 2], [1, 0, 2, 1]], sparse_size=(3, 3),
                                   sort_order="row", is_undirected=True)),
         Data(edge_index=EdgeIndex([[1, 0, 2, 1, 3, 2], [0, 1, 1, 2, 2, 3]], sparse_size=(4, 4),
                                   sort_order="col"))]),
    "new dim (__cat_dim__ None)": lambda g: Batch.from_data_list(
        [NewDimData(x=torch.tensor([1.0, 2, 3]), foo=torch.randn(4, generator=g), y=torch.tensor(1)),
         NewDimData(x=torch.tensor([1.0, 2]), foo=torch.randn(4, generator=g), y=torch.tensor(2))]),
    "batch of four (test_pickling)": lambda g: Batch.from_data_list([Data(x=torch.randn(5, 16, generator=g))] * 4),
    "recursive (dict and list of tensors)": lambda g: Batch.from_data_list([_recursive(g, 9), _recursive(g, 12)]),
    "batch of batches": lambda g: Batch.from_data_list(
        [Batch.from_data_list([Data(x=torch.randn(2, 16, generator=g))] * 2)] * 2),
    "hetero graph": lambda g: _hetero(g, 10, 20),
    "bipartite, a tensor __inc__": lambda g: Batch.from_data_list(
        [BipartiteData(x_s=torch.randn(n, 2, generator=g), x_t=torch.randn(n + 1, 2, generator=g),
                       edge_index=_edges(g, n, n + 1, 2 * n), num_nodes=n) for n in (3, 4)]),
    "hetero batch": lambda g: Batch.from_data_list([_hetero(g, 10, 20), _hetero(g, 5, 10)]),
    "PairData": lambda g: Batch.from_data_list([_pair(g), _pair(g)]),
    "PairData, follow_batch": lambda g: Batch.from_data_list([_pair(g), _pair(g)],
                                                             follow_batch=["x_s", "x_t"]),
    "empty list attribute": lambda g: Batch.from_data_list(
        [Data(x=torch.randn(4, 1, generator=g), edge_index=_ring(4), nontensor=[])] * 2),
    "nested follow_batch (list and dict)": lambda g: Batch.from_data_list(
        [_nested_follow(g, 4), _nested_follow(g, 5), _nested_follow(g, 6)], follow_batch=["xs", "a"]),
    "face, no node tensor": lambda g: Data(num_nodes=4, face=torch.tensor([[0, 1], [1, 2], [2, 3]])),
    "faces, batched": lambda g: Batch.from_data_list(
        [Data(pos=torch.randn(4, 3, generator=g), face=torch.tensor([[0, 1], [1, 2], [2, 3]])),
         Data(pos=torch.randn(5, 3, generator=g), face=torch.tensor([[0], [1], [4]]))]),
    "a str only": lambda g: Data(title="test"),
    "empty Data": lambda g: Data(),
    "no edges, num_nodes only": lambda g: Data(edge_index=torch.zeros((2, 0), dtype=torch.long), num_nodes=10),
    "edge-level time": _time,
    "edge-level time, batched": lambda g: Batch.from_data_list([_time(g), _time(g)]),
    "two attributes of one tensor": lambda g: (lambda x: Data(x=x, attribute=x))(torch.randn(3, 2, generator=g)),
    "0-d y (test_data_empty_subgraph)": lambda g: Data(x=torch.arange(5), y=torch.tensor(0.0)),
    "1-d edge_attr": lambda g: Data(edge_index=torch.tensor([[0, 1], [1, 0]]), edge_attr=torch.randn(2, generator=g), num_nodes=2),
}


def _same(a, b, where):
    """``a`` and ``b`` are the same value: tensors of one class, dtype and content (and
    Index / EdgeIndex metadata), containers of the same such values."""
    if isinstance(a, torch.Tensor):
        assert type(b) is type(a), where
        assert b.dtype == a.dtype and torch.equal(b.as_subclass(torch.Tensor), a.as_subclass(torch.Tensor)), where
        if isinstance(a, Index):
            assert (b.dim_size, b.is_sorted) == (a.dim_size, a.is_sorted), where
        if isinstance(a, EdgeIndex):
            assert (b.sparse_size(), b.sort_order, b.is_undirected) == \
                (a.sparse_size(), a.sort_order, a.is_undirected), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(b) == list(a), where
        for k in a:
            _same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(b) is type(a) and len(b) == len(a), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert b == a and type(b) is type(a), where


def _stores(obj):
    return [(tuple(s._key) if getattr(s, "_key", None) is not None else (), s)
            for s in obj.stores] if isinstance(obj, HeteroData) else [((), obj)]


def _equal(orig, back, where):
    assert type(back) is type(orig), where
    assert [k for k, _ in _stores(back)] == [k for k, _ in _stores(orig)], where
    for (k, so), (_, sb) in zip(_stores(orig), _stores(back)):
        assert sorted(sb.keys()) == sorted(so.keys()), (where, k)
        for attr in so.keys():
            _same(so[attr], sb[attr], f"{where} {k} {attr!r}")
    if isinstance(orig, Batch):
        assert back.num_graphs == orig.num_graphs, where
        for i, (o, b) in enumerate(zip(orig.to_data_list(), back.to_data_list(), strict=True)):
            _equal(o, b, f"{where} graph {i}")


@pytest.mark.parametrize("name", list(ROUND_TRIPS))
def test_pygs_objects_round_trip(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyG's own num_nodes inference notes
        orig = ROUND_TRIPS[name](_gen())
        flat, spec = ga.flatten(orig)
        _equal(orig, ga.unflatten(flat, spec), name)
        # and through the spec's JSON (what a process that did not flatten reads)
        again = Spec.from_json(spec.to_json(), allow_modules=[__name__])
        _equal(orig, ga.unflatten(flat, again), name + " (from JSON)")
    assert all(isinstance(v, torch.Tensor) for v in flat.values())


def test_recursive_attributes_keep_their_per_graph_slices():
    """PyG collates a dict / list of tensors recursively; its slices (lists and dicts of
    offsets in the spec) give each graph its own part back."""
    orig = ROUND_TRIPS["nested follow_batch (list and dict)"](_gen())
    back = ga.unflatten(*ga.flatten(orig))
    assert [t.shape for t in back.xs] == [t.shape for t in orig.xs]
    assert [t.tolist() for t in back.xs_batch] == [t.tolist() for t in orig.xs_batch]
    assert [d.a["aa"].shape[0] for d in back.to_data_list()] == [8, 10, 12]


def test_a_bad_offset_inside_a_recursive_slice_is_named():
    """The spec checks every offset list of a recursive attribute, by its path."""
    _, spec = ga.flatten(ROUND_TRIPS["nested follow_batch (list and dict)"](_gen()))
    good = '{"__tensor__":"int64","data":[0,11,23,36],"shape":[4]}'
    assert good in spec.batch_info
    for bad, what in (('{"__tensor__":"int64","data":[0,11,23],"shape":[3]}', "4 rows"),
                      ('{"__tensor__":"int64","data":[0,23,11,36],"shape":[4]}', "never decreasing")):
        with pytest.raises(SpecFormatError, match=rf"slice_dict\['xs'\]\[1\].*{what}"):
            dataclasses.replace(spec, batch_info=spec.batch_info.replace(good, bad))


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr, torch.sparse_csc])
def test_torch_sparse_tensors_are_refused_by_name(layout):
    """test_torch_sparse_batch / test_batch_with_torch_coo_tensor: no fixed shape of
    stored values (nnz varies), so no key of the flat dict; ``.to_dense()`` is the way."""
    adj = torch.sparse_coo_tensor(torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]), torch.rand(4),
                                  (3, 3)).to_sparse(layout=layout)
    x = torch.randn(3, 4).to_sparse(layout=layout)
    for obj, key in ((Data(x=torch.randn(3, 4), adj=adj), "'adj'"),
                     (Batch.from_data_list([Data(x=x)] * 2), "'x'")):
        with pytest.raises(UnsupportedAttributeError, match=rf"{key}: sparse tensors .*\.to_dense\(\)"):
            ga.flatten(obj)


def test_nested_tensors_are_refused_by_name():
    """test_torch_nested_batch: a nested tensor has no fixed shape."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's prototype note
        xs = [torch.nested.nested_tensor([torch.randn(3), torch.randn(4)]),
              torch.nested.nested_tensor([torch.randn(3), torch.randn(4), torch.randn(5)])]
    batch = Batch.from_data_list([ConstIncData(x=xs[0]), ConstIncData(x=xs[1])])
    for obj in (ConstIncData(x=xs[0]), batch):
        with pytest.raises(UnsupportedAttributeError, match=r"'x' is a nested tensor.*to_padded_tensor"):
            ga.flatten(obj)


# ---------------------------------------------------------------------------
# The same objects' graphs through FixedSizeLoader
# ---------------------------------------------------------------------------
#: name -> (graphs, the keys left out with a warning)
LOADED = {
    "basic": (lambda g: [_basic(1, 3), _basic(2, 2), _basic(3, 4)], {"y", "string", "array"}),
    "repeated edges (test_data)": (lambda g: [Data(x=torch.randn(3, 2, generator=g),
                                                    edge_index=torch.tensor([[0, 0, 1, 1, 2], [1, 1, 0, 2, 1]]))] * 2, set()),
    "integer edge_weight": (lambda g: [_weighted(), _weighted()], set()),
    "a per-node list": (lambda g: [_list_field(), _list_field()], {"y"}),
    "pos only": (lambda g: [Data(pos=torch.randn(n, 3, generator=g), num_nodes=n) for n in (5, 4)], set()),
    "EdgeIndex": (lambda g: [Data(edge_index=EdgeIndex([[0, 1, 1, 2], [1, 0, 2, 1]], sparse_size=(3, 3)), num_nodes=3),
                             Data(edge_index=EdgeIndex([[1, 0, 2, 1], [0, 1, 1, 2]], sparse_size=(4, 4)), num_nodes=4)], set()),
    "new dim (__cat_dim__ None)": (lambda g: [NewDimData(x=torch.randn(3, generator=g), foo=torch.randn(4, generator=g)),
                                              NewDimData(x=torch.randn(2, generator=g), foo=torch.randn(4, generator=g))], {"foo"}),
    "features only": (lambda g: [Data(x=torch.randn(5, 16, generator=g)) for _ in range(4)], set()),
    "recursive (dict and list of tensors)": (lambda g: [_recursive(g, 9), _recursive(g, 12)], {"x", "edge_index"}),
    "hetero": (lambda g: [_hetero(g, 10, 20), _hetero(g, 5, 10)], set()),
    "empty list attribute": (lambda g: [Data(x=torch.randn(4, 1, generator=g), edge_index=_ring(4), nontensor=[])] * 2, {"nontensor"}),
    "nested follow_batch (list and dict)": (lambda g: [_nested_follow(g, 4), _nested_follow(g, 5)], {"xs", "a"}),
    "sparse features": (lambda g: [Data(x=torch.randn(3, 1, generator=g).to_sparse_coo()),
                                   Data(x=torch.randn(2, 1, generator=g).to_sparse_coo())], {"x"}),
    "a str": (lambda g: [Data(title="test", x=torch.randn(2, 1, generator=g))] * 2, {"title"}),
    "edge-level time": (lambda g: [_time(g) for _ in range(3)], set()),
    "0-d y": (lambda g: [Data(x=torch.arange(5), y=torch.tensor(float(i))) for i in range(3)], set()),
    "1-d edge_attr": (lambda g: [Data(edge_index=torch.tensor([[0, 1], [1, 0]]), edge_attr=torch.randn(2, generator=g),
                                      num_nodes=2) for _ in range(3)], set()),
    "no edges": (lambda g: [Data(edge_index=torch.zeros((2, 0), dtype=torch.long), num_nodes=n) for n in (10, 3)], set()),
}


def _plain(v):
    return v.as_subclass(torch.Tensor) if isinstance(v, torch.Tensor) else v


@pytest.mark.parametrize("name", list(LOADED))
def test_pygs_graphs_through_the_loader_unpad_to_the_originals(name):
    make, left_out = LOADED[name]
    graphs = make(_gen())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ld = ga.FixedSizeLoader(graphs, ga.Budget.tight(graphs, 2))
        back = [d for item in ld for d in unpad_batch(item, ld.schema)]
    assert set(ld.excluded_keys) == left_out
    for k in left_out:  # never silently: the warning names each key left out
        assert any(repr(k) in str(w.message) for w in caught), k
    assert len(back) == len(graphs)
    for i, (o, b) in enumerate(zip(graphs, back)):
        for (skey, so), (_, sb) in zip(_stores(o), _stores(b)):
            kept = sorted(a for a in so.keys() if a not in left_out and a != "num_nodes")
            assert sorted(a for a in sb.keys() if a != "num_nodes") == kept, (name, i, skey)
            for a in kept:
                assert torch.equal(_plain(sb[a]), _plain(so[a])), (name, i, skey, a)
        assert b.num_nodes == o.num_nodes, (name, i)


@pytest.mark.parametrize("make, key", [
    # PyG's face [3, F]: cat dim -1, incremented by the node count; F is neither level
    (lambda: [Data(pos=torch.randn(4, 3), face=torch.tensor([[0, 1], [1, 2], [2, 3]])),
              Data(pos=torch.randn(5, 3), face=torch.tensor([[0], [1], [4]]))], "'face'"),
    # an Index of its own length (test_index), incremented by the node count
    (lambda: [Data(index=Index([0, 1, 1, 2], dim_size=3), num_nodes=3),
              Data(index=Index([0, 1, 1, 2, 2, 3], dim_size=4), num_nodes=4)], "'index'"),
])
def test_keys_of_no_level_are_refused_by_name_through_the_loader(make, key):
    """A key whose rows are neither the graph's nodes, its edges nor one row a graph has no
    slot in a fixed-size batch: refused naming it (``flatten`` keeps it, above)."""
    graphs = make()
    with pytest.raises(ValueError, match=rf"key {key}"):
        ga.FixedSizeLoader(graphs, ga.Budget(nodes=12, edges=11, graphs=3))
