"""ONNX-graph helpers the rewrites share: node attributes, constants, who writes a value,
the row-index pattern of a scatter, dead nodes, subgraph reads, a topological order,
shape inference's types, the nodes a rewrite emits, and the names the rewrites agree on.
Every function takes ``onnx`` protos (``ModelProto`` / ``GraphProto`` / ``NodeProto``) and
imports ``onnx`` when called (the package imports without it)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Set

def node_attrs(node: Any) -> Dict[str, Any]:
    """Attribute name -> value of an ``onnx.NodeProto``."""
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def constant(graph: Any, producers: Dict[str, Any], name: str) -> Optional[Any]:
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


def row_index(graph: Any, producers: Dict[str, Any], indices: str) -> Optional[str]:
    """The 1-index-per-row tensor ``i`` if ``indices`` is ``Expand(Reshape(i, [k, 1, ..]))``."""
    expand = producers.get(indices)
    if expand is None or expand.op_type != "Expand":
        return None
    reshape = producers.get(expand.input[0])
    if reshape is None or reshape.op_type != "Reshape" or len(reshape.input) != 2:
        return None
    shape = constant(graph, producers, reshape.input[1])
    if shape is None or shape.ndim != 1 or shape.size < 2 or not (shape[1:] == 1).all():
        return None
    return reshape.input[0]


def drop_dead_nodes(graph: Any) -> int:
    """Remove the nodes of ``graph`` (an ``onnx.GraphProto``) whose outputs nothing reads
    (no node, no graph output; subgraphs' reads count); return how many."""
    used: Set[str] = {o.name for o in graph.output}
    keep: List[Any] = []
    for node in reversed(list(graph.node)):  # topological order: readers come later
        if any(o in used for o in node.output if o):
            keep.append(node)
            used.update(node.input)
            used.update(subgraph_reads(node))
    removed = len(graph.node) - len(keep)
    if removed:
        del graph.node[:]
        graph.node.extend(reversed(keep))
    return removed


def subgraph_reads(node: Any) -> Set[str]:
    """Every name read inside the subgraphs (``If``/``Loop`` bodies) of ``node``."""
    from onnx import AttributeProto

    reads: Set[str] = set()
    for a in node.attribute:
        graphs = [a.g] if a.type == AttributeProto.GRAPH else (
            list(a.graphs) if a.type == AttributeProto.GRAPHS else [])
        for g in graphs:
            for n in g.node:
                reads.update(n.input)
                reads.update(subgraph_reads(n))
    return reads


def topological(graph: Any, nodes: List[Any]) -> List[Any]:
    """``nodes`` in an order where each reads only values written before it (graph
    inputs, initializers, earlier outputs; an ``If`` body's outer reads count), the
    given order kept where it already is one."""
    ready: Set[str] = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    waiting = list(nodes)
    out: List[Any] = []
    while waiting:
        rest = []
        for node in waiting:
            needs = set(node.input) | (subgraph_reads(node) - _subgraph_writes(node))
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


#: the int64 constants the scatter rewrites read by name (added once a model,
#: :func:`add_constants`)
CONSTANTS = {"graph_adapter_det_minus1": [-1], "graph_adapter_det_zero": 0,
             "graph_adapter_det_one1": [1], "graph_adapter_det_zero1": [0],
             "graph_adapter_det_end": [2 ** 62]}


def add_constants(graph: Any, extra: Optional[Dict[str, Any]] = None) -> None:
    """Add :data:`CONSTANTS` and ``extra`` (name -> int64 value) to ``graph``'s
    initializers, each one not there yet (several rewrites read them)."""
    import numpy as np
    from onnx import numpy_helper

    have = {i.name for i in graph.initializer}
    graph.initializer.extend(numpy_helper.from_array(np.array(v, dtype=np.int64), k)
                             for k, v in {**CONSTANTS, **(extra or {})}.items() if k not in have)


def producer_map(graph: Any) -> Dict[str, Any]:
    """Value name -> the node of ``graph`` that writes it."""
    return {out: n for n in graph.node for out in n.output}


def default_opset(model: Any) -> int:
    """The default ONNX domain's opset of ``model`` (``0``: none): reducing scatters
    (``reduction`` of ``ScatterND``, ``ScatterElements``'s ``add``) need 16."""
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


class Emit:
    """Nodes of one rewritten scatter, with names unique in the model (its output's)."""

    def __init__(self, prefix: str):
        self.prefix, self.nodes, self.count = prefix, [], 0

    def __call__(self, op: str, inputs: List[str], outputs: int = 1, **attrs: Any) -> Any:
        from onnx import helper

        self.count += 1
        names = [f"{self.prefix}__{op.lower()}{self.count}_{k}" for k in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, names, name=names[0], **attrs))
        return names[0] if outputs == 1 else names


def value_types(model: Any) -> Dict[str, Any]:
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


def expanded(emit: Emit, row: str, updates: str, rank: int) -> str:
    """``row`` (one index a row) as ScatterElements reads it: broadcast to ``updates``."""
    from onnx import TensorProto, helper

    shape = emit("Constant", [], value=helper.make_tensor(
        f"{emit.prefix}__index_shape", TensorProto.INT64, [rank], [-1] + [1] * (rank - 1)))
    return emit("Expand", [emit("Reshape", [row, shape]), emit("Shape", [updates])])


#: the name suffix of a table sum's spill ``ScatterElements`` (``table_sums``): a few
#: rows, deterministic and cheap, which ``sorted_scatters`` leaves as it is
SPILL_ADD = "__spill_add"


#: the name suffix of a table sum's zero-row ``Concat`` (``table_sums`` writes it,
#: ``zero_rows`` removes it where the edge rows compute that row)
ZERO_ROW = "__zero_row"
