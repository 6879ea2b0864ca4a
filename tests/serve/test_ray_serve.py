"""The server's ASGI app on Ray Serve (``graph_adapter.serve.engines.ray_serve``).

Main suite: the module imports no Ray until called and ``import graph_adapter.serve`` does
not import it; a missing artifact and a missing Ray are named errors. Extended step: a
local Ray instance (2 CPUs, no dashboard), two replicas of an ``.onnx`` artifact behind
Ray's proxy on 127.0.0.1; every answer over HTTP equals in-process ``Predictor.predict``'s
on the same graphs, a refused graph gets the same named error, the limits given reach the
replicas, and both replicas run.
"""
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from graph_adapter.serve import RuntimeMissingError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEYS = ("x", "edge_index", "edge_attr")


def test_importing_serve_or_this_module_imports_no_ray():
    code = textwrap.dedent("""
        import sys

        class Blocker:  # torch and PyG as if not installed: a quick import, the ONNX path's
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("torch", "torch_geometric"):
                    raise ModuleNotFoundError(name)

        sys.meta_path.insert(0, Blocker())
        import graph_adapter.serve
        before = sorted(m for m in sys.modules if m == "ray" or m.endswith("ray_serve"))
        import graph_adapter.serve.engines.ray_serve
        print(before, "ray" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["[]", "False"]


def test_a_missing_artifact_or_a_missing_ray_is_named(tmp_path, monkeypatch):
    from graph_adapter.serve.engines import ray_serve

    with pytest.raises(FileNotFoundError, match="no artifact at .*nothing.onnx"):
        ray_serve.deployment(tmp_path / "nothing.onnx")
    art = tmp_path / "m.onnx"
    art.write_bytes(b"")
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails as if not installed
    with pytest.raises(RuntimeMissingError, match=r"graph_adapter\[ray\]"):
        ray_serve.deployment(art)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(port, doc):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", "/predict", json.dumps(doc), {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


@pytest.fixture(scope="module")
def ray_app(tmp_path_factory):
    pytest.importorskip("onnxruntime", reason="the serve extra (onnx, onnxscript, onnxruntime)")
    try:
        import ray.serve  # noqa: F401
    except ImportError:
        if os.environ.get("GRAPH_ADAPTER_REQUIRE_RAY") == "1":  # .ci/run's Ray step
            pytest.fail("ray[serve] is not installed under GRAPH_ADAPTER_REQUIRE_RAY=1",
                        pytrace=False)
        pytest.skip("ray[serve] is not installed (the ray extra)")
    import ray
    import torch
    from ray import serve as ray_serve

    from _padding import molecule_like_graphs
    from graph_adapter.app.models import build_model
    from graph_adapter.batching import Budget, FixedSizeLoader
    from graph_adapter.exporter import export
    from graph_adapter.nn import ipu_wrap
    from graph_adapter.serve.engines.ray_serve import deployment

    graphs = molecule_like_graphs(120, seed=3)
    torch.manual_seed(0)
    model = build_model("gine", hidden=8, layers=1, y_mean=1.0, y_std=2.0).eval()
    path = str(tmp_path_factory.mktemp("ray") / "m.onnx")
    export(ipu_wrap(model), FixedSizeLoader(graphs, Budget.fit(graphs, 8)), path,
           format="onnx", threads=1)
    port = _free_port()
    # the replicas' processes import this checkout, as the test does
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": ROOT}})
    try:
        ray_serve.start(http_options={"host": "127.0.0.1", "port": port})
        from graph_adapter.serve.limits import Limits

        # limits cross to the replicas as plain data: a request past max_graphs is a 413
        ray_serve.run(deployment(path, replicas=2, threads=1, limits=Limits(max_graphs=25)),
                      route_prefix="/")
        yield port, path, graphs
    finally:
        ray_serve.shutdown()
        ray.shutdown()


@pytest.mark.extended  # starts Ray and two replicas (~20-40 s): CI's second step
def test_ray_serve_replicas_answer_as_in_process_predict(ray_app):
    from graph_adapter import serve

    port, path, graphs = ray_app
    local = serve.load(path, threads=1)
    rng = random.Random(0)
    for _ in range(24):
        gs = [graphs[rng.randrange(len(graphs))] for _ in range(rng.randint(1, 20))]
        status, doc = _post(port, {"graphs": [{k: g[k].tolist() for k in KEYS} for g in gs]})
        assert status == 200, doc
        want = local.predict([{k: g[k].numpy() for k in KEYS} for g in gs])
        got = np.asarray(doc["predictions"], dtype=np.float32)
        np.testing.assert_array_equal(got, np.stack(want))
    # a refused graph: the same named error as in-process predict, by graph and key
    bad = {k: graphs[0][k].tolist() for k in ("x", "edge_index")}
    status, doc = _post(port, {"graphs": [{k: graphs[1][k].tolist() for k in KEYS}, bad]})
    with pytest.raises(serve.MissingFeatureError) as e:
        local.predict([{k: graphs[1][k].numpy() for k in KEYS},
                       {k: graphs[0][k].numpy() for k in ("x", "edge_index")}])
    assert status == 422 and doc["error"] == "MissingFeatureError"
    assert (doc["graph"], doc["key"]) == (e.value.graph, e.value.key) == (1, "edge_attr")
    status, doc = _post(port, {"graphs": [{k: graphs[0][k].tolist() for k in KEYS}] * 26})
    assert status == 413 and doc["error"] == "TooLargeError", doc


@pytest.mark.extended  # shares the fixture above
def test_the_deployment_runs_the_replicas_it_was_given(ray_app):
    """Two replicas, each loading the artifact in its own process, both running."""
    from ray import serve as ray_serve

    status = ray_serve.status().applications["default"].deployments["graph_adapter"]
    assert status.replica_states.get("RUNNING") == 2, status
