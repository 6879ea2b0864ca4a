"""Padded collate: equality with Batch.from_data_list, padding convention, unpadding."""
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch_geometric.data import Batch, Data

from graph_adapter.batching import Budget
from graph_adapter.batching import Collator, collate_padded
from graph_adapter.format import unpad_batch
from _padding import check_padding_slots, untied

SETTINGS = settings(deadline=None)


def make_graphs(sizes, seed=0, extra=True):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, (n, e) in enumerate(sizes):
        e = e if n > 0 else 0
        d = Data(x=torch.randn(n, 3, generator=g),
                 edge_index=torch.randint(0, max(n, 1), (2, e), generator=g),
                 edge_attr=torch.randn(e, 2, generator=g),
                 y=torch.randn(1, 1, generator=g))
        if extra:
            d.label = torch.tensor([i % 3])
            d.idx = torch.tensor([i])
        d.num_nodes = n
        out.append(d)
    return out


sizes_st = st.lists(st.tuples(st.integers(0, 9), st.integers(0, 14)), min_size=1, max_size=12)


def budget_for(graphs, slack=3):
    n = sum(d.num_nodes for d in graphs)
    e = sum(d.num_edges for d in graphs)
    # slack >= 1 padding rows; nodes: one more (two padding nodes are reserved);
    # one row more where two counts would tie (Budget refuses a tie)
    G = len(graphs) + slack
    # the no-empty-padding-slot rule (FORMAT.md): nodes >= graphs + largest graph - 1
    nodes = max(n + slack + 1, G + max(max(d.num_nodes for d in graphs) - 1, 0))
    N, E, G = untied(nodes, e + slack, G)
    return Budget(nodes=N, edges=E, graphs=G)


def real_rows_equal(flat, graphs):
    ref = Batch.from_data_list(graphs)
    g = len(graphs)
    n, e = ref.num_nodes, ref.num_edges
    assert torch.equal(flat["x"][:n], ref.x)
    assert torch.equal(flat["edge_index"][:, :e].long(), ref.edge_index)
    assert torch.equal(flat["edge_attr"][:e], ref.edge_attr)
    assert torch.equal(flat["y"][:g], ref.y)
    assert torch.equal(flat["batch"][:n].long(), ref.batch)
    assert torch.equal(flat["ptr"][:g + 1].long(), ref.ptr)
    if "label" in flat:
        assert torch.equal(flat["label"][:g], ref.label)


def check_padding(flat, budget, n_real, e_real, g, y_level="graph"):
    N, E, G = budget.nodes, budget.edges, budget.graphs
    assert flat["x"].shape[0] == N and flat["edge_index"].shape == (2, E)
    assert flat["ptr"].shape == (G + 1,) and flat["graph_mask"].shape == (G,)
    assert int(flat["node_mask"].sum()) == n_real
    assert int(flat["edge_mask"].sum()) == e_real
    assert int(flat["graph_mask"].sum()) == g
    assert bool(flat["node_mask"][:n_real].all()) and not bool(flat["node_mask"][n_real:].any())
    check_padding_slots(flat["batch"], flat["ptr"], N, n_real, G, g)
    pad_e = flat["edge_index"][:, e_real:]
    assert bool((pad_e >= n_real).all()), "padding edges touch a real node"
    assert bool((pad_e[0] == pad_e[1]).all()), "padding edges are self-loops"
    # real edges only touch real nodes
    assert bool((flat["edge_index"][:, :e_real] < n_real).all())
    assert bool((flat["x"][n_real:] == 0).all()) and bool((flat["edge_attr"][e_real:] == 0).all())
    if y_level == "graph":
        assert bool(torch.isnan(flat["y"][g:]).all())
    if "label" in flat and y_level == "graph":
        assert bool((flat["label"][g:] == 0).all())


@SETTINGS
@given(sizes=sizes_st, seed=st.integers(0, 10), slack=st.integers(1, 4))
def test_matches_from_data_list_and_padding(sizes, seed, slack):
    graphs = make_graphs(sizes, seed)
    budget = budget_for(graphs, slack)
    n = sum(d.num_nodes for d in graphs)
    e = sum(d.num_edges for d in graphs)
    col = Collator(graphs, budget)
    lst = Collator(graphs, budget, columnar=False)
    order = list(np.random.default_rng(seed).permutation(len(graphs)))
    sub = [graphs[i] for i in order]
    a = col.collate_indices(order)
    b = lst.collate(sub)
    c = collate_padded(sub, budget)
    assert list(a) == col.keys == sorted(a)
    for k in a:
        assert a[k].dtype == b[k].dtype == c[k].dtype, k
        assert torch.equal(a[k].nan_to_num(), b[k].nan_to_num()), k
        assert torch.equal(a[k].nan_to_num(), c[k].nan_to_num()), k
    real_rows_equal(a, sub)
    # a dataset where every graph has exactly one node (or one edge) cannot
    # tell node- (edge-) from graph-level y; PyG's choice on graph 0 decides
    want = "node" if all(d.num_nodes == 1 for d in graphs) else \
        "edge" if all(d.num_edges == 1 for d in graphs) else "graph"
    assert col.levels["y"] == want
    check_padding(a, budget, n, e, len(sub), col.levels["y"])
    back = unpad_batch(a, col.schema)
    assert len(back) == len(sub)
    for r, o in zip(back, sub):
        for k in ("x", "edge_index", "edge_attr", "y", "label", "idx"):
            assert torch.equal(r[k], o[k]), k
        assert r.num_nodes == o.num_nodes
    # without a schema the levels are guessed from the names/sizes
    back2 = unpad_batch(a, levels=col.levels)
    for r, o in zip(back2, sub):
        assert torch.equal(r.edge_index, o.edge_index) and torch.equal(r.x, o.x)


def test_exactly_full_edges_and_empty_batch():
    graphs = make_graphs([(3, 4), (2, 2)])
    budget = Budget(nodes=7, edges=6, graphs=3)  # 5 real nodes + the 2 reserved
    c = Collator(graphs, budget)
    out = c.collate_indices([0, 1])
    assert bool(out["edge_mask"].all())  # exactly full: no padding edge
    check_padding(out, budget, 5, 6, 2)
    e = c.empty()
    assert not e["node_mask"].any() and not e["graph_mask"].any()
    # no real graph: one padding node in each padding slot, the rest in the last
    assert int(e["batch"].max()) == 2 and e["ptr"].tolist() == [0, 1, 2, 7]
    assert {k: (v.shape, v.dtype) for k, v in e.items()} == \
        {k: (v.shape, v.dtype) for k, v in out.items()}


def test_does_not_fit_raises():
    graphs = make_graphs([(3, 4), (2, 2)])
    c = Collator(graphs, Budget(nodes=6, edges=7, graphs=3))  # 4 real nodes max (2 padding nodes reserved)
    with pytest.raises(ValueError, match="does not fit"):
        c.collate_indices([0, 1])
    with pytest.raises(ValueError, match="does not fit"):
        c.collate(graphs)


def test_int32_index_dtype():
    graphs = make_graphs([(3, 4), (2, 2)])
    c = Collator(graphs, Budget(nodes=8, edges=9, graphs=4), index_dtype=torch.int32)
    out = c.collate_indices([0, 1])
    for k in ("edge_index", "batch", "ptr"):
        assert out[k].dtype == torch.int32, k
    assert out["x"].dtype == torch.float32 and out["label"].dtype == torch.int64
    real_rows_equal(out, graphs)


def test_excluded_keys_warn_and_scalar_graph_attr():
    graphs = make_graphs([(3, 4), (2, 2)], extra=False)
    for i, d in enumerate(graphs):
        d.smiles = f"C{i}"
        d.w = torch.tensor(float(i))  # 0-d graph attribute
    with pytest.warns(UserWarning, match="smiles"):
        c = Collator(graphs, Budget(nodes=8, edges=9, graphs=4))
    assert "smiles" in c.excluded_keys and "smiles" not in c.keys
    out = c.collate_indices([1, 0])
    assert out["w"].shape == (4,) and out["w"][:2].tolist() == [1.0, 0.0]
    assert torch.isnan(out["w"][2:]).all()
    back = unpad_batch(out, c.schema)
    assert back[0].w.dim() == 0 and float(back[0].w) == 1.0


def test_inconsistent_graphs_raise_with_index_and_key():
    graphs = make_graphs([(3, 4), (2, 2), (2, 1)])
    graphs[2].x = graphs[2].x.double()
    with pytest.raises(ValueError, match=r"index 2.*'x'"):
        Collator(graphs, Budget(nodes=20, edges=21, graphs=5))
    graphs = make_graphs([(3, 4), (2, 2), (2, 1)])
    graphs[1].edge_attr = torch.randn(2, 5)
    with pytest.raises(ValueError, match=r"index 1.*'edge_attr'"):
        Collator(graphs, Budget(nodes=20, edges=21, graphs=5))
    graphs = make_graphs([(3, 4), (2, 2)])
    graphs[1].extra = torch.zeros(1)
    with pytest.raises(ValueError, match=r"index 1.*extra"):
        Collator(graphs, Budget(nodes=20, edges=21, graphs=5))
    graphs = make_graphs([(3, 4)])
    graphs[0].ptr = torch.zeros(1)
    with pytest.raises(ValueError, match="reserves"):
        Collator(graphs, Budget(nodes=20, edges=21, graphs=5))


def test_level_checked_on_whole_dataset():
    # graph 0 has one node: PyG would call y [1, 1] node-level on it alone
    graphs = make_graphs([(1, 0), (3, 2), (2, 1)])
    c = Collator(graphs, Budget(nodes=10, edges=11, graphs=5))
    assert c.levels["y"] == "graph" and c.levels["x"] == "node"
    assert c.levels["edge_index"] == "edge" and c.levels["edge_attr"] == "edge"


def test_message_passing_sees_real_graphs_unchanged():
    from torch_geometric.nn import GINConv, global_add_pool

    graphs = make_graphs([(4, 6), (3, 3), (5, 8), (2, 1)], seed=3)
    budget = Budget(nodes=20, edges=25, graphs=6)
    flat = Collator(graphs, budget).collate_indices([0, 1, 2, 3])
    torch.manual_seed(0)
    conv = GINConv(torch.nn.Linear(3, 4))
    ref = Batch.from_data_list(graphs)
    want = conv(ref.x, ref.edge_index)
    got = conv(flat["x"], flat["edge_index"])
    n = ref.num_nodes
    torch.testing.assert_close(got[:n], want)
    pooled = global_add_pool(got, flat["batch"], size=budget.graphs)
    torch.testing.assert_close(pooled[:4], global_add_pool(want, ref.batch))


class _Custom(Data):
    """A Data subclass with a custom increment and a key concatenated on dim 1."""

    def __inc__(self, key, value, *args, **kwargs):
        if key == "ring":
            return 3
        return super().__inc__(key, value, *args, **kwargs)

    def __cat_dim__(self, key, value, *args, **kwargs):
        if key == "wide":
            return 1
        return super().__cat_dim__(key, value, *args, **kwargs)


@SETTINGS
@given(sizes=sizes_st, seed=st.integers(0, 5), int32=st.booleans())
def test_numpy_gather_dtypes_layouts_bit_identical(sizes, seed, int32):
    # the columnar (numpy) path against the list (torch) path, on dtypes numpy
    # lacks (bfloat16), bool, float16, a dim-1 key, a custom increment and an
    # int32 edge_index
    g = torch.Generator().manual_seed(seed)
    graphs = []
    for i, (n, e) in enumerate(sizes):
        e = e if n else 0
        d = _Custom(x=torch.randn(n, 2, generator=g).to(torch.bfloat16),
                    edge_index=torch.randint(0, max(n, 1), (2, e), generator=g).int(),
                    h=torch.randn(n, generator=g).half(), flag=torch.rand(e, 2, generator=g) > .5,
                    wide=torch.randn(3, n, generator=g).double(),
                    ring=torch.randint(0, 5, (1, 2), generator=g),
                    yb=torch.randn(1, 2, generator=g).to(torch.bfloat16))
        d.num_nodes = n
        graphs.append(d)
    budget = budget_for(graphs, 2)
    idt = torch.int32 if int32 else torch.int64
    col = Collator(graphs, budget, index_dtype=idt)
    lst = Collator(graphs, budget, columnar=False, index_dtype=idt)
    order = list(np.random.default_rng(seed).permutation(len(graphs)))
    a = col.collate_indices(order)
    b = lst.collate([graphs[i] for i in order])
    assert list(a) == list(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert a[k].is_contiguous(), k
        assert torch.equal(a[k].view(torch.uint8) if a[k].dtype != torch.bool else a[k],
                           b[k].view(torch.uint8) if b[k].dtype != torch.bool else b[k]), k
    if col.levels["yb"] == "graph":  # (single-node datasets: node-level, as PyG)
        assert torch.isnan(a["yb"][len(graphs):].float()).all()


def test_batches_never_share_memory():
    graphs = make_graphs([(3, 4), (2, 2), (4, 1)])
    c = Collator(graphs, Budget(nodes=12, edges=13, graphs=5))
    a = c.collate_indices([0, 1])
    b = c.collate_indices([2])
    ptrs = {v.untyped_storage().data_ptr() for v in a.values()}
    assert not ptrs & {v.untyped_storage().data_ptr() for v in b.values()}
    with pytest.raises(IndexError):
        c.collate_indices([0, -1])
    with pytest.raises(IndexError):
        c.collate_indices([3])


def test_columnar_loader_with_worker_and_pin_memory():
    from graph_adapter.batching import FixedSizeLoader

    graphs = make_graphs([(3, 2), (5, 4), (2, 1), (6, 6)] * 3)
    b = Budget(nodes=20, edges=21, graphs=5)
    ref = [dict(x) for x in FixedSizeLoader(graphs, b)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pin_memory without an accelerator
        ld = FixedSizeLoader(graphs, b, num_workers=1, pin_memory=True)
        got = list(ld)
    assert len(got) == len(ref)
    for r, o in zip(ref, got):
        for k in r:
            assert torch.equal(r[k].nan_to_num(), o[k].nan_to_num()), k


def _two_node_graphs(n=6, cls=Data, **attrs):
    return [cls(x=torch.randn(4, 3), edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]), **attrs)
            for _ in range(n)]


def test_a_tensor_increment_is_named_with_the_graph_key_and_the_way_out():
    class Bipartite(Data):
        def __inc__(self, key, value, *args, **kwargs):
            if key == "edge_index":  # PyG's bipartite form: one increment per row
                return torch.tensor([[self.num_nodes], [self.num_nodes]])
            return super().__inc__(key, value, *args, **kwargs)

    graphs = _two_node_graphs(cls=Bipartite)
    with pytest.raises(ValueError, match=r"graph at dataset index 0: Bipartite.__inc__\('edge_index'"
                                         r".*shape \(2, 1\).*HeteroData.*exclude=\['edge_index'\]"):
        Collator(graphs, Budget.tight(graphs, 3))


def test_an_attribute_str_in_one_graph_and_tensor_in_another_names_both():
    graphs = _two_node_graphs(name="a")
    graphs[4].name = torch.tensor([1.0])
    with pytest.warns(UserWarning, match=r"'name' \(not a tensor \(str; on the graph at "
                                         r"dataset index 0\); the graph at dataset "
                                         r"index 4 has a tensor of shape \(1,\) under it"):
        c = Collator(graphs, Budget.tight(graphs, 3))
    assert "name" not in c.keys and "index 4" in c.excluded_keys["name"]
