"""Where a sampled batch's rows come from (graph_adapter.sampling.inputs.source): numpy arrays and
memmaps gathered like tensors by every loader, nothing left out without one warning, a
graph's own ``n_id`` / ``e_id`` kept as PyG keeps it, and graphs whose edges are ``adj_t``
or absent (PyG's ``to_csc``)."""
from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data, HeteroData

from graph_adapter.sampling import (ExcludedAttributeWarning, FixedSizeClusterLoader,
                                    FixedSizeHeteroNeighborLoader, FixedSizeLinkNeighborLoader,
                                    FixedSizeNeighborLoader, GraphStructureError,
                                    ReservedAttributeError, pad_sample)
from graph_adapter.sampling.inputs.source import NumpyRows, gather_rows, rows_of


def _graph(n: int, m: int, seed: int) -> Data:
    g = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(n, 3, generator=g), y=torch.randint(0, 4, (n,), generator=g),
                edge_index=torch.randint(0, n, (2, m), generator=g),
                edge_attr=torch.randn(m, 2, generator=g))


def _as_numpy(data: Data, tmp_path, memmap: bool) -> Data:
    """The same graph with ``x`` and ``edge_attr`` as numpy arrays (memmaps on disk)."""
    out = Data(edge_index=data.edge_index, y=data.y)
    for k in ("x", "edge_attr"):
        a = data[k].numpy()
        if memmap:
            mm = np.memmap(tmp_path / f"{k}.bin", dtype=a.dtype, mode="w+", shape=a.shape)
            mm[:] = a
            mm.flush()
            a = np.memmap(tmp_path / f"{k}.bin", dtype=a.dtype, mode="r", shape=a.shape)
        out[k] = a
    return out


def _same_batches(a, b) -> None:
    for fa, fb in zip(a, b, strict=True):
        assert list(fa) == list(fb)
        for k in fa:
            assert fa[k].dtype == fb[k].dtype and torch.equal(fa[k], fb[k]), k


@settings(max_examples=12)
@given(n=st.integers(4, 40), m=st.integers(0, 120), seed=st.integers(0, 10 ** 6),
       memmap=st.booleans(), kind=st.sampled_from(["node", "link", "cluster"]))
def test_numpy_and_memmap_features_give_the_tensor_graphs_batches(tmp_path_factory, n, m,
                                                                   seed, memmap, kind):
    data = _graph(n, m, seed)
    other = _as_numpy(data, tmp_path_factory.mktemp("mm"), memmap)
    if kind == "link" and m == 0:
        return

    def make(d, **kw):
        if kind == "node":
            return FixedSizeNeighborLoader(d, [3, 2], batch_size=5, **kw)
        if kind == "link":
            return FixedSizeLinkNeighborLoader(d, [2], batch_size=4, **kw)
        return FixedSizeClusterLoader(d, batch_size=2, partition=torch.arange(n) % 3, **kw)

    with warnings.catch_warnings():
        warnings.simplefilter("error", ExcludedAttributeWarning)  # nothing is left out
        ref = make(data)
        got = make(other, budget=ref.budget)
    assert got.excluded_keys == ref.excluded_keys == {}
    _same_batches(ref, got)


def test_hetero_numpy_features_are_gathered(tmp_path):
    h = HeteroData()
    h["a"].x = torch.randn(20, 4)
    h["b"].x = torch.randn(15, 2)
    h["a", "to", "b"].edge_index = torch.stack([torch.randint(0, 20, (60,)),
                                                torch.randint(0, 15, (60,))])
    h["b", "to", "a"].edge_index = h["a", "to", "b"].edge_index.flip(0)
    h["a", "to", "b"].w = torch.randn(60)
    ref = FixedSizeHeteroNeighborLoader(h, [3, 3], 4, input_nodes="a")
    mm = np.memmap(tmp_path / "a.bin", dtype=np.float32, mode="w+", shape=(20, 4))
    mm[:] = h["a"].x.numpy()
    h2 = h.clone()
    h2["a"].x = mm
    h2["a", "to", "b"].w = h["a", "to", "b"].w.numpy()
    got = FixedSizeHeteroNeighborLoader(h2, [3, 3], 4, input_nodes="a", budget=ref.budget)
    assert got.excluded_keys == {}
    _same_batches(ref, got)


def test_memmap_rows_read_only_the_batch_and_pickle_as_the_file(tmp_path):
    mm = np.memmap(tmp_path / "x.bin", dtype=np.float32, mode="w+", shape=(10_000, 64))
    mm[:] = 1.0
    rows = rows_of(mm)
    assert isinstance(rows, NumpyRows) and rows.shape == (10_000, 64)
    blob = pickle.dumps(rows)
    assert len(blob) < 2_000  # the file name, not 2.5 MB of rows
    back = pickle.loads(blob)
    idx = torch.tensor([5, 9_999, 0])
    assert torch.equal(back.gather(idx), torch.from_numpy(np.asarray(mm[[5, 9_999, 0]])))
    padded = gather_rows({"x": back}, idx, rows=7)["x"]
    assert padded.shape == (7, 64) and bool((padded[3:] == 0).all())


def test_memmap_features_in_worker_processes(tmp_path):
    data = _graph(60, 200, 0)
    other = _as_numpy(data, tmp_path, memmap=True)
    ref = FixedSizeNeighborLoader(data, [3, 2], batch_size=16)
    got = FixedSizeNeighborLoader(other, [3, 2], batch_size=16, budget=ref.budget, num_workers=2)
    _same_batches(ref, got)


def test_unusable_numpy_dtypes_and_other_values_are_warned_once_by_name():
    data = _graph(30, 90, 1)
    data.names = np.array(["a"] * 30, dtype=object)  # no torch dtype
    data.title = "a graph"
    data.g = torch.ones(1, 5)  # graph-level
    with pytest.warns(ExcludedAttributeWarning) as rec:
        L = FixedSizeNeighborLoader(data, [2], batch_size=8)
    assert len([w for w in rec if w.category is ExcludedAttributeWarning]) == 1
    msg = str(rec[0].message)
    for k, kind in (("names", "ndarray[object]"), ("title", "str"), ("g", "Tensor")):
        assert repr(k) in msg and kind in msg and k in L.excluded_keys
    assert "torch.as_tensor" in msg and "ExcludedAttributeWarning" in msg
    with warnings.catch_warnings():
        warnings.simplefilter("error", ExcludedAttributeWarning)
        for _ in range(2):  # once per loader: iterating warns no more
            for b in L:
                assert "names" not in b and "title" not in b
    assert set(L.stats.excluded_keys) == {"names", "title", "g"}


def test_hetero_excluded_attributes_warn_once_naming_the_store():
    h = HeteroData()
    h["a"].x = torch.randn(10, 2)
    h["a"].tag = "x"
    h["a", "to", "a"].edge_index = torch.randint(0, 10, (2, 30))
    with pytest.warns(ExcludedAttributeWarning, match="'a/tag'"):
        L = FixedSizeHeteroNeighborLoader(h, [2], 4, input_nodes="a")
    assert "a/tag" in L.excluded_keys


@settings(max_examples=10)
@given(n=st.integers(3, 30), m=st.integers(0, 80), seed=st.integers(0, 999))
@example(n=5, m=5, seed=0)  # as many edges as nodes: n_id / e_id told apart by name
def test_a_graphs_own_n_id_and_e_id_fill_those_keys_as_in_pyg(n, m, seed):
    """PyG's loaders set ``n_id`` / ``e_id`` only where the graph has none: a graph's own
    are gathered by row; padding rows keep ``pad_id``."""
    data = _graph(n, m, seed)
    ref = FixedSizeNeighborLoader(data, [2, 2], batch_size=4)
    own = data.clone()
    own.n_id = torch.arange(n) * 10 + 7
    own.e_id = torch.arange(m) + 1000
    got = FixedSizeNeighborLoader(own, [2, 2], batch_size=4, budget=ref.budget, pad_id=-5)
    for a, b in zip(ref, got, strict=True):
        nm, em = a["node_mask"], a["edge_mask"]
        assert torch.equal(b["n_id"][nm], own.n_id[a["n_id"][nm]])
        assert torch.equal(b["e_id"][em], own.e_id[a["e_id"][em]])
        assert bool((b["n_id"][~nm] == -5).all()) and bool((b["e_id"][~em] == -5).all())
        assert torch.equal(a["x"], b["x"])


def test_cluster_loader_keeps_a_graphs_n_id_as_pygs_cluster_data():
    # PyG's test_cluster.py builds Data(n_id=arange(6), ...) and reads out.n_id back
    data = _graph(6, 20, 3)
    data.n_id = torch.arange(6)
    L = FixedSizeClusterLoader(data, batch_size=1, partition=torch.tensor([0, 1, 0, 1, 0, 1]))
    b = next(iter(L))
    real = b["n_id"][b["node_mask"]]
    assert real.tolist() == [0, 2, 4] and torch.equal(b["x"][b["node_mask"]], data.x[real])


def test_hetero_store_n_id_kept():
    h = HeteroData()
    h["a"].x = torch.randn(10, 2)
    h["a"].n_id = torch.arange(10) + 100
    h["a", "to", "a"].edge_index = torch.randint(0, 10, (2, 30))
    b = next(iter(FixedSizeHeteroNeighborLoader(h, [2], 4, input_nodes="a", pad_id=-1)))
    m = b["a/node_mask"]
    assert bool((b["a/n_id"][m] >= 100).all()) and bool((b["a/n_id"][~m] == -1).all())
    assert torch.equal(b["a/x"][m], h["a"].x[b["a/n_id"][m] - 100])


@pytest.mark.parametrize("value", [torch.randn(12), torch.zeros(12, 2, dtype=torch.long),
                                   torch.zeros(3, dtype=torch.long)])
def test_an_n_id_that_is_not_one_int_per_node_is_refused_by_name(value):
    data = _graph(12, 30, 0)
    data.n_id = value
    with pytest.raises(ReservedAttributeError, match=r"'n_id'.*rename it"):
        FixedSizeNeighborLoader(data, [2], batch_size=4)


def test_other_reserved_names_are_still_refused():
    data = _graph(12, 30, 0)
    data.seed_mask = torch.ones(12, dtype=torch.bool)
    with pytest.raises(ReservedAttributeError, match="seed_mask"):
        FixedSizeNeighborLoader(data, [2], batch_size=4)


def test_pad_sample_still_takes_plain_tensors():
    data = _graph(10, 30, 0)
    L = FixedSizeNeighborLoader(data, [2], batch_size=3)
    s = L.sample(L.chunk_seeds(0, 0), 0, 0)
    flat = pad_sample(s, L.budget, {"x": data.x}, {"edge_attr": data.edge_attr}, 3)
    assert torch.equal(flat["x"][:s.num_nodes], data.x[s.n_id])


# -- what a loader samples from: adj_t, no edges ----------------------------------
def test_adj_t_as_a_torch_sparse_tensor_samples_its_stored_entries():
    """PyG's ``to_csc`` reads ``adj_t``'s CSR (rows: destinations); ``e_id`` is the stored
    entry's position, as PyG's sampler gives it (no permutation)."""
    data = _graph(25, 80, 4)
    ei = torch.unique(data.edge_index, dim=1)
    order = torch.argsort(ei[1] * 25 + ei[0])  # the CSR order of adj_t (dst, then src)
    ei = ei[:, order]
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(ei[1], minlength=25).cumsum(0)])
    adj_t = torch.sparse_csr_tensor(ptr, ei[0], torch.ones(ei.size(1)), size=(25, 25))
    ref = FixedSizeNeighborLoader(Data(x=data.x, edge_index=ei), [3, 3], batch_size=6)
    got = FixedSizeNeighborLoader(Data(x=data.x, adj_t=adj_t), [3, 3], batch_size=6,
                                  budget=ref.budget)
    _same_batches(ref, got)


@pytest.mark.needs_scatter
def test_adj_t_as_torch_sparse_sparse_tensor():
    from torch_sparse import SparseTensor

    data = _graph(25, 80, 5)
    adj_t = SparseTensor.from_edge_index(data.edge_index, sparse_sizes=(25, 25)).t()
    row, col, _ = adj_t.coo()  # stored order: rows are destinations
    ref = FixedSizeNeighborLoader(Data(x=data.x, edge_index=torch.stack([col, row])), [3, 3],
                                  batch_size=6)
    got = FixedSizeNeighborLoader(Data(x=data.x, adj_t=adj_t), [3, 3], batch_size=6,
                                  budget=ref.budget)
    _same_batches(ref, got)


def test_a_graph_without_edges_samples_its_seeds_with_a_warning():
    data = Data(x=torch.randn(9, 2))
    with pytest.warns(UserWarning, match="no edges .*seeds only"):
        L = FixedSizeNeighborLoader(data, [3], batch_size=4)
    for b in L:
        assert int(b["edge_mask"].sum()) == 0
        assert int(b["node_mask"].sum()) == int(b["seed_mask"].sum())


def test_nothing_to_count_nodes_by_is_a_named_error():
    with pytest.raises(GraphStructureError, match="num_nodes"):
        FixedSizeNeighborLoader(Data(), [3], batch_size=4)


def test_an_unreadable_adj_t_is_a_named_error():
    data = Data(x=torch.randn(5, 2), adj_t=torch.ones(5, 5))
    with pytest.raises(GraphStructureError, match="adj_t.*SparseTensor"):
        FixedSizeNeighborLoader(data, [3], batch_size=2)


@pytest.mark.parametrize("dtype", ["f2", "i1", "u1", "?", "u2", "u4", "f8", "i4", ">f4", "c8"])
def test_gather_rows_keeps_every_numpy_dtype_torch_has(dtype):
    a = (np.arange(20).reshape(5, 4) % 3).astype(dtype)
    got = gather_rows({"a": rows_of(a)}, torch.tensor([3, 0, 2]), rows=6)["a"]
    assert np.array_equal(got[:3].numpy(), a[[3, 0, 2]]) and bool((got[3:] == 0).all())


def test_gather_rows_of_strided_and_fortran_arrays():
    base = np.arange(40, dtype=np.float32).reshape(5, 8)
    for a in (base[:, ::2], np.asfortranarray(base)):
        got = gather_rows({"a": rows_of(a)}, torch.tensor([4, 1]))["a"]
        assert np.array_equal(got.numpy(), a[[4, 1]])
    assert rows_of(np.array(["a", "b"])) is None and rows_of(np.float32(3)) is None
