"""The server's HTTP layer (``graph_adapter.serve.server._Handler``) on a stand-in predictor.

The handler reads plain header blocks itself and writes each answer in one write; the
standard library's handler (``http.server`` / ``http.client.parse_headers``, as the
server used before) is the reference: for any request bytes, generated or mutated, both
answer byte for byte alike (the ``Date`` header aside), never crash or hang, and the
server goes on answering. The lean header reader gives the same headers as
``http.client.parse_headers`` for any header block (hypothesis), with the same limits.
"""
import http.client
import io
import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler
from socketserver import StreamRequestHandler

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graph_adapter.serve import Contract, InputField, OutputField, PredictServer
from graph_adapter.serve import server as srv
from graph_adapter.serve.columns import Columns
from graph_adapter.serve.pack import column_graphs

CONTRACT = Contract("onnx", 64, 64, 9, (InputField("x", "feature", "node", "float32",
                                                   (None, 2)),),
                    (OutputField("y", "graph", "float32", (None,)),))
GRAPH = {"x": [[1.0, 2.0], [3.5, -1.0]]}
BODY = json.dumps({"graphs": [GRAPH]}).encode()


class _Summer:
    """Predicts the sum of ``x`` a graph (no artifact); a graph without it: a KeyError
    (the server's 500)."""

    def __init__(self):
        self.contract = CONTRACT
        self.calls = 0
        self.ignored_keys = set()

    def predict(self, graphs):
        self.calls += 1
        if isinstance(graphs, Columns):
            graphs = [g.features for g in column_graphs(graphs, CONTRACT)]
        return [np.asarray([np.asarray(g["x"], np.float32).sum()], np.float32)
                for g in graphs]


class _StdlibHandler(srv._Handler):
    """The handler as it was: the standard library's request parsing and socket set-up,
    and the answer written by ``send_response`` / ``send_header`` / ``end_headers``, then
    the body."""

    parse_request = BaseHTTPRequestHandler.parse_request
    setup = StreamRequestHandler.setup  # (the socket's timeout kept by Python)

    def _send(self, code, doc, raw=None):
        body = raw if raw is not None else srv._json_dumps(doc)
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            self.close_connection = True


@pytest.fixture(scope="module")
def servers():
    """(lean, reference): the same stand-in behind each handler; small bodies only."""
    lean = PredictServer(_Summer(), port=0, max_delay_ms=0, max_body_bytes=4096).start()
    ref = PredictServer(_Summer(), port=0, max_delay_ms=0, max_body_bytes=4096)
    ref.RequestHandlerClass = _StdlibHandler
    ref.start()
    try:
        yield lean, ref
    finally:
        lean.close()
        ref.close()


def _exchange(port, raw, timeout=10.0):
    """Everything the server writes back to ``raw`` until it closes the connection (our
    side's writing half closed after ``raw``: a request cut short ends there). A server
    that closes with bytes of ours unread (a refused body) resets the connection: what
    came before the reset is its answer."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(raw)
            s.shutdown(socket.SHUT_WR)
        except OSError:  # it answered and closed already (a broken pipe, a reset)
            pass
        out = []
        while True:
            try:
                chunk = s.recv(1 << 16)  # (socket.timeout: the server hung: the test fails)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                return b"".join(out)
            out.append(chunk)
    finally:
        s.close()


def _masked(raw):
    return re.sub(rb"\r\nDate: [^\r\n]*\r\n", b"\r\nDate: -\r\n", raw)


def _responses(raw, head=False):
    """The answers in ``raw``, each (status, headers, body); an AssertionError where it
    is not a sequence of well-formed HTTP/1.1 answers, the last of which may be the
    standard library's bare HTML one to a line that is no request (status ``None``: an
    HTTP/0.9 answer, the connection closed after it). ``head``: answers to HEAD (no body)."""
    out = []
    while raw:
        if not raw.startswith(b"HTTP/1.1 "):
            assert raw.startswith(b"<!DOCTYPE HTML>") or raw.startswith(b"{"), raw[:200]
            out.append((None, {}, raw))
            break
        head_, sep, rest = raw.partition(b"\r\n\r\n")
        assert sep, raw[:200]
        status, *lines = head_.decode("latin-1").split("\r\n")
        assert re.fullmatch(r"HTTP/1\.1 \d{3} [^\r\n]*", status), status
        headers = dict(line.split(": ", 1) for line in lines)
        code = int(status.split()[1])
        n = int(headers.get("Content-Length", 0)) if code >= 200 and not head else 0
        assert len(rest) >= n, (status, headers, len(rest))
        out.append((code, headers, rest[:n]))
        raw = rest[n:]
    return out


def _request(method="POST", path="/predict", version="HTTP/1.1", headers=None, body=BODY,
             eol="\r\n"):
    headers = {"Host": "x", "Content-Type": "application/json",
               "Content-Length": str(len(body))} if headers is None else headers
    head = f"{method} {path} {version}{eol}" + "".join(f"{k}: {v}{eol}"
                                                      for k, v in headers.items())
    return (head + eol).encode("latin-1") + body


# -- the lean header reader against http.client.parse_headers ------------------------------

_LINE_BYTES = st.sampled_from([b"Content-Length", b"content-length", b"Connection",
                               b"Expect", b"X-A", b"", b" ", b"\t", b":", b": ", b"5", b"close",
                               b"keep-alive", b"100-continue", b"\r", b"\x85", b"\x0b", b"\x1c",
                               b"\xe9", b"From ", b"a b", b"\x00"])


#: a header line: mostly name, separator, value (repeated names, odd spacing), else any
#: run of the bytes above
_LINE = st.one_of(
    st.tuples(st.sampled_from([b"Content-Length", b"content-length", b"Connection", b"Expect",
                               b"X-A", b"a b", b" Connection", b"From x"]),
              st.sampled_from([b":", b": ", b":\t ", b" :", b""]),
              st.sampled_from([b"5", b"close", b"keep-alive", b"100-continue", b" 7 ", b"",
                               b"a\rb", b"\xe9", b"a\x85b", b"\x0b",
                               b"x\x1c"])).map(b"".join),
    st.lists(_LINE_BYTES, max_size=5).map(b"".join))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_LINE, st.sampled_from([b"\r\n", b"\n"])), max_size=8),
       st.sampled_from([b"\r\n", b"\n", b""]), st.binary(max_size=6))
def test_the_lean_header_reader_gives_the_standard_librarys_headers(lines, end, after):
    # (after: a body, or the next request; end b"": the client closed after the headers)
    block = b"".join(line + eol for line, eol in lines) + end + after
    fw, f = io.BytesIO(block), io.BytesIO(block)
    want = http.client.parse_headers(fw)
    got = srv._parse_header_lines(srv._read_header_lines(f))
    for name in ("Content-Length", "content-length", "Connection", "Expect", "X-A", "From",
                 "a b", "CONTENT-LENGTH"):
        assert got.get(name) == want.get(name), (name, block)
        assert (name in got) == (name in want)
    assert f.read() == fw.read()  # the body starts where the standard library's does


def test_the_header_limits_are_the_standard_librarys():
    for block in (b"X: " + b"a" * 70000 + b"\r\n\r\n", b"X: a\r\n" * 100 + b"\r\n"):
        with pytest.raises(http.client.HTTPException) as want:
            http.client.parse_headers(io.BytesIO(block))
        with pytest.raises(http.client.HTTPException) as got:
            srv._read_header_lines(io.BytesIO(block))
        assert type(got.value) is type(want.value) and str(got.value) == str(want.value)
    ok = b"X: a\r\n" * 99 + b"\r\n"  # 99 headers and the blank line: the most taken
    assert len(srv._read_header_lines(io.BytesIO(ok))) == 100


def test_plain_headers_are_not_read_by_the_email_parser(servers, monkeypatch):
    import email.parser

    def refuse(*a, **k):
        raise AssertionError("email's parser read a plain header block")

    monkeypatch.setattr(email.parser.Parser, "parsestr", refuse)
    monkeypatch.setattr(http.client, "parse_headers", refuse)
    code, headers, body = _responses(_exchange(servers[0].port, _request()))[0]
    assert code == 200 and json.loads(body) == {"predictions": [[5.5]]}


def test_an_answer_is_one_write(servers, monkeypatch):
    writes = []
    write = srv._Handler.setup

    def setup(self):
        write(self)
        real = self.wfile.write
        self.wfile.write = lambda data: writes.append(bytes(data)) or real(data)

    monkeypatch.setattr(srv._Handler, "setup", setup)
    for path in ("/predict", "/contract", "/nope"):
        writes.clear()
        raw = _exchange(servers[0].port, _request(path=path, headers={
            "Content-Length": str(len(BODY)), "Connection": "close"}) if path == "/predict"
            else _request("GET", path, headers={"Connection": "close"}, body=b""))
        assert writes == [raw] and len(_responses(raw)) == 1, (path, writes)


# -- the server: the reference's answers, byte for byte ------------------------------------

_HEADER_SETS = st.sampled_from([
    None,
    {"Content-Length": str(len(BODY)), "Connection": "close"},
    {"content-length": str(len(BODY)), "CONNECTION": "Keep-Alive"},
    {"Content-Length": str(len(BODY)), "Expect": "100-continue"},
    {"Content-Length": " " + str(len(BODY))},
    {"Content-Length": str(len(BODY)) + " "},
    {"Content-Length": "abc"},
    {"Content-Length": "99999"},
    {"Content-Length": str(len(BODY) + 5)},
    {"Content-Length": str(len(BODY) - 5)},
    {},
    {"X-Folded": "a\r\n b", "Content-Length": str(len(BODY))},
    {"Content-Type": "application/x-npz", "Content-Length": str(len(BODY))},
])


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(["POST", "GET", "HEAD", "PUT", "post", "GET /x"]),
       st.sampled_from(["/predict", "/contract", "/nope", "//predict", "/health?x"]),
       st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/0.9", "HTTP/2.0", "HTTP/1.10", "HTTP/1",
                        "http/1.1", ""]),
       _HEADER_SETS, st.sampled_from([BODY, b"", b"{not json", b'{"graphs": [{"y": 1}]}']),
       st.sampled_from(["\r\n", "\n"]), st.integers(1, 2))
def test_any_request_gets_the_standard_librarys_answer(servers, method, path, version,
                                                       headers, body, eol, times):
    raw = _request(method, path, version, headers, body, eol) * times
    lean, ref = servers
    got = _exchange(lean.port, raw)
    assert _masked(got) == _masked(_exchange(ref.port, raw)), raw[:300]
    _responses(got, head=method == "HEAD")  # well-formed


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.integers(0, 400), st.sampled_from(["drop", "put", "insert"]),
                          st.binary(min_size=1, max_size=3)), min_size=1, max_size=6),
       st.integers(1, 2))
def test_mutated_requests_never_crash_or_hang_the_server(servers, edits, times):
    raw = bytearray(_request() * times)
    for at, how, data in edits:
        at %= len(raw) + 1
        if how == "drop":
            del raw[at:at + len(data)]
        elif how == "put":
            raw[at:at + len(data)] = data
        else:
            raw[at:at] = data
    lean, ref = servers
    got = _exchange(lean.port, bytes(raw))
    assert _masked(got) == _masked(_exchange(ref.port, bytes(raw))), bytes(raw)[:300]
    if b"HEAD" not in raw:
        _responses(got)  # well-formed
    code, _, body = _responses(_exchange(lean.port, _request()))[0]  # and it goes on
    assert code == 200 and json.loads(body) == {"predictions": [[5.5]]}


def test_too_many_or_too_long_headers_are_the_standard_librarys_431s(servers):
    lean, ref = servers
    for headers in ({f"X-{i}": "v" for i in range(100)}, {"X-Long": "v" * 65540}):
        raw = _request(headers=headers)
        got = _exchange(lean.port, raw)
        assert _masked(got) == _masked(_exchange(ref.port, raw))
        assert [a[0] for a in _responses(got)] == [431]


def test_keep_alive_http_1_0_and_100_continue_over_one_connection(servers):
    lean = servers[0]
    raw = (_request(headers={"Content-Length": str(len(BODY)), "Expect": "100-continue"})
           + _request(version="HTTP/1.0", headers={"Content-Length": str(len(BODY)),
                                                   "Connection": "keep-alive"})
           + _request(version="HTTP/1.0") + _request())  # the third closes: no fourth
    answers = _responses(_exchange(lean.port, raw))
    assert [a[0] for a in answers] == [100, 200, 200, 200]
    assert answers[-1][1]["Connection"] == "close" and "Connection" not in answers[2][1]


def test_the_date_header_is_the_time_of_the_answer(servers):
    from email.utils import parsedate_to_datetime

    srv._date = (int(time.time()) - 5, "Mon, 01 Jan 2001 00:00:00 GMT")  # a second gone
    before = time.time()
    _, headers, _ = _responses(_exchange(servers[0].port, _request("GET", "/contract",
                                                                   body=b"")))[0]
    stamp = parsedate_to_datetime(headers["Date"]).timestamp()
    assert int(before) <= stamp <= time.time()


def test_a_stalled_or_idle_client_is_dropped_after_the_timeout(servers, monkeypatch):
    lean = servers[0]
    monkeypatch.setattr(srv._Handler, "timeout", 0.3)
    before = lean.counters["disconnected"]
    stalled = socket.create_connection(("127.0.0.1", lean.port), timeout=10)
    idle = socket.create_connection(("127.0.0.1", lean.port), timeout=10)
    try:
        t0 = time.monotonic()
        stalled.sendall(_request()[:-5])  # the body less its last bytes, then silence
        idle.sendall(_request())  # answered, then nothing more: kept alive until the timeout
        got = b""
        while True:
            chunk = idle.recv(1 << 16)
            if not chunk:
                break
            got += chunk
        assert [a[0] for a in _responses(got)] == [200]
        assert stalled.recv(1 << 16) == b""  # dropped without an answer
        assert time.monotonic() - t0 < 5
        assert lean.counters["disconnected"] == before + 1
    finally:
        stalled.close()
        idle.close()
