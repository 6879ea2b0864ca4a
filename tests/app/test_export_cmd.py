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

    MODEL = build_model("gin", hidden=8, layers=1).eval()  # one set of weights per import

    def ladder():
        gs = graphs()
        return ipu_wrap(MODEL), FixedSizeLoader(gs, Budget.fit(gs, 4))

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


def test_export_ladder_writes_rungs_that_serve_a_graph_over_the_bulk(here, capsys):
    """``--ladder --max-nodes`` alone (onnx: one model, an If branch a rung; the edges
    derived from the data's densest graph: 2 a node): a graph larger than any the
    factory's data holds is served by the top rung, and so is one of the largest size
    whose edges all go into one node, far past the neighbour tables' width and the
    spill capacity the data alone would fit."""
    assert main(["export", "fac:ladder", "l.onnx", "--ladder", "--max-nodes", "20"]) == 0
    out = capsys.readouterr().out
    assert "rungs (one program each): nodes=" in out and "20 nodes and 40 edges" in out
    import torch
    from torch_geometric.data import Batch, Data

    import fac

    p = serve.load(str(here / "l.onnx"), threads=1)
    assert len(p.contract.rungs) == 2  # 1 graph a call (12 graphs: no 16), the top rung
    small = fac.graphs()
    big = small[3]  # 6 nodes, 12 edges, three times: 18 nodes, 36 edges
    g = Data(x=big.x.repeat(3, 1), edge_index=torch.cat([big.edge_index + 6 * k
                                                         for k in range(3)], 1),
             edge_attr=big.edge_attr.repeat(3, 1))
    n, e = 20, 40  # node 0 takes 39 in-edges (from every other node, some twice)
    star = torch.stack([torch.arange(e - 1) % (n - 1) + 1, torch.zeros(e - 1, dtype=torch.long)])
    hub = Data(x=torch.randint(0, 2, (n, 9)),
               edge_index=torch.cat([star, torch.tensor([[1], [2]])], 1),
               edge_attr=torch.randint(0, 2, (e, 3)))
    request = small[:3] + [g] + small[3:5] + [hub]
    preds = p.predict(request)
    assert p.rung_calls[p.contract.rungs[1].program] == 2  # the big graph, the hub: alone
    assert (p.contract.max_nodes, p.contract.max_edges) == (20, 40)
    fac.MODEL.eval()  # export restores the wrapper's mode (training), the model's with it
    with torch.no_grad():
        want = [fac.MODEL(b.x, b.edge_index, b.edge_attr, b.batch)
                for b in (Batch.from_data_list([d]) for d in request)]
    assert len(preds) == len(request)
    for got, w in zip(preds, want):
        torch.testing.assert_close(torch.as_tensor(got).reshape(w.shape), w, atol=1e-4, rtol=1e-4)


def test_export_ladder_flags_are_checked_before_the_model_loads(here, capsys):
    assert main(["export", "fac:make", "m.onnx", "--max-nodes", "30"]) == 2
    assert "add --ladder" in capsys.readouterr().err
    assert main(["export", "fac:make", "m.pt2", "--ladder", "--max-edges", "0"]) == 2
    assert "--max-edges 0" in capsys.readouterr().err
    assert not (here / "m.onnx").exists() and not (here / "m.pt2").exists()


def test_export_ladder_flags_reach_export_for_pt2(here, capsys, monkeypatch):
    """pt2 (an AOTInductor compile a rung, not run here): the flags become
    ``export(..., ladder=True, max_nodes=, max_edges=)`` and the rungs are printed."""
    from graph_adapter.app import export_cmd
    from graph_adapter.serve import Contract, OutputField, Rung

    seen = {}

    def fake_export(wrapped, source, path, format, example=None, **kw):
        seen.update(kw, format=format)
        open(path, "wb").close()
        return Contract("pt2", 82, 150, 2, (), (OutputField("output", "graph", "float32", (2, 1)),),
                        verified_max_abs_diff=0.0, threads=1,
                        rungs=(Rung(8, 12, 2, "rung0"), Rung(82, 150, 2, "model")))

    monkeypatch.setattr(export_cmd, "export", fake_export)
    assert main(["export", "fac:make", "m.pt2", "--ladder", "--max-nodes", "80",
                 "--max-edges", "150", "--threads", "1"]) == 0
    assert seen == {"format": "pt2", "ladder": True, "max_nodes": 80, "max_edges": 150,
                    "threads": 1}
    out = capsys.readouterr().out
    assert "rungs (one program each): nodes=8 edges=12 graphs=2; nodes=82 edges=150" in out
    seen.clear()
    assert main(["export", "fac:make", "m.pt2", "--ladder"]) == 0
    assert seen["ladder"] is True and seen["max_nodes"] is None and seen["max_edges"] is None
