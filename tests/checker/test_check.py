"""graph_adapter.checker: what poptorch's dispatcher would reject, found on CPU."""

import pytest
import torch
from torch import nn
from torch_geometric.nn import GIN, global_add_pool

from graph_adapter.checker import KINDS, CheckReport, Finding, check
from graph_adapter.ipu import IPUOptions

HERE = __file__


def flat_batch(micro=None):
    b = {
        "x": torch.randn(6, 4),
        "edge_index": torch.tensor([[0, 1, 2, 3, 4], [1, 0, 3, 2, 4]]),
        "batch": torch.tensor([0, 0, 1, 1, 2, 2]),
        "ptr": torch.tensor([0, 2, 4, 6]),
        "node_mask": torch.tensor([1, 1, 1, 1, 0, 0], dtype=torch.bool),
        "graph_mask": torch.tensor([1, 1, 0], dtype=torch.bool),
        "y": torch.tensor([1.0, 2.0, float("nan")]),
    }
    if micro:
        b = {k: torch.stack([v] * micro) for k, v in b.items()}
    return b


class CleanGIN(nn.Module):
    """A GIN on a padded flat dict, written the static way."""

    def __init__(self, squeeze=False):
        super().__init__()
        torch.manual_seed(0)
        self.gin = GIN(4, 16, 2, out_channels=1)
        self.squeeze = squeeze

    def forward(self, b):
        if self.squeeze:
            b = {k: v.squeeze(0) for k, v in b.items()}
        x = self.gin(b["x"], b["edge_index"])
        out = global_add_pool(x, b["batch"], size=b["ptr"].numel() - 1).squeeze(-1)
        err = torch.where(b["graph_mask"], out - torch.nan_to_num(b["y"]), torch.zeros_like(out))
        return {"output": out, "loss": err.pow(2).sum() / b["graph_mask"].sum().clamp(min=1)}


class Bad(CleanGIN):
    def __init__(self, problem):
        super().__init__()
        self.problem = problem

    def forward(self, b):
        x, p = b["x"], self.problem
        if p == "item":
            x = x * b["y"][0].item()
        elif p == "int":
            x = x[: int(b["ptr"][-1])]
        elif p == "bool":
            if b["node_mask"].any():
                x = x + 1
        elif p == "nonzero":
            x = x[torch.nonzero(b["node_mask"]).squeeze(-1)].sum(0, keepdim=True).expand(6, -1)
        elif p == "where1":
            x = x[torch.where(b["node_mask"])[0]].sum(0, keepdim=True).expand(6, -1)
        elif p == "mask":
            x = x[b["node_mask"]].sum(0, keepdim=True).expand(6, -1)
        elif p == "unique":
            x = x * torch.unique(b["batch"]).sum()
        elif p == "repeat_interleave":
            x = x + torch.repeat_interleave(torch.ones(3, 4), b["ptr"].diff(), dim=0)
        elif p == "cpu":
            x = x.cpu() * 2
        elif p == "numpy":
            x = x * float(b["x"].numpy().mean())
        elif p == "index_add":
            x = torch.zeros_like(x).index_add(0, b["batch"], x)
        elif p == "index_add_":
            x = torch.zeros_like(x).index_add_(0, b["batch"], x)
        elif p == "to_cpu":
            x = x.to("cpu") * 2
        elif p == "to_cpu_device":
            x = x.to(device=torch.device("cpu")) * 2
        elif p == "bincount":
            x = x * torch.bincount(b["batch"]).sum()
        elif p == "scatter_max":
            x = torch.ops.torch_scatter.scatter_max(x, b["batch"], 0, None, 6)[0]
        elif p == "float64":
            x = (x.double() * 2).float()
        elif p == "pyg_pool":
            out = global_add_pool(self.gin(x, b["edge_index"]), b["batch"]).squeeze(-1)
            return {"output": out, "loss": out.sum()}
        b = dict(b, x=x)
        return super().forward(b)


def test_clean_gin_passes_inference_and_training():
    for training in (False, True):
        report = check(CleanGIN(), flat_batch(), training=training)
        assert report.ok, str(report)
        assert report.findings == []
        assert str(report).startswith("ok")


def test_clean_gin_with_micro_batches_and_options():
    report = check(CleanGIN(squeeze=True), flat_batch(micro=4), training=True,
                   options=IPUOptions(2, 1, 2))
    assert report.ok, str(report)


@pytest.mark.parametrize("problem, kind, op", [
    ("item", "data-dependent-value", "item"),
    ("int", "data-dependent-value", "__int__"),
    ("bool", "data-dependent-value", "__bool__"),
    ("nonzero", "data-dependent-shape", "nonzero"),
    ("where1", "data-dependent-shape", "where"),
    ("mask", "data-dependent-shape", "__getitem__"),
    ("unique", "data-dependent-shape", "unique"),
    ("repeat_interleave", "data-dependent-shape", "repeat_interleave"),
    ("cpu", "host-transfer", "cpu"),
    ("numpy", "host-transfer", "numpy"),
    ("index_add", "unsupported-op", "index_add"),
    # The in-place variant is its own aten packet (aten.index_add_); poptorch has no handler
    # for either (shared/FACTS.md, poptorch section).
    ("index_add_", "unsupported-op", "index_add_"),
    ("to_cpu", "host-transfer", "to"),
    ("to_cpu_device", "host-transfer", "to"),
    # poptorch's meta kernel: "Bincount `minlength` must be specified" (RegisterMetaOps.cpp.inc)
    ("bincount", "data-dependent-shape", "bincount"),
    # torch_scatter's C++ op has no fake kernel: the dispatcher cannot run it
    pytest.param("scatter_max", "unsupported-op", "scatter_max", marks=pytest.mark.needs_scatter),
])
def test_each_problem_is_caught_and_named(problem, kind, op):
    report = check(Bad(problem), flat_batch(), training=False)
    assert not report.ok
    hits = report.by_kind(kind)
    assert hits, str(report)
    f = hits[0]
    assert op in f.op
    # the user's own file and line
    assert f.location.startswith(HERE + ":"), f.location
    line = int(f.location.rsplit(":", 1)[1])
    lines = open(HERE).read().splitlines()
    # exactly the statement of Bad.forward's branch for this problem (the line after `p == ...`)
    branch = next(i for i, src in enumerate(lines) if f'p == "{problem}"' in src)
    assert line == branch + 2, (f.location, lines[line - 1])
    assert kind in str(report) and f.location in str(report)


def test_problem_inside_pyg_names_pyg_and_user_line():
    report = check(Bad("pyg_pool"), flat_batch())
    f = report.by_kind("data-dependent-value")[0]
    assert f.location.startswith(HERE + ":")
    assert "inside PyG's" in f.message and "scatter" in f.message


def test_float64_is_a_warning_not_an_error():
    report = check(Bad("float64"), flat_batch())
    assert report.ok, str(report)
    assert report.by_kind("narrowed-dtype")
    assert all(f.severity == "warning" for f in report.findings)
    b = flat_batch()
    b["x"] = b["x"].double()
    report = check(CleanGIN().double(), b)
    assert report.ok and any(f.op == "batch[x]" for f in report.by_kind("narrowed-dtype"))
    assert any(f.location == "<parameters>" for f in report.warnings)


def test_int64_out_of_int32_range_is_an_error():
    b = flat_batch()
    b["big"] = torch.tensor([2**40])
    report = check(CleanGIN(), b)
    assert not report.ok
    assert report.by_kind("narrowed-dtype")[0].op == "batch[big]"


def test_inputs_that_do_not_split():
    report = check(CleanGIN(squeeze=True), flat_batch(micro=3), options=IPUOptions(2))
    assert not report.ok
    ops = {f.op for f in report.by_kind("batch-split")}
    assert "batch[x]" in ops and "batch[ptr]" in ops


def test_keeps_collecting_after_the_first_problem():
    class Two(CleanGIN):
        def forward(self, b):
            x = b["x"].cpu()
            n = int(b["ptr"][-1])
            x = torch.zeros_like(x).index_add(0, b["batch"], x[:n])
            return super().forward(dict(b, x=x))

    report = check(Two(), flat_batch())
    assert {"host-transfer", "data-dependent-value", "unsupported-op"} <= set(report.kinds)


def test_training_without_loss_is_reported():
    class NoLoss(CleanGIN):
        def forward(self, b):
            return {"output": super().forward(b)["output"]}

    report = check(NoLoss(), flat_batch(), training=True)
    assert not report.ok and report.by_kind("error")


def test_check_does_not_modify_the_model():
    m = CleanGIN()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    check(m, flat_batch(), training=True)
    assert all(torch.equal(v, before[k]) for k, v in m.state_dict().items())
    assert m.training  # untouched


def test_report_shape():
    f = Finding("host-transfer", "torch.Tensor.cpu", "m.py:3", "msg")
    assert str(f) == "host-transfer  torch.Tensor.cpu  m.py:3  msg"
    r = CheckReport.of([f, f, Finding("narrowed-dtype", "x", "<input>", "m", "warning")])
    assert not r.ok and len(r.findings) == 2 and len(r.errors) == 1 and len(r.warnings) == 1
    assert set(KINDS) >= {f.kind for f in r.findings}


def test_ipu_wrapped_gin_from_the_loader_passes():
    import graph_adapter.nn.wrap as wrap
    import graph_adapter.batching.loader as loader_mod
    from torch_geometric.data import Data
    from graph_adapter.batching import Budget
    from graph_adapter.nn import masked_loss

    g = torch.Generator().manual_seed(0)
    ds = [Data(x=torch.randn(k, 4, generator=g), edge_index=torch.randint(0, k, (2, 2 * k), generator=g),
               y=torch.randn(1, generator=g)) for k in (3, 5, 4, 6, 7, 3, 4, 5)]

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.gin = GIN(4, 16, 2, out_channels=1, norm="batch_norm")

        def forward(self, data):
            x = self.gin(data.x, data.edge_index)
            return global_add_pool(x, data.batch, size=data.num_graphs).squeeze(-1)

    opts = IPUOptions(2, 1, 2)
    host = next(iter(loader_mod.FixedSizeLoader(ds, Budget.tight(ds, 2), micro_batches=opts.micro_batches)))
    w = wrap.ipu_wrap(Net(), loss_fn=masked_loss("mse"))
    report = check(w, host, training=True, options=opts)
    assert report.ok, str(report)


# ---- fidelity to poptorch's sources (issue 10, item 5) ------------------------------------
class Extra(CleanGIN):
    """CleanGIN plus one thing poptorch accepts (the checker must not report it)."""

    def __init__(self, what):
        super().__init__()
        self.what = what
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, b):
        x = b["x"]
        if self.what == "bincount_minlength":
            # poptorch's meta kernel returns [minlength] (RegisterMetaOps.cpp.inc: bincount)
            counts = torch.bincount(b["batch"], minlength=3)
            x = x * counts.sum().to(x.dtype) / counts.numel()
        elif self.what == "to_own_device":
            # onto an input's own device: on the IPU that is the IPU, no host transfer
            x = x.to(device=b["batch"].device) + torch.ones(1).to(b["x"].device)
        elif self.what == "buffer_copy_":
            self.calls.copy_(self.calls + 1)  # in place: poptorch's advice
        return super().forward(dict(b, x=x))


@pytest.mark.parametrize("what", ["bincount_minlength", "to_own_device", "buffer_copy_"])
def test_what_poptorch_accepts_is_not_reported(what):
    for training in (False, True):
        report = check(Extra(what), flat_batch(), training=training)
        assert report.ok and report.findings == [], str(report)


def test_bincount_minlength_is_static_in_the_fake_pass():
    from graph_adapter.checker.report import _fake_pass  # noqa: the pass itself, to see its shape

    class Shape(nn.Module):
        def forward(self, b):
            counts = torch.bincount(b["batch"], minlength=5)
            assert counts.shape == (5,)  # poptorch's meta kernel: [minlength]
            return {"loss": counts.sum().float()}

    assert _fake_pass(Shape(), flat_batch(), False, "loss") == []


def test_buffer_reassigned_in_forward_is_reported():
    class Reassigns(Extra):
        def forward(self, b):
            self.calls = self.calls + 1  # a new tensor: poptorch refuses it
            return super().forward(b)

    report = check(Reassigns("none"), flat_batch())
    hits = report.by_kind("reassigned-state")
    assert not report.ok and [f.op for f in hits] == ["calls"], str(report)
    # poptorch's message (python/_impl.py, errorOnBufferOrParameterAddressChanges)
    assert hits[0].message.startswith("Buffer calls is reassigned within the model when calling "
                                      "the forward method. This is not supported.")


def test_batchnorm_buffers_may_change_as_in_poptorch():
    class BN(CleanGIN):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(4)

        def forward(self, b):
            return super().forward(dict(b, x=self.bn(b["x"])))

    assert check(BN(), flat_batch(), training=True).ok


def test_model_holding_non_leaf_tensors_is_checked():
    from torch_geometric.nn import SuperGATConv

    class Sgat(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv = SuperGATConv(4, 4, add_self_loops=False)

        def forward(self, b):
            return {"loss": self.conv(b["x"], b["edge_index"]).sum()}

    model = Sgat().train()
    model(flat_batch())  # one training forward leaves non-leaf att_x / att_y on the conv
    assert not model.conv.att_x.is_leaf
    report = check(model, flat_batch())
    assert not any(f.kind == "error" for f in report.findings), str(report)
    assert not model.conv.att_x.is_leaf  # the user's model is untouched


@pytest.mark.needs_scatter
def test_extension_op_without_fake_kernel_is_unsupported_not_an_error():
    for training in (False, True):
        report = check(Bad("scatter_max"), flat_batch(), training=training)
        kinds = [f.kind for f in report.findings]
        assert "unsupported-op" in kinds and "error" not in kinds, str(report)
        assert "no fake (meta) kernel" in report.by_kind("unsupported-op")[0].message
    # The real pass finds it too (it records every occurrence, the fake pass only the first).
    from graph_adapter.checker.report import _real_pass  # noqa: the pass itself

    found = _real_pass(Bad("scatter_max"), flat_batch())
    assert [f.kind for f in found] == ["unsupported-op"] and "scatter_max" in found[0].op
