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
from graph_adapter.collate import Collator, unpad_batch


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
class PairData(Data):
    def __inc__(self, key, value, *args, **kwargs):
        if key == "edge_index_s":
            return self.x_s.size(0)
        if key == "edge_index_t":
            return self.x_t.size(0)
        return super().__inc__(key, value, *args, **kwargs)


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
