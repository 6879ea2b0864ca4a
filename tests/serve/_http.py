"""A stand-in predictor (no artifact) and raw-socket helpers for the HTTP server's tests."""
import http.client
import json
import socket
import threading
import time

import numpy as np

from graph_adapter.serve import Contract, InputField, OutputField
from graph_adapter.serve.columns import Columns
from graph_adapter.serve.pack import column_graphs

CONTRACT = Contract("onnx", 64, 64, 9, (InputField("x", "feature", "node", "float32",
                                                   (None, 2)),),
                    (OutputField("y", "graph", "float32", (None,)),))
GRAPH = {"x": [[1.0, 2.0], [3.5, -1.0]]}
BODY = json.dumps({"graphs": [GRAPH]}).encode()


class Summer:
    """Predicts the sum of ``x`` a graph. ``gate``: calls wait until it is set (a test
    holds requests in flight); ``fail``: an exception every call raises."""

    def __init__(self):
        self.contract = CONTRACT
        self.calls = 0
        self.waiting = 0  # calls waiting at the gate
        self.ignored_keys = set()
        self.gate = threading.Event()
        self.gate.set()
        self.fail = None

    def predict(self, graphs):
        self.waiting += 1
        self.gate.wait(60)
        self.waiting -= 1
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        if isinstance(graphs, Columns):
            graphs = [g.features for g in column_graphs(graphs, CONTRACT)]
        return [np.asarray([np.asarray(g["x"], np.float32).sum()], np.float32)
                for g in graphs]


def request(port, method="GET", path="/health", body=None, headers=None, timeout=30):
    """``(status, headers as a lower-case dict, body parsed as JSON)`` of one request on
    a connection of its own."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body, headers or {})
        r = conn.getresponse()
        raw = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(raw)
    finally:
        conn.close()


def post(port, doc=None, raw=None, headers=None):
    return request(port, "POST", "/predict", raw if raw is not None else json.dumps(doc),
                   {"Content-Type": "application/json", **(headers or {})})


def head(path="/predict", length=None, extra=""):
    """A POST request's header block (``length``: its Content-Length)."""
    cl = "" if length is None else f"Content-Length: {length}\r\n"
    return (f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n{cl}"
            f"{extra}\r\n").encode()


def read_answer(s):
    """Everything the server writes on socket ``s`` until it closes it (a reset: what
    came before it)."""
    out = []
    while True:
        try:
            chunk = s.recv(1 << 16)
        except (ConnectionResetError, BrokenPipeError):
            chunk = b""
        if not chunk:
            return b"".join(out)
        out.append(chunk)


def parse_answer(raw):
    """``(status, headers as a lower-case dict, body bytes)`` of one HTTP answer."""
    headpart, _, body = raw.partition(b"\r\n\r\n")
    lines = headpart.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers, body


def until(check, within=30.0):
    """Whether ``check()`` came true within ``within`` seconds (polled)."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def connect(port, timeout=30):
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)
