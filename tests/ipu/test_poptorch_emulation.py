"""graph_adapter.ipu.emulate_poptorch(): the emulated poptorch module (no IPU anywhere)."""
import importlib.util
import sys

import pytest
import torch
from torch import nn

from graph_adapter.ipu import EmulatorError, IPUOptions, emulate_poptorch, register_pyg_arg_parser


class Net(nn.Module):
    """Two tensors in, ``(output, loss)`` out; ``how`` picks how the loss is made."""

    def __init__(self, how="identity_loss", extra=None):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(3, 1)
        self.how, self.extra = how, extra
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x, y):
        import poptorch

        out = self.lin(x).squeeze(-1)
        if self.extra == "cpu":
            out = out.cpu()
        elif self.extra == "item":
            out = out * out.sum().item()
        elif self.extra == "nonzero":
            out = out[torch.nonzero(y > 0).squeeze(-1)]
        elif self.extra == "reassign":
            self.count = self.count + 1
        if self.how == "identity_loss":
            loss = poptorch.identity_loss(((out - y) ** 2).mean(), reduction="none")
        elif self.how == "mse_loss":
            loss = nn.functional.mse_loss(out, y)
        else:
            loss = ((out - y) ** 2).mean()  # plain arithmetic: not a loss to poptorch
        return out, loss


def data(n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, generator=g), torch.randn(n, generator=g)


def opts(pt, d=2, a=2, mode=None):
    o = pt.Options().deviceIterations(d)
    o.Training.gradientAccumulation(a)
    if mode is not None:
        o.outputMode(mode)
    return o


def test_module_in_sys_modules_with_a_spec_and_restored():
    before = sys.modules.get("poptorch")
    with emulate_poptorch() as pt:
        import poptorch

        assert poptorch is pt and sys.modules["poptorch"] is pt
        # lightning-utilities' package_available uses find_spec: the module needs a __spec__.
        assert importlib.util.find_spec("poptorch") is pt.__spec__ is not None
        assert pt.ipuHardwareIsAvailable() and not pt.isRunningOnIpu()
    assert sys.modules.get("poptorch") is before
    sentinel = object()
    sys.modules["poptorch"] = sentinel
    try:
        with emulate_poptorch():
            pass
        assert sys.modules["poptorch"] is sentinel
    finally:
        del sys.modules["poptorch"]
    installed = emulate_poptorch()  # a plain call installs at once
    assert sys.modules["poptorch"] is installed.module
    installed.restore()
    assert "poptorch" not in sys.modules


def test_training_model_equals_the_emulator():
    from graph_adapter.ipu import compile_ipu

    class AsDict(nn.Module):  # the plain emulator takes the loss from a dict
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, x, y):
            out, loss = self.net(x, y)
            return {"output": out, "loss": loss}

    with emulate_poptorch() as pt:
        net, ref = Net(), Net()
        model = pt.trainingModel(net, opts(pt), torch.optim.SGD(net.parameters(), lr=0.1))
        emu = compile_ipu(AsDict(ref), "ipu-emulator", IPUOptions(2, 1, 2, output_mode="final"),
                          optimizer=torch.optim.SGD(ref.parameters(), lr=0.1))
        for seed in range(3):
            out, loss = model(*data(seed=seed))
            ref_out = emu(*data(seed=seed))
            torch.testing.assert_close(out, ref_out["output"])
            torch.testing.assert_close(loss, ref_out["loss"])
        # Default output mode for training is Final: the last micro-batch (2 rows), a 0-d loss.
        assert out.shape == (2,) and loss.shape == ()
        assert model.isCompiled() and model.isAttachedToDevice() and model._executable is not None
        for p, q in zip(net.parameters(), ref.parameters()):
            torch.testing.assert_close(p, q)
        assert model.emulator.steps == 6
        model.detachFromDevice()
        assert not model.isAttachedToDevice()
        model.destroy()
        assert not model.isCompiled() and model._executable is None


def test_inference_model_returns_all_by_default():
    with emulate_poptorch() as pt:
        o = pt.Options().deviceIterations(4)
        model = pt.inferenceModel(Net(), o)
        out, loss = model(*data())
        assert out.shape == (8,) and loss.shape == (4,)


def test_loss_must_be_marked_or_builtin():
    with emulate_poptorch() as pt:
        for how in ("identity_loss", "mse_loss"):
            pt.trainingModel(Net(how), opts(pt))(*data())
        model = pt.trainingModel(Net("arithmetic"), opts(pt))
        # poptorch/source/RemoveSurplusIdentityLosses.cpp
        with pytest.raises(EmulatorError, match="Couldn't find a loss in graph!"):
            model(*data())
        assert not model.isCompiled()


@pytest.mark.parametrize("extra, message", [
    ("cpu", r"Illegal move to CPU \(via `.to\(\"cpu\"\)`\) when using the dispatcher"),
    ("item", r"aten::item is only supported in eager mode, but was intercepted in a static graph"),
    ("nonzero", r"nonzero"),
    ("reassign", r"Buffer count is reassigned within the model when calling the forward method"),
])
def test_forward_obeys_the_dispatchers_rules(extra, message):
    with emulate_poptorch() as pt:
        for model in (pt.trainingModel(Net(extra=extra), opts(pt)),
                      pt.inferenceModel(Net(extra=extra), pt.Options().deviceIterations(2))):
            with pytest.raises(EmulatorError, match=message):
                model(*data())
            assert not model.isCompiled()


def test_is_running_on_ipu_inside_the_model_only():
    seen = []

    class Probe(Net):
        def forward(self, x, y):
            import poptorch

            seen.append(poptorch.isRunningOnIpu())
            return super().forward(x, y)

    with emulate_poptorch() as pt:
        pt.inferenceModel(Probe(), pt.Options().deviceIterations(2))(*data())
        assert seen == [True, True] and not pt.isRunningOnIpu()


def test_batch_dimension_assertion_then_shape_mismatch():
    with emulate_poptorch() as pt:
        model = pt.trainingModel(Net(), opts(pt))  # F = 4
        with pytest.raises(AssertionError, match=r"Invalid batch dimension: In the input "
                           r"torch.Size\(\[6, 3\]\), the batch dimension \(6\) must be a multiple"):
            model(*data(6))
        assert not model.isCompiled()
        model(*data(8))
        with pytest.raises(EmulatorError, match=r"Shape mismatch for x: expected torch.Size\(\[8, 3\]\)"):
            model(*data(12))


def test_compile_runs_nothing():
    with emulate_poptorch() as pt:
        net = Net()
        before = {k: v.clone() for k, v in net.state_dict().items()}
        model = pt.trainingModel(net, opts(pt), torch.optim.SGD(net.parameters(), lr=0.5, momentum=0.9))
        model.compile(*data())
        assert model.isCompiled() and model.emulator.steps == 0
        for k, v in net.state_dict().items():
            assert torch.equal(v, before[k]), k


def test_dataloader_combines_F_batches():
    with emulate_poptorch() as pt:
        o = opts(pt, d=3, a=2)
        loader = pt.DataLoader(o, torch.utils.data.TensorDataset(torch.arange(30.0)), batch_size=2)
        assert loader.combinedBatchSize == 12
        assert [b[0].shape[0] for b in loader] == [12, 12]  # drop_last=True, as poptorch


def test_options_as_lightning_graphcore_reads_them():
    with emulate_poptorch() as pt:
        o = IPUOptions(2, 3, 4, output_mode="all").to_poptorch(pt)
        assert o.replication_factor == 3 and o.device_iterations == 2
        assert o.Training.gradient_accumulation == 4 and o.toDict()["replication_factor"] == 3
        o.randomSeed(7)
        assert o.exists("random_seed")
        with pytest.raises(EmulatorError, match="traceModel"):
            o.Jit.traceModel(True)
        with pytest.raises(AttributeError, match="not emulated"):
            o.somethingPoptorchHasNot(1)
        assert o.ipu_options(False) == IPUOptions(2, 3, 1, output_mode="all")


def test_pyg_batch_passed_straight_with_the_opt_in_parser():
    from torch_geometric.data import Batch, Data

    class Pool(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 1)

        def forward(self, batch):
            assert batch.name == ["a", "b"]  # non-tensor attributes survive the rebuild
            return self.lin(batch.x).sum()

    b = Batch.from_data_list([Data(x=torch.randn(3, 2), name="a"), Data(x=torch.randn(3, 2), name="b")])
    with emulate_poptorch() as pt:
        saved = dict(pt._utils.custom_arg_parsers)
        try:
            pt._utils.custom_arg_parsers.clear()
            register_pyg_arg_parser(pt)
            out = pt.inferenceModel(Pool())(b)
            assert out.shape == ()
        finally:
            pt._utils.custom_arg_parsers.clear()
            pt._utils.custom_arg_parsers.update(saved)
