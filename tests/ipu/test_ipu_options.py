"""IPUOptions, and the poptorch backend's wiring checked against a recording stand-in.

The stand-in (``FakePoptorch``) only records calls: it says nothing about what
a real IPU does. Real-poptorch tests are in ``test_poptorch.py``.
"""
import types

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch import nn

from graph_adapter.ipu import (
    IPUOptions,
    PoptorchRunner,
    compile_ipu,
    import_poptorch,
    make_pyg_arg_parser,
    register_pyg_arg_parser,
)


class _Recorder:
    def __init__(self, log, prefix=""):
        self._log, self._prefix = log, prefix

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name == "Training":
            return _Recorder(self._log, "Training.")
        if name == "Jit":
            return _Recorder(self._log, "Jit.")

        def call(*args, **kwargs):
            self._log.append((self._prefix + name, args, kwargs))
            return self

        return call


def make_fake_poptorch():
    log = []
    pt = types.SimpleNamespace()
    pt.log = log
    pt.Options = lambda: _Recorder(log)
    pt.ReductionType = types.SimpleNamespace(Mean="Mean", Sum="Sum")
    pt.OutputMode = types.SimpleNamespace(All="All", Final="Final", Sum="Sum", EveryN="EveryN")

    def identity_loss(x, reduction):
        log.append(("identity_loss", (reduction,), {}))
        return x

    pt.identity_loss = identity_loss

    def trainingModel(model, options=None, optimizer=None, **kw):  # noqa: N802
        log.append(("trainingModel", (model,), dict(options=options, optimizer=optimizer, **kw)))
        return model

    def inferenceModel(model, options=None, **kw):  # noqa: N802
        log.append(("inferenceModel", (model,), dict(options=options, **kw)))
        return model

    pt.trainingModel, pt.inferenceModel = trainingModel, inferenceModel

    class ICustomArgParser:
        pass

    pt.ICustomArgParser = ICustomArgParser
    pt.registerCustomArgParser = lambda cls, parser: log.append(("registerCustomArgParser", (cls,), {}))
    return pt


def test_defaults_and_product():
    o = IPUOptions()
    assert (o.device_iterations, o.replication_factor, o.gradient_accumulation, o.output_mode) == (
        1, 1, 1, "all")
    assert o.micro_batches == 1
    assert IPUOptions(3, 2, 4).micro_batches == 24
    assert IPUOptions(3, 2, 4).replicas_times_accumulation == 8


@settings(deadline=None)
@given(st.integers(1, 6), st.integers(1, 4), st.integers(1, 5))
def test_product_is_F(d, r, a):
    assert IPUOptions(d, r, a).micro_batches == d * r * a


@pytest.mark.parametrize("kw, match", [
    (dict(device_iterations=0), "device_iterations"),
    (dict(replication_factor=1.5), "replication_factor"),
    (dict(gradient_accumulation=True), "gradient_accumulation"),
    (dict(output_mode="last"), "output_mode"),
    (dict(output_mode="every_n", device_iterations=5, output_return_period=2), "divide"),
    (dict(output_mode="all", output_return_period=2), "every_n"),
])
def test_invalid(kw, match):
    with pytest.raises(ValueError, match=match):
        IPUOptions(**kw)


@pytest.mark.parametrize("mode, expect", [
    ("all", ("outputMode", ("All",), {})),
    ("final", ("outputMode", ("Final",), {})),
    ("sum", ("outputMode", ("Sum",), {})),
])
def test_to_poptorch_sets_everything(mode, expect):
    pt = make_fake_poptorch()
    IPUOptions(4, 2, 3, output_mode=mode).to_poptorch(pt)
    assert ("deviceIterations", (4,), {}) in pt.log
    assert ("replicationFactor", (2,), {}) in pt.log
    assert ("Training.gradientAccumulation", (3,), {}) in pt.log
    assert ("Training.accumulationAndReplicationReductionType", ("Mean",), {}) in pt.log
    assert expect in pt.log
    assert not any(name.startswith("Jit.") for name, _, _ in pt.log)


def test_to_poptorch_every_n():
    pt = make_fake_poptorch()
    IPUOptions(6, output_mode="every_n", output_return_period=3).to_poptorch(pt)
    assert ("outputMode", ("EveryN", 3), {}) in pt.log


def test_check_batch():
    o = IPUOptions(2, 1, 2)
    assert o.check_batch({"x": torch.zeros(4, 3)}) == []
    problems = o.check_batch({"x": torch.zeros(6, 3), "s": torch.tensor(1.0)})
    assert len(problems) == 2
    assert "batch[x]" in problems[0] and "not a multiple" in problems[0]
    assert "0-d" in problems[1]


def test_import_poptorch_keeps_original_error():
    try:
        import poptorch  # noqa: F401
    except ImportError as exc:
        original = exc
    else:
        pytest.skip("poptorch is installed here")
    with pytest.raises(ImportError) as info:
        import_poptorch()
    assert "Poplar SDK" in str(info.value)
    assert "ipu-emulator" in str(info.value)
    assert type(info.value.__cause__) is type(original)


def test_importing_graph_adapter_ipu_does_not_import_poptorch():
    import subprocess
    import sys

    code = "import sys, graph_adapter.ipu, graph_adapter.checker; print('poptorch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


class _Flat(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 1)

    def forward(self, batch):
        out = self.lin(batch["x"]).squeeze(-1)
        return {"output": out, "loss": ((out - batch["y"]) ** 2).mean()}


def test_poptorch_backend_training_wiring():
    pt = make_fake_poptorch()
    model = _Flat()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    runner = compile_ipu(model, "poptorch", IPUOptions(2, 1, 2), optimizer=opt, poptorch=pt)
    assert isinstance(runner, PoptorchRunner)
    names = [n for n, _, _ in pt.log]
    assert "trainingModel" in names and "inferenceModel" not in names
    assert "registerCustomArgParser" not in names  # the PyG arg parser is opt-in
    compile_ipu(_Flat(), "poptorch", IPUOptions(), poptorch=pt, pyg_arg_parser=True)
    assert "registerCustomArgParser" in [n for n, _, _ in pt.log]
    (_, _, kw), = [e for e in pt.log if e[0] == "trainingModel"]
    assert kw["optimizer"] is opt
    assert not any(n.startswith("Jit.") for n in names)
    # The poptorch model is called with narrowed inputs; the loss is marked.
    out = runner({"x": torch.randn(4, 2, 3, dtype=torch.float64),
                  "y": torch.zeros(4, 2, dtype=torch.float64), "i": torch.arange(4)})
    assert ("identity_loss", ("none",), {}) in pt.log
    assert out["output"].dtype == torch.float32


def test_poptorch_backend_inference_wiring():
    pt = make_fake_poptorch()
    seen = {}

    class M(nn.Module):
        def forward(self, batch):
            seen.update({k: v.dtype for k, v in batch.items()})
            return {"output": batch["x"].sum()}

    runner = compile_ipu(M(), "poptorch", IPUOptions(2), poptorch=pt)
    names = [n for n, _, _ in pt.log]
    assert "inferenceModel" in names and "trainingModel" not in names
    runner({"x": torch.zeros(2, 3), "edge_index": torch.zeros(2, 2, 5, dtype=torch.long)})
    assert seen["edge_index"] == torch.int32
    assert runner.poptorch_model is not None
    with pytest.raises(ValueError, match="gradient_accumulation"):
        compile_ipu(M(), "poptorch", IPUOptions(1, 1, 2), poptorch=pt)


def test_unknown_backend():
    with pytest.raises(ValueError, match="ipu-emulator"):
        compile_ipu(_Flat(), "ipu", IPUOptions())
    with pytest.raises(TypeError, match="IPUOptions"):
        compile_ipu(_Flat(), "ipu-emulator", "device_iterations=2")
    assert compile_ipu(_Flat(), "ipu-emulator", {"device_iterations": 2}).options.micro_batches == 2


def test_pyg_arg_parser_round_trip():
    from torch_geometric.data import Batch, Data

    pt = make_fake_poptorch()
    parser = make_pyg_arg_parser(pt)
    assert isinstance(parser, pt.ICustomArgParser)
    b = Batch.from_data_list([Data(x=torch.randn(3, 2), edge_index=torch.tensor([[0, 1], [1, 2]])),
                              Data(x=torch.randn(2, 2), edge_index=torch.tensor([[0], [1]]))])
    tensors = list(parser.yieldTensors(b))
    assert all(isinstance(t, torch.Tensor) for t in tensors)
    doubled = [t * 2 for t in tensors]
    rebuilt = parser.reconstruct(b, iter(doubled))
    assert type(rebuilt) is type(b)
    torch.testing.assert_close(rebuilt.x, b.x * 2)
    torch.testing.assert_close(rebuilt.edge_index, b.edge_index * 2)
    assert register_pyg_arg_parser(pt) is True
    assert register_pyg_arg_parser(pt) is False
    registered = [a[0] for n, a, _ in pt.log if n == "registerCustomArgParser"]
    assert Data in registered and type(b) in registered


def test_pyg_arg_parser_keeps_non_tensor_attributes():
    from torch_geometric.data import Batch, Data

    parser = make_pyg_arg_parser(make_fake_poptorch())
    b = Batch.from_data_list([Data(x=torch.randn(3, 2), name="a", smiles="CCO"),
                              Data(x=torch.randn(2, 2), name="b", smiles="CC")])
    rebuilt = parser.reconstruct(b, iter([t + 1 for t in parser.yieldTensors(b)]))
    assert rebuilt.name == ["a", "b"] and rebuilt.smiles == ["CCO", "CC"]
    assert rebuilt.num_graphs == 2 and [d.name for d in rebuilt.to_data_list()] == ["a", "b"]
    torch.testing.assert_close(rebuilt.x, b.x + 1)


def test_pyg_arg_parser_never_replaces_poptorch_geometrics():
    from torch_geometric.data import Batch, Data
    from torch_geometric.data.data import BaseData

    pt = make_fake_poptorch()
    theirs = object()
    # poptorch_geometric registers its parser for BaseData (poptorch_geometric/python/types.py).
    pt._utils = types.SimpleNamespace(custom_arg_parsers={BaseData: theirs})
    assert register_pyg_arg_parser(pt) is False
    assert not [n for n, _, _ in pt.log if n == "registerCustomArgParser"]
    # Only classes no registered parser covers get ours.
    pt2 = make_fake_poptorch()
    pt2._utils = types.SimpleNamespace(custom_arg_parsers={type(Batch(_base_cls=Data)): theirs})
    assert register_pyg_arg_parser(pt2) is True
    mine = [a[0] for n, a, _ in pt2.log if n == "registerCustomArgParser"]
    assert Data in mine and type(Batch(_base_cls=Data)) not in mine


def test_poptorch_runner_switches_models_lazily():
    pt = make_fake_poptorch()
    base = pt.trainingModel

    def training_model(model, **kw):  # the fake's model, with poptorch's setOptimizer
        m = base(model, **kw)
        m.setOptimizer = lambda o: pt.log.append(("setOptimizer", (o,), {}))
        return m

    pt.trainingModel = training_model
    model = _Flat()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    runner = compile_ipu(model, "poptorch", IPUOptions(2), optimizer=opt, poptorch=pt)
    assert runner.training and runner.steps_optimizer and runner.compile_count == 0
    batch = {"x": torch.randn(2, 2, 3), "y": torch.zeros(2, 2)}
    runner(batch)
    runner(batch)
    assert runner.compile_count == 1
    assert "inferenceModel" not in [n for n, _, _ in pt.log]
    runner.eval()
    assert not model.training
    runner(batch)
    assert [n for n, _, _ in pt.log].count("inferenceModel") == 1 and runner.compile_count == 2
    assert list(runner.parameters()) == list(model.parameters())
    pt.log.clear()
    runner.set_optimizer(opt)  # reaches the training model, even in eval mode
    assert runner.optimizer is opt and pt.log == [("setOptimizer", (opt,), {})]


def test_ipu_options_split_problems():
    o = IPUOptions(2)
    assert o.split_problems("batch[x]", torch.zeros(4, 3)) == []
    assert "not a multiple" in o.split_problems("batch[x]", torch.zeros(3))[0]
    assert IPUOptions().split_problems("s", torch.tensor(1.0)) == []
