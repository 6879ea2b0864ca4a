"""``graph-adapter export package.module:factory OUT``: writes the artifact, exit codes 0/1/2."""
import textwrap

import pytest

pytest.importorskip("onnxruntime", reason="the serve extra (onnx, onnxscript, onnxruntime)")

from graph_adapter import serve  # noqa: E402
from graph_adapter.app.cli import main  # noqa: E402

FACTORY = textwrap.dedent("""
    import torch
    from torch import nn
    from torch_geometric.data import Data
    from graph_adapter.app.models import build_model
    from graph_adapter.batching.budget import Budget
    from graph_adapter.batching.loader import FixedSizeLoader
    from graph_adapter.nn.wrap import ipu_wrap

    def graphs():
        g = torch.Generator().manual_seed(0)
        out = []
        for i in range(12):
            n = 3 + i % 4
            out.append(Data(x=torch.randint(0, 2, (n, 9), generator=g),
                            edge_index=torch.randint(0, n, (2, 2 * n), generator=g),
                            edge_attr=torch.randint(0, 2, (2 * n, 3), generator=g)))
        return out

    def make():
        gs = graphs()
        return ipu_wrap(build_model("gin", hidden=8, layers=1)).eval(), \\
            FixedSizeLoader(gs, Budget.fit(gs, 4))

    class Scalar(nn.Module):
        def forward(self, x, edge_index):
            return x.float().sum() + edge_index.sum()

    def scalar():
        gs = graphs()
        return ipu_wrap(Scalar()), Budget.fit(gs, 4), gs[:2]
""")


@pytest.fixture
def here(tmp_path, monkeypatch):
    (tmp_path / "fac.py").write_text(FACTORY)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_export_writes_an_artifact_that_serves(here, capsys):
    assert main(["export", "fac:make", "m.onnx"]) == 0
    out = capsys.readouterr().out
    assert "wrote m.onnx (onnx" in out and "output (graph-level)" in out
    import fac

    preds = serve.load(str(here / "m.onnx")).predict(fac.graphs())
    assert len(preds) == 12 and preds[0].shape == (1,)


def test_export_failures_have_exit_codes(here, capsys):
    assert main(["export", "fac:make", "m.tflite"]) == 2
    assert "end it in .pt2 or .onnx" in capsys.readouterr().err
    assert main(["export", "fac:nothing", "m.onnx"]) == 2
    assert "cannot load fac:nothing" in capsys.readouterr().err
    assert main(["export", "fac:make", "m.pt2", "--threads", "0"]) == 2  # before compiling
    assert "threads=0: give the server's thread count" in capsys.readouterr().err
    assert main(["export", "fac:scalar", "s.onnx"]) == 1
    assert "export failed: output 'output'" in capsys.readouterr().err
    assert not (here / "s.onnx").exists()
