"""Reading ``POST /predict`` bodies into graphs, and predictions into JSON.

A body is JSON graphs (``{"graphs": [graph, ...]}`` or a bare list, each graph an object of
nested lists), JSON columns (``{"columns": {key: list}, "num_nodes": [...], "num_edges":
[...]}``) or an ``.npz`` (:data:`NPZ_TYPE`, no pickle). JSON is read and written by orjson
where installed (the ``serve`` extra), else by the standard library. An ``.npz`` body's
members are sized from their ``.npy`` headers before any is decompressed
(:func:`npz_member_sizes`): a small compressed body that would unpack to gigabytes is
refused before it is unpacked.
"""
from __future__ import annotations

import itertools
import json
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .columns import Columns
from .contract import Contract
from .errors import FeatureDtypeError, FeatureShapeError, ServeError
from .limits import TooLargeError

try:  # a JSON codec some 3x faster than the standard library's (the serve extra has it)
    import orjson as _orjson
except ImportError:  # the same documents, through the standard library
    _orjson = None

__all__ = ["PayloadError", "TooLargeError", "json_dumps", "decode_graphs", "decode_request",
           "decode_npz", "npz_member_sizes", "NPZ_TYPE", "encode_prediction"]

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


def json_dumps(doc: Any) -> bytes:
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


def decode_request(body: bytes, content_type: str, contract: Contract, *,
                   max_graphs: Optional[int] = None, max_decoded_bytes: Optional[int] = None
                   ) -> Union[Columns, List[Dict[str, Any]]]:
    """The graphs of a ``POST /predict`` body of ``content_type`` (:data:`NPZ_TYPE`, else
    JSON), as :func:`decode_graphs` / :func:`decode_npz` read them; a request whose
    arrays are already what ``predict`` checks graph by graph (every feature, the
    contract's dtypes and per-graph shapes, counts that agree) comes back as checked
    :class:`~graph_adapter.serve.columns.Columns` instead, one array a feature (no view,
    check and join a graph: 256 molecules, some 1.5 ms of the server's time).

    ``max_graphs``: graphs a request may hold; ``max_decoded_bytes``: the bytes an
    ``.npz`` body's arrays may unpack to. Both are checked before any feature array is
    made (an ``.npz`` from its members' headers, before they are unpacked).

    Raises:
        PayloadError: a body that is not one of the forms above.
        TooLargeError: a request past ``max_graphs`` or ``max_decoded_bytes``.
        GraphInputError: the first graph the contract refuses (its subclass names why).
    """
    return _decode(body, content_type, contract, columns=True, max_graphs=max_graphs,
                   max_decoded_bytes=max_decoded_bytes)


def _check_graph_count(n: int, max_graphs: Optional[int]) -> None:
    if max_graphs is not None and n > max_graphs:
        raise TooLargeError(f"the request holds {n} graphs; this server takes at most "
                            f"{max_graphs} a request (--max-graphs): split it")


def _decode(body: bytes, content_type: str, contract: Contract, columns: bool,
            max_graphs: Optional[int] = None, max_decoded_bytes: Optional[int] = None
            ) -> Union[Columns, List[Dict[str, Any]]]:
    import numpy as np

    if content_type.startswith(NPZ_TYPE):
        arrays = _npz_arrays(body, max_graphs, max_decoded_bytes)
        return (columns and _array_columns(np, arrays, contract)) or \
            _split_columns(arrays, contract)
    try:
        doc = _json_loads(body)
    except (ValueError, RecursionError) as e:  # (UnicodeDecodeError is a ValueError)
        raise PayloadError(f"the body is not valid JSON ({e}); send "
                           f'{{"graphs": [{{"x": [[...]], "edge_index": [[...], [...]]}}]}}')
    if isinstance(doc, dict) and "columns" in doc:
        if isinstance(doc.get("num_nodes"), list):
            _check_graph_count(len(doc["num_nodes"]), max_graphs)
        arrays = _json_columns(np, doc, contract)
        return (columns and _array_columns(np, arrays, contract)) or \
            _split_columns(arrays, contract)
    graphs = doc.get("graphs") if isinstance(doc, dict) else doc
    if not isinstance(graphs, list):
        raise PayloadError('the body must be {"graphs": [graph, ...]} (or a JSON list of '
                           f'graphs), got a JSON {type(doc).__name__}'
                           + (f" with keys {sorted(doc)}" if isinstance(doc, dict) else ""))
    _check_graph_count(len(graphs), max_graphs)
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


def npz_member_sizes(body: bytes) -> Dict[str, Tuple[Tuple[int, ...], Any]]:
    """``{name: (shape, dtype)}`` of every array of an ``.npz`` body, read from each
    member's ``.npy`` header: only the first bytes of each member are unpacked, so a
    body that would unpack to gigabytes is sized from a few hundred bytes of it.

    Raises :class:`PayloadError`: not a zip of ``.npy`` members, or a member whose
    header is not one (object arrays included: they would need pickle).
    """
    import io
    import zipfile

    import numpy as np
    from numpy.lib import format as npy

    out = {}
    try:
        with zipfile.ZipFile(io.BytesIO(body)) as z:
            for info in z.infolist():
                name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                with z.open(info) as f:
                    version = npy.read_magic(f)
                    if version == (1, 0):
                        shape, _, dtype = npy.read_array_header_1_0(f)
                    else:
                        shape, _, dtype = npy.read_array_header_2_0(f)
                if dtype.hasobject:
                    raise ValueError(f"member {name!r} holds Python objects (pickle)")
                out[name] = (tuple(int(d) for d in shape), dtype)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, RuntimeError,
            NotImplementedError) as e:
        raise PayloadError(f"the body is not an .npz of plain arrays ({e}); write it with "
                           f"numpy.savez(buffer, num_nodes=..., x=..., edge_index=...)") from None
    return out


def _npz_arrays(body: bytes, max_graphs: Optional[int] = None,
                max_decoded_bytes: Optional[int] = None) -> Dict[str, Any]:
    import io
    import zipfile

    import numpy as np

    if max_graphs is not None or max_decoded_bytes is not None:
        sizes = npz_member_sizes(body)
        total = sum(math.prod(shape) * dtype.itemsize for shape, dtype in sizes.values())
        if max_decoded_bytes is not None and total > max_decoded_bytes:
            raise TooLargeError(f"the .npz body's arrays unpack to {total} bytes; this "
                                f"server unpacks at most {max_decoded_bytes} a request "
                                f"(--max-decoded-mb): split the request")
        counts = sizes.get("num_nodes")
        if counts is not None and len(counts[0]) == 1:
            _check_graph_count(counts[0][0], max_graphs)
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
