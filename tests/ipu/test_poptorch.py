"""The poptorch backend on real poptorch (the Poplar SDK). Skipped where poptorch is absent.

These tests need poptorch; the IPU-model tests run without hardware when the
SDK is installed (POPTORCH_IPU_MODEL=1). Nobody has run them yet: no SDK here.
"""
import os

import pytest
import torch
from torch import nn

poptorch = pytest.importorskip(
    "poptorch", reason="poptorch ships only with Graphcore's Poplar SDK (not on PyPI); not installed")

from graph_adapter.ipu import IPUOptions, compile_ipu  # noqa: E402

pytestmark = pytest.mark.poptorch


class FlatModel(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(4, 1)

    def forward(self, batch):
        x, y = batch["x"].squeeze(0), batch["y"].squeeze(0)
        out = self.lin(x).squeeze(-1)
        return {"output": out, "loss": ((out - y) ** 2).mean()}


def host_batch(F, n=5):
    g = torch.Generator().manual_seed(0)
    return {"x": torch.randn(F, n, 4, generator=g), "y": torch.randn(F, n, generator=g)}


def test_to_poptorch_builds_options():
    opts = IPUOptions(2, 1, 3, output_mode="final").to_poptorch()
    assert isinstance(opts, poptorch.Options)


@pytest.mark.skipif(not os.environ.get("POPTORCH_IPU_MODEL") and not poptorch.ipuHardwareIsAvailable(),
                    reason="needs an IPU or POPTORCH_IPU_MODEL=1")
@pytest.mark.parametrize("mode", ["all", "final", "sum"])
def test_emulator_matches_poptorch(mode):
    options = IPUOptions(2, 1, 2, output_mode=mode)
    m_ipu, m_emu = FlatModel(), FlatModel()
    ipu = compile_ipu(m_ipu, "poptorch", options,
                      optimizer=poptorch.optim.SGD(m_ipu.parameters(), lr=0.05))
    emu = compile_ipu(m_emu, "ipu-emulator", options,
                      optimizer=torch.optim.SGD(m_emu.parameters(), lr=0.05))
    b = host_batch(options.micro_batches)
    out_ipu, out_emu = ipu(b), emu(b)
    for k in out_emu:
        assert out_ipu[k].shape == out_emu[k].shape, k
        torch.testing.assert_close(out_ipu[k], out_emu[k], rtol=1e-4, atol=1e-5)
    ipu.copyWeightsToHost()
    for p, q in zip(m_ipu.parameters(), m_emu.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    ipu.destroy()
