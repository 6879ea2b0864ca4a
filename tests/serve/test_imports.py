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


# ---------------------------------------------------------------------------------------
# Where torch and PyG ARE installed (this venv), the serving entry points still import
# neither: ``graph_adapter/__init__.py`` resolves its names lazily. The time and memory a
# process takes are printed (``pytest -s``) for the record, never asserted on.
_MEASURE = textwrap.dedent("""
    import json, resource, runpy, sys, time
    t0 = time.perf_counter()
    {body}
    heavy = sorted({{m.split(".")[0] for m in sys.modules}} & {{"torch", "torch_geometric"}})
    try:  # this process's peak (ru_maxrss would carry the forking pytest's over exec)
        peak = [int(line.split()[1]) for line in open("/proc/self/status")
                if line.startswith("VmHWM:")][0] / 1024
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({{"heavy": heavy, "seconds": time.perf_counter() - t0,
                      "max_rss_mb": peak}}))
""")


def _measure(body, *args):
    import json

    code = _MEASURE.format(body=textwrap.dedent(body).strip())
    import time

    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    got["process_seconds"] = time.perf_counter() - start  # the interpreter's start too
    return got


def _tiny_onnx_artifact(path):
    """An ONNX model with a graph_adapter contract, made without torch: ``output = x`` on
    a budget of 8 nodes (enough for the runtime to load, pack and split a request)."""
    import onnx
    from onnx import TensorProto, helper

    from graph_adapter.serve import ONNX_METADATA_KEY, Contract, InputField, OutputField

    contract = Contract(format="onnx", nodes=8, edges=5, graphs=3,
                        inputs=(InputField("x", "feature", "node", "float32", (None, 2),
                                           finite=True),),
                        outputs=(OutputField("output", "node", "float32", (8, 2)),),
                        onnx_input_names=("x",), onnx_output_names=("out",))
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["out"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 2])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [8, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    helper.set_model_props(model, {ONNX_METADATA_KEY: contract.to_json()})
    onnx.save(model, path)


def test_serving_an_onnx_artifact_imports_neither_torch_nor_pyg_where_installed(tmp_path):
    import importlib.util

    assert importlib.util.find_spec("torch_geometric") is not None  # installed here
    help_run = _measure("""
        sys.argv = ["graph_adapter.serve", "--help"]
        try:
            runpy.run_module("graph_adapter.serve", run_name="__main__")
        except SystemExit as e:
            assert not e.code, e.code
    """)
    path = str(tmp_path / "tiny.onnx")
    _tiny_onnx_artifact(path)
    load_run = _measure("""
        import numpy as np
        from graph_adapter import serve
        p = serve.load(sys.argv[1], threads=1)
        x = np.arange(6, dtype=np.float32).reshape(3, 2)
        (pred,) = p.predict([{"x": x}])
        assert (pred == x).all()
    """, path)
    import_all = _measure("""
        import graph_adapter as ga
        names = list(ga.__all__)
        assert len(names) == len(set(names)) > 50, names
        assert set(names) <= set(dir(ga)) and "serve" in dir(ga)
        assert "torch_geometric" not in sys.modules  # nothing read yet
        assert ga.contract.PTR  # a stage as an attribute (this one needs no torch)
        try:
            ga.no_such_stage
        except AttributeError:
            pass
        else:
            raise AssertionError("ga.no_such_stage")
        from graph_adapter import *  # noqa: F403 - every name, imported on the way
        missing = [n for n in names if n not in globals()]
        assert not missing, missing
        assert ga.PYG_IMPORT_ERROR is None and ga.batching.Budget is Budget
        from graph_adapter.backends.tuner import active_tuner
        assert type(active_tuner()).__name__ == "InductorTuner"
    """)
    for name, run in (("serve --help", help_run), ("load + predict .onnx", load_run)):
        print(f"{name}: {run['seconds']:.2f} s ({run['process_seconds']:.2f} s the process), "
              f"max RSS {run['max_rss_mb']:.0f} MB")
        assert run["heavy"] == [], (name, run)
    print(f"every training name read: {import_all['seconds']:.2f} s "
          f"({import_all['process_seconds']:.2f} s the process), "
          f"max RSS {import_all['max_rss_mb']:.0f} MB")
    assert import_all["heavy"] == ["torch", "torch_geometric"]


def test_importing_the_compile_core_alone_still_registers_the_tuning_wing():
    out = _run(textwrap.dedent("""
        from graph_adapter.backends import compile
        from graph_adapter.backends.tuner import active_tuner
        print(type(active_tuner()).__name__)
    """), [])
    assert out.strip() == "InductorTuner"
