"""Sums of embedding lookups as lookups of combined tables.

What it does. ``T_1[c_1] + T_2[c_2] + ...``, constant tables looked up by columns of one
input (the categorical encoders of molecular models and, after the export's projection
of the tables into each layer's edge linear, every layer's edge projection), becomes
one ``Gather`` of a table of every sum ``T_1[a] + T_2[b] + ...`` (computed at export, in
the model's order and dtype) at the mixed-radix row of the codes; a constant row added
to the sum (a linear's bias) goes into the last table. Each lookup folded saves a
``Gather`` and an ``Add`` of its rows. A code outside its table still fails the lookup.

When it applies. Every ``Add`` tree of such lookups (inner sums read by nothing else)
of two lookups or more, or of one and a bias row; consecutive lookups of one input,
tables of one width and dtype whose rows multiply to at most :data:`COMBINED_ROWS`
form one combined table. It runs first, on the model as exported.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Set, Tuple

from ._graph import Emit, constant, drop_dead_nodes, node_attrs, producer_map, topological

__all__ = ["combine_table_lookups", "COMBINED_ROWS"]


#: the most rows a combined table may have (``combine_table_lookups``)
COMBINED_ROWS = 4096


#: a lookup: (the codes input, its column, the table's values, the column's value
#: name, the lookup's output name)
_Leaf = Tuple[str, int, Any, str, str]


def _lookup(graph: Any, producers: Dict[str, Any], inits: Dict[str, Any], name: str
            ) -> Optional[_Leaf]:
    """The lookup ``name`` is if it is ``Gather(T, Gather(codes, k, axis=1))``: a
    constant 2-D table ``T`` (``[R, D]``) read at column ``k`` of an input (an
    embedding of a categorical feature), else ``None``."""
    node = producers.get(name)
    if node is None or node.op_type != "Gather" or node_attrs(node).get("axis", 0) != 0 \
            or node.input[0] not in inits or inits[node.input[0]].ndim != 2:
        return None
    col = producers.get(node.input[1])
    if col is None or col.op_type != "Gather" or node_attrs(col).get("axis", 0) != 1 \
            or not any(i.name == col.input[0] for i in graph.input):
        return None
    k = constant(graph, producers, col.input[1])
    if k is None or k.ndim != 0:
        return None
    return col.input[0], int(k), inits[node.input[0]], node.input[1], name


def _summed_lookups(producers: Dict[str, Any], leaf: Any, readers: Dict[str, int], name: str,
                    inner: List[str]) -> Optional[List[_Leaf]]:
    """The lookups ``name`` adds up, left to right (an ``Add`` tree whose inner sums
    nothing else reads; their names go to ``inner``), or ``None``."""
    found = leaf(name)
    if found is not None:
        return [found]
    node = producers.get(name)
    if node is None or node.op_type != "Add":
        return None
    parts: List[_Leaf] = []
    for x in node.input:
        got = _summed_lookups(producers, leaf, readers, x, inner) if readers.get(x) == 1 or \
            leaf(x) is not None else None
        if got is None:
            return None
        parts += got
    inner.append(name)
    return parts


def _combined_index(emit: Emit, group: List[_Leaf]) -> str:
    """The row of the combined table of ``group``'s lookups (mixed radix, the first
    lookup's code the most significant), each code's term looked up in a vector of
    its table's rows times the code's stride, so that a code outside its table fails
    that ``Gather`` as the original lookup did (and a negative one counts from the
    end, as there)."""
    import numpy as np
    from onnx import numpy_helper

    index, stride = None, 1
    for _, _, table, idx, _ in reversed(group):
        rows = int(table.shape[0])
        steps = emit("Constant", [], value=numpy_helper.from_array(
            np.arange(rows, dtype=np.int64) * stride, f"{emit.prefix}_steps{emit.count}"))
        term = emit("Gather", [steps, idx], axis=0)
        index = term if index is None else emit("Add", [index, term])
        stride *= rows
    return index


def _groups(leaves: List[_Leaf], limit: int) -> List[List[_Leaf]]:
    """Consecutive runs of lookups of one input, tables of one width and dtype, whose
    rows multiply to at most ``limit``."""
    out: List[List[_Leaf]] = []
    rows = 0
    for leaf in leaves:
        r = int(leaf[2].shape[0])
        head = out[-1][0] if out else None
        if head is not None and head[0] == leaf[0] and rows * r <= limit \
                and leaf[2].shape[1] == head[2].shape[1] and leaf[2].dtype == head[2].dtype:
            out[-1].append(leaf)
            rows *= r
        else:
            out.append([leaf])
            rows = r
    return out


def _combined_sum(emit: Emit, graph: Any, groups: List[List[_Leaf]], shared: Dict[Any, str],
                  out: str, bias: Any = None) -> int:
    """Emit the sum of ``groups`` (one ``Gather`` of a combined table a group) plus
    ``bias`` (a constant row, added to the last group's table) into ``out``; returns
    the lookups (and bias adds) removed."""
    from onnx import helper, numpy_helper

    terms, removed = [], int(bias is not None)
    for j, group in enumerate(groups):
        last = bias is not None and j == len(groups) - 1
        if len(group) == 1 and not last:
            terms.append(group[0][4])  # the original lookup, kept
            continue
        if len(group) == 1:
            index = group[0][3]
        else:
            key = tuple((g[0], g[1], g[2].shape[0]) for g in group)
            if key not in shared:
                shared[key] = _combined_index(emit, group)
            index = shared[key]
        table = group[0][2]
        for g in group[1:]:  # every sum of rows, added in the model's order
            table = (table[:, None, :] + g[2][None, :, :]).reshape(-1, table.shape[-1])
        if last:  # the bias the model adds last
            table = table + bias.reshape(1, -1).astype(table.dtype)
        name = f"{out}__combined{len(terms)}"
        graph.initializer.append(numpy_helper.from_array(table.astype(group[0][2].dtype), name))
        terms.append(emit("Gather", [name, index], axis=0))
        removed += len(group) - 1
    total = terms[0]
    for t in terms[1:]:
        total = emit("Add", [total, t])
    emit.nodes.append(helper.make_node("Identity", [total], [out], name=f"{out}__combined"))
    return removed


def _bias(node: Any, inits: Dict[str, Any], readers: Dict[str, int]) -> Any:
    """The constant row ``b`` (``[D]`` or ``[1, D]``) if ``node`` is ``Add(s, b)`` with
    ``s`` read by ``node`` alone, else ``None``."""
    b = inits.get(node.input[1]) if len(node.input) == 2 else None
    if b is None or readers.get(node.input[0]) != 1 or b.ndim not in (1, 2) or \
            (b.ndim == 2 and b.shape[0] != 1):
        return None
    return b


def combine_table_lookups(model: Any, limit: int = COMBINED_ROWS) -> int:
    """Rewrite sums of embedding lookups of ``model`` (in place): ``T_1[c_1] + T_2[c_2]
    + ...``, constant tables looked up by columns of one input (the categorical
    encoders of molecular models and, after the export's projection of the tables
    into each layer's edge linear, every layer's edge projection). Consecutive lookups
    whose tables' rows multiply to at most ``limit`` become one ``Gather`` of a table
    of every sum ``T_1[a] + T_2[b] + ...`` (computed here, in the model's order and
    dtype) at the mixed-radix row of the codes (computed once a model for each group
    of columns); a constant row added to the sum (a linear's bias) goes into the last
    table. Each lookup folded saves a ``Gather`` and an ``Add`` of its rows (a layer's
    edge projection of three embedded bond codes: three lookups and a bias become one).
    A code outside its table still fails the lookup. Returns the lookups and bias adds
    removed."""
    from onnx import numpy_helper

    graph = model.graph
    producers = producer_map(graph)
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    readers: Dict[str, int] = {o.name: 2 for o in graph.output}
    for n in graph.node:
        for x in n.input:
            readers[x] = readers.get(x, 0) + 1

    def leaf(name: str) -> Optional[_Leaf]:
        return _lookup(graph, producers, inits, name)
    replaced: Dict[str, List[Any]] = {}
    covered: Set[str] = set()
    shared: Dict[Any, str] = {}
    removed = 0
    for node in reversed(list(graph.node)):  # the largest sums first
        if node.op_type != "Add" or node.output[0] in covered:
            continue
        inner: List[str] = []
        summed, bias = node.output[0], _bias(node, inits, readers)
        if bias is not None:  # (sum of lookups) + a constant row: the bias folds in too
            summed = node.input[0]
            inner.append(summed)
        leaves = _summed_lookups(producers, leaf, readers, summed, inner)
        if not leaves or len(leaves) < 2 - (bias is not None):
            continue
        groups = _groups(leaves, limit)
        covered.update(inner)
        if bias is not None and bias.shape[-1] != leaves[-1][2].shape[1]:
            continue
        if len(groups) == len(leaves) and bias is None:
            continue
        emit = Emit(node.output[0] + "__tables")
        removed += _combined_sum(emit, graph, groups, shared, node.output[0], bias)
        replaced[node.output[0]] = emit.nodes
    if not replaced:
        return 0
    nodes: List[Any] = []
    for node in graph.node:
        nodes.extend(replaced.get(node.output[0], [node]) if node.op_type == "Add" else [node])
    del graph.node[:]
    # (a shared index is emitted with the last sum of the model that reads it)
    graph.node.extend(topological(graph, nodes))
    drop_dead_nodes(graph)
    return removed
