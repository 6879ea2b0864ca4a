"""An HTTP + JSON server of an exported artifact, with dynamic batching (standard library only).

``graph-adapter serve model.pt2 --port 8000`` (or ``python -m graph_adapter.serve``, which
needs no PyG) answers:

* ``POST /predict`` with ``{"graphs": [graph, ...]}`` (or a bare JSON list of graphs), each
  graph an object of features as nested lists (``{"x": [[...], ...], "edge_index":
  [[...], [...]], ...}``, the keys and per-graph shapes of the artifact's contract): ``200``
  ``{"predictions": [...]}``, one per graph in request order (a nested list, or an object
  ``{output key: nested list}`` for a model with several outputs); the same request in
  columns, one array a key with the graphs concatenated and their counts, reads faster:
  as JSON ``{"columns": {key: flat or nested list}, "num_nodes": [...], "num_edges":
  [...]}``, or as a body of type ``application/x-npz`` (:data:`NPZ_TYPE`), without
  JSON's cost. JSON is read and written by orjson where installed (the ``serve``
  extra), else by the standard library;
* ``GET /health``: ``{"status": "ok", ...}`` and the server's counters; a 503 with
  ``"status": "failed: ..."`` once the program's child process has died (a liveness
  probe's cue to restart the server; every ``/predict`` then answers a 500 naming it);
* ``GET /contract``: the artifact's JSON contract (:class:`~graph_adapter.serve.Contract`).

Concurrent requests are queued and merged into one ``Predictor.predict`` call (which packs
them over the artifact's budget, or over its ladder's rungs): the worker waits at most
``max_delay_ms`` after the oldest queued request for more to arrive (Triton's
``max_queue_delay``), and merges at most ``max_batch`` graphs (a request larger than that
runs alone, never cut). Each request gets its own graphs' predictions back, in order.

The program runs in a child process of its own (:mod:`.worker`; ``--program-in``):
AOTInductor's call holds the GIL while it runs, so in one process no request could be
read meanwhile; onnxruntime's lets go of it, but packing the calls would still hold it
against the decoding (256 molecules a request, 8 clients: 0.76x in-process ``predict``
in one process, 0.93x with a child, measured). This process reads and checks each
request in its own thread, the child runs the merged calls: one core each, the child's
``--threads`` for the program.

Errors are JSON ``{"error": name, "message": text, "graph": i, "key": k}``: ``400`` for a
body that is not JSON or not a list of graph objects, ``422`` for a graph the contract
refuses (``MissingFeatureError``, ``FeatureDtypeError``, ``FeatureShapeError``,
``EdgeIndexError``, ``GraphTooLargeError``: their own text, ``graph`` counted within the
request), ``411``/``413`` for a body without a length or over ``max_body_bytes``, ``503``
when the queue is full or the server is stopping. A bad request never fails the others it
was merged with, and a client that disconnects mid-request costs only its own connection.
"""
from __future__ import annotations

import argparse
import collections
import email.parser
import gc
import http.client
import itertools
import json
import math
import os
import re
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple, Union

from .columns import Columns, concat, join
from .contract import Contract
from .errors import FeatureDtypeError, FeatureShapeError, GraphInputError, ServeError
from .ops import NumpyOps
from .pack import Graph, column_graphs

try:  # a JSON codec some 3x faster than the standard library's (the serve extra has it)
    import orjson as _orjson
except ImportError:  # the same documents, through the standard library
    _orjson = None

__all__ = ["DynamicBatcher", "PredictServer", "PayloadError", "QueueFullError",
           "decode_graphs", "decode_npz", "NPZ_TYPE", "encode_prediction", "serve_main", "build_serve_parser"]


class PayloadError(ServeError, ValueError):
    """A request body that is not a JSON list of graph objects (HTTP 400)."""


# -- JSON <-> arrays -----------------------------------------------------------------------

#: the numpy dtype kinds a JSON array may have for a contract dtype's kind: integers are
#: valid floats, but a float is never silently truncated to an integer (nor 0/1 to a bool).
#: JSON ``true``/``false`` are 1/0 in a number feature, wherever they are (a graph of them
#: alone, or among numbers, as the bulk read takes them: telling them apart there would
#: cost a pass over every number, some 1 ms a request of 256 molecules)
_ACCEPTED_KINDS = {"f": "fiub", "c": "fiucb", "i": "iub", "u": "iub", "b": "b"}


def _feature_array(np: Any, f: Any, value: Any, i: int) -> Any:
    """A JSON value (nested lists) as a numpy array of the contract's dtype, or the named
    error a client can act on. Shapes are checked by ``predict`` (``FeatureShapeError``)."""
    try:
        want = np.dtype(f.dtype)
    except TypeError:  # a dtype numpy lacks (bfloat16): the runtime casts the lists itself
        return value
    try:
        a = np.asarray(value)
    except (ValueError, OverflowError):  # ragged rows, a number out of range
        raise FeatureShapeError(f"graph {i}: feature {f.key!r} is not a rectangular array of "
                                f"numbers (rows of different lengths?): send nested lists of "
                                f"its per-graph shape", i, f.key) from None
    if a.size == 0 and None in f.shape:  # [] / [[], []]: no rows (a graph without edges)
        return np.zeros([0 if d is None else d for d in f.shape], dtype=want)
    if a.dtype.kind not in _ACCEPTED_KINDS.get(want.kind, want.kind):
        what = {"f": "numbers with a fraction", "b": "true/false", "U": "strings",
                "O": "values that are not numbers (null, objects, or mixed)"}.get(
                    a.dtype.kind, "integers" if a.dtype.kind in "iu" else str(a.dtype))
        raise FeatureDtypeError(f"graph {i}: feature {f.key!r} holds {what}, the artifact was "
                                f"exported for {f.dtype}: send "
                                f"{'integers' if want.kind in 'iu' else f.dtype + ' values'}",
                                i, f.key)
    return a.astype(want, copy=False)


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _json_loads(body: bytes) -> Any:
    """``body`` parsed: by orjson where installed, else by the standard library, which
    is told to refuse ``NaN`` / ``Infinity`` as orjson does (the server answers alike
    with or without it)."""
    if _orjson is not None:
        return _orjson.loads(body)
    return json.loads(body, parse_constant=_not_json)


def _finite_or_null(doc: Any) -> Any:
    """``doc`` with every float that is not finite as ``None`` (orjson's ``null``)."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, list):
        return [_finite_or_null(v) for v in doc]
    if isinstance(doc, dict):
        return {k: _finite_or_null(v) for k, v in doc.items()}
    return doc


def _json_dumps(doc: Any) -> bytes:
    """``doc`` as strict JSON bytes: a NaN or infinite prediction is written ``null`` (by
    orjson where installed, by the standard library alike; ``NaN`` is not JSON, and
    strict readers refuse it)."""
    if _orjson is not None:
        return _orjson.dumps(doc)
    try:
        return json.dumps(doc, allow_nan=False).encode()
    except ValueError:  # a non-finite float somewhere: the rare path
        return json.dumps(_finite_or_null(doc), allow_nan=False).encode()


_chain = itertools.chain.from_iterable


def _numbers(np: Any, flat: List[Any], want: Any) -> Optional[Any]:
    """A flat list of JSON numbers as a 1-d array of dtype ``want``, or ``None`` where it
    holds something else (a float for an integer dtype, a list, null, a string, an int
    out of range). Integers and floats go through ``array.array``, which refuses what
    they may not hold as numpy's type discovery does, in two thirds of its time; JSON
    ``true``/``false`` are Python ints there, read as 1/0 (as ``_ACCEPTED_KINDS`` says)."""
    import array

    code = {"i": "q", "f": "d"}.get(want.kind)
    try:
        if code is None:
            a = np.array(flat)
            ok = a.ndim == 1 and a.dtype.kind in _ACCEPTED_KINDS.get(want.kind, want.kind)
            return a.astype(want, copy=False) if ok and a.size else None
        a = np.frombuffer(array.array(code, flat), np.int64 if code == "q" else np.float64)
    except (TypeError, ValueError, OverflowError):
        return None
    return a.astype(want, copy=False) if a.size else None


def _offsets(counts: Sequence[int]) -> List[int]:
    return [0, *itertools.accumulate(counts)]


def _views(a: Any, counts: Sequence[int], axis: int) -> List[Any]:
    """``a`` cut along ``axis`` into pieces of ``counts`` (views on dim 0; contiguous
    copies on a later dim, which torch wraps without a copy of its own)."""
    o = _offsets(counts)
    if axis == 0:
        return [a[o[k]:o[k + 1]] for k in range(len(counts))]
    import numpy as np

    index = (slice(None),) * axis
    return [np.ascontiguousarray(a[index + (slice(o[k], o[k + 1]),)])
            for k in range(len(counts))]


def _bulk_lists(np: Any, f: Any, vals: List[Any]) -> Optional[Tuple[Any, List[int]]]:
    """Every graph's nested lists of feature ``f`` as one array, concatenated on its
    ``cat_dim``, and each graph's count there; ``None`` where this path cannot vouch
    that the pieces equal what :func:`_feature_array` makes of each graph (a rank it
    does not handle, rows of another width, values that are not numbers of an accepted
    kind, no rows at all): the caller then reads graph by graph, which names the error.

    One numpy call a key instead of one a graph: a request of 256 molecules' lists reads
    in about half the time.
    """
    try:
        want = np.dtype(f.dtype)
    except TypeError:  # a dtype numpy lacks (bfloat16)
        return None
    shape = f.shape
    try:
        if len(shape) == 0:  # one number a graph
            a, counts = _numbers(np, vals, want), [1] * len(vals)
        elif f.cat_dim == 0 and len(shape) <= 2:  # [n] or [n, w]: rows
            counts = list(map(len, vals))
            rows = list(_chain(vals))
            if len(shape) == 1:
                a = _numbers(np, rows, want)
            elif set(map(len, rows)) - {shape[1]}:  # (TypeError: a row that is a number)
                return None
            else:
                a = _numbers(np, list(_chain(rows)), want)
                a = None if a is None else a.reshape(len(rows), shape[1])
        elif f.cat_dim == 1 and len(shape) == 2 and shape[0]:  # [r, n]: columns
            if set(map(len, vals)) - {shape[0]}:
                return None
            counts = [len(v[0]) for v in vals]
            if any([len(v[j]) for v in vals] != counts for j in range(1, shape[0])):
                return None
            rows = [_numbers(np, list(_chain(v[j] for v in vals)), want)
                    for j in range(shape[0])]
            a = None if any(r is None for r in rows) else np.stack(rows)
        else:
            return None
    except TypeError:  # not lists
        return None
    return None if a is None else (a, counts)


def _bulk_arrays(np: Any, graphs: List[Any], contract: Contract
                 ) -> Optional[Dict[str, Tuple[Any, List[int]]]]:
    """``{key: (joined array, per-graph counts)}`` of every contract feature read by
    :func:`_bulk_lists`, or ``None`` (a graph that is not an object or lacks a feature, a
    feature that path leaves to :func:`_feature_array`): then every feature is read
    graph by graph, so that the first wrong graph is the one named, as always."""
    if not all(type(g) is dict for g in graphs):
        return None
    out = {}
    for f in contract.features:
        vals = [g.get(f.key) for g in graphs]
        if any(v is None for v in vals):
            return None
        got = _bulk_lists(np, f, vals)
        if got is None:
            return None
        out[f.key] = got
    return out


def _bulk_graphs(np: Any, graphs: List[Any], joined: Dict[str, Tuple[Any, List[int]]],
                 contract: Contract) -> List[Dict[str, Any]]:
    """The request's graphs with every contract feature a view of its joined array."""
    out = [dict(g) for g in graphs]
    for f in contract.features:
        a, counts = joined[f.key]
        parts = [a[k, ...] for k in range(len(graphs))] if not f.shape else \
            _views(a, counts, f.cat_dim)
        for d, part in zip(out, parts):
            d[f.key] = part
    return out


def _bulk_columns(graphs: List[Any], joined: Dict[str, Tuple[Any, List[int]]],
                  contract: Contract) -> Optional[Columns]:
    """The request as checked :class:`Columns`, where ``read_graph`` would take every
    graph as it is (each level's keys agree on every graph's count, a node-level key
    counts its nodes, graph-level keys hold their rows); else ``None``."""
    counts: Dict[str, List[int]] = {}
    for f in contract.features:
        c = joined[f.key][1]
        if f.level == "graph":
            if f.shape and any(n != f.rows for n in c):
                return None
        elif counts.setdefault(f.level, c) != c:
            return None
    if "node" not in counts:  # counted by num_nodes: graph by graph
        return None
    keys = {f.key for f in contract.features} | {"num_nodes"}
    ignored = tuple(dict.fromkeys(k for g in graphs for k in g if k not in keys))
    return Columns({k: a for k, (a, _) in joined.items()}, counts["node"],
                   counts.get("edge", [0] * len(graphs)), range(len(graphs)), ignored)


def decode_graphs(body: bytes, contract: Contract) -> List[Dict[str, Any]]:
    """The graphs of a ``POST /predict`` body: each contract feature as a numpy array of
    the contract's dtype (other keys, such as labels, are passed on and ignored).

    The body is ``{"graphs": [graph, ...]}`` (or a bare list), each graph an object of
    nested lists of its per-graph shape; or the columnar form ``{"columns": {key: ...},
    "num_nodes": [...], "num_edges": [...]}``, each key the request's graphs concatenated
    as in an ``.npz`` body (:func:`decode_npz`), as nested lists or flat (row-major).

    Raises :class:`PayloadError` (not JSON, not a list of objects) or the
    :class:`~graph_adapter.serve.GraphInputError` of the first wrong feature.
    """
    return _decode(body, "application/json", contract, columns=False)  # type: ignore


def decode_request(body: bytes, content_type: str, contract: Contract
                   ) -> Union[Columns, List[Dict[str, Any]]]:
    """The graphs of a ``POST /predict`` body of ``content_type`` (:data:`NPZ_TYPE`, else
    JSON), as :func:`decode_graphs` / :func:`decode_npz` read them; a request whose
    arrays are already what ``predict`` checks graph by graph (every feature, the
    contract's dtypes and per-graph shapes, counts that agree) comes back as checked
    :class:`~graph_adapter.serve.columns.Columns` instead, one array a feature (no view,
    check and join a graph: 256 molecules, some 1.5 ms of the server's time)."""
    return _decode(body, content_type, contract, columns=True)


def _decode(body: bytes, content_type: str, contract: Contract, columns: bool
            ) -> Union[Columns, List[Dict[str, Any]]]:
    import numpy as np

    if content_type.startswith(NPZ_TYPE):
        arrays = _npz_arrays(body)
        return (columns and _array_columns(np, arrays, contract)) or \
            _split_columns(arrays, contract)
    try:
        doc = _json_loads(body)
    except (ValueError, RecursionError) as e:  # (UnicodeDecodeError is a ValueError)
        raise PayloadError(f"the body is not valid JSON ({e}); send "
                           f'{{"graphs": [{{"x": [[...]], "edge_index": [[...], [...]]}}]}}')
    if isinstance(doc, dict) and "columns" in doc:
        arrays = _json_columns(np, doc, contract)
        return (columns and _array_columns(np, arrays, contract)) or \
            _split_columns(arrays, contract)
    graphs = doc.get("graphs") if isinstance(doc, dict) else doc
    if not isinstance(graphs, list):
        raise PayloadError('the body must be {"graphs": [graph, ...]} (or a JSON list of '
                           f'graphs), got a JSON {type(doc).__name__}'
                           + (f" with keys {sorted(doc)}" if isinstance(doc, dict) else ""))
    # (one graph: reading it alone costs less than the bulk read's checks, 14 us measured)
    joined = _bulk_arrays(np, graphs, contract) if len(graphs) > 1 else None
    if joined is not None:
        return (columns and _bulk_columns(graphs, joined, contract)) or \
            _bulk_graphs(np, graphs, joined, contract)
    out = []
    for i, g in enumerate(graphs):
        if not isinstance(g, dict):
            raise PayloadError(f"graph {i} is a JSON {type(g).__name__}, not an object of "
                               f"features ({{\"x\": [[...]], ...}})")
        d = dict(g)
        for f in contract.features:
            if d.get(f.key) is not None:
                d[f.key] = _feature_array(np, f, d[f.key], i)
        out.append(d)
    return out


#: the body type of graphs as arrays: an ``.npz`` (``numpy.savez``) of one array a feature
#: key, the request's graphs concatenated along its per-graph ``None`` dim (``x``: their
#: nodes' rows; ``edge_index``: their edges' columns, each graph's from 0), and the
#: per-graph counts ``num_nodes`` (and ``num_edges`` for edge-level keys)
NPZ_TYPE = "application/x-npz"


def _npz_arrays(body: bytes) -> Dict[str, Any]:
    import io
    import zipfile

    import numpy as np

    try:
        z = np.load(io.BytesIO(body), allow_pickle=False)
        return {name: z[name] for name in z.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, AttributeError) as e:
        raise PayloadError(f"the body is not an .npz of plain arrays ({e}); write it with "
                           f"numpy.savez(buffer, num_nodes=..., x=..., edge_index=...)") from None


def decode_npz(body: bytes, contract: Contract) -> List[Dict[str, Any]]:
    """The graphs of an ``application/x-npz`` body (:data:`NPZ_TYPE`; no pickle), each
    feature a view of its rows; dtypes and per-graph shapes are checked by ``predict``.

    One array a key, not one a graph: an ``.npz`` member costs some 0.1 ms to read, and
    JSON lists more than a bulk request's program (256 molecules: ``json.loads`` 10 ms,
    9 ms more to arrays).
    """
    return _split_columns(_npz_arrays(body), contract)


def _split_columns(arrays: Dict[str, Any], contract: Contract) -> List[Dict[str, Any]]:
    """The graphs of a columnar request (``.npz`` or JSON ``columns``): ``arrays`` holds
    one array a feature key, the graphs concatenated, and the counts; each graph gets its
    rows of every key."""
    import numpy as np

    _check_counts(arrays)
    counts = {"node": arrays["num_nodes"]}
    graphs: List[Dict[str, Any]] = [{"num_nodes": int(n)} for n in counts["node"]]
    for f in contract.features:
        a = arrays.get(f.key)
        if a is None:
            continue  # predict names it (MissingFeatureError)
        if not f.shape:  # 0-d graph-level values: one a graph
            _check_rows(np, f, a, arrays)
            for k, g in enumerate(graphs):
                g[f.key] = a[k, ...]  # (a 0-d array, not a numpy scalar)
            continue
        per = _check_rows(np, f, a, arrays)
        for g, part in zip(graphs, _views(a, per.tolist(), f.cat_dim)):
            g[f.key] = part
    return graphs


def _check_counts(arrays: Dict[str, Any]) -> None:
    """A columnar request's ``num_nodes`` / ``num_edges``, or its ``PayloadError``."""
    if any(k in arrays and (arrays[k].ndim != 1 or arrays[k].dtype.kind not in "iu"
                            or (arrays[k] < 0).any())
           for k in ("num_nodes", "num_edges")) or "num_nodes" not in arrays:
        raise PayloadError(f"a columnar request needs 'num_nodes' (and 'num_edges'), 1-d "
                           f"integer arrays of one count (>= 0) a graph, beside its features "
                           f"(an .npz: one array a key; JSON: \"columns\"); it has "
                           f"{sorted(arrays)}")


def _check_rows(np: Any, f: Any, a: Any, arrays: Dict[str, Any]) -> Any:
    """The per-graph counts of feature ``f`` in a columnar request (its joined array
    ``a`` holds their rows on its ``cat_dim``), or its ``PayloadError``."""
    k = len(arrays["num_nodes"])
    if f.level == "edge" and "num_edges" not in arrays:
        raise PayloadError(f"{f.key!r} is edge-level: give 'num_edges' (one count a "
                           f"graph) too")
    if not f.shape:  # 0-d graph-level values: one a graph
        if a.shape != (k,):
            raise PayloadError(f"{f.key!r} has shape {list(a.shape)}: one value a "
                               f"graph, [{k}]")
        return np.ones(k, dtype=np.int64)
    per = {"node": arrays["num_nodes"], "edge": arrays.get("num_edges"),
           "graph": np.full(k, f.rows)}[f.level]
    if per.shape != (k,) or a.ndim <= f.cat_dim or a.shape[f.cat_dim] != int(per.sum()):
        raise PayloadError(f"{f.key!r} has shape {list(a.shape)}: its dim {f.cat_dim} "
                           f"must hold the {f.level} rows of every graph "
                           f"({int(per.sum())} by the counts given, {k} graphs)")
    return per


def _array_columns(np: Any, arrays: Dict[str, Any], contract: Contract
                   ) -> Optional[Columns]:
    """A columnar request (``.npz`` or JSON ``columns``) as checked :class:`Columns`,
    where ``read_graph`` would take each graph of it as it is: every feature there, of
    the contract's dtype and fixed dims; else ``None`` (its ``PayloadError`` raised)."""
    _check_counts(arrays)
    feats = {}
    for f in contract.features:
        a = arrays.get(f.key)
        if a is None:
            return None
        _check_rows(np, f, a, arrays)
        try:
            if a.dtype != np.dtype(f.dtype) or type(a) is not np.ndarray:
                return None
        except TypeError:  # a dtype numpy lacks (bfloat16)
            return None
        if f.shape and (a.ndim != len(f.shape) or any(
                s is not None and d != f.cat_dim and a.shape[d] != s
                for d, s in enumerate(f.shape))):
            return None
        feats[f.key] = a
    nodes = arrays["num_nodes"].tolist()
    edge_level = any(f.level == "edge" for f in contract.features)
    edges = arrays["num_edges"].tolist() if edge_level else [0] * len(nodes)
    return Columns(feats, nodes, edges, range(len(nodes)))


def _column(np: Any, f: Any, value: Any, arrays: Dict[str, Any]) -> Any:
    """A JSON column (nested lists of the concatenated array, or its flat row-major
    list) as an array of the contract's dtype and the concatenated shape; a column of
    another kind of number is refused by :func:`_feature_array`, graph by graph, so the
    error names the first graph that holds one."""
    a = None
    if isinstance(value, list) and not (value and isinstance(value[0], list)):
        try:  # flat: the fast read (None: let numpy say what the list holds)
            a = _numbers(np, value, np.dtype(f.dtype))
        except TypeError:  # a dtype numpy lacks (bfloat16)
            pass
    try:
        a = np.asarray(value) if a is None else a
    except (ValueError, OverflowError):
        raise PayloadError(f"column {f.key!r} is not a rectangular array of numbers: send "
                           f"the graphs' rows concatenated, nested or flat") from None
    if a.ndim == 1 and len(f.shape) > 1:  # flat: the concatenated shape from the counts
        if f.level == "edge" and "num_edges" not in arrays:
            raise PayloadError(f"{f.key!r} is edge-level: give 'num_edges' (one count a "
                               f"graph) too")
        per = {"node": arrays["num_nodes"], "edge": arrays.get("num_edges"),
               "graph": None}[f.level]
        total = f.rows * len(arrays["num_nodes"]) if per is None else int(per.sum())
        shape = [total if d is None else d for d in f.shape]
        if f.level == "graph" and None not in f.shape:
            shape[0] *= len(arrays["num_nodes"])
        if a.size != int(np.prod(shape)):
            raise PayloadError(f"column {f.key!r} holds {a.size} numbers, its concatenated "
                               f"shape {shape} (by the counts given) {int(np.prod(shape))}")
        a = a.reshape(shape)
    try:
        want = np.dtype(f.dtype)
    except TypeError:  # a dtype numpy lacks (bfloat16): the runtime casts it
        return a
    if a.size and a.dtype.kind not in _ACCEPTED_KINDS.get(want.kind, want.kind):
        objs = np.asarray(value, dtype=object).reshape(a.shape)  # the numbers as sent
        split = _split_columns({**arrays, f.key: objs}, _only(f))
        for i, g in enumerate(split):
            _feature_array(np, f, g[f.key].tolist(), i)  # raises for the first such graph
    return a.astype(want, copy=False) if a.size else np.zeros(a.shape, want)


def _only(f: Any) -> Any:
    """A stand-in contract of the one feature ``f`` (for splitting one column)."""
    from types import SimpleNamespace

    return SimpleNamespace(features=(f,))


def _json_columns(np: Any, doc: Dict[str, Any], contract: Contract) -> Dict[str, Any]:
    """The arrays of a columnar JSON body (see :func:`decode_graphs`): the counts and one
    array a feature it holds."""
    cols = doc.get("columns")
    if not isinstance(cols, dict) or not isinstance(doc.get("num_nodes"), list) or \
            not isinstance(doc.get("num_edges", []), list):
        raise PayloadError('a columnar body is {"columns": {key: list, ...}, "num_nodes": '
                           '[one count a graph], "num_edges": [...]}; it has '
                           f'{sorted(doc)} with "columns" a JSON {type(cols).__name__}')
    arrays: Dict[str, Any] = {}
    for k in ("num_nodes", "num_edges"):
        if k in doc:
            a = np.asarray(doc[k]) if doc[k] else np.zeros(0, np.int64)
            if a.ndim != 1 or a.dtype.kind not in "iu" or (a < 0).any():
                raise PayloadError(f"{k!r} must be a list of integers, one count (>= 0) a "
                                   f"graph")
            arrays[k] = a
    for f in contract.features:
        if cols.get(f.key) is not None:
            arrays[f.key] = _column(np, f, cols[f.key], arrays)
    return arrays


def _as_list(v: Any) -> Any:
    return v.tolist() if hasattr(v, "tolist") else v


def encode_prediction(pred: Any) -> Any:
    """One graph's prediction (an array, or ``{key: array}``) as JSON-ready nested lists."""
    if isinstance(pred, dict):
        return {k: _as_list(v) for k, v in pred.items()}
    return _as_list(pred)


# -- dynamic batching ----------------------------------------------------------------------

class _Pending:
    """One queued request: its graphs, and its answer once the worker has one."""

    __slots__ = ("graphs", "arrived", "answered", "preds", "error", "_ready")

    def __init__(self, graphs: Sequence[Any]):
        self.graphs = graphs
        self.arrived = time.monotonic()
        self.answered = False
        self.preds: Optional[List[Any]] = None
        self.error: Optional[BaseException] = None
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

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Whether the answer came within ``timeout`` seconds (``None``: no limit)."""
        return self._ready.acquire(timeout=-1 if timeout is None else max(timeout, 0))


class QueueFullError(ServeError):
    """The batcher holds ``max_queue`` requests already, or is closed (HTTP 503)."""


class DynamicBatcher:
    """Merges concurrent ``predict`` requests into one ``Predictor.predict`` call.

    One worker thread runs every call (so the predictor is never used by two threads).
    It takes the oldest queued request, waits until ``max_batch`` graphs are queued or
    ``max_delay_s`` has passed since that request arrived, and predicts the queued
    requests (in arrival order, at most ``max_batch`` graphs; one larger request alone)
    as one list: ``predict`` packs it over the budget or the ladder's rungs. A request
    whose graphs the contract refuses gets its own error (graph positions counted within
    it); the others of its merge are predicted without it.

    ``max_batch``: graphs a merge holds; default one call of the bulk budget (its graph
    slots less the padding one). ``max_queue``: requests waiting, beyond which
    :meth:`submit` raises :class:`QueueFullError`.
    """

    def __init__(self, predictor: Any, max_delay_s: float = 0.002,
                 max_batch: Optional[int] = None, max_queue: int = 1024):
        self.predictor = predictor
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
        self.closed = False
        self.cond = threading.Condition()
        #: requests answered, graphs predicted, merged calls made, requests refused
        self.stats = {"requests": 0, "graphs": 0, "batches": 0, "refused": 0}
        self.worker = threading.Thread(target=self._loop, name="graph_adapter-batcher",
                                       daemon=True)
        self.worker.start()

    def submit(self, graphs: Sequence[Any], timeout: Optional[float] = None) -> List[Any]:
        """The predictions of ``graphs`` (as ``Predictor.predict``), once merged and run;
        raises what ``predict`` raised for them, ``QueueFullError``, or ``TimeoutError``."""
        p = _Pending(graphs)
        with self.cond:
            if self.closed or len(self.queue) >= self.max_queue:
                raise QueueFullError("the server is stopping" if self.closed else
                                     f"{len(self.queue)} requests are queued already "
                                     f"(max_queue): retry later")
            self.queue.append(p)
            self.queued_graphs += len(graphs)
            # the worker waits on the condition only for a first request, or for a merge
            # to fill up (see _take): waking it for every request that arrives while it
            # waits out max_delay made it take the GIL once more a request, to wait again
            if len(self.queue) == 1 or self.queued_graphs >= self.max_batch:
                self.cond.notify()
        if not p.wait(timeout):
            raise TimeoutError(f"no answer within {timeout} s (the worker is busy)")
        if p.error is not None:
            raise p.error
        assert p.preds is not None
        return p.preds

    def close(self, timeout: Optional[float] = None) -> None:
        """Answer what is queued, then stop the worker (later submits: ``QueueFullError``)."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.worker.join(timeout)

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
            while wait and self.queued_graphs < self.max_batch and not self.closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            batch = [self.queue.popleft()]
            n = len(batch[0].graphs)
            while self.queue and n + len(self.queue[0].graphs) <= self.max_batch:
                n += len(self.queue[0].graphs)
                batch.append(self.queue.popleft())
            self.queued_graphs -= n
            return batch

    def _loop(self) -> None:
        """Take merges and run them. With a predictor that can have a second request in
        flight (``send`` / ``receive``: a program's process), the next merge is sent
        before the last one's answers are read, so that the program never waits while
        this process answers and merges (8 clients, `.pt2`: 16 molecules a request 0.71x
        -> 0.82x in-process ``predict``'s throughput, 256: 0.74x -> 0.95x, measured)."""
        inflight: Deque[Tuple[List[_Pending], Any]] = collections.deque()
        send = getattr(self.predictor, "send", None)
        while True:
            if inflight and not (self.queue and self.predictor.can_send()):
                self._guarded(inflight[0][0], self._finish, *inflight.popleft())
                continue
            batch = self._take(wait=not inflight)
            if batch is None:
                return
            if not batch:
                continue
            if send is None:
                self._guarded(batch, self._run, batch)
                continue
            self.stats["requests"] += len(batch)
            try:
                inflight.append((batch, send(self._merge([p.graphs for p in batch]))))
            except Exception:  # noqa: BLE001 - each request on its own, answered
                self._guarded(batch, self._settle, batch)

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
            self.stats["refused"] += 1
            p.answer(error=e)

    def _run(self, batch: List[_Pending]) -> None:
        self.stats["requests"] += len(batch)
        self._settle(batch)

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


# -- HTTP ----------------------------------------------------------------------------------

def _error_body(e: BaseException) -> Dict[str, Any]:
    return {"error": type(e).__name__, "message": str(e), "graph": getattr(e, "graph", None),
            "key": getattr(e, "key", None)}


def _status(e: BaseException) -> int:
    if isinstance(e, PayloadError):
        return 400
    if isinstance(e, GraphInputError):
        return 422
    if isinstance(e, (QueueFullError, TimeoutError)):
        return 503
    return 500


#: the standard library's limits on a request's header block (``http.client``): a line
#: of at most this many bytes, and this many lines with the blank one that ends them
_MAX_HEADER_LINE = 65536
_MAX_HEADER_LINES = 100
#: a header block the lean reader takes as it is: ``name: value`` lines, the name of
#: printable ASCII without ``:``, the value without a byte that ``email``'s parser (the
#: standard library's reader) would take for a line break; anything else (folded lines,
#: a line without ``:``, a bare CR) is read by that parser, for the same headers
_PLAIN_HEADERS = re.compile(
    rb"(?:[\x21-\x39\x3b-\x7e]+:[^\r\n\x0b\x0c\x1c-\x1e\x85]*\r?\n)*")


class _Headers(dict):
    """A request's headers by lower-case name, the first of a repeated name kept;
    ``get`` / ``[]`` / ``in`` as ``http.client.HTTPMessage`` answers them."""

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return dict.get(self, name.lower(), default)

    def __getitem__(self, name: str) -> Any:
        return dict.get(self, name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and dict.__contains__(self, name.lower())


def _read_header_lines(rfile: Any) -> List[bytes]:
    """A request's header lines, the blank one that ends them (or ``b""``: the client
    closed) the last; raises ``http.client.LineTooLong`` / ``HTTPException`` past the
    standard library's limits, with its text."""
    lines = []
    while True:
        line = rfile.readline(_MAX_HEADER_LINE + 1)
        if len(line) > _MAX_HEADER_LINE:
            raise http.client.LineTooLong("header line")
        lines.append(line)
        if len(lines) > _MAX_HEADER_LINES:
            raise http.client.HTTPException(f"got more than {_MAX_HEADER_LINES} headers")
        if line in (b"\r\n", b"\n", b""):
            return lines


def _parse_header_lines(lines: List[bytes]) -> Any:
    """``lines`` (:func:`_read_header_lines`) as headers: plain ones (all a client sends,
    in practice) split here (5 us a block; ``email``'s parser: 24 us, measured), any
    other block read by that parser (a ``HTTPMessage``, as the standard library's)."""
    head = b"".join(lines[:-1])
    if _PLAIN_HEADERS.fullmatch(head):
        out = _Headers()
        for line in head.decode("iso-8859-1").splitlines():
            name, _, value = line.partition(":")
            out.setdefault(name.lower(), value.lstrip(" \t"))
        return out
    return email.parser.Parser(_class=http.client.HTTPMessage).parsestr(
        b"".join(lines).decode("iso-8859-1"))


#: (second, its ``Date`` header value): the standard library formats it anew each response
_date: Tuple[int, str] = (0, "")


class _Handler(BaseHTTPRequestHandler):
    """The standard library's handler with a leaner request read and response write for
    the requests clients send (same limits, refusals and answers, byte for byte): each
    request costs the server's process less CPU, which it shares with the program's."""

    protocol_version = "HTTP/1.1"  # keep-alive: a client reuses its connection
    server_version = "graph_adapter-serve"
    #: a client that stalls mid-request is dropped after this many seconds of silence
    timeout = 30.0
    #: TCP_NODELAY: an answer is one write, but the standard library's error answers
    #: (``send_error``) are two; with Nagle's algorithm the second waits for the client's
    #: delayed ACK (40 ms a request on Linux, measured)
    disable_nagle_algorithm = True
    server: "PredictServer"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        if self.server.verbose:
            super().log_message(format, *args)

    def parse_request(self) -> bool:
        """The standard library's ``parse_request`` for a request line of ``HTTP/1.1`` or
        ``HTTP/1.0`` with a method and a path (its own for any other line: its checks and
        refusals), the headers read by :func:`_read_header_lines` /
        :func:`_parse_header_lines` instead of ``http.client.parse_headers``."""
        line = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        words = line.split()
        # (a path of '//...': the standard library's, which makes it '/...' since 3.11.4
        # and its backports, and not before)
        if len(words) != 3 or words[2] not in ("HTTP/1.1", "HTTP/1.0") or \
                words[1].startswith("//"):
            return bool(super().parse_request())
        self.requestline = line
        self.command, self.path, self.request_version = words
        self.close_connection = words[2] == "HTTP/1.0"
        try:
            self.headers = _parse_header_lines(_read_header_lines(self.rfile))
        except http.client.LineTooLong as err:
            self.send_error(431, "Line too long", str(err))
            return False
        except http.client.HTTPException as err:
            self.send_error(431, "Too many headers", str(err))
            return False
        conntype = (self.headers.get("Connection") or "").lower()
        if conntype == "close":
            self.close_connection = True
        elif conntype == "keep-alive":
            self.close_connection = False
        if (self.headers.get("Expect") or "").lower() == "100-continue" and \
                self.request_version == "HTTP/1.1":
            return bool(self.handle_expect_100())
        return True

    def _send(self, code: int, doc: Any, raw: Optional[bytes] = None) -> None:
        """The answer, its status line, headers and body in one write (the standard
        library's ``send_response`` / ``send_header`` make the same bytes in two)."""
        global _date
        body = raw if raw is not None else _json_dumps(doc)
        if self.server.verbose:
            self.log_request(code)
        if self.request_version == "HTTP/0.9":  # (a bare "GET /path": no status, no headers)
            out = body
        else:
            now = int(time.time())
            if _date[0] != now:
                _date = (now, self.date_time_string(now))
            close = "Connection: close\r\n" if self.close_connection else ""
            out = (f"{self.protocol_version} {code} {self.responses.get(code, ('',))[0]}\r\n"
                   f"Server: {self.version_string()}\r\nDate: {_date[1]}\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                   f"{close}\r\n").encode("latin-1") + body
        try:
            self.wfile.write(out)
        except OSError:  # the client left before its answer (BrokenPipe, reset)
            self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802 - the base's name
        if self.path == "/health":  # 503 once the program cannot answer (a probe restarts it)
            doc = self.server.health()
            self._send(503 if doc["status"].startswith("failed") else 200, doc)
        elif self.path == "/contract":
            self._send(200, None, self.server.contract_json)
        else:
            self._send(404, {"error": "NotFound", "message": f"no {self.path}: GET /health, "
                             f"GET /contract, POST /predict"})

    def _body(self) -> Optional[bytes]:
        """The request body, or ``None`` once an error was sent / the client is gone."""
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            self._send(411, {"error": "LengthRequired", "message": "send a Content-Length "
                             "header (chunked bodies are not read)"})
            return None
        n = int(length)
        if n > self.server.max_body_bytes:
            self.close_connection = True
            self._send(413, {"error": "PayloadTooLarge", "message": f"a body of {n} bytes; "
                             f"this server reads at most {self.server.max_body_bytes} (split "
                             f"the request, or start it with a larger --max-body-mb)"})
            return None
        chunks, got = [], 0
        try:
            while got < n:
                chunk = self.rfile.read(min(n - got, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
        except OSError:  # a reset or a timeout while reading: the client is gone
            got = -1
        if got != n:  # disconnected mid-body: nobody to answer
            self.close_connection = True
            self.server.count("disconnected")
            return None
        return b"".join(chunks)

    def do_POST(self) -> None:  # noqa: N802 - the base's name
        if self.path != "/predict":
            self.close_connection = True  # its body is not read
            self._send(404, {"error": "NotFound", "message": f"no POST {self.path}: POST "
                             f"/predict"})
            return
        body = self._body()
        if body is None:
            return
        try:
            predictor = self.server.predictor
            graphs = decode_request(body, self.headers.get("Content-Type", ""),
                                    predictor.contract)
            if isinstance(graphs, Columns):  # checked as it was read
                predictor.ignored_keys.update(graphs.ignored)
            elif self.server.check_here:  # the program's process runs meanwhile
                graphs = predictor.check(graphs)
            preds = self.server.batcher.submit(graphs, self.server.request_timeout_s)
            doc = {"predictions": [encode_prediction(p) for p in preds]}
        except Exception as e:  # noqa: BLE001 - every failure is answered, named
            code = _status(e)
            if code == 500:
                self.log_error("internal error on POST /predict: %r", e)
            self._send(code, _error_body(e))
            return
        self._send(200, doc)


class PredictServer(ThreadingHTTPServer):
    """The HTTP server of one loaded artifact (one thread a connection, one batching worker).

    ``predictor``: a :class:`~graph_adapter.serve.Predictor` (``serve.load(path)``).
    ``port=0`` picks a free port (:attr:`port`, :attr:`url`). :meth:`start` serves in a
    background thread; :meth:`close` (or leaving a ``with`` block) stops accepting,
    answers what is queued, and releases the port. ``serve_forever`` / ``shutdown``
    are the standard library's.
    """

    daemon_threads = True  # a connection left open does not keep the process alive
    #: the listen backlog (the standard library's default is 5): with more clients
    #: connecting at once while the accepting thread waits for the GIL, the kernel drops
    #: their SYNs and each retries after 1 s (8 clients, 256-molecule requests: one
    #: pass in three ran at 0.2x its throughput, measured)
    request_queue_size = 128
    allow_reuse_address = True

    def __init__(self, predictor: Any, host: str = "127.0.0.1", port: int = 8000, *,
                 max_delay_ms: float = 2.0, max_batch: Optional[int] = None,
                 max_queue: int = 1024, max_body_bytes: int = 64 << 20,
                 request_timeout_s: float = 60.0, verbose: bool = False):
        self.predictor = predictor
        #: a predictor whose program runs elsewhere (a child process): each request's
        #: graphs are checked in its own thread, the program's runs overlapping
        self.check_here = bool(getattr(predictor, "takes_checked", False))
        self.batcher = DynamicBatcher(predictor, max_delay_ms / 1e3, max_batch, max_queue)
        self.max_body_bytes = int(max_body_bytes)
        self.request_timeout_s = float(request_timeout_s)
        self.verbose = verbose
        self.contract_json = predictor.contract.to_json().encode()
        self.started = time.time()
        self.counters: Dict[str, int] = {"disconnected": 0}
        self.lock = threading.Lock()
        self.thread: Optional[threading.Thread] = None
        super().__init__((host, port), _Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.server_address[0]}:{self.port}"

    def count(self, what: str) -> None:
        with self.lock:
            self.counters[what] = self.counters.get(what, 0) + 1

    def health(self) -> Dict[str, Any]:
        """``GET /health``: the artifact, the batching settings and the counters."""
        c, b = self.predictor.contract, self.batcher
        rc = getattr(self.predictor, "exited", lambda: None)()
        status = "stopping" if b.closed else "ok"
        if rc is not None:  # the program's child is gone: every predict would fail
            status = (f"failed: the program's process exited with code {rc}; restart the "
                      f"server")
        return {"status": status, "format": c.format,
                "budget": {"nodes": c.nodes, "edges": c.edges, "graphs": c.graphs},
                "rungs": len(c.rungs), "max_batch": b.max_batch,
                "max_delay_ms": b.max_delay_s * 1e3, "queued": len(b.queue),
                "calls": self.predictor.calls, **b.stats, **self.counters,
                "program_restarts": getattr(self.predictor, "restarts", 0),
                "sent_ahead": getattr(self.predictor, "sent_ahead", 0),
                "program_pid": getattr(self.predictor, "pid", os.getpid()),
                "uptime_s": round(time.time() - self.started, 3)}

    def start(self) -> "PredictServer":
        """Serve in a daemon thread; returns at once (the port is bound already)."""
        self.thread = threading.Thread(target=self.serve_forever, name="graph_adapter-http",
                                       daemon=True)
        self.thread.start()
        return self

    def close(self, timeout: float = 10.0) -> None:
        """Stop serving (from any thread but the one in ``serve_forever``), answer what is
        queued, release the port."""
        if self.thread is not None:
            self.shutdown()
            self.thread.join(timeout)
            self.thread = None
        self.batcher.close(timeout)
        self.server_close()

    def __enter__(self) -> "PredictServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# -- the command ---------------------------------------------------------------------------

def build_serve_parser(prog: str = "graph-adapter serve") -> argparse.ArgumentParser:
    """The options of ``graph-adapter serve`` / ``python -m graph_adapter.serve``."""
    p = argparse.ArgumentParser(prog=prog, description="Serve an artifact of "
                                "graph_adapter.export over HTTP + JSON (POST /predict, GET "
                                "/health, GET /contract), merging concurrent requests.")
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
                   help="how long the oldest queued request waits for others to merge "
                        "with (default 2; 0: merge only what is queued already)")
    p.add_argument("--max-batch", type=int, default=None,
                   help="graphs a merged call holds at most (default: one call of the "
                        "largest budget's graph slots)")
    p.add_argument("--max-queue", type=int, default=1024, help="queued requests beyond "
                   "which the server answers 503 (default 1024)")
    p.add_argument("--max-body-mb", type=float, default=64.0, help="default 64")
    p.add_argument("--verbose", action="store_true", help="log every request")
    return p


def serve_main(argv: Optional[Sequence[str]] = None, prog: str = "graph-adapter serve", *,
               stop: Optional[threading.Event] = None,
               started: Optional[Callable[[PredictServer], Any]] = None) -> int:
    """Run the server until SIGINT/SIGTERM (or ``stop`` is set); returns the exit code (2:
    a usage error, a missing runtime or file, a port in use; the message says which).
    ``started(server)`` is called once it listens (a test reads ``server.url`` there)."""
    try:
        args = build_serve_parser(prog).parse_args(argv)
    except SystemExit as e:  # --help (0) or a usage error (2)
        return int(e.code or 0)
    predictor = None
    try:
        predictor = _load_predictor(args.artifact, args.threads, args.program_in)
        server = PredictServer(predictor, args.host, args.port, max_delay_ms=args.max_delay_ms,
                               max_batch=args.max_batch, max_queue=args.max_queue,
                               max_body_bytes=int(args.max_body_mb * (1 << 20)),
                               verbose=args.verbose)
    except (ServeError, OSError, ValueError) as e:  # no file, not an artifact, port taken
        if predictor is not None and hasattr(predictor, "close"):
            predictor.close()
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    # the objects alive now (torch, the program, the modules) are never garbage: kept out
    # of the collector's full passes, which a large request's JSON lists trigger (a body
    # of 256 molecules: json.loads 50 -> 10 ms in a process holding a dataset, measured)
    gc.collect()  # (no garbage frozen with them)
    gc.freeze()
    # and a request's lists are short-lived and acyclic: at the default 700 allocations a
    # pass, reading 256 molecules ran some 20 collections (orjson's read: 1.2 -> 2-2.9 ms
    # beside requests in flight, measured); a pass every 50000 costs next to nothing
    gc.set_threshold(max(gc.get_threshold()[0], 50_000), *gc.get_threshold()[1:])
    if server.check_here:  # the program's child waits for the batcher's next call
        # the batcher thread, woken by the child's answer, waits for the GIL that a
        # request's thread holds while it reads: up to the switch interval (5 ms) in
        # which the child idles; 0.5 ms hands it over sooner
        sys.setswitchinterval(min(sys.getswitchinterval(), 0.0005))
    stop = stop or threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():  # Ctrl-C, docker stop
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    c = predictor.contract
    print(f"serving {args.artifact} ({c.format}, {len(c.rungs) or 1} budget(s), max batch "
          f"{server.batcher.max_batch} graphs, max delay {args.max_delay_ms} ms) on "
          f"{server.url}: POST /predict, GET /health, GET /contract", flush=True)
    server.start()
    if started is not None:
        started(server)
    try:
        while not stop.wait(0.5):
            pass
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
    packing an ``.onnx`` one's calls would hold it against decoding: :mod:`.worker`); a
    contract with an input dtype numpy lacks stays here."""
    from .runtime import load, read_contract

    if not os.path.exists(path):
        raise FileNotFoundError(f"no artifact at {path}")
    if where == "server":
        return load(path, threads=threads)
    from .worker import ProcessPredictor, crosses_pipes

    contract = read_contract(path)
    if not crosses_pipes(contract):  # (bfloat16 inputs: checked by torch)
        return load(path, threads=threads)
    return ProcessPredictor(path, threads, contract)

