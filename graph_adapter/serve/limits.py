"""The server's limits (one dataclass, one ``graph-adapter serve`` flag each) and the
errors a request gets when it passes one.

Every limit has a default safe for a server behind a load balancer on a machine of a
few GiB: a client can hold at most ``max_connections`` sockets, must send its header
block within ``header_timeout_s`` and its body within ``body_timeout_s``, may send at most
``max_body_bytes`` that unpack to at most ``max_decoded_bytes`` in at most ``max_graphs``
graphs, waits at most ``request_timeout_s`` for its answer, and is refused at once (503,
before its body is read) while ``max_queue`` requests are in the server already. A
connection refused before its body was read is not closed under the client's unread
bytes (its kernel would answer them with a reset, and the client might never read the
refusal): its answer is written, its sending half closed, and what it still sends is
read and dropped for at most ``linger_s`` and ``linger_bytes`` (a lingering close).
"""
from __future__ import annotations

import dataclasses
import itertools
import os
from typing import Optional

from .errors import ServeError

__all__ = ["Limits", "TooLargeError", "BodyTimeoutError", "DeadlineExceededError",
           "OverloadedError", "ServerStoppingError", "TooManyConnectionsError",
           "new_request_id"]

#: a request id is this process's random prefix and a count: unique across replicas, and
#: cheaper than a uuid4 a request
_ids = itertools.count(1)
_ID_PREFIX = os.urandom(4).hex()


def new_request_id() -> str:
    """A new request id: 16 hex digits (8 random a process, then a count)."""
    return f"{_ID_PREFIX}{next(_ids) & 0xFFFFFFFF:08x}"


#: the limits where 0 means "none of it" (no drain, no lingering) rather than nothing admitted
_ZERO_ALLOWED = ("drain_s", "linger_s")


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one server admits (see the module). ``None`` in a size or count: no limit.

    Attributes:
        max_connections: open client connections; past it a new connection's request is
            answered 503 (``TooManyConnectionsError``) and the connection closed.
        header_timeout_s: seconds a connection has to send a request's header block (from
            its opening, or the previous answer); then it is closed (408 if it sent part
            of one).
        body_timeout_s: seconds a request has to send its whole body once its headers are
            in (408 ``BodyTimeoutError``, the connection closed).
        keep_alive_s: seconds an idle keep-alive connection is kept.
        max_body_bytes: a body's bytes (413 from its ``Content-Length`` before reading, or
            as soon as a streamed body passes it).
        max_decoded_bytes: the bytes an ``.npz`` body's arrays unpack to, from their headers,
            before any is unpacked (413).
        max_graphs: graphs in one request (413, before its arrays are made).
        max_inflight_bytes: the body bytes of the requests in the server at once (from
            each ``Content-Length``, or a chunked body's bytes as they come): past it a
            request is answered 503 with ``Retry-After`` before its body is read (a request
            alone is held to ``max_body_bytes`` only). Bounds the server's memory under
            large concurrent bodies.
        max_queue: requests in the server at once (reading, decoding, queued or running);
            past it a request is answered 503 with ``Retry-After`` before its body is read.
        request_timeout_s: seconds from a request's body read to its answer (504).
        drain_s: after SIGTERM (or :meth:`PredictServer.close`), seconds the server keeps
            answering new requests 503 (``Connection: close``) while ``/ready`` says 503, so
            that a load balancer takes it out; it stops once these passed and the requests
            in flight are answered.
        shutdown_timeout_s: the longest wait for requests in flight at a stop; then the
            ones left are cancelled.
        linger_s: seconds a connection answered before its request's body was read
            whole (a 413, a 503) keeps reading and dropping what the client still sends
            after its answer (its sending half closed), so that the client reads its
            answer instead of a connection reset; closed when the client closes, or at
            this deadline. ``0``: closed at once (a client still sending may see a
            reset). A client that sent ``Expect: 100-continue`` and was never told to
            go on is closed at once.
        linger_bytes: the bytes such a connection may send meanwhile (read and dropped,
            never kept); past them it is closed.
    """

    max_connections: Optional[int] = 1024
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_s: float = 5.0
    max_body_bytes: Optional[int] = 64 << 20
    max_decoded_bytes: Optional[int] = 512 << 20
    max_graphs: Optional[int] = 100_000
    max_inflight_bytes: Optional[int] = 128 << 20
    max_queue: int = 1024
    request_timeout_s: float = 60.0
    drain_s: float = 1.0
    shutdown_timeout_s: float = 30.0
    linger_s: float = 5.0
    linger_bytes: Optional[int] = 256 << 20

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            zero = f.name in _ZERO_ALLOWED
            if v < 0 or (v == 0 and not zero):
                raise ValueError(f"Limits.{f.name}={v!r}: give a positive number"
                                 f"{' (or 0)' if zero else ''}")


class TooLargeError(ServeError, ValueError):
    """A request past ``max_body_bytes``, ``max_decoded_bytes`` or ``max_graphs`` (413)."""


class BodyTimeoutError(ServeError, TimeoutError):
    """A body not sent whole within ``body_timeout_s`` (408)."""


class DeadlineExceededError(ServeError, TimeoutError):
    """No answer within ``request_timeout_s`` (504)."""


class OverloadedError(ServeError):
    """``max_queue`` requests are in the server already (503, ``Retry-After``)."""


class ServerStoppingError(OverloadedError):
    """The server is draining before it stops (503, ``Connection: close``)."""


class TooManyConnectionsError(OverloadedError):
    """``max_connections`` connections are open already (503, ``Connection: close``)."""
