"""A load test with ``wrk`` (Debian's package) against a server on 127.0.0.1, bounded in
time (CI's extended step): ``benchmarks/serve_load.lua`` checks every answer against the
request it belongs to (matched by the ``X-Request-Id`` the server echoes). At 32
connections every answer is a right 200 and no socket errs; with ``max_queue`` 4 at 64
connections the server sheds load: every answer is a right 200 or a 503, and the 200s go
on."""
import json
import os
import shutil
import subprocess

import pytest

from graph_adapter.serve import Limits, PredictServer

from serve._http import Summer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "serve_load.lua")

pytestmark = [pytest.mark.extended,
              pytest.mark.skipif(shutil.which("wrk") is None,
                                 reason="wrk is not installed (apt-get install wrk)")]


def _wrk(url, connections, seconds):
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--timeout",
                          "10s", "-s", SCRIPT, url], capture_output=True, text=True,
                         timeout=seconds + 60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("connections,max_queue", [(32, 1024), (64, 4)])
def test_wrk_gets_only_right_answers(connections, max_queue):
    pytest.importorskip("uvicorn", reason="the serve extra (starlette, uvicorn)")
    s = PredictServer(Summer(), port=0, max_delay_ms=1,
                      limits=Limits(max_queue=max_queue, drain_s=0)).start()
    try:
        got = _wrk(s.url, connections, 8)
    finally:
        s.close()
    assert got["wrong"] == 0, got
    assert got["ok"] > 100 and got["ok"] + got["not_200"] == got["requests"], got
    errors = dict(got["errors"], status=0)  # (a 503 counts as a status error in wrk)
    assert not any(errors.values()), got
    if max_queue > connections:
        assert got["not_200"] == 0, got
    else:  # load shed: each refusal a 503 counted by the server
        assert got["not_200"] == got["errors"]["status"]
        assert s.counters["overloaded"] >= got["not_200"] > 0, got
