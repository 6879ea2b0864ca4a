"""Dynamic batching: concurrent requests merged into one ``Predictor.predict`` call."""
from __future__ import annotations

import collections
import os
import select
import threading
import time
from typing import Any, Callable, Deque, List, Optional, Sequence, Tuple

from .columns import Columns, concat, join
from .errors import GraphInputError, ServeError
from .ops import NumpyOps
from .pack import Graph, column_graphs

__all__ = ["DynamicBatcher", "QueueFullError", "slice_request"]


class _Pending:
    """One queued request: its graphs, and its answer once the worker has one."""

    __slots__ = ("graphs", "arrived", "answered", "preds", "error", "_ready", "_notify",
                 "taken", "pieces")

    def __init__(self, graphs: Sequence[Any], notify: Optional[Callable[[], Any]] = None):
        self.graphs = graphs
        self._notify = notify  # called once answered (from the worker's thread)
        self.arrived = time.monotonic()
        self.answered = False
        self.preds: Optional[List[Any]] = None
        self.error: Optional[BaseException] = None
        self.taken = 0  # graphs sliced off so far (a request longer than max_batch)
        self.pieces: List[List[Any]] = []  # its slices' predictions, in order
        # a bare lock, held until the answer: the request's thread waits on it, the worker
        # releases it (one futex wake; a threading.Event's condition takes a lock of its
        # own, a new waiter lock and the GIL back and forth several times a request)
        self._ready = threading.Lock()
        self._ready.acquire()

    def answer(self, preds: Optional[List[Any]] = None,
               error: Optional[BaseException] = None) -> None:
        """Give the request its answer (the first one given stands)."""
        if not self.answered:
            self.preds, self.error, self.answered = preds, error, True
            self._ready.release()
            if self._notify is not None:
                self._notify()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Whether the answer came within ``timeout`` seconds (``None``: no limit)."""
        return self._ready.acquire(timeout=-1 if timeout is None else max(timeout, 0))


class _Slice:
    """Graphs ``start .. start + len(graphs) - 1`` of a request longer than ``max_batch``:
    a part of a merge, answered as a request is. Its predictions are kept for the
    request, which is answered with all of them, in order, once its last slice is; its
    error is the request's at once (a graph's position offset by ``start``), and the
    request's slices not yet run are dropped (:meth:`DynamicBatcher._pick`)."""

    __slots__ = ("request", "start", "graphs")

    def __init__(self, request: _Pending, start: int, graphs: Any):
        self.request, self.start, self.graphs = request, start, graphs

    @property
    def answered(self) -> bool:
        """Whether the request is answered (its error, or its client gave up)."""
        return self.request.answered

    def answer(self, preds: Optional[List[Any]] = None,
               error: Optional[BaseException] = None) -> None:
        """Keep this slice's predictions (the request answered after its last), or
        answer the request with ``error`` (a graph's position counted in the request)."""
        r = self.request
        if r.answered:
            return
        if error is not None:
            if isinstance(error, GraphInputError):
                _offset(error, self.start)
            return r.answer(error=error)
        r.pieces.append(preds)  # (slices are answered in the order they were taken)
        if self.start + len(self.graphs) == len(r.graphs):  # the last
            r.answer([y for piece in r.pieces for y in piece])


class QueueFullError(ServeError):
    """The batcher holds ``max_queue`` requests already, or is closed (HTTP 503)."""


class DynamicBatcher:
    """Merges concurrent ``predict`` requests into one ``Predictor.predict`` call.

    One worker thread runs every call (so the predictor is never used by two threads).
    It takes the oldest queued request, waits until ``max_batch`` graphs are queued or
    ``max_delay_s`` has passed since that request arrived, and predicts the queued
    requests (in arrival order, at most ``max_batch`` graphs) as one list: ``predict``
    packs it over the budget or the ladder's rungs. A request whose graphs the contract
    refuses gets its own error (graph positions counted within it); the others of its
    merge are predicted without it.

    A request holding more than ``max_batch`` graphs is run in slices of ``max_batch``
    graphs (the last one: the rest), one call each, so that the requests queued behind
    it are not kept waiting for all of it: while such a request is queued, a merge of
    the other queued requests (in arrival order, passing over it) and its next slice take
    turns, a slice's room left over given to the others; several such requests are
    sliced oldest first. A request queued meanwhile thus waits about one slice's call,
    not the long request's calls. The long request is answered once its last slice is,
    with every slice's predictions in order; a slice's error (a graph's position counted
    in the request) answers it at once, and its slices not yet run are dropped unrun, as
    are those of a ticket its client gave up on.

    ``max_batch``: graphs a merge (or a slice) holds; default one call of the bulk budget
    (its graph slots less the padding one). ``max_queue``: requests waiting, beyond which
    :meth:`submit` raises :class:`QueueFullError`. ``coming``: a count of the requests
    on their way to :meth:`enqueue` (the HTTP app's: bodies being read or decoded);
    where given, a merge waits (at most ``max_delay_s``) only while that count is not
    0, so that a request alone in the server is run at once.

    ``stats``: ``requests`` taken to be run (a sliced request once), ``graphs``
    predicted, ``batches`` calls answered (a merge, a request run alone, each slice of a
    long request: one each), ``refused`` requests answered with an error of their own.
    """

    def __init__(self, predictor: Any, max_delay_s: float = 0.002,
                 max_batch: Optional[int] = None, max_queue: int = 1024,
                 coming: Optional[Callable[[], int]] = None):
        self.predictor = predictor
        #: requests on their way to :meth:`enqueue` (an HTTP server's, read or decoded
        #: now): where given, a merge waits for them only, never for requests not yet
        #: sent (one client alone waited max_delay for nobody on every request)
        self.coming = coming
        c = predictor.contract
        self.max_batch = int(max_batch) if max_batch else max(
            [r.graphs for r in c.rungs] or [c.graphs]) - 1
        if self.max_batch < 1 or max_delay_s < 0:
            raise ValueError(f"max_batch={max_batch} and max_delay_s={max_delay_s}: give "
                             f"at least one graph and a delay >= 0")
        self.max_delay_s = float(max_delay_s)
        self.max_queue = int(max_queue)
        self.queue: Deque[_Pending] = collections.deque()
        self.queued_graphs = 0
        # the queued requests longer than max_batch (in the queue too), oldest first, and
        # whether the next merge is the oldest one's next slice (see the class docstring)
        self._long: Deque[_Pending] = collections.deque()
        self._long_turn = True
        self.closed = False
        self.cond = threading.Condition()
        #: requests taken, graphs predicted, calls answered, requests refused (see above)
        self.stats = {"requests": 0, "graphs": 0, "batches": 0, "refused": 0}
        # a request queued while the worker waits for a reply wakes it through this pipe
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._selecting = False
        self.worker = threading.Thread(target=self._loop, name="graph_adapter-batcher",
                                       daemon=True)
        self.worker.start()

    def submit(self, graphs: Sequence[Any], timeout: Optional[float] = None) -> List[Any]:
        """The predictions of ``graphs`` (as ``Predictor.predict``), once merged and run;
        raises what ``predict`` raised for them, ``QueueFullError``, or ``TimeoutError``."""
        p = self.enqueue(graphs)
        if not p.wait(timeout):
            p.answer(error=TimeoutError(f"no answer within {timeout} s (the worker is busy)"))
        return self.result(p)

    def enqueue(self, graphs: Sequence[Any], notify: Optional[Callable[[], Any]] = None
                ) -> "_Pending":
        """Queue ``graphs`` without waiting: a ticket for :meth:`result` once answered
        (``notify()`` is called then, from the worker's thread: an event loop's
        ``call_soon_threadsafe``). Raises ``QueueFullError``.

        A ticket answered by its caller first (``ticket.answer(error=...)``: its client
        gave up) is dropped from the queue unrun."""
        p = _Pending(graphs, notify)
        with self.cond:
            if self.closed or len(self.queue) >= self.max_queue:
                raise QueueFullError("the server is stopping" if self.closed else
                                     f"{len(self.queue)} requests are queued already "
                                     f"(max_queue): retry later")
            self.queue.append(p)
            self.queued_graphs += len(graphs)
            if len(graphs) > self.max_batch:  # run in slices (_pick)
                self._long.append(p)
            # the worker waits on the condition only for a first request, or for a merge
            # to fill up (see _take): waking it for every request that arrives while it
            # waits out max_delay made it take the GIL once more a request, to wait again
            if len(self.queue) == 1 or self.queued_graphs >= self.max_batch or (
                    self.coming is not None and self.coming() == 0):
                self.cond.notify()
        self._wake()
        return p

    @staticmethod
    def result(p: "_Pending") -> List[Any]:
        """An answered ticket's predictions, or its error raised."""
        if p.error is not None:
            raise p.error
        assert p.preds is not None
        return p.preds

    def close(self, timeout: Optional[float] = None) -> None:
        """Answer what is queued, then stop the worker (later submits: ``QueueFullError``)."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self._wake()
        self.worker.join(timeout)
        if not self.worker.is_alive():
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)

    def _take(self, wait: bool = True) -> Optional[List[_Pending]]:
        """The next merge (``None``: closed and drained), waiting as the docstring says;
        ``wait=False`` (a merge in flight already): what is queued now, ``[]`` if none."""
        with self.cond:
            if not wait and not self.queue:
                return []
            while not self.queue:
                if self.closed:
                    return None
                self.cond.wait()
            deadline = self.queue[0].arrived + self.max_delay_s
            while wait and self.queued_graphs < self.max_batch and not self.closed and (
                    self.coming is None or self.coming() > 0):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            return self._pick()

    def _pick(self) -> List[Any]:
        """The next merge's parts, taken off the queue (the condition held, the queue not
        empty): the oldest requests that fit ``max_batch`` graphs, in arrival order; a
        request longer than that in slices, each slice a :class:`_Slice` (see the class
        docstring). Tickets answered by their callers meanwhile are dropped."""
        q, cap, longs = self.queue, self.max_batch, self._long
        while longs and longs[0].answered:  # given up, or a slice failed: the rest unrun
            p = longs.popleft()
            q.remove(p)
            self.queued_graphs -= len(p.graphs) - p.taken
        parts: List[Any] = []
        n = 0
        if longs and (self._long_turn or len(q) == len(longs)):
            p = longs[0]
            a, b = p.taken, min(p.taken + cap, len(p.graphs))
            parts.append(_Slice(p, a, slice_request(self.predictor.contract, p.graphs, a, b)))
            p.taken, n = b, b - a
            if b == len(p.graphs):
                longs.popleft()
                q.remove(p)
            self.stats["requests"] += int(a == 0)
        self._long_turn = not parts
        skipped: List[_Pending] = []  # long requests passed over (their turn comes)
        while q:
            p = q[0]
            if p.taken or len(p.graphs) > cap:
                skipped.append(q.popleft())
                continue
            if n + len(p.graphs) > cap:
                break
            q.popleft()
            n += len(p.graphs)
            if not p.answered:  # (else given up by its client)
                parts.append(p)
                self.stats["requests"] += 1
        q.extendleft(reversed(skipped))
        self.queued_graphs -= n
        return parts

    def _loop(self) -> None:
        """Take merges and run them. With a predictor that can have a second request in
        flight (``send`` / ``receive``: a program's process), the next merge is sent
        before the last one's answers are read, so that the program never waits while
        this process answers and merges (8 clients, `.pt2`: 16 molecules a request 0.71x
        -> 0.82x in-process ``predict``'s throughput, 256: 0.74x -> 0.95x, measured); and
        while a merge runs, the worker waits for its reply *or* a new request (with
        ``reply_fd``), so that a request that comes meanwhile is sent at once rather than
        after the reply is read."""
        inflight: Deque[Tuple[List[_Pending], Any]] = collections.deque()
        send = getattr(self.predictor, "send", None)
        while True:
            if inflight and not (self.queue and self.predictor.can_send()):
                if self._await_reply_or_request(inflight[0][1]):
                    continue  # a request came first: sent ahead if the predictor can
                self._guarded(inflight[0][0], self._finish, *inflight.popleft())
                continue
            batch = self._take(wait=not inflight)
            if batch is None:
                return
            if not batch:
                continue
            if send is None:
                self._guarded(batch, self._settle, batch)
                continue
            try:
                inflight.append((batch, send(self._merge([p.graphs for p in batch]))))
            except Exception:  # noqa: BLE001 - each request on its own, answered
                self._guarded(batch, self._settle, batch)

    def _await_reply_or_request(self, ticket: Any) -> bool:
        """Wait, without the GIL, for the reply to ``ticket`` to begin or for a request to
        be queued, whichever comes first; whether it was a request (to be sent ahead while
        the program runs: waiting in the reply's read instead left the program idle while
        this process read, answered and merged the requests that came meanwhile).
        ``False`` at once where the predictor has no reply pipe to wait on or cannot take
        another request now."""
        reply_fd = getattr(self.predictor, "reply_fd", None)
        fd = reply_fd(ticket) if reply_fd is not None else None
        if fd is None or self.closed or not self.predictor.can_send():
            return False
        self._selecting = True
        try:
            if self.queue:  # (queued before the flag was up: no wake byte)
                return True
            try:
                ready, _, _ = select.select([fd, self._wake_r], [], [])
            except (OSError, ValueError):  # the pipe closed: receive says why
                return False
        finally:
            self._selecting = False
        if self._wake_r in ready:
            try:
                os.read(self._wake_r, 4096)
            except BlockingIOError:
                pass
        return fd not in ready and bool(self.queue)

    def _wake(self) -> None:
        """Wake the worker from :meth:`_await_reply_or_request` (a request, or close)."""
        if self._selecting:
            try:
                os.write(self._wake_w, b"!")
            except (BlockingIOError, OSError):  # (a full pipe wakes it as well)
                pass

    @staticmethod
    def _guarded(batch: List[_Pending], run: Callable[..., None], *args: Any) -> None:
        try:
            run(*args)
        except BaseException as e:  # noqa: BLE001 - never leave a request unanswered
            for p in batch:
                if not p.answered:
                    p.answer(error=e)

    def _finish(self, batch: List[_Pending], ticket: Any) -> None:
        """Answer a merge sent ahead (:meth:`_loop`); its errors as :meth:`_settle`."""
        if len(batch) == 1:
            return self._alone(batch[0], lambda: self.predictor.receive(ticket))
        try:
            preds = self.predictor.receive(ticket)
        except GraphInputError as e:
            culprit = _owner(batch, e.graph)
            self._alone(culprit)
            return self._settle([p for p in batch if p is not culprit])
        except Exception:  # noqa: BLE001 - not a graph's fault: each on its own
            return self._settle(batch, merged=False)
        self._answer(batch, preds)

    def _answer(self, live: List[_Pending], preds: List[Any]) -> None:
        self.stats["batches"] += 1
        self.stats["graphs"] += len(preds)
        i = 0
        for p in live:
            p.answer(preds[i:i + len(p.graphs)])
            i += len(p.graphs)

    def _merge(self, parts: List[Any]) -> Any:
        """Several requests' graphs as one ``predict`` request: where they are checked
        (decoded columns; graph lists where the predictor takes checked graphs) one
        :class:`Columns`, one ``cat`` a feature (a mixed stream's merges hold both:
        cutting the columns into graphs to join them again cost more than the rest);
        else one list (columns as request dicts, which the predictor checks)."""
        c, ops = self.predictor.contract, NumpyOps()
        if getattr(self.predictor, "takes_checked", False) and all(
                isinstance(p, Columns) or all(type(g) is Graph for g in p) for p in parts):
            return concat(c, ops, [p if isinstance(p, Columns) else join(c, ops, p)
                                   for p in parts])
        if all(isinstance(p, Columns) for p in parts):
            return concat(c, ops, parts)
        out: List[Any] = []
        for p in parts:
            if isinstance(p, Columns):
                out.extend(dict(g.features, num_nodes=g.nodes) for g in column_graphs(p, c))
            else:
                out.extend(p)
        return out

    def _alone(self, p: _Pending, run: Optional[Callable[[], List[Any]]] = None) -> None:
        """Answer one request (``run``: its predictions, e.g. a reply already on its way;
        default: predict it now), or its own error."""
        try:
            p.answer(run() if run is not None else self.predictor.predict(p.graphs))
            self.stats["batches"] += 1
            self.stats["graphs"] += len(p.graphs)
        except Exception as e:  # noqa: BLE001 - the request's own error, sent back
            self.stats["refused"] += int(not p.answered)  # (a long request's: once)
            p.answer(error=e)

    def _settle(self, batch: List[_Pending], merged: bool = True) -> None:
        """Predict ``batch`` as one merge and answer each request; a request whose graph
        the contract refuses is answered alone (its own positions) and the rest merged
        again; any other failure: each request on its own (``merged=False``: at once)."""
        live = list(batch)
        while live:
            if len(live) == 1:  # its errors count graphs within it already
                return self._alone(live[0])
            if not merged:
                for p in live:
                    self._alone(p)
                return
            try:
                preds = self.predictor.predict(self._merge([p.graphs for p in live]))
            except GraphInputError as e:  # one request's graph: answer it alone, retry the rest
                culprit = _owner(live, e.graph)
                self._alone(culprit)
                live.remove(culprit)
                continue
            except Exception:  # noqa: BLE001 - not a graph's fault: each request on its own
                merged = False
                continue
            return self._answer(live, preds)


def _owner(live: Sequence[_Pending], graph: int) -> _Pending:
    """The request that holds position ``graph`` of a merge of ``live``."""
    run = 0
    for p in live:
        run += len(p.graphs)
        if graph < run:
            return p
    return live[-1]


def slice_request(contract: Any, graphs: Any, a: int, b: int) -> Any:
    """Graphs ``a .. b - 1`` of a request, their positions counted from 0 within the
    slice (a predictor's errors then name a graph of the slice, which the batcher
    offsets by ``a``).

    Args:
        contract: the predictor's contract (its features: where :class:`Columns` are cut).
        graphs: the request's graphs: a list (dicts, graph objects, checked
            :class:`~graph_adapter.serve.pack.Graph` objects) or :class:`Columns`.
        a, b: the first graph and the one past the last (``0 <= a <= b <= len``).

    Returns:
        A list of the same items (a ``Graph`` copied with its new position, its arrays
        shared), or :class:`Columns` whose arrays are slices of the request's (no copy).
    """
    if isinstance(graphs, Columns):
        t = graphs.take(contract, a, b)
        return Columns(t.features, t.nodes, t.edges, range(b - a), t.ignored)
    return [Graph(g.features, g.nodes, g.edges, g.ignored, k) if type(g) is Graph else g
            for k, g in enumerate(graphs[i] for i in range(a, b))]


def _offset(e: GraphInputError, start: int) -> None:
    """``e`` (raised for graph ``e.graph`` of a slice starting at ``start``) naming the
    request's graph instead: its ``graph`` and its message's leading "graph <k>"."""
    k, e.graph = e.graph, e.graph + start
    if not start or not e.args or not isinstance(e.args[0], str):
        return
    msg, head = e.args[0], f"graph {k}"
    if msg.startswith(head) and not msg[len(head):len(head) + 1].isdigit():
        msg = f"graph {e.graph}{msg[len(head):]}"
    else:  # (a message that names no position first: the request's said after it)
        msg = f"{msg} (graph {e.graph} of the request)"
    e.args = (msg, *e.args[1:])
