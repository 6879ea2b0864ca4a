"""Where a tensor lives (issue 25 item 1): host tensors may be read, device tensors not.

poptorch's dispatcher takes over ops on IPU tensors only (read in
``RegisterAtenOverloads.cpp``, not run): a tensor created in forward from
Python values without a device (graphium's ``torch.as_tensor(h.shape[:-1])``)
is a CPU tensor whose reads run on the host. Tensors from inputs, parameters
and buffers, and what is computed from them (one device operand is enough),
are device tensors. ``check()``, ``emulate_poptorch()`` and
``compile(..., "ipu-emulator")`` (``compile_ipu``) must agree on every model.
"""
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from graph_adapter.checker import check
from graph_adapter.ipu import EmulatorError, compile_ipu, emulate_poptorch


def batch():
    g = torch.Generator().manual_seed(0)
    return {"x": torch.randn(5, 4, generator=g), "y": torch.randn(5, generator=g)}


class Reads(nn.Module):
    """Reads one value on the host (``bool()``/``.item()``) of a tensor of a given origin."""

    def __init__(self, origin):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(4, 1)
        self.register_buffer("count", torch.ones(()))
        self.origin = origin

    def forward(self, b):
        h = self.lin(b["x"]).squeeze(-1)
        o = self.origin
        if o == "graphium":  # graphium/nn/base_layers.py:410, as it ships
            if torch.prod(torch.as_tensor(h.shape[:-1])) == 0:
                h = h * 0
        elif o == "python-int":
            h = h * torch.tensor(h.size(0)).item()
        elif o == "python-float-cpu":  # an explicit CPU device is the host too
            h = h * float(torch.full((), 0.5, device="cpu"))
        elif o == "host-chain":  # host op host stays on the host
            n = torch.arange(4).sum() + torch.tensor(1)
            h = h * int(n)
        elif o == "host-nonzero":  # a data-dependent shape, computed on the host
            h = h * torch.nonzero(torch.tensor([0, 1, 1])).size(0)
        elif o == "input":
            h = h * b["y"].sum().item()
        elif o == "input-nonzero":
            h = h * torch.nonzero(b["y"] > 0).size(0)
        elif o == "parameter":
            h = h * self.lin.weight.sum().item()
        elif o == "buffer":
            if self.count > 0:
                h = h + 1
        elif o == "mixed":  # a host tensor combined with a device tensor is a device tensor
            h = h * (torch.tensor(2.0) * h.sum()).item()
        elif o == "device-of-input":  # device= read off a tensor: the IPU
            h = h * torch.tensor(2.0, device=h.device).item()
        elif o == "written-in-place":  # a host tensor that received device values
            t = torch.zeros(())
            t += h.sum()
            if t > 0:
                h = h + 1
        return {"output": h, "loss": ((h - b["y"]) ** 2).mean()}


HOST = ["graphium", "python-int", "python-float-cpu", "host-chain", "host-nonzero"]
DEVICE = ["input", "input-nonzero", "parameter", "buffer", "mixed", "device-of-input", "written-in-place"]


def _verdicts(model_fn):
    """(check eval, check train, emulate_poptorch, ipu-emulator): True where the model is accepted."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no internal error of the checker
        ok_eval = check(model_fn(), batch()).ok
        ok_train = check(model_fn(), batch(), training=True).ok
    results = [ok_eval, ok_train]
    with emulate_poptorch() as pt:
        try:
            pt.inferenceModel(model_fn())(batch())
            results.append(True)
        except EmulatorError as exc:
            assert "[graph_adapter: data-dependent-" in str(exc), exc
            results.append(False)
    try:
        compile_ipu(model_fn(), "ipu-emulator")(batch())
        results.append(True)
    except EmulatorError as exc:
        assert "[graph_adapter: data-dependent-" in str(exc), exc
        results.append(False)
    return results


@pytest.mark.parametrize("origin", HOST + DEVICE)
def test_check_and_both_emulations_agree_on_where_a_tensor_lives(origin):
    expected = origin in HOST
    assert _verdicts(lambda: Reads(origin)) == [expected] * 4, origin


def test_a_device_read_is_named_with_the_users_line():
    report = check(Reads("input"), batch())
    (f,) = report.by_kind("data-dependent-value")
    assert f.op.startswith("torch.Tensor.item") and f.location.startswith(__file__), str(report)


class Combine(nn.Module):
    """``bool()`` of a sum of operands, each from Python values (host) or from the model (device)."""

    def __init__(self, origins):
        super().__init__()
        self.lin = nn.Linear(4, 1)
        self.origins = origins

    def operand(self, origin, h):
        return {"int": torch.tensor(3), "shape": torch.as_tensor(h.shape),
                "input": h.sum(), "param": self.lin.bias.sum()}[origin]

    def forward(self, b):
        h = self.lin(b["x"])
        acc = torch.zeros(())  # a host tensor
        for origin in self.origins:
            acc = acc + self.operand(origin, h).sum()
        if acc != 12345:  # a value read on acc
            h = h + 1
        return {"output": h, "loss": h.sum()}


@settings(max_examples=20, deadline=None)
@given(st.lists(st.sampled_from(["int", "shape", "input", "param"]), min_size=0, max_size=4))
def test_host_iff_every_operand_is_host(origins):
    expected = all(o in ("int", "shape") for o in origins)
    assert _verdicts(lambda: Combine(origins)) == [expected] * 4, origins


def test_host_reads_inside_pyg_are_not_findings_and_no_internal_error():
    """SuperGATConv's negative sampling (issue 27 item 4): PyG samples on the CPU
    (``sample(..., device='cpu')``) and reads it with ``.numpy()``: a host read,
    no finding; its move of the edge index to the CPU and its device value reads
    are real findings; no internal error of the checker appears as one."""
    from torch_geometric.nn import SuperGATConv

    class Sgat(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv = SuperGATConv(4, 4, add_self_loops=False)

        def forward(self, b):
            out = self.conv(b["x"], b["edge_index"])
            return {"output": out, "loss": out.sum() + self.conv.get_attention_loss()}

    b = {"x": torch.randn(6, 4), "edge_index": torch.tensor([[0, 1, 2, 3, 4], [1, 0, 3, 2, 4]])}
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        report = check(Sgat().train(), b, training=True)
    assert report.internal_errors == [], report.internal_errors
    assert "error" not in report.kinds, str(report)  # no "forward raised" finding
    ops = {(f.kind, f.op.split(" (")[0]) for f in report.findings}
    assert ("host-transfer", "torch.Tensor.to") in ops, str(report)  # idx.to('cpu')
    assert ("host-transfer", "torch.Tensor.numpy") not in ops, str(report)  # reads of host tensors
    assert all("_negative_sampling.py" not in f.message or f.op.split(" (")[0] != "torch.Tensor.numpy"
               for f in report.findings)


def test_an_internal_error_of_the_checker_is_warned_not_a_finding(monkeypatch):
    from graph_adapter.ipu import dispatcher

    def broken(*args, **kwargs):
        raise AttributeError("a bug of the checker's own")

    monkeypatch.setattr(dispatcher, "_moves_to_host", broken)
    with pytest.warns(RuntimeWarning, match="internal error of the checker"):
        report = check(Reads("graphium"), batch())
    assert report.ok and report.findings == [], str(report)
    assert any("a bug of the checker's own" in e for e in report.internal_errors)
    assert "checker internal error (not about the model)" in str(report)
