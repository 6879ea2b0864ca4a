"""Export without the tuning stage (``graph_adapter/tuning`` deleted, as a package built
without it): ``graph_adapter.export`` still writes artifacts, checked against eager as
always; the exported program is just not rewritten (slower, the same results within the
format's tolerance)."""
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("onnxruntime", reason="the serve extra (onnx, onnxscript, onnxruntime)")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# ``None`` in sys.modules: ``import graph_adapter.tuning`` raises ModuleNotFoundError
# naming it, as it would with the folder deleted
CODE = textwrap.dedent("""
    import sys
    sys.modules["graph_adapter.tuning"] = None
    sys.path.insert(0, "tests")
    import graph_adapter as ga
    from graph_adapter.exporter import trace
    from graph_adapter.app.models import build_model
    from graph_adapter.batching import Budget
    from _padding import molecule_like_graphs

    assert trace.rewrite_exported is None
    assert not any(m.startswith("graph_adapter.tuning") for m in sys.modules if sys.modules[m])
    graphs = molecule_like_graphs(12, seed=3)
    wrapped = ga.ipu_wrap(build_model("gine", hidden=8, layers=1)).eval()
    c = ga.export(wrapped, Budget.fit(graphs, 4), sys.argv[1], format="onnx", example=graphs[:4])
    print("verified", c.verified_max_abs_diff)
""")


@pytest.mark.extended  # a fresh process exporting a program (~7 s): CI's second step
def test_export_runs_without_the_tuning_stage(tmp_path):
    path = str(tmp_path / "m.onnx")
    out = subprocess.run([sys.executable, "-c", CODE, path], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert os.path.exists(path) and float(out.stdout.split("verified")[-1]) <= 1e-4
