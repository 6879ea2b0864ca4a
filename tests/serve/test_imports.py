"""``graph_adapter.serve`` needs no PyG (and its ONNX path no torch); ``import graph_adapter``
works without PyG too, its training names then raising an ImportError that names PyG."""
import ast
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVE = os.path.join(ROOT, "graph_adapter", "serve")
ALLOWED = {"torch", "numpy", "onnxruntime", "orjson", "starlette", "uvicorn"}  # and the standard
# library (orjson: optional; starlette and uvicorn: the HTTP server, the serve extra)

BLOCKER = textwrap.dedent("""
    import sys
    BLOCKED = {blocked!r}

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)")
            return None

    sys.meta_path.insert(0, Blocker())
""")


def _run(code, blocked):
    out = subprocess.run([sys.executable, "-c", BLOCKER.format(blocked=set(blocked)) + code],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_serve_modules_import_only_the_runtime_libraries():
    bad = []
    for f in sorted(os.listdir(SERVE)):
        if not f.endswith(".py"):
            continue
        for node in ast.walk(ast.parse(open(os.path.join(SERVE, f)).read())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module]
            for n in names:
                top = n.split(".")[0]
                if top not in ALLOWED and top not in sys.stdlib_module_names:
                    bad.append(f"serve/{f}: import {n}")
    assert not bad, bad


def test_the_package_and_serve_import_without_pyg():
    out = _run(textwrap.dedent("""
        import graph_adapter as ga
        from graph_adapter import serve
        from graph_adapter import *  # noqa: F403 - nothing that would raise
        assert ga.__all__ == [] and ga.PYG_IMPORT_ERROR is not None
        assert ga.serve is serve and callable(serve.load)
        try:
            ga.ipu_wrap
        except ImportError as e:
            assert "graph_adapter.ipu_wrap needs torch_geometric" in str(e), e
            assert "graph_adapter.serve" in str(e)
        else:
            raise AssertionError("ga.ipu_wrap without PyG")
        try:
            ga.no_such_name
        except AttributeError:
            pass
        print(sorted(m for m in sys.modules if m.startswith("torch_geometric")))
    """), ["torch_geometric"])
    assert out.strip() == "[]"


def test_serve_imports_without_torch_for_onnx_artifacts():
    out = _run(textwrap.dedent("""
        from graph_adapter import serve
        from graph_adapter.serve.ops import NumpyOps
        NumpyOps()
        print(sorted({m.split(".")[0] for m in sys.modules} & {"torch", "torch_geometric"}))
    """), ["torch", "torch_geometric"])
    assert out.strip() == "[]"


def test_with_pyg_every_public_name_is_there():
    import graph_adapter as ga

    assert ga.PYG_IMPORT_ERROR is None
    assert ga.export.__module__ == "graph_adapter.exporter.api"
    assert all(hasattr(ga, n) for n in ga.__all__) and "export" in ga.__all__
