"""The lingering close of the HTTP server: a request refused before its body is read (413
from ``Content-Length``, 503 of ``--max-inflight-mb``, ``--max-queue`` or a drain) by a
client that sends its whole body before it reads (``http.client``) gets its JSON answer,
not a connection reset; the dropped bytes are never kept; a client that never stops is
cut at ``--linger-s`` or ``--linger-mb``; an ``Expect: 100-continue`` client is answered
and closed at once, without its body. ``--linger-s 0`` is the plain close, whose reset
each test's control shows (so that the tests can fail).
"""
import http.client
import json
import socket
import threading
import time

import pytest
from hypothesis import given, settings, strategies as st

from graph_adapter.serve import Limits, PredictServer
from graph_adapter.serve.server import build_serve_parser, _limits

from serve._http import GRAPH, Summer, connect, head, parse_answer, post, read_answer, until

pytest.importorskip("uvicorn", reason="the serve extra (starlette, uvicorn)")

MB = 1 << 20
#: a body no socket buffer of loopback holds (some 4-6 MiB a side): a plain close meets
#: most of it unread, and resets
BIG = 32 * MB


def _server(http="auto", **limits):
    return PredictServer(Summer(), port=0, max_delay_ms=0, http=http,
                         limits=Limits(**{"drain_s": 0, **limits})).start()


def _send_whole_then_read(port, length, headers=None, body=None):
    """What ``http.client`` gets for a POST of ``length`` bytes (the whole body sent
    before the answer is read): ``(status, headers, doc)``, or the ``OSError`` raised."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/predict", body if body is not None else b" " * length,
                     {"Content-Type": "application/json", **(headers or {})})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(r.read())
    except OSError as e:  # ConnectionResetError, BrokenPipeError
        return e
    finally:
        conn.close()


def _connections(s):
    return len(s.uvicorn.server_state.connections)


class _Held:
    """One request of ``size`` body bytes held in flight (the predictor's gate shut)."""

    def __init__(self, s, size=100):
        self.s, self.answers = s, []
        raw = json.dumps({"graphs": [GRAPH], "pad": " " * size}).encode()
        s.predictor.gate.clear()
        self.thread = threading.Thread(target=lambda: self.answers.append(post(s.port,
                                                                              raw=raw)))
        self.thread.start()
        assert until(lambda: s.predictor.waiting == 1)

    def release(self):
        self.s.predictor.gate.set()
        self.thread.join(30)
        assert self.answers and self.answers[0][0] == 200, self.answers


def _refused(s, case, length=BIG, **kw):
    """The answer of ``http.client`` posting ``length`` bytes, refused by ``case``."""
    held = None
    if case == "max_inflight_bytes":
        held = _Held(s, size=600_000)
    elif case == "max_queue":
        held = _Held(s)
    elif case == "draining":
        s.state.draining = True
    try:
        return _send_whole_then_read(s.port, length, **kw)
    finally:
        s.state.draining = False
        if held is not None:
            held.release()


CASES = {"max_body_bytes": (dict(max_body_bytes=MB), 413, "TooLargeError"),
         "max_inflight_bytes": (dict(max_inflight_bytes=MB), 503, "OverloadedError"),
         "max_queue": (dict(max_queue=1), 503, "OverloadedError"),
         "draining": ({}, 503, "ServerStoppingError")}


@pytest.mark.parametrize("http", ["httptools", "h11"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_client_sending_its_whole_body_first_reads_its_refusal_not_a_reset(case, http):
    pytest.importorskip(http)
    limits, code, error = CASES[case]
    s = _server(http, **limits)
    try:
        got = _refused(s, case)
        assert not isinstance(got, Exception), f"{got!r}: the body's bytes were not read"
        status, headers, doc = got
        assert (status, doc["error"]) == (code, error), doc
        assert headers["connection"] == "close" and doc["request_id"]
        assert until(lambda: _connections(s) == 0, 10)  # closed once the client closed
        assert post(s.port, {"graphs": [GRAPH]})[0] == 200  # and the server goes on
    finally:
        s.close()


@pytest.mark.parametrize("case", ["max_body_bytes", "max_inflight_bytes"])
def test_control_without_lingering_the_same_client_sees_a_reset(case):
    """``--linger-s 0``: closed at once under the unread body, the client is reset (what
    the test above would see without the lingering close)."""
    limits, _, _ = CASES[case]
    s = _server(linger_s=0, **limits)
    try:
        got = _refused(s, case)
        assert isinstance(got, (ConnectionResetError, BrokenPipeError)), got
    finally:
        s.close()


@settings(max_examples=12)
@given(length=st.integers(MB + 1, 12 * MB), pieces=st.integers(1, 6),
       pause_ms=st.integers(0, 20))
def test_any_body_sent_in_any_pieces_gets_its_413_whole(length, pieces, pause_ms):
    """However the refused body is cut into writes (and paused between them), the client
    reads the whole JSON 413, then the end of the connection."""
    s = _SHARED.get("s") or _SHARED.setdefault("s", _server(max_body_bytes=MB))
    c = connect(s.port, timeout=30)
    try:
        c.sendall(head(length=length))
        body = memoryview(bytes(length))
        step = -(-length // pieces)
        for i in range(0, length, step):
            c.sendall(body[i:i + step])
            time.sleep(pause_ms / 1e3)
        status, headers, raw = parse_answer(read_answer(c))
    finally:
        c.close()
    doc = json.loads(raw)
    assert (status, doc["error"]) == (413, "TooLargeError") and str(MB) in doc["message"]
    assert int(headers["content-length"]) == len(raw)


_SHARED = {}


@pytest.fixture(autouse=True, scope="module")
def _close_shared():
    yield
    if "s" in _SHARED:
        _SHARED.pop("s").close()


def test_the_dropped_bytes_are_never_kept():
    """64 MiB refused and dropped: what the process allocates meanwhile (traced) stays a
    small fraction of it (the server and this client share the process; the client's
    body is allocated before the trace starts and sent without a copy)."""
    import tracemalloc

    size = 64 * MB
    s = _server(max_body_bytes=MB)
    body = memoryview(bytes(size))
    c = connect(s.port, timeout=30)
    tracemalloc.start()
    try:
        c.sendall(head(length=size))
        c.sendall(body)
        status, _, raw = parse_answer(read_answer(c))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        c.close()
        s.close()
    assert status == 413 and json.loads(raw)["error"] == "TooLargeError"
    assert peak < size / 16, f"{peak / MB:.1f} MiB allocated while 64 MiB were dropped"


def _send_forever(port, length, timeout=30):
    """A client that announces ``length`` bytes and sends until the server cuts it:
    ``(seconds it took, bytes sent)``."""
    c = connect(port, timeout=timeout)
    chunk = bytes(256 << 10)
    sent, t0 = 0, time.monotonic()
    try:
        c.sendall(head(length=length))
        while time.monotonic() - t0 < timeout:
            c.sendall(chunk)
            sent += len(chunk)
            time.sleep(0.001)  # (the server is not starved by this thread)
    except OSError:
        return time.monotonic() - t0, sent
    finally:
        c.close()
    raise AssertionError(f"still sending after {timeout} s ({sent} bytes)")


def test_a_client_that_never_stops_sending_is_cut_at_the_linger_deadline():
    s = _server(max_body_bytes=MB, linger_s=0.5)
    try:
        took, sent = _send_forever(s.port, 10 ** 12)
        assert 0.4 < took < 5, took
        assert until(lambda: _connections(s) == 0, 5)
    finally:
        s.close()


def test_a_client_that_never_stops_sending_is_cut_at_the_linger_bytes():
    s = _server(max_body_bytes=MB, linger_s=60, linger_bytes=8 * MB)
    try:
        took, sent = _send_forever(s.port, 10 ** 12)
        # (sent: what the server dropped and both kernels' buffers held, some MiB)
        assert took < 20 and 8 * MB < sent < 64 * MB, (took, sent)
    finally:
        s.close()


@pytest.mark.parametrize("http", ["httptools", "h11"])
@pytest.mark.parametrize("case", ["max_body_bytes", "max_queue"])
def test_an_expect_100_continue_client_is_refused_at_once_without_its_body(case, http):
    pytest.importorskip(http)
    limits, code, error = CASES[case]
    s = _server(http, linger_s=30, **limits)  # (were it lingered, it would stay open)
    held = _Held(s) if case == "max_queue" else None
    c = connect(s.port, timeout=10)
    try:
        c.sendall(head(length=BIG, extra="Expect: 100-continue\r\n"))
        status, headers, raw = parse_answer(read_answer(c))  # no byte of the body sent
        assert (status, json.loads(raw)["error"]) == (code, error)
        assert b"100 Continue" not in raw and headers["connection"] == "close"
        # closed by the server at once, though this client's socket is still open
        assert until(lambda: _connections(s) == (1 if held else 0), 3)
    finally:
        c.close()
        if held is not None:
            held.release()
        s.close()


def test_a_lingering_connection_holds_a_stop_at_most_its_deadline():
    """A refused client that neither sends nor closes: the server's stop waits for it at
    most ``linger_s``, and the requests in flight are drained as before."""
    s = _server(max_body_bytes=MB, linger_s=1.0)
    c = connect(s.port, timeout=10)
    try:
        c.sendall(head(length=BIG) + b" " * 1000)  # then silent, and never closed
        assert parse_answer(read_answer(c))[0] == 413
        assert _connections(s) == 1  # lingering
        t0 = time.monotonic()
        s.close()
        assert time.monotonic() - t0 < 4
        assert c.recv(10) == b""  # (the end, no reset: nothing of it was left unread)
    finally:
        c.close()


def test_the_linger_flags_and_their_defaults():
    d = Limits()
    assert (d.linger_s, d.linger_bytes) == (5.0, 256 * MB)
    args = build_serve_parser().parse_args(["m.onnx", "--linger-s", "0",
                                            "--linger-mb", "1.5"])
    got = _limits(args)
    assert (got.linger_s, got.linger_bytes) == (0.0, int(1.5 * MB))
    defaults = _limits(build_serve_parser().parse_args(["m.onnx"]))
    assert (defaults.linger_s, defaults.linger_bytes) == (d.linger_s, d.linger_bytes)
    with pytest.raises(ValueError, match="linger_bytes"):
        Limits(linger_bytes=0)
    with pytest.raises(ValueError, match="linger_s"):
        Limits(linger_s=-1)
