"""FixedSizeLoader on graphs with several node sets in one store (PyG's PairData):
every set is a size dim with its own budget count, ``<set>_batch`` / ``<set>_ptr`` /
``<set>_node_mask`` and ``<edge set>_edge_mask`` (graph_adapter/batching/_sets.py)."""
import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch_geometric.data import Batch, Data

from graph_adapter import ipu_wrap, unpad
from graph_adapter.batching import Budget, Collator, FixedSizeLoader, graph_sizes
from strategies import PairData  # PyG's recipe, shared

pytestmark = pytest.mark.filterwarnings(
    "ignore:Unable to accurately infer 'num_nodes'")  # PyG, on any PairData


def _pd():
    return PairData(x_s=torch.randn(5, 16), edge_index_s=torch.tensor([[0, 0, 0, 0], [1, 2, 3, 4]]),
                    x_t=torch.randn(4, 16), edge_index_t=torch.tensor([[0, 0, 0], [1, 2, 3]]))


def _pair(ns, nt, es, et, seed, dtype=torch.float32, y=True):
    g = torch.Generator().manual_seed(seed)
    p = PairData(x_s=torch.randn(ns, 3, generator=g).to(dtype),
                 edge_index_s=torch.randint(0, max(ns, 1), (2, es), generator=g),
                 edge_attr_s=torch.randn(es, 2, generator=g).to(dtype),
                 x_t=torch.randn(nt, 3, generator=g).to(dtype),
                 edge_index_t=torch.randint(0, nt, (2, et), generator=g))
    if y:
        p.y = torch.randn(1, generator=g).to(dtype)
    return p


def _pairs(sizes, seed=0, **kw):
    return [_pair(*s, seed=seed + i, **kw) for i, s in enumerate(sizes)]


def _same(a, b):
    return set(a.keys()) == set(b.keys()) and all(torch.equal(a[k], b[k]) for k in b.keys())


# sets of at least one node (graph 0 names the sets: PyG's __inc__ of an empty set is 0)
pair_sizes = st.lists(st.tuples(st.integers(1, 5), st.integers(1, 4), st.integers(0, 6),
                                st.integers(0, 5)), min_size=1, max_size=12)


# ------------------------------------------------------------------ budgets
def test_int_budget_refused_naming_the_sets_and_the_budget_to_pass():
    with pytest.raises(ValueError, match=r"make 2 node sets .*\['x_s', 'x_t'\].*Budget\(nodes="
                                         r"\{'x_s': \.\.\., 'x_t': \.\.\.\}.*exclude=") as e:
        Collator([_pd(), _pd()], Budget(nodes=20, edges=17, graphs=3))
    assert "graph 0 makes it node-level" not in str(e.value)


def test_plain_data_with_suffixed_keys_unaffected():
    # PyG's own __inc__: one node set, whatever the key names
    d = Data(x=torch.randn(4, 2), edge_index=torch.tensor([[0, 1], [1, 2]]),
             node_index_2=torch.tensor([3, 0, 1, 2]), x_2=torch.randn(4, 1))
    c = Collator([d, d], Budget(nodes=12, edges=7, graphs=3), warn=False)
    assert c.levels["x_2"] == "node" and c.levels["node_index_2"] == "node"
    assert c.node_sets == [] and "batch" in c.keys


def test_budget_per_set_fits_and_round_trips_json():
    ds = _pairs([(3, 2, 4, 1), (5, 4, 6, 3), (1, 1, 0, 0)])
    b = Budget.fit(ds, 2)
    assert tuple(b.nodes) == ("x_s", "x_t") and tuple(b.edges) == ("edge_index_s", "edge_index_t")
    assert Budget.from_json(b.to_json()) == b
    sizes = graph_sizes(ds)
    assert sizes.matrix.tolist() == [[3, 2, 4, 1], [5, 4, 6, 3], [1, 1, 0, 0]]
    t = Budget.tight(ds, 2)
    assert t.max_real_nodes["x_s"] >= 8 and t.edges["edge_index_s"] >= 10
    ld = FixedSizeLoader(ds, json.loads(b.to_json()))
    assert ld.budget == b


def test_a_graph_over_a_sets_budget_is_named():
    ds = _pairs([(3, 2, 4, 1), (9, 2, 4, 1)])
    b = Budget(nodes={"x_s": 8, "x_t": 7}, edges={"edge_index_s": 10, "edge_index_t": 9}, graphs=3)
    with pytest.raises(ValueError, match=r"holds at most 6 x_s nodes.*dataset index 1 has nodes \{x_s: 9, x_t: 2\}"):
        FixedSizeLoader(ds, b)
    with pytest.warns(UserWarning, match="dataset index 1"):
        ld = FixedSizeLoader(ds, b, oversize="skip")
    assert list(ld.skipped_indices) == [1]


def test_an_inc_that_is_not_its_sets_size_is_named():
    class Odd(PairData):
        def __inc__(self, key, value, *args, **kwargs):
            if key == "edge_index_s":  # the set's size on graph 0 only
                return self.x_s.size(0) if self.x_s.size(0) == 3 else 7
            return super().__inc__(key, value, *args, **kwargs)

    ds = [Odd(**{k: p[k] for k in p.keys()}) for p in _pairs([(3, 2, 4, 1), (4, 2, 2, 1)])]
    with pytest.raises(ValueError, match=r"dataset index 1: __inc__\('edge_index_s'\) is 7, but "
                                         r"its node set 'x_s' has 4 rows"):
        Collator(ds, Budget.tight(ds, 2))


def test_unpad_without_schema_is_named():
    from graph_adapter.format import unpad_batch

    ds = _pairs([(3, 2, 4, 1), (4, 2, 2, 1)])
    c = Collator(ds, Budget.tight(ds, 2))
    with pytest.raises(ValueError, match="schema=loader.schema"):
        unpad_batch(c.collate_indices([0, 1]))


# ------------------------------------------------------------------ the batches
def test_keys_follow_batch_and_padding_rows():
    ds = _pairs([(3, 2, 4, 1), (4, 2, 2, 1), (2, 3, 1, 2)])
    b = Budget.tight(ds, 3)
    c = Collator(ds, b)
    assert c.node_sets == ["x_s", "x_t"]
    out = c.collate_indices([0, 1, 2])
    assert set(out) == {"x_s", "x_t", "edge_index_s", "edge_index_t", "edge_attr_s", "y",
                        "graph_mask", "x_s_batch", "x_s_ptr", "x_s_node_mask", "x_t_batch",
                        "x_t_ptr", "x_t_node_mask", "edge_index_s_edge_mask",
                        "edge_index_t_edge_mask"}
    ref = Batch.from_data_list(ds, follow_batch=["x_s", "x_t"])
    for s in ("x_s", "x_t"):
        n = ref[s].size(0)
        assert torch.equal(out[s][:n], ref[s]) and not out[s][n:].any()
        assert torch.equal(out[s + "_batch"][:n], ref[s + "_batch"])
        assert torch.equal(out[s + "_ptr"][:4], ref[s + "_ptr"])
        assert int(out[s + "_node_mask"].sum()) == n and out[s + "_batch"][-1] == b.graphs - 1
    for k, s in (("edge_index_s", "x_s"), ("edge_index_t", "x_t")):
        e = ref[k].size(1)
        assert torch.equal(out[k][:, :e], ref[k])  # PyG's __inc__ offsets, exactly
        # padding edges join the set's last (padding) node, never a real one
        assert (out[k][:, e:] == b.nodes[s] - 1).all()
        assert int(out[k + "_edge_mask"].sum()) == e
    assert torch.equal(out["edge_attr_s"][:ref.edge_attr_s.size(0)], ref.edge_attr_s)


@settings(max_examples=12, deadline=None)
@given(sizes=pair_sizes, k=st.integers(1, 4), seed=st.integers(0, 3),
       packer=st.sampled_from(["greedy", "histogram"]))
def test_every_graph_once_per_epoch_with_one_signature(sizes, k, seed, packer):
    ds = _pairs(sizes, seed=seed)
    b = Budget.fit(ds, k, num_samples=50)
    ld = FixedSizeLoader(ds, b, seed=seed, packer=packer)
    sig, seen = None, []
    for batch in ld:
        s = {key: (tuple(v.shape), v.dtype) for key, v in batch.items()}
        assert sig is None or s == sig
        sig = s
        seen += ld.collator.unpad(batch)
        G = batch["graph_mask"].numel()
        for name in ("x_s", "x_t"):  # no padding graph slot of a set is empty
            per_slot = torch.bincount(batch[name + "_batch"], minlength=G)
            assert per_slot.numel() == G and bool((per_slot >= 1).all()), (name, per_slot)
    assert len(seen) == len(ds)
    left = list(range(len(ds)))
    for g in seen:  # each graph back exactly, once
        j = next(j for j in left if _same(g, ds[j]))
        left.remove(j)
    assert sig == {key: (tuple(v.shape), v.dtype) for key, v in ld.collator.empty().items()}


def test_micro_batches_stack_every_set():
    ds = _pairs([(3, 2, 4, 1), (4, 2, 2, 1), (2, 3, 1, 2), (1, 1, 0, 0)])
    ld = FixedSizeLoader(ds, Budget.fit(ds, 1), micro_batches=2)
    batch = next(iter(ld))
    assert batch["graph_mask"].dim() == 2 and batch["x_s_node_mask"].shape[0] == 2
    assert len(ld.collator.unpad(batch)) == int(batch["graph_mask"].sum())


# ------------------------------------------------------------------ a wrapped model
class PairNet(nn.Module):
    """Two convolutions with self-loops, a BatchNorm on the source set's nodes, a pool per set."""

    def __init__(self):
        super().__init__()
        from torch_geometric.nn import GATConv, GCNConv

        # (self-loops: GCNConv passes num_nodes, GATConv removes them given the index only)
        self.cs, self.ct = GCNConv(3, 6), GATConv(3, 6)
        self.bn = nn.BatchNorm1d(6)
        self.lin = nn.Linear(12, 1)

    def forward(self, data):
        from torch_geometric.nn import global_add_pool, global_mean_pool

        hs = self.bn(self.cs(data.x_s, data.edge_index_s).relu())
        ht = self.ct(data.x_t, data.edge_index_t).relu()
        h = torch.cat([global_mean_pool(hs, data.x_s_batch), global_add_pool(ht, data.x_t_batch)], -1)
        return {"graph": self.lin(h).squeeze(-1), "nodes_s": hs}


@settings(max_examples=4, deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(2, 5), st.integers(1, 4), st.integers(0, 6),
                                st.integers(0, 5)), min_size=1, max_size=7),
       seed=st.integers(0, 5))
def test_wrapped_pair_model_is_padding_invariant(sizes, seed):
    # (two source nodes at least: PyG's BatchNorm1d in train() raises on one row)
    ds = _pairs(sizes, seed=seed, dtype=torch.float64)
    torch.manual_seed(seed)
    model, ref = PairNet().double(), PairNet().double()
    ref.load_state_dict(model.state_dict())
    wrapped = ipu_wrap(model)
    ld = FixedSizeLoader(ds, Budget.fit(ds, 3, num_samples=50), seed=seed)
    for batch in ld:
        graphs = ld.collator.unpad(batch)
        pyg = Batch.from_data_list([PairData(**{k: g[k] for k in g.keys()}) for g in graphs],
                                   follow_batch=["x_s", "x_t"])
        out = unpad(wrapped(batch), batch)
        want = ref(pyg)
        assert torch.allclose(out["output/graph"], want["graph"], atol=1e-12)
        assert torch.allclose(out["output/nodes_s"], want["nodes_s"], atol=1e-12)
        (out["output/graph"].sum() + out["output/nodes_s"].square().sum()).backward()
        (want["graph"].sum() + want["nodes_s"].square().sum()).backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            assert torch.allclose(p.grad, q.grad, atol=1e-12), name
        model.zero_grad()
        ref.zero_grad()
        # the masked BatchNorm took its statistics over the real x_s rows only
        assert torch.allclose(model.bn.running_mean, ref.bn.running_mean, atol=1e-12)
        assert torch.allclose(model.bn.running_var, ref.bn.running_var, atol=1e-12)


def test_sets_read_off_the_first_graphs_not_graph_0_alone():
    # graph 0 has one x_s node and one edge: edge_attr_s has the rows of both; the
    # first graphs together (and PyG's rule for "edge" names) make it edge-level
    ds = _pairs([(1, 1, 1, 0), (1, 1, 0, 0), (2, 1, 3, 1)])
    c = Collator(ds, Budget.tight(ds, 2))
    assert c.levels["edge_attr_s"] == "edge" and c.levels["x_s"] == "node"
    f = {f.key: f for f in c.schema}
    assert (f["edge_attr_s"].edges, f["x_s"].nodes, f["edge_index_s"].nodes) == \
        ("edge_index_s", "x_s", "x_s")


def test_graph_objects_collate_like_the_dataset():
    ds = _pairs([(3, 2, 4, 1), (4, 2, 2, 1), (2, 3, 1, 2)])
    c = Collator(ds, Budget.tight(ds, 3))
    a, b = c.collate([ds[2], ds[0]]), c.collate_indices([2, 0])
    assert a.keys() == b.keys()
    assert all(a[k].dtype == b[k].dtype and torch.allclose(a[k], b[k], equal_nan=True)
               if a[k].is_floating_point() else torch.equal(a[k], b[k]) for k in a)


def test_trim_takes_the_padded_path_on_sets():
    ds = _pairs([(3, 2, 4, 1), (4, 2, 2, 1), (2, 3, 1, 2)], dtype=torch.float64)
    batch = Collator(ds, Budget.tight(ds, 3)).collate_indices([0, 1, 2])
    torch.manual_seed(0)
    model = PairNet().double().eval()
    plain, trimmed = ipu_wrap(model), ipu_wrap(model, trim=True)
    for _ in range(2):
        a, b = plain(batch), trimmed(batch)
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert trimmed.trim_stats["trimmed"] == 0


# ------------------------------------------------------------------ bipartite edge_index
class BipartiteData(Data):
    """PyG's bipartite recipe: ``edge_index`` rows into ``x_s`` and ``x_t``."""

    def __inc__(self, key, value, *args, **kwargs):
        if key == "edge_index":
            return torch.tensor([[self.x_s.size(0)], [self.x_t.size(0)]])
        return super().__inc__(key, value, *args, **kwargs)


def _bipartites(sizes, seed=0, dtype=torch.float32):
    out = []
    for i, (ns, nt, e) in enumerate(sizes):
        g = torch.Generator().manual_seed(seed + i)
        out.append(BipartiteData(
            x_s=torch.randn(ns, 3, generator=g).to(dtype), x_t=torch.randn(nt, 2, generator=g).to(dtype),
            edge_index=torch.stack([torch.randint(0, ns, (e,), generator=g),
                                    torch.randint(0, nt, (e,), generator=g)]),
            edge_attr=torch.randn(e, 4, generator=g).to(dtype)))
    return out


def test_bipartite_edge_index_offsets_each_row_by_its_set():
    ds = _bipartites([(2, 1, 1), (3, 4, 5), (4, 2, 3)])
    b = Budget.tight(ds, 3)
    assert tuple(b.nodes) == ("x_s", "x_t") and tuple(b.edges) == ("",)  # the store's own edges
    c = Collator(ds, b)
    assert {f.key: f.nodes for f in c.schema}["edge_index"] == "x_s,x_t"
    out = c.collate_indices([0, 1, 2])
    ref = Batch.from_data_list(ds)
    e = ref.edge_index.size(1)
    assert torch.equal(out["edge_index"][:, :e], ref.edge_index)  # PyG's [[n_s], [n_t]] offsets
    assert out["edge_index"][:, e:].tolist() == [[b.nodes["x_s"] - 1] * (b.edges[""] - e),
                                                 [b.nodes["x_t"] - 1] * (b.edges[""] - e)]
    assert "batch" not in out and int(out["edge_mask"].sum()) == e
    assert all(_same(g, d) for g, d in zip(c.unpad(out), ds))


class BipartiteNet(nn.Module):
    def __init__(self):
        super().__init__()
        from torch_geometric.nn import SAGEConv

        self.conv = SAGEConv((3, 2), 5)
        self.bn = nn.BatchNorm1d(5)

    def forward(self, data):
        from torch_geometric.nn import global_max_pool

        h = self.bn(self.conv((data.x_s, data.x_t), data.edge_index).relu())
        return {"t": h, "graph": global_max_pool(h, data.x_t_batch)}


@settings(max_examples=3, deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(1, 4), st.integers(2, 4), st.integers(0, 6)),
                      min_size=1, max_size=6), seed=st.integers(0, 5))
def test_wrapped_bipartite_model_is_padding_invariant(sizes, seed):
    ds = _bipartites(sizes, seed=seed, dtype=torch.float64)
    torch.manual_seed(seed)
    model, ref = BipartiteNet().double(), BipartiteNet().double()
    ref.load_state_dict(model.state_dict())
    wrapped = ipu_wrap(model)
    ld = FixedSizeLoader(ds, Budget.fit(ds, 2, num_samples=50), seed=seed)
    for batch in ld:
        pyg = Batch.from_data_list([BipartiteData(**{k: g[k] for k in g.keys()})
                                    for g in ld.collator.unpad(batch)], follow_batch=["x_t"])
        out, want = unpad(wrapped(batch), batch), ref(pyg)
        for k in ("t", "graph"):
            assert torch.allclose(out["output/" + k], want[k], atol=1e-12), k
        out["output/graph"].sum().backward()
        want["graph"].sum().backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            assert torch.allclose(p.grad, q.grad, atol=1e-12), name
        model.zero_grad()
        ref.zero_grad()


def test_bipartite_rows_into_the_stores_own_nodes_and_a_set():
    class Half(Data):  # row 0 into x (the store's own nodes), row 1 into x_t
        def __inc__(self, key, value, *args, **kwargs):
            if key == "edge_index":
                return torch.tensor([[self.x.size(0)], [self.x_t.size(0)]])
            return super().__inc__(key, value, *args, **kwargs)

    g = torch.Generator().manual_seed(0)
    ds = [Half(x=torch.randn(n, 2, generator=g), x_t=torch.randn(n + 1, 2, generator=g),
               edge_index=torch.stack([torch.randint(0, n, (3,), generator=g),
                                       torch.randint(0, n + 1, (3,), generator=g)]))
          for n in (2, 3, 4)]
    c = Collator(ds, Budget.tight(ds, 3))
    assert {f.key: f.nodes for f in c.schema}["edge_index"] == ",x_t"
    out = c.collate_indices([0, 1, 2])
    assert {"batch", "ptr", "node_mask", "x_t_batch", "x_t_ptr"} <= set(out)
    assert torch.equal(out["edge_index"][:, :9], Batch.from_data_list(ds).edge_index)
    assert all(_same(a, b) for a, b in zip(c.unpad(out), ds))


@pytest.mark.extended  # two fullgraph compiles (~10 s on 2 cores)
def test_wrapped_set_models_compile_fullgraph_in_one_graph():
    from torch._dynamo.utils import counters

    for ds, Net in ((_pairs([(3, 2, 4, 1), (4, 2, 2, 1), (2, 3, 1, 2)]), PairNet),
                    (_bipartites([(2, 2, 1), (3, 4, 5), (4, 2, 3)]), BipartiteNet)):
        torch._dynamo.reset()
        counters.clear()
        ld = FixedSizeLoader(ds, Budget.fit(ds, 2, num_samples=50))
        torch.manual_seed(0)
        wrapped = ipu_wrap(Net()).eval()
        compiled = torch.compile(wrapped, fullgraph=True, backend="aot_eager", dynamic=False)
        for batch in ld:  # the set keys and frame are read off keys and static shapes
            got, want = compiled(batch), wrapped(batch)
            assert all(torch.allclose(got[k], want[k], atol=1e-6) for k in want)
        assert counters["stats"]["unique_graphs"] == 1, Net.__name__


def test_in_memory_datasets_and_an_empty_set_in_graph_0():
    from torch_geometric.data import InMemoryDataset

    class Stored(InMemoryDataset):
        def __init__(self, graphs):
            super().__init__()
            self.data, self.slices = self.collate(graphs)

    # graph 0 has no x_s node: the first graphs' batch still names the set
    for graphs in (_pairs([(0, 2, 0, 1), (2, 1, 1, 0), (3, 3, 2, 2)]),
                   _bipartites([(2, 1, 1), (3, 4, 5), (1, 2, 0)])):
        ds = Stored(graphs)
        assert graph_sizes(ds).matrix.tolist() == graph_sizes(graphs).matrix.tolist()
        ld = FixedSizeLoader(ds, Budget.fit(ds, 2, num_samples=50))
        seen = [g for batch in ld for g in ld.collator.unpad(batch)]
        assert len(seen) == 3 and all(any(_same(s, g) for g in graphs) for s in seen)


def test_a_set_mask_of_another_dtype_is_named():
    from graph_adapter.format import DtypeMismatchError

    ds = _pairs([(3, 2, 4, 1), (4, 2, 2, 1), (2, 3, 1, 2)])
    batch = Collator(ds, Budget.tight(ds, 3)).collate_indices([0, 1, 2])
    torch.manual_seed(0)
    wrapped = ipu_wrap(PairNet())  # the first call: no earlier batch to compare with
    with pytest.raises(DtypeMismatchError, match=r"mask 'x_s_node_mask' has dtype int64"):
        wrapped({**batch, "x_s_node_mask": batch["x_s_node_mask"].long()})


def test_a_wrapped_pair_model_has_static_shapes_on_every_set():
    # GCNConv on x_s adds self-loops over N_s nodes (num_nodes=N_s), GATConv on x_t
    # removes them from edge_index_t: the static stand-ins run on that set's nodes and
    # mask, so nothing is data-dependent
    import graph_adapter as ga

    ds = _pairs([(3, 2, 4, 1), (4, 2, 2, 1), (2, 3, 1, 2)])
    batch = Collator(ds, Budget.tight(ds, 3)).collate_indices([0, 1])
    torch.manual_seed(0)
    report = ga.check(ipu_wrap(PairNet()), batch)
    assert report.ok, str(report)


def test_follow_batch_names_the_sets_the_batches_carry():
    ds = _pairs([(3, 2, 4, 1), (4, 2, 2, 1), (2, 3, 1, 2)])
    b = Budget.tight(ds, 3)
    batch = next(iter(FixedSizeLoader(ds, b, follow_batch=["x_s", "x_t"])))
    assert {"x_s_batch", "x_s_ptr", "x_t_batch", "x_t_ptr"} <= set(batch)
    with pytest.raises(ValueError, match=r"follow_batch=\['edge_attr_s'\].*\['edge_attr_s'\] are "
                                         r"no node sets.*\['x_s', 'x_t'\]"):
        FixedSizeLoader(ds, b, follow_batch=["edge_attr_s"])
    d = Data(x=torch.randn(3, 2), edge_index=torch.tensor([[0, 1], [1, 2]]))
    with pytest.raises(ValueError, match="they have none.*'batch'"):
        FixedSizeLoader([d, d], Budget.tight([d, d], 2), follow_batch="x")
