"""An eager call of a wrapped PyG model with a batch whose signature changed since the first
call gets a named error (the key, what it is now, what the first batch had, what to do),
never torch's own words from inside the model (``mat1 and mat2 must have the same
dtype``, ``expected scalar type Long but found Int``, ``mat1 and mat2 shapes cannot be
multiplied``); and a ``reset_inputs()`` starts over on purpose."""
import pytest
import torch
from torch_geometric.nn import GCNConv, global_add_pool

import graph_adapter as ga
from graph_adapter.format import DtypeMismatchError, ShapeMismatchError, SpecError

FEATURES = 3


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = GCNConv(FEATURES, 4)

    def forward(self, x, edge_index, batch=None):
        return global_add_pool(self.conv(x, edge_index).relu(), batch)


@pytest.fixture
def batch():
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(0)
    graphs = [Data(x=torch.randn(n, FEATURES, generator=g),
                   edge_index=torch.stack([torch.arange(n), torch.arange(n).roll(1)]))
              for n in (3, 4, 5)]
    return next(iter(ga.FixedSizeLoader(graphs, ga.Budget(nodes=16, edges=15, graphs=4))))


@pytest.mark.parametrize("edit, error, words, torchs", [
    (lambda b: b.update(x=b["x"].double()), DtypeMismatchError,
     ["'x'", "float64", "first batch had float32", ".to(torch.float32)"], "same dtype"),
    (lambda b: b.update(edge_index=b["edge_index"].int()), DtypeMismatchError,
     ["'edge_index'", "int32", "first batch had int64", ".to(torch.int64)"], None),
    (lambda b: b.update(x=torch.randn(b["x"].shape[0], 5)), ShapeMismatchError,
     ["'x'", "(5,)", "first batch had (3,)", "one schema", "reset_inputs()"], "shapes cannot"),
])
def test_a_changed_signature_is_named_not_torchs_error(batch, edit, error, words, torchs):
    model = Net()
    wrapped = ga.ipu_wrap(model)
    wrapped(batch)
    bad = dict(batch)
    edit(bad)
    with pytest.raises(error) as ei:
        wrapped(bad)
    msg = str(ei.value)
    assert isinstance(ei.value, SpecError)
    assert all(w in msg for w in words), msg
    if torchs is None:  # GCNConv takes int32 indices; another model, or compile, may not
        return
    assert torchs not in msg
    # the plain model on the same tensors: torch's own words (what the check spares the user)
    with pytest.raises(RuntimeError, match=torchs):
        model(bad["x"], bad["edge_index"], bad["batch"])


def test_the_first_call_fixes_the_signature_and_reset_inputs_starts_over(batch):
    wrapped = ga.ipu_wrap(Net().double())
    wrapped(dict(batch, x=batch["x"].double()))
    with pytest.raises(DtypeMismatchError, match="first batch had float64"):
        wrapped(batch)  # float32 now: named, as the other way round
    wrapped.reset_inputs()
    wrapped.model.float()
    wrapped(batch)  # a new signature on purpose
