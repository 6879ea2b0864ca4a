"""graphium 2.4.7 as it ships (issue 25), in the venv ``.ci/graphium`` builds.

The main suite skips this folder (graphium pins lightning 2.0.9 and torchmetrics < 0.11).
Covered so far: graphium's own ``FCLayer`` (the layer whose
``torch.prod(torch.as_tensor(h.shape[:-1])) == 0`` test blocked compiles) through the
checker and both emulations (accepted: a host tensor's read), and
``graph_adapter.compat.graphium.patch()`` on the real methods (fullgraph compiles
only once patched). Full ``FullGraphMultiTaskNetwork`` configurations on graphium's
featurizer output: ``test_full_graph_network.py``; graphium's trainer form (docs/migrating.md's
recipe): ``test_lightning_trainer.py``; its IPU-only paths: ``test_drop_nodes_last_graph.py``.
"""
import importlib
import os

import pytest
import torch

if os.environ.get("GRAPH_ADAPTER_GRAPHIUM_CI") == "1":
    importlib.import_module("graphium")  # .ci/graphium's own venv: a failed import fails CI
else:
    pytest.importorskip("graphium", reason="graphium 2.4.7 needs lightning 2.0.9; .ci/graphium "
                                           "tests it in its own venv (tests/graphium_venv)")

from graphium.nn.base_layers import FCLayer  # noqa: E402

from graph_adapter.checker import check  # noqa: E402
from graph_adapter.compat import graphium as compat  # noqa: E402
from graph_adapter.ipu import compile_ipu, emulate_poptorch  # noqa: E402


class Head(torch.nn.Module):
    """graphium's FCLayer on a flat dict's node features."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = FCLayer(4, 3)

    def forward(self, b):
        h = self.fc(b["x"])
        return {"output": h, "loss": h.pow(2).mean()}


def batch():
    return {"x": torch.randn(6, 4, generator=torch.Generator().manual_seed(0))}


@pytest.fixture
def unpatched():
    compat.unpatch()
    yield
    compat.unpatch()


def test_graphiums_shape_test_passes_the_checker_and_both_emulations(unpatched):
    for training in (False, True):
        report = check(Head(), batch(), training=training)
        assert report.ok and report.internal_errors == [], str(report)
    ref = Head().eval()(batch())["output"]
    with emulate_poptorch() as pt:
        torch.testing.assert_close(pt.inferenceModel(Head().eval())(batch())["output"], ref)
    torch.testing.assert_close(compile_ipu(Head().eval(), "ipu-emulator")(batch())["output"], ref)


def test_patch_makes_graphium_compile_with_fullgraph(unpatched):
    torch._dynamo.reset()
    with pytest.raises(Exception, match="Data-dependent branching"):
        torch.compile(Head().eval(), fullgraph=True, dynamic=False, backend="aot_eager")(batch())
    done = compat.patch()
    assert done == [
        "graphium.nn.base_layers.FCLayer.forward: 1 test(s) -> math.prod",
        "graphium.nn.architectures.global_architectures.FullGraphMultiTaskNetwork.forward: "
        "1 test(s) -> math.prod"], done
    torch._dynamo.reset()
    model = Head().eval()
    out = torch.compile(model, fullgraph=True, dynamic=False, backend="aot_eager")(batch())
    torch.testing.assert_close(out["output"], model(batch())["output"])
    empty = {"x": torch.zeros(0, 4)}
    assert model(empty)["output"].shape == (0, 3)  # graphium's zero-row branch still taken
