"""Rewrites of an exported ONNX model before ``graph_adapter.export`` writes it.

:func:`deterministic_row_scatters` (what ``export`` runs). PyG's sum aggregation
(``torch_geometric.utils.scatter``) adds messages into node rows with
``zeros.scatter_add_(0, index.view(-1, 1).expand_as(src), src)``; the ONNX
exporter writes that as it reads: ``ScatterElements(axis=0, reduction="add")``
on an index ``Expand``-ed to ``[E, D]``, which onnxruntime (1.32, CPU) runs one
element at a time, on one thread: 61% of the demo's GINE 4 x 64 program at 256
molecules a call. The rewrite sums the same rows as *sorted segments*: the rows
are ordered by their index (``TopK``, ties in row order), added up in float64
(``CumSum``), and each target row gets the difference of the prefix sums at its
segment's ends (``Gather``); every one of these kernels gives the same bits at any
thread count. Float64 keeps the differences exact to float32 rounding (sums of
float32 values never overflow there). A prefix sum spreads a NaN or an infinity
to every later segment, so when the total of any column is not finite an ``If``
runs the original ``ScatterElements`` instead (each row's own sum, the eager
semantics; slower, only for such calls). Integer rows are summed in int64
(wrapping differences are exact). Reducing ``ScatterND`` nodes on a row index
(``[E, 1]``) get the same treatment (``add``) or become ``ScatterElements``
(``mul``/``max``/``min``).

:func:`scatter_rows_as_scatter_nd` (no longer run by ``export``) writes the row
adds as one ``ScatterND(reduction="add")`` instead: 2.7x faster on the demo, but
onnxruntime splits its rows over the intra-op threads and adds into shared rows
without a lock, so rows whose index repeats lose updates at 2+ threads (wide
rows, about 1500+ rows of 128 floats: up to 8.8% off; ``docs/deploy.md``).

Only the exact pattern is rewritten: ``ScatterElements`` with ``axis=0`` and
``reduction="add"`` whose indices are ``Expand(Reshape(i, [k, 1, ..., 1]))``
(every row one index, broadcast along the other dims), so that each row of the
update goes to the row of ``data`` its index names. The ``Expand`` left unused
is removed with every other node nobody reads (:func:`drop_dead_nodes`).

:func:`ladder_model` (``export(..., format="onnx", ladder=...)``) puts the models of
several budgets into one, an ``If`` a rung (its docstring says how ``serve`` runs it).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

__all__ = ["deterministic_row_scatters", "scatter_rows_as_scatter_nd", "drop_dead_nodes",
           "drop_unread_initializers", "ladder_model", "table_row_scatters",
           "combine_table_lookups"]

#: the shape constant of the ``[-1, 1]`` row index the rewrite adds (one per model)
_ROW_INDEX_SHAPE = "graph_adapter_row_index_shape"


def _attrs(node: Any) -> Dict[str, Any]:
    """Attribute name -> value of an ``onnx.NodeProto``."""
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _constant(graph: Any, producers: Dict[str, Any], name: str) -> Optional[Any]:
    """The value of an initializer or a ``Constant`` node's output (numpy), else ``None``."""
    from onnx import numpy_helper

    for init in graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    node = producers.get(name)
    if node is not None and node.op_type == "Constant" and node.attribute \
            and node.attribute[0].name == "value":
        return numpy_helper.to_array(node.attribute[0].t)
    return None


def _row_index(graph: Any, producers: Dict[str, Any], indices: str) -> Optional[str]:
    """The 1-index-per-row tensor ``i`` if ``indices`` is ``Expand(Reshape(i, [k, 1, ..]))``."""
    expand = producers.get(indices)
    if expand is None or expand.op_type != "Expand":
        return None
    reshape = producers.get(expand.input[0])
    if reshape is None or reshape.op_type != "Reshape" or len(reshape.input) != 2:
        return None
    shape = _constant(graph, producers, reshape.input[1])
    if shape is None or shape.ndim != 1 or shape.size < 2 or not (shape[1:] == 1).all():
        return None
    return reshape.input[0]


def scatter_rows_as_scatter_nd(model: Any) -> int:
    """Rewrite every row-wise ``ScatterElements`` add of ``model`` (an ``onnx.ModelProto``,
    in place) as a ``ScatterND`` add (module doc); return how many. Needs opset >= 16
    (``ScatterND``'s ``reduction``); an older model is left as it is (``0``)."""
    import numpy as np
    from onnx import helper, numpy_helper

    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset < 16:
        return 0
    graph = model.graph
    producers = {out: n for n in graph.node for out in n.output}
    nodes: List[Any] = []
    done = 0
    for node in graph.node:
        attrs = _attrs(node) if node.op_type == "ScatterElements" else {}
        row = None
        if attrs.get("axis", 0) == 0 and attrs.get("reduction") == b"add" and len(node.input) == 3:
            row = _row_index(graph, producers, node.input[1])
        if row is None:
            nodes.append(node)
            continue
        if not done:
            graph.initializer.append(numpy_helper.from_array(np.array([-1, 1], dtype=np.int64),
                                                             _ROW_INDEX_SHAPE))
        rows = f"{node.output[0]}__row_index"
        nodes.append(helper.make_node("Reshape", [row, _ROW_INDEX_SHAPE], [rows],
                                      name=f"{node.name}__row_index"))
        nodes.append(helper.make_node("ScatterND", [node.input[0], rows, node.input[2]],
                                      list(node.output), name=f"{node.name}__rows",
                                      reduction="add"))
        done += 1
    if done:
        del graph.node[:]
        graph.node.extend(nodes)
        drop_dead_nodes(graph)
    return done


def drop_dead_nodes(graph: Any) -> int:
    """Remove the nodes of ``graph`` (an ``onnx.GraphProto``) whose outputs nothing reads
    (no node, no graph output; subgraphs' reads count); return how many."""
    used: Set[str] = {o.name for o in graph.output}
    keep: List[Any] = []
    for node in reversed(list(graph.node)):  # topological order: readers come later
        if any(o in used for o in node.output if o):
            keep.append(node)
            used.update(node.input)
            used.update(_subgraph_reads(node))
    removed = len(graph.node) - len(keep)
    if removed:
        del graph.node[:]
        graph.node.extend(reversed(keep))
    return removed


def drop_unread_initializers(graph: Any) -> int:
    """Remove the initializers of ``graph`` that no node (nor a subgraph) reads and no graph
    output or input names: the tables a rewrite replaced, the exporter's leftovers
    (onnxruntime warns of each at every load; the file holds them for nothing). Returns
    how many."""
    read: Set[str] = {o.name for o in graph.output} | {i.name for i in graph.input}
    for node in graph.node:
        read.update(node.input)
        read.update(_subgraph_reads(node))
    kept = [i for i in graph.initializer if i.name in read]
    removed = len(graph.initializer) - len(kept)
    if removed:
        del graph.initializer[:]
        graph.initializer.extend(kept)
    return removed


def _subgraph_reads(node: Any) -> Set[str]:
    """Every name read inside the subgraphs (``If``/``Loop`` bodies) of ``node``."""
    from onnx import AttributeProto

    reads: Set[str] = set()
    for a in node.attribute:
        graphs = [a.g] if a.type == AttributeProto.GRAPH else (
            list(a.graphs) if a.type == AttributeProto.GRAPHS else [])
        for g in graphs:
            for n in g.node:
                reads.update(n.input)
                reads.update(_subgraph_reads(n))
    return reads


# ------------------------------------------------------------ deterministic row scatters
#: the shared constants the deterministic rewrite adds (once a model)
_DET_CONSTANTS = {"graph_adapter_det_minus1": [-1], "graph_adapter_det_zero": 0,
                  "graph_adapter_det_one1": [1], "graph_adapter_det_zero1": [0],
                  "graph_adapter_det_end": [2 ** 62]}


class _Emit:
    """Nodes of one rewritten scatter, with names unique in the model (its output's)."""

    def __init__(self, prefix: str):
        self.prefix, self.nodes, self.count = prefix, [], 0

    def __call__(self, op: str, inputs: List[str], outputs: int = 1, **attrs: Any) -> Any:
        from onnx import helper

        self.count += 1
        names = [f"{self.prefix}__{op.lower()}{self.count}_{k}" for k in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, names, name=names[0], **attrs))
        return names[0] if outputs == 1 else names


def _value_types(model: Any) -> Dict[str, Any]:
    """Name -> ``TypeProto.Tensor`` (elem type, shape) of every value shape inference knows."""
    import onnx

    g = onnx.shape_inference.infer_shapes(model).graph
    out = {v.name: v.type.tensor_type for v in (*g.input, *g.value_info, *g.output)}
    for init in g.initializer:
        t = onnx.TypeProto.Tensor()
        t.elem_type = init.data_type
        t.shape.dim.extend(onnx.TensorShapeProto.Dimension(dim_value=d) for d in init.dims)
        out[init.name] = t
    return out


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
        self.producers = {out: n for n in self.graph.node for out in n.output}
        self.types = _value_types(model)
        self.sorted: Dict[Tuple[str, Any], Tuple[str, str, str, str]] = {}
        self.initializers: List[Any] = []

    def _rows_of(self, emit: _Emit, data: str) -> Tuple[str, Any]:
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

    def _order(self, emit: _Emit, data: str, row: str) -> Tuple[str, str, str, str]:
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

    def segment_sums(self, emit: _Emit, data: str, row: str, updates: str, acc: int
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

        emit = _Emit(out)
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
        fast = _Emit(f"{out}__sorted")
        fast_out = fast("Add", [data, fast("Cast", [seg], to=elem)])
        slow = _Emit(f"{out}__per_element")
        slow_out = slow("ScatterElements", [data, _expanded(slow, row, updates, rank), updates],
                        axis=0, reduction="add")

        def branch(e: _Emit, result: str, name: str) -> Any:
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

        if node.name.endswith(_SPILL_ADD):
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
            attrs = _attrs(node)
            if attrs.get("axis", 0) != 0 or attrs.get("reduction") != b"add":
                return None
            row = _row_index(self.graph, self.producers, node.input[1])
            return None if row is None else self.sum_rows(
                node.name, node.output[0], node.input[0], row, node.input[2], elem, rank)
        reduction = _attrs(node).get("reduction", b"none").decode()
        if node.op_type != "ScatterND" or reduction == "none" or not _row_nd(self.types,
                                                                             node.input[1]):
            return None
        if reduction == "add":
            return self.sum_rows(node.name, node.output[0], node.input[0], node.input[1],
                                 node.input[2], elem, rank)
        # mul / max / min: ScatterElements reduces one element at a time, in row order
        emit = _Emit(node.output[0])
        index = _expanded(emit, node.input[1], node.input[2], rank)
        emit.nodes.append(helper.make_node("ScatterElements", [node.input[0], index, node.input[2]],
                                           list(node.output), name=f"{node.name}__elements",
                                           axis=0, reduction=reduction))
        return emit.nodes


def _expanded(emit: _Emit, row: str, updates: str, rank: int) -> str:
    """``row`` (one index a row) as ScatterElements reads it: broadcast to ``updates``."""
    from onnx import TensorProto, helper

    shape = emit("Constant", [], value=helper.make_tensor(
        f"{emit.prefix}__index_shape", TensorProto.INT64, [rank], [-1] + [1] * (rank - 1)))
    return emit("Expand", [emit("Reshape", [row, shape]), emit("Shape", [updates])])


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
    import numpy as np
    from onnx import numpy_helper

    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset < 16:
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
        have = {i.name for i in graph.initializer}  # (table_row_scatters may have added them)
        graph.initializer.extend(numpy_helper.from_array(np.array(v, dtype=np.int64), k)
                                 for k, v in _DET_CONSTANTS.items() if k not in have)
        graph.initializer.extend(rewrite.initializers)
        del graph.node[:]
        graph.node.extend(nodes)
        drop_dead_nodes(graph)
    return done


# ------------------------------------------------------------- neighbour-table sums
#: the name suffix of the spill's ScatterElements (:func:`table_row_scatters`)
_SPILL_ADD = "__spill_add"


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
    value = _constant(graph, producers, name)
    return value is not None and not value.any()


def _target_row(graph: Any, producers: Dict[str, Any], row: str, edge_index: str) -> bool:
    """Whether ``row`` is ``Gather(edge_index, 1, axis=0)``: the edges' target row."""
    node = producers.get(row)
    if node is None or node.op_type != "Gather" or node.input[0] != edge_index \
            or _attrs(node).get("axis", 0) != 0:
        return False
    one = _constant(graph, producers, node.input[1])
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
    ``[S, N * D...]`` view: 0.83 ms a layer of the demo's 4931-node call, against 0.98 ms
    for ``Gather`` to ``[N, S, D]`` and ``ReduceSum`` over ``S``
    (``benchmarks/bench_onnx_scatter.py``); a dot of ``S`` terms for each output, its
    columns split over threads, never its terms: the same bits at any thread count."""
    import numpy as np
    from onnx import helper, numpy_helper

    emit = _Emit(node.output[0])
    upd = node.input[2]
    tail = emit("Slice", [emit("Shape", [upd]), "graph_adapter_det_one1", "graph_adapter_det_end"])
    zero = numpy_helper.from_array(np.zeros(1, dtype=helper.tensor_dtype_to_np_dtype(elem)))
    zrow = emit("ConstantOfShape", [emit("Concat", ["graph_adapter_det_one1", tail], axis=0)],
                value=zero)
    # row E: the zero row padding slots read (computed into the rows instead where it can
    # be: :func:`_without_zero_rows`)
    rows = f"{node.output[0]}{_ZERO_ROW}"
    emit.nodes.append(helper.make_node("Concat", [upd, zrow], [rows], name=rows, axis=0))
    flat = emit("Reshape", [emit("Gather", [rows, _SLOTS_T], axis=0), _SLOT_ROWS])
    summed = emit("Reshape", [emit("MatMul", [_ONES.format(elem), flat]),
                              emit("Concat", ["graph_adapter_det_minus1", tail], axis=0)])
    spilled = emit("Gather", [rows, "graph_adapter_spill_ids"], axis=0)
    index = _expanded(emit, "graph_adapter_spill_nodes", spilled, rank)
    # (named so that deterministic_row_scatters keeps it: a ScatterElements of a few
    # rows is deterministic and cheap; sorting them would cost more than it saves)
    spill_sum = f"{node.output[0]}{_SPILL_ADD}"
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
    :func:`deterministic_row_scatters`."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    if not any(i.name == edge_index for i in graph.input):
        return 0
    producers = {out: n for n in graph.node for out in n.output}
    types = _value_types(model)
    out_nodes: List[Any] = []
    done = 0
    elems: Set[int] = set()
    for node in graph.node:
        ok = node.op_type == "ScatterElements" and len(node.input) == 3
        attrs = _attrs(node) if ok else {}
        t = types.get(node.input[0]) if ok else None
        dims = t.shape.dim if t is not None and t.HasField("shape") else []
        row = _row_index(graph, producers, node.input[1]) if ok else None
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
    have = {i.name for i in graph.initializer}
    graph.initializer.extend(numpy_helper.from_array(np.array(v, dtype=np.int64), k)
                             for k, v in {**_DET_CONSTANTS, "graph_adapter_det_one": 1,
                                          _SLOT_ROWS: [width, -1]}.items()
                             if k not in have)
    graph.initializer.extend(
        numpy_helper.from_array(np.ones((1, width), helper.tensor_dtype_to_np_dtype(e)),
                                _ONES.format(e)) for e in sorted(elems))
    del graph.node[:]
    graph.node.extend(split + out_nodes)
    graph.input.extend([
        helper.make_tensor_value_info(slots, TensorProto.INT64, [nodes, width]),
        helper.make_tensor_value_info(spill, TensorProto.INT64, [2, capacity])])
    drop_dead_nodes(graph)
    _without_zero_rows(model)
    return done


#: the name suffix of a table sum's zero-row ``Concat`` (:func:`_table_sum`)
_ZERO_ROW = "__zero_row"


#: ops whose output row is exactly zero where every input's row is (``+0``): what
#: :func:`_without_zero_rows` computes a zero row through
_ZERO_KEEPING = ("Identity", "Relu", "Add")


class _ZeroRows:
    """The plan of :func:`_without_zero_rows` for one model: which ``Gather`` of an edge
    value's chain reads a zero row appended to its data (a constant table: a new
    initializer; a computed tensor with fewer rows than the edges: a ``Concat`` of it)
    at an index appended to its index."""

    def __init__(self, model: Any):
        self.graph = model.graph
        self.producers = {out: n for n in self.graph.node for out in n.output}
        self.inits = {i.name: i for i in self.graph.initializer}
        self.types = _value_types(model)
        self.readers: Dict[str, List[Any]] = {o.name: [None] for o in self.graph.output}
        for n in self.graph.node:
            for x in set(n.input) | _subgraph_reads(n):
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
            if r is None or r.op_type != "Shape" or _attrs(r):
                return False
            for s in self.readers.get(r.output[0], []):
                start = None if s is None or s.op_type != "Slice" else \
                    _constant(self.graph, self.producers, s.input[1])
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
                or _attrs(node).get("axis", 0) not in (0, -len(data)):  # (rows: axis 0)
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
                name = f"{data}{_ZERO_ROW}"
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
                name = f"{index}{_ZERO_ROW}{rows}"
                self.graph.initializer.append(nh.from_array(np.array([rows], np.int64),
                                                            f"{name}_value"))
                self.new_nodes.append(helper.make_node("Concat", [index, f"{name}_value"],
                                                       [name], name=name, axis=0))
                return name
            node.input[0] = self._cached(("data", data), grown_data)
            node.input[1] = self._cached(("index", index, str(rows)), grown_index)


def _without_zero_rows(model: Any) -> int:
    """Drop the zero-row ``Concat`` of each table sum (:func:`_table_sum`) whose edge rows
    can compute that row themselves: rows made of ``Gather``s through ops that keep a zero
    row zero (:data:`_ZERO_KEEPING`: the demo's ``Relu(x[src] + edge_table[code])``, GIN's
    ``x[src]``), each value of the chain read by the next alone. Each ``Gather`` then
    reads a zero row appended to its data (a constant table: free; a computed one: a
    ``Concat`` of fewer rows than the edges) at an index grown by one (once a model), so
    that row ``E`` of the edge rows is ``+0``, as the ``Concat`` wrote it: the same bits
    (an ``E + 1``-row copy a layer saved: 10% of the demo's 256-molecule call,
    ``benchmarks/bench_onnx_scatter.py``). Returns how many."""
    graph = model.graph
    concats = [n for n in graph.node if n.op_type == "Concat" and n.name.endswith(_ZERO_ROW)]
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
    graph.node.extend(_topological(graph, z.new_nodes + kept))
    drop_dead_nodes(graph)
    return len(rename)


# ------------------------------------------------------- one lookup for summed lookups
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
    if node is None or node.op_type != "Gather" or _attrs(node).get("axis", 0) != 0 \
            or node.input[0] not in inits or inits[node.input[0]].ndim != 2:
        return None
    col = producers.get(node.input[1])
    if col is None or col.op_type != "Gather" or _attrs(col).get("axis", 0) != 1 \
            or not any(i.name == col.input[0] for i in graph.input):
        return None
    k = _constant(graph, producers, col.input[1])
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


def _combined_index(emit: _Emit, group: List[_Leaf]) -> str:
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


def _combined_sum(emit: _Emit, graph: Any, groups: List[List[_Leaf]], shared: Dict[Any, str],
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
    table. Each lookup folded saves a ``Gather`` and an ``Add`` of its rows (the demo's
    edge projections: three ``[E, 64]`` lookups and a bias a layer become one lookup).
    A code outside its table still fails the lookup. Returns the lookups and bias adds
    removed."""
    from onnx import numpy_helper

    graph = model.graph
    producers = {out: n for n in graph.node for out in n.output}
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
        emit = _Emit(node.output[0] + "__tables")
        removed += _combined_sum(emit, graph, groups, shared, node.output[0], bias)
        replaced[node.output[0]] = emit.nodes
    if not replaced:
        return 0
    nodes: List[Any] = []
    for node in graph.node:
        nodes.extend(replaced.get(node.output[0], [node]) if node.op_type == "Add" else [node])
    del graph.node[:]
    # (a shared index is emitted with the last sum of the model that reads it)
    graph.node.extend(_topological(graph, nodes))
    drop_dead_nodes(graph)
    return removed


def _topological(graph: Any, nodes: List[Any]) -> List[Any]:
    """``nodes`` in an order where each reads only values written before it (graph
    inputs, initializers, earlier outputs; an ``If`` body's outer reads count), the
    given order kept where it already is one."""
    ready: Set[str] = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    waiting = list(nodes)
    out: List[Any] = []
    while waiting:
        rest = []
        for node in waiting:
            needs = set(node.input) | (_subgraph_reads(node) - _subgraph_writes(node))
            if needs <= ready:
                out.append(node)
                ready.update(node.output)
            else:
                rest.append(node)
        if len(rest) == len(waiting):
            raise ValueError(f"the rewritten ONNX graph has a cycle or an undefined input at "
                             f"node {rest[0].name!r}")
        waiting = rest
    return out


def _subgraph_writes(node: Any) -> Set[str]:
    """Every name written inside the subgraphs of ``node`` (and their initializers)."""
    from onnx import AttributeProto

    out: Set[str] = set()
    for a in node.attribute:
        graphs = [a.g] if a.type == AttributeProto.GRAPH else (
            list(a.graphs) if a.type == AttributeProto.GRAPHS else [])
        for g in graphs:
            out.update(i.name for i in g.initializer)
            out.update(i.name for i in g.input)
            for n in g.node:
                out.update(n.output)
                out.update(_subgraph_writes(n))
    return out


# ------------------------------------------------------------------ a ladder of rungs
def _walk_names(graph: Any, rename: Any) -> None:
    """Apply ``rename`` to every value and node name of ``graph`` and its subgraphs."""
    from onnx import AttributeProto

    for node in graph.node:
        node.input[:] = [rename(x) for x in node.input]
        node.output[:] = [rename(x) for x in node.output]
        if node.name:
            node.name = rename(node.name)
        for a in node.attribute:
            if a.type == AttributeProto.GRAPH:
                _walk_names(a.g, rename)
            elif a.type == AttributeProto.GRAPHS:
                for g in a.graphs:
                    _walk_names(g, rename)
    for v in (*graph.input, *graph.output, *graph.value_info, *graph.initializer):
        v.name = rename(v.name)


def _outer_value(name: str, values: List[Any], dims: Dict[str, List[int]]) -> Any:
    """The outer graph's value info of ``name`` given one per rung (the same element
    type): a dim every rung has the same size on stays static, any other one gets a
    symbolic name (``<name>_dim<k>``), recorded in ``dims`` with its size in each rung."""
    from onnx import helper

    shapes = [[d.dim_value for d in v.type.tensor_type.shape.dim] for v in values]
    shape: List[Any] = []
    for k, sizes in enumerate(zip(*shapes)):
        if len(set(sizes)) == 1 and sizes[0] > 0:
            shape.append(sizes[0])
        else:
            shape.append(f"{name}_dim{k}")
            dims[shape[-1]] = list(sizes)
    return helper.make_tensor_value_info(name, values[0].type.tensor_type.elem_type, shape)


def _branch(model: Any, r: int) -> Any:
    """Rung ``r``'s graph as an ``If`` branch: no inputs (it reads the outer graph's
    inputs by name), every name prefixed ``rung<r>/`` (names are unique across the
    whole model), its own weights kept inside (measured: weights read from the outer
    scope cost every call about 15 us more on the demo's model, one per value), and
    the initializers no node reads dropped (onnxruntime warns of each on load).

    Each outer input is read through a ``Reshape`` to the rung's static shape (an alias,
    no copy): the outer inputs' differing dims are symbolic, and without the static
    shapes a plain session cannot fold the branch's ``Shape`` arithmetic (measured: 2.5%
    slower calls of 256 molecules on the demo's model; 0.2% with the ``Reshape``)."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    g = onnx.GraphProto()
    g.CopyFrom(model.graph)
    prefix = f"rung{r}/"
    _walk_names(g, lambda x: prefix + x if x else x)
    pins = []
    for v in g.input:
        name = v.name[len(prefix):]
        dims = [d.dim_value for d in v.type.tensor_type.shape.dim]
        shape = f"{v.name}__static_shape"
        g.initializer.append(numpy_helper.from_array(np.array(dims, dtype=np.int64), shape))
        pins.append(helper.make_node("Reshape", [name, shape], [v.name], name=f"{v.name}__static"))
    nodes = pins + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    del g.input[:]
    read = {o.name for o in g.output} | _subgraph_reads(
        onnx.helper.make_node("If", [], [], then_branch=g))
    kept = [i for i in g.initializer if i.name in read]
    del g.initializer[:]
    g.initializer.extend(kept)
    g.name = f"rung{r}"
    return g


def _empty_branch(r: int, outputs: List[Any]) -> Any:
    """The ``else`` of rung ``r``'s ``If``: each output with no rows (``[0, ...]``)."""
    import numpy as np
    from onnx import helper, numpy_helper

    nodes, values = [], []
    for j, o in enumerate(outputs):
        t = o.type.tensor_type
        shape = [0] + [d.dim_value for d in t.shape.dim][1:]
        name = f"rung{r}/not_this_rung{j}"
        empty = np.zeros(shape, dtype=helper.tensor_dtype_to_np_dtype(t.elem_type))
        nodes.append(helper.make_node("Constant", [], [name], name=name,
                                      value=numpy_helper.from_array(empty, name)))
        values.append(helper.make_tensor_value_info(name, t.elem_type, shape))
    return helper.make_graph(nodes, f"not_rung{r}", [], values)


def ladder_model(models: List[Any], rung_input: str) -> Tuple[Any, Dict[str, List[int]]]:
    """``(model, dims)``: one ``onnx.ModelProto`` of every rung of ``models`` (one
    exported model a budget, the same function, each with static shapes), and the size
    of each of its symbolic dims in each rung.

    The outer graph's inputs are the rungs' (by name; a dim that differs between rungs
    is symbolic, ``<input>_dim<k>``) plus ``rung_input``, an int64 vector of ``r + 1``
    elements (any values) for rung ``r`` (its length is the symbolic dim
    ``rung_input``). Each rung is an ``If`` on ``Shape(rung_input) == [r + 1]`` whose
    ``else`` gives its outputs with no rows, and each output is the ``Concat`` of the
    rungs' (all empty but the one run): every ``If`` sits at the top level. A session
    made with the free dimension overrides of rung ``r`` (``dims``, and ``r + 1`` for
    ``rung_input``) has static shapes only: onnxruntime folds the conditions and
    inlines the taken branch, so that the session runs rung ``r``'s graph as a
    one-budget artifact of its budget would (measured within the noise, a few percent,
    of one a call; with ``If`` branches nested in a chain onnxruntime 1.32 inlined the
    second level wrongly and failed at run time). A
    plain session runs any rung: all ``If``s run a call, the rung's branch and the
    empty ones. Each rung keeps its own weights (the file holds them once a rung, as
    a ``.pt2`` ladder does).
    """
    from onnx import TensorProto, helper

    if not models:
        raise ValueError("a ladder needs one or more rungs")
    first = models[0].graph.output
    if any(len(m.graph.output) != len(first) for m in models):
        raise ValueError("the rungs' models have different output counts")
    inputs: Dict[str, List[Any]] = {}
    for m in models:
        for v in m.graph.input:
            inputs.setdefault(v.name, []).append(v)
    dims: Dict[str, List[int]] = {rung_input: [r + 1 for r in range(len(models))]}
    outer = [_outer_value(n, vs, dims) for n, vs in inputs.items()]
    outer.append(helper.make_tensor_value_info(rung_input, TensorProto.INT64, [rung_input]))
    names = [o.name for o in first]
    length = "graph_adapter_rung_length"
    nodes = [helper.make_node("Shape", [rung_input], [length], name=length)]
    parts: List[List[str]] = [[] for _ in names]
    for r, m in enumerate(models):
        k, cond = f"graph_adapter_rung{r}_length", f"graph_adapter_is_rung{r}"
        outs = [f"graph_adapter_rung{r}/{n}" for n in names]
        nodes += [helper.make_node("Constant", [], [k], name=k, value=helper.make_tensor(
                      k, TensorProto.INT64, [1], [r + 1])),
                  helper.make_node("Equal", [length, k], [cond], name=cond),
                  helper.make_node("If", [cond], outs, name=f"graph_adapter_if_rung{r}",
                                   then_branch=_branch(m, r),
                                   else_branch=_empty_branch(r, list(m.graph.output)))]
        for j, o in enumerate(outs):
            parts[j].append(o)
    nodes += [helper.make_node("Concat", p, [n], name=f"graph_adapter_rungs_{n}", axis=0)
              for n, p in zip(names, parts)]
    outputs = [_outer_value(n, [m.graph.output[j] for m in models], {})
               for j, n in enumerate(names)]
    graph = helper.make_graph(nodes, "graph_adapter_ladder", outer, outputs)
    opsets: Dict[str, int] = {}
    for m in models:
        for o in m.opset_import:
            opsets[o.domain] = max(opsets.get(o.domain, 0), o.version)
    model = helper.make_model(graph, ir_version=max(m.ir_version for m in models),
                              opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    seen: Set[Tuple[str, str]] = set()
    for m in models:  # model-local functions (the exporter's), once each
        for f in m.functions:
            if (f.domain, f.name) not in seen:
                seen.add((f.domain, f.name))
                model.functions.append(f)
    return model, dims
