"""FixedSizeLoader: exactly once, fixed shapes, masks, stats, oversize, micro-batches."""
import json
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch_geometric.data import Batch, Data

from graph_adapter.batching import Budget
from graph_adapter.format import unpad_batch
from graph_adapter.batching import FixedSizeLoader

SETTINGS = settings(deadline=None)


def make_graphs(sizes, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, (n, e) in enumerate(sizes):
        e = e if n > 0 else 0
        d = Data(x=torch.randn(n, 3, generator=g),
                 edge_index=torch.randint(0, max(n, 1), (2, e), generator=g),
                 edge_attr=torch.randn(e, 2, generator=g),
                 y=torch.randn(1, 1, generator=g), idx=torch.tensor([i]))
        d.num_nodes = n
        out.append(d)
    return out


sizes_st = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 20)), min_size=1, max_size=50)


def epoch_ids(loader, yielded=None):
    """Dataset indices of the real graphs of every yielded item, checking
    shapes, masks and padding on the way; ``yielded`` (a list) receives the
    items (micro-batch dicts split off when ``micro_batches > 1``)."""
    ids = []
    sig = None
    bud, nodes = loader.budget, loader.sizes.matrix[:, 0]
    room = not len(nodes) or bud.nodes - bud.graphs >= int(nodes.max()) - 1
    for item in loader:
        s = {k: (tuple(v.shape), v.dtype) for k, v in item.items()}
        sig = sig or s
        assert s == sig, "shapes/dtypes changed within an epoch"
        assert list(item) == loader.keys
        F = loader.micro_batches
        subs = [item] if F == 1 else [{k: v[f] for k, v in item.items()} for f in range(F)]
        if yielded is not None:
            yielded.append(item if F == 1 else subs)
        if F > 1:
            assert all(v.shape[0] == F for v in item.values())
        for b in subs:
            g = int(b["graph_mask"].sum())
            n = int(b["node_mask"].sum())
            e = int(b["edge_mask"].sum())
            assert n == int(b["ptr"][g]) and int(b["batch"].max()) == loader.budget.graphs - 1
            assert bool((b["edge_index"][:, e:] >= n).all())
            assert bool(b["graph_mask"][:g].all()) and not bool(b["graph_mask"][g:].any())
            if room:  # issue 15 item 2: no empty padding graph slot
                assert bool((b["ptr"].diff()[g:] > 0).all()), b["ptr"].tolist()
            ids.extend(b["idx"][:g].tolist())
    if sig is not None:
        assert sig == {k: (sh, dt) for k, (sh, dt) in loader.shapes().items()}
    return ids


@SETTINGS
@given(sizes=sizes_st, shuffle=st.booleans(), F=st.integers(1, 3),
       packer=st.sampled_from(["greedy", "histogram"]), seed=st.integers(0, 3))
def test_every_graph_exactly_once(sizes, shuffle, F, packer, seed):
    graphs = make_graphs(sizes, seed)
    budget = Budget(nodes=30, edges=45, graphs=6)
    loader = FixedSizeLoader(graphs, budget, shuffle=shuffle, seed=seed, micro_batches=F,
                             packer=packer)
    n_items = len(loader)  # known before iterating
    yielded = []
    ids = epoch_ids(loader, yielded)
    assert sorted(ids) == list(range(len(graphs)))
    # len() promised before the epoch == what the epoch yielded == the stats
    assert len(yielded) == n_items
    st_ = loader.stats
    assert st_.items == len(yielded) and st_.batches == len(yielded) * F
    assert st_.padded_batches == sum(not bool(b["graph_mask"].any()) for it in yielded
                                     for b in (it if F > 1 else [it]))
    assert st_.graphs == len(graphs) and st_.skipped_graphs == 0
    real_nodes = sum(d.num_nodes for d in graphs)
    assert st_.node_efficiency == pytest.approx(real_nodes / (st_.batches * budget.nodes))
    ids2 = epoch_ids(loader)  # next epoch: still exactly once
    assert sorted(ids2) == list(range(len(graphs)))


@SETTINGS
@given(sizes=sizes_st, world=st.integers(1, 3), F=st.integers(1, 2), seed=st.integers(0, 3))
def test_ranks_disjoint_same_length(sizes, world, F, seed):
    graphs = make_graphs(sizes, seed)
    budget = Budget(nodes=30, edges=45, graphs=6)
    loaders = [FixedSizeLoader(graphs, budget, shuffle=True, seed=seed, micro_batches=F,
                               rank=r, world_size=world) for r in range(world)]
    lens = {len(ld) for ld in loaders}
    assert len(lens) == 1
    all_ids = []
    shapes = set()
    for ld in loaders:
        ids = epoch_ids(ld)
        all_ids.extend(ids)
        shapes.add(tuple(sorted((k, sh) for k, (sh, dt) in ld.shapes().items())))
    assert sorted(all_ids) == list(range(len(graphs)))
    assert len(shapes) == 1


def test_unpad_gives_back_originals():
    graphs = make_graphs([(5, 7), (0, 0), (3, 2), (8, 12), (1, 0), (4, 4)] * 3)
    loader = FixedSizeLoader(graphs, Budget(nodes=20, edges=30, graphs=5), shuffle=True,
                             micro_batches=2)
    seen = {}
    for item in loader:
        for d in unpad_batch(item, loader.schema):
            seen[int(d.idx)] = d
    assert sorted(seen) == list(range(len(graphs)))
    for i, d in seen.items():
        o = graphs[i]
        for k in ("x", "edge_index", "edge_attr", "y", "idx"):
            assert torch.equal(d[k], o[k]), k
        assert d.num_nodes == o.num_nodes


def test_len_seed_and_set_epoch():
    graphs = make_graphs([(i % 7 + 1, i % 5) for i in range(60)])
    b = Budget(nodes=25, edges=26, graphs=8)  # (N != E: a row count names its level)
    a = FixedSizeLoader(graphs, b, shuffle=True, seed=3)
    c = FixedSizeLoader(graphs, b, shuffle=True, seed=3)
    pa = a.plan()
    assert pa == c.plan() and json.loads(json.dumps(pa)) == pa
    assert len(a) == len(pa)
    ids0 = epoch_ids(a)
    ids1 = epoch_ids(a)  # iterating again advances the epoch
    assert ids0 != ids1 and a.epoch == 1
    a.set_epoch(0)
    assert epoch_ids(a) == ids0
    c.set_epoch(1)
    assert epoch_ids(c) == ids1
    plain = FixedSizeLoader(graphs, b)
    ids = epoch_ids(plain)
    assert sorted(ids) == list(range(60)) and ids == epoch_ids(plain)  # no shuffle: fixed
    nf = FixedSizeLoader(graphs, b, open_batches=1)
    assert epoch_ids(nf) == list(range(60))  # next-fit without shuffle: dataset order


def test_len_is_the_next_epochs_count_without_set_epoch():
    r = np.random.default_rng(0)
    sizes = [(int(n), int(e)) for n, e in r.integers(0, [13, 21], size=(40, 2))]
    loader = FixedSizeLoader(make_graphs(sizes), Budget(nodes=30, edges=45, graphs=6),
                             shuffle=True, seed=0)
    counts = []
    for _ in range(6):
        promised = len(loader)
        counts.append((promised, sum(1 for _ in loader)))
    assert len({n for _, n in counts}) > 1, "this case must vary the item count per epoch"
    assert all(p == n for p, n in counts), counts


@SETTINGS
@given(sizes=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 20)), min_size=20,
                      max_size=60),
       seed=st.integers(0, 50), world=st.integers(1, 2), F=st.integers(1, 2),
       packer=st.sampled_from(["greedy", "histogram"]),
       set_epochs=st.lists(st.one_of(st.none(), st.integers(0, 9)), min_size=2, max_size=6))
def test_len_is_what_the_next_iteration_yields(sizes, seed, world, F, packer, set_epochs):
    """Issue 15 item 11: len(loader) == the items of the next iteration, whether
    or not set_epoch was called before it (None in ``set_epochs``: not called)."""
    loader = FixedSizeLoader(make_graphs(sizes, seed), Budget(nodes=30, edges=45, graphs=6),
                             shuffle=True, seed=seed, micro_batches=F, packer=packer,
                             rank=world - 1, world_size=world)
    for e in set_epochs:
        if e is not None:
            loader.set_epoch(e)
        promised = len(loader)
        assert promised == sum(1 for _ in loader) == loader.stats.items


def test_oversize_error_and_skip():
    graphs = make_graphs([(3, 3), (40, 5), (2, 2), (4, 90)])
    b = Budget(nodes=20, edges=30, graphs=4)
    with pytest.raises(ValueError) as ei:
        FixedSizeLoader(graphs, b)
    msg = str(ei.value)
    assert "dataset index 1 has 40 nodes and 5 edges" in msg
    assert "dataset index 3 has 4 nodes and 90 edges" in msg and "18 real nodes" in msg
    with pytest.warns(UserWarning, match="dataset index 1"):
        ld = FixedSizeLoader(graphs, b, oversize="skip")
    assert sorted(epoch_ids(ld)) == [0, 2]
    s = ld.stats
    assert s.skipped_graphs == 2 and s.skipped_indices == [1, 3] and s.total_graphs == 4
    with pytest.raises(ValueError):
        FixedSizeLoader(graphs, b, oversize="drop")


def test_int32_micro_batches_and_tail_split_not_padded():
    graphs = make_graphs([(4, 6)] * 10)
    b = Budget(nodes=13, edges=20, graphs=4)  # 3 graphs a batch -> 4 packed batches
    ld = FixedSizeLoader(graphs, b, micro_batches=3, index_dtype=torch.int32)
    # issue 15 item 1: 4 batches do not fill 2 items of 3; the two fullest are
    # split in two instead of adding 2 fully padded fill batches
    assert len(ld) == 2 and ld.stats.padded_batches == 0 and ld.stats.batches == 6
    items = list(ld)
    assert len(items) == 2
    for it in items:
        for k in ("edge_index", "batch", "ptr"):
            assert it[k].dtype == torch.int32
        assert it["graph_mask"].dim() == 2 and it["y"].shape == (3, 4, 1)
        assert it["graph_mask"].any(dim=1).all()  # every micro-batch has a real graph
    e = ld.empty_batch()
    assert {k: v.shape for k, v in e.items()} == {k: v.shape for k, v in items[0].items()}
    # too few graphs to spread: only then a fully padded fill batch
    few = FixedSizeLoader(graphs[:2], b, micro_batches=3)
    assert len(few) == 1 and few.stats.padded_batches == 1
    assert not next(iter(few))["graph_mask"][2].any()


@SETTINGS
@given(sizes=sizes_st, world=st.integers(1, 3), F=st.integers(1, 3), seed=st.integers(0, 3))
def test_fill_batches_only_when_graphs_run_out(sizes, world, F, seed):
    """A fully padded micro-batch only when the epoch has fewer graphs than
    micro-batches to fill (over all ranks)."""
    graphs = make_graphs(sizes, seed)
    loaders = [FixedSizeLoader(graphs, Budget(nodes=30, edges=45, graphs=6), shuffle=True,
                               seed=seed, micro_batches=F, rank=r, world_size=world)
               for r in range(world)]
    slots = len(loaders[0]) * F * world
    padded = sum(ld.stats.padded_batches for ld in loaders)
    assert padded == max(0, slots - len(graphs))


def test_excluded_keys_in_stats_and_lazy_path_with_workers():
    graphs = make_graphs([(3, 2), (5, 4), (2, 1), (6, 6)] * 4)
    for d in graphs:
        d.smiles = "C"
    with pytest.warns(UserWarning, match="smiles"):
        ld = FixedSizeLoader(graphs, Budget(nodes=20, edges=21, graphs=5), columnar=False,
                             num_workers=1, shuffle=True)
    assert "smiles" in ld.stats.excluded_keys
    assert sorted(epoch_ids(ld)) == list(range(16))


def test_pyg_dataset_and_model_output_matches():
    from torch_geometric.datasets import FakeDataset
    from torch_geometric.nn import GIN, global_mean_pool

    ds = FakeDataset(num_graphs=20, avg_num_nodes=10, num_channels=4, edge_dim=2, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        b = Budget.tight(ds, 4)
        ld = FixedSizeLoader(ds, b)
    torch.manual_seed(0)
    model = GIN(4, 8, num_layers=2).eval()
    seen = 0
    for item in ld:
        g = int(item["graph_mask"].sum())
        ref = Batch.from_data_list([ds[i] for i in range(seen, seen + g)])
        seen += g
        out = model(item["x"], item["edge_index"])
        want = model(ref.x, ref.edge_index)
        torch.testing.assert_close(out[:ref.num_nodes], want)
        pooled = global_mean_pool(out, item["batch"], size=b.graphs)[:g]
        torch.testing.assert_close(pooled, global_mean_pool(want, ref.batch))
    assert seen == 20


def test_bad_arguments():
    graphs = make_graphs([(3, 3)])
    b = Budget(nodes=20, edges=30, graphs=4)
    with pytest.raises(TypeError):
        FixedSizeLoader(graphs, b, batch_size=3)
    with pytest.raises(ValueError):
        FixedSizeLoader(graphs, b, micro_batches=0)
    with pytest.raises(ValueError):
        FixedSizeLoader(graphs, b, rank=2, world_size=2)
    ld = FixedSizeLoader(graphs, b.to_json())  # a budget as JSON
    assert ld.budget == b


def test_oversize_message_of_a_hetero_budget():
    from torch_geometric.data import HeteroData

    graphs = []
    for npap, nau, e in [(2, 1, 1), (9, 1, 1), (2, 1, 7)]:
        h = HeteroData()
        h["paper"].x = torch.zeros(npap, 2)
        h["author"].x = torch.zeros(nau, 2)
        h["author", "writes", "paper"].edge_index = torch.zeros(2, e, dtype=torch.long)
        graphs.append(h)
    # (graphs=2, not 3: as many graph slots as author rows would be a tie)
    b = Budget(nodes={"paper": 5, "author": 3}, edges={"author__writes__paper": 4}, graphs=2)
    with pytest.raises(ValueError) as ei:
        FixedSizeLoader(graphs, b)
    msg = str(ei.value)
    assert "2 graph(s) do not fit" in msg
    assert "dataset index 1 has nodes {author: 1, paper: 9}" in msg
    assert "dataset index 2 has" in msg and "author__writes__paper: 7" in msg
    assert "3 paper nodes" in msg and "4 author__writes__paper edges" in msg
    with pytest.warns(UserWarning, match="dataset index 1"):
        ld = FixedSizeLoader(graphs, b, oversize="skip")
    assert ld.stats.skipped_indices == [1, 2]
