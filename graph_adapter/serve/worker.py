"""A ``.pt2`` program run in a child process of its own, beside the server's HTTP threads.

An AOTInductor package run from Python holds the GIL for the whole call (torch's binding
of ``AOTIModelPackageLoader.boxed_run`` releases none), so in one process the server's
request decoding and HTTP wait for every predict. :class:`ProcessPredictor` keeps those
in the server's process and runs ``serve.load(path).predict`` in a child
(``python -m graph_adapter.serve.worker``): the two overlap, one core each.

What crosses the pipes is numpy arrays the server made and sizes it controls, never a
pickle: the server decodes and checks each request graph against the contract (the named
errors of :func:`~graph_adapter.serve.pack.read_graph`, the same text as in-process
``predict``), then sends each feature key's arrays concatenated over the graphs (as an
``.npz`` request holds them) with the graphs' node and edge counts. The child splits
them into per-graph views, runs ``predict`` on them and sends each output key's rows
back, concatenated; an error of ``predict`` comes back by its class name, message,
graph and key, and is raised again here. A message is a little-endian ``uint32`` header
length, a JSON header (``"arrays"``: dtype and shape of each), then the arrays' bytes.

The child exits when its input pipe closes: at :meth:`ProcessPredictor.close`, or when
the server's process ends in any way (no orphan); it ignores SIGINT, so that Ctrl-C in a
terminal lets the server answer what is queued first.
"""
from __future__ import annotations

import gc
import json
import os
import signal
import struct
import subprocess
import sys
import threading
from typing import Any, BinaryIO, Dict, List, Optional, Sequence, Tuple

from . import errors
from .contract import Contract
from .errors import GraphInputError, ServeError
from .ops import NumpyOps
from .pack import Graph, read_request

__all__ = ["ProcessPredictor", "WorkerError", "crosses_pipes", "worker_main"]

_HEAD = struct.Struct("<I")
#: the errors the child's reply may name (anything else: WorkerError with its text)
_NAMED = {c.__name__: c for c in (errors.MissingFeatureError, errors.FeatureDtypeError,
                                  errors.FeatureShapeError, errors.EdgeIndexError,
                                  errors.GraphTooLargeError, errors.GraphInputError,
                                  errors.ArtifactError, errors.RuntimeMissingError)}


class WorkerError(ServeError, RuntimeError):
    """The program's process failed (it exited, or ``predict`` raised an error that is not
    a request graph's): HTTP 500; the server's log has the child's own message."""


# -- messages: a JSON header and raw arrays ------------------------------------------------

def _send(f: BinaryIO, header: Dict[str, Any], arrays: Sequence[Any] = ()) -> None:
    import numpy as np

    arrays = [np.ascontiguousarray(a) for a in arrays]
    head = json.dumps({**header, "arrays": [[a.dtype.str, list(a.shape)] for a in arrays]})
    raw = head.encode()
    f.write(_HEAD.pack(len(raw)) + raw)
    for a in arrays:
        if a.nbytes:
            f.write(memoryview(a).cast("B"))
    f.flush()


def _read_exact(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if data is None or len(data) != n:
        raise EOFError("the pipe closed mid-message")
    return data


def _recv(f: BinaryIO) -> Tuple[Dict[str, Any], List[Any]]:
    """The next message (``EOFError``: the other side is gone)."""
    import numpy as np

    first = f.read(_HEAD.size)
    if not first:
        raise EOFError("the pipe closed")
    if len(first) != _HEAD.size:
        raise EOFError("the pipe closed mid-message")
    header = json.loads(_read_exact(f, _HEAD.unpack(first)[0]))
    arrays = []
    for dtype, shape in header.pop("arrays"):
        dt = np.dtype(dtype)
        if dt.hasobject:  # never: what a pickle would need (both sides are ours)
            raise ValueError(f"an array of dtype {dtype} on the pipe")
        n = dt.itemsize * int(np.prod(shape, dtype=np.int64))
        buf = bytearray(_read_exact(f, n)) if n else bytearray()
        arrays.append(np.frombuffer(buf, dtype=dt).reshape(shape))
    return header, arrays


def _error_header(e: BaseException) -> Dict[str, Any]:
    return {"error": type(e).__name__, "message": str(e), "graph": getattr(e, "graph", None),
            "key": getattr(e, "key", None)}


def _raise_named(header: Dict[str, Any]) -> None:
    """Raise the error a reply names, as its own class where it is one of ``_NAMED``."""
    cls, msg = _NAMED.get(header["error"]), header["message"]
    if cls is not None and issubclass(cls, GraphInputError):
        raise cls(msg, header["graph"], header["key"])
    if cls is not None:
        raise cls(msg)
    raise WorkerError(f"the program's process failed: {header['error']}: {msg}")


def _offsets(counts: Sequence[int]) -> List[int]:
    out = [0]
    for c in counts:
        out.append(out[-1] + int(c))
    return out


def _level_counts(nodes: Sequence[int], edges: Sequence[int], level: str,
                  rows: int = 1) -> Sequence[int]:
    """The per-graph counts of a key of ``level`` (a graph-level key: ``rows`` each)."""
    return {"node": nodes, "edge": edges}.get(level, [rows] * len(nodes))


def _cut(a: Any, counts: Sequence[int], axis: int) -> List[Any]:
    """``a`` cut along ``axis`` into pieces of ``counts`` (views)."""
    o = _offsets(counts)
    head = (slice(None),) * axis
    return [a[head + (slice(o[k], o[k + 1]),)] for k in range(len(counts))]


# -- the child ------------------------------------------------------------------------------

def _child_graphs(contract: Contract, arrays: List[Any], torch: Any = None) -> List[Graph]:
    """The request graphs of a message, as the checked graphs ``predict_checked`` takes
    (the server checked them against the same contract: its dtypes and per-graph shapes;
    checking them again here cost 2.6 ms of a 256-molecule request, measured). ``arrays``
    is ``[num_nodes, num_edges, one array a contract feature]``, each feature's graphs
    concatenated on its ``cat_dim``. With ``torch`` (a .pt2 program) each graph's
    features are views of one tensor a key (numpy arrays the packer wraps one by one:
    256 molecules, 1.4 ms more a call, measured)."""
    nodes, edges = arrays[0].tolist(), arrays[1].tolist()
    graphs = [Graph({}, n, e, (), k) for k, (n, e) in enumerate(zip(nodes, edges))]
    for f, a in zip(contract.features, arrays[2:]):
        if torch is not None:
            t = torch.from_numpy(a)
            parts = t.unbind(0) if not f.shape else torch.split(
                t, list(_level_counts(nodes, edges, f.level, f.rows)), f.cat_dim)
        elif not f.shape:  # one value a graph
            parts = [a[k, ...] for k in range(len(graphs))]
        else:
            parts = _cut(a, _level_counts(nodes, edges, f.level, f.rows), f.cat_dim)
        for g, part in zip(graphs, parts):
            g.features[f.key] = part
    return graphs


def _child_outputs(contract: Contract, preds: List[Any]) -> List[Any]:
    """Each output key's per-graph predictions concatenated (graph-level: stacked), as
    numpy arrays (torch's of a dtype numpy lacks, bfloat16: as float32, the same values)."""
    import numpy as np

    out = []
    for f in contract.outputs:
        parts = preds if len(contract.outputs) == 1 else [p[f.key] for p in preds]
        if isinstance(parts[0], np.ndarray):  # an .onnx program's
            out.append(np.stack(parts) if f.level == "graph" else np.concatenate(parts))
            continue
        import torch

        t = torch.stack(parts) if f.level == "graph" else torch.cat(parts)
        if t.dtype == torch.bfloat16:
            t = t.float()
        out.append(t.detach().cpu().numpy())
    return out


def _serve_pipe(predictor: Any, fin: BinaryIO, fout: BinaryIO) -> int:
    """Answer requests until the input pipe closes (the server stopped or is gone)."""
    torch = predictor.ops.torch if predictor.ops.name == "torch" else None
    while True:
        try:
            _, arrays = _recv(fin)
        except EOFError:
            return 0
        try:
            preds = predictor.predict_checked(_child_graphs(predictor.contract, arrays, torch))
            outs = _child_outputs(predictor.contract, preds)
            reply: Dict[str, Any] = {}
        except Exception as e:  # noqa: BLE001 - sent back, named, for the server to answer
            outs, reply = [], _error_header(e)
        counts = {"calls": predictor.calls, "rung_calls": predictor.rung_calls}
        try:
            _send(fout, {**reply, **counts}, outs)
        except OSError:  # the server is gone
            return 0


def worker_main(argv: Optional[Sequence[str]] = None) -> int:
    """The child: ``python -m graph_adapter.serve.worker FD_IN FD_OUT ARTIFACT [THREADS]``
    (started by :class:`ProcessPredictor`, which owns both pipes)."""
    from .runtime import load

    args = list(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server stops us (EOF), after draining
    fin, fout = os.fdopen(int(args[0]), "rb"), os.fdopen(int(args[1]), "wb")
    try:
        predictor = load(args[2], threads=int(args[3]) if len(args) > 3 else None)
    except Exception as e:  # noqa: BLE001 - the server raises it again, named
        _send(fout, _error_header(e))
        return 1
    # as the server does (serve_main): what is alive now is never garbage, and a request's
    # objects are short-lived and acyclic; at the default thresholds the collector ran
    # often enough to double predict's time here (256 molecules: 11 -> 22 ms, measured)
    gc.collect()
    gc.freeze()
    gc.set_threshold(max(gc.get_threshold()[0], 50_000), *gc.get_threshold()[1:])
    _send(fout, {"ready": os.getpid()})
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


def _big_pipe(fd: int) -> None:
    """A 1 MiB pipe buffer (Linux; else the default): a request of 256 molecules is some
    0.5 MB, written in one go instead of 64 KiB at a time, each waiting for the reader."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except (ImportError, OSError):
        pass


class ProcessPredictor:
    """``serve.load(path, threads=threads)`` run in a child process; ``predict`` as
    :meth:`Predictor.predict <graph_adapter.serve.Predictor.predict>` (the same
    predictions and named errors), its arrays numpy arrays. One call at a time.

    Attributes: ``contract``, ``format``, ``calls``, ``rung_calls``, ``ignored_keys`` (as
    the in-process predictor's), ``pid`` (the child's). :meth:`close` stops the child.
    Raises what ``load`` raised in the child (``ArtifactError``, ``RuntimeMissingError``).
    """

    def __init__(self, path: str, threads: Optional[int] = None):
        from .runtime import read_contract

        path = os.fspath(path)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no artifact at {path}")
        self.contract = read_contract(path)  # (a .pt2: its zip's JSON, no torch here)
        self.format = self.contract.format
        self.calls = 0
        self.rung_calls: Dict[str, int] = {r.program: 0 for r in self.contract.rungs}
        self.ignored_keys: set = set()
        self.ops = NumpyOps()
        self._lock = threading.Lock()
        self.process, self._to, self._from = self._spawn(path, threads)
        try:
            header, _ = self._reply()  # "ready", or what load raised there
        except BaseException:
            self.close()
            raise
        self.pid: int = int(header["ready"])

    @staticmethod
    def _spawn(path: str, threads: Optional[int]) -> Tuple[Any, BinaryIO, BinaryIO]:
        down_r, down_w = os.pipe()  # requests: the server writes, the child reads
        up_r, up_w = os.pipe()  # replies
        for fd in (down_w, up_w):
            _big_pipe(fd)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(  # this checkout's package
            p for p in (root, os.environ.get("PYTHONPATH")) if p))
        cmd = [sys.executable, "-m", "graph_adapter.serve.worker", str(down_r), str(up_w),
               path] + ([] if threads is None else [str(int(threads))])
        try:
            proc = subprocess.Popen(cmd, pass_fds=(down_r, up_w), stdin=subprocess.DEVNULL,
                                    env=env)
        finally:  # the child's ends are the child's alone: its EOF is our exit
            os.close(down_r)
            os.close(up_w)
        return proc, os.fdopen(down_w, "wb"), os.fdopen(up_r, "rb")

    def _reply(self) -> Tuple[Dict[str, Any], List[Any]]:
        try:
            header, arrays = _recv(self._from)
        except (EOFError, OSError, ValueError):
            rc = self.process.poll()
            raise WorkerError(f"the program's process (pid {self.process.pid}) exited"
                              f"{'' if rc is None else f' with code {rc}'}: its error is in "
                              f"the server's log; restart the server") from None
        self.calls = header.get("calls", self.calls)
        self.rung_calls.update(header.get("rung_calls", {}))
        if "error" in header:
            _raise_named(header)
        return header, arrays

    def _columns(self, checked: Sequence[Any]) -> List[Any]:
        """``[num_nodes, num_edges, each feature's arrays concatenated]`` (see the module)."""
        import numpy as np

        out = [np.array([g.nodes for g in checked], dtype=np.int64),
               np.array([g.edges for g in checked], dtype=np.int64)]
        for f in self.contract.features:
            parts = [g.features[f.key] for g in checked]
            out.append(np.stack(parts) if not f.shape else np.concatenate(parts, f.cat_dim))
        return out

    #: the server calls :meth:`check` in the request's own thread, beside the child's
    #: runs, and submits the checked graphs (which :meth:`predict` takes as they are)
    takes_checked = True

    def check(self, graphs: Sequence[Any]) -> List[Graph]:
        """Every request graph checked against the contract (the named errors of
        in-process ``predict``, positions within ``graphs``), as numpy arrays."""
        return read_request(self.contract, self.ops, graphs, self.ignored_keys)  # (numpy)

    def predict(self, graphs: Sequence[Any]) -> List[Any]:
        """One prediction per graph, in request order (numpy arrays; several outputs: a
        dict a graph); graphs not yet checked (by :meth:`check`) are checked first."""
        checked = graphs if graphs and all(type(g) is Graph for g in graphs) \
            else self.check(graphs)
        if not checked:
            return []
        with self._lock:
            if self._to.closed:
                raise WorkerError("the predictor is closed")
            try:
                _send(self._to, {}, self._columns(checked))
            except OSError:  # the child is gone: _reply says how
                pass
            _, outs = self._reply()
        nodes, edges = [g.nodes for g in checked], [g.edges for g in checked]
        per: List[Dict[str, Any]] = [{} for _ in checked]
        for f, a in zip(self.contract.outputs, outs):
            parts = list(a) if f.level == "graph" else _cut(
                a, _level_counts(nodes, edges, f.level), 0)
            for d, part in zip(per, parts):
                d[f.key] = part
        if len(self.contract.outputs) == 1:
            key = self.contract.outputs[0].key
            return [d[key] for d in per]
        return per

    def exited(self) -> Optional[int]:
        """The child's exit code where it ended by itself (a crash, a kill), else ``None``
        (it runs, or :meth:`close` stopped it)."""
        if self._to.closed:
            return None
        return self.process.poll()

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
