"""Row scatter adds summed as sorted segments: the same bits at any thread count.

What it does. PyG's sum aggregation (``torch_geometric.utils.scatter``) adds messages
into node rows with ``zeros.scatter_add_(0, index.view(-1, 1).expand_as(src), src)``;
the ONNX exporter writes that as it reads: ``ScatterElements(axis=0, reduction="add")``
on an index ``Expand``-ed to ``[E, D]``, which onnxruntime runs one element at a time,
on one thread (most of a GINE program's time on batches of molecules before the
rewrites; see ``docs/dev/RESULTS.md``). The rewrite sums the same rows as *sorted
segments*: the rows are ordered by their index (``TopK``, ties in row order; an index
known to be in order already, ``batch``, is not sorted), added up in float64
(``CumSum``), and each target row gets the difference of the prefix sums at its
segment's ends (``Gather``); every one of these kernels gives the same bits at any
thread count. Float64 keeps the differences exact to float32 rounding (sums of float32
values never overflow there). A prefix sum spreads a NaN or an infinity to every later
segment, so when the total of any column is not finite an ``If`` runs the original
``ScatterElements`` instead (each row's own sum, the eager semantics; slower, only for
such calls). Integer rows are summed in int64 (wrapping differences are exact).
Reducing ``ScatterND`` nodes on a row index (``[E, 1]``) get the same treatment
(``add``) or become ``ScatterElements`` (``mul``/``max``/``min``, which reduce one
element at a time in row order: deterministic).

When it applies. Opset 16 and later. Only the exact pattern is rewritten:
``ScatterElements`` with ``axis=0`` and ``reduction="add"`` whose indices are
``Expand(Reshape(i, [k, 1, ..., 1]))`` (every row one index, broadcast along the other
dims), so that each row of the update goes to the row of ``data`` its index names, on
data of a known shape and a numeric type other than bfloat16; a table sum's spill
(:data:`~._graph.SPILL_ADD`: a few rows, deterministic already) is left as it is. It
runs after :mod:`.table_sums`, on the scatters that did not become table sums. The
``Expand`` left unused is removed with every other node nobody reads.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from ._graph import (Emit, SPILL_ADD, add_constants, default_opset, drop_dead_nodes, expanded,
                     node_attrs, producer_map, row_index, value_types)

__all__ = ["deterministic_row_scatters"]


def _is_float(elem_type: int) -> bool:
    """Whether an ONNX element type is a float (summed in float64 by the rewrite)."""
    from onnx import TensorProto

    return elem_type in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16)


class _Deterministic:
    """The rewrite of one model (:func:`deterministic_row_scatters`). The order of the
    rows and the rows per target depend on the index and the target count only: scatters
    on the same index into as many rows (the layers of a model, a softmax's sum and its
    messages) share one sort."""

    def __init__(self, model: Any, ordered: Sequence[str] = ()):
        self.ordered = set(ordered)  # row indices already in order (a packer's batch)
        self.graph = model.graph
        self.producers = producer_map(self.graph)
        self.types = value_types(model)
        self.sorted: Dict[Tuple[str, Any], Tuple[str, str, str, str]] = {}
        self.initializers: List[Any] = []

    def _rows_of(self, emit: Emit, data: str) -> Tuple[str, Any]:
        """``(n, key)``: a ``[1]`` tensor of ``data``'s row count (a constant when static)."""
        import numpy as np
        from onnx import numpy_helper

        t = self.types.get(data)
        dims = t.shape.dim if t is not None and t.HasField("shape") else []
        if dims and dims[0].dim_value > 0:
            n = int(dims[0].dim_value)
            name = f"graph_adapter_det_rows_{n}"
            if not any(i.name == name for i in self.initializers):
                self.initializers.append(numpy_helper.from_array(np.array([n], np.int64), name))
            return name, n
        return emit("Slice", [emit("Shape", [data]), "graph_adapter_det_zero1",
                              "graph_adapter_det_one1"]), data

    def _order(self, emit: Emit, data: str, row: str) -> Tuple[str, str, str, str]:
        """``(i1, perm, ends, starts)``: the flat index (negative ones counted from the
        end, as ScatterElements reads them), the row order sorted by index (ties in row
        order), each target's segment of the sorted rows."""
        import numpy as np
        from onnx import numpy_helper

        n, key = self._rows_of(emit, data)
        if (row, key) in self.sorted:
            return self.sorted[(row, key)]
        i1 = emit("Reshape", [row, "graph_adapter_det_minus1"])
        i1 = emit("Where", [emit("Less", [i1, "graph_adapter_det_zero"]), emit("Add", [i1, n]), i1])
        e = emit("Shape", [i1])
        # an index in order already (``batch``: nodes in graph order) needs no sort
        perm = "" if row in self.ordered else \
            emit("TopK", [i1, e], outputs=2, axis=0, largest=0, sorted=1)[1]
        ones = emit("ConstantOfShape", [e], value=numpy_helper.from_array(np.ones(1, np.int64)))
        zeros = emit("ConstantOfShape", [n], value=numpy_helper.from_array(np.zeros(1, np.int64)))
        # rows per target: a 1-D ScatterElements of E ones (deterministic, cheap)
        cnt = emit("ScatterElements", [zeros, i1, ones], axis=0, reduction="add")
        ends = emit("CumSum", [cnt, "graph_adapter_det_zero"])
        self.sorted[(row, key)] = i1, perm, ends, emit("Sub", [ends, cnt])
        return self.sorted[(row, key)]

    def segment_sums(self, emit: Emit, data: str, row: str, updates: str, acc: int
                     ) -> Tuple[str, str]:
        """``(seg, cs0)``: per row of ``data``, the sum (in ``acc``) of the ``updates``
        rows whose index ``row`` names it, as differences of prefix sums over the rows
        sorted by index; ``cs0``: the prefix sums (row 0 zero, the last the totals)."""
        import numpy as np
        from onnx import helper, numpy_helper

        _, perm, ends, starts = self._order(emit, data, row)
        tail = emit("Slice", [emit("Shape", [updates]), "graph_adapter_det_one1",
                              "graph_adapter_det_end"])
        t = self.types.get(updates)
        elem = t.elem_type if t is not None and t.elem_type else acc
        zero = numpy_helper.from_array(np.zeros(1, dtype=helper.tensor_dtype_to_np_dtype(elem)))
        zrow = emit("ConstantOfShape", [emit("Concat", ["graph_adapter_det_one1", tail], axis=0)],
                    value=zero)
        # the zero row before the sorted rows (prefix sum 0 at row 0) is put there before
        # the cast: a copy of half the bytes
        rows = emit("Concat", [zrow, emit("Gather", [updates, perm], axis=0) if perm
                               else updates], axis=0)
        cs0 = emit("CumSum", [emit("Cast", [rows], to=acc), "graph_adapter_det_zero"])
        hi, lo = emit("Gather", [cs0, ends], axis=0), emit("Gather", [cs0, starts], axis=0)
        return emit("Sub", [hi, lo]), cs0

    def sum_rows(self, node_name: str, out: str, data: str, row: str, updates: str,
                 elem: int, rank: int) -> List[Any]:
        """The nodes that write ``out = data + (rows of updates added at row)``, the same
        bits at any thread count (module doc)."""
        from onnx import TensorProto, helper

        emit = Emit(out)
        if not _is_float(elem):
            seg, _ = self.segment_sums(emit, data, row, updates, TensorProto.INT64)
            if elem != TensorProto.INT64:
                seg = emit("Cast", [seg], to=elem)
            emit.nodes.append(helper.make_node("Add", [data, seg], [out], name=f"{out}__add"))
            return emit.nodes
        seg, cs0 = self.segment_sums(emit, data, row, updates, TensorProto.DOUBLE)
        total = emit("ReduceSum", [emit("Slice", [cs0, "graph_adapter_det_minus1",
                                                  "graph_adapter_det_end"])], keepdims=0)
        not_finite = emit("IsNaN", [emit("Sub", [total, total])])  # inf - inf, nan - nan
        fast = Emit(f"{out}__sorted")
        fast_out = fast("Add", [data, fast("Cast", [seg], to=elem)])
        slow = Emit(f"{out}__per_element")
        slow_out = slow("ScatterElements", [data, expanded(slow, row, updates, rank), updates],
                        axis=0, reduction="add")

        def branch(e: Emit, result: str, name: str) -> Any:
            return helper.make_graph(e.nodes, name, [], [helper.make_tensor_value_info(
                result, elem, None)])

        emit.nodes.append(helper.make_node(
            "If", [not_finite], [out], name=f"{node_name or out}__deterministic",
            then_branch=branch(slow, slow_out, f"{out}__not_finite"),
            else_branch=branch(fast, fast_out, f"{out}__finite")))
        return emit.nodes

    def replace(self, node: Any) -> Optional[List[Any]]:
        """The nodes that replace ``node`` (module doc), or ``None`` to keep it."""
        from onnx import TensorProto, helper

        if node.name.endswith(SPILL_ADD):
            return None
        data = self.types.get(node.input[0]) if node.input else None
        elem = data.elem_type if data is not None else TensorProto.UNDEFINED
        # (bfloat16 has no numpy dtype for the zero row: kept; ScatterElements is deterministic)
        if elem in (TensorProto.UNDEFINED, TensorProto.BOOL, TensorProto.STRING,
                    TensorProto.BFLOAT16) or \
                len(node.input) != 3 or not data.HasField("shape"):
            return None
        rank = len(data.shape.dim)
        if node.op_type == "ScatterElements":
            attrs = node_attrs(node)
            if attrs.get("axis", 0) != 0 or attrs.get("reduction") != b"add":
                return None
            row = row_index(self.graph, self.producers, node.input[1])
            return None if row is None else self.sum_rows(
                node.name, node.output[0], node.input[0], row, node.input[2], elem, rank)
        reduction = node_attrs(node).get("reduction", b"none").decode()
        if node.op_type != "ScatterND" or reduction == "none" or not _row_nd(self.types,
                                                                             node.input[1]):
            return None
        if reduction == "add":
            return self.sum_rows(node.name, node.output[0], node.input[0], node.input[1],
                                 node.input[2], elem, rank)
        # mul / max / min: ScatterElements reduces one element at a time, in row order
        emit = Emit(node.output[0])
        index = expanded(emit, node.input[1], node.input[2], rank)
        emit.nodes.append(helper.make_node("ScatterElements", [node.input[0], index, node.input[2]],
                                           list(node.output), name=f"{node.name}__elements",
                                           axis=0, reduction=reduction))
        return emit.nodes


def _row_nd(types: Dict[str, Any], indices: str) -> bool:
    """Whether a ScatterND's ``indices`` are ``[E, 1]``: one row of ``data`` an update row."""
    t = types.get(indices)
    dims = t.shape.dim if t is not None and t.HasField("shape") else []
    return len(dims) == 2 and dims[1].dim_value == 1


def deterministic_row_scatters(model: Any, ordered: Sequence[str] = ()) -> int:
    """Rewrite every row-wise scatter add of ``model`` (an ``onnx.ModelProto``, in place)
    so that onnxruntime computes it the same at any thread count (module doc): the
    exporter's ``ScatterElements(axis=0, add)`` of whole rows and any reducing
    ``ScatterND`` on a ``[E, 1]`` row index. ``ordered``: row indices (graph inputs)
    already in non-decreasing order, summed without the sort (``batch``: the packer
    lays the nodes out in graph order). Returns how many. Needs opset >= 16; an older
    model is left as it is (``0``)."""
    if default_opset(model) < 16:
        return 0
    rewrite = _Deterministic(model, ordered)
    nodes: List[Any] = []
    done = 0
    for node in model.graph.node:
        replaced = rewrite.replace(node)
        nodes.extend(replaced if replaced is not None else [node])
        done += replaced is not None
    if done:
        graph = model.graph
        add_constants(graph)  # (the table sums may have added them)
        graph.initializer.extend(rewrite.initializers)
        del graph.node[:]
        graph.node.extend(nodes)
        drop_dead_nodes(graph)
    return done
