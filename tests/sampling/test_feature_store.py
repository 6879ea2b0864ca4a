"""``(FeatureStore, GraphStore)`` inputs, PyG's remote-backend protocol: the loaders read
the graph store's edges (COO, CSR, CSC), gather each batch's rows from the feature store
(never the whole column), with PyG's own in-memory stores and our on-disk
``MemmapFeatureStore``; the store's JSON metadata is checked when opened."""
from __future__ import annotations

import json
import os
import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data, HeteroData, TensorAttr
from torch_geometric.testing import MyFeatureStore, MyGraphStore

from graph_adapter.sampling import (FeatureStoreError, FixedSizeHeteroNeighborLoader,
                                    FixedSizeNeighborLoader, MemmapFeatureStore,
                                    MemmapStoreError)


def _put_edges(gs, ei: torch.Tensor, n: int, layout: str, edge_type=None) -> torch.Tensor:
    """Put ``ei`` in ``layout``; return the edges in the order the store holds them."""
    if layout == "coo":
        gs.put_edge_index((ei[0], ei[1]), edge_type=edge_type, layout="coo", size=(n, n))
        return ei
    key = ei[0] if layout == "csr" else ei[1]
    other = ei[1] if layout == "csr" else ei[0]
    order = torch.sort(key, stable=True).indices
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(key, minlength=n).cumsum(0)])
    stored = ei[:, order]
    if layout == "csr":
        gs.put_edge_index((ptr, other[order]), edge_type=edge_type, layout="csr", size=(n, n))
    else:
        gs.put_edge_index((other[order], ptr), edge_type=edge_type, layout="csc", size=(n, n))
    return stored


def _same_batches(a, b) -> None:
    for fa, fb in zip(a, b, strict=True):
        assert list(fa) == list(fb)
        for k in fa:
            assert torch.equal(fa[k], fb[k]), k


@settings(max_examples=12)
@given(n=st.integers(3, 40), m=st.integers(0, 150), seed=st.integers(0, 10 ** 6),
       layout=st.sampled_from(["coo", "csr", "csc"]), memmap=st.booleans(),
       fan=st.lists(st.sampled_from([-1, 1, 3]), min_size=1, max_size=3))
def test_store_pair_batches_equal_the_data_of_the_stored_edges(tmp_path_factory, n, m, seed,
                                                               layout, memmap, fan):
    """Any layout, either feature store: the batches of the ``Data`` holding the same
    edges in the stored order, key for key (``e_id``: a stored position, as PyG's)."""
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(n, 4, generator=g), torch.randint(0, 5, (n,), generator=g)
    ei = torch.randint(0, n, (2, m), generator=g)
    fs = MemmapFeatureStore(str(tmp_path_factory.mktemp("fs"))) if memmap else MyFeatureStore()
    fs.put_tensor(x, group_name=None, attr_name="x", index=None)
    fs.put_tensor(y, group_name=None, attr_name="y", index=None)
    gs = MyGraphStore()
    stored = _put_edges(gs, ei, n, layout)
    ref = FixedSizeNeighborLoader(Data(x=x, y=y, edge_index=stored), fan, batch_size=6)
    got = FixedSizeNeighborLoader((fs, gs), fan, batch_size=6, budget=ref.budget)
    assert got.num_nodes == n and got.excluded_keys == {}
    _same_batches(ref, got)


def test_pygs_custom_loader_test_feature_rows_beyond_the_graph():
    """PyG's test_custom_neighbor_loader: 200 feature rows, a graph store of 100 nodes."""
    fs, gs = MyFeatureStore(), MyGraphStore()
    x = torch.arange(100, 300)
    fs.put_tensor(x, group_name=None, attr_name="x", index=None)
    ei = torch.randint(0, 100, (2, 500))
    gs.put_edge_index((ei[0], ei[1]), edge_type=None, layout="coo", size=(100, 100))
    L = FixedSizeNeighborLoader((fs, gs), [-1, -1], batch_size=20, input_nodes=torch.arange(100))
    ref = FixedSizeNeighborLoader(Data(x=x[:100], edge_index=ei), [-1, -1], batch_size=20,
                                  budget=L.budget)
    assert len(L) == 5
    _same_batches(ref, L)


class _CountingStore(MemmapFeatureStore):
    """Records every index the loader asks for."""

    def __init__(self, directory):
        super().__init__(directory)
        self.asked = []

    def _get_tensor(self, attr):
        self.asked.append(attr.index)
        return super()._get_tensor(attr)


def test_the_loader_asks_the_store_for_batch_rows_only(tmp_path):
    n = 500
    x = torch.randn(n, 8)
    fs = _CountingStore(str(tmp_path))
    fs.put_tensor(x, group_name=None, attr_name="x", index=None)
    gs = MyGraphStore()
    ei = torch.randint(0, n, (2, 3000))
    gs.put_edge_index((ei[0], ei[1]), edge_type=None, layout="coo", size=(n, n))
    L = FixedSizeNeighborLoader((fs, gs), [4, 2], batch_size=32)
    setup = len(fs.asked)
    assert setup == 1 and fs.asked[0].numel() == 1  # one row read for the dtype
    real = 0
    for b in L:
        real += int(b["node_mask"].sum())
        assert torch.equal(b["x"][b["node_mask"]], x[b["n_id"][b["node_mask"]]])
    asked = fs.asked[setup:]
    assert len(asked) == len(L)  # one read a batch
    assert all(a is not None and isinstance(a, torch.Tensor) for a in asked)
    assert all(a.numel() <= int(L.budget.nodes) for a in asked)
    assert sum(a.numel() for a in asked) == real  # the real rows, nothing else


@pytest.mark.parametrize("ours", [False, True])
def test_hetero_store_pair_as_pygs_custom_hetero_test(tmp_path, ours):
    fs = MemmapFeatureStore(str(tmp_path)) if ours else MyFeatureStore()
    gs, data = MyGraphStore(), HeteroData()
    for t, n in (("paper", 30), ("author", 20)):
        data[t].x = torch.randn(n, 3)
        fs.put_tensor(data[t].x, group_name=t, attr_name="x", index=None)
    g = torch.Generator().manual_seed(0)
    for (s, d), layout in zip([("paper", "paper"), ("paper", "author"), ("author", "paper")],
                              ["coo", "csr", "csc"]):
        ns, nd = data[s].num_nodes, data[d].num_nodes
        ei = torch.stack([torch.randint(0, ns, (80,), generator=g),
                          torch.randint(0, nd, (80,), generator=g)])
        key = ei[0] if layout == "csr" else ei[1]
        order = torch.sort(key, stable=True).indices
        stored = ei[:, order]
        et = (s, "to", d)
        data[et].edge_index = stored
        if layout == "coo":
            gs.put_edge_index((ei[0], ei[1]), edge_type=et, layout="coo", size=(ns, nd))
            data[et].edge_index = ei
        else:
            cnt = torch.bincount(key, minlength=ns if layout == "csr" else nd)
            ptr = torch.cat([torch.zeros(1, dtype=torch.long), cnt.cumsum(0)])
            pair = (ptr, stored[1]) if layout == "csr" else (stored[0], ptr)
            gs.put_edge_index(pair, edge_type=et, layout=layout, size=(ns, nd))
    # an edge type's column, one row per stored edge: read by e_id (PyG leaves it out)
    et = ("paper", "to", "author")
    data[et].w = torch.randn(data[et].edge_index.size(1), 2)
    fs.put_tensor(data[et].w, group_name=et, attr_name="w", index=None)
    ref = FixedSizeHeteroNeighborLoader(data, [-1, 2], 8, input_nodes=("paper", range(30)))
    got = FixedSizeHeteroNeighborLoader((fs, gs), [-1, 2], 8, input_nodes=("paper", range(30)),
                                        budget=ref.budget)
    _same_batches(ref, got)


# -- errors --------------------------------------------------------------------------
def test_store_pair_errors_are_named():
    fs, gs = MyFeatureStore(), MyGraphStore()
    fs.put_tensor(torch.randn(10, 2), group_name=None, attr_name="x", index=None)
    with pytest.raises(FeatureStoreError, match="holds no edges"):
        FixedSizeNeighborLoader((fs, gs), [2], batch_size=2)
    gs.put_edge_index((torch.tensor([0, 1]), torch.tensor([1, 19])), edge_type=None,
                      layout="coo", size=(20, 20))
    with pytest.raises(FeatureStoreError, match=r"\('None'|None, 'x'\) has 10 rows.*20 nodes"):
        FixedSizeNeighborLoader((fs, gs), [2], batch_size=2)
    typed = MyGraphStore()
    typed.put_edge_index((torch.tensor([0]), torch.tensor([1])), edge_type=("a", "to", "a"),
                         layout="coo", size=(10, 10))
    with pytest.raises(FeatureStoreError, match="FixedSizeHeteroNeighborLoader"):
        FixedSizeNeighborLoader((fs, typed), [2], batch_size=2)
    with pytest.raises(FeatureStoreError, match="untyped"):
        FixedSizeHeteroNeighborLoader((fs, gs), [2], 2, input_nodes="a")


# -- MemmapFeatureStore --------------------------------------------------------------
def test_memmap_store_round_trips_and_reopens(tmp_path):
    fs = MemmapFeatureStore(str(tmp_path))
    x = torch.randn(50, 3)
    fs.put_tensor(x, group_name="paper", attr_name="x", index=None)
    fs.put_tensor(torch.arange(7), group_name=("a", "to", "b"), attr_name="w", index=None)
    again = MemmapFeatureStore(str(tmp_path))
    idx = torch.tensor([4, 0, 49, 4])
    assert torch.equal(again.get_tensor(TensorAttr("paper", "x", idx)), x[idx])
    assert torch.equal(again.get_tensor(TensorAttr("paper", "x", None)), x)
    assert again.get_tensor_size(TensorAttr("paper", "x")) == (50, 3)
    assert {(a.group_name, a.attr_name) for a in again.get_all_tensor_attrs()} == \
        {("paper", "x"), (("a", "to", "b"), "w")}
    blob = pickle.dumps(again)
    assert len(blob) < 4_000  # the directory, not the data
    assert torch.equal(pickle.loads(blob).get_tensor(TensorAttr("paper", "x", idx)), x[idx])
    assert again.remove_tensor(TensorAttr("paper", "x", None)) is True
    assert not MemmapFeatureStore(str(tmp_path)).get_tensor_size(TensorAttr("paper", "x"))
    meta = json.loads((tmp_path / "metadata.json").read_text())
    assert [c["attr"] for c in meta["columns"]] == ["w"] and meta["columns"][0]["group"] == \
        ["a", "to", "b"]


def test_memmap_store_create_tensor_fills_in_chunks(tmp_path):
    fs = MemmapFeatureStore(str(tmp_path))
    arr = fs.create_tensor(None, "x", (1000, 4), "float32")
    for s in range(0, 1000, 300):
        arr[s:s + 300] = s
    arr.flush()
    got = MemmapFeatureStore(str(tmp_path)).get_tensor(TensorAttr(None, "x", torch.tensor([999])))
    assert got.tolist() == [[900.0] * 4]


def test_memmap_store_refuses_a_partial_put(tmp_path):
    fs = MemmapFeatureStore(str(tmp_path))
    with pytest.raises(MemmapStoreError, match="whole columns"):
        fs.put_tensor(torch.randn(3, 2), group_name=None, attr_name="x",
                      index=torch.tensor([5, 6, 7]))


@pytest.mark.parametrize("mutate, match", [
    (lambda m: "not json", "not readable JSON"),
    (lambda m: json.dumps([]), "not a MemmapFeatureStore's metadata"),
    (lambda m: json.dumps(dict(m, version=9)), "version 9"),
    (lambda m: json.dumps(dict(m, columns=[dict(m["columns"][0], shape="3")])), "shape"),
    (lambda m: json.dumps(dict(m, columns=[dict(m["columns"][0], file="../x.npy")])),
     "not a file name"),
])
def test_memmap_store_metadata_is_checked(tmp_path, mutate, match):
    MemmapFeatureStore(str(tmp_path)).put_tensor(torch.randn(4, 2), group_name=None,
                                                 attr_name="x", index=None)
    path = tmp_path / "metadata.json"
    path.write_text(mutate(json.loads(path.read_text())))
    with pytest.raises(MemmapStoreError, match=match):
        MemmapFeatureStore(str(tmp_path))


def test_memmap_store_file_that_disagrees_with_its_metadata(tmp_path):
    fs = MemmapFeatureStore(str(tmp_path))
    fs.put_tensor(torch.randn(4, 2), group_name=None, attr_name="x", index=None)
    meta = json.loads((tmp_path / "metadata.json").read_text())
    meta["columns"][0]["shape"] = [5, 2]
    (tmp_path / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(MemmapStoreError, match=r"holds float32 \[4, 2\]"):
        MemmapFeatureStore(str(tmp_path)).get_tensor(TensorAttr(None, "x", torch.tensor([0])))
    os.remove(tmp_path / meta["columns"][0]["file"])
    with pytest.raises(MemmapStoreError, match="missing"):
        MemmapFeatureStore(str(tmp_path)).get_tensor(TensorAttr(None, "x", torch.tensor([0])))


def test_memmap_store_in_worker_processes(tmp_path):
    n = 80
    x = torch.randn(n, 4)
    fs = MemmapFeatureStore(str(tmp_path))
    fs.put_tensor(x, group_name=None, attr_name="x", index=None)
    gs = MyGraphStore()
    ei = torch.randint(0, n, (2, 300))
    gs.put_edge_index((ei[0], ei[1]), edge_type=None, layout="coo", size=(n, n))
    ref = FixedSizeNeighborLoader(Data(x=x, edge_index=ei), [3, 3], batch_size=16)
    got = FixedSizeNeighborLoader((fs, gs), [3, 3], batch_size=16, budget=ref.budget,
                                  num_workers=2)
    _same_batches(ref, got)


def test_input_edge_index_reads_every_input_kind():
    from graph_adapter.sampling.inputs.source import input_edge_index

    ei = torch.randint(0, 10, (2, 30))
    data = Data(x=torch.randn(10, 2), edge_index=ei)
    assert input_edge_index(data) is ei
    gs = MyGraphStore()
    stored = _put_edges(gs, ei, 10, "csr")
    assert torch.equal(input_edge_index((MyFeatureStore(), gs)), stored)
