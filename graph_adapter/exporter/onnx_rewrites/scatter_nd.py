"""Row-wise scatter adds as one ``ScatterND(reduction="add")`` each: not run by
``export`` (not in :data:`~graph_adapter.exporter.onnx_rewrites.REWRITES`), kept for
``benchmarks/bench_onnx_scatter.py``, which compares it with the deterministic forms.

What it rewrites: ``ScatterElements(axis=0, reduction="add")`` whose indices are
``Expand(Reshape(i, [k, 1, ..., 1]))`` (every row one index), as a ``ScatterND`` add on
``i`` reshaped to ``[k, 1]``. Faster than ``ScatterElements`` in onnxruntime, but not
deterministic: onnxruntime splits its rows over the intra-op threads and adds into
shared rows without a lock, so rows whose index repeats lose updates at 2 threads and
more (``docs/deploy.md``; ``docs/dev/RESULTS.md`` has the measurements). Export sums
such rows with :mod:`.table_sums` and :mod:`.sorted_scatters` instead.
"""
from __future__ import annotations

from typing import Any, List

from ._graph import default_opset, drop_dead_nodes, node_attrs, producer_map, row_index

__all__ = ["scatter_rows_as_scatter_nd"]


#: the shape constant of the ``[-1, 1]`` row index the rewrite adds (one per model)
_ROW_INDEX_SHAPE = "graph_adapter_row_index_shape"


def scatter_rows_as_scatter_nd(model: Any) -> int:
    """Rewrite every row-wise ``ScatterElements`` add of ``model`` (an ``onnx.ModelProto``,
    in place) as a ``ScatterND`` add (module doc); return how many. Needs opset >= 16
    (``ScatterND``'s ``reduction``); an older model is left as it is (``0``)."""
    import numpy as np
    from onnx import helper, numpy_helper

    if default_opset(model) < 16:
        return 0
    graph = model.graph
    producers = producer_map(graph)
    nodes: List[Any] = []
    done = 0
    for node in graph.node:
        attrs = node_attrs(node) if node.op_type == "ScatterElements" else {}
        row = None
        if attrs.get("axis", 0) == 0 and attrs.get("reduction") == b"add" and len(node.input) == 3:
            row = row_index(graph, producers, node.input[1])
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
