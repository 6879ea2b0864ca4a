"""The HTTP API of an artifact as one ASGI app (Starlette): :func:`create_app`.

Routes (query strings are ignored):

* ``POST /predict``: a body of graphs (:mod:`.decode`: JSON graphs, JSON columns or an
  ``.npz``) -> ``200 {"predictions": [...]}``, one per graph in request order;
* ``GET /health``: liveness, answered by the event loop alone (never behind the batcher
  or the program's process): ``200 {"status": "ok" | "stopping", ...counters}``; ``503``
  with ``"status": "failed: ..."`` once the program's child process died past its
  restarts (a liveness probe's cue to restart the server);
* ``GET /ready``: readiness: ``200`` while the program can answer; ``503`` while its child
  process is starting again, once it stays down, and while the server drains;
* ``GET /contract``: the artifact's JSON contract.

Every answer but a ``200`` is JSON ``{"error", "message", "graph", "key", "request_id"}``
(404 and 405 included); every answer carries ``X-Request-Id`` (the client's own, where it
sent a plain one, else a new one). A failure that is not the request's fault is logged
here with its request id and answered ``500`` without its text (no stack trace, path or
address ever leaves the server).

The app is a plain function of a predictor (``predict(graphs)``, ``contract``, and,
where its program runs in a child process, ``check`` / ``send`` / ``receive`` /
``exited``) and a :class:`~graph_adapter.serve.limits.Limits`: :class:`PredictServer`
runs it on uvicorn, and any ASGI server (Ray Serve's ingress included) can mount it.
"""
from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .batcher import DynamicBatcher, QueueFullError
from .columns import Columns
from .decode import PayloadError, decode_request, encode_prediction, json_dumps
from .errors import GraphInputError, ServeError
from .limits import (BodyTimeoutError, DeadlineExceededError, Limits, OverloadedError,
                     ServerStoppingError, TooLargeError, new_request_id)
from .processes.decoder import DecodeProcess

__all__ = ["create_app", "ServingState", "error_doc", "status_of"]

log = logging.getLogger("graph_adapter.serve")

#: the ASGI scope key of a request's id
REQUEST_ID = "graph_adapter.request_id"
#: a client's own ``X-Request-Id`` is kept where it is this plain (else a new one is made:
#: an id is written into the server's log, which must not take a client's control bytes)
_PLAIN_ID = re.compile(rb"[A-Za-z0-9._:-]{1,64}")
#: a predictions document this large (graphs) is written in a worker thread, not the loop
_ENCODE_IN_THREAD = 64
#: a body this small (bytes; some 50 molecules as JSON lists, about 1 ms to read) is decoded
#: in the event loop: reading holds the GIL either way, and the hop to a worker thread and
#: back, with the threads' contention for the GIL, cost more server CPU than it saved (8
#: clients of 16-molecule requests, 18 KB bodies: 11% less CPU a molecule in the loop)
_DECODE_IN_LOOP = 64 << 10
#: a body larger than this (bytes; some 900 molecules as JSON lists, 25 ms to read) is
#: read in a process of its own where the program runs in one
#: (:mod:`.processes.decoder`): the JSON parser holds the interpreter's lock for a whole
#: body, stalling every other request
_DECODE_IN_PROCESS = 1 << 20


class InternalError(ServeError):
    """A failure that is not the request's fault (answered 500, its text logged only)."""


class _Disconnected(Exception):
    """The client left before its body was read: nobody to answer."""


def status_of(e: BaseException) -> int:
    """The HTTP status of an error raised for a request."""
    if isinstance(e, PayloadError):
        return 400
    if isinstance(e, TooLargeError):
        return 413
    if isinstance(e, GraphInputError):
        return 422
    if isinstance(e, BodyTimeoutError):
        return 408
    if isinstance(e, (OverloadedError, QueueFullError)):
        return 503
    if isinstance(e, (DeadlineExceededError, TimeoutError)):
        return 504
    return 500


def _safe_message(e: BaseException, status: int, request_id: str) -> Tuple[str, str]:
    """``(error name, message)`` fit to send: a 4xx's and our own 5xx's texts are ours; any
    other failure's text (a runtime's C++ trace, temp paths, addresses) stays in the log."""
    if status < 500 or isinstance(e, (OverloadedError, QueueFullError, DeadlineExceededError)):
        return type(e).__name__, str(e)
    # the program's child gone: the worker's own texts (no trace: what the child raised is
    # wrapped as "the program's process failed: ...", which stays in the log)
    if type(e).__name__ == "WorkerError" and not str(e).startswith(
            "the program's process failed"):
        return type(e).__name__, str(e)
    return "InternalError", (f"the server failed on this request (not the request's "
                             f"fault); its log holds the details under request id "
                             f"{request_id}")


def error_doc(e: BaseException, request_id: str, status: Optional[int] = None
              ) -> Dict[str, Any]:
    """The JSON error body of ``e``: ``{"error", "message", "graph", "key", "request_id"}``."""
    name, message = _safe_message(e, status or status_of(e), request_id)
    return {"error": name, "message": message, "graph": getattr(e, "graph", None),
            "key": getattr(e, "key", None), "request_id": request_id}


def _json_response(status: int, doc: Any, headers: Optional[Dict[str, str]] = None
                   ) -> Response:
    return Response(json_dumps(doc), status, headers, media_type="application/json")


class ServingState:
    """What the app's routes share: the predictor, its batcher, the limits, the counters,
    the draining flag and the program child's state (watched in a thread of its own, so
    that ``/health`` and ``/ready`` never wait for the predictor's lock)."""

    def __init__(self, predictor: Any, limits: Limits, batcher: DynamicBatcher):
        self.predictor = predictor
        self.limits = limits
        self.batcher = batcher
        #: a predictor whose program runs elsewhere (a child process): each request's
        #: graphs are checked in a worker thread, the program's runs overlapping
        self.check_here = bool(getattr(predictor, "takes_checked", False))
        self.contract_json = predictor.contract.to_json().encode()
        #: large bodies read in a child process (started on the first one), where the
        #: program runs in one too (its contract then crosses pipes)
        self.decoder = DecodeProcess(predictor.contract) if self.check_here else None
        self.started = time.time()
        self.counters: Dict[str, int] = {"disconnected": 0, "overloaded": 0,
                                         "timed_out": 0, "internal_errors": 0}
        self.in_flight = 0  # requests admitted, not yet answered (the event loop's count)
        self.coming = 0  # of which not yet queued in the batcher (read or decoded now)
        self.inflight_bytes = 0  # their bodies' bytes (max_inflight_bytes)
        self.draining = False
        self.restarting = False  # the program's child is being started again
        self.failed: Optional[int] = None  # its exit code once it stays down
        self._stop = threading.Event()
        self._watcher: Optional[threading.Thread] = None
        if hasattr(predictor, "exited") and hasattr(predictor, "process"):
            self._watcher = threading.Thread(target=self._watch, daemon=True,
                                             name="graph_adapter-watch")
            self._watcher.start()

    def count(self, what: str) -> None:
        self.counters[what] = self.counters.get(what, 0) + 1

    def _watch(self, every_s: float = 0.2) -> None:
        """Start the program's child again once it died (``exited()``, which takes the
        predictor's lock and waits for the new child to load: here, never in a route)."""
        p = self.predictor
        while not self._stop.wait(every_s):
            proc = getattr(p, "process", None)
            if proc is None or proc.poll() is None or self.failed is not None:
                continue
            self.restarting = True
            try:
                self.failed = p.exited()
            except Exception:  # noqa: BLE001 - a predictor closed meanwhile
                log.exception("watching the program's process")
            finally:
                self.restarting = False

    def program_state(self) -> str:
        """``"up"``, ``"restarting"`` or ``"failed: ..."`` (no lock taken)."""
        if self.failed is not None:
            return (f"failed: the program's process exited with code {self.failed}; "
                    f"restart the server")
        proc = getattr(self.predictor, "process", None)
        if self.restarting or (proc is not None and proc.poll() is not None):
            return "restarting"
        return "up"

    def health(self) -> Dict[str, Any]:
        """``GET /health``'s document: the artifact, the settings and the counters."""
        c, b, p = self.predictor.contract, self.batcher, self.predictor
        program = self.program_state()
        status = program if program.startswith("failed") else \
            "stopping" if self.draining or b.closed else "ok"
        return {"status": status, "program": program, "format": c.format,
                "budget": {"nodes": c.nodes, "edges": c.edges, "graphs": c.graphs},
                "rungs": len(c.rungs), "max_batch": b.max_batch,
                "max_delay_ms": b.max_delay_s * 1e3, "queued": len(b.queue),
                "in_flight": self.in_flight, "inflight_bytes": self.inflight_bytes,
                "calls": getattr(p, "calls", 0), **b.stats,
                **self.counters, "program_restarts": getattr(p, "restarts", 0),
                "sent_ahead": getattr(p, "sent_ahead", 0),
                "program_pid": getattr(p, "pid", None) or os.getpid(),
                "uptime_s": round(time.time() - self.started, 3)}

    def close(self, timeout: Optional[float] = 10.0) -> None:
        """Answer what is queued, stop the batcher and the watcher (the predictor is the
        caller's to close)."""
        self._stop.set()
        self.batcher.close(timeout)
        if self.decoder is not None:
            self.decoder.close()
        if self._watcher is not None:
            self._watcher.join(timeout)


class _Envelope:
    """The app's outer layer: a request id for every request (scope, ``X-Request-Id``),
    ``Connection: close`` on every answer while the server drains, and any error that
    escaped a route answered 500 in JSON (logged with its id and trace)."""

    def __init__(self, app: Any, state: ServingState):
        self.app = app
        self.state = state

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        rid = None
        for k, v in scope.get("headers", ()):
            if k == b"x-request-id" and _PLAIN_ID.fullmatch(v):
                rid = v.decode()
        rid = rid or new_request_id()
        scope[REQUEST_ID] = rid
        started = False

        async def send_with_id(message: Dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = [*message.get("headers", ()), (b"x-request-id", rid.encode())]
                if self.state.draining and not any(k.lower() == b"connection"
                                                   for k, _ in headers):
                    headers.append((b"connection", b"close"))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception as e:  # noqa: BLE001 - every failure answered, in JSON
            self.state.count("internal_errors")
            log.error("request %s (%s %s) failed", rid, scope.get("method"),
                      scope.get("path"), exc_info=e)
            if not started:
                await _json_response(500, error_doc(e, rid, 500))(scope, receive,
                                                                  send_with_id)


def _overloaded_by_bytes(state: ServingState, more: int, own: int = 0
                         ) -> Optional[OverloadedError]:
    """The refusal of ``more`` body bytes past ``max_inflight_bytes`` (``None``: room);
    ``own``: what the asking request holds there already."""
    cap = state.limits.max_inflight_bytes
    if cap is None or state.inflight_bytes + more <= cap or state.inflight_bytes == own:
        return None  # (a request alone is held to max_body_bytes only)
    return OverloadedError(f"the requests in the server hold {state.inflight_bytes} body "
                           f"bytes; this server holds at most {cap} at once "
                           f"(--max-inflight-mb): retry later")


async def _read_body(request: Request, limits: Limits, state: ServingState,
                     reserved: List[int]) -> bytes:
    """The request's body, read within ``body_timeout_s`` and ``max_body_bytes`` (refused
    from its ``Content-Length`` before a byte is read, else as soon as it passes); a body
    without a length (chunked) reserves its bytes in ``state.inflight_bytes`` as they
    come (``reserved[0]``: what this request holds there)."""
    cap = limits.max_body_bytes
    length = request.headers.get("content-length")
    if cap is not None and length is not None and length.isdigit() and int(length) > cap:
        raise TooLargeError(f"a body of {length} bytes; this server reads at most {cap} "
                            f"(--max-body-mb): split the request")
    chunks: List[bytes] = []
    got = 0
    receive = request.receive
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout_at(loop.time() + limits.body_timeout_s):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise _Disconnected()
                chunk = message.get("body", b"")
                got += len(chunk)
                if got > reserved[0]:  # (past its Content-Length's reservation: chunked)
                    refused = _overloaded_by_bytes(state, got - reserved[0], reserved[0])
                    if refused is not None:
                        raise refused
                    state.inflight_bytes += got - reserved[0]
                    reserved[0] = got
                if cap is not None and got > cap:
                    raise TooLargeError(f"a body of more than {cap} bytes; this server "
                                        f"reads at most {cap} (--max-body-mb): split the "
                                        f"request")
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
    except TimeoutError:
        raise BodyTimeoutError(f"the body was not sent whole within "
                               f"{limits.body_timeout_s} s (--body-timeout-s; {got} bytes "
                               f"came): send it at once") from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class _Routes:
    """The app's route handlers over one :class:`ServingState`."""

    def __init__(self, state: ServingState):
        self.state = state
        self.predictor = state.predictor
        self.limits = state.limits
        self.batcher = state.batcher

    def refusal(self, e: BaseException, request: Request, close: bool = False,
                retry_after: Optional[int] = None) -> Response:
        """``e`` answered in JSON (``close``: the body was not read whole, so this
        connection cannot go on; ``retry_after``: seconds, a ``Retry-After`` header)."""
        status = status_of(e)
        rid = request.scope.get(REQUEST_ID, "-")
        if status >= 500 and status != 503:
            log.warning("request %s: %d %s: %s", rid, status, type(e).__name__, e)
        headers = {}
        if close:
            headers["connection"] = "close"
        if retry_after is not None:
            headers["retry-after"] = str(retry_after)
        return _json_response(status, error_doc(e, rid, status), headers)

    def decode(self, body: bytes, content_type: str) -> Any:
        """A body's graphs (in the event loop, a worker thread, or for a large body the
        reading process), checked where the program runs elsewhere."""
        p, limits, decoder = self.predictor, self.limits, self.state.decoder
        if decoder is not None and len(body) > _DECODE_IN_PROCESS:  # (checked there)
            graphs = decoder.decode(body, content_type, max_graphs=limits.max_graphs,
                                    max_decoded_bytes=limits.max_decoded_bytes)
            p.ignored_keys.update(graphs.ignored)
            return graphs
        graphs = decode_request(body, content_type, p.contract, max_graphs=limits.max_graphs,
                                max_decoded_bytes=limits.max_decoded_bytes)
        if isinstance(graphs, Columns):  # checked as it was read
            p.ignored_keys.update(graphs.ignored)
        elif self.state.check_here:  # the program's process runs meanwhile
            graphs = p.check(graphs)
        return graphs

    async def predict(self, request: Request) -> Response:
        """``POST /predict``: admitted (not draining, ``max_queue``) before its body is
        read, then read, decoded, queued and answered within the limits."""
        state = self.state
        if state.draining:
            return self.refusal(ServerStoppingError(
                "the server is stopping: send the request to another replica"), request,
                close=True, retry_after=1)
        if state.in_flight >= self.limits.max_queue:  # before the body is read or decoded
            state.count("overloaded")
            return self.refusal(OverloadedError(
                f"{state.in_flight} requests are in the server already (--max-queue): "
                f"retry later"), request, close=True, retry_after=1)
        length = request.headers.get("content-length", "")
        length_n = int(length) if length.isdigit() else 0
        refused = _overloaded_by_bytes(state, length_n)
        if refused is not None:  # the memory its body would take: before it is read
            state.count("overloaded")
            return self.refusal(refused, request, close=True, retry_after=1)
        reserved = [length_n]  # (its body's bytes, held until it is answered)
        coming = [True]  # (until queued: the batcher's merges wait for such requests)
        state.in_flight += 1
        state.coming += 1
        state.inflight_bytes += length_n
        try:
            return await self._predict(request, reserved, coming)
        finally:
            state.in_flight -= 1
            state.coming -= coming[0]
            state.inflight_bytes -= reserved[0]

    async def _predict(self, request: Request, reserved: List[int], coming: List[bool]
                       ) -> Response:
        state, limits, batcher = self.state, self.limits, self.batcher
        try:
            body = await _read_body(request, limits, state, reserved)
        except _Disconnected:
            state.count("disconnected")
            return Response(status_code=400)  # (nobody reads it)
        except (TooLargeError, BodyTimeoutError) as e:
            return self.refusal(e, request, close=True)
        except OverloadedError as e:
            state.count("overloaded")
            return self.refusal(e, request, close=True, retry_after=1)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limits.request_timeout_s
        done = loop.create_future()

        def wake() -> None:  # (from the batcher's thread)
            loop.call_soon_threadsafe(lambda: done.done() or done.set_result(None))

        try:
            ctype = request.headers.get("content-type", "")
            if len(body) <= _DECODE_IN_LOOP:
                graphs = self.decode(body, ctype)
            else:
                graphs = await run_in_threadpool(self.decode, body, ctype)
            del body
            state.coming -= coming[0]
            coming[0] = False
            ticket = batcher.enqueue(graphs, wake)
            try:
                async with asyncio.timeout_at(deadline):
                    await done
            except TimeoutError:
                state.count("timed_out")
                ticket.answer(error=DeadlineExceededError(
                    f"no answer within {limits.request_timeout_s} s (--request-timeout-s): "
                    f"the server is busy; retry later or send fewer graphs"))
            preds = DynamicBatcher.result(ticket)
            if len(preds) > _ENCODE_IN_THREAD:
                out = await run_in_threadpool(_encode, preds)
            else:
                out = _encode(preds)
        except QueueFullError as e:
            return self.refusal(OverloadedError(str(e)) if not batcher.closed else
                                ServerStoppingError(str(e)), request, retry_after=1)
        except Exception as e:  # noqa: BLE001 - every failure answered, named
            if status_of(e) == 500:
                state.count("internal_errors")
                log.error("request %s: POST /predict failed", request.scope.get(REQUEST_ID),
                          exc_info=e)
            return self.refusal(e, request)
        return Response(out, 200, media_type="application/json")

    async def health(self, request: Request) -> Response:
        """``GET /health``: liveness (the event loop's own answer)."""
        doc = self.state.health()
        return _json_response(503 if doc["status"].startswith("failed") else 200, doc)

    async def ready(self, request: Request) -> Response:
        """``GET /ready``: 200 while the program can answer and the server takes requests."""
        program = self.state.program_state()
        stopping = self.state.draining or self.batcher.closed
        if program == "up" and not stopping:
            return _json_response(200, {"status": "ready"})
        why = "stopping" if stopping else program
        doc = error_doc(OverloadedError(f"not ready: {why}"),
                        request.scope.get(REQUEST_ID, "-"), 503)
        return _json_response(503, {**doc, "error": "NotReady", "status": why})

    async def contract(self, request: Request) -> Response:
        """``GET /contract``: the artifact's JSON contract."""
        return Response(self.state.contract_json, 200, media_type="application/json")

    async def http_error(self, request: Request, exc: Exception) -> Response:
        """Starlette's 404 / 405 (and any other ``HTTPException``) in JSON."""
        assert isinstance(exc, HTTPException)
        name = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "HTTPError")
        message = {404: "no such route: GET /health, GET /ready, GET /contract, POST "
                        "/predict",
                   405: "method not allowed here: POST /predict; GET /health, /ready, "
                        "/contract"}.get(exc.status_code, str(exc.detail))
        doc = {"error": name, "message": message, "graph": None, "key": None,
               "request_id": request.scope.get(REQUEST_ID, "-")}
        return _json_response(exc.status_code, doc, dict(exc.headers or {}))


def create_app(predictor: Any, limits: Optional[Limits] = None, *,
               max_delay_ms: float = 2.0, max_batch: Optional[int] = None) -> Starlette:
    """The HTTP API of ``predictor`` (see the module) as a Starlette app.

    Args:
        predictor: a :class:`~graph_adapter.serve.Predictor` (``serve.load(path)``) or a
            :class:`~graph_adapter.serve.processes.program.ProcessPredictor` (its program
            in a child process; large bodies are then read in a child process too:
            :mod:`~graph_adapter.serve.processes.decoder`); anything with
            ``predict(graphs)`` and ``contract``.
        limits: what one request may hold and take (default :class:`Limits`'s).
        max_delay_ms: how long the oldest queued request waits, at most, for others
            already in the server (bodies being read or decoded) to merge with.
        max_batch: graphs a merged call holds at most (default: the largest budget's).

    Returns:
        The app; ``app.state.serving`` is its :class:`ServingState` (``.draining``,
        ``.health()``, ``.close()``: stop its batcher once no request is in flight; the
        app's lifespan shutdown does it too).

    Raises:
        ValueError: ``max_batch`` < 1 or ``max_delay_ms`` < 0.
    """
    from contextlib import asynccontextmanager

    limits = limits if limits is not None else Limits()
    batcher = DynamicBatcher(predictor, max_delay_ms / 1e3, max_batch, limits.max_queue,
                             coming=lambda: state.coming)
    state = ServingState(predictor, limits, batcher)
    routes = _Routes(state)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        yield
        state.close()

    app = Starlette(routes=[Route("/predict", routes.predict, methods=["POST"]),
                            Route("/health", routes.health, methods=["GET"]),
                            Route("/ready", routes.ready, methods=["GET"]),
                            Route("/contract", routes.contract, methods=["GET"])],
                    exception_handlers={HTTPException: routes.http_error}, lifespan=lifespan)
    app.router.redirect_slashes = False
    app.add_middleware(_Envelope, state=state)
    app.state.serving = state
    return app


def _encode(preds: List[Any]) -> bytes:
    return json_dumps({"predictions": [encode_prediction(p) for p in preds]})
