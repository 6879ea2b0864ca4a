"""Each limit of the HTTP server (``graph_adapter.serve.Limits``, one flag each), on a
stand-in predictor (no artifact): connections, header and body timeouts (a trickling
client is closed), body size (from ``Content-Length`` and while streaming), the unpacked
size of an ``.npz`` and graphs per request (refused before any array is made), the
per-request deadline, the queue depth (refused before the body is read), and draining
(in flight answered, new ones 503 with ``Connection: close``). Every refusal is JSON.
"""
import io
import json
import threading
import time

import numpy as np
import pytest

from graph_adapter.serve import NPZ_TYPE, Limits, PredictServer, TooLargeError
from graph_adapter.serve.decode import decode_request, npz_member_sizes
from graph_adapter.serve.server import build_serve_parser

from serve._http import (BODY, CONTRACT, GRAPH, Summer, connect, head, parse_answer, post,
                         read_answer, request, until)

pytest.importorskip("uvicorn", reason="the serve extra (starlette, uvicorn)")


def _server(http="auto", **limits):
    return PredictServer(Summer(), port=0, max_delay_ms=0, http=http,
                         limits=Limits(**{"drain_s": 0, **limits})).start()


def _refusal(status, headers, doc, code, error):
    assert status == code, (status, doc)
    assert headers["content-type"] == "application/json"
    assert doc["error"] == error and doc["message"] and doc["request_id"], doc


def test_every_limit_is_a_documented_flag_with_the_dataclasss_default():
    p = build_serve_parser()
    flags = {a.dest: a for a in p._actions}
    d = Limits()
    assert flags["max_connections"].default == d.max_connections
    assert flags["max_body_mb"].default * (1 << 20) == d.max_body_bytes
    assert flags["max_decoded_mb"].default * (1 << 20) == d.max_decoded_bytes
    assert flags["max_inflight_mb"].default * (1 << 20) == d.max_inflight_bytes
    for name in ("header_timeout_s", "body_timeout_s", "keep_alive_s", "max_graphs",
                 "max_queue", "request_timeout_s", "drain_s", "shutdown_timeout_s"):
        assert flags[name].default == getattr(d, name), name
        assert flags[name].help and "default" in flags[name].help, name
    with pytest.raises(ValueError, match="max_queue"):
        Limits(max_queue=0)


@pytest.mark.parametrize("http", ["httptools", "h11"])
def test_past_max_connections_a_request_is_a_json_503_and_its_connection_closed(http):
    pytest.importorskip(http)
    s = _server(http, max_connections=2)
    held = [connect(s.port), connect(s.port)]
    try:
        assert until(lambda: len(s.uvicorn.server_state.connections) == 2)
        extra = connect(s.port)
        extra.sendall(head(length=len(BODY)) + BODY)
        status, headers, body = parse_answer(read_answer(extra))  # (and it was closed)
        extra.close()
        _refusal(status, headers, json.loads(body), 503, "TooManyConnectionsError")
        assert headers["connection"] == "close" and headers["retry-after"] == "1"
        held.pop().close()  # one of the two leaves: a new connection is served
        assert until(lambda: len(s.uvicorn.server_state.connections) < 2)
        assert post(s.port, {"graphs": [GRAPH]})[0] == 200
    finally:
        for c in held:
            c.close()
        s.close()


@pytest.mark.parametrize("http", ["httptools", "h11"])
def test_a_client_trickling_its_headers_is_closed_at_the_header_timeout(http):
    pytest.importorskip(http)
    s = _server(http, header_timeout_s=0.3)
    whole = head(length=len(BODY), extra="X-Pad: " + "p" * 400 + "\r\n") + BODY
    c = connect(s.port, timeout=10)
    sent = 0
    try:
        # a byte every 10 ms: the whole header block would take 5 s, 15x the timeout
        try:
            for b in whole:
                c.sendall(bytes([b]))
                sent += 1
                time.sleep(0.01)
        except OSError:  # closed by the server: the write fails
            pass
        got = read_answer(c)
    finally:
        c.close()
        s.close()
    assert sent < len(whole) - len(BODY), "the server waited for the whole header block"
    status, headers, body = parse_answer(got)
    _refusal(status, headers, json.loads(body), 408, "HeaderTimeoutError")


def test_a_connection_that_sends_nothing_is_closed_at_the_header_timeout():
    s = _server(header_timeout_s=0.2)
    try:
        c = connect(s.port, timeout=10)
        assert read_answer(c) == b""  # closed, nothing said (nothing was asked)
        c.close()
        c = connect(s.port, timeout=10)  # and after an answer: as keep-alive does
        c.sendall(head("/predict", len(BODY)) + BODY)
        status, _, body = parse_answer(read_answer(c))
        assert status == 200 and json.loads(body) == {"predictions": [[5.5]]}
        c.close()
    finally:
        s.close()


@pytest.mark.parametrize("how,http", [("stalls", "httptools"), ("trickles", "h11")])
def test_a_body_not_sent_within_the_body_timeout_is_a_408_and_closed(how, http):
    pytest.importorskip(http)
    s = _server(http, body_timeout_s=0.3)
    c = connect(s.port, timeout=10)
    try:
        c.sendall(head(length=10_000) + b'{"graphs": ')
        if how == "trickles":  # a byte every 20 ms, each long before the timeout
            try:
                for _ in range(500):
                    c.sendall(b" ")
                    time.sleep(0.02)
            except OSError:
                pass
        status, headers, body = parse_answer(read_answer(c))
    finally:
        c.close()
    try:
        _refusal(status, headers, json.loads(body), 408, "BodyTimeoutError")
        assert headers["connection"] == "close"
        assert post(s.port, {"graphs": [GRAPH]})[0] == 200
    finally:
        s.close()


@pytest.mark.parametrize("http", ["httptools", "h11"])
def test_a_body_past_max_body_bytes_is_a_413_before_it_is_read_or_as_it_streams(http):
    pytest.importorskip(http)
    s = _server(http, max_body_bytes=1000)
    try:
        c = connect(s.port, timeout=10)
        c.sendall(head(length=10 ** 9))  # a gigabyte announced, none of it sent
        status, headers, body = parse_answer(read_answer(c))
        c.close()
        _refusal(status, headers, json.loads(body), 413, "TooLargeError")
        assert headers["connection"] == "close"
        c = connect(s.port, timeout=10)  # chunked: no length to refuse it by
        c.sendall(head(extra="Transfer-Encoding: chunked\r\n"))
        try:
            for _ in range(100):
                c.sendall(b"100\r\n" + b" " * 256 + b"\r\n")
        except OSError:  # refused and closed as it passed 1000 bytes
            pass
        status, headers, body = parse_answer(read_answer(c))
        c.close()
        _refusal(status, headers, json.loads(body), 413, "TooLargeError")
        ok = json.dumps({"graphs": [GRAPH]}).encode()  # a chunked body within it is read
        c = connect(s.port, timeout=10)
        c.sendall(head(extra="Transfer-Encoding: chunked\r\nConnection: close\r\n") +
                  b"%x\r\n" % len(ok) + ok + b"\r\n0\r\n\r\n")
        status, _, body = parse_answer(read_answer(c))
        c.close()
        assert status == 200 and json.loads(body) == {"predictions": [[5.5]]}
    finally:
        s.close()


def _npz(**arrays):
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def test_an_npz_bomb_is_refused_from_its_headers_before_it_is_unpacked():
    import tracemalloc

    big = 64 << 20  # 64 MiB of zeros: some 65 KB compressed
    body = _npz(num_nodes=np.array([big // 8 // 2]), x=np.zeros((big // 8 // 2, 2)))
    assert len(body) < big // 500
    sizes = npz_member_sizes(body)
    assert sizes["x"] == ((big // 16, 2), np.dtype(np.float64))
    tracemalloc.start()
    try:
        with pytest.raises(TooLargeError, match=f"unpack to {big + 8} bytes"):  # (+ counts)
            decode_request(body, NPZ_TYPE, CONTRACT, max_decoded_bytes=16 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * len(body) + (1 << 20), peak  # never the arrays' 64 MiB
    s = _server(max_decoded_bytes=16 << 20)
    try:
        status, headers, doc = request(s.port, "POST", "/predict", body,
                                       {"Content-Type": NPZ_TYPE})
        _refusal(status, headers, doc, 413, "TooLargeError")
        small = _npz(num_nodes=np.array([2]), x=np.asarray(GRAPH["x"], np.float32))
        assert request(s.port, "POST", "/predict", small, {"Content-Type": NPZ_TYPE})[2] == \
            {"predictions": [[5.5]]}
    finally:
        s.close()


def test_an_npz_member_that_is_not_a_plain_array_is_a_400_before_it_is_read():
    buf = io.BytesIO()
    np.savez(buf, num_nodes=np.array([1]), x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(Exception, match="not an .npz of plain arrays") as e:
        npz_member_sizes(buf.getvalue())
    assert type(e.value).__name__ == "PayloadError"


@pytest.mark.parametrize("form", ["graphs", "columns", "npz"])
def test_more_graphs_than_max_graphs_is_a_413_in_every_body_form(form):
    s = _server(max_graphs=3)
    x = np.asarray(GRAPH["x"], np.float32)
    try:
        for n, want in ((3, 200), (4, 413)):
            if form == "graphs":
                answer = post(s.port, {"graphs": [GRAPH] * n})
            elif form == "columns":
                answer = post(s.port, {"num_nodes": [2] * n,
                                       "columns": {"x": np.tile(x, (n, 1)).tolist()}})
            else:
                answer = request(s.port, "POST", "/predict",
                                 _npz(num_nodes=np.full(n, 2), x=np.tile(x, (n, 1))),
                                 {"Content-Type": NPZ_TYPE})
            if want == 200:
                assert answer[0] == 200 and answer[2] == {"predictions": [[5.5]] * n}
            else:
                _refusal(*answer, 413, "TooLargeError")
                assert "4 graphs" in answer[2]["message"]
    finally:
        s.close()


def test_a_request_not_answered_within_the_deadline_is_a_504_and_dropped():
    s = _server(request_timeout_s=0.3)
    try:
        s.predictor.gate.clear()  # the predictor takes the first request and holds it
        first = []
        t = threading.Thread(target=lambda: first.append(post(s.port, {"graphs": [GRAPH]})))
        t.start()
        assert until(lambda: s.predictor.waiting == 1)
        _refusal(*post(s.port, {"graphs": [GRAPH, GRAPH]}), 504, "DeadlineExceededError")
        t.join(30)
        _refusal(*first[0], 504, "DeadlineExceededError")
        s.predictor.gate.set()
        assert post(s.port, {"graphs": [GRAPH]})[2] == {"predictions": [[5.5]]}
        assert until(lambda: s.batcher.stats["requests"] == 2)  # the 2-graph one never ran
        assert s.counters["timed_out"] == 2
    finally:
        s.predictor.gate.set()
        s.close()


def test_past_max_queue_a_request_is_a_503_before_its_body_is_read():
    s = _server(max_queue=2)
    out = []
    try:
        s.predictor.gate.clear()
        threads = [threading.Thread(target=lambda: out.append(post(s.port, {"graphs": [GRAPH]})))
                   for _ in range(2)]
        for t in threads:
            t.start()
        assert until(lambda: s.state.in_flight == 2)
        c = connect(s.port, timeout=10)
        c.sendall(head(length=len(BODY)))  # its headers only: answered all the same
        status, headers, body = parse_answer(read_answer(c))
        c.close()
        _refusal(status, headers, json.loads(body), 503, "OverloadedError")
        assert headers["retry-after"] == "1" and headers["connection"] == "close"
        assert request(s.port, "GET", "/health")[0] == 200  # liveness: never queued
        s.predictor.gate.set()
        for t in threads:
            t.join(30)
        assert [a[0] for a in out] == [200, 200] and s.counters["overloaded"] == 1
    finally:
        s.predictor.gate.set()
        s.close()


def test_close_drains_in_flight_answered_new_ones_503_with_connection_close():
    s = _server(drain_s=0.2)
    out = []
    s.predictor.gate.clear()
    threads = [threading.Thread(target=lambda: out.append(post(s.port, {"graphs": [GRAPH]})))
               for _ in range(3)]
    for t in threads:
        t.start()
    raw = connect(s.port, timeout=10)  # a keep-alive request in flight at the stop
    raw.sendall(head("/predict", len(BODY)) + BODY)
    assert until(lambda: s.state.in_flight == 4)
    port = s.port
    closer = threading.Thread(target=s.close)
    closer.start()
    try:
        assert until(lambda: s.state.draining)
        status, headers, doc = post(port, {"graphs": [GRAPH]})
        _refusal(status, headers, doc, 503, "ServerStoppingError")
        assert headers["connection"] == "close"
        status, headers, doc = request(port, "GET", "/ready")
        assert status == 503 and doc["status"] == "stopping"
        status, _, doc = request(port, "GET", "/health")
        assert status == 200 and doc["status"] == "stopping"  # alive: not to be killed
    finally:
        s.predictor.gate.set()
    for t in threads:
        t.join(30)
    closer.join(30)
    assert [a[0] for a in out] == [200] * 3  # none cut
    assert all(a[1]["connection"] == "close" for a in out)
    status, headers, body = parse_answer(read_answer(raw))  # answered, then closed
    raw.close()
    assert status == 200 and headers["connection"] == "close" and json.loads(body)
    with pytest.raises(OSError):
        connect(port, timeout=2).close()


def test_max_connections_is_kept_within_the_open_files_limit(monkeypatch):
    import resource

    from graph_adapter.serve import server as srv

    monkeypatch.setattr(resource, "getrlimit", lambda what: (128, 4096))
    cut = srv._within_open_files(Limits(max_connections=1024))
    assert cut.max_connections == 128 - srv._FDS_KEPT
    assert srv._within_open_files(Limits(max_connections=10)).max_connections == 10


def test_past_max_inflight_bytes_a_body_is_a_503_before_it_is_read_or_as_it_streams():
    s = _server(max_inflight_bytes=1000)
    held = []
    big = json.dumps({"graphs": [GRAPH], "pad": " " * 600}).encode()  # ~650 bytes
    try:
        s.predictor.gate.clear()
        t = threading.Thread(target=lambda: held.append(post(s.port, raw=big)))
        t.start()
        assert until(lambda: s.predictor.waiting == 1)
        c = connect(s.port, timeout=10)
        c.sendall(head(length=len(big)))  # its headers only: refused all the same
        status, headers, body = parse_answer(read_answer(c))
        c.close()
        _refusal(status, headers, json.loads(body), 503, "OverloadedError")
        assert headers["retry-after"] == "1" and "--max-inflight-mb" in json.loads(body)[
            "message"]
        c = connect(s.port, timeout=10)  # chunked: refused as its bytes pass the rest
        c.sendall(head(extra="Transfer-Encoding: chunked\r\n"))
        try:
            for _ in range(20):
                c.sendall(b"40\r\n" + b" " * 64 + b"\r\n")
        except OSError:
            pass
        status, headers, body = parse_answer(read_answer(c))
        c.close()
        _refusal(status, headers, json.loads(body), 503, "OverloadedError")
        s.predictor.gate.set()
        t.join(30)
        assert held[0][0] == 200 and s.state.inflight_bytes == 0
        assert post(s.port, raw=big)[0] == 200  # alone, any size up to max_body_bytes
    finally:
        s.predictor.gate.set()
        s.close()
