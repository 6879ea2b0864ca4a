"""SIGTERM drains ``python -m graph_adapter.serve`` (``serve_main``, in a process of its
own, a stand-in predictor behind it): the requests in flight at the signal are answered
(``Connection: close``), requests after it, on new connections and on a keep-alive one
opened before, are answered 503 in JSON with ``Connection: close`` (none cut), ``/ready``
says 503 and ``/health`` stays 200 meanwhile, and the process exits 0 once the last
answer is written.
"""
import http.client
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from serve._http import GRAPH, post, request, until

pytest.importorskip("uvicorn", reason="the serve extra (starlette, uvicorn)")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HELD = {"x": [[100.0, 0.0]]}  # a graph the stand-in holds until the gate file exists

_SCRIPT = textwrap.dedent("""
    import os, sys, time

    class Blocker:  # the HTTP server needs neither torch nor PyG (and starts in a second)
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "torch_geometric"):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")

    sys.meta_path.insert(0, Blocker())
    sys.path.insert(0, os.path.join(sys.argv[1], "tests"))
    from serve._http import Summer
    from graph_adapter.serve import server

    gate = sys.argv[2]

    class Held(Summer):
        def predict(self, graphs):
            if any(float(g["x"][0][0]) == 100.0 for g in graphs):
                while not os.path.exists(gate):
                    time.sleep(0.01)
            return super().predict(graphs)

    server._load_predictor = lambda *a: Held()
    sys.exit(server.serve_main(["stand-in.onnx", "--port", "0", "--max-delay-ms", "0",
                                "--drain-s", "0.2"], prog="t"))
""")


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM (POSIX)")
def test_sigterm_answers_requests_in_flight_refuses_new_ones_and_cuts_none(tmp_path):
    gate = str(tmp_path / "open")
    proc = subprocess.Popen([sys.executable, "-c", _SCRIPT, ROOT, gate], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        line = proc.stdout.readline()
        assert "http://127.0.0.1:" in line, line
        port = int(line.split("http://127.0.0.1:")[1].split(":")[0])
        kept = http.client.HTTPConnection("127.0.0.1", port, timeout=30)  # keep-alive
        kept.request("GET", "/health")
        assert kept.getresponse().read() and kept.sock is not None
        held = []
        threads = [threading.Thread(target=lambda: held.append(post(port, {"graphs": [HELD]})))
                   for _ in range(3)]
        for t in threads:
            t.start()
        assert until(lambda: request(port)[2]["in_flight"] == 3)
        proc.send_signal(signal.SIGTERM)
        assert until(lambda: request(port, "GET", "/ready")[0] == 503)
        status, headers, doc = post(port, {"graphs": [GRAPH]})  # a new connection
        assert status == 503 and doc["error"] == "ServerStoppingError", doc
        assert headers["connection"] == "close" and headers["retry-after"] == "1"
        kept.request("POST", "/predict", json.dumps({"graphs": [GRAPH]}),
                     {"Content-Type": "application/json"})  # the one opened before
        r = kept.getresponse()
        assert r.status == 503 and r.getheader("connection") == "close"
        assert json.loads(r.read())["error"] == "ServerStoppingError"
        status, _, doc = request(port, "GET", "/health")
        assert status == 200 and doc["status"] == "stopping"
        open(gate, "w").close()
        for t in threads:
            t.join(30)
        assert proc.wait(30) == 0
        assert [(s, h["connection"], d) for s, h, d in held] == \
            [(200, "close", {"predictions": [[100.0]]})] * 3  # none cut
        with pytest.raises(OSError):
            request(port, timeout=2)
    finally:
        proc.kill()
        proc.wait(30)
