"""The guard policy of the Dynamo engines (``backends/engines.py``'s docstring): every
guard Dynamo builds is kept, because ``Compiled``'s host-side checks cover the batch
(keys, dtypes, shapes) and the mode, not the model's state. A changed model never
runs a stale graph: each change below either recompiles or (parameters loaded in
place) needs none, and the compiled call equals the eager call after it."""
import sys

import pytest
import torch
from torch import nn
from torch_geometric.nn import global_add_pool

from graph_adapter.backends import compile
from graph_adapter.nn import masked_loss
from graph_adapter.nn import ipu_wrap

from _padding import pad_batch, random_graphs

#: read by Tiny.forward: a module global that a traced graph bakes in
SCALE = 1.0


class Tiny(nn.Module):
    """A model that compiles in about a second under aot_eager (no message passing)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 8)
        self.norm = nn.BatchNorm1d(8)
        self.head = nn.Linear(8, 1)
        self.shift = 0.0  # a plain attribute the graph bakes in

    def forward(self, data):
        h = self.norm(self.lin(data.x.to(self.lin.weight.dtype))).relu() + self.shift
        return self.head(global_add_pool(h, data.batch)).squeeze(-1) * SCALE


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _batch():
    return pad_batch(random_graphs(torch.Generator().manual_seed(0), 4), 30, 60, 6)


def _check_against_eager(c, w, flat, step):
    """The compiled call and its gradients equal the eager wrapped module's."""
    w.zero_grad(set_to_none=True)
    out = c(flat)
    out["loss"].backward()
    got = {n: None if p.grad is None else p.grad.clone() for n, p in w.named_parameters()}
    w.zero_grad(set_to_none=True)
    ref = w(flat)
    ref["loss"].backward()
    assert out["output"].dtype == ref["output"].dtype, step
    torch.testing.assert_close(out["output"], ref["output"], msg=step)
    for n, p in w.named_parameters():
        if p.grad is None or got[n] is None:
            assert p.grad is None and got[n] is None, f"{step}: gradient of {n}"
        else:
            torch.testing.assert_close(got[n], p.grad, msg=f"{step}: gradient of {n}")
    w.zero_grad(set_to_none=True)


def _set_scale(value):
    global SCALE
    SCALE = value


def test_a_changed_model_never_runs_a_stale_graph(monkeypatch):
    """One compiled model through every kind of change a user makes between steps:
    after each, the compiled call equals eager (outputs, dtypes, gradients), and it
    recompiled exactly where the graph depends on what changed."""
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 1.0)  # restored after
    torch.manual_seed(0)
    w = ipu_wrap(Tiny(), loss_fn=masked_loss("mse")).train()
    c = compile(w, "aot_eager")
    flat = _batch()
    other = Tiny()

    def replace_parameter():
        w.model.head.weight = nn.Parameter(torch.randn(1, 8))

    changes = [  # (what, change, recompiles)
        ("first call", lambda: None, 1),
        ("load_state_dict in place", lambda: w.model.load_state_dict(other.state_dict()), 0),
        ("a Parameter object replaced", replace_parameter, 0),
        ("one submodule put in eval mode", lambda: w.model.norm.eval(), 1),
        ("requires_grad turned off", lambda: w.model.lin.requires_grad_(False), 1),
        ("a plain module attribute changed", lambda: setattr(w.model, "shift", 0.5), 1),
        ("a module global changed", lambda: _set_scale(2.0), 1),
        ("the model cast to float64", lambda: w.double(), 1),
    ]
    for step, change, recompiles in changes:
        before = c.compile_count
        change()
        _check_against_eager(c, w, flat, step)
        assert c.compile_count - before == recompiles, step
    # the replaced Parameter is the one trained: it got the gradient, not the old one
    c(flat)["loss"].backward()
    assert w.model.head.weight.grad is not None


def test_mode_switch_and_back_runs_the_graph_of_each_mode():
    """``.eval()`` then ``.train()`` reuses each mode's graph (two compiles in all) and
    each call equals eager in its mode."""
    torch.manual_seed(0)
    w = ipu_wrap(Tiny(), loss_fn=masked_loss("mse"))
    c = compile(w, "aot_eager")
    flat = _batch()
    for training in (True, False, True, False):
        c.train(training)
        _check_against_eager(c, w, flat, f"training={training}")
    assert c.compile_count == 2
