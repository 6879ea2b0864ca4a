"""An artifact's program run in a child process of its own, beside the server's HTTP threads.

An AOTInductor package run from Python holds the GIL for the whole call (torch's binding
of ``AOTIModelPackageLoader.boxed_run`` releases none), so in one process the server's
request decoding and HTTP wait for every predict (onnxruntime releases it while it runs,
but packing the calls holds it). :class:`ProcessPredictor` keeps those
in the server's process and runs ``serve.load(path).predict`` in a child
(``python -m graph_adapter.serve.processes.program``): the two overlap, one core each.

What crosses the pipes is numpy arrays the server made and sizes it controls, never a
pickle: the server decodes and checks each request graph against the contract (the named
errors of :func:`~graph_adapter.serve.pack.read_graph`, the same text as in-process
``predict``), then sends each feature key's arrays concatenated over the graphs (as an
``.npz`` request holds them: :class:`~graph_adapter.serve.columns.Columns`) with the
graphs' node and edge counts. The child packs its calls from those arrays
(``Predictor.predict_columns``: a call of consecutive graphs is a slice of each) and
sends each output key's rows back, joined; an error of ``predict`` comes back by its
class name, message, graph and key, and is raised again here (the messages:
:mod:`.pipes`).

The child exits when its input pipe closes: at :meth:`ProcessPredictor.close`, or when
the server's process ends in any way (no orphan); it ignores SIGINT, so that Ctrl-C in a
terminal lets the server answer what is queued first.
"""
from __future__ import annotations

import gc
import math
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, BinaryIO, Dict, List, Optional, Sequence, Tuple, Union

from .. import errors
from ..contract import Contract
from ..errors import ServeError
from ..ops import NumpyOps
from ..columns import Columns, join, split_rows
from ..pack import Graph, read_request
from .pipes import (arrays_columns, columns_arrays, error_header, raise_named,
                    recv_message, send_message, spawn)

__all__ = ["ProcessPredictor", "WorkerError", "crosses_pipes", "worker_main"]

#: the errors the child's reply may name besides a request graph's (anything else:
#: WorkerError with its text)
_NAMED = (errors.ArtifactError, errors.RuntimeMissingError)


class WorkerError(ServeError, RuntimeError):
    """The program's process failed (it exited, or ``predict`` raised an error that is not
    a request graph's): HTTP 500; the server's log has the child's own message."""


def _raise_named(header: Dict[str, Any]) -> None:
    """Raise the error a reply names, as its own class where it is one of ``_NAMED``."""
    raise_named(header, lambda text: WorkerError(f"the program's process failed: {text}"),
                _NAMED)


# -- the child ------------------------------------------------------------------------------

def _child_outputs(contract: Contract, outs: Dict[str, Any]) -> List[Any]:
    """Each output key's rows of every graph (graph-level: one row a graph), as numpy
    arrays (torch's of a dtype numpy lacks, bfloat16: as float32, the same values)."""
    out = []
    for f in contract.outputs:
        v = outs[f.key]
        if hasattr(v, "detach"):  # a .pt2 program's tensor
            import torch

            v = (v.float() if v.dtype == torch.bfloat16 else v).detach().cpu().numpy()
        out.append(v)
    return out


def _serve_pipe(predictor: Any, fin: BinaryIO, fout: BinaryIO) -> int:
    """Answer requests until the input pipe closes (the server stopped or is gone)."""
    torch = predictor.ops.torch if predictor.ops.name == "torch" else None
    while True:
        try:
            _, arrays = recv_message(fin)
        except EOFError:
            return 0
        try:
            # (the server checked the graphs against the same contract: checking
            # them again, or cutting them into per-graph views to join them again,
            # would cost a sizeable share of a request: see docs/dev/RESULTS.md)
            cols = arrays_columns(predictor.contract, arrays,
                                  torch.from_numpy if torch is not None else None)
            outs = _child_outputs(predictor.contract, predictor.predict_columns(cols))
            reply: Dict[str, Any] = {}
        except Exception as e:  # noqa: BLE001 - sent back, named, for the server to answer
            outs, reply = [], error_header(e)
        counts = {"calls": predictor.calls, "rung_calls": predictor.rung_calls}
        try:
            send_message(fout, {**reply, **counts}, outs)
        except OSError:  # the server is gone
            return 0


def worker_main(argv: Optional[Sequence[str]] = None) -> int:
    """The child: ``python -m graph_adapter.serve.processes.program FD_IN FD_OUT ARTIFACT
    [THREADS]`` (started by :class:`ProcessPredictor`, which owns both pipes)."""
    from ..runtime import load

    args = list(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server stops us (EOF), after draining
    fin, fout = os.fdopen(int(args[0]), "rb"), os.fdopen(int(args[1]), "wb")
    try:
        predictor = load(args[2], threads=int(args[3]) if len(args) > 3 else None)
    except Exception as e:  # noqa: BLE001 - the server raises it again, named
        send_message(fout, error_header(e))
        return 1
    # as the server does (serve_main): what is alive now is never garbage, and a request's
    # objects are short-lived and acyclic; at the default thresholds the collector runs
    # often enough to slow predict markedly (see docs/dev/RESULTS.md)
    gc.collect()
    gc.freeze()
    gc.set_threshold(max(gc.get_threshold()[0], 50_000), *gc.get_threshold()[1:])
    send_message(fout, {"ready": os.getpid()})
    return _serve_pipe(predictor, fin, fout)


# -- the server's side ----------------------------------------------------------------------

def crosses_pipes(contract: Contract) -> bool:
    """Whether every input of ``contract`` has a numpy dtype (what the server checks and
    sends); not so (bfloat16 inputs): the server runs the program in its own process."""
    import numpy as np

    try:
        for f in contract.features:
            np.dtype(f.dtype)
    except TypeError:
        return False
    return True


class ProcessPredictor:
    """``serve.load(path, threads=threads)`` run in a child process; ``predict`` as
    :meth:`Predictor.predict <graph_adapter.serve.Predictor.predict>` (the same
    predictions and named errors), its arrays numpy arrays. One call at a time.

    A child that dies (killed, out of memory, a crash in the program) fails the request
    it was running (``WorkerError``, HTTP 500) and is started again for the next ones,
    at most :attr:`MAX_RESTARTS` times in :attr:`RESTART_WINDOW_S` seconds (a request
    that kills it every time must not keep the server restarting); past that it stays
    down and :meth:`exited` says so (``/health``: 503).

    Attributes: ``contract``, ``format``, ``calls``, ``rung_calls``, ``ignored_keys`` (as
    the in-process predictor's), ``pid`` (the child's), ``restarts``. :meth:`close` stops
    the child; ``sent_ahead``: requests sent while another was in flight (:meth:`send`).
    Raises what ``load`` raised in the child (``ArtifactError``,
    ``RuntimeMissingError``). ``contract``: the artifact's, if read already.
    """

    #: children started again after one died, at most, within :attr:`RESTART_WINDOW_S`
    MAX_RESTARTS = 3
    RESTART_WINDOW_S = 60.0

    def __init__(self, path: str, threads: Optional[int] = None,
                 contract: Optional[Contract] = None):
        from ..runtime import read_contract

        path = os.fspath(path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no artifact at {path}")
        # (a .pt2: its zip's JSON, no torch here)
        self.contract = contract if contract is not None else read_contract(path)
        self.format = self.contract.format
        self.calls = 0
        self.rung_calls: Dict[str, int] = {r.program: 0 for r in self.contract.rungs}
        self.ignored_keys: set = set()
        self.ops = NumpyOps()
        self.restarts = 0
        self.sent_ahead = 0  # requests sent while another was in flight
        self._path, self._threads = path, threads
        self._restarted_at: List[float] = []
        self._before: Tuple[int, Dict[str, int]] = (0, {})  # earlier children's counts
        self._lock = threading.RLock()  # (a failed start closes, holding it)
        self._start()

    def _start(self) -> None:
        """A child, loaded and ready (else what it raised, nothing left running)."""
        # requests sent / replies read by this child; replies read for later receives;
        # the in-flight requests' reply sizes (bytes)
        self._generation = getattr(self, "_generation", -1) + 1
        self._sent = self._got = 0
        self._replies: Dict[int, Tuple[Dict[str, Any], List[Any]]] = {}
        self._in_flight: Dict[int, int] = {}
        self.process, self._to, self._from, reply_bytes = spawn(
            "graph_adapter.serve.processes.program",
            [self._path] + ([] if self._threads is None else [str(int(self._threads))]))
        ProcessPredictor.reply_pipe_bytes = min(ProcessPredictor.reply_pipe_bytes, reply_bytes)
        try:
            header, _ = self._reply()  # "ready", or what load raised there
        except BaseException:
            self.close()
            raise
        self.pid: int = int(header["ready"])

    def _restart(self) -> bool:
        """Start a child again after this one died, if :attr:`MAX_RESTARTS` allows
        (called holding the lock); whether one runs now."""
        now = time.monotonic()
        self._restarted_at = [t for t in self._restarted_at if now - t < self.RESTART_WINDOW_S]
        if len(self._restarted_at) >= self.MAX_RESTARTS:
            return False
        self._restarted_at.append(now)
        self.restarts += 1
        rc = self.process.poll()
        print(f"graph_adapter serve: the program's process (pid {self.process.pid}) exited "
              f"with code {rc}; starting it again ({self.restarts} restarts)",
              file=sys.stderr, flush=True)
        for f in (self._to, self._from):
            try:
                f.close()
            except OSError:
                pass
        self._before = (self.calls, dict(self.rung_calls))
        try:
            self._start()
        except Exception as e:  # noqa: BLE001 - it stays down; /health says so
            print(f"graph_adapter serve: the program's process did not start again: {e}",
                  file=sys.stderr, flush=True)
            return False
        return True

    def _exit_code(self) -> Optional[int]:
        """The child's exit code once its pipe closed (waited for: it may still be ending)."""
        try:
            return self.process.wait(5)
        except subprocess.TimeoutExpired:  # its pipe is gone but it lingers: ended here
            self.process.kill()
            return self.process.wait(5)

    def _reply(self) -> Tuple[Dict[str, Any], List[Any]]:
        """The next reply, its error raised (start-up: "ready" or what load raised)."""
        header, arrays = self._read_reply()
        if "error" in header:
            _raise_named(header)
        return header, arrays

    def _read_reply(self) -> Tuple[Dict[str, Any], List[Any]]:
        """The next reply as it came (``WorkerError``: the child is gone)."""
        try:
            header, arrays = recv_message(self._from)
        except (EOFError, OSError, ValueError):
            rc = self.process.poll()
            raise WorkerError(f"the program's process (pid {self.process.pid}) exited"
                              f"{'' if rc is None else f' with code {rc}'}: its error is in "
                              f"the server's log; the server starts it again (at most "
                              f"{self.MAX_RESTARTS} times in {self.RESTART_WINDOW_S:.0f} s), "
                              f"else restart the server") from None
        before, rungs = self._before
        if "calls" in header:
            self.calls = before + header["calls"]
        for k, v in header.get("rung_calls", {}).items():
            self.rung_calls[k] = rungs.get(k, 0) + v
        return header, arrays

    #: the server calls :meth:`check` in the request's own thread, beside the child's
    #: runs, and submits the checked graphs (which :meth:`predict` takes as they are)
    takes_checked = True

    def check(self, graphs: Sequence[Any]) -> List[Graph]:
        """Every request graph checked against the contract (the named errors of
        in-process ``predict``, positions within ``graphs``), as numpy arrays."""
        return read_request(self.contract, self.ops, graphs, self.ignored_keys)  # (numpy)

    def predict(self, graphs: Union[Sequence[Any], Columns]) -> List[Any]:
        """One prediction per graph, in request order (numpy arrays; several outputs: a
        dict a graph); graphs not yet checked (by :meth:`check`, or a decoder's
        :class:`~graph_adapter.serve.columns.Columns`) are checked first."""
        return self.receive(self.send(graphs))

    #: the reply pipe's buffer: a request is sent while another is in flight only if
    #: that one's reply fits it (the child writes its reply while this process writes
    #: the next request: neither may wait for the other)
    reply_pipe_bytes = 1 << 20

    def send(self, graphs: Union[Sequence[Any], Columns]) -> Any:
        """Send a request to the child without waiting for its predictions: a ticket for
        :meth:`receive` (replies come in the order sent). A second request sent before
        the first is received runs right after it, the child never waiting for this
        process (see :meth:`can_send`)."""
        if isinstance(graphs, Columns):
            cols = graphs
        else:
            checked = graphs if graphs and all(type(g) is Graph for g in graphs) \
                else self.check(graphs)
            cols = join(self.contract, self.ops, checked)
        if not len(cols):
            return (None, -1, cols)
        with self._lock:
            if self._to.closed:
                raise WorkerError("the predictor is closed")
            if self._sent == self._got and self.process.poll() is not None:
                self._restart()  # died since the last request (none in flight)
            while sum(self._in_flight.values()) > self.reply_pipe_bytes // 2:
                self._read_next()  # (the replies ahead must fit the pipe: see can_send)
            ticket = (self._generation, self._sent, cols)
            self.sent_ahead += bool(self._in_flight)
            self._sent += 1
            self._in_flight[ticket[1]] = self._reply_bytes(cols)
            try:
                send_message(self._to, {}, columns_arrays(self.contract, cols))
            except OSError:  # the child is gone: receive says how
                pass
        return ticket

    def can_send(self) -> bool:
        """Whether the batcher should send another request now: at most one in flight,
        whose reply fits the reply pipe. (:meth:`send` itself first reads the replies
        ahead that would not fit: the child, writing one, and this process, writing the
        next request, must never wait for each other.)"""
        with self._lock:
            waiting = list(self._in_flight.values())
        return not waiting or (len(waiting) == 1 and waiting[0] <= self.reply_pipe_bytes // 2)

    def reply_fd(self, ticket: Any) -> Optional[int]:
        """The reply pipe's file descriptor while the reply to ``ticket`` (of :meth:`send`)
        has not been read: readable once a reply begins to come (the batcher waits on it
        beside new requests); ``None`` where :meth:`receive` would not wait for the pipe."""
        generation, n, _ = ticket
        with self._lock:
            if n < 0 or generation != self._generation or n in self._replies or \
                    not self._in_flight or self._from.closed:
                return None
            return self._from.fileno()

    def _reply_bytes(self, cols: Columns) -> int:
        """An upper bound of the reply's size to ``cols`` (8 bytes a value, the header)."""
        n, e, k = sum(cols.nodes), sum(cols.edges), len(cols)
        return 4096 + sum(8 * {"node": n, "edge": e}.get(f.level, k) *
                          math.prod(d or 1 for d in f.shape[1:]) for f in self.contract.outputs)

    def _read_next(self) -> None:
        """Read the next reply into ``_replies`` (held lock); the child gone: restarted
        where it may be, ``WorkerError``."""
        try:
            header, outs = self._read_reply()
        except WorkerError:
            self._in_flight.clear()
            if self._exit_code() is not None:  # died: the next requests get a child
                self._restart()
            raise
        self._replies[self._got] = (header, outs)
        self._in_flight.pop(self._got, None)
        self._got += 1

    def receive(self, ticket: Any) -> List[Any]:
        """The predictions of a request :meth:`send` sent (as :meth:`predict`), or its
        error; replies of requests sent earlier are read first and kept for theirs."""
        generation, n, cols = ticket
        if n < 0:
            return []
        with self._lock:
            while n not in self._replies:
                if generation != self._generation:
                    raise WorkerError("the program's process exited before answering this "
                                      "request; the server started it again")
                self._read_next()
            header, outs = self._replies.pop(n)
        if "error" in header:
            _raise_named(header)
        joined = {f.key: a for f, a in zip(self.contract.outputs, outs)}
        return split_rows(self.contract, joined, cols.nodes, cols.edges)

    def exited(self) -> Optional[int]:
        """The child's exit code where it ended by itself (a crash, a kill) and could not
        be started again (:attr:`MAX_RESTARTS`), else ``None`` (it runs, it was started
        again now, or :meth:`close` stopped it)."""
        with self._lock:
            if self._to.closed or self.process.poll() is None:
                return None
            return None if self._restart() else self.process.poll()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the child (it exits on its pipe's EOF; killed after ``timeout`` s)."""
        with self._lock:
            if not self._to.closed:
                try:
                    self._to.close()
                except OSError:
                    pass
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout)
        self._from.close()

    def __enter__(self) -> "ProcessPredictor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


if __name__ == "__main__":
    sys.exit(worker_main())
