"""A spec's JSON is checked on load, never runs code, and a full spec checks the
flat dict against its batch (issue 15, items 7 and 8; PyG inputs without ``ptr``)."""
import copy
import json
import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch_geometric.data import Batch, Data, HeteroData

import graph_adapter as ga
from graph_adapter.format import (BatchMismatchError, ClassNotAllowedError, Spec, SpecError,
                                  SpecFormatError, UnsupportedAttributeError)
from strategies import graph_lists, hetero_graph_lists


def _batch_spec(graphs):
    return ga.flatten(Batch.from_data_list(graphs))[1]


any_spec = st.one_of(
    graph_lists().map(_batch_spec),
    hetero_graph_lists().map(_batch_spec),
    graph_lists(max_size=1).map(lambda gs: ga.flatten(gs[0])[1]),
)


# --------------------------------------------------------------------------
# The round trip stays exact; any mutation is exact or a SpecError
# --------------------------------------------------------------------------
@given(any_spec)
def test_json_round_trip_is_exact(spec):
    text = spec.to_json()
    back = Spec.from_json(text)
    assert back == spec and back.to_json() == text


def _paths(value, path=()):
    """Every path into a JSON value (dict keys and list indices)."""
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, path + (i,))


def _set(doc, path, value):
    if not path:
        return value
    doc = copy.deepcopy(doc)
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    if value is _DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


_DELETE = object()
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10) | st.floats(allow_nan=False)
    | st.sampled_from(["false", "true", "1", "float32", "float33", "node", "x", "os:system",
                       "torch_geometric.data.hetero_data:HeteroData", "{}", "[]", "null"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "shape"]),
                                                                inner, max_size=2),
    max_leaves=4,
)


def _normal(d):
    """A spec dict with the defaults that ``to_dict`` leaves out filled in."""
    d = copy.deepcopy(d)
    for f in d.get("fields", []) if isinstance(d, dict) and isinstance(d.get("fields"), list) else []:
        if isinstance(f, dict):
            f.setdefault("inc", "none")
            f.setdefault("rows", 1)
    return d


def _exact_or_spec_error(doc):
    try:
        back = Spec.from_dict(doc)
    except SpecError as e:
        assert str(e), "a SpecError must say what is wrong"
        return
    assert _normal(back.to_dict()) == _normal(doc), "a mutated spec loaded as another object"


@given(any_spec, st.data())
def test_mutated_json_is_exact_or_a_spec_error(spec, data):
    doc = spec.to_dict()
    path = data.draw(st.sampled_from(list(_paths(doc))[1:]))
    value = data.draw(json_values | st.just(_DELETE) if isinstance(path[-1], str) else json_values)
    _exact_or_spec_error(_set(doc, path, value))


@given(graph_lists(min_size=2), st.data())
def test_mutated_batch_info_is_exact_or_a_spec_error(graphs, data):
    doc = _batch_spec(graphs).to_dict()
    info = json.loads(doc["batch_info"])
    path = data.draw(st.sampled_from(list(_paths(info))[1:]))
    mutated = _set(info, path, data.draw(json_values))
    _exact_or_spec_error(dict(doc, batch_info=json.dumps(mutated)))


# --------------------------------------------------------------------------
# Each class of bad JSON: its named error, naming the field
# --------------------------------------------------------------------------
def _doc():
    d = Data(x=torch.randn(3, 2), edge_index=torch.tensor([[0, 1], [1, 2]]), y=torch.tensor([1.0]))
    return ga.flatten(Batch.from_data_list([d, d]))[1].to_dict()


@pytest.mark.parametrize("edit, names", [
    (lambda d: d.update(is_batch="false"), "'is_batch'"),
    (lambda d: d.pop("fields"), "'fields'"),
    (lambda d: d.update(extra=1), "'extra'"),
    (lambda d: d["fields"][0].update(dtype="float33"), "fields[0].dtype"),
    (lambda d: d["fields"][0].update(dtype="Tensor"), "fields[0].dtype"),
    (lambda d: d["fields"][0].update(shape=[None, "2"]), "fields[0].shape[1]"),
    (lambda d: d["fields"][0].update(rows=True), "fields[0].rows"),
    (lambda d: d["fields"][0].update(level="nodes"), "fields[0].level"),
    (lambda d: d["fields"][0].update(key="z"), "fields[0].key"),
    (lambda d: d["fields"][0].pop("attr"), "'attr'"),
    (lambda d: d.update(format="graph_adapter.format.spec/2"), "'format'"),
    (lambda d: d.update(constants=[[[], "name", "{not json"]]), "'name'"),
    (lambda d: d.update(batch_info=d["batch_info"].replace('["num_graphs",2]', '["num_graphs",3]')),
     "slice_dict"),
    (lambda d: d.update(batch_info=d["batch_info"].replace('["num_graphs",2]', '["num_graphs","2"]')),
     "num_graphs"),
])
def test_bad_json_gets_a_named_error(edit, names):
    doc = _doc()
    edit(doc)
    with pytest.raises(SpecFormatError) as e:
        Spec.from_json(json.dumps(doc))
    assert names in str(e.value) and ("flatten" in str(e.value) or "Remove" in str(e.value))


def test_num_graphs_must_agree_with_a_static_ptr():
    flat = {"x": torch.randn(4, 2), "ptr": torch.tensor([0, 3, 4]),
            "graph_mask": torch.ones(2, dtype=torch.bool), "node_mask": torch.ones(4, dtype=torch.bool)}
    spec = ga.format.infer_spec(flat)
    info = json.dumps({"__dict__": [["inc_dict", {"__dict__": []}], ["num_graphs", 5],
                                     ["num_nodes", []], ["slice_dict", {"__dict__": []}]]})
    with pytest.raises(SpecFormatError, match=r"'(ptr|graph_mask)' has \d+ (rows|graph slots) but batch_info.num_graphs is 5"):
        Spec.from_dict(dict(spec.to_dict(), batch_info=info))


def test_not_json_text():
    with pytest.raises(SpecFormatError, match="Spec.to_json"):
        Spec.from_json("{oops")


# --------------------------------------------------------------------------
# Loading a spec runs no code
# --------------------------------------------------------------------------
@pytest.mark.parametrize("data_cls", ["os:system", "subprocess:Popen", "builtins:object",
                                      "torch_geometric.data.batch:Batch", "torch:Tensor",
                                      "torch_geometric.data.data:NoSuchClass", "nocolon"])
def test_data_cls_must_be_a_data_class(data_cls):
    doc = dict(_doc(), data_cls=data_cls)
    with pytest.raises((ClassNotAllowedError, SpecFormatError), match="data_cls|Data"):
        Spec.from_dict(doc)


def _module(tmp_path, name):
    # (A class name of its own: PyG caches batch classes by class name.)
    (tmp_path / f"{name}.py").write_text(textwrap.dedent("""
        import torch_geometric.data
        IMPORTED = True
        class SpecModData(torch_geometric.data.Data):
            pass
    """))


def test_a_spec_never_imports_a_module_by_itself(tmp_path, monkeypatch):
    _module(tmp_path, "ga_spec_mod_a")
    monkeypatch.syspath_prepend(str(tmp_path))
    doc = dict(_doc(), data_cls="ga_spec_mod_a:SpecModData")
    with pytest.raises(ClassNotAllowedError) as e:
        Spec.from_dict(doc)
    assert "ga_spec_mod_a" not in sys.modules
    assert "allow_modules('ga_spec_mod_a')" in str(e.value)
    # Allowed by a parameter: the module is imported and the class used.
    spec = Spec.from_dict(doc, allow_modules=["ga_spec_mod_a"])
    assert "ga_spec_mod_a" in sys.modules
    assert ga.format.resolve_class(spec.data_cls, False).__qualname__ == "SpecModData"
    monkeypatch.delitem(sys.modules, "ga_spec_mod_a")


def test_allow_modules_lets_a_module_be_imported(tmp_path):
    _module(tmp_path, "ga_spec_mod_b")
    code = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(tmp_path)!r})
        import graph_adapter.format.spec as S
        doc = json.loads({json.dumps(json.dumps(dict(_doc(), data_cls="ga_spec_mod_b:SpecModData")))})
        try:
            S.Spec.from_dict(doc)
        except S.ClassNotAllowedError:
            print("refused")
        S.allow_modules("ga_spec_mod_b")
        S.Spec.from_dict(doc)
        print("ga_spec_mod_b" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["refused", "True"]


# --------------------------------------------------------------------------
# unflatten: a spec from another batch is refused
# --------------------------------------------------------------------------
def _graph(n):
    return Data(x=torch.arange(n * 2.0).view(n, 2), edge_index=torch.tensor([[0], [n - 1]]))


def test_spec_of_another_split_is_refused():
    flat, _ = ga.flatten(Batch.from_data_list([_graph(2), _graph(4)]))
    _, other = ga.flatten(Batch.from_data_list([_graph(3), _graph(3)]))
    with pytest.raises(BatchMismatchError) as e:
        ga.unflatten(flat, other)
    msg = str(e.value)
    assert ("'batch'" in msg or "'ptr'" in msg) and "spec that flatten() returned" in msg


def test_spec_of_another_size_is_refused():
    flat, _ = ga.flatten(Batch.from_data_list([_graph(2), _graph(4)]))
    _, other = ga.flatten(Batch.from_data_list([_graph(2), _graph(3)]))
    with pytest.raises(BatchMismatchError, match="key 'x' has 6 rows along dim 0, but the spec's "
                                                 "batch has 5"):
        ga.unflatten(flat, other)


def test_own_spec_and_static_spec_still_work():
    b = Batch.from_data_list([_graph(2), _graph(4)])
    flat, spec = ga.flatten(b)
    assert [d.num_nodes for d in ga.unflatten(flat, spec).to_data_list()] == [2, 4]
    _, other = ga.flatten(Batch.from_data_list([_graph(3), _graph(3)]))
    assert ga.unflatten(flat, other.static()).x is flat["x"]  # no batch info: nothing to check


# --------------------------------------------------------------------------
# PyG inputs without ptr, and tensors flatten cannot take
# --------------------------------------------------------------------------
from strategies import PairData  # noqa: E402


def _pair(n, m):
    return PairData(x_s=torch.randn(n, 3), edge_index_s=torch.randint(0, n, (2, 4)),
                    x_t=torch.randn(m, 3), edge_index_t=torch.randint(0, m, (2, 5)))


def _same_list(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        fx, fy = ga.flatten(x)[0], ga.flatten(y)[0]
        assert type(x) is type(y) and list(fx) == list(fy)
        for k in fx:
            assert torch.equal(fx[k], fy[k]), k


def test_pair_batch_with_follow_batch_round_trips():
    b = Batch.from_data_list([_pair(3, 4), _pair(2, 5)], follow_batch=["x_s", "x_t"])
    flat, spec = ga.flatten(b)
    out = ga.unflatten(flat, Spec.from_json(spec.to_json()))
    assert type(out) is type(b) and out.num_graphs == 2
    _same_list(out.to_data_list(), b.to_data_list())


def test_batch_of_batches_round_trips():
    b1 = Batch.from_data_list([_graph(2), _graph(3)])
    bb = Batch.from_data_list([b1, Batch.from_data_list([_graph(4)])])
    flat, spec = ga.flatten(bb)
    _same_list(ga.unflatten(flat, spec).to_data_list(), bb.to_data_list())


def test_nested_tensor_is_named():
    d = Data(x=torch.nested.nested_tensor([torch.randn(2, 2), torch.randn(3, 2)]))
    with pytest.raises(UnsupportedAttributeError, match="'x' is a nested tensor.*to_padded_tensor"):
        ga.flatten(d)


def test_meta_batch_is_named_and_levels_avoid_the_read():
    b = Batch.from_data_list([_graph(2), _graph(3)]).to("meta")
    with pytest.raises(UnsupportedAttributeError, match="'ptr' is on the meta device.*levels="):
        ga.flatten(b)
    flat, spec = ga.flatten(b, levels={"x": "node", "edge_index": "edge"})
    assert flat["x"].device.type == "meta" and spec.field("x").level == "node"


def test_tensors_that_require_grad_round_trip_as_they_are():
    x = torch.randn(3, 2, requires_grad=True)
    flat, spec = ga.flatten(Data(x=x * 2, edge_index=torch.tensor([[0], [1]])))
    out = ga.unflatten(flat, Spec.from_json(spec.to_json()))
    assert out.x is flat["x"] and out.x.grad_fn is not None


def test_hetero_batch_round_trips_through_json():
    h = HeteroData()
    h["a"].x = torch.randn(3, 2)
    h["a", "r", "a"].edge_index = torch.tensor([[0, 1], [1, 2]])
    b = Batch.from_data_list([h, h])
    flat, spec = ga.flatten(b)
    _same_list(ga.unflatten(flat, Spec.from_json(spec.to_json())).to_data_list(), b.to_data_list())


def test_a_class_defined_in_a_function_round_trips():
    class LocalData(Data):
        pass

    b = Batch.from_data_list([LocalData(x=torch.randn(2, 1)), LocalData(x=torch.randn(3, 1))])
    flat, spec = ga.flatten(b)
    out = ga.unflatten(flat, spec)
    assert type(out) is type(b) and all(type(d) is LocalData for d in out.to_data_list())
