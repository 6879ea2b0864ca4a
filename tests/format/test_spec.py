"""The core round trip: PyG object <-> (flat dict, spec)."""
import json

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from torch_geometric.data import Batch, Data, HeteroData

import graph_adapter as ga
from graph_adapter.format import infer_spec, key_of, parse_key
from strategies import graph_lists, graphs, hetero_graph_lists, hetero_graphs


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def assert_same_value(a, b, where):
    assert type(a) is type(b), f"{where}: {type(a)} != {type(b)}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a.dtype}{tuple(a.shape)} != {b.dtype}{tuple(b.shape)}"
        assert torch.equal(a, b), f"{where}: values differ"
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for k in a:
            assert_same_value(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_value(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def stores(obj):
    if isinstance(obj, HeteroData):
        return {"<global>": obj._global_store, **{str(k): obj[k] for k in obj.node_types + obj.edge_types}}
    return {"<global>": obj._store}


def assert_same_object(a, b):
    assert type(a) is type(b)
    if isinstance(a, HeteroData):
        assert a.node_types == b.node_types and a.edge_types == b.edge_types
    sa, sb = stores(a), stores(b)
    assert list(sa) == list(sb)
    for name in sa:
        assert sorted(sa[name].keys()) == sorted(sb[name].keys()), name
        for attr in sa[name].keys():
            assert_same_value(sa[name][attr], sb[name][attr], f"{name}.{attr}")
    if isinstance(a, Batch):
        assert a.num_graphs == b.num_graphs
        assert_same_value(a._slice_dict, b._slice_dict, "_slice_dict")
        assert_same_value(a._inc_dict, b._inc_dict, "_inc_dict")


def round_trip(obj):
    flat, spec = ga.flatten(obj)
    spec2 = ga.Spec.from_json(spec.to_json())
    assert spec2 == spec and hash(spec2) == hash(spec)
    return ga.unflatten(dict(flat), spec2), flat, spec


# --------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------
@given(graphs())
def test_data_round_trip(d):
    out, flat, spec = round_trip(d)
    assert_same_object(d, out)
    for k, t in flat.items():
        assert out[k] is t  # no copies


@given(graph_lists())
def test_batch_round_trip_and_to_data_list(data_list):
    batch = Batch.from_data_list(data_list)
    out, _, _ = round_trip(batch)
    assert_same_object(batch, out)
    for a, b in zip(batch.to_data_list(), out.to_data_list()):
        assert_same_object(a, b)
    for i in range(batch.num_graphs):
        assert_same_object(batch.get_example(i), out.get_example(i))


@given(hetero_graphs())
def test_hetero_round_trip(h):
    out, _, _ = round_trip(h)
    assert_same_object(h, out)


@given(hetero_graph_lists())
def test_hetero_batch_round_trip(hs):
    batch = Batch.from_data_list(hs)
    out, flat, _ = round_trip(batch)
    assert_same_object(batch, out)
    assert type(out).__name__ == "HeteroDataBatch"
    for a, b in zip(batch.to_data_list(), out.to_data_list()):
        assert_same_object(a, b)


@given(st.data())
def test_one_schema_gives_one_key_order(data):
    lists = data.draw(graph_lists(min_size=2, max_size=8))
    half = len(lists) // 2
    # Where every graph has one node, a per-graph row is also a per-node row:
    # PyG cannot tell the levels apart either (flatten(levels=...) can).
    assume(any(g.num_nodes != 1 for g in lists[:half]) and any(g.num_nodes != 1 for g in lists[half:]))
    flat1, spec1 = ga.flatten(Batch.from_data_list(lists[:half]))
    flat2, spec2 = ga.flatten(Batch.from_data_list(lists[half:]))
    assert list(flat1) == list(flat2) == list(spec1.keys)
    assert spec1.static() == spec2.static()
    assert [(f.dtype, f.level) for f in spec1.fields] == [(f.dtype, f.level) for f in spec2.fields]


@given(hetero_graph_lists(min_size=2))
def test_hetero_one_schema_gives_one_key_order(hs):
    flat1, spec1 = ga.flatten(Batch.from_data_list(hs[:1]))
    flat2, spec2 = ga.flatten(Batch.from_data_list(hs[1:]))
    assert list(flat1) == list(flat2)
    assert spec1.static() == spec2.static()


@given(graph_lists())
def test_spec_json_is_plain_json(data_list):
    _, spec = ga.flatten(Batch.from_data_list(data_list))
    text = spec.to_json()
    assert json.loads(text)["format"] == "graph_adapter.format.spec/1"
    assert ga.Spec.from_json(text) == spec
    assert ga.Spec.from_json(spec.static().to_json()) == spec.static()


# --------------------------------------------------------------------------
# key naming, levels, classes
# --------------------------------------------------------------------------
def _mol(n, e, y):
    return Data(
        x=torch.randn(n, 3),
        edge_index=torch.randint(0, n, (2, e)),
        edge_attr=torch.randn(e, 2),
        y=torch.tensor([y]),
        smiles="C" * n,
    )


def test_key_naming_and_levels_homogeneous():
    flat, spec = ga.flatten(Batch.from_data_list([_mol(3, 4, 1.0), _mol(5, 2, 2.0)]))
    assert list(flat) == ["batch", "edge_attr", "edge_index", "ptr", "x", "y"]
    levels = {f.key: f.level for f in spec.fields}
    assert levels == {"batch": "node", "edge_attr": "edge", "edge_index": "edge", "ptr": "other", "x": "node", "y": "graph"}
    assert spec.field("edge_index").shape == (2, None)
    assert spec.field("x").shape == (None, 3)
    assert spec.constants[0][1] == "smiles"


def test_key_naming_hetero():
    h = HeteroData()
    h["paper"].x = torch.randn(3, 2)
    h["author"].x = torch.randn(2, 2)
    h["author", "writes", "paper"].edge_index = torch.tensor([[0, 1], [2, 0]])
    h.y = torch.tensor([1.0])
    flat, spec = ga.flatten(h)
    assert list(flat) == ["author/x", "paper/x", "author__writes__paper/edge_index", "y"]
    assert parse_key("author__writes__paper/edge_index") == (("author", "writes", "paper"), "edge_index")
    assert key_of(("paper",), "x") == "paper/x"
    assert spec.node_types == ("paper", "author")  # PyG's own order is kept for the rebuild


def test_level_override():
    d = Data(x=torch.randn(1, 2), y=torch.tensor([1.0]))  # one node: PyG says node-level
    assert {f.key: f.level for f in ga.flatten(d)[1].fields}["y"] == "node"
    _, spec = ga.flatten(d, levels={"y": "graph"})
    assert spec.field("y").level == "graph"
    with pytest.raises(ga.MissingKeyError, match="'nope'"):
        ga.flatten(d, levels={"nope": "graph"})
    with pytest.raises(ValueError, match="choose one of"):
        ga.flatten(d, levels={"y": "planet"})


class MyData(Data):
    def __inc__(self, key, value, *args, **kwargs):
        if key == "pair_index":
            return self.num_nodes
        return super().__inc__(key, value, *args, **kwargs)


def test_custom_data_subclass_round_trip():
    ds = [MyData(x=torch.randn(n, 1), pair_index=torch.tensor([[0], [n - 1]])) for n in (2, 3)]
    batch = Batch.from_data_list(ds)
    out, _, spec = round_trip(batch)
    assert type(out) is type(batch) and spec.data_cls.endswith(":MyData")
    assert torch.equal(out.pair_index, torch.tensor([[0, 2], [1, 4]]))
    assert all(type(g) is MyData for g in out.to_data_list())


def test_non_tensor_values_are_exact():
    d = Data(x=torch.zeros(2, 1), ints=[1, 2], tup=(1, "a"), nested={"a": [1.5, None], 3: True},
             nan=float("nan"), flag=True)
    out, _, _ = round_trip(d)
    assert out.ints == [1, 2] and out.tup == (1, "a") and out.nested == {"a": [1.5, None], 3: True}
    assert out.flag is True and out.nan != out.nan
    out.ints.append(3)  # the result is a private copy
    assert ga.unflatten(*ga.flatten(d)).ints == [1, 2]


def test_spec_never_pickles():
    _, spec = ga.flatten(Batch.from_data_list([_mol(2, 1, 0.0)]))
    text = spec.to_json()
    assert "pickle" not in text and isinstance(json.loads(text), dict)


# --------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------
@pytest.fixture
def flat_spec():
    return ga.flatten(Batch.from_data_list([_mol(3, 4, 1.0), _mol(2, 1, 2.0)]))


def test_missing_key(flat_spec):
    flat, spec = flat_spec
    del flat["edge_attr"]
    with pytest.raises(ga.MissingKeyError, match=r"missing key\(s\) \['edge_attr'\]") as e:
        ga.unflatten(flat, spec)
    assert isinstance(e.value, KeyError) and "edge_attr" in str(e.value)


def test_unexpected_key(flat_spec):
    flat, spec = flat_spec
    flat["z"] = torch.zeros(1)
    with pytest.raises(ga.UnexpectedKeyError, match=r"unexpected key\(s\) \['z'\]"):
        ga.unflatten(flat, spec)


def test_dtype_mismatch(flat_spec):
    flat, spec = flat_spec
    flat["x"] = flat["x"].double()
    with pytest.raises(ga.DtypeMismatchError, match=r"key 'x': dtype float64, spec says float32"):
        ga.unflatten(flat, spec)


def test_trailing_shape_mismatch(flat_spec):
    flat, spec = flat_spec
    flat["x"] = torch.zeros(5, 4)
    with pytest.raises(ga.ShapeMismatchError, match=r"key 'x': shape \(5, 4\) does not match the spec's \(\*, 3\)"):
        ga.unflatten(flat, spec)
    flat["x"] = torch.zeros(7, 3)  # the cat dim may change
    ga.unflatten(flat, spec.static())


@pytest.mark.parametrize(
    "value, name",
    [(object(), "type builtins.object"), (pytest, "type builtins.module"),
     ({1, 2}, "type builtins.set"), (torch.zeros(2, 2).to_sparse(), "sparse tensors")],
)
def test_unsupported_attribute_names_key_and_type(value, name):
    d = Data(x=torch.zeros(2, 1))
    d.weird = value
    with pytest.raises(ga.UnsupportedAttributeError, match=r"'weird'") as e:
        ga.flatten(d)
    assert name in str(e.value)  # the type, named
    assert "to_dense" in str(e.value) if name == "sparse tensors" else "Convert it" in str(e.value)


def test_separator_in_names_is_rejected():
    h = HeteroData()
    h["a/b"].x = torch.zeros(1, 1)
    with pytest.raises(ga.UnsupportedAttributeError, match="node type 'a/b'"):
        ga.flatten(h)


def test_not_a_pyg_object():
    with pytest.raises(ga.UnsupportedAttributeError, match="takes a PyG"):
        ga.flatten({"x": torch.zeros(1)})


def test_batch_without_slices_is_rejected():
    b = Batch()
    b.x = torch.zeros(2, 1)
    with pytest.raises(ga.UnsupportedAttributeError, match="from_data_list"):
        ga.flatten(b)


# --------------------------------------------------------------------------
# infer_spec: fixed-size dicts without a stored spec
# --------------------------------------------------------------------------
def _padded():
    return {
        "x": torch.randn(6, 3),
        "edge_index": torch.tensor([[0, 1, 5], [1, 0, 5]]),
        "batch": torch.tensor([0, 0, 1, 1, 2, 2]),
        "ptr": torch.tensor([0, 2, 4, 6]),
        "node_mask": torch.tensor([1, 1, 1, 1, 0, 0]).bool(),
        "edge_mask": torch.tensor([1, 1, 0]).bool(),
        "graph_mask": torch.tensor([1, 1, 0]).bool(),
        "y": torch.randn(3),
    }


def test_infer_spec_levels_and_rebuild():
    flat = _padded()
    spec = infer_spec(flat)
    levels = {f.key: f.level for f in spec.fields}
    assert levels == {"batch": "node", "edge_index": "edge", "edge_mask": "edge", "graph_mask": "graph",
                      "node_mask": "node", "ptr": "other", "x": "node", "y": "graph"}
    b = ga.unflatten(flat, spec)
    assert type(b).__name__ == "DataBatch" and b.num_graphs == 3 and b.node_mask is flat["node_mask"]

