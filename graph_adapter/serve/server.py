"""An artifact served over HTTP: :class:`PredictServer` (the app of :mod:`.app` on uvicorn)
and the ``graph-adapter serve`` / ``python -m graph_adapter.serve`` command.

``graph-adapter serve model.pt2 --port 8000`` (which needs no PyG as ``python -m
graph_adapter.serve``) answers ``POST /predict``, ``GET /health``, ``GET /ready`` and
``GET /contract`` (see :mod:`.app`; bodies: :mod:`.decode`). Concurrent requests are merged
into one ``Predictor.predict`` call by a :class:`~graph_adapter.serve.batcher.DynamicBatcher`.

uvicorn reads the requests (httptools' parser where installed, else h11): one event loop
thread takes every connection and decodes small bodies, a worker thread a larger one
(and a child process of its own one over 1 MB), the batcher's thread runs the merged
calls, and the program runs in a child process of its own
(:mod:`.processes.program`; ``--program-in``): AOTInductor's call holds the GIL while it
runs, so in one process no request could be read meanwhile.

Each limit of :class:`~graph_adapter.serve.limits.Limits` is a flag. Two are enforced here,
below the app, on uvicorn's connection: a connection must send each request's header
block within ``--header-timeout-s`` (uvicorn's keep-alive timeout covers only a silent
connection; one that trickles its headers a byte at a time would be kept forever), in at
most 64 KiB; and past ``--max-connections`` a connection's request is answered 503. Every
answer the connection layer writes itself (a malformed request's 400 included) is JSON.
A connection answered before its request's body was read whole (a 413, a 503) is closed
lingering (``--linger-s``, ``--linger-mb``: see :class:`_LingeringClose`), so that a
client still sending its body reads its answer, not a connection reset.

SIGTERM / SIGINT (or :meth:`PredictServer.close`) drains: requests in flight are answered
(with ``Connection: close``), new ones get a 503 JSON body with ``Connection: close`` and
``/ready`` a 503 for ``--drain-s``, then the server stops accepting and exits once the last
answer is written; a second signal stops at once.
"""
from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import socket
import sys
import threading
import time
from typing import Any, Callable, Dict, Optional, Sequence

from .batcher import DynamicBatcher, QueueFullError
from .decode import (NPZ_TYPE, PayloadError, decode_graphs, decode_npz, decode_request,
                     encode_prediction, json_dumps)
from .errors import ServeError
from .limits import Limits, new_request_id

__all__ = ["PredictServer", "serve_main", "build_serve_parser", "MAX_HEADER_BYTES",
           # (their homes are .batcher and .decode; kept importable from here)
           "DynamicBatcher", "QueueFullError", "PayloadError", "decode_graphs", "decode_npz",
           "decode_request", "NPZ_TYPE", "encode_prediction"]

log = logging.getLogger("graph_adapter.serve")

#: the bytes a request's header block may hold (request line included): past it the
#: connection is answered 431 and closed (httptools' parser has no limit of its own)
MAX_HEADER_BYTES = 64 << 10

_REASONS = {400: "Bad Request", 408: "Request Timeout", 431: "Request Header Fields Too Large"}


def _raw_answer(status: int, error: str, message: str) -> bytes:
    """A whole JSON answer that closes the connection, as the connection layer writes it
    (no app ran: a malformed request, a header block too slow or too large)."""
    rid = new_request_id()
    log.info("request %s: %d %s: %s", rid, status, error, message)
    body = json_dumps({"error": error, "message": message, "graph": None, "key": None,
                        "request_id": rid})
    return (f"HTTP/1.1 {status} {_REASONS[status]}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nx-request-id: {rid}\r\nconnection: close"
            f"\r\n\r\n").encode() + body


async def _too_many_connections(scope: Dict[str, Any], receive: Any, send: Any) -> None:
    """The app of a connection past ``max_connections``: each request answered 503."""
    rid = new_request_id()
    body = json_dumps({"error": "TooManyConnectionsError", "graph": None, "key": None,
                        "message": "this server holds its most connections already "
                                   "(--max-connections): retry later",
                        "request_id": rid})
    await send({"type": "http.response.start", "status": 503,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"x-request-id", rid.encode()),
                            (b"retry-after", b"1"), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class _Transport:
    """A connection's transport as uvicorn's code sees it: every call goes to the real
    one, but ``close()`` asks the protocol (which may linger instead, see
    :class:`_LingeringClose`), ``is_closing()`` is true while it lingers, a write while it
    lingers is dropped (its sending half is closed), and the status line of each answer
    written is noted (a 100 Continue told the client to send its body; a 408's client
    is too slow to wait for)."""

    __slots__ = ("real", "protocol")

    def __init__(self, transport: Any, protocol: Any):
        self.real = transport
        self.protocol = protocol

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def write(self, data: Any) -> None:
        if self.protocol.lingering:
            return
        self.protocol.note_answer(data)
        self.real.write(data)

    def close(self) -> None:
        self.protocol.close_or_linger()

    def is_closing(self) -> bool:
        return self.protocol.lingering or self.real.is_closing()


class _LingeringClose:
    """The lingering close of :func:`_protocol_class`'s protocol (a mixin before
    uvicorn's protocol; ``serve_limits``: the server's :class:`Limits`).

    uvicorn closes a connection as soon as an answer with ``Connection: close`` is
    written. Where that answer came before the request's body was read whole (a 413 from
    ``Content-Length``, a 503 of ``--max-queue`` or ``--max-inflight-mb``, a 503 while
    draining), the client is most likely still sending it (``http.client``,
    ``requests``, a proxy without ``Expect: 100-continue`` send the whole body before
    they read), and a socket closed with unread bytes makes the kernel answer with a
    reset, which can discard the answer before the client read it. Instead the answer
    is written, the sending half closed (``write_eof``: the client reads the answer and
    then the end), and what the client still sends is read and dropped, never kept,
    until it closes, ``linger_s`` pass, or it sent ``linger_bytes``; then the connection
    is closed. Not lingered: an answer after the whole body was read, a 408 (a client
    too slow to send its body; the header deadline's 408 too), and a client that sent
    ``Expect: 100-continue`` and was never told to go on (it sends no body). A lingering
    connection holds no request: a drain does not wait for it, uvicorn's stop waits at
    most its deadline, and it counts as open for ``max_connections``.
    """

    serve_limits: Limits
    lingering = False  # the answer is written: reading and dropping until closed
    _linger_timer: Any = None
    _dropped = 0  # bytes read and dropped while lingering
    _unread = False  # the connection layer answered mid-request (400, 431)
    _status = 0  # the status line of the last answer written
    _continued = False  # a 100 Continue was written for this request

    def note_answer(self, data: Any) -> None:
        """Note the status of an answer's head as it is written."""
        if data[:9] == b"HTTP/1.1 " and bytes(data[9:12]).isdigit():
            self._status = int(data[9:12])
            if self._status == 100:
                self._continued = True

    def _drop(self, data: bytes) -> None:
        """What a lingering connection reads: dropped as it comes (the memory stays
        flat), closed past ``linger_bytes``."""
        self._dropped += len(data)
        cap = self.serve_limits.linger_bytes
        if cap is not None and self._dropped > cap:
            self._end_linger()

    def _client_may_be_sending(self) -> bool:
        """Whether the client may still be sending the request just answered (its body
        not read whole), and would wait for its answer meanwhile."""
        if self._unread:
            return self._status != 408
        cycle = self.cycle  # type: ignore[attr-defined]
        if cycle is None or not cycle.more_body or cycle.disconnected or \
                self._status == 408:
            return False
        if not self._continued and not cycle.body and any(
                k == b"expect" and v.lower() == b"100-continue"
                for k, v in cycle.scope["headers"]):
            return False  # told no 100 Continue, it sends no body
        return True

    def close_or_linger(self) -> None:
        """``transport.close()`` as uvicorn calls it: at once, or lingering."""
        t = self.transport.real  # type: ignore[attr-defined]
        if self.lingering or t.is_closing():
            return  # (lingering: its own deadline closes it)
        if self.serve_limits.linger_s > 0 and self._client_may_be_sending():
            self._linger(t)
        else:
            t.close()

    def _linger(self, t: Any) -> None:
        self.lingering = True
        self._stop_timers()
        cycle = self.cycle  # type: ignore[attr-defined]
        if cycle is not None:
            cycle.body = bytearray()  # (what came of the body, never to be read)
            if not cycle.response_complete:  # (a 400 mid-body: the app hears it left)
                cycle.disconnected = True
                cycle.message_event.set()
        self._linger_timer = self.loop.call_later(  # type: ignore[attr-defined]
            self.serve_limits.linger_s, self._end_linger)
        if t.can_write_eof():  # the answer, then the end: the client reads both
            t.write_eof()
        self.flow.resume_reading()  # type: ignore[attr-defined]  # (paused past 64 KiB)

    def _stop_timers(self) -> None:
        """Cancel the connection's timers (the protocol's own, and the linger's)."""
        for name in ("_head_timer", "timeout_keep_alive_task", "_linger_timer"):
            timer = getattr(self, name, None)
            if timer is not None:
                timer.cancel()
                setattr(self, name, None)

    def _end_linger(self) -> None:
        self._linger_timer = None
        self.transport.real.close()  # type: ignore[attr-defined]


def _uvicorn_protocol(http: str) -> Any:
    """uvicorn's HTTP protocol class: httptools' where installed and ``http`` allows."""
    if http in ("auto", "httptools"):
        try:
            from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
            return HttpToolsProtocol
        except ImportError:
            if http == "httptools":
                raise
    from uvicorn.protocols.http.h11_impl import H11Protocol
    return H11Protocol


def _protocol_class(limits: Limits, http: str = "auto") -> type:
    """uvicorn's HTTP protocol (httptools' where installed and ``http`` allows, else h11's)
    with the header deadline and size, the connection limit, JSON for its own 400s, and
    the lingering close of :class:`_LingeringClose`."""
    base = _uvicorn_protocol(http)

    class Protocol(_LingeringClose, base):  # type: ignore[misc, valid-type]
        serve_limits = limits
        _head_timer: Any = None
        _head_bytes = 0

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            # (uvicorn's FlowControl keeps the real one: pausing reads is not proxied)
            self.transport = _Transport(transport, self)
            if limits.max_connections is not None and \
                    len(self.connections) > limits.max_connections:
                self.app = _too_many_connections  # (this connection's requests only)
            self._arm()

        def _arm(self) -> None:
            """The next header block's deadline (from the opening, or the last answer)."""
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_bytes = 0
            self._continued = False
            self._head_timer = self.loop.call_later(limits.header_timeout_s, self._late)

        def _waiting_for_head(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _late(self) -> None:
            self._head_timer = None
            if self._waiting_for_head() and not self.transport.is_closing():
                if self._head_bytes:  # part of a request came: say why it is closed
                    self.transport.write(_raw_answer(
                        408, "HeaderTimeoutError", f"the request's headers did not come "
                        f"within {limits.header_timeout_s} s (--header-timeout-s)"))
                self.transport.close()  # (a 408: never lingered)

        def data_received(self, data: bytes) -> None:
            if self.lingering:
                return self._drop(data)
            waiting = self._waiting_for_head()
            super().data_received(data)
            if self.transport.is_closing():
                return
            if waiting and self._waiting_for_head():  # still no whole header block
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEADER_BYTES:
                    self._unread = True
                    self.transport.write(_raw_answer(
                        431, "HeaderTooLargeError", f"a header block of more than "
                        f"{MAX_HEADER_BYTES} bytes: send fewer or shorter headers"))
                    self.transport.close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def shutdown(self) -> None:
            if not self.lingering:  # (a lingering one ends at its own deadline)
                super().shutdown()

        def connection_lost(self, exc: Optional[Exception]) -> None:
            self._stop_timers()
            super().connection_lost(exc)

        def send_400_response(self, msg: str) -> None:
            self._unread = True
            self.transport.write(_raw_answer(400, "BadRequest", f"not an HTTP/1.1 request "
                                             f"this server reads: {msg}"))
            self.transport.close()

    Protocol.__name__ = Protocol.__qualname__ = f"Limited{base.__name__}"
    return Protocol


#: file descriptors kept free of client connections (the listening socket, the program's
#: pipes, the artifact, logs): past ``RLIMIT_NOFILE`` less these, a connection could not
#: even be answered its 503
_FDS_KEPT = 64


def _within_open_files(limits: Limits) -> Limits:
    """``limits`` with ``max_connections`` at most what the process may open (its soft
    ``RLIMIT_NOFILE`` less :data:`_FDS_KEPT`), said in the log where it is cut."""
    import dataclasses

    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):  # (no such limit here)
        return limits
    if soft == resource.RLIM_INFINITY or limits.max_connections is None:
        return limits
    room = max(1, soft - _FDS_KEPT)
    if limits.max_connections <= room:
        return limits
    log.warning("max_connections=%d is more than this process may open (ulimit -n %d): "
                "%d it is", limits.max_connections, soft, room)
    return dataclasses.replace(limits, max_connections=room)


class PredictServer:
    """The HTTP server of one loaded artifact: :func:`~graph_adapter.serve.app.create_app`
    run by uvicorn in a thread of its own.

    ``predictor``: a :class:`~graph_adapter.serve.Predictor` (``serve.load(path)``).
    ``port=0`` picks a free port (:attr:`port`, :attr:`url`; the port is bound when this
    returns). :meth:`start` serves in a background thread; :meth:`close` (or leaving a
    ``with`` block) drains (:meth:`drain`), stops, answers what is queued and releases
    the port. ``limits``: a :class:`Limits` (``max_queue``, ``max_body_bytes`` and
    ``request_timeout_s``, where given, replace its fields).
    """

    def __init__(self, predictor: Any, host: str = "127.0.0.1", port: int = 8000, *,
                 max_delay_ms: float = 2.0, max_batch: Optional[int] = None,
                 max_queue: Optional[int] = None, max_body_bytes: Optional[int] = None,
                 request_timeout_s: Optional[float] = None, verbose: bool = False,
                 limits: Optional[Limits] = None, http: str = "auto", loop: str = "auto",
                 backlog: int = 1024):
        import dataclasses

        import uvicorn

        from .app import create_app

        limits = limits if limits is not None else Limits()
        given = {"max_queue": max_queue, "max_body_bytes": max_body_bytes,
                 "request_timeout_s": request_timeout_s}
        limits = dataclasses.replace(limits, **{k: v for k, v in given.items()
                                                if v is not None})
        limits = _within_open_files(limits)
        self.limits = limits
        self.app = create_app(predictor, limits, max_delay_ms=max_delay_ms,
                              max_batch=max_batch)
        self.state = self.app.state.serving
        self.predictor = predictor
        self.batcher = self.state.batcher
        self.counters = self.state.counters
        self.verbose = verbose
        self.thread: Optional[threading.Thread] = None
        self._force = False
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind((host, port))
            # a deep backlog: clients connecting at once while the loop is busy are queued
            # by the kernel, not dropped (a dropped SYN is retried after 1 s)
            self.socket.listen(backlog)
        except OSError:
            self.socket.close()
            self.state.close()
            raise
        self.socket.setblocking(False)
        self.host = host
        config = uvicorn.Config(
            self.app, http=_protocol_class(limits, http), loop=loop, lifespan="off",
            log_config=None, access_log=verbose, log_level="info" if verbose else "warning",
            timeout_keep_alive=limits.keep_alive_s, backlog=backlog, server_header=False,
            timeout_graceful_shutdown=max(1, int(limits.shutdown_timeout_s)),
            proxy_headers=False)
        self.uvicorn = uvicorn.Server(config)

    @property
    def port(self) -> int:
        return int(self.socket.getsockname()[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def health(self) -> Dict[str, Any]:
        """``GET /health``'s document (the artifact, the settings, the counters)."""
        return self.state.health()

    def start(self, timeout: float = 30.0) -> "PredictServer":
        """Serve in a daemon thread; returns once uvicorn accepts connections."""
        self.thread = threading.Thread(target=self.uvicorn.run, args=([self.socket],),
                                       name="graph_adapter-http", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.uvicorn.started and self.thread.is_alive() and \
                time.monotonic() < deadline:
            time.sleep(0.005)
        if not self.uvicorn.started:
            raise RuntimeError("the HTTP server did not start (see the log above)")
        return self

    def drain(self) -> float:
        """Take no more requests: from now on new ones are answered 503 (``Connection:
        close``) and ``/ready`` says 503; returns once ``drain_s`` passed and the requests
        in flight are answered (at most ``shutdown_timeout_s``): the seconds it took."""
        self.state.draining = True
        t0 = time.monotonic()
        while not self._force and time.monotonic() - t0 < self.limits.shutdown_timeout_s \
                and (time.monotonic() - t0 < self.limits.drain_s or self.state.in_flight):
            time.sleep(0.01)
        return time.monotonic() - t0

    def close(self, timeout: float = 10.0, drain: bool = True) -> None:
        """Drain (``drain``), stop serving, answer what is queued, release the port."""
        if self.thread is not None:
            took = self.drain() if drain else 0.0
            # uvicorn's own wait for the connections left: what is left of the timeout
            self.uvicorn.config.timeout_graceful_shutdown = max(
                1, int(self.limits.shutdown_timeout_s - took))
            self.uvicorn.should_exit = True
            self.thread.join(timeout + self.limits.shutdown_timeout_s)
            self.thread = None
        self.state.close(timeout)
        self.socket.close()

    def stop_now(self) -> None:
        """Stop without waiting (a second SIGTERM): requests in flight are cut."""
        self._force = True
        self.uvicorn.force_exit = True
        self.uvicorn.should_exit = True

    def __enter__(self) -> "PredictServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# -- the command ---------------------------------------------------------------------------

def build_serve_parser(prog: str = "graph-adapter serve") -> argparse.ArgumentParser:
    """The options of ``graph-adapter serve`` / ``python -m graph_adapter.serve``."""
    d = Limits()
    p = argparse.ArgumentParser(prog=prog, description="Serve an artifact of "
                                "graph_adapter.export over HTTP + JSON (POST /predict, GET "
                                "/health, GET /ready, GET /contract), merging concurrent "
                                "requests.")
    p.add_argument("artifact", help="a .pt2 or .onnx file written by graph_adapter.export")
    p.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1 (this machine "
                   "only; 0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=8000, help="default 8000; 0: a free one")
    p.add_argument("--threads", type=int, default=None,
                   help="the program's intra-op threads (serve.load(threads=)); default: "
                        "the runtime's. A .pt2 program runs in a process of its own, "
                        "beside the server's, which decodes requests on one more core")
    p.add_argument("--program-in", choices=["auto", "child", "server"], default="auto",
                   help="where the program runs: child, a process of its own (a .pt2 "
                        "program holds Python's lock while it runs; there, requests are "
                        "decoded beside it); server, this process; auto (default): child, "
                        "unless an input's dtype cannot cross the pipe (bfloat16)")
    p.add_argument("--max-delay-ms", type=float, default=2.0,
                   help="how long the oldest queued request waits, at most, for others "
                        "already in the server (bodies being read or decoded) to merge "
                        "with (default 2; 0: merge only what is queued already)")
    p.add_argument("--max-batch", type=int, default=None,
                   help="graphs a merged call holds at most (default: one call of the "
                        "largest budget's graph slots)")
    g = p.add_argument_group("limits (each answered in JSON)")
    g.add_argument("--max-queue", type=int, default=d.max_queue,
                   help="requests in the server at once (read, decoded, queued or run); "
                        "past it a request is answered 503 with Retry-After before its "
                        f"body is read (default {d.max_queue})")
    g.add_argument("--max-connections", type=int, default=d.max_connections,
                   help="open client connections; past it a connection's request is "
                        f"answered 503 and it is closed (default {d.max_connections})")
    g.add_argument("--max-body-mb", type=float, default=d.max_body_bytes / (1 << 20),
                   help="a request body's size: 413 from its Content-Length, before it is "
                        f"read (default {d.max_body_bytes >> 20})")
    g.add_argument("--max-decoded-mb", type=float, default=d.max_decoded_bytes / (1 << 20),
                   help="what an .npz body's arrays may unpack to, read from their headers "
                        f"before unpacking: 413 (default {d.max_decoded_bytes >> 20})")
    g.add_argument("--max-inflight-mb", type=float,
                   default=d.max_inflight_bytes / (1 << 20),
                   help="the body bytes of all requests in the server at once; past it a "
                        "request is answered 503 with Retry-After before its body is read "
                        f"(default {d.max_inflight_bytes >> 20})")
    g.add_argument("--max-graphs", type=int, default=d.max_graphs,
                   help=f"graphs a request may hold: 413 (default {d.max_graphs})")
    g.add_argument("--header-timeout-s", type=float, default=d.header_timeout_s,
                   help="seconds a connection has to send a request's headers; then it is "
                        f"closed (default {d.header_timeout_s:g})")
    g.add_argument("--body-timeout-s", type=float, default=d.body_timeout_s,
                   help="seconds a request has to send its whole body: 408, closed "
                        f"(default {d.body_timeout_s:g})")
    g.add_argument("--keep-alive-s", type=float, default=d.keep_alive_s,
                   help=f"an idle connection is kept this long (default {d.keep_alive_s:g})")
    g.add_argument("--request-timeout-s", type=float, default=d.request_timeout_s,
                   help="seconds from a request's body to its answer: 504 (default "
                        f"{d.request_timeout_s:g})")
    g.add_argument("--drain-s", type=float, default=d.drain_s,
                   help="on SIGTERM, seconds new requests are answered 503 (Connection: "
                        "close) and /ready 503 before the server stops accepting "
                        f"(default {d.drain_s:g})")
    g.add_argument("--shutdown-timeout-s", type=float, default=d.shutdown_timeout_s,
                   help="on SIGTERM, the longest wait for the requests in flight (default "
                        f"{d.shutdown_timeout_s:g})")
    g.add_argument("--linger-s", type=float, default=d.linger_s,
                   help="a connection answered before its request's body was read (413, "
                        "503) reads and drops what the client still sends for at most "
                        "this long, so that the client reads its answer instead of a "
                        f"connection reset; 0: closed at once (default {d.linger_s:g})")
    g.add_argument("--linger-mb", type=float, default=d.linger_bytes / (1 << 20),
                   help="the most such a connection may send meanwhile (read and dropped, "
                        f"never kept); then it is closed (default {d.linger_bytes >> 20})")
    p.add_argument("--http", choices=["auto", "httptools", "h11"], default="auto",
                   help="uvicorn's HTTP parser (default: httptools where installed)")
    p.add_argument("--verbose", action="store_true", help="log every request")
    return p


def _limits(args: argparse.Namespace) -> Limits:
    mb = 1 << 20
    return Limits(max_connections=args.max_connections, header_timeout_s=args.header_timeout_s,
                  body_timeout_s=args.body_timeout_s, keep_alive_s=args.keep_alive_s,
                  max_body_bytes=int(args.max_body_mb * mb),
                  max_decoded_bytes=int(args.max_decoded_mb * mb), max_graphs=args.max_graphs,
                  max_inflight_bytes=int(args.max_inflight_mb * mb),
                  max_queue=args.max_queue, request_timeout_s=args.request_timeout_s,
                  drain_s=args.drain_s, shutdown_timeout_s=args.shutdown_timeout_s,
                  linger_s=args.linger_s, linger_bytes=int(args.linger_mb * mb))


def serve_main(argv: Optional[Sequence[str]] = None, prog: str = "graph-adapter serve", *,
               stop: Optional[threading.Event] = None,
               started: Optional[Callable[[PredictServer], Any]] = None) -> int:
    """Run the server until SIGINT/SIGTERM (or ``stop`` is set), draining before it exits;
    returns the exit code (2: a usage error, a bad limit, a missing runtime or file, a
    port in use; the message says which). ``started(server)`` is called once it listens
    (a test reads ``server.url`` there)."""
    try:
        args = build_serve_parser(prog).parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2)
        return int(e.code or 0)
    predictor = None
    try:
        limits = _limits(args)
        predictor = _load_predictor(args.artifact, args.threads, args.program_in)
        server = PredictServer(predictor, args.host, args.port, max_delay_ms=args.max_delay_ms,
                               max_batch=args.max_batch, limits=limits, verbose=args.verbose,
                               http=args.http)
    except (ServeError, OSError, ValueError, ImportError) as e:  # no file, port taken, ...
        if predictor is not None and hasattr(predictor, "close"):
            predictor.close()
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    if not logging.getLogger().handlers:  # (the request ids of failures, with their traces)
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                            format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # the objects alive now (torch, the program, the modules) are never garbage: kept out
    # of the collector's full passes, which a large request's JSON lists trigger (a body
    # of 256 molecules: json.loads 50 -> 10 ms in a process holding a dataset, measured)
    gc.collect()  # (no garbage frozen with them)
    gc.freeze()
    # and a request's lists are short-lived and acyclic: at the default 700 allocations a
    # pass, reading 256 molecules ran some 20 collections; a pass every 50000 costs next
    # to nothing
    gc.set_threshold(max(gc.get_threshold()[0], 50_000), *gc.get_threshold()[1:])
    if server.state.check_here:  # the program's child waits for the batcher's next call
        # the batcher thread, woken by the child's answer, waits for the GIL that a
        # decoding thread holds: up to the switch interval (5 ms) in which the child
        # idles; 0.5 ms hands it over sooner
        sys.setswitchinterval(min(sys.getswitchinterval(), 0.0005))
    stop = stop or threading.Event()
    previous = {}

    def on_signal(*_: Any) -> None:
        if stop.is_set():  # a second signal: stop now
            server.stop_now()
        stop.set()

    if threading.current_thread() is threading.main_thread():  # Ctrl-C, docker stop
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, on_signal)
    c = predictor.contract
    try:
        server.start()
        print(f"serving {args.artifact} ({c.format}, {len(c.rungs) or 1} budget(s), max "
              f"batch {server.batcher.max_batch} graphs, max delay {args.max_delay_ms} ms) "
              f"on {server.url}: POST /predict, GET /health, GET /ready, GET /contract",
              flush=True)
        if started is not None:
            started(server)
        while not stop.wait(0.1):
            pass
        print("stopping: draining the requests in flight", flush=True)
    finally:
        server.close()
        if hasattr(predictor, "close"):  # the program's process: after the queue drained
            predictor.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"stopped: {server.health()}", flush=True)
    return 0


def _load_predictor(path: str, threads: Optional[int], where: str = "auto") -> Any:
    """The server's predictor (``where``: ``--program-in``): ``auto`` and ``child`` run
    the program in a child process (a ``.pt2`` one holds the GIL while it runs, and
    packing an ``.onnx`` one's calls would hold it against decoding:
    :mod:`.processes.program`); a contract with an input dtype numpy lacks stays here."""
    from .runtime import load, read_contract

    if not os.path.exists(path):
        raise FileNotFoundError(f"no artifact at {path}")
    if where == "server":
        return load(path, threads=threads)
    from .processes.program import ProcessPredictor, crosses_pipes

    contract = read_contract(path)
    if not crosses_pipes(contract):  # (bfloat16 inputs: checked by torch)
        return load(path, threads=threads)
    return ProcessPredictor(path, threads, contract)
