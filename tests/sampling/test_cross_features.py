"""Features of the large-graph loaders together: a link loader on a ``(FeatureStore,
GraphStore)`` pair without ``edge_label_index``; RandomLinkSplit's keys left on a graph;
the hetero sampler grown from seeds of several node types (the link loader's); PyG's
``seed_time`` on temporal node batches; the per-hop layout refused where its blocks
cannot be."""
from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data, HeteroData
from torch_geometric.testing import MyFeatureStore, MyGraphStore

from graph_adapter.sampling import (CSC, ExcludedAttributeWarning, FixedSizeHeteroNeighborLoader,
                                    FixedSizeLinkNeighborLoader, FixedSizeNeighborLoader)
from graph_adapter.sampling.hetero_sample import sample_hetero_neighbors


def _graph(n: int, m: int, seed: int) -> Data:
    g = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(n, 3, generator=g), edge_index=torch.randint(0, n, (2, m),
                                                                           generator=g))


def test_link_loader_on_a_store_pair_supervises_the_stored_edges():
    """No ``edge_label_index``: the graph store's edges are the supervision edges, the
    batches those of the ``Data`` holding the same edges (PyG reads them the same way)."""
    data = _graph(40, 120, 0)
    fs, gs = MyFeatureStore(), MyGraphStore()
    fs.put_tensor(data.x, group_name=None, attr_name="x", index=None)
    gs.put_edge_index((data.edge_index[0], data.edge_index[1]), edge_type=None, layout="coo",
                      size=(40, 40))
    kw = dict(batch_size=16, shuffle=True, seed=3)
    one = FixedSizeLinkNeighborLoader(data, [3, 2], **kw)
    two = FixedSizeLinkNeighborLoader((fs, gs), [3, 2], **kw)
    assert torch.equal(one.edge_label_index, data.edge_index)
    assert torch.equal(two.edge_label_index, data.edge_index)
    for a, b in zip(one, two, strict=True):
        assert list(a) == list(b)
        for k in a:
            assert torch.equal(a[k], b[k]), k


def test_random_link_split_keys_are_left_out_quietly_by_the_link_loader():
    """``edge_label_index`` / ``edge_label`` on the graph (RandomLinkSplit leaves them):
    the link loader's own inputs, listed in ``excluded_keys``, never warned about; the
    node loader warns (they are not its inputs)."""
    data = _graph(30, 90, 1)
    data.edge_label_index = data.edge_index[:, :20]
    data.edge_label = torch.ones(20)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ExcludedAttributeWarning)
        loader = FixedSizeLinkNeighborLoader(data, [2], edge_label_index=data.edge_label_index,
                                             edge_label=data.edge_label, batch_size=8)
    assert {"edge_label_index", "edge_label"} <= set(loader.excluded_keys)
    flat = next(iter(loader))  # the batch's own supervision slots, not the graph's rows
    assert flat["edge_label_index"].shape == (2, loader.slots)
    with pytest.warns(ExcludedAttributeWarning, match="edge_label_index"):
        FixedSizeNeighborLoader(data, [2], batch_size=8)


def _hetero_cscs(n_a: int, n_b: int, m: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    ets = {("a", "to", "b"): (n_a, n_b), ("b", "to", "a"): (n_b, n_a), ("a", "to", "a"): (n_a, n_a)}
    eis, cscs = {}, {}
    for et, (ns, nd) in ets.items():
        ei = torch.stack([torch.randint(0, ns, (m,), generator=g),
                          torch.randint(0, nd, (m,), generator=g)])
        eis[et] = ei
        cscs[et] = CSC.from_edge_index(ei, nd, num_src_nodes=ns)
    scratch = {"a": torch.full((n_a,), -1, dtype=torch.long),
               "b": torch.full((n_b,), -1, dtype=torch.long)}
    return eis, cscs, scratch


@settings(max_examples=20, deadline=None)
@given(n_a=st.integers(1, 15), n_b=st.integers(1, 15), m=st.integers(0, 60),
       seed=st.integers(0, 10 ** 6), disjoint=st.booleans(),
       fan=st.lists(st.sampled_from([-1, 1, 2]), min_size=0, max_size=3),
       k_a=st.integers(1, 5), k_b=st.integers(0, 5))
def test_hetero_sampler_grows_from_seeds_of_several_types(n_a, n_b, m, seed, disjoint, fan,
                                                          k_a, k_b):
    """Each type's seeds are its first rows (tree ``i`` = seed ``i`` of each type); every
    edge is an input edge between its rows' nodes; one seed type as a dict is the
    tensor form, draw for draw."""
    eis, cscs, scratch = _hetero_cscs(n_a, n_b, m, seed)
    fanouts = {et: list(fan) for et in cscs}
    sa = torch.randperm(n_a)[:k_a]
    sb = torch.randperm(n_b)[:min(k_b, n_b)]
    seeds = {"a": sa, "b": sb}
    s = sample_hetero_neighbors(cscs, scratch, None, seeds, fanouts, disjoint=disjoint,
                                generator=torch.Generator().manual_seed(seed))
    for t, sd in seeds.items():
        assert torch.equal(s.n_id[t][:sd.numel()], sd)
        if disjoint:
            assert torch.equal(s.seed_of[t][:sd.numel()], torch.arange(sd.numel()))
        else:
            assert s.n_id[t].unique().numel() == s.n_id[t].numel()
    for et, ei in s.edge_index.items():
        src, dst = s.n_id[et[0]][ei[0]], s.n_id[et[2]][ei[1]]
        assert torch.equal(src, eis[et][0, s.e_id[et]])
        assert torch.equal(dst, eis[et][1, s.e_id[et]])
        if disjoint:  # an edge stays in its tree
            assert torch.equal(s.seed_of[et[0]][ei[0]], s.seed_of[et[2]][ei[1]])
    one = sample_hetero_neighbors(cscs, scratch, None, {"a": sa}, fanouts, disjoint=disjoint,
                                  generator=torch.Generator().manual_seed(seed))
    ten = sample_hetero_neighbors(cscs, scratch, "a", sa, fanouts, disjoint=disjoint,
                                  generator=torch.Generator().manual_seed(seed))
    assert all(torch.equal(one.n_id[t], ten.n_id[t]) for t in ten.n_id)
    assert all(torch.equal(one.edge_index[e], ten.edge_index[e]) for e in ten.edge_index)
    assert all((scratch[t] == -1).all() for t in scratch)  # left as it was


def test_hetero_sampler_several_seed_types_need_their_times():
    _, cscs, scratch = _hetero_cscs(5, 5, 10, 0)
    times = {"a": torch.zeros(5, dtype=torch.long), "b": torch.zeros(5, dtype=torch.long)}
    with pytest.raises(ValueError, match="one time per tree"):
        sample_hetero_neighbors(cscs, scratch, None, {"a": torch.tensor([0]),
                                                      "b": torch.tensor([1])},
                                {et: [1] for et in cscs}, node_time=times)


def test_temporal_node_batches_carry_seed_time():
    """PyG's ``seed_time``: each seed's ``input_time`` (following its seed through the
    shuffle), else its node time; ``0`` on padding slots; ``to_pyg`` gives it back."""
    g = torch.Generator().manual_seed(5)
    n = 50
    data = _graph(n, 200, 5)
    data.time = torch.randint(0, 9, (n,), generator=g)
    seeds = torch.randperm(n, generator=g)[:20]
    input_time = torch.randint(0, 9, (20,), generator=g)
    by_id = dict(zip(seeds.tolist(), input_time.tolist()))
    loader = FixedSizeNeighborLoader(data, [2, 2], 8, input_nodes=seeds, input_time=input_time,
                                     time_attr="time", shuffle=True, seed=2)
    plain = FixedSizeNeighborLoader(data, [2, 2], 8, input_nodes=seeds, time_attr="time")
    for flat in loader:
        b = int(flat["seed_mask"].sum())
        ids = flat["n_id"][:b]
        assert flat["seed_time"].shape == (8,)
        assert flat["seed_time"][:b].tolist() == [by_id[i] for i in ids.tolist()]
        assert (flat["seed_time"][b:] == 0).all()
        assert torch.equal(loader.to_pyg(flat).seed_time, flat["seed_time"][:b])
    for flat in plain:
        b = int(flat["seed_mask"].sum())
        assert torch.equal(flat["seed_time"][:b], data.time[flat["n_id"][:b]])
    assert "seed_time" not in next(iter(FixedSizeNeighborLoader(data, [2], 8)))


def test_hetero_temporal_node_batches_carry_seed_time():
    g = torch.Generator().manual_seed(6)
    h = HeteroData()
    h["paper"].x, h["paper"].time = torch.randn(30, 2), torch.randint(0, 5, (30,), generator=g)
    h["author"].x, h["author"].time = torch.randn(20, 2), torch.randint(0, 5, (20,), generator=g)
    h["author", "writes", "paper"].edge_index = torch.stack(
        [torch.randint(0, 20, (80,), generator=g), torch.randint(0, 30, (80,), generator=g)])
    loader = FixedSizeHeteroNeighborLoader(h, [2], 6, input_nodes="paper", time_attr="time")
    flat = next(iter(loader))
    b = int(flat["paper/seed_mask"].sum())
    assert torch.equal(flat["paper/seed_time"][:b], h["paper"].time[flat["paper/n_id"][:b]])
    assert torch.equal(loader.to_pyg(flat)["paper"].seed_time, flat["paper/seed_time"][:b])


def test_per_hop_budget_with_hetero_data_is_refused_by_name():
    h = HeteroData()
    h["paper"].x = torch.randn(10, 2)
    h["paper", "cites", "paper"].edge_index = torch.randint(0, 10, (2, 30))
    with pytest.raises(ValueError, match="per_hop_budget=True"):
        FixedSizeNeighborLoader(h, [2], 4, input_nodes="paper", per_hop_budget=True)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10 ** 6), store=st.booleans())
def test_per_hop_batches_gather_numpy_and_store_rows_and_a_graphs_own_n_id(seed, store):
    """The per-hop layout reads rows wherever they live (a numpy array, a feature-store
    column) and keeps a graph's own ``n_id`` as PyG does: the same real rows, keys and
    ids as the batches of the tensor graph."""
    g = torch.Generator().manual_seed(seed)
    n = 60
    data = _graph(n, 300, seed)
    data.n_id = torch.randperm(n, generator=g) + 1000
    kw = dict(per_hop_budget=True, seed=seed)
    plain = FixedSizeNeighborLoader(data, [3, 2], 8, **kw)
    if store:
        fs, gs = MyFeatureStore(), MyGraphStore()
        fs.put_tensor(data.x, group_name=None, attr_name="x", index=None)
        fs.put_tensor(data.n_id, group_name=None, attr_name="n_id", index=None)
        gs.put_edge_index((data.edge_index[0], data.edge_index[1]), edge_type=None,
                          layout="coo", size=(n, n))
        other = FixedSizeNeighborLoader((fs, gs), [3, 2], 8, **kw)
    else:
        np_data = data.clone()
        np_data.x = data.x.numpy()
        other = FixedSizeNeighborLoader(np_data, [3, 2], 8, **kw)
    for a, b in zip(plain, other, strict=True):
        assert sorted(a) == sorted(b)
        for k in a:
            assert torch.equal(a[k], b[k]), k
        m = a["node_mask"]
        assert (a["n_id"][m] >= 1000).all()  # the graph's own ids, not row ids
        batch = plain.to_pyg(a)
        row = torch.argsort(data.n_id)[batch.n_id - 1000]  # the node each own id names
        assert torch.equal(batch.x, data.x[row])
