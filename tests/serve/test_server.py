"""The HTTP server of an artifact (``graph_adapter.serve.PredictServer``), on 127.0.0.1 only.

One small ``.onnx`` artifact for the module (the demo's model, exported in ~3 s): 8
concurrent clients, every answer equal to the local ``predict`` of the same request;
malformed JSON, a missing feature, a wrong dtype, a graph over the budget (4xx with the
named error's text); clients that disconnect or stall mid-request; a clean shutdown; a
program's child killed (``/ready`` 503 until it is up again, ``/health`` live meanwhile).
Each runs with the program in the server's process and in a child process of its own
(``graph_adapter.serve.processes.program``: the same answers and errors, and the child ends with
the server, killed or stopped).
The batcher's merging is also checked on a stand-in predictor (hypothesis: any requests,
each answered with its own graphs' predictions, in order). A ``.pt2`` ladder (two
AOTInductor compiles) runs the same load test in CI's extended step.
"""
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graph_adapter import serve
from graph_adapter.serve import (DynamicBatcher, EdgeIndexError, GraphInputError, Limits,
                                 MissingFeatureError, PredictServer, QueueFullError)
from graph_adapter.serve import server as serve_server
from graph_adapter.serve.processes.program import ProcessPredictor, WorkerError

KEYS = ("x", "edge_index", "edge_attr")
TIME_LIMIT = 120.0  # seconds a load test may take before it fails (it stops by itself)
QUICK = Limits(drain_s=0)  # (a test's server stops at once once its requests are answered)


def _json_graph(d):
    return {k: d[k].tolist() for k in KEYS}


def _post(port, doc=None, raw=None, path="/predict"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", path, raw if raw is not None else json.dumps(doc),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def _get(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


@pytest.fixture(scope="module")
def onnx_artifact(tmp_path_factory):
    pytest.importorskip("onnxruntime", reason="the serve extra (onnx, onnxscript, onnxruntime)")
    import torch

    from graph_adapter.app.models import build_model
    from graph_adapter.exporter import export
    from graph_adapter.batching import Budget, FixedSizeLoader
    from graph_adapter.nn import ipu_wrap

    from _padding import molecule_like_graphs

    graphs = molecule_like_graphs(200, seed=11)
    torch.manual_seed(0)
    model = build_model("gine", hidden=8, layers=1, y_mean=1.0, y_std=2.0).eval()
    path = str(tmp_path_factory.mktemp("server") / "m.onnx")
    contract = export(ipu_wrap(model), FixedSizeLoader(graphs, Budget.fit(graphs, 8)), path,
                      format="onnx", threads=1)
    return path, contract, graphs


@pytest.fixture(scope="module", params=["server", "child"])
def server(onnx_artifact, request):
    """The server of the module's artifact, its program in the server's process or in a
    child process of its own (``--program-in``: every test below runs on both)."""
    path, _, _ = onnx_artifact
    predictor = serve_server._load_predictor(path, 1, request.param)
    assert isinstance(predictor, ProcessPredictor) == (request.param == "child")
    try:
        with PredictServer(predictor, port=0, max_delay_ms=5, limits=QUICK).start() as s:
            yield s
    finally:
        if request.param == "child":
            predictor.close()
            assert predictor.process.returncode == 0


def _load_test(server, path, graphs, clients=8, per_client=40, max_graphs=12, seed=0):
    """``clients`` threads, each posting ``per_client`` requests of 1..``max_graphs``
    distinct graphs over one keep-alive connection; every answer is compared with a
    local predictor's on the same request. Returns the merged calls' count."""
    rng = random.Random(seed)
    plans = [[rng.sample(range(len(graphs)), rng.randint(1, max_graphs))
              for _ in range(per_client)] for _ in range(clients)]
    local = serve.load(path, threads=1)  # the reference (the server's own runs elsewhere)
    want = {i: np.asarray(p, dtype=np.float64) for i, p in
            enumerate(local.predict([{k: d[k].numpy() for k in KEYS} for d in graphs]))}
    payload = [_json_graph(d) for d in graphs]
    answers, errors = [[] for _ in range(clients)], []
    deadline = time.monotonic() + TIME_LIMIT
    before = dict(server.batcher.stats)

    def client(c):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        try:
            for picks in plans[c]:
                if time.monotonic() > deadline:
                    raise TimeoutError("the load test ran over its time limit")
                conn.request("POST", "/predict",
                             json.dumps({"graphs": [payload[i] for i in picks]}),
                             {"Content-Type": "application/json"})
                r = conn.getresponse()
                answers[c].append((r.status, json.loads(r.read())))
        except Exception as e:  # noqa: BLE001 - reported by the test thread
            errors.append(repr(e))
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()) + 5)
    assert not [t for t in threads if t.is_alive()] and not errors, errors
    for c in range(clients):
        assert len(answers[c]) == per_client  # nothing lost
        for picks, (status, doc) in zip(plans[c], answers[c]):
            assert status == 200, doc
            got = doc["predictions"]
            assert len(got) == len(picks)  # none lost or duplicated
            for i, g in zip(picks, got):  # each its own graph's, in order
                np.testing.assert_allclose(np.asarray(g), want[i], rtol=1e-5, atol=1e-5)
    stats = server.batcher.stats
    assert stats["requests"] - before["requests"] == clients * per_client
    assert stats["graphs"] - before["graphs"] == sum(len(p) for pl in plans for p in pl)
    return stats["batches"] - before["batches"]


def test_eight_concurrent_clients_each_get_their_own_answers(server, onnx_artifact):
    path, _, graphs = onnx_artifact
    batches = _load_test(server, path, graphs)
    assert batches < 8 * 40  # concurrent requests were merged into fewer calls
    status, health = _get(server.port, "/health")
    assert status == 200 and health["status"] == "ok" and health["format"] == "onnx"
    child = isinstance(server.predictor, ProcessPredictor)
    assert (health["program_pid"] != os.getpid()) == child
    assert health["calls"] == server.predictor.calls >= batches


def test_keep_alive_round_trips_do_not_wait_for_delayed_acks(server):
    # the answer's headers and body are two writes: with Nagle's algorithm on, the body
    # waited for the client's delayed ACK, 40 ms a round trip (0.1 ms without)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    took = []
    for _ in range(21):
        t = time.perf_counter()
        conn.request("GET", "/health")
        conn.getresponse().read()
        took.append(time.perf_counter() - t)
    conn.close()
    assert sorted(took)[10] < 0.02, sorted(took)


def test_contract_endpoint_is_the_artifacts_contract(server, onnx_artifact):
    status, doc = _get(server.port, "/contract")
    assert status == 200
    assert serve.Contract.from_json(json.dumps(doc)) == onnx_artifact[1]
    assert _get(server.port, "/nope")[0] == 404


def test_malformed_json_is_a_400_and_the_server_goes_on(server, onnx_artifact):
    graphs = onnx_artifact[2]
    status, doc = _post(server.port, raw='{"graphs": [{"x": [[1, 2]')
    assert status == 400 and doc["error"] == "PayloadError" and "not valid JSON" in doc["message"]
    status, doc = _post(server.port, {"molecules": []})
    assert status == 400 and '{"graphs": [graph, ...]}' in doc["message"]
    status, doc = _post(server.port, {"graphs": [_json_graph(graphs[0]), 7]})
    assert status == 400 and "graph 1 is a JSON int" in doc["message"]
    assert _post(server.port, {"graphs": [_json_graph(graphs[0])]})[0] == 200


def test_a_graph_without_edges_is_sent_as_empty_lists(server, onnx_artifact):
    path = onnx_artifact[0]
    g = {"x": [[1, 0, 1, 0, 0, 1, 0, 0, 1]], "edge_index": [[], []], "edge_attr": []}
    status, doc = _post(server.port, [g])
    want = serve.load(path, threads=1).predict([{"x": np.asarray(g["x"]),
                                                  "edge_index": np.zeros((2, 0), np.int64),
                                                  "edge_attr": np.zeros((0, 3), np.int64)}])
    assert status == 200, doc
    np.testing.assert_allclose(doc["predictions"][0], want[0], rtol=1e-6, atol=1e-6)


def _npz(graphs):
    """An .npz request: each key's rows of every graph, concatenated, and the counts."""
    return {"num_nodes": np.array([d.num_nodes for d in graphs]),
            "num_edges": np.array([d.num_edges for d in graphs]),
            "x": np.concatenate([d.x.numpy() for d in graphs]),
            "edge_index": np.concatenate([d.edge_index.numpy() for d in graphs], axis=1),
            "edge_attr": np.concatenate([d.edge_attr.numpy() for d in graphs])}


def _post_npz(port, arrays):
    import io

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/predict", buf.getvalue(), {"Content-Type": serve.NPZ_TYPE})
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def test_an_npz_body_gives_the_json_bodys_answers_and_its_errors(server, onnx_artifact):
    graphs = onnx_artifact[2][:5]
    arrays = _npz(graphs)
    status, doc = _post_npz(server.port, arrays)
    assert status == 200 and len(doc["predictions"]) == 5
    assert doc == _post(server.port, [_json_graph(d) for d in graphs])[1]
    status, doc = _post_npz(server.port, {**arrays, "x": arrays["x"].astype(np.float32)})
    assert status == 422 and doc["error"] == "FeatureDtypeError" and doc["graph"] == 0
    status, doc = _post_npz(server.port, {**arrays, "x": np.array([{"a": 1}], dtype=object)})
    assert status == 400 and "not an .npz of plain arrays" in doc["message"]  # no pickle
    status, doc = _post_npz(server.port, {**arrays, "x": arrays["x"][1:]})
    assert status == 400 and "'x' has shape" in doc["message"]
    status, doc = _post_npz(server.port, {k: v for k, v in arrays.items() if k != "num_edges"})
    assert status == 400 and "'num_edges'" in doc["message"]
    status, doc = _post_npz(server.port, {k: v for k, v in arrays.items() if k != "edge_attr"})
    assert status == 422 and doc["error"] == "MissingFeatureError"


def _columnar(graphs, flat=True):
    """The columnar JSON request: the .npz request's arrays as (flat) lists."""
    arrays = _npz(graphs)
    return {"num_nodes": arrays.pop("num_nodes").tolist(),
            "num_edges": arrays.pop("num_edges").tolist(),
            "columns": {k: (v.ravel() if flat else v).tolist() for k, v in arrays.items()}}


def test_a_columnar_json_body_gives_the_per_graph_bodys_answers_and_its_errors(
        server, onnx_artifact):
    graphs = onnx_artifact[2][:6]
    want = _post(server.port, [_json_graph(d) for d in graphs])
    assert want[0] == 200 and len(want[1]["predictions"]) == 6
    assert _post(server.port, _columnar(graphs)) == want
    assert _post(server.port, _columnar(graphs, flat=False)) == want
    doc = _columnar(graphs)
    x = doc["columns"]["x"]
    at = 9 * (graphs[0].num_nodes + graphs[1].num_nodes)  # graph 2's first value
    status, err = _post(server.port, {**doc, "columns": {**doc["columns"],
                                                         "x": x[:at] + [0.5] + x[at + 1:]}})
    assert status == 422 and err["error"] == "FeatureDtypeError"
    assert (err["graph"], err["key"]) == (2, "x")
    status, err = _post(server.port, {**doc, "columns": {**doc["columns"], "x": x[:-9]}})
    assert status == 400 and err["error"] == "PayloadError" and "'x'" in err["message"]
    status, err = _post(server.port, {**doc, "num_nodes": doc["num_nodes"][:-1]})
    assert status == 400 and err["error"] == "PayloadError"
    cols = {k: v for k, v in doc["columns"].items() if k != "edge_attr"}
    status, err = _post(server.port, {**doc, "columns": cols})
    assert status == 422 and err["error"] == "MissingFeatureError" and err["graph"] == 0


def _until(check, within=30.0):
    """Whether ``check()`` came true within ``within`` seconds (polled)."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _local_error(path, request):
    with pytest.raises(GraphInputError) as e:
        serve.load(path, threads=1).predict(request)
    return e.value


def test_missing_feature_is_a_422_with_the_named_errors_text(server, onnx_artifact):
    path, _, graphs = onnx_artifact
    request = [_json_graph(graphs[0]), {k: v for k, v in _json_graph(graphs[1]).items()
                                        if k != "edge_attr"}]
    status, doc = _post(server.port, {"graphs": request})
    want = _local_error(path, [{k: np.asarray(v) for k, v in g.items()} for g in request])
    assert isinstance(want, MissingFeatureError)
    assert status == 422 and doc.pop("request_id")
    assert doc == {"error": "MissingFeatureError", "message": str(want), "graph": 1,
                   "key": "edge_attr"}


def test_wrong_dtype_and_shape_are_422_never_cast(server, onnx_artifact):
    g = _json_graph(onnx_artifact[2][0])
    status, doc = _post(server.port, [{**g, "x": [[v + 0.5 for v in row] for row in g["x"]]}])
    assert status == 422 and doc["error"] == "FeatureDtypeError" and doc["key"] == "x"
    assert "int64" in doc["message"]  # a fraction is never truncated to an integer
    status, doc = _post(server.port, [{**g, "x": [row[:-1] for row in g["x"]]}])
    assert status == 422 and doc["error"] == "FeatureShapeError"
    status, doc = _post(server.port, [{**g, "x": [g["x"][0], g["x"][0][:3]]}])  # ragged
    assert status == 422 and doc["error"] == "FeatureShapeError"
    m = len(g["edge_attr"])
    status, doc = _post(server.port, [{**g, "edge_index": [[0] * m, [99] + [0] * (m - 1)]}])
    assert status == 422 and doc["error"] == "EdgeIndexError", doc


def test_graph_over_the_budget_is_a_422_with_its_text(server, onnx_artifact):
    path, contract, graphs = onnx_artifact
    n = contract.max_graph_nodes + 1
    big = {"x": [[0] * 9] * n, "edge_index": [[0], [1]], "edge_attr": [[0, 0, 0]]}
    request = [_json_graph(graphs[0]), big]
    status, doc = _post(server.port, {"graphs": request})
    want = _local_error(path, [{k: np.asarray(v) for k, v in g.items()} for g in request])
    assert status == 422 and doc["error"] == "GraphTooLargeError"
    assert doc["message"] == str(want) and doc["graph"] == 1


def test_clients_that_disconnect_or_stall_mid_request_cost_only_themselves(server,
                                                                          onnx_artifact):
    body = json.dumps({"graphs": [_json_graph(onnx_artifact[2][0])]}).encode()
    head = (f"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    before = server.counters["disconnected"]
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    s.sendall(head + body[:len(body) // 2])  # half the body, then gone
    s.close()
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    s.sendall(head + body)  # the whole request, gone before its answer
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()  # (a reset: the server's write fails)
    stalled = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    stalled.sendall(head + body[:10])  # and one that stays, silent
    try:
        for _ in range(3):  # the others are served meanwhile
            status, doc = _post(server.port, {"graphs": [_json_graph(onnx_artifact[2][1])]})
            assert status == 200 and len(doc["predictions"]) == 1
        deadline = time.monotonic() + 10
        while server.counters["disconnected"] < before + 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.counters["disconnected"] >= before + 1
        assert _get(server.port, "/health")[1]["status"] == "ok"
    finally:
        stalled.close()


def test_shutdown_answers_what_is_queued_and_releases_the_port(onnx_artifact):
    path, _, graphs = onnx_artifact
    s = PredictServer(serve.load(path, threads=1), port=0, limits=QUICK).start()
    port = s.port
    assert _post(port, [_json_graph(graphs[0])])[0] == 200
    t = time.monotonic()
    s.close()
    assert time.monotonic() - t < 10 and not s.batcher.worker.is_alive()
    with pytest.raises(QueueFullError, match="stopping"):
        s.batcher.submit([{}])
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_many_clients_connecting_at_once_are_all_queued_not_dropped(onnx_artifact):
    """32 connections opened while nothing accepts them (as when the accepting thread
    waits for the GIL) all complete at once: the standard library's backlog of 5 has
    the kernel drop the SYNs past it, and each such client waits 1 s to retry."""
    path, _, _ = onnx_artifact
    s = PredictServer(serve.load(path, threads=1), port=0)  # bound, not yet accepting
    socks = []
    try:
        for _ in range(32):
            socks.append(socket.create_connection(("127.0.0.1", s.port), timeout=0.5))
    finally:
        for c in socks:
            c.close()
        s.close()
    assert len(socks) == 32


def test_serve_main_runs_until_stopped(onnx_artifact, capsys):
    path, contract, graphs = onnx_artifact
    stop, up = threading.Event(), []
    rc = []
    t = threading.Thread(target=lambda: rc.append(serve.serve_main(
        [path, "--port", "0", "--threads", "1", "--max-delay-ms", "1", "--drain-s", "0"], stop=stop,
        started=up.append)), daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while not up and t.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert up, capsys.readouterr()
    assert _get(up[0].port, "/contract")[1]["nodes"] == contract.nodes
    assert _post(up[0].port, [_json_graph(graphs[0])])[0] == 200
    stop.set()
    t.join(15)
    assert rc == [0] and "POST /predict" in capsys.readouterr().out
    rc, up = [], []  # its program in a child process: stopped with the server
    t = threading.Thread(target=lambda: rc.append(serve.serve_main(
        [path, "--port", "0", "--threads", "1", "--program-in", "child", "--drain-s", "0"],
        stop=stop, started=up.append)), daemon=True)
    stop.clear()
    t.start()
    deadline = time.monotonic() + 60
    while not up and t.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert up and isinstance(up[0].predictor, ProcessPredictor), capsys.readouterr()
    assert _post(up[0].port, [_json_graph(graphs[0])])[0] == 200
    stop.set()
    t.join(15)
    assert rc == [0] and up[0].predictor.process.returncode == 0
    assert serve.serve_main(["/no/such/model.onnx"]) == 2
    assert "no artifact at" in capsys.readouterr().err


# -- the program in a child process of its own (graph_adapter.serve.processes.program) ---------------

def test_the_child_process_names_each_error_as_in_process_predict(onnx_artifact):
    path, contract, graphs = onnx_artifact
    local = serve.load(path, threads=1)
    reqs = [{k: d[k].numpy() for k in KEYS} for d in graphs[:5]]
    n = contract.max_graph_nodes + 1
    big = {"x": np.zeros((n, 9), np.int64), "edge_index": np.zeros((2, 1), np.int64),
           "edge_attr": np.zeros((1, 3), np.int64)}
    bad = {  # the request's graph 2, each way: checked in the server's process or the child's
        "missing": {"x": reqs[2]["x"]},
        "dtype": {**reqs[2], "x": reqs[2]["x"].astype(np.float32)},
        "shape": {**reqs[2], "edge_attr": reqs[2]["edge_attr"][:, :1]},
        "index": {**reqs[2], "edge_index": reqs[2]["edge_index"] + 50},
        "too large": big}
    with ProcessPredictor(path, threads=1) as p:
        assert p.pid != os.getpid() and p.predict([]) == []
        for what, g in bad.items():
            req = reqs[:2] + [g] + reqs[3:]
            with pytest.raises(GraphInputError) as want:
                local.predict(req)
            with pytest.raises(GraphInputError) as got:
                p.predict(req)
            assert type(got.value) is type(want.value), what
            assert str(got.value) == str(want.value), what
            assert (got.value.graph, got.value.key) == (want.value.graph, want.value.key) == (
                2, want.value.key), what
        for a, b in zip(p.predict(reqs), local.predict(reqs)):  # and it goes on, equal
            assert a.dtype == b.dtype and np.array_equal(a, b)
        assert p.calls == local.calls
    assert p.process.returncode == 0
    with pytest.raises(WorkerError, match="closed"):
        p.predict(reqs)


@pytest.mark.parametrize("pipe_bytes", [1 << 20, 1])
def test_requests_sent_ahead_are_answered_in_any_order_of_receiving(onnx_artifact, pipe_bytes,
                                                                   monkeypatch):
    """``send`` / ``receive`` (the batcher keeps one request in flight beside the one the
    child runs): each ticket gets its own predictions, whichever is received first; with
    replies that would not fit the reply pipe (``pipe_bytes=1``) ``send`` reads the ones
    ahead first instead of both processes waiting for each other."""
    path, _, graphs = onnx_artifact
    reqs = [[{k: d[k].numpy() for k in KEYS} for d in graphs[i:i + 3]] for i in (0, 3, 6)]
    local = serve.load(path, threads=1)
    monkeypatch.setattr(ProcessPredictor, "reply_pipe_bytes", pipe_bytes)
    with ProcessPredictor(path, 1) as p:
        tickets = [p.send(r) for r in reqs]
        # (a reply that may not fit: each send first reads the reply ahead)
        assert p.sent_ahead == (2 if pipe_bytes > 1 else 0) and not p.can_send()
        for i in (2, 0, 1):
            for a, b in zip(p.receive(tickets[i]), local.predict(reqs[i])):
                np.testing.assert_array_equal(a, b)
        assert p.can_send()
        bad = [dict(g) for g in reqs[1]]
        bad[1]["edge_index"] = bad[1]["edge_index"].copy()
        bad[1]["edge_index"][0, 0] = 99  # outside graph 1: found where the child packs
        t1, t2 = p.send(reqs[0]), p.send(bad)
        with pytest.raises(EdgeIndexError) as e:  # an error comes back for its own ticket
            p.receive(t2)
        assert e.value.graph == 1
        assert len(p.receive(t1)) == 3


def test_a_merge_sent_ahead_with_a_bad_request_answers_each_request_its_own(onnx_artifact):
    """A program's process behind the batcher (merges sent ahead): a request whose graph
    only the child refuses (an index outside its graph) gets its own error, counted
    within it, and every other request of its merge its own predictions."""
    path, _, graphs = onnx_artifact
    local = serve.load(path, threads=1)
    reqs = [[{k: d[k].numpy() for k in KEYS} for d in graphs[i:i + 2]] for i in range(0, 16, 2)]
    bad = [dict(g) for g in reqs[3]]
    bad[1]["edge_index"] = bad[1]["edge_index"].copy()
    bad[1]["edge_index"][1, 0] = 99
    reqs[3] = bad
    with ProcessPredictor(path, 1) as p:
        b = DynamicBatcher(p, max_delay_s=0.2)
        out = [None] * len(reqs)

        def submit(i):
            try:
                out[i] = b.submit(p.check(reqs[i]), timeout=60)
            except GraphInputError as e:
                out[i] = e
        threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(reqs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        b.close()
    assert isinstance(out[3], EdgeIndexError) and out[3].graph == 1, out[3]
    for i, r in enumerate(reqs):
        if i != 3:
            for a, w in zip(out[i], local.predict(r)):
                np.testing.assert_array_equal(a, w)
    assert b.stats["requests"] == len(reqs) and b.stats["refused"] == 1


def test_a_killed_programs_child_is_started_again_and_answers(onnx_artifact):
    """A killed program process is started again (``/health`` says so, counting it), and
    the server answers as before; one that dies in a request's run fails that request
    alone (a 500 naming it), the next gets a new child."""
    path, _, graphs = onnx_artifact
    predictor = serve_server._load_predictor(path, 1, "child")
    body = {"graphs": [_json_graph(g) for g in graphs[:3]]}
    try:
        with PredictServer(predictor, port=0, max_delay_ms=0, limits=QUICK).start() as s:
            status, want = _post(s.port, body)
            assert status == 200
            first = predictor.pid
            predictor.process.kill()
            predictor.process.wait(10)
            # /ready says 503 until the new child is up; /health stays live meanwhile
            assert _get(s.port, "/health")[0] == 200
            assert _until(lambda: _get(s.port, "/ready")[0] == 200)
            status, doc = _get(s.port, "/health")
            assert status == 200 and doc["status"] == "ok", doc
            assert doc["program_restarts"] == 1 and doc["program_pid"] != first
            assert _post(s.port, body) == (200, want)
            # dead before its run, unseen: this request fails, the next is answered
            predictor.process.kill()
            predictor.process.wait(10)
            predictor.process.poll = lambda: None
            status, doc = _post(s.port, body)
            assert status == 500 and "starts it again" in doc["message"], doc
            assert _post(s.port, body) == (200, want)
            assert predictor.restarts == 2 and predictor.calls >= 3
    finally:
        predictor.close()


def test_health_is_a_503_once_the_programs_child_died_past_its_restarts(onnx_artifact):
    """A program process that keeps dying is started again at most MAX_RESTARTS times a
    window; past that /health answers 503 saying so (a probe restarts the server),
    /predict a 500 naming it; before, both looked healthy."""
    path, _, graphs = onnx_artifact
    predictor = serve_server._load_predictor(path, 1, "child")
    predictor.MAX_RESTARTS = 0
    try:
        with PredictServer(predictor, port=0, max_delay_ms=0, limits=QUICK).start() as s:
            assert _get(s.port, "/health")[0] == 200 and _get(s.port, "/ready")[0] == 200
            predictor.process.kill()
            predictor.process.wait(10)
            assert _until(lambda: _get(s.port, "/health")[0] == 503)
            status, doc = _get(s.port, "/ready")
            assert status == 503 and doc["status"].startswith("failed"), doc
            status, doc = _get(s.port, "/health")
            assert status == 503 and doc["status"].startswith("failed"), doc
            assert "exited with code" in doc["status"] and "restart" in doc["status"]
            status, doc = _post(s.port, {"graphs": [_json_graph(graphs[0])]})
            assert status == 500 and "restart the server" in doc["message"], doc
            assert predictor.restarts == 0
    finally:
        predictor.close()


def test_a_child_that_cannot_load_the_artifact_raises_its_error_and_ends(onnx_artifact,
                                                                         tmp_path):
    import zipfile

    with pytest.raises(FileNotFoundError, match="no artifact at"):
        ProcessPredictor(str(tmp_path / "missing.pt2"))
    bad = str(tmp_path / "no_program.pt2")  # a contract the server reads, no program
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr(f"m/extra/{serve.CONTRACT_FILE}", onnx_artifact[1].to_json())
    before = set(_workers())  # (a module fixture's server may hold one)
    with pytest.raises(WorkerError, match="the program's process failed"):
        ProcessPredictor(bad)
    assert set(_workers()) <= before, "the child that failed to load was left behind"


def _workers():
    """This process's children running ``graph_adapter.serve.processes.program`` (Linux)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if ppid == os.getpid() and b"graph_adapter.serve.processes.program" in cmd:
            out.append(int(pid))
    return out


def _state(pid):
    """A process's state letter (``"Z"``: exited, not yet reaped), ``None`` once gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _gone(pid, within=15.0):
    deadline = time.monotonic() + within
    while _state(pid) not in (None, "Z", "X") and time.monotonic() < deadline:
        time.sleep(0.05)
    return _state(pid) in (None, "Z", "X")


# killed: no cleanup of the server's runs, the child sees its pipe close (~8 s: two
# processes import torch); stopped by a signal, as docker stop / Ctrl-C do: extended
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc (Linux)")
@pytest.mark.parametrize("how", [signal.SIGKILL,
                                 pytest.param(signal.SIGTERM, marks=pytest.mark.extended),
                                 pytest.param(signal.SIGINT, marks=pytest.mark.extended)],
                         ids=["killed", "SIGTERM", "SIGINT"])
def test_the_programs_process_ends_with_the_server_however_it_stops(onnx_artifact, how):
    path, _, graphs = onnx_artifact
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.Popen([sys.executable, "-m", "graph_adapter.serve", path, "--port",
                             "0", "--threads", "1", "--program-in", "child"],
                            stdout=subprocess.PIPE, text=True, cwd=root,
                            env=dict(os.environ, PYTHONPATH=root))
    try:
        line = proc.stdout.readline()
        assert "http://127.0.0.1:" in line, line
        port = int(line.split("http://127.0.0.1:")[1].split(":")[0])
        pid = _get(port, "/health")[1]["program_pid"]
        assert pid != proc.pid and _state(pid) not in (None, "Z")
        assert _post(port, [_json_graph(graphs[0])])[0] == 200
        proc.send_signal(how)
        rc = proc.wait(30)
        assert rc == (-9 if how == signal.SIGKILL else 0), how
        assert _gone(pid), f"the program's process outlived the server ({how!r})"
    finally:
        proc.kill()
        proc.wait(30)


# -- the batcher on a stand-in predictor (no artifact) -------------------------------------

class _Doubler:
    """Predicts ``2 * id`` a graph; a graph ``{"bad": True}`` is refused, named by position."""

    def __init__(self, graphs_per_call=9):
        self.contract = SimpleNamespace(rungs=(), graphs=graphs_per_call)
        self.calls = 0
        self.merged = []
        self.gate = threading.Event()  # calls wait for it (the test queues requests first)
        self.gate.set()
        self.held = 0

    def predict(self, graphs):
        self.held = len(graphs)  # graphs of the call waiting at the gate
        self.gate.wait(30)
        self.calls += 1
        for i, g in enumerate(graphs):
            if g.get("bad"):
                raise MissingFeatureError(f"graph {i}: bad", i, "x")
        self.merged.append(len(graphs))
        return [2 * g["id"] for g in graphs]


@settings(max_examples=20, deadline=None)
@given(st.lists(st.lists(st.booleans(), min_size=1, max_size=12), min_size=1, max_size=16),
       st.sampled_from([0.0, 0.002, 0.02]))
def test_batcher_answers_each_request_with_its_own_graphs_in_order(requests, delay):
    pred = _Doubler()
    b = DynamicBatcher(pred, max_delay_s=delay, max_batch=8)
    reqs, ids = [], iter(range(10 ** 6))
    for flags in requests:  # a request holding a True flag has one bad graph
        reqs.append([{"id": next(ids), "bad": bad and j == flags.index(True)}
                     for j, bad in enumerate(flags)])
    out = [None] * len(reqs)

    def go(k):
        try:
            out[k] = b.submit(reqs[k], timeout=30)
        except MissingFeatureError as e:
            out[k] = e

    pred.gate.clear()  # the first call waits until every request is queued: they merge
    threads = [threading.Thread(target=go, args=(k,)) for k in range(len(reqs))]
    for t in threads:
        t.start()
    deadline, total = time.monotonic() + 10, sum(map(len, reqs))
    while b.queued_graphs + pred.held < total and time.monotonic() < deadline:
        time.sleep(0.001)
    pred.gate.set()
    for t in threads:
        t.join(30)
    b.close(5)
    for req, got in zip(reqs, out):
        if any(g["bad"] for g in req):  # its own error, its graph counted within it
            assert isinstance(got, MissingFeatureError)
            assert got.graph == next(j for j, g in enumerate(req) if g["bad"])
        else:
            assert got == [2 * g["id"] for g in req]
    assert all(n <= 8 or n == len(max(reqs, key=len)) for n in pred.merged)
    assert b.stats["requests"] == len(reqs)


def test_batcher_waits_at_most_max_delay_and_merges_what_arrives_meanwhile():
    pred = _Doubler(graphs_per_call=100)
    b = DynamicBatcher(pred, max_delay_s=0.3)
    out = []
    threads = [threading.Thread(target=lambda k=k: out.append(b.submit([{"id": k}])))
               for k in range(5)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    took = time.monotonic() - t0
    b.close(5)
    assert sorted(out) == [[0], [2], [4], [6], [8]]
    assert pred.merged == [5] and took < 5  # one call, after the wait (not per request)
    b = DynamicBatcher(_Doubler(graphs_per_call=3), max_delay_s=10.0)  # max_batch 2
    t0 = time.monotonic()
    threads = [threading.Thread(target=lambda k=k: b.submit([{"id": k}])) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert time.monotonic() - t0 < 5  # a full batch does not wait for the delay
    b.close(5)


def test_the_batcher_is_woken_for_a_first_request_or_a_full_merge_only():
    # a request arriving while the worker waits out max_delay does not wake it (it would
    # take the GIL only to wait again: once more a request, at 8 clients of one molecule)
    pred = _Doubler(graphs_per_call=100)
    b = DynamicBatcher(pred, max_delay_s=0.2)
    woken, notify = [], b.cond.notify
    b.cond.notify = lambda n=1: woken.append(n) or notify(n)
    out = []
    threads = [threading.Thread(target=lambda k=k: out.append(b.submit([{"id": k}])))
               for k in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(out) == [[0], [2], [4], [6], [8]] and pred.merged == [5]
    assert len(woken) == 1
    pred.gate.clear()  # a request not answered in time: its TimeoutError, the next answered
    with pytest.raises(TimeoutError, match="no answer within 0.05 s"):
        b.submit([{"id": 1}], timeout=0.05)
    pred.gate.set()
    assert b.submit([{"id": 3}], timeout=10) == [6]
    b.close(5)


# -- a .pt2 ladder (two AOTInductor compiles): CI's extended step --------------------------

@pytest.mark.slow
@pytest.mark.extended  # two AOTInductor compiles (~40 s)
def test_a_pt2_ladder_serves_eight_clients_and_names_the_top_rung(tmp_path):
    import torch

    from graph_adapter.app.models import build_model
    from graph_adapter.exporter import export
    from graph_adapter.batching import Budget, FixedSizeLoader
    from graph_adapter.nn import ipu_wrap

    from _padding import molecule_like_graphs

    graphs = molecule_like_graphs(120, seed=4)
    torch.manual_seed(0)
    model = build_model("gine", hidden=8, layers=1, y_mean=1.0, y_std=2.0).eval()
    path = str(tmp_path / "ladder.pt2")
    contract = export(ipu_wrap(model), FixedSizeLoader(graphs, Budget.fit(graphs, 4)), path,
                      ladder=[Budget.fit(graphs, 2), Budget.fit(graphs, 16)], threads=1)
    assert len(contract.rungs) == 2
    for where in ("server", "child"):  # the program in the server's process, or its own
        predictor = serve_server._load_predictor(path, 1, where)
        with PredictServer(predictor, port=0, max_delay_ms=5, limits=QUICK).start() as s:
            assert s.batcher.max_batch == max(r.graphs for r in contract.rungs) - 1
            _load_test(s, path, graphs, per_client=25)
            assert set(s.predictor.rung_calls.values()) != {0} and s.predictor.rung_calls
            n = max(r.max_graph_nodes for r in contract.rungs) + 1
            status, doc = _post(s.port, [{"x": [[0] * 9] * n, "edge_index": [[0], [1]],
                                          "edge_attr": [[0, 0, 0]]}])
            assert status == 422 and doc["error"] == "GraphTooLargeError"
            assert "top rung" in doc["message"] and f"max_nodes={n}" in doc["message"]
        if where == "child":
            assert isinstance(predictor, ProcessPredictor)
            predictor.close()
            assert predictor.process.returncode == 0
