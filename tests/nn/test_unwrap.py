"""The user's model after ipu_wrap: torch.save(model) loads without graph_adapter,
the wrapper re-masks when unpickled, and unwrap() puts the plain classes back."""
import copy
import io
import os
import pickle
import subprocess
import sys

import torch

from graph_adapter import Budget, FixedSizeLoader, ipu_wrap, masked_loss, unwrap
from graph_adapter.nn import MaskedBatchNorm1d

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _plain_net import PlainNet as _Net  # noqa: E402  (no graph_adapter import there)


def _graphs():
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(1)
    return [Data(x=torch.randn(k, 3, generator=g), edge_index=torch.randint(0, k, (2, 2 * k),
                                                                         generator=g),
                 y=torch.randn(1, 1, generator=g)) for k in (3, 5, 4, 6, 2, 7)]


def _kinds(model):
    return sorted({f"{type(m).__module__}.{type(m).__qualname__}" for m in model.modules()
                   if "Norm" in type(m).__name__})


def _trained():
    graphs = _graphs()
    model = _Net()
    wrapped = ipu_wrap(model, loss_fn=masked_loss("mse"))
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.1)
    for flat in FixedSizeLoader(graphs, Budget.tight(graphs, 3)):
        opt.zero_grad()
        wrapped(flat)["loss"].backward()
        opt.step()
    return model, wrapped, graphs


_CHILD = r"""
import sys
sys.modules["graph_adapter"] = None  # importing graph_adapter now fails
sys.path.insert(0, sys.argv[4])  # tests/nn: _plain_net, the model's class
import torch
from torch_geometric.data import Batch
model = torch.load(sys.argv[1], weights_only=False)
data = torch.load(sys.argv[2], weights_only=False)
model.eval()
with torch.no_grad():
    out = model(data.x, data.edge_index, data.batch)
kinds = sorted({type(m).__module__ + "." + type(m).__qualname__ for m in model.modules()
                if "Norm" in type(m).__name__})
torch.save({"out": out, "kinds": kinds}, sys.argv[3])
"""


def test_the_model_saved_after_training_loads_where_graph_adapter_is_not(tmp_path):
    from torch_geometric.data import Batch

    model, _, graphs = _trained()
    assert any(isinstance(m, MaskedBatchNorm1d) for m in model.modules())
    batch = Batch.from_data_list(graphs)
    torch.save(model, tmp_path / "model.pt")
    torch.save(batch, tmp_path / "batch.pt")
    model.eval()
    with torch.no_grad():
        want = model(batch.x, batch.edge_index, batch.batch)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "model.pt"),
                        str(tmp_path / "batch.pt"), str(tmp_path / "out.pt"),
                        os.path.dirname(os.path.abspath(__file__))],
                       env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    got = torch.load(tmp_path / "out.pt", weights_only=False)
    assert torch.allclose(got["out"], want, atol=1e-6)
    assert got["kinds"] == ["torch.nn.modules.batchnorm.BatchNorm1d",
                            "torch_geometric.nn.norm.batch_norm.BatchNorm",
                            "torch_geometric.nn.norm.layer_norm.LayerNorm"]


def test_the_wrapper_unpickled_masks_again_and_unwrap_restores_plain_classes():
    model, wrapped, _ = _trained()
    masked = _kinds(model)
    for clone in (copy.deepcopy(wrapped), pickle.loads(pickle.dumps(wrapped))):
        assert _kinds(clone.model) == masked
        assert any(isinstance(m, MaskedBatchNorm1d) for m in clone.model.modules())
    buf = io.BytesIO()
    torch.save(wrapped, buf)
    buf.seek(0)
    assert any(isinstance(m, MaskedBatchNorm1d)
               for m in torch.load(buf, weights_only=False).model.modules())
    keys = list(model.state_dict())
    assert unwrap(wrapped) is model
    assert not any(isinstance(m, MaskedBatchNorm1d) for m in model.modules())
    assert all(type(m).__module__.startswith(("torch.", "torch_geometric."))
               for m in model.modules() if "Norm" in type(m).__name__)
    assert list(model.state_dict()) == keys
