"""Issue 27 items 3 and 6: a key bound at the first call (per training mode) that a later
dict lacks is a named error, as poptorch's "Missing arguments"; after a failed eager call,
a key whose rows no longer match its mask is named, chained from torch's error."""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch_geometric.nn import global_add_pool

from graph_adapter.format import ShapeMismatchError
from graph_adapter.nn import MissingInputError, ipu_wrap

from _padding import pad_batch, random_graphs


def _flat(seed=0, extra_nodes=2):
    graphs = random_graphs(torch.Generator().manual_seed(seed), 3)
    for g in graphs:
        g.edge_attr = torch.randn(g.edge_index.size(1), 2)
        g.pos = torch.randn(g.num_nodes, 3)
    n = sum(g.num_nodes for g in graphs)
    e = sum(g.edge_index.size(1) for g in graphs)
    return pad_batch(graphs, n + extra_nodes, e + 3, 5, node_keys=("x", "pos"),
                     edge_keys=("edge_attr",))


class EdgeAttrNet(torch.nn.Module):
    """forward(x, edge_index, edge_attr=None, batch=None): edge_attr is optional."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.e = torch.nn.Linear(2, 3)

    def forward(self, x, edge_index, edge_attr=None, batch=None):
        h = self.lin(x)
        if edge_attr is not None:
            h = h.index_add(0, edge_index[1], self.e(edge_attr))
        return global_add_pool(h, batch, size=5)


class DataNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, data):
        h = self.lin(data.x)
        if getattr(data, "edge_attr", None) is not None:
            h = h + data.edge_attr.sum() * 0
        return global_add_pool(h, data.batch, size=5)


def test_a_bound_key_that_disappears_is_named():
    flat = _flat()
    w = ipu_wrap(EdgeAttrNet())
    w(flat)
    less = {k: v for k, v in flat.items() if k != "edge_attr"}
    with pytest.raises(MissingInputError) as e:
        w(less)
    msg = str(e.value)
    assert "'edge_attr'" in msg and "parameter 'edge_attr'" in msg and "EdgeAttrNet.forward" in msg
    assert "reset_inputs()" in msg and "Missing arguments" in msg
    w.reset_inputs()  # a new schema on purpose
    w(less)
    w(less)


def test_a_bound_key_that_disappears_in_data_mode_is_named():
    flat = _flat()
    w = ipu_wrap(DataNet(), inputs="data")
    w(flat)
    with pytest.raises(MissingInputError, match=r"'edge_attr' fed batch\.edge_attr"):
        w({k: v for k, v in flat.items() if k != "edge_attr"})


def test_keys_are_remembered_per_training_mode():
    """An eval dict without a label is fine after training with one: each mode has its own
    first call; within eval, the label-less keys are what was bound."""
    flat = _flat()
    w = ipu_wrap(DataNet(), inputs="data")
    w(flat)  # training, with y
    nolabel = {k: v for k, v in flat.items() if k != "y"}
    w.eval()
    w(nolabel)
    w.train()
    with pytest.raises(MissingInputError, match="'y'.*first training call"):
        w(nolabel)


def test_an_unbound_key_may_come_and_go():
    flat = _flat()
    w = ipu_wrap(EdgeAttrNet())
    w(flat)
    w({k: v for k, v in flat.items() if k not in ("y", "pos")})  # neither fed a parameter


@given(drop=st.sets(st.sampled_from(["x", "edge_attr", "pos", "y"]), min_size=1))
def test_dropped_keys_error_iff_one_was_bound(drop):
    flat = _flat()
    w = ipu_wrap(EdgeAttrNet())
    w(flat)
    less = {k: v for k, v in flat.items() if k not in drop}
    bound = drop & {"x", "edge_attr"}
    if bound:
        with pytest.raises(MissingInputError) as e:
            w(less)
        assert any(f"'{k}'" in str(e.value) for k in bound)
    else:
        w(less)


# --------------------------------------------------------------------------
# Item 6: rows against the masks, named after a failed call
# --------------------------------------------------------------------------
class XNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x, edge_index, batch=None):
        h = self.lin(x)
        return global_add_pool(h * torch.ones_like(batch).unsqueeze(-1), batch, size=5)


@given(more=st.integers(1, 5), key=st.sampled_from(["x", "edge_attr"]))
def test_a_key_with_rows_its_mask_lacks_is_named_after_the_failure(more, key):
    flat = _flat()
    w = ipu_wrap(EdgeAttrNet())
    w(flat)
    bad = dict(flat)
    bad[key] = torch.cat([flat[key], flat[key][:more]], 0)
    mask = "node_mask" if key == "x" else "edge_mask"
    with pytest.raises(ShapeMismatchError) as e:
        w(bad)
    msg = str(e.value)
    rows = flat[key].size(0)
    assert f"'{key}' has {rows + more} rows" in msg and f"{mask} has {rows}" in msg, msg
    assert isinstance(e.value.__cause__, RuntimeError)  # chained from torch's own error
    assert "RuntimeError" in msg


def test_another_budget_is_not_a_row_mismatch():
    """Every key grows with its mask: a new budget, no error (rows are compared to the masks
    of the same dict, not to the first call's counts)."""
    w = ipu_wrap(XNet())
    w(_flat())
    w(_flat(seed=1, extra_nodes=7))


def test_a_row_mismatch_that_does_not_fail_is_left_to_the_model():
    """The diagnosis only names the cause of a failure; a model that never reads the key
    runs (nothing is raised before torch raises)."""
    flat = _flat()
    w = ipu_wrap(XNet())
    w(flat)
    w(dict(flat, pos=torch.cat([flat["pos"], flat["pos"][:1]], 0)))
