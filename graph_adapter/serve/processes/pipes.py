"""The messages between the server and its child processes (:mod:`.program`'s program,
:mod:`.decoder`'s reader): a little-endian ``uint32`` header length, a JSON header
(``"arrays"``: dtype and shape of each array), then the arrays' raw bytes. Never a
pickle: both sides are ours, and an array of objects is refused."""
from __future__ import annotations

import json
import struct
from typing import Any, BinaryIO, Callable, Dict, List, Mapping, Sequence, Tuple

from ..errors import GraphInputError

__all__ = ["send_message", "recv_message", "error_header", "raise_named"]

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


def raise_named(header: Mapping[str, Any], named: Mapping[str, type],
                other: Callable[[str], BaseException]) -> None:
    """Raise the error a reply's header names: as its own class where it is one of
    ``named`` (a graph's error with its graph and key), else ``other(text)``."""
    cls, msg = named.get(header["error"]), header["message"]
    if cls is not None and issubclass(cls, GraphInputError):
        raise cls(msg, header["graph"], header["key"])
    if cls is not None:
        raise cls(msg)
    raise other(f"{header['error']}: {msg}")
