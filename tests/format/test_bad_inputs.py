"""Issue 15: every class of bad input gets a named error (type, key, graph index,
what to do), inputs that should work do, and nothing is dropped silently.

One test per class; docs/errors.md is the table of these classes.
"""
import json
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data, HeteroData

from graph_adapter import Budget, FixedSizeLoader
from graph_adapter.batching import Collator
from graph_adapter.format import unpad_batch


def graphs(n=8, nodes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        k = nodes + i % 3
        out.append(Data(x=torch.randn(k, 3, generator=g),
                        edge_index=torch.randint(0, k, (2, 2 * k), generator=g),
                        y=torch.randn(1, generator=g), idx=torch.tensor([i])))
    return out


B = Budget(nodes=40, edges=60, graphs=5)


# ------------------------------------------------------------------ edge_index
@pytest.mark.parametrize("bad", [lambda k: k, lambda k: k + 3, lambda k: -1],
                         ids=["num_nodes", "beyond", "negative"])
@pytest.mark.parametrize("columnar", [True, False])
def test_index_out_of_its_graph_names_graph_and_key(bad, columnar):
    gs = graphs()
    gs[5].edge_index[1, 2] = bad(gs[5].num_nodes)
    with pytest.raises(ValueError) as ei:
        ld = FixedSizeLoader(gs, B, columnar=columnar)
        list(ld)  # columnar=False: checked when the batch is collated
    msg = str(ei.value)
    assert "dataset index 5" in msg and "'edge_index'" in msg
    assert f"[0, {gs[5].num_nodes})" in msg and "drop" in msg


def test_index_check_can_be_skipped_explicitly():
    gs = graphs()
    gs[5].edge_index[1, 2] = gs[5].num_nodes  # joins graph 5 to the next one
    ld = FixedSizeLoader(gs, B, validate=False)
    assert sum(int(it["graph_mask"].sum()) for it in ld) == len(gs)


def test_float_index_is_a_type_error():
    gs = graphs()
    for d in gs:
        d.edge_index = d.edge_index.float() + 0.5
    with pytest.raises(TypeError, match=r"'edge_index'.*float32.*\.long\(\)"):
        FixedSizeLoader(gs, B)


def test_transposed_index_is_named():
    gs = graphs()
    for d in gs:
        d.edge_index = d.edge_index[:, :4].t().contiguous()  # [E, 2], same E everywhere
    with pytest.raises(ValueError, match=r"'edge_index' must have shape \[2, num_edges\].*transpose"):
        FixedSizeLoader(gs, B)


def test_hetero_index_checked_against_source_and_destination_types():
    hs = []
    for i in range(4):
        h = HeteroData()
        h["a"].x = torch.randn(3, 2)
        h["b"].x = torch.randn(5, 2)
        h["a", "to", "b"].edge_index = torch.tensor([[0, 2], [4, 1]])
        hs.append(h)
    hs[2]["a", "to", "b"].edge_index = torch.tensor([[0, 3], [4, 1]])  # 3 >= 3 "a" nodes
    b = Budget(nodes={"a": 20, "b": 30}, edges={"a__to__b": 12}, graphs=4)
    with pytest.raises(ValueError) as ei:
        FixedSizeLoader(hs, b)
    assert "dataset index 2" in str(ei.value) and "'a__to__b/edge_index'" in str(ei.value)
    assert "[0, 3) for the source and [0, 5) for the destination" in str(ei.value)


# ------------------------------------------------------------------ sizes
def test_size_mismatch_names_the_graph_that_has_it():
    gs = graphs()
    for d in gs:
        d.pos = torch.randn(d.num_nodes, 2)
    gs[5].pos = torch.randn(gs[5].num_nodes - 1, 2)
    with pytest.raises(ValueError) as ei:
        FixedSizeLoader(gs, B)
    msg = str(ei.value)
    assert "dataset index 5" in msg and "'pos'" in msg and "one row per node" in msg


def test_item_that_is_no_graph_names_index_and_transform():
    items = [{"features": d, "labels": d.y} for d in graphs()]
    with pytest.raises(TypeError, match=r"index 0 is a dict.*transform=lambda item: "
                                        r"item\['features'\]"):
        FixedSizeLoader(items, B)
    with pytest.raises(TypeError, match="transform="):
        Budget.fit(items, 3)
    mixed = graphs()
    mixed[3] = "not a graph"
    with pytest.raises(TypeError, match="index 3 is a str"):
        FixedSizeLoader(mixed, B)


# ------------------------------------------------------------------ excluded keys
def test_non_tensor_attribute_on_some_graphs_only_is_reported():
    gs = graphs()
    gs[4].smiles = "CCO"  # graph 0 has none
    with pytest.warns(UserWarning) as rec:
        ld = FixedSizeLoader(gs, B)
    msg = " ".join(str(w.message) for w in rec)
    assert "'smiles'" in msg and "dataset index 4" in msg and "exclude=['smiles']" in msg
    assert "smiles" in ld.excluded_keys and "smiles" in ld.stats.excluded_keys
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # on purpose: no warning, still listed
        ld2 = FixedSizeLoader(gs, B, exclude=["smiles"])
    assert "on purpose" in ld2.excluded_keys["smiles"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ld3 = FixedSizeLoader(gs, B, exclude=["idx", "smiles"])  # idx: a tensor key
    assert "idx" not in ld3.keys and "idx" in ld3.excluded_keys


# ------------------------------------------------------------------ inputs that should work
from strategies import PairData  # noqa: E402


def _pairs():
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(6):
        ns, nt = 3 + i % 3, 4
        out.append(PairData(x_s=torch.randn(ns, 2, generator=g),
                            edge_index_s=torch.randint(0, ns, (2, 5), generator=g),
                            x_t=torch.randn(nt, 2, generator=g),
                            edge_index_t=torch.randint(0, nt, (2, 3), generator=g)))
    return out


def pair_to_hetero(p):
    h = HeteroData()
    h["s"].x, h["t"].x = p.x_s, p.x_t
    h["s", "to", "s"].edge_index = p.edge_index_s
    h["t", "to", "t"].edge_index = p.edge_index_t
    return h


def test_pair_data_gets_a_named_error_and_goes_through_with_transform():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyG: cannot infer num_nodes of a PairData
        with pytest.raises(ValueError, match=r"'edge_index_[st]'.*PairData.*transform="):
            FixedSizeLoader(_pairs(), Budget(nodes=30, edges=40, graphs=4))
    b = Budget.fit(_pairs(), 2, transform=pair_to_hetero)
    ld = FixedSizeLoader(_pairs(), b, transform=pair_to_hetero)
    seen = 0
    for it in ld:
        for h in ld.collator.unpad(it):
            p = _pairs()[seen]
            assert torch.equal(h["s"].x, p.x_s) and torch.equal(h["t"].x, p.x_t)
            assert torch.equal(h["s", "to", "s"].edge_index, p.edge_index_s)
            seen += 1
    assert seen == 6


def test_hetero_types_added_in_another_order():
    hs = []
    for i in range(4):
        h = HeteroData()
        order = ["a", "b"] if i % 2 == 0 else ["b", "a"]
        for t in order:
            h[t].x = torch.randn(2 + i, 2)
        h["a", "to", "b"].edge_index = torch.tensor([[0], [1]])
        hs.append(h)
    b = Budget.tight(hs, 2)
    ld = FixedSizeLoader(hs, b)
    got = [h for it in ld for h in ld.collator.unpad(it)]
    assert len(got) == 4
    for h, o in zip(got, hs):
        assert torch.equal(h["a"].x, o["a"].x) and torch.equal(h["b"].x, o["b"].x)


def test_budget_fit_never_changes_the_data():
    hs = []
    for i in range(5):
        h = HeteroData()
        h["a"].x = torch.randn(3, 2)
        if i != 2:
            h["b"].x = torch.randn(2, 2)
        hs.append(h)
    before = [sorted(h.node_types) for h in hs]
    b = Budget.fit(hs, 2, num_samples=50)
    Budget.tight(hs, 2)
    assert [sorted(h.node_types) for h in hs] == before and "b" not in hs[2].node_types
    assert b.nodes["b"] >= 3


def test_transform_and_float_dtype_for_graphium_style_items():
    """Issue 11 item 2: dict items with float16 features."""
    gs = graphs()
    items = [{"features": Data(x=d.x.half(), edge_index=d.edge_index, y=d.y.half()),
              "labels": d.y} for d in gs]
    tf = (lambda item: item["features"])
    b = Budget.fit(items, 3, transform=tf)
    ld = FixedSizeLoader(items, b, transform=tf, float_dtype=torch.float32)
    it = next(iter(ld))
    assert it["x"].dtype == torch.float32 and it["y"].dtype == torch.float32
    n = int(it["node_mask"].sum())
    want = torch.cat([items[i]["features"].x for i in range(int(it["graph_mask"].sum()))])
    assert torch.equal(it["x"][:n], want.float())
    assert items[0]["features"].x.dtype == torch.float16  # the user's items are untouched
    kept = FixedSizeLoader(items, b, transform=tf)  # no policy: the dataset's dtypes
    assert next(iter(kept))["x"].dtype == torch.float16
    with pytest.raises(TypeError, match="float_dtype"):
        FixedSizeLoader(items, b, transform=tf, float_dtype=torch.int32)


# ------------------------------------------------------------------ Budget JSON
@pytest.mark.parametrize("text, err, words", [
    ('{"nodes": 64, "edges": 128}', ValueError, ["missing", "graphs"]),
    ('{"nodes": "64", "edges": 128, "graphs": 9}', TypeError, ["Budget.nodes", "'64'"]),
    ('{"nodes": 64, "edges": 128, "graphs": 9, "extra": 1}', ValueError, ["unknown", "extra"]),
    ('{"nodes": 64, "edges": 128, "graphs": false}', TypeError, ["Budget.graphs", "False"]),
    ('{"nodes": {"a": 3.5}, "edges": {"a__r__a": 2}, "graphs": 9}', TypeError,
     ["Budget.nodes['a']"]),
    ('{"nodes": 64, "edges": 128, "graphs": 9, "report": "x"}', TypeError, ["report"]),
    ('[64, 128, 9]', TypeError, ["dict", "list"]),
    ('{"nodes": 64,', ValueError, ["not valid JSON"]),
])
def test_budget_json_validated_on_load(text, err, words):
    with pytest.raises(err) as ei:
        Budget.from_json(text)
    for w in words:
        assert w in str(ei.value), (w, str(ei.value))


# ------------------------------------------------------------------ levels never guessed
@settings(deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(1, 8), st.integers(0, 10)), min_size=1, max_size=40),
       k=st.integers(1, 12), round_to=st.sampled_from([1, 2, 8]))
def test_fit_and_tight_give_distinct_level_sizes(sizes, k, round_to):
    m = np.asarray(sizes, dtype=np.int64)
    for b in (Budget.fit(m, k, num_samples=50, round_to=round_to), Budget.tight(m, k)):
        assert len({b.nodes, b.edges, b.graphs}) == 3, b


def test_unpad_raises_on_a_tie_instead_of_guessing():
    gs = graphs(4)
    with pytest.raises(ValueError, match=r"nodes and edges are both 30.*edges=31"):
        Budget(nodes=30, edges=30, graphs=5)  # no budget ties any more...
    c = Collator(gs, Budget(nodes=30, edges=31, graphs=5))
    flat = c.collate_indices([0, 1])
    assert not flat["edge_mask"][30]
    # ...but a hand-made dict can: drop the last (padding) edge, N == E == 30
    flat = {k: (v[..., :30] if k in ("edge_index", "edge_mask") else v)
            for k, v in flat.items()}
    flat["edge_w"] = torch.zeros(30)
    with pytest.raises(ValueError, match=r"'edge_w'.*node and the edge.*schema="):
        unpad_batch(flat, levels={"x": "node"})
    with pytest.raises(ValueError, match=r"'x'.*node and the edge.*schema="):
        unpad_batch(flat)  # (PyG's name rule would guess node for x: no guess)
    got = unpad_batch(flat, levels={"edge_w": "edge", "x": "node", "y": "graph",
                                    "idx": "graph"})
    assert torch.equal(got[1].x, gs[1].x)
    assert json.loads(Budget.fit(gs, 2).to_json())  # (fit never makes such a tie)


# ==================================================================
# Bad values in a flat dict given to ipu_wrap's forward (graph_adapter/format/values.py)
# ==================================================================
# The eager checks read no values (once per signature), so a hand-made dict with
# a bad value reaches the model. When the model raises, the wrapped forward names
# the key; the silent cases (a wrong result, no error) are caught by the opt-in
# check_inputs="values".
import copy  # noqa: E402

from torch_geometric.data import Batch  # noqa: E402
from torch_geometric.nn import GINConv, aggr, global_add_pool  # noqa: E402

import graph_adapter as ga  # noqa: E402
from graph_adapter.format import value_problems
from graph_adapter.nn import InputValueError, ipu_wrap

from strategies import graph_lists, hetero_graph_lists, model_graph_lists  # noqa: E402


class TNet(torch.nn.Module):
    """Named tensors: GIN layer + add pool (PyG's index_select and scatter)."""

    def __init__(self, f=3):
        super().__init__()
        self.conv = GINConv(torch.nn.Linear(f, 8))
        self.lin = torch.nn.Linear(8, 2)

    def forward(self, x, edge_index, batch):
        return self.lin(global_add_pool(self.conv(x, edge_index).relu(), batch))


class DNet(TNet):
    def forward(self, data):
        return super().forward(data.x, data.edge_index, data.batch)


class Bracket(torch.nn.Module):
    """Bracket indexing ``h[edge_index[0]]``: a negative index wraps silently."""

    def __init__(self, f=3):
        super().__init__()
        self.lin = torch.nn.Linear(f, 2)

    def forward(self, x, edge_index, batch):
        h = self.lin(x)
        agg = torch.zeros_like(h).index_add(0, edge_index[1], h[edge_index[0]])
        return global_add_pool(agg + h, batch)


class SortNet(torch.nn.Module):
    """SortAggregation: PyG's to_dense_batch assumes a sorted batch vector."""

    def __init__(self, f=3):
        super().__init__()
        self.lin = torch.nn.Linear(f, 4)
        self.pool = aggr.SortAggregation(k=6)  # every node of a graph (<= 6)

    def forward(self, x, edge_index, batch):
        return self.pool(self.lin(x), batch)


def _flat():
    return Collator(graphs(6), B).collate_indices([0, 1, 2])


def _set(flat, key, pos, value):
    out = dict(flat)
    out[key] = flat[key].clone()
    out[key][pos] = value
    return out


# every case: flat -> (bad flat, key, position, value); N = 40 nodes, G = 5 slots
def _ei_beyond(f):
    return _set(f, "edge_index", (1, 3), 40), "edge_index", (1, 3), 40


def _ei_negative(f):
    return _set(f, "edge_index", (0, 2), -1), "edge_index", (0, 2), -1


def _ei_below_minus_n(f):
    return _set(f, "edge_index", (0, 2), -41), "edge_index", (0, 2), -41


def _batch_beyond(f):
    return _set(f, "batch", 39, 5), "batch", (39,), 5


def _batch_negative(f):
    return _set(f, "batch", 0, -1), "batch", (0,), -1


RAISING = [_ei_beyond, _ei_negative, _ei_below_minus_n, _batch_beyond, _batch_negative]


# (SortNet reads no edge_index; Bracket wraps -1 silently: see the silent cases)
@pytest.mark.parametrize("net, case", [
    (net, case) for net in (TNet, DNet, Bracket, SortNet) for case in RAISING
    if not (net is SortNet and "_ei_" in case.__name__) and not (net is Bracket and case is _ei_negative)
], ids=lambda v: getattr(v, "__name__", "").strip("_"))
def test_bad_index_value_raises_named_error_chained_from_torchs(net, case):
    torch.manual_seed(0)
    w = ipu_wrap(net())
    flat = _flat()
    w(flat)  # the signature passes its checks (cached)
    bad, key, pos, value = case(flat)
    with pytest.raises(InputValueError) as ei:
        w(bad)
    e = ei.value
    assert (e.key, e.position, e.value) == (key, pos, value)
    msg = str(e)
    assert f"key {key!r}" in msg and f"value {value}" in msg
    assert ("[0, 40)" if key == "edge_index" else "[0, 5)") in msg
    assert "FixedSizeLoader" in msg  # what to do
    assert isinstance(e, ga.SpecError) and isinstance(e, ValueError)
    # chained from torch's / PyG's own error, which stays readable
    assert isinstance(e.__cause__, (IndexError, RuntimeError, ValueError))
    assert not isinstance(e.__cause__, InputValueError)


def _unsorted(f):
    """Node 0 (slot 0) and the first node of slot 1 swap rows: every node keeps its
    graph and edges, only the batch vector is no longer sorted."""
    i = int((f["batch"] == 1).nonzero()[0])
    perm = torch.arange(f["x"].size(0))
    perm[0], perm[i] = i, 0
    out = dict(f, x=f["x"][perm], batch=f["batch"][perm], node_mask=f["node_mask"][perm])
    out["edge_index"] = perm[f["edge_index"]]  # perm is its own inverse
    return out, "batch", (1,), 0


def _real_edge_to_padding_node(f):
    return _set(f, "edge_index", (1, 0), 39), "edge_index", (1, 0), 39


def _padding_edge_to_real_node(f):
    e = int(f["edge_mask"].sum())
    return _set(f, "edge_index", (1, e), 0), "edge_index", (1, e), 0  # N - 1 -> 0


def _edge_across_graphs(f):
    last = int(f["node_mask"].sum()) - 1  # a real node of graph 2
    assert int(f["batch"][int(f["edge_index"][0, 0])]) == 0
    return _set(f, "edge_index", (1, 0), last), "edge_index", (1, 0), last


def _real_node_in_padding_slot(f):
    n = int(f["node_mask"].sum())
    return _set(f, "node_mask", n, True), "node_mask", (n,), 1


def _padding_node_in_real_slot(f):
    n = int(f["node_mask"].sum())
    out = _set(f, "batch", n, 2)  # first padding node, into real slot 2 (stays sorted)
    out["ptr"] = torch.cat([torch.zeros(1, dtype=torch.long),
                            torch.bincount(out["batch"], minlength=5).cumsum(0)])
    return out, "node_mask", (n,), 0


def _ptr_off(f):
    return _set(f, "ptr", 1, int(f["ptr"][1]) + 1), "ptr", (1,), int(f["ptr"][1]) + 1


SILENT = [_unsorted, _real_edge_to_padding_node, _padding_edge_to_real_node, _edge_across_graphs,
          _real_node_in_padding_slot, _padding_node_in_real_slot, _ptr_off]


@pytest.mark.parametrize("case", SILENT + [_ei_negative], ids=lambda c: c.__name__[1:])
def test_silent_cases_need_the_values_check(case):
    """Each breaks a FORMAT.md rule without an error from the model (Bracket, SortNet);
    check_inputs="values" names it before the model runs."""
    torch.manual_seed(0)
    flat = _flat()
    bad, key, pos, value = case(flat)
    net = Bracket() if case is _ei_negative else SortNet()
    ipu_wrap(net)(bad)  # no error (a wrong result: the rules say why)
    with pytest.raises(InputValueError) as ei:
        ipu_wrap(net, check_inputs="values")(bad)
    e = ei.value
    assert (e.key, e.position, e.value) == (key, pos, value)
    assert f"key {key!r}" in str(e) and "FixedSizeLoader" in str(e)
    assert e.__cause__ is None


def test_silent_cases_change_the_result():
    """Why they are rules: the real rows of the output change (no error)."""
    torch.manual_seed(0)
    flat = _flat()
    # (a real node in a padding slot and a wrong ptr change what a loss, a norm or
    # unpad reads, not these models' outputs; a padding edge's message is not zero
    # once a layer has given padding rows a value: Bracket's linear layer does)
    for net, cases in ((SortNet(), [_unsorted]),
                       (TNet(), [_real_edge_to_padding_node, _edge_across_graphs,
                                 _padding_node_in_real_slot]),
                       (Bracket(), [_padding_edge_to_real_node])):
        w = ipu_wrap(net)
        ref = w(flat)["output"][flat["graph_mask"]]
        for case in cases:
            out = w(case(flat)[0])["output"][flat["graph_mask"]]
            assert not torch.allclose(out, ref), (type(net).__name__, case.__name__)
    w = ipu_wrap(Bracket())
    ref = w(flat)["output"][flat["graph_mask"]]
    assert not torch.allclose(w(_ei_negative(flat)[0])["output"][flat["graph_mask"]], ref)


def test_hetero_edge_index_checked_against_its_types():
    """Row 0 of 'b__s__a/edge_index' indexes 'b' nodes: a value in range for 'a' is not."""
    g = torch.Generator().manual_seed(0)
    data = []
    for _ in range(6):
        h = HeteroData()
        h["a"].x = torch.randn(5, 3, generator=g)
        h["b"].x = torch.randn(2, 3, generator=g)
        h["a", "r", "b"].edge_index = torch.stack([torch.randint(0, 5, (4,), generator=g),
                                                   torch.randint(0, 2, (4,), generator=g)])
        h["b", "s", "a"].edge_index = torch.stack([torch.randint(0, 2, (3,), generator=g),
                                                   torch.randint(0, 5, (3,), generator=g)])
        h.y = torch.randn(1, generator=g)
        data.append(h)
    flat = next(iter(FixedSizeLoader(data, ga.Budget.fit(data, 3))))
    assert value_problems(flat) == []
    na, nb = flat["a/node_mask"].numel(), flat["b/node_mask"].numel()
    assert na > nb + 1

    class Hetero(torch.nn.Module):
        def __init__(self):
            super().__init__()
            from torch_geometric.nn import HeteroConv, SAGEConv
            self.conv = HeteroConv({("a", "r", "b"): SAGEConv(3, 4), ("b", "s", "a"): SAGEConv(3, 4)})

        def forward(self, data):
            h = self.conv(data.x_dict, data.edge_index_dict)
            return global_add_pool(h["a"], data["a"].batch)

    w = ipu_wrap(Hetero())
    w(flat)
    key = "b__s__a/edge_index"
    for row, value, bound in ((0, nb, nb), (1, na, na), (0, -1, nb)):
        bad = _set(flat, key, (row, 0), value)
        with pytest.raises(InputValueError) as ei:
            w(bad)
        assert (ei.value.key, ei.value.position, ei.value.value) == (key, (row, 0), value)
        assert f"[0, {bound})" in str(ei.value) and "source type 'b'" in str(ei.value)


def test_layout_table_out_of_range_is_named():
    data = graphs(6)
    flat = Collator(data, B, layout="ell").collate_indices([0, 1, 2])
    assert value_problems(flat) == []
    E = flat["edge_index"].size(1)

    class Sum(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = GINConv(torch.nn.Linear(3, 4))

        def forward(self, x, edge_index):
            return self.conv(x, edge_index)

    bad = _set(flat, "in_slots", (0, 0), E + 1)
    w = ipu_wrap(Sum())
    w(flat)
    with pytest.raises(InputValueError) as ei:
        ipu_wrap(Sum(), check_inputs="values")(bad)
    assert ei.value.key == "in_slots" and f"[0, {E + 1})" in str(ei.value)
    try:  # the model may or may not fail on it; if it does, the error names the key
        w(bad)
    except InputValueError as e:
        assert e.key == "in_slots"


def test_a_models_own_error_on_good_values_is_re_raised_unchanged():
    class Raises(torch.nn.Module):
        def forward(self, x, edge_index, batch):
            raise IndexError("the model's own")

    flat = _flat()
    with pytest.raises(IndexError) as ei:
        ipu_wrap(Raises())(flat)
    assert type(ei.value) is IndexError and str(ei.value) == "the model's own"
    assert ei.value.__cause__ is None and ei.value.__context__ is None


def test_a_failing_diagnosis_never_hides_the_original(monkeypatch):
    import graph_adapter.format.values as D

    def broken(flat):
        raise RuntimeError("diagnosis broke")
    monkeypatch.setattr(D, "value_problems", broken)
    bad = _ei_beyond(_flat())[0]
    with pytest.raises((IndexError, RuntimeError, ValueError)) as ei:
        ipu_wrap(TNet())(bad)
    assert "diagnosis broke" not in str(ei.value)


def test_compiled_forward_unchanged():
    """Under torch.compile the forward traces as before (one graph, no diagnosis)."""
    torch.manual_seed(0)
    w = ipu_wrap(TNet())
    flat = _flat()
    ref = w(flat)["output"]
    compiled = torch.compile(w, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(flat)["output"], ref)
    torch._dynamo.reset()


# ------------------------------------------------------------------ no false alarms
@pytest.mark.filterwarnings("ignore:graph_adapter. these attributes")
@given(data=graph_lists(), k=st.integers(1, 4))
def test_loader_batches_break_no_value_rule(data, k):
    for flat in FixedSizeLoader(data, Budget.fit(data, min(k, len(data)))):
        assert value_problems(flat) == []


@pytest.mark.filterwarnings("ignore:graph_adapter. these attributes")
@given(data=hetero_graph_lists(), k=st.integers(1, 3))
def test_hetero_loader_batches_break_no_value_rule(data, k):
    for flat in FixedSizeLoader(data, Budget.fit(data, min(k, len(data)))):
        assert value_problems(flat) == []


@given(data=model_graph_lists(min_size=1, max_size=6, nonempty_last=True),
       k=st.integers(1, 4), layout=st.sampled_from([None, "ell", "hyb"]))
def test_values_check_never_fires_on_valid_batches(data, k, layout):
    """check_inputs="values" passes every loader batch, and the wrapped output on
    real graphs equals the un-wrapped model's (float64)."""
    data = [d.clone() for d in data]
    for d in data:
        d.x = d.x[:, :3].double()
    torch.manual_seed(0)
    plain = TNet().double().eval()
    wrapped = ipu_wrap(copy.deepcopy(plain), check_inputs="values").eval()
    loader = FixedSizeLoader(data, Budget.fit(data, min(k, len(data))), layout=layout)
    for flat in loader:
        assert value_problems(flat) == []
        real = loader.collator.unpad(flat)
        b = Batch.from_data_list(real)
        ref = plain(b.x, b.edge_index, b.batch)
        out = wrapped(flat)["output"]
        torch.testing.assert_close(out[flat["graph_mask"]][:ref.size(0)], ref,
                                   atol=1e-9, rtol=1e-9)


@given(pos=st.integers(0, 10**6), row=st.integers(0, 1),
       value=st.one_of(st.integers(40, 10**4), st.integers(-10**4, -1)))
def test_any_edge_index_out_of_range_is_named(pos, row, value):
    flat = _flat()
    col = pos % flat["edge_index"].size(1)
    bad = _set(flat, "edge_index", (row, col), value)
    with pytest.raises(InputValueError) as ei:
        ipu_wrap(TNet())(bad) if value >= 0 else ipu_wrap(TNet(), check_inputs="values")(bad)
    assert (ei.value.key, ei.value.position, ei.value.value) == ("edge_index", (row, col), value)


def test_check_inputs_takes_bool_or_values():
    with pytest.raises(ValueError, match=r"check_inputs='value'.*'values'"):
        ipu_wrap(TNet(), check_inputs="value")


@given(seed=st.integers(0, 2**16), num=st.integers(1, 5), extra=st.tuples(
    st.integers(1, 6), st.integers(0, 6), st.integers(1, 6)))
def test_hand_padded_batches_break_no_value_rule(seed, num, extra):
    """tests/_padding.pad_batch (the hand-made dicts of the other tests) keeps the rules."""
    from _padding import pad_batch, random_graphs
    gs = random_graphs(torch.Generator().manual_seed(seed), num)
    b = Batch.from_data_list(gs)
    flat = pad_batch(gs, b.num_nodes + extra[0] + 1, b.edge_index.size(1) + extra[1],
                     num + extra[2])
    assert value_problems(flat) == []


def test_inside_poptorch_values_are_not_read():
    """A poptorch model's tensors hold no values (the emulation raises on a read):
    check_inputs="values" warns and checks nothing; no diagnosis after a failure."""
    from graph_adapter.ipu import EmulatorError, emulate_poptorch
    flat = _flat()
    with emulate_poptorch() as pt:
        with pytest.warns(UserWarning, match="values cannot be read"):
            pt.inferenceModel(ipu_wrap(TNet(), check_inputs="values"))(_unsorted(flat)[0])
        with pytest.raises(EmulatorError) as ei:  # PyG's own value read, as before
            pt.inferenceModel(ipu_wrap(TNet()))(_ei_beyond(flat)[0])
        assert not isinstance(ei.value, InputValueError)


# ---- the compiled path and check(): the same rules, named -------------------------
@pytest.mark.parametrize("case", [_ei_beyond, _batch_beyond], ids=lambda c: c.__name__.strip("_"))
def test_a_compiled_model_names_the_bad_value_too(case):
    """A compiled kernel's own error ("index out of bounds") names no key: Compiled
    diagnoses the batch after the failure (aot_eager: no code generation here)."""
    torch.manual_seed(0)
    flat = _flat()
    compiled = ga.compile(ipu_wrap(DNet()), "aot_eager")
    compiled(flat)
    bad, key, pos, value = case(flat)
    with pytest.raises(InputValueError) as ei:
        compiled(bad)
    assert (ei.value.key, ei.value.position, ei.value.value) == (key, pos, value)
    assert isinstance(ei.value.__cause__, (IndexError, RuntimeError, ValueError))
    # micro-batches: the bad one is found in the stack
    stacked = ga.format.stack_micro_batches([flat, bad])
    with pytest.raises(InputValueError, match=f"key {key!r}"):
        compiled(stacked)


def test_a_compiled_models_own_error_on_good_values_is_re_raised_unchanged():
    class Fails(torch.nn.Module):
        def forward(self, x, edge_index, batch):
            raise RuntimeError("the model's own failure")

    compiled = ga.compile(ipu_wrap(Fails()), "eager")
    with pytest.raises(RuntimeError, match="the model's own failure") as ei:
        compiled(_flat())
    assert not isinstance(ei.value, InputValueError)


def test_check_reports_bad_values_as_findings():
    torch.manual_seed(0)
    w = ipu_wrap(TNet())
    flat = _flat()
    assert not ga.check(w, flat).by_kind("bad-value")
    bad = _unsorted(flat)[0]
    found = ga.check(w, bad).by_kind("bad-value")
    assert found and found[0].op == "batch" and found[0].severity == "error"
    assert "sorted" in found[0].message
    report = ga.check(w, ga.format.stack_micro_batches([flat, _ei_beyond(flat)[0]]))
    (f,) = report.by_kind("bad-value")
    assert f.op == "edge_index" and "micro-batch 1" in f.location
