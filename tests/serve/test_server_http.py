"""The server's HTTP layer (uvicorn running ``graph_adapter.serve.app``) on a stand-in
predictor: any request bytes, generated or mutated, get one JSON answer (or none for a
request cut short), never crash or hang the server, which goes on answering; 404, 405
and the connection layer's own 400 are JSON too; query strings are ignored; every answer
carries a request id, and a failure that is not the request's fault is answered without
its text (no stack trace, path or address), logged with that id. Both of uvicorn's
parsers (httptools, h11) are run.
"""
import json
import logging
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graph_adapter.serve import Limits, PredictServer

from serve._http import (BODY, GRAPH, Summer, connect, parse_answer, post, read_answer,
                         request)

pytest.importorskip("uvicorn", reason="the serve extra (starlette, uvicorn)")


@pytest.fixture(scope="module", params=["httptools", "h11"])
def server(request):
    if request.param == "httptools":
        pytest.importorskip("httptools", reason="uvicorn[standard] (httptools)")
    # (short timeouts: a request cut short is answered 408 and closed at once)
    s = PredictServer(Summer(), port=0, max_delay_ms=0, http=request.param,
                      limits=Limits(max_body_bytes=4096, drain_s=0, header_timeout_s=0.3,
                                    body_timeout_s=0.3)).start()
    try:
        yield s
    finally:
        s.close()


def _exchange(port, raw):
    """What the server writes back to ``raw`` until it closes the connection (a request
    cut short: at its header or body timeout). Our writing half stays open: uvicorn
    closes a connection whose client closed its own (an EOF) without answering."""
    s = connect(port, timeout=10)  # (socket.timeout: the server hung: the test fails)
    try:
        try:
            s.sendall(raw)
        except OSError:  # it answered and closed already
            pass
        return read_answer(s)
    finally:
        s.close()


def _answers(raw):
    """The answers in ``raw`` bytes: ``[(status, headers, body), ...]``."""
    out = []
    while raw:
        headpart, sep, rest = raw.partition(b"\r\n\r\n")
        assert sep, raw
        status, headers, _ = parse_answer(headpart + sep)
        n = int(headers.get("content-length", 0))
        out.append((status, headers, rest[:n]))
        raw = rest[n:]
    return out


def _request_bytes(method=b"POST", path=b"/predict", version=b"HTTP/1.1", body=BODY,
                   extra=b""):
    return (method + b" " + path + b" " + version + b"\r\nHost: t\r\nContent-Type: "
            b"application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n" +
            extra + b"\r\n" + body)


def test_a_request_is_answered_and_every_answer_carries_a_request_id(server):
    status, headers, doc = post(server.port, {"graphs": [GRAPH]})
    assert status == 200 and doc == {"predictions": [[5.5]]}
    assert re.fullmatch(r"[0-9a-f]{16}", headers["x-request-id"])
    status, headers, doc = post(server.port, raw="{", headers={"X-Request-Id": "lb-42.a"})
    assert status == 400 and headers["x-request-id"] == doc["request_id"] == "lb-42.a"
    status, headers, doc = post(server.port, raw="{", headers={"X-Request-Id": "a b/c"})
    assert headers["x-request-id"] == doc["request_id"] != "a b/c"  # (not a plain id)


@pytest.mark.parametrize("method,path,code", [("GET", "/nope", 404), ("POST", "/health", 405),
                                              ("DELETE", "/predict", 405),
                                              ("GET", "/predict/", 404)])
def test_404_and_405_are_json_errors(server, method, path, code):
    status, headers, doc = request(server.port, method, path)
    assert status == code and headers["content-type"] == "application/json"
    assert set(doc) == {"error", "message", "graph", "key", "request_id"}
    assert doc["error"] in ("NotFound", "MethodNotAllowed") and doc["message"]


def test_query_strings_are_ignored(server):
    assert request(server.port, "GET", "/health?x=1")[0] == 200
    assert request(server.port, "GET", "/ready?probe=k8s&x")[0] == 200
    status, _, doc = request(server.port, "POST", "/predict?v=2", BODY,
                             {"Content-Type": "application/json"})
    assert status == 200 and doc == {"predictions": [[5.5]]}


def test_a_failure_not_the_requests_fault_is_a_500_without_its_text(server, caplog):
    secret = ("onnxruntime::Gather /tmp/onnx_x9/model.onnx at 0x7f3a2b1c0000\n"
              "  File \"/srv/app/runtime.py\", line 12, in run")
    server.predictor.fail = RuntimeError(secret)
    try:
        with caplog.at_level(logging.ERROR, logger="graph_adapter.serve"):
            status, headers, doc = post(server.port, {"graphs": [GRAPH]})
    finally:
        server.predictor.fail = None
    assert status == 500 and doc["error"] == "InternalError"
    raw = json.dumps(doc) + json.dumps(headers)
    for leak in ("/tmp", "0x7f", "File ", "runtime.py", "Gather", "Traceback"):
        assert leak not in raw, leak
    assert doc["request_id"] == headers["x-request-id"] in doc["message"]
    logged = "\n".join(r.getMessage() + str(r.exc_info) for r in caplog.records)
    assert doc["request_id"] in logged and "/tmp/onnx_x9" in logged  # the log has it all
    assert post(server.port, {"graphs": [GRAPH]})[0] == 200  # and it goes on


def test_the_connection_layers_own_refusals_are_json(server):
    for raw in (b"NOT A REQUEST\r\n\r\n", b"GET / HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n",
                b"POST /predict HTTP/1.1\r\nContent-Length: x\r\n\r\n"):
        (status, headers, body), = _answers(_exchange(server.port, raw))
        assert status == 400 and headers["content-type"] == "application/json", raw
        assert json.loads(body)["error"] == "BadRequest"


def test_keep_alive_http_1_0_and_100_continue_over_one_connection(server):
    raw = (_request_bytes() + _request_bytes(extra=b"Expect: 100-continue\r\n") +
           _request_bytes(version=b"HTTP/1.0"))  # (HTTP/1.0: closed after its answer)
    got = _answers(_exchange(server.port, raw))
    finals = [a for a in got if a[0] != 100]
    assert [a[0] for a in finals] == [200, 200, 200]
    assert all(json.loads(b) == {"predictions": [[5.5]]} for _, _, b in finals)


_LINE = st.binary(min_size=0, max_size=40)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from([b"POST", b"GET", b"HEAD", b"PUT", b"post", b"GET /x"]),
       st.sampled_from([b"/predict", b"/health", b"/contract", b"/x", b"*", b"//predict",
                        b"/predict?a=1", b"/%zz"]),
       st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/0.9", b"HTTP/2.0", b"", b"HTTP/1"]),
       st.sampled_from([BODY, b"", b"{", b"[]", b'{"graphs": [{"x": [[1, 2.5]]}]}']))
def test_any_request_gets_one_json_answer_or_none(server, method, path, version, body):
    raw = _exchange(server.port, _request_bytes(method, path, version, body))
    for status, headers, payload in _answers(raw):
        assert 200 <= status < 600
        if method != b"HEAD":
            doc = json.loads(payload)
            assert status == 200 or {"error", "message"} <= set(doc), doc
    assert request(server.port)[0] == 200  # it goes on


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.integers(0, 400), st.sampled_from(["drop", "put", "insert"]),
                          st.binary(min_size=1, max_size=3)), min_size=1, max_size=6))
def test_mutated_requests_never_crash_or_hang_the_server(server, edits):
    raw = bytearray(_request_bytes() + _request_bytes())
    for at, how, b in edits:
        at %= len(raw) + 1
        if how == "drop":
            del raw[at:at + len(b)]
        elif how == "put":
            raw[at:at + len(b)] = b
        else:
            raw[at:at] = b
    got = _exchange(server.port, bytes(raw))
    if got:
        assert got.startswith(b"HTTP/1.1 ") or got.startswith(b"HTTP/1.0 "), got[:80]
        for status, _, payload in _answers(got):
            if status != 100 and payload:
                json.loads(payload)  # every answer JSON
    assert request(server.port)[0] == 200


def test_a_header_block_past_its_limit_is_a_json_431_before_it_ends(server):
    from graph_adapter.serve.server import MAX_HEADER_BYTES

    s = connect(server.port, timeout=10)
    try:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n")
        try:
            for _ in range(MAX_HEADER_BYTES // 1000 + 2):  # and no end to them
                s.sendall(b"X-A: " + b"a" * 993 + b"\r\n")
        except OSError:  # refused and closed before all of them went
            pass
        (status, headers, body), = _answers(read_answer(s))
    finally:
        s.close()
    # (h11's own limit, 16 KiB, comes first there: its 400)
    assert status in (400, 431) and json.loads(body)["error"] in ("HeaderTooLargeError",
                                                                  "BadRequest")
    assert request(server.port)[0] == 200
