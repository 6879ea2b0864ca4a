"""The ONNX models of a ladder's rungs as one model (``export(..., format="onnx",
ladder=...)``): an ``If`` a rung at the top level, selected by the length of an int64
input (:func:`ladder_model`'s docstring says how ``serve`` runs it). Not a rewrite of
one model: ``onnx.py`` calls it on the rewritten models of the rungs."""
from __future__ import annotations

from typing import Any, Dict, List, Set, Tuple

from ._graph import subgraph_reads

__all__ = ["ladder_model"]


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
    whole model), its own weights kept inside (weights read from the outer scope cost
    every call a little more, one per value: ``docs/dev/RESULTS.md``), and the
    initializers no node reads dropped (onnxruntime warns of each on load).

    Each outer input is read through a ``Reshape`` to the rung's static shape (an alias,
    no copy): the outer inputs' differing dims are symbolic, and without the static
    shapes a plain session cannot fold the branch's ``Shape`` arithmetic (slower
    calls: ``docs/dev/RESULTS.md``)."""
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
    read = {o.name for o in g.output} | subgraph_reads(
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
    one-budget artifact of its budget would (as fast: ``docs/dev/RESULTS.md``; with
    ``If`` branches nested in a chain onnxruntime inlined the second level wrongly and
    failed at run time). A plain session runs any rung: all ``If``s run a call, the
    rung's branch and the
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
