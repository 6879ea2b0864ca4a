"""What a wrapped model checks about its input (issue 15 items 9-10, issue 12 item 4):
``inputs="auto"``, unbound parameters, the input dict's keys/dtypes/shapes/devices, and
``unpad`` never guessing between levels."""
import warnings

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.nn import global_add_pool

import graph_adapter as ga
from graph_adapter.format import (DeviceMismatchError, DtypeMismatchError, MissingKeyError,
                                  ShapeMismatchError, SpecError, UnsupportedAttributeError)
from graph_adapter.nn import (AmbiguousLevelError, MissingInputError, UnboundInputError, ipu_wrap,
                              unpad)

from _padding import pad_batch, random_graphs


@pytest.fixture
def flat():
    graphs = random_graphs(torch.Generator().manual_seed(0), 3)
    for g in graphs:
        g.pos = torch.randn(g.num_nodes, 3)
        g.z = torch.randint(1, 9, (g.num_nodes,))
    n = sum(g.num_nodes for g in graphs)
    e = sum(g.edge_index.size(1) for g in graphs)
    return pad_batch(graphs, n + 2, e + 3, 5, node_keys=("x", "pos", "z"))


class SchNetLike(torch.nn.Module):
    """The signature of ``torch_geometric.nn.models.SchNet.forward``."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.lin = torch.nn.Linear(3, 4)

    def forward(self, z, pos, batch=None):
        h = self.emb(z) + self.lin(pos)
        return global_add_pool(h, batch)


class XEdge(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, x, edge_index, batch=None):
        return global_add_pool(self.lin(x), batch)


def _no_warnings(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn(*args)


# --------------------------------------------------------------------------
# inputs="auto"
# --------------------------------------------------------------------------
@pytest.mark.parametrize("model", [SchNetLike, XEdge])
def test_auto_binds_by_name_when_required_parameters_are_keys(flat, model):
    m = model()
    w = ipu_wrap(m)
    out = _no_warnings(w, flat)["output"]
    assert w.inputs == "tensors"
    args = (flat["z"], flat["pos"]) if model is SchNetLike else (flat["x"], flat["edge_index"])
    torch.testing.assert_close(out, m(*args, batch=flat["batch"]))
    assert out.size(0) == flat["graph_mask"].numel()  # batch was bound: one row per graph slot


def test_auto_gives_a_data_model_the_batch(flat):
    class M(torch.nn.Module):
        def forward(self, data):
            return data.x

    w = ipu_wrap(M())
    assert _no_warnings(w, flat)["output"] is flat["x"] and w.inputs == "data"


def test_auto_names_its_choice_when_it_cannot_tell(flat):
    class OneBatch(torch.nn.Module):
        def forward(self, batch):
            return batch.x

    w = ipu_wrap(OneBatch())
    with pytest.warns(UserWarning, match="chose inputs='data'.*Pass inputs='data'.*inputs='tensors'"):
        assert w(flat)["output"] is flat["x"]

    class Half(torch.nn.Module):
        def forward(self, z, charges):
            return z

    with pytest.warns(UserWarning, match="chose inputs='tensors'.*\\['charges'\\]"):
        with pytest.raises(MissingInputError, match="'charges'.*bind="):
            ipu_wrap(Half())(flat)


# --------------------------------------------------------------------------
# Named tensors: nothing left unbound silently
# --------------------------------------------------------------------------
class EdgeModel(torch.nn.Module):
    def forward(self, x, edge_index, edge_attr=None):
        return x if edge_attr is None else x + edge_attr.sum()


def test_misspelt_key_and_defaulted_parameter_are_named(flat):
    flat = dict(flat, edge_atr=torch.ones(flat["edge_index"].size(1), 2))
    with pytest.raises(UnboundInputError) as e:
        ipu_wrap(EdgeModel())(flat)
    msg = str(e.value)
    assert "'edge_attr'" in msg and "'edge_atr'" in msg and "bind={'edge_attr': 'edge_atr'}" in msg
    assert "extra_kwargs={'edge_attr': None}" in msg
    # either fix works
    out = ipu_wrap(EdgeModel(), bind={"edge_attr": "edge_atr"})(flat)["output"]
    assert not torch.equal(out, flat["x"])
    assert ipu_wrap(EdgeModel(), extra_kwargs={"edge_attr": None})(flat)["output"] is flat["x"]


def test_batch_parameter_under_another_name_is_named(flat):
    class M(torch.nn.Module):
        def forward(self, x, edge_index, batch_index=None):
            return global_add_pool(x, batch_index)

    with pytest.raises(UnboundInputError, match="'batch_index'.*key 'batch' binds to no parameter"):
        ipu_wrap(M())(flat)


def test_missing_batch_key_is_named(flat):
    flat = {k: v for k, v in flat.items() if k != "batch"}
    with pytest.raises(UnboundInputError, match="pool every node into one graph"):
        ipu_wrap(XEdge())(flat)


def test_unrelated_keys_and_masks_are_fine(flat):
    # y (for the loss), pos, z, ptr and the masks bind to no parameter: not an error
    _no_warnings(ipu_wrap(XEdge()), flat)


def test_bind_to_a_missing_key_or_parameter(flat):
    with pytest.raises(MissingInputError, match="bind=.*no key 'w'"):
        ipu_wrap(EdgeModel(), bind={"edge_attr": "w"})(flat)
    with pytest.raises(ValueError, match="'edge_atr'.*not parameters"):
        ipu_wrap(EdgeModel(), bind={"edge_atr": "x"})


# --------------------------------------------------------------------------
# The input dict: keys, dtypes, trailing shapes, devices
# --------------------------------------------------------------------------
@pytest.mark.parametrize("edit, error, names", [
    (lambda f: f.update(x=f["x"].double()), DtypeMismatchError, ["'x'", "float64", ".to(torch.float32)"]),
    (lambda f: f.update(x=torch.cat([f["x"], f["x"]], 1)), ShapeMismatchError, ["'x'", "(8,)", "(4,)"]),
])
def test_a_changed_batch_gets_a_named_error(flat, edit, error, names):
    w = ipu_wrap(XEdge())
    w(flat)
    bad = dict(flat)
    edit(bad)
    with pytest.raises(error) as e:
        w(bad)
    assert isinstance(e.value, SpecError) and all(n in str(e.value) for n in names)
    assert "reset_inputs()" in str(e.value)
    w.reset_inputs()
    if error is DtypeMismatchError:  # a new schema on purpose
        w.model.double()
        w(bad)


def test_another_budget_and_a_missing_label_are_fine(flat):
    w = ipu_wrap(XEdge())
    w(flat)
    graphs = random_graphs(torch.Generator().manual_seed(1), 2)
    n = sum(g.num_nodes for g in graphs)
    other = pad_batch(graphs, n + 5, 40, 4)
    w({k: v for k, v in other.items() if k != "y"})


@pytest.mark.parametrize("edit, error, names", [
    (lambda f: f.update(node_mask=f["node_mask"].float()), DtypeMismatchError, ["'node_mask'", ".bool()"]),
    (lambda f: f.update(edge_index=f["edge_index"].float()), DtypeMismatchError, ["'edge_index'", ".long()"]),
    (lambda f: f.update(edge_index=f["edge_index"].t()[:, :2]), ShapeMismatchError, ["'edge_index'", ".t()"]),
    (lambda f: f.pop("graph_mask"), MissingKeyError, ["'graph_mask'", "FixedSizeLoader"]),
    (lambda f: f.update(y=[1.0]), UnsupportedAttributeError, ["'y'", "not a tensor"]),
    (lambda f: f.update(pos=f["pos"].to("meta")), DeviceMismatchError, ["'pos'", "meta", ".to(device)"]),
])
def test_bad_input_dict_gets_a_named_error(flat, edit, error, names):
    bad = dict(flat)
    edit(bad)
    with pytest.raises(error) as e:
        ipu_wrap(XEdge())(bad)
    assert all(n in str(e.value) for n in names), str(e.value)


def test_input_on_another_device_than_the_model(flat):
    w = ipu_wrap(XEdge().to("meta"))
    with pytest.raises(DeviceMismatchError, match="parameters on meta.*v.to\\('meta'\\)"):
        w(flat)


def test_check_inputs_false_skips_the_checks(flat):
    w = ipu_wrap(XEdge(), check_inputs=False)
    w(flat)
    with pytest.raises(RuntimeError):  # torch's own error, from deep inside
        w(dict(flat, x=flat["x"].double()))


def test_compile_and_the_wrapped_model_raise_spec_errors(flat):
    c = ga.compile(ipu_wrap(XEdge()), backend="eager")
    c(flat)
    with pytest.raises(SpecError):
        c(dict(flat, x=flat["x"].double()))


def test_checks_do_not_break_fullgraph(flat):
    w = ipu_wrap(SchNetLike())
    compiled = torch.compile(w, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(flat)["output"], w(flat)["output"])


# --------------------------------------------------------------------------
# unpad never guesses
# --------------------------------------------------------------------------
def _ambiguous_flat():
    g = Data(x=torch.randn(3, 2), edge_index=torch.tensor([[0, 1, 2], [1, 2, 0]]), y=torch.randn(1))
    return pad_batch([g], 5, 5, 2)  # N == E == 5


def test_unpad_refuses_to_guess():
    flat = _ambiguous_flat()
    out = {"output": torch.arange(5.0), "loss": torch.tensor(1.0)}
    with pytest.raises(AmbiguousLevelError) as e:
        unpad(out, flat)
    msg = str(e.value)
    assert "'output' has 5 rows" in msg and "node_mask" in msg and "edge_mask" in msg
    assert "levels={'output': 'node'}" in msg
    assert torch.equal(unpad(out, flat, levels={"output": "node"})["output"], torch.arange(3.0))
    assert torch.equal(unpad(out, flat, levels={"output": "edge_mask"})["output"], torch.arange(3.0))
    assert unpad(out, flat, levels={"output": "none"})["output"].numel() == 5
    with pytest.raises(AmbiguousLevelError, match="levels\\['output'\\] = 'graph'"):
        unpad(out, flat, levels={"output": "graph"})


def test_unpad_hetero_output_named_by_its_store():
    flat = {"a/node_mask": torch.tensor([True, True, False]),
            "b/node_mask": torch.tensor([True, False, False]),
            "graph_mask": torch.tensor([True, False])}
    out = {"output/a": torch.arange(3), "output/b": torch.arange(3), "output": torch.arange(3)}
    with pytest.raises(AmbiguousLevelError, match="'output' has 3 rows.*a/node_mask.*b/node_mask"):
        unpad(out, flat)
    res = unpad(out, flat, levels={"output": "b/node_mask"})
    assert res["output/a"].tolist() == [0, 1] and res["output/b"].tolist() == [0]
    assert res["output"].tolist() == [0]
