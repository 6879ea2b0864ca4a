"""Edge rows summed into their target nodes over neighbour tables.

What it does. A message-passing layer's sum of edge rows into their target nodes (the
exporter's ``ScatterElements(axis=0, add)`` on ``edge_index[1]``) becomes a sum over two
new int64 inputs the serving packer builds: ``in_slots`` ``[N, width]`` (each node's
in-edge ids, padded with ``E``) and ``in_spill`` ``[2, capacity]`` (the in-edges past a
node's width). The rows are gathered slot by slot and added with a ``MatMul`` of ones,
then the spilled rows with a ``ScatterElements`` of ``capacity`` rows: every kernel
gives the same bits at any thread count, and the sum runs parallel over the nodes'
columns (faster than sorted segments, :mod:`.sorted_scatters`, on a GINE model of
molecules: see ``docs/dev/RESULTS.md``).

When it applies. ``export`` gives the model's ``edge_index`` input and fitted table
sizes (a one-budget artifact or a rung with edges whose program reads
``edge_index``); then every ``ScatterElements(axis=0, reduction="add")`` of float rows,
whose row index is ``edge_index[1]`` expanded along the other dims, into ``N`` rows is
rewritten. The rest is left for :mod:`.sorted_scatters`; the zero row appended to the
edge rows is computed instead of copied where it can be by :mod:`.zero_rows`.
"""
from __future__ import annotations

from typing import Any, Dict, List, Set

from ._graph import (Emit, SPILL_ADD, ZERO_ROW, add_constants, constant, drop_dead_nodes,
                     expanded, node_attrs, producer_map, row_index, value_types)

__all__ = ["table_row_scatters"]


def _is_zero(graph: Any, producers: Dict[str, Any], name: str) -> bool:
    """Whether ``name`` is all zeros: a zero constant, or ``ConstantOfShape`` /
    ``Expand`` of one (the ``zeros`` a scatter add starts from)."""
    from onnx import numpy_helper

    node = producers.get(name)
    if node is not None and node.op_type == "ConstantOfShape":
        value = next((a.t for a in node.attribute if a.name == "value"), None)
        return value is None or not numpy_helper.to_array(value).any()
    if node is not None and node.op_type == "Expand":
        return _is_zero(graph, producers, node.input[0])
    value = constant(graph, producers, name)
    return value is not None and not value.any()


def _target_row(graph: Any, producers: Dict[str, Any], row: str, edge_index: str) -> bool:
    """Whether ``row`` is ``Gather(edge_index, 1, axis=0)``: the edges' target row."""
    node = producers.get(row)
    if node is None or node.op_type != "Gather" or node.input[0] != edge_index \
            or node_attrs(node).get("axis", 0) != 0:
        return False
    one = constant(graph, producers, node.input[1])
    return one is not None and one.ndim == 0 and int(one) == 1


#: the table sums' constants: ``in_slots`` transposed (one ``Transpose`` a model), the
#: ``[S, -1]`` shape of the gathered slot rows, and the ``[1, S]`` ones they are summed
#: with (a constant per float type)
_SLOTS_T, _SLOT_ROWS, _ONES = "graph_adapter_slots_t", "graph_adapter_slot_rows", \
    "graph_adapter_slot_ones_{}"


def _table_sum(node: Any, slots: str, elem: int, rank: int, zero_data: bool) -> List[Any]:
    """The nodes that replace one target-row scatter add ``node`` (:func:`table_row_scatters`).

    The rows are gathered slot by slot (``in_slots`` transposed: ``[S, N, D...]``, each
    slot's rows contiguous) and added with a ``MatMul`` of ``[1, S]`` ones and their
    ``[S, N * D...]`` view (faster than ``Gather`` to ``[N, S, D]`` and ``ReduceSum``
    over ``S``: ``docs/dev/RESULTS.md``); a dot of ``S`` terms for each output, its
    columns split over threads, never its terms: the same bits at any thread count."""
    import numpy as np
    from onnx import helper, numpy_helper

    emit = Emit(node.output[0])
    upd = node.input[2]
    tail = emit("Slice", [emit("Shape", [upd]), "graph_adapter_det_one1", "graph_adapter_det_end"])
    zero = numpy_helper.from_array(np.zeros(1, dtype=helper.tensor_dtype_to_np_dtype(elem)))
    zrow = emit("ConstantOfShape", [emit("Concat", ["graph_adapter_det_one1", tail], axis=0)],
                value=zero)
    # row E: the zero row padding slots read (computed into the rows instead where it can
    # be: the zero_rows rewrite, run next)
    rows = f"{node.output[0]}{ZERO_ROW}"
    emit.nodes.append(helper.make_node("Concat", [upd, zrow], [rows], name=rows, axis=0))
    flat = emit("Reshape", [emit("Gather", [rows, _SLOTS_T], axis=0), _SLOT_ROWS])
    summed = emit("Reshape", [emit("MatMul", [_ONES.format(elem), flat]),
                              emit("Concat", ["graph_adapter_det_minus1", tail], axis=0)])
    spilled = emit("Gather", [rows, "graph_adapter_spill_ids"], axis=0)
    index = expanded(emit, "graph_adapter_spill_nodes", spilled, rank)
    # (named so that the sorted_scatters rewrite keeps it: a ScatterElements of a few
    # rows is deterministic and cheap; sorting them would cost more than it saves)
    spill_sum = f"{node.output[0]}{SPILL_ADD}"
    emit.nodes.append(helper.make_node("ScatterElements", [summed, index, spilled], [spill_sum],
                                       name=spill_sum, axis=0, reduction="add"))
    summed = spill_sum
    if zero_data:  # the zeros the scatter starts from: nothing to add
        emit.nodes.append(helper.make_node("Identity", [summed], list(node.output),
                                           name=f"{node.output[0]}__tables"))
    else:
        emit.nodes.append(helper.make_node("Add", [node.input[0], summed], list(node.output),
                                           name=f"{node.output[0]}__add"))
    return emit.nodes


def table_row_scatters(model: Any, edge_index: str, slots: str, spill: str,
                       nodes: int, width: int, capacity: int) -> int:
    """Rewrite every row scatter add of ``model`` (in place) that sums edge rows into
    their target nodes (``ScatterElements(axis=0, add)`` of float rows whose row index
    is ``edge_index[1]``, into ``nodes`` rows) as sums over neighbour tables, two new
    int64 inputs: ``slots`` ``[nodes, width]`` (each node's real in-edge ids, then
    ``E``) and ``spill`` ``[2, capacity]`` (edges past a node's width: edge id, node;
    padding ``(E, nodes - 1)``), as ``graph_adapter.serve`` packs them. Each sum is
    ``Gather`` of the rows (a zero row appended as row ``E``) to ``[width, nodes, ...]``
    (the table transposed) and a ``MatMul`` of ones over the width (:func:`_table_sum`),
    then the spilled rows added with a ``ScatterElements`` of ``capacity`` rows: every
    kernel gives the same bits at any thread count, the sum is parallel over nodes'
    columns, and a NaN or an infinity stays
    in its own node's row. Padding edges are in no table, so padding nodes' rows
    differ from the eager ones (real rows are equal: padding edges touch padding nodes
    only). Returns how many; the other scatters are left for
    :func:`~.sorted_scatters.deterministic_row_scatters`, and the zero row appended to the
    edge rows for :func:`~.zero_rows.computed_zero_rows`."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    if not any(i.name == edge_index for i in graph.input):
        return 0
    producers = producer_map(graph)
    types = value_types(model)
    out_nodes: List[Any] = []
    done = 0
    elems: Set[int] = set()
    for node in graph.node:
        ok = node.op_type == "ScatterElements" and len(node.input) == 3
        attrs = node_attrs(node) if ok else {}
        t = types.get(node.input[0]) if ok else None
        dims = t.shape.dim if t is not None and t.HasField("shape") else []
        row = row_index(graph, producers, node.input[1]) if ok else None
        if not (row is not None and attrs.get("axis", 0) == 0 and attrs.get("reduction") == b"add"
                and t.elem_type in (TensorProto.FLOAT, TensorProto.DOUBLE) and dims
                and dims[0].dim_value == nodes
                and _target_row(graph, producers, row, edge_index)):
            out_nodes.append(node)
            continue
        done += 1
        elems.add(t.elem_type)
        out_nodes.extend(_table_sum(node, slots, t.elem_type, len(dims),
                                    _is_zero(graph, producers, node.input[0])))
    if not done:
        return 0
    split = [helper.make_node("Gather", [spill, k], [name], name=name, axis=0)
             for k, name in (("graph_adapter_det_zero", "graph_adapter_spill_ids"),
                             ("graph_adapter_det_one", "graph_adapter_spill_nodes"))]
    split.append(helper.make_node("Transpose", [slots], [_SLOTS_T], name=_SLOTS_T, perm=[1, 0]))
    add_constants(graph, {"graph_adapter_det_one": 1, _SLOT_ROWS: [width, -1]})
    graph.initializer.extend(
        numpy_helper.from_array(np.ones((1, width), helper.tensor_dtype_to_np_dtype(e)),
                                _ONES.format(e)) for e in sorted(elems))
    del graph.node[:]
    graph.node.extend(split + out_nodes)
    graph.input.extend([
        helper.make_tensor_value_info(slots, TensorProto.INT64, [nodes, width]),
        helper.make_tensor_value_info(spill, TensorProto.INT64, [2, capacity])])
    drop_dead_nodes(graph)
    return done
