"""The server's child processes: how one is started (:func:`spawn`), and the messages
between them (:mod:`.program`'s program, :mod:`.decoder`'s reader): a little-endian
``uint32`` header length, a JSON header (``"arrays"``: dtype and shape of each array),
then the arrays' raw bytes. Never a pickle: both sides are ours, and an array of
objects is refused. Checked request columns travel as ``[num_nodes, num_edges, one
array a contract feature]`` (:func:`columns_arrays`, :func:`arrays_columns`)."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from typing import (Any, BinaryIO, Callable, Dict, List, Mapping, Optional, Sequence,
                    Tuple)

from ..columns import Columns
from ..contract import Contract
from ..errors import GraphInputError

__all__ = ["spawn", "send_message", "recv_message", "error_header", "raise_named",
           "columns_arrays", "arrays_columns"]

_HEAD = struct.Struct("<I")


def send_message(f: BinaryIO, header: Dict[str, Any], arrays: Sequence[Any] = ()) -> None:
    """Write one message: ``header`` (JSON-able) and ``arrays`` (numpy), then flush."""
    import numpy as np

    arrays = [np.ascontiguousarray(a) for a in arrays]
    head = json.dumps({**header, "arrays": [[a.dtype.str, list(a.shape)] for a in arrays]})
    raw = head.encode()
    f.write(_HEAD.pack(len(raw)) + raw)
    for a in arrays:
        if a.nbytes:
            f.write(memoryview(a).cast("B"))
    f.flush()


def _read_exact(f: BinaryIO, n: int, first: bool = False) -> bytearray:
    """``n`` bytes of ``f`` (buffered or not: an unbuffered pipe returns what has come),
    ``EOFError`` where it closes before (``first``: before a message began, said so)."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = f.readinto(view[got:])
        if not k:
            raise EOFError("the pipe closed" if first and not got else
                           "the pipe closed mid-message")
        got += k
    return buf


def recv_message(f: BinaryIO) -> Tuple[Dict[str, Any], List[Any]]:
    """The next message: ``(header, arrays)`` (``EOFError``: the other side is gone)."""
    import numpy as np

    first = _read_exact(f, _HEAD.size, first=True)
    header = json.loads(_read_exact(f, _HEAD.unpack(first)[0]))
    arrays = []
    for dtype, shape in header.pop("arrays"):
        dt = np.dtype(dtype)
        if dt.hasobject:  # never: what a pickle would need (both sides are ours)
            raise ValueError(f"an array of dtype {dtype} on the pipe")
        n = dt.itemsize * int(np.prod(shape, dtype=np.int64))
        buf = _read_exact(f, n) if n else bytearray()
        arrays.append(np.frombuffer(buf, dtype=dt).reshape(shape))
    return header, arrays


def error_header(e: BaseException) -> Dict[str, Any]:
    """A reply's header naming ``e``: its class name, message, graph and key."""
    return {"error": type(e).__name__, "message": str(e), "graph": getattr(e, "graph", None),
            "key": getattr(e, "key", None)}


def _graph_errors() -> Dict[str, type]:
    """:class:`GraphInputError` and its subclasses, by name (a request graph's errors)."""
    out: Dict[str, type] = {}
    todo = [GraphInputError]
    while todo:
        c = todo.pop()
        out[c.__name__] = c
        todo += c.__subclasses__()
    return out


def raise_named(header: Mapping[str, Any], other: Callable[[str], BaseException],
                named: Sequence[type] = ()) -> None:
    """Raise the error a reply's header names: a request graph's error (the
    :class:`GraphInputError` family) with its graph and key, one of ``named`` as its own
    class, else ``other(text)``."""
    msg = header["message"]
    cls = _graph_errors().get(header["error"])
    if cls is not None:
        raise cls(msg, header["graph"], header["key"])
    cls = {c.__name__: c for c in named}.get(header["error"])
    if cls is not None:
        raise cls(msg)
    raise other(f"{header['error']}: {msg}")


def columns_arrays(contract: Contract, cols: Columns) -> List[Any]:
    """Checked columns as a message's arrays: ``[num_nodes, num_edges, each contract
    feature's array]``."""
    import numpy as np

    return [np.array(cols.nodes, dtype=np.int64), np.array(cols.edges, dtype=np.int64),
            *(cols.features[f.key] for f in contract.features)]


def arrays_columns(contract: Contract, arrays: Sequence[Any],
                   wrap: Optional[Callable[[Any], Any]] = None,
                   ignored: Sequence[str] = ()) -> Columns:
    """A message's arrays (:func:`columns_arrays`) as checked columns again, each feature
    passed through ``wrap`` (e.g. ``torch.from_numpy``: no copy) where given."""
    nodes, edges = arrays[0].tolist(), arrays[1].tolist()
    feats = {f.key: wrap(a) if wrap is not None else a
             for f, a in zip(contract.features, arrays[2:])}
    return Columns(feats, nodes, edges, range(len(nodes)), tuple(ignored))


def _big_pipe(fd: int) -> int:
    """A 1 MiB pipe buffer (Linux; else the default): a request of 256 molecules is some
    0.5 MB, written in one go instead of 64 KiB at a time, each waiting for the reader.
    Returns the buffer's size (the 64 KiB it has at least where it cannot be read)."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
        return int(fcntl.fcntl(fd, getattr(fcntl, "F_GETPIPE_SZ", 1032)))
    except (ImportError, OSError):
        return 1 << 16


def spawn(module: str, args: Sequence[str] = ()
          ) -> Tuple[subprocess.Popen, BinaryIO, BinaryIO, int]:
    """``python -m module FD_IN FD_OUT *args``, importing this checkout's package: the
    child, the pipe this process writes to it, the pipe it answers on (unbuffered here:
    no reply is ever held in this process's buffer unread, so the pipe's readiness says
    whether one has come), and that pipe's buffer size. The child's ends are its alone:
    it sees EOF once this process closes its end or ends in any way."""
    down_r, down_w = os.pipe()  # requests: this process writes, the child reads
    up_r, up_w = os.pipe()  # replies
    _big_pipe(down_w)
    reply_bytes = _big_pipe(up_w)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(  # this checkout's package
        p for p in (root, os.environ.get("PYTHONPATH")) if p))
    try:
        proc = subprocess.Popen([sys.executable, "-m", module, str(down_r), str(up_w),
                                 *args], pass_fds=(down_r, up_w), stdin=subprocess.DEVNULL,
                                env=env)
    finally:
        os.close(down_r)
        os.close(up_w)
    return proc, os.fdopen(down_w, "wb"), os.fdopen(up_r, "rb", buffering=0), reply_bytes
