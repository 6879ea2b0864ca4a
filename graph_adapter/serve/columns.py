"""A request's graphs concatenated, one array a feature: what packing reads a call from.

A :class:`Columns` holds each contract feature's rows of every graph joined on its
``cat_dim`` (``x``: the graphs' nodes' rows; ``edge_index``: their edges' columns, each
graph's indices from 0; a 0-d graph-level value: one a graph, stacked), and each graph's
node and edge counts: the layout of an ``.npz`` request (``docs/deploy.md``) and of the
server's pipe to a program's process. A call of consecutive request graphs is then a
slice of every array (:meth:`Columns.take`), not a view and a copy a graph: a server
decodes a bulk request straight into one, and a program's process packs from it.

Arrays are numpy arrays or torch tensors (the ``ops`` of :mod:`.ops` that made them).
Nothing here checks them: :func:`~graph_adapter.serve.pack.read_graphs` (graph by graph)
or a decoder that checked the same (dtypes, per-graph shapes, counts) made them; index
ranges are checked where a call is packed.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .contract import Contract, InputField

__all__ = ["Columns", "join", "concat", "select", "split_rows"]


def _starts(counts: Sequence[int]) -> List[int]:
    """``[0, c0, c0 + c1, ...]``: each item's first row, then the total."""
    return [0, *itertools.accumulate(counts)]


@dataclass
class Columns:
    """Checked request graphs, one array a feature (see the module).

    ``features``: ``{key: array}``, each contract feature's graphs joined on its
    ``cat_dim``; ``nodes`` / ``edges``: each graph's counts; ``positions``: each graph's
    position in the request (named by errors); ``ignored``: request keys the contract
    does not read."""

    features: Dict[str, Any]
    nodes: List[int]
    edges: List[int]
    positions: Sequence[int]
    ignored: Tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.nodes)

    def take(self, contract: Contract, a: int, b: int) -> "Columns":
        """Graphs ``a .. b - 1`` (slices of every array: no copy)."""
        ns, es = _starts(self.nodes), _starts(self.edges)
        out = {}
        for f in contract.features:
            lo, hi = _row_range(f, ns, es, a, b)
            v = self.features[f.key]
            out[f.key] = v[(slice(None),) * f.cat_dim + (slice(lo, hi),)] if f.shape \
                else v[a:b]
        return Columns(out, self.nodes[a:b], self.edges[a:b], self.positions[a:b],
                       self.ignored)


def _row_range(f: InputField, node_starts: List[int], edge_starts: List[int], a: int,
               b: int) -> Tuple[int, int]:
    """The rows (on ``f.cat_dim``) of graphs ``a .. b - 1`` in ``f``'s joined array."""
    if f.level == "node":
        return node_starts[a], node_starts[b]
    if f.level == "edge":
        return edge_starts[a], edge_starts[b]
    return a * f.rows, b * f.rows


def _empty(ops: Any, f: InputField) -> Any:
    """``f``'s joined array of no graph."""
    shape = [0 if s is None else s for s in f.shape] if f.shape else [0]
    if f.shape:
        shape[f.cat_dim] = 0
    return ops.full(shape, 0, f.dtype)


def join(contract: Contract, ops: Any, graphs: Sequence[Any]) -> Columns:
    """Checked :class:`~graph_adapter.serve.pack.Graph` objects as one :class:`Columns`
    (each feature one ``cat``)."""
    feats: Dict[str, Any] = {}
    for f in contract.features:
        parts = [g.features[f.key] for g in graphs]
        if not parts:
            feats[f.key] = _empty(ops, f)
        elif not f.shape:  # 0-d graph-level values: one row each
            feats[f.key] = ops.cat([p.reshape(1) for p in parts], 0)
        else:
            feats[f.key] = ops.cat(parts, f.cat_dim)
    ignored = tuple(dict.fromkeys(k for g in graphs for k in g.ignored))
    return Columns(feats, [g.nodes for g in graphs], [g.edges for g in graphs],
                   [g.position for g in graphs], ignored)


def concat(contract: Contract, ops: Any, parts: Sequence[Columns],
           positions: Optional[Sequence[int]] = None) -> Columns:
    """Several columns as one (one ``cat`` a feature): a server's merge of requests.
    ``positions``: the joined graphs' (default: counted anew, ``0 .. n - 1``)."""
    feats = {f.key: ops.cat([p.features[f.key] for p in parts], f.cat_dim if f.shape else 0)
             for f in contract.features}
    nodes = [n for p in parts for n in p.nodes]
    return Columns(feats, nodes, [e for p in parts for e in p.edges],
                   range(len(nodes)) if positions is None else positions,
                   tuple(dict.fromkeys(k for p in parts for k in p.ignored)))


def select(contract: Contract, ops: Any, cols: Columns, positions: Sequence[int]) -> Columns:
    """The graphs at ``positions`` (indices into ``cols``), in that order: slices where
    they are consecutive (a packed call's usual case), else one ``cat`` a feature."""
    if not positions:
        return cols.take(contract, 0, 0)
    a = positions[0]
    if list(positions) == list(range(a, a + len(positions))):
        return cols.take(contract, a, a + len(positions))
    return concat(contract, ops, [cols.take(contract, i, i + 1) for i in positions],
                  [cols.positions[i] for i in positions])


def split_rows(contract: Contract, outs: Dict[str, Any], nodes: Sequence[int],
               edges: Sequence[int], as_dicts: bool = False) -> List[Any]:
    """Each graph's rows of outputs joined over graphs (``outs[key]``: a graph-level
    output one row a graph; a node- or edge-level one the graphs' rows in order), as
    ``predict`` returns them: with one output key each item its array, else (or with
    ``as_dicts``) a dict ``{key: array}``."""
    per: List[Dict[str, Any]] = [{} for _ in nodes]
    ns, es = _starts(nodes), _starts(edges)
    for f in contract.outputs:
        v = outs[f.key]
        if f.level == "graph":
            parts = [v[k] for k in range(len(nodes))]
        else:
            s = ns if f.level == "node" else es
            parts = [v[s[k]:s[k + 1]] for k in range(len(nodes))]
        for d, part in zip(per, parts):
            d[f.key] = part
    if len(contract.outputs) == 1 and not as_dicts:
        key = contract.outputs[0].key
        return [d[key] for d in per]
    return per
