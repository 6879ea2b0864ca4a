"""Large request bodies read in a process of their own: :class:`DecodeProcess`.

Reading a request's JSON holds the interpreter's lock for the whole body (the parser is
one C call: some 1.3 s for 50 MB of per-graph JSON), during which the server's event
loop, its other requests and its batcher all stand still. A body larger than
``min_bytes`` is therefore sent, as it came, to a child process that reads and checks
it (:func:`~graph_adapter.serve.decode.decode_request`, then the contract's checks) and
sends back the request's checked columns, the arrays raw (the message format of
:mod:`.pipes`: a JSON header, no pickle). The server waits for them in a worker
thread, without the lock; the child's parse runs on another core beside it, and its
peak memory (the body's Python objects) is the child's, given back once it is done.

The child is started on the first large body and started again after it dies; a
request's own errors (``PayloadError``, ``TooLargeError``, the contract's
``GraphInputError`` family) come back named, as the server would have raised them.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any, List, Optional

from ..columns import Columns, join
from ..contract import Contract
from ..decode import PayloadError, decode_request
from ..errors import ServeError
from ..limits import TooLargeError
from ..ops import NumpyOps
from ..pack import read_request
from .pipes import (arrays_columns, columns_arrays, error_header, raise_named,
                    recv_message, send_message, spawn)

__all__ = ["DecodeProcess", "DecoderError", "decoder_main"]

#: the errors a reply may name besides a request graph's (anything else: DecoderError)
_NAMED = (PayloadError, TooLargeError)


class DecoderError(ServeError, RuntimeError):
    """The decoding process failed on a body (not the request's fault): HTTP 500."""


def _decode_checked(contract: Contract, body: bytes, content_type: str,
                    max_graphs: Optional[int], max_decoded_bytes: Optional[int]) -> Columns:
    """``body``'s graphs as checked columns (what the server reads, then checks)."""
    ops = NumpyOps()
    graphs = decode_request(body, content_type, contract, max_graphs=max_graphs,
                            max_decoded_bytes=max_decoded_bytes)
    if isinstance(graphs, Columns):
        return graphs
    ignored: set = set()
    cols = join(contract, ops, read_request(contract, ops, graphs, ignored))
    cols.ignored = tuple(sorted(ignored))
    return cols


def decoder_main(argv: Optional[List[str]] = None) -> int:
    """The child: ``python -m graph_adapter.serve.processes.decoder FD_IN FD_OUT`` (started by
    :class:`DecodeProcess`): its first message is the contract, then bodies."""
    args = list(sys.argv[1:] if argv is None else argv)
    fin, fout = os.fdopen(int(args[0]), "rb"), os.fdopen(int(args[1]), "wb")
    header, _ = recv_message(fin)
    contract = Contract.from_json(header["contract"])
    while True:
        try:
            header, arrays = recv_message(fin)
        except EOFError:
            return 0
        try:
            cols = _decode_checked(contract, arrays[0].tobytes(), header["content_type"],
                                   header["max_graphs"], header["max_decoded_bytes"])
            reply, out = {"ignored": list(cols.ignored)}, columns_arrays(contract, cols)
        except Exception as e:  # noqa: BLE001 - sent back, named
            reply, out = error_header(e), []
        del arrays
        try:
            send_message(fout, reply, out)
        except OSError:  # the server is gone
            return 0


class DecodeProcess:
    """Bodies of ``contract``'s requests read and checked in a child process (see the
    module); one body at a time (a second caller waits for the first).

    :meth:`decode` returns checked :class:`~graph_adapter.serve.columns.Columns` or raises
    what reading the body in the server would have raised; :meth:`close` stops the
    child."""

    def __init__(self, contract: Contract):
        self.contract = contract
        self.started = 0  # children started (the first on the first body)
        self._lock = threading.Lock()
        self._proc: Optional[subprocess.Popen] = None
        self._to: Any = None
        self._from: Any = None
        self._closed = False

    def _start(self) -> None:
        self._proc, self._to, self._from, _ = spawn("graph_adapter.serve.processes.decoder")
        self.started += 1
        send_message(self._to, {"contract": self.contract.to_json()})

    def _stop_child(self) -> None:
        for f in (self._to, self._from):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        if self._proc is not None:
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
        self._proc = self._to = self._from = None

    def decode(self, body: bytes, content_type: str, *, max_graphs: Optional[int] = None,
               max_decoded_bytes: Optional[int] = None) -> Columns:
        """``body``'s graphs, read and checked in the child (as
        :func:`~graph_adapter.serve.decode.decode_request` and the contract's checks).

        Raises:
            PayloadError, TooLargeError, GraphInputError: the request's own, named.
            DecoderError: the child failed (it is started again for the next body).
        """
        import numpy as np

        with self._lock:
            if self._closed:
                raise DecoderError("the server is stopping")
            if self._proc is None or self._proc.poll() is not None:
                self._stop_child()
                self._start()
            try:
                send_message(self._to, {"content_type": content_type,
                                        "max_graphs": max_graphs,
                                        "max_decoded_bytes": max_decoded_bytes},
                             [np.frombuffer(body, dtype=np.uint8)])
                header, arrays = recv_message(self._from)
            except (EOFError, OSError, ValueError) as e:
                self._stop_child()
                raise DecoderError(f"the decoding process failed: {e}") from None
        if "error" in header:
            raise_named(header,
                        lambda text: DecoderError(f"the decoding process failed: {text}"),
                        _NAMED)
        return arrays_columns(self.contract, arrays, ignored=header["ignored"])

    def close(self) -> None:
        """Stop the child (later bodies: ``DecoderError``)."""
        with self._lock:
            self._closed = True
            self._stop_child()


if __name__ == "__main__":
    sys.exit(decoder_main())
