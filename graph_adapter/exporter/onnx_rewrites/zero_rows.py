"""A table sum's zero row computed by the edge rows instead of copied.

What it does. A table sum (:mod:`.table_sums`) reads its edge rows with a zero row
appended (row ``E``, which padding slots point at), a ``Concat`` that copies all ``E + 1``
rows every layer. Where the edge rows are ``Gather``s through ops that keep a zero row
zero (``Identity``, ``Relu``, ``Add``), each ``Gather`` instead reads a zero row appended
to its data at an index grown by one, so that row ``E`` comes out ``+0`` by itself: the
same bits, one copy a layer fewer (``docs/dev/RESULTS.md``).

When it applies. After :mod:`.table_sums` wrote its sums (it finds their ``Concat``s by
name, :data:`~._graph.ZERO_ROW`), for each sum whose edge rows are such a chain of
static shapes, each value read by the next alone, each ``Gather``'s data a constant
table or a computed tensor with fewer rows than the edges. Nothing to do otherwise.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Set, Tuple

from ._graph import (ZERO_ROW, constant, drop_dead_nodes, node_attrs, producer_map,
                     subgraph_reads, topological, value_types)

__all__ = ["computed_zero_rows"]


#: ops whose output row is exactly zero where every input's row is (``+0``): what
#: :func:`computed_zero_rows` computes a zero row through
_ZERO_KEEPING = ("Identity", "Relu", "Add")


class _ZeroRows:
    """The plan of :func:`computed_zero_rows` for one model: which ``Gather`` of an edge
    value's chain reads a zero row appended to its data (a constant table: a new
    initializer; a computed tensor with fewer rows than the edges: a ``Concat`` of it)
    at an index appended to its index."""

    def __init__(self, model: Any):
        self.graph = model.graph
        self.producers = producer_map(self.graph)
        self.inits = {i.name: i for i in self.graph.initializer}
        self.types = value_types(model)
        self.readers: Dict[str, List[Any]] = {o.name: [None] for o in self.graph.output}
        for n in self.graph.node:
            for x in set(n.input) | subgraph_reads(n):
                self.readers.setdefault(x, []).append(n)
        self.new_nodes: List[Any] = []
        self.done: Dict[Tuple[str, ...], str] = {}

    def static_shape(self, name: str) -> Optional[List[int]]:
        """The dims of value ``name`` when shape inference knows them all (else ``None``)."""
        t = self.types.get(name)
        dims = [d.dim_value for d in t.shape.dim] if t is not None and t.HasField("shape") \
            else None
        return dims if dims and all(d > 0 for d in dims) else None

    def _only_reader(self, name: str, reader: Any) -> bool:
        """Whether ``reader`` is the one node that reads ``name``'s rows: any other reads
        only its trailing dims (``Slice(Shape(name), [1], ...)``: a table sum's tail)."""
        for r in self.readers.get(name, []):
            if r is reader:
                continue
            if r is None or r.op_type != "Shape" or node_attrs(r):
                return False
            for s in self.readers.get(r.output[0], []):
                start = None if s is None or s.op_type != "Slice" else \
                    constant(self.graph, self.producers, s.input[1])
                if start is None or start.tolist() != [1]:
                    return False
        return sum(r is reader for r in self.readers.get(name, [])) == 1

    def plan(self, name: str, reader: Any, rows: int, values: List[str]
             ) -> Optional[List[Tuple[Any, int]]]:
        """``[(gather, rows of its data)]``: the ``Gather``s whose data and index get a
        zero row so that ``name`` (``rows`` rows, read by ``reader`` alone) gets one more
        row, exactly ``+0``; ``None`` where it cannot (another reader, another op, a
        broadcast, a data tensor no smaller than ``rows``). ``values``: the values that
        grow (``name`` and those it is computed from) are added to it."""
        node = self.producers.get(name)
        if node is None or not self._only_reader(name, reader) or self.static_shape(name) is None \
                or self.static_shape(name)[0] != rows:
            return None
        values.append(name)
        if node.op_type in _ZERO_KEEPING:
            out: List[Tuple[Any, int]] = []
            for x in node.input:
                got = self.plan(x, node, rows, values)
                if got is None:
                    return None
                out += got
            return out
        if node.op_type != "Gather":
            return None
        index, data = self.static_shape(node.input[1]), self.static_shape(node.input[0])
        if index is None or len(index) != 1 or data is None \
                or node_attrs(node).get("axis", 0) not in (0, -len(data)):  # (rows: axis 0)
            return None
        if node.input[0] not in self.inits and data[0] >= rows:
            return None  # a Concat of the data would copy as many rows as the one it saves
        return [(node, data[0])]

    def _cached(self, key: Tuple[str, ...], make: Any) -> str:
        if key not in self.done:
            self.done[key] = make()
        return self.done[key]

    def apply(self, gathers: List[Tuple[Any, int]]) -> None:
        """Each gather of a plan reads its data with a zero row appended, at its index
        with that row's position appended (each once a model)."""
        import numpy as np
        from onnx import helper
        from onnx import numpy_helper as nh

        for node, rows in gathers:
            data, index = node.input[0], node.input[1]

            def grown_data() -> str:
                name = f"{data}{ZERO_ROW}"
                if data in self.inits:
                    t = nh.to_array(self.inits[data])
                    self.graph.initializer.append(nh.from_array(
                        np.concatenate([t, np.zeros((1,) + t.shape[1:], t.dtype)]), name))
                    return name
                t = self.types[data]
                zero = np.zeros([1] + self.static_shape(data)[1:],
                                helper.tensor_dtype_to_np_dtype(t.elem_type))
                self.graph.initializer.append(nh.from_array(zero, f"{name}_value"))
                self.new_nodes.append(helper.make_node("Concat", [data, f"{name}_value"], [name],
                                                       name=name, axis=0))
                return name

            def grown_index() -> str:
                name = f"{index}{ZERO_ROW}{rows}"
                self.graph.initializer.append(nh.from_array(np.array([rows], np.int64),
                                                            f"{name}_value"))
                self.new_nodes.append(helper.make_node("Concat", [index, f"{name}_value"],
                                                       [name], name=name, axis=0))
                return name
            node.input[0] = self._cached(("data", data), grown_data)
            node.input[1] = self._cached(("index", index, str(rows)), grown_index)


def computed_zero_rows(model: Any) -> int:
    """Drop the zero-row ``Concat`` of each table sum (:mod:`.table_sums`) whose edge rows
    can compute that row themselves: rows made of ``Gather``s through ops that keep a zero
    row zero (:data:`_ZERO_KEEPING`: GINE's ``Relu(x[src] + edge_table[code])``, GIN's
    ``x[src]``), each value of the chain read by the next alone. Each ``Gather`` then
    reads a zero row appended to its data (a constant table: free; a computed one: a
    ``Concat`` of fewer rows than the edges) at an index grown by one (once a model), so
    that row ``E`` of the edge rows is ``+0``, as the ``Concat`` wrote it: the same bits,
    an ``E + 1``-row copy a layer saved. Returns how many."""
    graph = model.graph
    concats = [n for n in graph.node if n.op_type == "Concat" and n.name.endswith(ZERO_ROW)]
    if not concats:
        return 0  # (no table sum: no shape inference for nothing)
    z = _ZeroRows(model)
    rename: Dict[str, str] = {}
    grown: Set[str] = set()
    for node in concats:
        rows = z.static_shape(node.input[0])
        values: List[str] = []
        gathers = z.plan(node.input[0], node, rows[0], values) if rows else None
        if gathers is None:
            continue
        z.apply(gathers)
        grown.update(values)
        rename[node.output[0]] = node.input[0]
        for r in z.readers.get(node.output[0], []):  # (the rows now are E + 1 long)
            z.readers.setdefault(node.input[0], []).append(r)
    if not rename:
        return 0
    kept = [n for n in graph.node if n.output[0] not in rename]
    for n in kept:
        n.input[:] = [rename.get(x, x) for x in n.input]
    # the exporter's shapes of the values that grew by a row are stale (onnxruntime warns
    # of each at load): left to shape inference
    stale = [v for v in graph.value_info if v.name in grown]
    for v in stale:
        graph.value_info.remove(v)
    del graph.node[:]
    graph.node.extend(topological(graph, z.new_nodes + kept))
    drop_dead_nodes(graph)
    return len(rename)
