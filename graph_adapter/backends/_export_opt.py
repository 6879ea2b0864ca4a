"""Rewrites of an exported ONNX model before ``graph_adapter.export`` writes it.

One rewrite, :func:`scatter_rows_as_scatter_nd`. PyG's sum aggregation
(``torch_geometric.utils.scatter``) adds messages into node rows with
``zeros.scatter_add_(0, index.view(-1, 1).expand_as(src), src)``; the ONNX
exporter writes that as it reads: ``ScatterElements(axis=0, reduction="add")``
on an index ``Expand``-ed to ``[E, D]``. onnxruntime (1.32, CPU) runs
``ScatterElements`` one element at a time, reading an index per element: 61% of
the demo's GINE 4 x 64 program at 256 molecules a call. The same sum is a
``ScatterND(reduction="add")`` of whole rows with the index as ``[E, 1]``:
outputs equal (bit for bit on the demo: both add row by row in edge order), and
the program ran 32.6 -> 11.9 ms at 1 thread (``docs/deploy.md``, Speed).

Only the exact pattern is rewritten: ``ScatterElements`` with ``axis=0`` and
``reduction="add"`` whose indices are ``Expand(Reshape(i, [k, 1, ..., 1]))``
(every row one index, broadcast along the other dims), so that each row of the
update goes to the row of ``data`` its index names. The ``Expand`` left unused
is removed with every other node nobody reads (:func:`drop_dead_nodes`).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Set

__all__ = ["scatter_rows_as_scatter_nd", "drop_dead_nodes"]

#: the shape constant of the ``[-1, 1]`` row index the rewrite adds (one per model)
_ROW_INDEX_SHAPE = "graph_adapter_row_index_shape"


def _attrs(node: Any) -> Dict[str, Any]:
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
