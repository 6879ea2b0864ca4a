"""Request graphs -> padded calls in the artifact's layout (``docs/dev/FORMAT.md``), no PyG.

A request graph is a mapping of arrays/tensors (``{"x": ..., "edge_index": ...}``) or any
object with those attributes (PyG ``Data``). Each one is checked against the contract
(named errors: a missing feature, a wrong dtype or width, an index outside its graph, a
graph too large for one call), then the graphs are packed in request order into as few
padded calls as the budget allows: real rows first, exactly as ``collate_padded`` lays
them out; padding nodes (zero features) fill the padding graph slots ``g .. G - 1`` (one
each while they last, the rest in slot ``G - 1``); padding edges are self-loops on the
last node ``N - 1``; padding graph-level float rows are NaN, integer ones 0.

An ONNX artifact whose edge sums read neighbour tables (its contract has the reserved
inputs ``in_slots`` ``[N, S]`` and ``in_spill`` ``[2, K]``, ``docs/dev/FORMAT.md``) gets
them built here from the call's ``edge_index`` (:func:`in_tables`); a call is closed
before its edges past the width ``S`` would be more than ``K``.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from ..contract import (BATCH, EDGE_MASK, ELL_IN, GRAPH_MASK, NODE_MASK, PTR, SPILL_IN, misfit,
                        pad_value, padding_node, slot_counts)
from .columns import Columns, join
from .contract import Contract, InputField
from .errors import (CodeRangeError, EdgeIndexError, EmptyGraphError, FeatureDtypeError,
                     FeatureShapeError, GraphTooLargeError, MissingFeatureError, NonFiniteError)
from .ops import dtype_name

__all__ = ["Graph", "read_graph", "read_graphs", "read_request", "plan_calls", "plan_ladder", "pack_call",
           "pack_columns", "column_graphs", "column_spills", "table_width",
           "in_tables", "spill_counts", "check_values", "check_graph_values",
           "check_served_size", "CALL_OVERHEAD_ROWS", "SLOTS", "SPILL"]

#: the reserved inputs of an ONNX artifact whose edge sums gather over neighbour tables:
#: ``in_slots`` [N, S] (each node's real in-edge ids, then ``E``), ``in_spill`` [2, K]
#: (the in-edges past a node's width: edge id, node; padding ``(E, N - 1)``)
SLOTS, SPILL = ELL_IN, SPILL_IN


@dataclass
class Graph:
    """One checked request graph: its features (cast where allowed) and its sizes."""

    features: Dict[str, Any]
    nodes: int
    edges: int
    ignored: Tuple[str, ...] = ()
    position: int = 0  # in the request (named by errors)


def _get(graph: Any, key: str) -> Any:
    if type(graph) is dict or isinstance(graph, Mapping):  # (a plain dict: the fast check)
        return graph.get(key)
    return getattr(graph, key, None)


def _keys(graph: Any) -> Set[str]:
    if isinstance(graph, Mapping):
        return set(graph)
    keys = getattr(graph, "keys", None)  # PyG Data: a method since PyG 2.4
    return set(keys() if callable(keys) else (keys or ()))


def _shape(a: Any) -> Tuple[int, ...]:
    return tuple(int(s) for s in a.shape)


def _checked(ops: Any, f: InputField, raw: Any, i: int) -> Any:
    """``raw`` as an array of the contract's dtype and per-graph shape, or a named error."""
    if isinstance(raw, (list, tuple)):  # no dtype of its own: take the contract's
        a = ops.from_list(raw, f.dtype)
    else:
        a, same = ops.array_of(raw, f.dtype)
        if not same:
            if f.inc == "nodes" and ops.is_integer(a):
                a = ops.cast(a, f.dtype)  # any integer index dtype is the same index
            else:
                raise FeatureDtypeError(
                    f"graph {i}: feature {f.key!r} is {dtype_name(a)}, the artifact was "
                    f"exported for {f.dtype}: cast it (e.g. x.astype('{f.dtype}') / "
                    f"x.to(torch.{f.dtype})) before predict", i, f.key)
    if not f.fits(a.shape):
        want = f.shape
        pretty = "[" + ", ".join("n" if w is None else str(w) for w in want) + "]"
        raise FeatureShapeError(
            f"graph {i}: feature {f.key!r} has shape {list(_shape(a))}, the artifact takes "
            f"{pretty} per graph ({f.level}-level; n: its {f.level} count)", i, f.key)
    return a


def read_graph(contract: Contract, ops: Any, graph: Any, i: int) -> Graph:
    """Check request graph ``i`` against ``contract``; its features and sizes.

    Node count: the rows of its node-level features (or ``num_nodes``); edge count: the
    columns of ``edge_index`` (the rows of its edge-level features). Every feature of a
    level must agree on it (``FeatureShapeError`` otherwise).
    """
    feats: Dict[str, Any] = {}
    # (rows, the key that gave them) per level; a plain loop, no helper calls: this
    # runs for every feature of every graph (7.7 us a graph of 3 features before)
    sizes: Dict[str, Tuple[int, str]] = {}
    mapping = type(graph) is dict or isinstance(graph, Mapping)
    for f in contract.features:
        raw = graph.get(f.key) if mapping else getattr(graph, f.key, None)
        if raw is None:
            have = sorted(_keys(graph))
            raise MissingFeatureError(
                f"graph {i}: no feature {f.key!r}, which the exported model reads "
                f"({f.level}-level, {f.dtype}, per-graph shape "
                f"{[('n' if s is None else s) for s in f.shape]}); the graph has {have}", i, f.key)
        a = _checked(ops, f, raw, i)
        feats[f.key] = a
        n = int(a.shape[f.cat_dim]) if f.shape else 1
        if f.level == "graph":
            if f.shape and n != f.rows:
                raise FeatureShapeError(f"graph {i}: graph-level feature {f.key!r} has "
                                        f"{n} rows, the artifact takes {f.rows}", i, f.key)
            continue
        seen = sizes.get(f.level)
        if seen is None:
            sizes[f.level] = (n, f.key)
        elif seen[0] != n:
            raise FeatureShapeError(f"graph {i}: {f.key!r} has {n} {f.level} rows but "
                                    f"{seen[1]!r} has {seen[0]}", i, f.key)
    if "node" in sizes:
        nodes = sizes["node"][0]
    else:
        nn = _get(graph, "num_nodes")
        if nn is None:
            raise MissingFeatureError(f"graph {i}: no node-level feature to count its nodes "
                                      f"by: give num_nodes", i, "num_nodes")
        nodes = int(nn)
    edges = sizes["edge"][0] if "edge" in sizes else 0
    ignored = tuple(k for k in (graph if mapping else _keys(graph))
                    if k not in feats and k != "num_nodes")
    return Graph(feats, nodes, edges, ignored, i)


def read_graphs(contract: Contract, ops: Any, graphs: Sequence[Any]) -> List[Graph]:
    """:func:`read_graph` of every request graph, the same results and errors.

    The usual request takes a fast path: the contract's fields read once, then per
    graph a plain dict of arrays of the runtime's own type (numpy arrays for ONNX, CPU
    tensors without grad for pt2), the contract's dtypes and per-graph shapes, is taken
    as it is (one type, dtype, rank and dims test a feature; ``read_graph`` spent 3.8 us
    a graph in its helpers, 1 ms of a 256-molecule request; 10 us a graph of torch
    tensors). Anything else (a cast, a missing key, a shape to name) goes through
    ``read_graph``, which casts or raises the named error. Values are not read here
    (:func:`read_request` checks them too)."""
    name = getattr(ops, "name", "")
    if name not in ("numpy", "torch"):
        return [read_graph(contract, ops, g, i) for i, g in enumerate(graphs)]
    nd = ops.np.ndarray if name == "numpy" else ops.torch.Tensor
    specs = [(f.key, ops.dtype(f.dtype), len(f.shape),
              tuple((d, s) for d, s in enumerate(f.shape) if s is not None), f.cat_dim,
              f.level, f.rows if f.shape else 0) for f in contract.features]
    keys = {sp[0] for sp in specs}
    out: List[Graph] = []
    for i, g in enumerate(graphs):
        got = _fast_graph(g, i, specs, keys, nd, name == "torch") if type(g) is dict else None
        out.append(got if got is not None else read_graph(contract, ops, g, i))
    return out


def read_request(contract: Contract, ops: Any, graphs: Sequence[Any],
                 ignored: Set[str]) -> List[Graph]:
    """A ``predict`` request's graphs checked (:func:`read_graphs`, then their values:
    :func:`check_graph_values`: no 0-node graph, codes within their tables, no NaN/inf
    where the contract forbids them), the keys the contract does not read added to
    ``ignored``; a single graph passed bare is a ``TypeError``."""
    if isinstance(graphs, Mapping) or hasattr(graphs, "edge_index"):
        raise TypeError("predict takes a list of graphs; for one graph pass [graph]")
    out = read_graphs(contract, ops, graphs)
    check_graph_values(contract, ops, out)
    for g in out:
        ignored.update(g.ignored)
    return out


def _fast_graph(g: Dict[str, Any], i: int, specs: List[Any], keys: Set[str],
                nd: Any, tensors: bool = False) -> Optional[Graph]:
    """``g`` as a :class:`Graph` when every feature is an array of type ``nd`` as the
    contract has it (``tensors``: also on the CPU, without grad) and the levels agree
    on their counts; ``None``: ``read_graph`` decides."""
    feats: Dict[str, Any] = {}
    nodes = edges = -1
    for key, dt, rank, fixed, cat, level, rows in specs:
        a = g.get(key)
        if type(a) is not nd or a.dtype != dt or a.ndim != rank:
            return None
        if tensors and (a.requires_grad or not a.is_cpu):
            return None
        shape = a.shape
        for d, size in fixed:
            if shape[d] != size:
                return None
        n = shape[cat] if rank else 1
        if level == "node":
            if nodes >= 0 and n != nodes:
                return None
            nodes = n
        elif level == "edge":
            if edges >= 0 and n != edges:
                return None
            edges = n
        elif rows and n != rows:
            return None
        feats[key] = a
    if nodes < 0:  # no node-level feature: num_nodes counts them (read_graph reads it)
        return None
    ignored = () if len(g) == len(feats) else tuple(
        k for k in g if k not in keys and k != "num_nodes")
    return Graph(feats, nodes, max(edges, 0), ignored, i)


def _starts(counts: Sequence[int]) -> List[int]:
    return [0, *itertools.accumulate(counts)]


def _owner_of(starts: List[int], row: int) -> int:
    """The graph whose rows (``starts[k] .. starts[k + 1] - 1``) hold ``row``."""
    import bisect

    return bisect.bisect_right(starts, row) - 1


def check_values(contract: Contract, ops: Any, cols: Columns) -> None:
    """Refuse, before any call, what the artifact must not be given (named
    :class:`~graph_adapter.serve.GraphInputError` subclasses naming the graph and key):

    * a graph of 0 nodes (``EmptyGraphError``): eager PyG gives it no prediction;
    * a code outside the embedding table it indexes, negative or past the table's rows
      (``CodeRangeError``; the contract's ``codes`` / ``low``, see
      :meth:`Contract.value_checks`): eager PyG raises on it, ONNX's ``Gather`` would
      wrap a negative one to another row;
    * NaN or +-inf in a float feature whose export data held none (``NonFiniteError``).

    One vectorised test a checked feature over the graphs of ``cols`` (numpy or torch,
    ``ops``'s); the first bad value is named (graph, key, column, value)."""
    for k, n in enumerate(cols.nodes):
        if not n:
            key = next((f.key for f in contract.features if f.level == "node"), "num_nodes")
            raise EmptyGraphError(
                f"graph {cols.positions[k]} has 0 nodes: eager PyG gives such a graph no "
                f"prediction (no pooled row, no node rows), so none is made up here; leave "
                f"it out of the request", cols.positions[k], key)
    checks = _value_checks(contract, ops)
    if not checks:
        return
    starts = {"node": _starts(cols.nodes), "edge": _starts(cols.edges)}
    for f, low, codes, finite, high in checks:
        a = cols.features[f.key]
        if finite:
            at = ops.first_nonfinite(a)
            if at >= 0:
                g, where, _ = _locate(f, a, at, starts, cols)
                raise NonFiniteError(
                    f"graph {g}: feature {f.key!r} holds {ops.item(a, at)} at {where}; the "
                    f"model was exported on data without NaN or infinite values in "
                    f"{f.key!r}: replace them (or leave the graph out)", g, f.key)
        if low is None and not codes:
            continue
        at = ops.first_outside(a, 0 if low is None else low, high)
        if at >= 0:
            g, where, col = _locate(f, a, at, starts, cols)
            value = ops.item(a, at)
            rows = None
            if codes:
                rows = codes[0] if len(codes) == 1 else (codes[col] if col is not None and
                                                         col < len(codes) else None)
            valid = (f"0 .. {rows - 1} (the {rows} rows of the embedding table it indexes)"
                     if rows is not None else f"{low} or more")
            raise CodeRangeError(
                f"graph {g}: feature {f.key!r} holds {value} at {where}; valid codes there "
                f"are {valid}. A code outside its table has no embedding row: eager PyG "
                f"fails on it, so it is refused here", g, f.key,
                col if len(f.shape) == 2 else None)


def _value_checks(contract: Contract, ops: Any) -> List[Tuple[Any, ...]]:
    """:meth:`Contract.value_checks` with each one's upper bounds as ``ops``'s array
    (``None``: no table), kept on the contract (read for every request)."""
    def make() -> List[Tuple[Any, ...]]:
        got = []
        for f, low, codes, finite in contract.value_checks():
            high = None
            if codes:
                big = 1 << 62  # a column that indexes no table: no upper bound
                per = [big if c is None else int(c) for c in codes]
                if len(per) == 1 or len(f.shape) != 2 or f.shape[-1] != len(per):
                    per = [min(per)]  # (one table for the whole feature)
                high = ops.bounds(per)
            got.append((f, low, codes, finite, high))
        return got

    if not hasattr(contract, "value_checks"):  # (a stand-in with features only: none)
        return []
    memo = getattr(contract, "memo", None)
    return make() if memo is None else memo("value_checks/" + getattr(ops, "name", ""), make)


def _locate(f: InputField, a: Any, flat: int, starts: Dict[str, List[int]],
            cols: Columns) -> Tuple[int, str, Optional[int]]:
    """``(graph position, "row r, column c" within the graph, column)`` of the flat
    position ``flat`` of the joined array ``a`` of feature ``f``."""
    shape = [int(s) for s in a.shape] or [1]
    idx, rest = [], flat
    for size in reversed(shape):
        idx.append(rest % size if size else 0)
        rest = rest // size if size else 0
    idx.reverse()
    row = idx[f.cat_dim] if f.shape else idx[0]
    if f.level in starts:
        k = _owner_of(starts[f.level], row)
        local = row - starts[f.level][k]
    else:
        k, local = row // max(f.rows, 1), row % max(f.rows, 1)
    others = [i for d, i in enumerate(idx) if d != (f.cat_dim if f.shape else 0)]
    col = others[-1] if others else None
    where = f"{f.level} row {local}" + ("" if col is None else f", column {col}")
    return cols.positions[k], where, col


def check_graph_values(contract: Contract, ops: Any, graphs: Sequence[Graph]) -> None:
    """:func:`check_values` of checked graphs (each checked feature joined once)."""
    if any(not g.nodes for g in graphs):
        cols = Columns({}, [g.nodes for g in graphs], [g.edges for g in graphs],
                       [g.position for g in graphs])
        check_values(contract, ops, cols)  # raises EmptyGraphError for it
    checks = _value_checks(contract, ops)
    if not graphs or not checks:
        return
    feats = {}
    for f, *_ in checks:
        parts = [g.features[f.key] for g in graphs]
        if not f.shape:
            parts = [p.reshape(1) for p in parts]
        feats[f.key] = parts[0] if len(parts) == 1 else ops.cat(parts, f.cat_dim)
    check_values(contract, ops, Columns(feats, [g.nodes for g in graphs],
                                        [g.edges for g in graphs],
                                        [g.position for g in graphs]))


def check_served_size(contract: Contract, graphs: Sequence[Graph]) -> None:
    """``GraphTooLargeError`` for a graph past the contract's served limit
    (:attr:`Contract.max_nodes` / ``max_edges``, the largest single graph served)."""
    mn, me = contract.max_nodes, contract.max_edges
    if mn is None and me is None:
        return
    for k, g in enumerate(graphs):
        if (mn is not None and g.nodes > mn) or (me is not None and g.edges > me):
            raise GraphTooLargeError(
                f"graph {g.position} has {g.nodes} nodes and {g.edges} edges; this artifact "
                f"serves single graphs of at most {mn} nodes and {me} edges (its export's "
                f"max_nodes / max_edges). It is never cut: re-export with "
                f"export(..., ladder=True, max_nodes={max(g.nodes, mn or 0)}, "
                f"max_edges={max(g.edges, me or 0)}) (on the command line graph-adapter "
                f"export ... --ladder --max-nodes N --max-edges E), or leave it out",
                g.position)


def _too_large(contract: Contract, g: Graph, i: int, spill: int = 0) -> str:
    width, K = _table_sizes(contract)
    if K and spill > K:
        return (f"graph {i} has {spill} in-edges past the {width} each node's row of the "
                f"artifact's neighbour table holds, more than one call takes ({K}: the "
                f"spill capacity, in_spill). export fits the width and the capacity on the "
                f"graphs it is given: re-export with such graphs among them "
                f"(export(..., example=[...]) with a Budget, or a FixedSizeLoader whose "
                f"dataset holds them), or as a ladder with export(..., ladder=True, "
                f"max_nodes={g.nodes}, max_edges={g.edges}) (its top rung takes any graph "
                f"within them, whatever its degrees), or export format='pt2' (no tables: "
                f"it takes any graph within the budget); or leave it out")
    return (f"graph {i} has {g.nodes} nodes and {g.edges} edges; one call of this artifact "
            f"takes at most {contract.max_graph_nodes} nodes and {contract.edges} edges per "
            f"graph (budget nodes={contract.nodes}, edges={contract.edges}, "
            f"graphs={contract.graphs}). It is never cut: export with a budget fitted on data "
            f"that includes such graphs, or leave it out")


def plan_calls(contract: Contract, graphs: Sequence[Graph],
               spills: Optional[Sequence[int]] = None) -> List[List[int]]:
    """Graph positions per padded call: request order, each call filled while it fits.

    A call holds what fits one padded call (:func:`graph_adapter.contract.misfit`), and
    (neighbour tables)
    at most ``K`` in-edges past the width ``S`` (:func:`spill_counts`; ``spills``:
    those counts if known, one a graph). Raises
    ``GraphTooLargeError`` before any call when a graph cannot fit even alone.
    """
    N, E, G = contract.nodes, contract.edges, contract.graphs
    width, K = _table_sizes(contract)
    if spills is None:
        spills = spill_counts(graphs, width) if K else [0] * len(graphs)
    most = contract.max_graph_nodes  # (a property: read once, not once a graph)
    for i, g in enumerate(graphs):
        if g.nodes > most or g.edges > E or spills[i] > K:
            raise GraphTooLargeError(_too_large(contract, g, i, spills[i]), i)
    calls: List[List[int]] = []
    cur: List[int] = []
    n = e = sp = 0
    for i, g in enumerate(graphs):
        k = len(cur) + 1
        if cur and (sp + spills[i] > K or misfit(k, n + g.nodes, e + g.edges, G, N, E)):
            calls.append(cur)
            cur, n, e, sp = [], 0, 0, 0
        cur.append(i)
        n += g.nodes
        e += g.edges
        sp += spills[i]
    if cur:
        calls.append(cur)
    return calls


def _padded_feature(ops: Any, f: InputField, joined: Any, total: int, budget: int) -> Any:
    """A feature's rows of every graph (``joined``), then ``budget - total`` padding rows."""
    shape = list(f.shape) if f.shape else [1]
    shape[f.cat_dim] = budget - total
    return ops.cat([joined, ops.full(shape, pad_value(f.level, f.dtype), f.dtype)], f.cat_dim)


def pack_call(contract: Contract, ops: Any, graphs: Sequence[Graph]) -> Dict[str, Any]:
    """One padded flat dict of ``graphs`` (they fit: :func:`plan_calls`), keys in the
    contract's order."""
    return pack_columns(contract, ops, join(contract, ops, graphs))


def pack_columns(contract: Contract, ops: Any, cols: Columns) -> Dict[str, Any]:
    """:func:`pack_call` of graphs already joined (:class:`~graph_adapter.serve.columns.Columns`,
    e.g. a slice of a request's): the same flat dict."""
    N, E, G = contract.nodes, contract.edges, contract.graphs
    n, e, k = sum(cols.nodes), sum(cols.edges), len(cols)
    slots = slot_counts(cols.nodes, G, N - n)
    out: Dict[str, Any] = {}
    for f in contract.inputs:
        if f.kind == "reserved" and f.key in (SLOTS, SPILL):
            continue  # built from the call's edge_index below
        if f.kind == "reserved":
            out[f.key] = _reserved(ops, f, slots, n, e, k, contract)
            continue
        if f.inc == "nodes":  # edge_index & co. (export takes edge-level ones only)
            out[f.key] = _padded_index(ops, f, cols, e, E, N)
            continue
        budget = {"node": N, "edge": E, "graph": G * f.rows}[f.level]
        total = {"node": n, "edge": e, "graph": k * f.rows}[f.level]
        out[f.key] = _padded_feature(ops, f, cols.features[f.key], total, budget)
    width, spill = _table_sizes(contract)
    if width:
        slots_, spill_ = in_tables(ops.asarray(out["edge_index"])[1], e, N, width, spill)
        tables = {SLOTS: ops.asarray(slots_), SPILL: ops.asarray(spill_)}
        out = {f.key: out[f.key] if f.key in out else tables[f.key] for f in contract.inputs}
    return out


def _padded_index(ops: Any, f: InputField, cols: Columns, e: int, E: int, N: int) -> Any:
    """Each graph's indices offset by the nodes before it, then padding edges: self-loops
    on the last node ``N - 1`` (a padding node: two are always reserved).

    Every real index is checked to lie in its own graph's node range (one vectorised
    test per call; ``EdgeIndexError`` names the first graph off it): an edge outside its
    graph would join another graph's (or a padding) node without any error.
    """
    # one shift over the joined columns: each edge's column moves by its graph's first
    # node (a Python add per graph cost 1.4 ms of a 256-graph call), and is checked
    # against its graph's node count before the shift
    local = real = cols.features[f.key]
    if e:
        owner = ops.repeat_ids(cols.edges, "int64")
        j = ops.first_bad_column(local, 0, ops.take(cols.nodes, owner))
        if j >= 0:
            run, k = 0, 0
            while run + cols.edges[k] <= j:
                run += cols.edges[k]
                k += 1
            col, pos = local[:, j], cols.positions[k]
            raise EdgeIndexError(
                f"graph {pos}: {f.key!r} column {j - run} is {col.tolist()}, outside "
                f"its {cols.nodes[k]} nodes [0, {cols.nodes[k]}); indices are per graph, "
                f"from 0", pos, f.key)
        starts = list(itertools.accumulate(cols.nodes, initial=0))[:-1]
        real = local + ops.cast(ops.take(starts, owner), f.dtype)
    shape = list(f.shape)
    shape[f.cat_dim] = E - e
    return ops.cat([real, ops.full(shape, padding_node(N), f.dtype)], f.cat_dim)


def _reserved(ops: Any, f: InputField, slots: List[int], n: int, e: int, k: int,
              c: Contract) -> Any:
    if f.key == BATCH:
        return ops.repeat_ids(slots, f.dtype)
    if f.key == PTR:
        ptr, run = [0], 0
        for s in slots:
            run += s
            ptr.append(run)
        return ops.from_list(ptr, f.dtype)
    if f.key == NODE_MASK:
        return ops.prefix_mask(c.nodes, n)
    if f.key == EDGE_MASK:
        return ops.prefix_mask(c.edges, e)
    if f.key == GRAPH_MASK:
        return ops.prefix_mask(c.graphs, k)
    raise AssertionError(f"unknown reserved key {f.key!r}")  # export writes only these five


#: a call's cost in padded rows (nodes + edges) plus this many rows' worth for the call
#: itself (its launch and the packing), so that a few graphs take one small call
#: rather than many tiny ones
CALL_OVERHEAD_ROWS = 2048


def _cost(c: Contract) -> int:
    return c.nodes + c.edges + CALL_OVERHEAD_ROWS


def _limits(c: Contract) -> Tuple[int, int, int]:
    """What one graph may hold in a call of ``c``: nodes, edges, spilled in-edges."""
    return c.max_graph_nodes, c.edges, _table_sizes(c)[1]


def _fits(limits: Tuple[int, int, int], g: Graph, spill: int = 0) -> bool:
    return g.nodes <= limits[0] and g.edges <= limits[1] and spill <= limits[2]


def _ladder_too_large(rungs: Sequence[Contract], g: Graph, i: int, spill: int = 0) -> str:
    top = max(rungs, key=lambda c: (c.max_graph_nodes, c.edges))
    if spill > _table_sizes(top)[1]:
        return _too_large(top, g, i, spill)
    return (f"graph {i} has {g.nodes} nodes and {g.edges} edges; the top rung of this "
            f"ladder (nodes={top.nodes}, edges={top.edges}, graphs={top.graphs}) takes at "
            f"most {top.max_graph_nodes} nodes and {top.edges} edges per graph. It is never "
            f"cut: re-export with export(..., ladder=True, max_nodes={g.nodes}, "
            f"max_edges={g.edges}) (a top rung for such graphs; on the command line "
            f"graph-adapter export ... --ladder --max-nodes {g.nodes} --max-edges {g.edges}), "
            f"or leave it out")


def plan_ladder(rungs: Sequence[Contract], graphs: Sequence[Graph],
                spills: Optional[Sequence[int]] = None) -> List[Tuple[int, List[int]]]:
    """``(rung, graph positions)`` per padded call over the rungs of a ladder artifact
    (each rung a contract of its own budget): every graph in exactly one call.

    A graph too large for the rung with the most graph slots runs alone in the cheapest
    rung that holds it (``spills``: each graph's :func:`spill_counts`, if known). The
    rest are packed in request order into calls of that bulk
    rung while more than two of its calls remain; the tail goes, call by call, to the
    rung whose calls would cover it at the least cost (padded rows plus
    :data:`CALL_OVERHEAD_ROWS` a call). Raises ``GraphTooLargeError`` (naming the top
    rung and the export option that would take the graph) before any call.
    """
    order = sorted(range(len(rungs)), key=lambda r: _cost(rungs[r]))
    bulk = max(order, key=lambda r: (rungs[r].graphs, -_cost(rungs[r])))
    width = max(_table_sizes(c)[0] for c in rungs)  # (every rung has the same width)
    if spills is None:
        spills = spill_counts(graphs, width) if width else [0] * len(graphs)
    limits = [_limits(c) for c in rungs]  # (read once: 1 us a graph a rung otherwise)
    out: List[Tuple[int, List[int]]] = []
    rest: List[int] = []
    for i, g in enumerate(graphs):
        if _fits(limits[bulk], g, spills[i]):
            rest.append(i)
            continue
        home = next((r for r in order if _fits(limits[r], g, spills[i])), None)
        if home is None:
            raise GraphTooLargeError(_ladder_too_large(rungs, g, i, spills[i]), i)
        out.append((home, [i]))
    calls = plan_calls(rungs[bulk], [graphs[i] for i in rest], [spills[i] for i in rest])
    for call in calls[:-2]:
        out.append((bulk, [rest[j] for j in call]))
    tail = [rest[j] for call in calls[-2:] for j in call]
    while tail:
        best = None
        for r in order:
            if not all(_fits(limits[r], graphs[i], spills[i]) for i in tail):
                continue
            plan = plan_calls(rungs[r], [graphs[i] for i in tail], [spills[i] for i in tail])
            cost = len(plan) * _cost(rungs[r])
            if best is None or cost < best[0]:
                best = (cost, r, plan)
        assert best is not None  # the bulk rung holds every graph of the tail
        _, r, plan = best
        out.append((r, [tail[j] for j in plan[0]]))
        tail = [tail[j] for call in plan[1:] for j in call]
    return out


def table_width(contracts: Sequence[Contract]) -> int:
    """The ``in_slots`` width of an artifact's calls (``contracts``: its one budget or its
    rungs, which share it); 0 without neighbour tables."""
    return max([_table_sizes(c)[0] for c in contracts] or [0])


def _table_sizes(c: Contract) -> Tuple[int, int]:
    """``(S, K)``: the width of ``c``'s ``in_slots`` and the capacity of its ``in_spill``
    (``(0, 0)``: an artifact without neighbour tables)."""
    width = spill = 0
    for f in c.inputs:
        if f.kind == "reserved" and f.key in (SLOTS, SPILL) and len(f.shape) == 2:
            if f.key == SLOTS:
                width = int(f.shape[1])
            else:
                spill = int(f.shape[1])
    return width, spill


def spill_counts(graphs: Sequence[Graph], width: int, key: str = "edge_index") -> List[int]:
    """Per graph, its in-edges past the first ``width`` of each node (those a call's
    ``in_spill`` must hold): one ``bincount`` over the request's target row ``key[1]``.
    Indices outside their graph are clipped here (``pack_call`` names them)."""
    import numpy as np

    if not graphs or not sum(g.edges for g in graphs):
        return [0] * len(graphs)
    targets = np.concatenate([np.asarray(g.features[key])[1] for g in graphs])
    return _spills(targets, [g.nodes for g in graphs], [g.edges for g in graphs], width)


def column_spills(cols: Columns, width: int, key: str = "edge_index") -> List[int]:
    """:func:`spill_counts` of the graphs of ``cols``."""
    import numpy as np

    if not len(cols) or not sum(cols.edges):
        return [0] * len(cols)
    return _spills(np.asarray(cols.features[key])[1], cols.nodes, cols.edges, width)


def _spills(targets: Any, node_counts: Sequence[int], edge_counts: Sequence[int],
            width: int) -> List[int]:
    """Per graph, its in-edges past ``width``: ``targets`` each graph's target indices
    (from 0) joined."""
    import numpy as np

    nodes = np.asarray(node_counts, dtype=np.int64)
    edges = np.asarray(edge_counts, dtype=np.int64)
    local = np.asarray(targets).astype(np.int64)
    local = np.maximum(np.minimum(local, np.repeat(nodes - 1, edges)), 0)
    deg = np.bincount(local + np.repeat(np.cumsum(nodes) - nodes, edges),
                      minlength=int(nodes.sum()))
    over = np.maximum(deg[:int(nodes.sum())] - width, 0)
    per = np.bincount(np.repeat(np.arange(len(nodes)), nodes), weights=over,
                      minlength=len(nodes))
    return [int(v) for v in per]


def column_graphs(cols: Columns, contract: Contract) -> List[Graph]:
    """The graphs of ``cols`` as checked :class:`Graph` objects (views of its arrays)."""
    out = []
    for k in range(len(cols)):
        one = cols.take(contract, k, k + 1)
        feats = {f.key: one.features[f.key] if f.shape else one.features[f.key][0, ...]
                 for f in contract.features}
        out.append(Graph(feats, cols.nodes[k], cols.edges[k], cols.ignored, cols.positions[k]))
    return out


def in_tables(target: Any, real: int, num_nodes: int, width: int, spill: int
              ) -> Tuple[Any, Any]:
    """``(in_slots [num_nodes, width], in_spill [2, spill])`` (int64 numpy) of a padded
    call whose target row is ``target`` (``[E]``, its first ``real`` entries the real
    edges): row ``n`` of ``in_slots`` holds the ids of the real edges into ``n`` in
    increasing order, then ``E`` (the id of a zero row); the edges past a node's width
    go to ``in_spill`` (edge id, node), padded with ``(E, num_nodes - 1)``. Padding
    edges are in neither (they only touch padding nodes). The layout of
    ``FixedSizeLoader(layout="hyb")`` (``graph_adapter.batching``, not imported here:
    it needs torch); ``ValueError`` when more than ``spill`` edges are past the width
    (:func:`plan_calls` never packs such a call)."""
    import numpy as np

    E = int(np.asarray(target).shape[0])
    key = np.asarray(target)[:real].astype(np.int64)
    order = np.argsort(key, kind="stable")
    ks = key[order]
    deg = np.bincount(ks, minlength=num_nodes)
    pos = np.arange(ks.size) - (np.cumsum(deg) - deg)[ks]
    table = np.full((num_nodes, width), E, dtype=np.int64)
    fits = pos < width
    table[ks[fits], pos[fits]] = order[fits]
    over = np.flatnonzero(~fits)
    if over.size > spill:
        raise ValueError(f"{over.size} in-edges past the width {width}: more than the "
                         f"spill capacity {spill}")
    lst = np.empty((2, spill), dtype=np.int64)
    lst[0], lst[1] = E, num_nodes - 1
    lst[0, :over.size] = order[over]
    lst[1, :over.size] = ks[over]
    return table, lst
