"""Hetero padded collate: exactly once, fixed shapes, masks, padding edges, unpadding,
equality with Batch.from_data_list, spec round trip."""
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch_geometric.data import Batch, HeteroData

from graph_adapter.batching import Budget
from graph_adapter.batching import Collator
from graph_adapter.format import unpad_hetero
from graph_adapter.batching import FixedSizeLoader
from graph_adapter.format import infer_spec, unflatten

from strategies import hetero_graph_lists
from _padding import check_padding_slots

SETTINGS = settings(deadline=None)


def et_name(et):
    return "__".join(et)


def tag(graphs):
    for i, h in enumerate(graphs):
        h.idx = torch.tensor([i])
    return graphs


def budget_for(graphs, slack, share=1.0):
    """Node/edge budget per type: ``share`` of the totals (at least the largest
    graph), plus ``slack``."""
    h0 = graphs[0]
    nodes, edges = {}, {}
    for nt in h0.node_types:
        s = [h[nt].num_nodes for h in graphs]
        nodes[nt] = max(int(sum(s) * share), max(s)) + slack + 1  # 2 padding nodes kept
    for et in h0.edge_types:
        s = [h[et].num_edges for h in graphs]
        edges[et_name(et)] = max(int(sum(s) * share), max(s)) + slack
    G = max(2, int(len(graphs) * share) + slack)
    taken = {G}  # a row more where two counts would tie: Budget refuses a tie
    for counts in (nodes, edges):
        for t in counts:
            while counts[t] in taken:
                counts[t] += 1
            taken.add(counts[t])
    return Budget(nodes=nodes, edges=edges, graphs=G)


def check_item(flat, graphs, budget, loader_keys=None):
    """Masks, padding and real rows of one padded hetero batch; returns the ids."""
    G = budget.graphs
    g = int(flat["graph_mask"].sum())
    assert bool(flat["graph_mask"][:g].all()) and not bool(flat["graph_mask"][g:].any())
    ids = flat["idx"][:g].tolist()
    sub = [graphs[i] for i in ids]
    ref = Batch.from_data_list(sub) if sub else None
    h0 = graphs[0]
    for nt in h0.node_types:
        N = budget.nodes[nt]
        n = sum(h[nt].num_nodes for h in sub)
        mask = flat[nt + "/node_mask"]
        assert mask.shape == (N,) and int(mask.sum()) == n and bool(mask[:n].all())
        batch, ptr = flat[nt + "/batch"], flat[nt + "/ptr"]
        assert batch.shape == (N,) and ptr.shape == (G + 1,)
        check_padding_slots(batch, ptr, N, n, G, g)
        assert bool((flat[nt + "/x"][n:] == 0).all())
        if ref is not None:
            assert torch.equal(flat[nt + "/x"][:n], ref[nt].x)
            assert torch.equal(batch[:n].long(), ref[nt].batch)
            assert torch.equal(ptr[:g + 1].long(), ref[nt].ptr)
    for et in h0.edge_types:
        en = et_name(et)
        E = budget.edges[en]
        e = sum(h[et].num_edges for h in sub)
        mask = flat[en + "/edge_mask"]
        assert mask.shape == (E,) and int(mask.sum()) == e and bool(mask[:e].all())
        ei = flat[en + "/edge_index"]
        assert ei.shape == (2, E)
        ns = int(flat[et[0] + "/node_mask"].sum())
        nd = int(flat[et[2] + "/node_mask"].sum())
        # padding edges: padding node of src -> padding node of dst
        assert bool((ei[0, e:] == budget.nodes[et[0]] - 1).all())
        assert bool((ei[1, e:] == budget.nodes[et[2]] - 1).all())
        assert bool((ei[0, e:] >= ns).all()) and bool((ei[1, e:] >= nd).all())
        assert bool((ei[0, :e] < ns).all()) and bool((ei[1, :e] < nd).all())
        if "edge_attr" in h0[et]:
            assert bool((flat[en + "/edge_attr"][e:] == 0).all())
        if ref is not None:
            assert torch.equal(ei[:, :e].long(), ref[et].edge_index)
            if "edge_attr" in h0[et]:
                assert torch.equal(flat[en + "/edge_attr"][:e], ref[et].edge_attr)
    if "y" in flat:
        assert flat["y"].shape == (G,)
        assert bool(torch.isnan(flat["y"][g:]).all())
        if ref is not None:
            assert torch.equal(flat["y"][:g], ref.y)
    return ids


def same_graph(a, b):
    assert a.node_types == b.node_types and a.edge_types == b.edge_types
    for nt in b.node_types:
        assert a[nt].num_nodes == b[nt].num_nodes
        assert torch.equal(a[nt].x, b[nt].x)
    for et in b.edge_types:
        for k in ("edge_index", "edge_attr"):
            if k in b[et]:
                assert torch.equal(a[et][k], b[et][k]), (et, k)
    for k in ("y", "idx"):
        if k in b:
            assert torch.equal(a[k], b[k]), k


@SETTINGS
@given(graphs=hetero_graph_lists(min_size=1, max_size=8), slack=st.integers(1, 3),
       share=st.sampled_from([0.3, 0.6, 1.0]), shuffle=st.booleans(), F=st.integers(1, 2),
       packer=st.sampled_from(["greedy", "histogram"]), seed=st.integers(0, 3))
def test_loader_exactly_once_shapes_masks_unpad(graphs, slack, share, shuffle, F, packer,
                                                seed):
    graphs = tag(graphs)
    budget = budget_for(graphs, slack, share)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the string attribute is excluded with a warning
        loader = FixedSizeLoader(graphs, budget, shuffle=shuffle, seed=seed, micro_batches=F,
                                 packer=packer)
    shapes = loader.shapes()
    for epoch in range(2):
        # set_epoch: len() is then the coming epoch's count (without it, see
        # test_loader.test_len_is_the_next_epochs_count_without_set_epoch)
        loader.set_epoch(epoch)
        n_items = len(loader)
        seen = []
        yielded = 0
        for item in loader:
            yielded += 1
            assert list(item) == loader.keys
            assert {k: (tuple(v.shape), v.dtype) for k, v in item.items()} == shapes
            subs = [item] if F == 1 else [{k: v[f] for k, v in item.items()} for f in range(F)]
            for flat in subs:
                seen.extend(check_item(flat, graphs, budget))
            for h in loader.collator.unpad(item):
                same_graph(h, graphs[int(h.idx)])
        assert sorted(seen) == list(range(len(graphs))), epoch
        assert yielded == n_items == loader.stats.items, epoch


@SETTINGS
@given(graphs=hetero_graph_lists(min_size=1, max_size=5), slack=st.integers(1, 3),
       seed=st.integers(0, 5), int32=st.booleans())
def test_collate_matches_from_data_list(graphs, slack, seed, int32):
    graphs = tag(graphs)
    budget = budget_for(graphs, slack)
    idt = torch.int32 if int32 else torch.int64
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = Collator(graphs, budget, index_dtype=idt)
    order = [int(i) for i in np.random.default_rng(seed).permutation(len(graphs))]
    flat = c.collate_indices(order)
    assert check_item(flat, graphs, budget) == order
    for k, v in flat.items():
        if k.endswith(("/edge_index", "/batch", "/ptr")):
            assert v.dtype == idt, k
    # the list path gives the same bits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        b = c.collate([graphs[i] for i in order])
    assert list(b) == list(flat)
    for k in flat:
        assert torch.equal(flat[k].nan_to_num(), b[k].nan_to_num()), k
    back = unpad_hetero(flat, c.schema, c.scan.node_types, c.scan.edge_types)
    assert [int(h.idx) for h in back] == order
    for h in back:
        same_graph(h, graphs[int(h.idx)])
    e = c.empty()
    assert {k: (v.shape, v.dtype) for k, v in e.items()} == \
        {k: (v.shape, v.dtype) for k, v in flat.items()}
    assert not e["graph_mask"].any()


def _two_type_graphs(n=6):
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        h = HeteroData()
        npap, nau = i % 4 + 1, i % 3 + 1
        h["paper"].x = torch.randn(npap, 3, generator=g)
        h["author"].x = torch.randn(nau, 2, generator=g)
        e = i % 3 + 1
        h["author", "writes", "paper"].edge_index = torch.stack(
            [torch.randint(0, nau, (e,), generator=g), torch.randint(0, npap, (e,), generator=g)])
        h["author", "writes", "paper"].edge_attr = torch.randn(e, 2, generator=g)
        h["paper", "cites", "paper"].edge_index = torch.randint(0, npap, (2, i), generator=g)
        h.y = torch.tensor([float(i)])
        out.append(h)
    return out


def test_keys_follow_format_and_spec_round_trip():
    graphs = _two_type_graphs()
    budget = Budget.tight(graphs, 3)
    c = Collator(graphs, budget)
    flat = c.collate_indices([2, 0, 5])
    assert list(flat) == [
        "paper/batch", "paper/node_mask", "paper/ptr", "paper/x",
        "author/batch", "author/node_mask", "author/ptr", "author/x",
        "author__writes__paper/edge_attr", "author__writes__paper/edge_index",
        "author__writes__paper/edge_mask",
        "paper__cites__paper/edge_index", "paper__cites__paper/edge_mask",
        "graph_mask", "y"]
    rebuilt = unflatten(flat, infer_spec(flat))
    assert type(rebuilt).__name__ == "HeteroDataBatch"
    assert torch.equal(rebuilt["paper"].x, flat["paper/x"])
    assert torch.equal(rebuilt["author", "writes", "paper"].edge_index,
                       flat["author__writes__paper/edge_index"])
    # padded graph rows of y are NaN: compare with NaN == NaN, and check where the NaNs are
    torch.testing.assert_close(rebuilt.y, flat["y"], equal_nan=True, rtol=0, atol=0)
    assert not bool(flat["y"][:3].isnan().any()) and bool(flat["y"][3:].isnan().all())
    assert rebuilt.num_graphs == budget.graphs


def test_message_passing_on_real_nodes_unchanged():
    from torch_geometric.nn import SAGEConv

    graphs = _two_type_graphs()
    budget = Budget.tight(graphs, 4)
    flat = Collator(graphs, budget).collate_indices([1, 3, 4, 5])
    ref = Batch.from_data_list([graphs[i] for i in (1, 3, 4, 5)])
    torch.manual_seed(0)
    conv = SAGEConv((2, 3), 4)
    n = ref["paper"].num_nodes
    want = conv((ref["author"].x, ref["paper"].x), ref["author", "writes", "paper"].edge_index)
    got = conv((flat["author/x"], flat["paper/x"]), flat["author__writes__paper/edge_index"])
    torch.testing.assert_close(got[:n], want)


def test_hetero_errors():
    graphs = _two_type_graphs()
    budget = Budget.tight(graphs, 2)
    c = Collator(graphs, budget)
    with pytest.raises(ValueError, match="does not fit"):
        c.collate_indices([0, 1, 2, 3, 4])
    bad = Budget(nodes={"paper": 20}, edges={"paper__cites__paper": 21}, graphs=4)
    with pytest.raises(ValueError, match="budget types do not match"):
        Collator(graphs, bad)
    graphs[3]["paper"].x = graphs[3]["paper"].x.double()
    with pytest.raises(ValueError, match=r"index 3.*paper/x"):
        Collator(graphs, budget)


def test_hetero_budget_fit_and_loader_with_unsorted_types():
    # PyG order (paper, author) differs from the budget's sorted order
    graphs = _two_type_graphs(30)
    budget = Budget.fit(graphs, 4, num_samples=200)
    loader = FixedSizeLoader(graphs, budget, shuffle=True)
    ids = []
    for item in loader:
        ids.extend(int(h.y) for h in loader.collator.unpad(item))
    assert sorted(ids) == list(range(30))
    assert 0 < loader.stats.node_efficiency <= 1


def test_one_collator_and_one_unpad_for_both_kinds():
    from graph_adapter.format import unpad_batch

    graphs = tag(_two_type_graphs())
    budget = Budget.tight(graphs, 3)
    c = Collator(graphs, budget)  # a hetero budget: no separate class needed
    assert c.is_hetero
    flat = c.collate_indices([4, 1])
    # unpad_batch reads the stores off the keys; with or without the schema
    for back in (unpad_batch(flat, c.schema), unpad_batch(flat), c.unpad(flat)):
        assert [int(h.idx) for h in back] == [4, 1]
        for h in back:
            same_graph(h, graphs[int(h.idx)])
    # schema fields carry the collate attributes and round-trip through JSON
    from graph_adapter.format import Field

    ei = next(f for f in c.schema if f.key == "author__writes__paper/edge_index")
    assert (ei.level, ei.inc, ei.cat_dim, ei.trail) == ("edge", "nodes", 1, (2,))
    assert all(Field.from_dict(f.to_dict()) == f for f in c.schema)
