"""``format="onnx"``: ``torch.onnx.export(exported_program, dynamo=True)``, rewritten
(:data:`~graph_adapter.exporter.onnx_rewrites.REWRITES`: its row scatters made
deterministic, ...), run
in onnxruntime sessions as ``serve`` makes them at several thread counts against eager,
the contract in the model's ``metadata_props``; a ladder's rungs as ``If`` branches of
one model on an int64 input of ``r + 1`` elements for rung ``r``
(:data:`ONNX_RUNG_INPUT`)."""
from __future__ import annotations

import dataclasses
import logging
import os
import re
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from ..batching import Budget
from .. import serve as _serve
from ..contract import BATCH, EDGE_MASK, NODE_MASK
from ..contract import ELL_IN as SLOTS
from ..contract import SPILL_IN as SPILL
from ..serve import ONNX_METADATA_KEY, Contract, InputField, Rung, onnx_session
from .checks import Case, check_cases, max_diff
from .contract import updated
from .errors import UnsupportedExportError
from .ladder import rung_batches
from .onnx_rewrites import ModelInputs, TableInputs, ladder_model, rewrite_model
from .trace import Inference, rewritten_program, trace

__all__ = ["CHECK_THREADS", "CHECK_RUNS", "ONNX_RUNG_INPUT", "onnx_session", "onnx_node_layer",
           "write_onnx", "write_onnx_ladder"]


#: thread counts the ONNX artifact is checked at besides the server's (``threads``):
#: onnxruntime splits a kernel's rows over its intra-op threads only at 2 and more
CHECK_THREADS = (2, 4)


#: runs of each check batch at each thread count (a race shows in some runs only)
CHECK_RUNS = 2


LOG = logging.getLogger("graph_adapter.export")


#: the int64 scalar input of an ONNX ladder that selects the rung
#: (``Contract.onnx_rung_input``)
ONNX_RUNG_INPUT = "graph_adapter_rung"


#: the ONNX input names of the neighbour tables (contract keys ``in_slots``, ``in_spill``)
ONNX_TABLE_INPUTS = {SLOTS: f"graph_adapter_{SLOTS}", SPILL: f"graph_adapter_{SPILL}"}


#: the narrowest table width export fits (most atoms of organic molecules take 4 in-edges)
MIN_WIDTH = 4


#: the smallest spill capacity of a call: ``max(MIN_SPILL, G // 4)``, or what the data
#: needs, so that a few graphs with hubs past the width still share a call
MIN_SPILL = 16


#: the width covers at least this share of the nodes' in-degrees (the rest spill)
COVER = 0.995


def _fit_width(degrees: "Any") -> int:
    """The table width for nodes of in-degrees ``degrees`` (numpy, real nodes): the
    smallest covering :data:`COVER` of them, at least :data:`MIN_WIDTH` (the few
    graphs export checks on may lack the degrees the served ones have: fitted on 8
    molecules, a width of 3 made the calls of 256 spill past their capacity, two
    calls a request, 0.58x eager PyG instead of 1.0x)."""
    import numpy as np

    if not degrees.size:
        return MIN_WIDTH
    return max(int(np.sort(degrees)[int(np.ceil(COVER * degrees.size)) - 1]), MIN_WIDTH)


def _fit_spill(spills: Sequence[int], graphs: int) -> int:
    """The spill capacity of calls of ``graphs`` slots: the ``graphs - 1`` largest
    per-graph (or per-batch) spills added up, at least :data:`MIN_SPILL` and ``G // 4``."""
    top = sorted(spills, reverse=True)[:max(graphs - 1, 1)]
    return max(int(sum(top)), MIN_SPILL, graphs // 4)


def _graph_degrees(data: Sequence[Any]) -> Tuple["Any", "Any"]:
    """``(degrees, owner)``: the in-degree of every node of ``data`` (PyG graphs, one
    array over all of them, numpy) and the position of its graph; one ``bincount``."""
    import numpy as np

    nodes = np.array([int(g.num_nodes) for g in data], dtype=np.int64)
    if not nodes.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    first = np.cumsum(nodes) - nodes
    targets = [g.edge_index[1].numpy().astype(np.int64) + first[i] for i, g in enumerate(data)]
    flat = np.concatenate(targets) if targets else np.zeros(0, np.int64)
    return (np.bincount(flat, minlength=int(nodes.sum())),
            np.repeat(np.arange(nodes.size), nodes))


def fit_tables(data: Sequence[Any], graphs: int) -> Tuple[int, int]:
    """``(width, spill)``: the neighbour tables' sizes for calls of ``graphs`` slots,
    fitted on ``data`` (the graphs export is given: the loader's dataset, or the example
    graphs), the same way for a one-budget artifact and for each rung of a ladder: the
    width by :func:`_fit_width` over every node's in-degree, the capacity by
    :func:`_fit_spill` over each graph's in-edges past that width (the ``graphs - 1``
    largest added up: any call of the data's graphs fits)."""
    width, over = _width_and_overflow(data)
    return width, _fit_spill(over, graphs)


def _width_and_overflow(data: Sequence[Any]) -> Tuple[int, List[int]]:
    """:func:`fit_tables`'s width over ``data`` and each graph's in-edges past it (what
    the spill capacity is fitted on, for any number of slots)."""
    import numpy as np

    degrees, owner = _graph_degrees(data)
    width = _fit_width(degrees)
    over = np.bincount(owner, weights=np.maximum(degrees - width, 0), minlength=len(data))
    return width, [int(v) for v in over]


def _with_tables(cases: Sequence[Case], nodes: int, width: int, spill: int) -> List[Case]:
    """``cases`` with each fed batch's neighbour tables (as ``serve`` packs them)."""
    out = []
    for flat, ref, full in cases:
        e = int(full[EDGE_MASK].sum()) if EDGE_MASK in full else flat["edge_index"].shape[1]
        # the packer's own function (serve.pack, loaded with serve): the same tables
        slots, lst = _serve.pack.in_tables(flat["edge_index"][1].numpy(), e, nodes, width, spill)
        out.append(({**flat, SLOTS: torch.from_numpy(slots), SPILL: torch.from_numpy(lst)},
                    ref, full))
    return out


def _position(contract: Contract, key: str) -> Optional[int]:
    """The position of input ``key`` in the contract (the program's user inputs), or
    ``None``."""
    keys = contract.input_keys()
    return keys.index(key) if key in keys else None


def _table_fields(nodes: int, width: int, spill: int) -> Tuple[InputField, InputField]:
    """The contract's reserved inputs of the neighbour tables."""
    return (InputField(SLOTS, "reserved", "node", "int64", (nodes, width)),
            InputField(SPILL, "reserved", "other", "int64", (2, spill)))


def _layer_path(path: str) -> str:
    """A module path of the exported program as the user's model names it."""
    return path.removeprefix("wrapped.model.").removeprefix("wrapped.")


def _all_nodes(graph: Any) -> Iterator[Any]:
    """The nodes of ``graph`` and of its subgraphs (a ladder's rungs are ``If`` branches)."""
    for node in graph.node:
        yield node
        for a in node.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from _all_nodes(g)


def onnx_node_layer(proto: Any, message: str) -> str:
    """``" in layer 'conv1' (GATConv)"`` for the ONNX node an onnxruntime error names."""
    names = set(re.findall(r"node with name '([^']+)'|node name: (\S+)|Node \(([^)]+)\)", message))
    wanted = {n for group in names for n in group if n}
    for node in _all_nodes(proto.graph):
        if node.name in wanted:
            meta = {p.key: p.value for p in node.metadata_props}
            scopes = re.findall(r"'([^']*)'", meta.get("pkg.torch.onnx.name_scopes", ""))
            classes = re.findall(r"'([^']*)'", meta.get("pkg.torch.onnx.class_hierarchy", ""))
            if scopes and classes:
                layer = _layer_path(scopes[-2] if len(scopes) > 1 else scopes[-1])
                return f" in layer {layer!r} " \
                       f"({classes[-2 if len(classes) > 1 else -1].rsplit('.', 1)[-1]}, " \
                       f"ONNX {node.op_type})"
            return f" in ONNX node {node.name!r} ({node.op_type})"
    return ""


#: one group of ONNX check cases: (feeds every case gets besides its inputs, e.g. a
#: ladder's rung input; the free dimension overrides of its sessions (a ladder's rung);
#: the group's name in errors, e.g. ``" of rung nodes=.."``; cases)
_CaseGroup = Tuple[Dict[str, Any], Dict[str, int], str, Sequence[Case]]


def _check_onnx(proto: Any, contract: Contract, cases: Union[Sequence[Case], Sequence[_CaseGroup]],
                threads: Optional[int], groups: bool = False) -> List[float]:
    """The largest difference to eager over every check batch (per group of
    ``cases`` when ``groups``: a ladder's rungs), run :data:`CHECK_RUNS` times at the
    server's thread count (``None``: onnxruntime's default) and at each of
    :data:`CHECK_THREADS`; ``ExportMismatchError`` names the output, the batch (and the
    group), the run and the threads of the first one beyond tolerance."""
    model = proto.SerializeToString()
    counts: List[Optional[int]] = [threads] + [t for t in CHECK_THREADS if t != threads]
    in_names, out_names = contract.onnx_input_names, list(contract.onnx_output_names)
    todo: Sequence[_CaseGroup] = cases if groups else [({}, {}, "", cases)]  # type: ignore
    worst = [0.0] * len(todo)
    for t in counts:
        label = "onnxruntime's default threads" if t is None else f"{t} onnxruntime threads"
        for g, (extra, dims, name, group) in enumerate(todo):
            try:
                sess = onnx_session(model, t, dims) if dims else onnx_session(model, t)
            except Exception as e:  # noqa: BLE001 - onnxruntime raises its own kinds
                raise UnsupportedExportError(
                    f"onnxruntime cannot run the exported model{onnx_node_layer(proto, str(e))}"
                    f": {str(e).splitlines()[0][:300]}; export format='pt2' instead") from e
            for b, (flat, ref, full) in enumerate(group):
                feed = {n: flat[f.key].numpy() for n, f in zip(in_names, contract.inputs) if n}
                feed.update(extra)
                for run in range(CHECK_RUNS):
                    got = dict(zip([f.key for f in contract.outputs], sess.run(out_names, feed)))
                    where = f"{name} of check batch {b}, run {run + 1} at {label}"
                    worst[g] = max(worst[g], max_diff(got, ref, contract, full, where))
    return worst


def _onnx_program(ep: Any) -> Any:
    """``torch.onnx.export(ep)``; an op without an ONNX translation is refused naming its
    layer (the module path and class of the exported node) and the exporter's reason."""
    try:
        return torch.onnx.export(ep, dynamo=True, verbose=False)
    except Exception as e:  # noqa: BLE001 - the exporter wraps its errors in several kinds
        chain, c = [], e
        while c is not None:
            chain.append(c)
            c = c.__cause__ or c.__context__
        text = "\n".join(str(x) for x in chain)
        found = re.search(r"translating node %(\w+)", text)
        node = next((n for n in ep.graph.nodes if found and n.name == found.group(1)), None)
        if node is None:
            raise
        stack = list(node.meta.get("nn_module_stack", {}).values())
        path, cls = (stack[-1][0], str(stack[-1][1]).rsplit(".", 1)[-1]) if stack else ("", "")
        path = _layer_path(path)
        reason = str(chain[-1]).splitlines()[0][:300]
        raise UnsupportedExportError(
            f"layer {path!r} ({cls}) cannot be exported to ONNX: {node.target} has no ONNX "
            f"translation ({reason}); export format='pt2' instead, or write the layer with "
            f"ops the ONNX exporter knows") from e


def _onnx_proto(ep: Any, rewrite: bool, tables: Optional[Tuple[int, int, int, int]] = None,
                batch: Optional[int] = None) -> Tuple[Any, Tuple[str, ...]]:
    """``(model, input names)``: the ONNX model of ``ep`` (with ``rewrite``, rewritten by
    :data:`~graph_adapter.exporter.onnx_rewrites.REWRITES`: its edge sums over neighbour
    tables when ``tables`` (``(position of edge_index among the user inputs, nodes,
    width, spill)``) is given, its other row scatters as sorted segments, sums of
    embedding lookups as lookups of combined tables, ...; what fired is logged) and
    the ONNX input name of each of ``ep``'s user inputs (``""``: pruned from the ONNX graph, as
    an input the program never reads may be: fed as nothing), then of the two table
    inputs when the model reads them (``in_slots``, ``in_spill``). ``batch``: the
    position of ``batch`` among the user inputs (in graph order: its sums need no
    sort)."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as e:
        raise ImportError("format='onnx' needs onnx, onnxscript and onnxruntime: "
                          "pip install 'graph_adapter[serve]'") from e
    proto = _onnx_program(ep).model_proto
    names = {i.name for i in proto.graph.input}
    user = tuple(n if n in names else "" for n in ep.graph_signature.user_inputs)
    if not rewrite:
        return proto, user
    at = None if tables is None or not user[tables[0]] else TableInputs(
        user[tables[0]], ONNX_TABLE_INPUTS[SLOTS], ONNX_TABLE_INPUTS[SPILL], *tables[1:])
    fired = rewrite_model(proto, ModelInputs(
        at, (user[batch],) if batch is not None and user[batch] else ()))
    LOG.info("ONNX rewrites: %s", ", ".join(f"{k} x{v}" for k, v in fired.items() if v)
             or "none applied")
    return proto, user + ((ONNX_TABLE_INPUTS[SLOTS], ONNX_TABLE_INPUTS[SPILL])
                          if fired["table_sums"] else ())


def _save_onnx(proto: Any, contract: Contract, path: str) -> None:
    """``proto`` with the contract as JSON in its ``metadata_props``, written to
    ``path`` through a temporary file (no half-written artifact)."""
    import onnx

    entry = proto.metadata_props.add()
    entry.key, entry.value = ONNX_METADATA_KEY, contract.to_json()
    tmp = path + ".tmp"
    onnx.save(proto, tmp)
    os.replace(tmp, path)


def _batch_tables(contract: Contract, data: Sequence[Any]) -> Optional[Tuple[int, int]]:
    """``(width, spill)`` of a one-budget artifact's tables, fitted on ``data``
    (:func:`fit_tables`, as for a ladder's rungs; ``None``: the program takes no
    ``edge_index``)."""
    if "edge_index" not in contract.input_keys() or not contract.edges:
        return None
    return fit_tables(data, contract.graphs)


def _tabled(contract: Contract, names: Tuple[str, ...], cases: Sequence[Case], nodes: int,
            sizes: Optional[Tuple[int, int]]) -> Tuple[Tuple[InputField, ...], List[Case]]:
    """``(inputs, cases)``: the contract's inputs and the check cases, with the tables
    when the model reads them (``names`` ends with theirs)."""
    if sizes is None or ONNX_TABLE_INPUTS[SLOTS] not in names:
        return contract.inputs, list(cases)
    return (contract.inputs + _table_fields(nodes, *sizes),
            _with_tables(cases, nodes, *sizes))


def _case_graphs(cases: Sequence[Case]) -> List[Any]:
    """The real graphs of the padded check batches (``num_nodes``, local ``edge_index``):
    what :func:`fit_tables` reads when ``write_onnx`` is given no data."""
    from types import SimpleNamespace

    out = []
    for _, _, full in cases:
        n = int(full[NODE_MASK].sum()) if NODE_MASK in full else full[BATCH].shape[0]
        e = int(full[EDGE_MASK].sum()) if EDGE_MASK in full else full["edge_index"].shape[1]
        batch, ei = full[BATCH][:n], full["edge_index"][:, :e]
        counts = torch.bincount(batch)
        first = torch.cumsum(counts, 0) - counts
        owner = batch[ei[1]]
        for g in range(counts.numel()):
            if counts[g]:
                out.append(SimpleNamespace(num_nodes=int(counts[g]),
                                           edge_index=ei[:, owner == g] - first[g]))
    return out


def write_onnx(ep: Any, path: str, contract: Contract, cases: Sequence[Case],
               rewrite: bool = True, threads: Optional[int] = None,
               data: Optional[Sequence[Any]] = None) -> Contract:
    """The ONNX artifact of the program ``ep`` for one budget: exported, checked on
    ``cases`` (:func:`_check_onnx`), written with its contract; returns the contract.
    Its edge sums read neighbour tables fitted on ``data`` (the graphs export was
    given; ``None``: the check batches' graphs) as a ladder's rungs are
    (:func:`fit_tables`)."""
    sizes = _batch_tables(contract, _case_graphs(cases) if data is None else data) \
        if rewrite else None
    at = (contract.input_keys().index("edge_index"), contract.nodes) + sizes if sizes else None
    proto, in_names = _onnx_proto(ep, rewrite, at, _position(contract, BATCH))
    inputs, cases = _tabled(contract, in_names, cases, contract.nodes, sizes)
    out_names = tuple(o.name for o in proto.graph.output)
    contract = updated(contract, inputs=inputs, onnx_input_names=in_names,
                       onnx_output_names=out_names)
    worst, = _check_onnx(proto, contract, cases, threads)
    contract = updated(contract, verified_max_abs_diff=worst)
    _save_onnx(proto, contract, path)
    return contract


def _is_top(budgets: Sequence[Budget], b: Budget) -> bool:
    """Whether ``b`` is the rung ``export`` added for the largest graph served
    (:class:`~graph_adapter.exporter.ladder.Ladder`'s ``top``)."""
    top = getattr(budgets, "top", None)
    return top is not None and (int(top.nodes), int(top.edges), int(top.graphs)) == \
        (int(b.nodes), int(b.edges), int(b.graphs))


def write_onnx_ladder(module: Inference, dropped: List[str], budgets: Sequence[Budget],
                      data: Sequence[Any], path: str, contract: Contract, rewrite: bool,
                      threads: Optional[int]) -> Contract:
    """Every rung exported to ONNX, then one model of them all
    (:func:`~graph_adapter.exporter.onnx_rewrites.ladder_model`: an ``If`` a rung on the
    length of the ``graph_adapter_rung`` input), checked like a one-budget artifact on
    each rung's check batches, in the session ``serve`` makes for that rung."""
    import numpy as np

    protos, groups, in_names = [], [], None
    # the width and each graph's overflow once: a rung's capacity depends on its slots only
    fitted = _width_and_overflow(data) \
        if rewrite and "edge_index" in contract.input_keys() and contract.edges else None
    rung_inputs: List[Tuple[InputField, ...]] = []
    for i, b in enumerate(budgets):
        cases = check_cases(module, dropped, None, rung_batches(data, b))
        fed = cases[0][0]
        ep = trace(module, fed)
        if rewrite:
            ep, _ = rewritten_program(ep, fed)
        sizes = None if fitted is None else (fitted[0], _fit_spill(fitted[1], int(b.graphs)))
        if sizes and _is_top(budgets, b):
            # the rung for the largest graph served: room for every in-edge past the
            # width (one graph of E edges spills at most E - S), so that it takes any
            # graph within max_nodes / max_edges whatever its degrees
            sizes = (sizes[0], max(sizes[1], int(b.edges) - sizes[0]))
        at = (contract.input_keys().index("edge_index"), int(b.nodes)) + sizes if sizes else None
        proto, names = _onnx_proto(ep, rewrite, at, _position(contract, BATCH))
        tabled, cases = _tabled(contract, names, cases, int(b.nodes), sizes)
        rung_inputs.append(tabled)
        # an input any rung reads is an input of the ladder (each rung reads what it needs)
        names = names + ("",) * (len(contract.inputs) + 2 - len(names))
        in_names = names if in_names is None else tuple(a or n for a, n in zip(in_names, names))
        protos.append(proto)
        groups.append((np.zeros(i + 1, dtype=np.int64), i,
                       f" of rung nodes={b.nodes}, edges={b.edges}, graphs={b.graphs},", cases))
    top = max(range(len(budgets)), key=lambda i: (budgets[i].nodes + budgets[i].edges))
    # the top rung's table sizes at the top level (the runtime reads each rung's from
    # onnx_rung_dims); a rung without tables reads none of them
    inputs = max(rung_inputs, key=len) if len(rung_inputs[top]) < max(map(len, rung_inputs)) \
        else rung_inputs[top]
    in_names = in_names[:len(inputs)]
    merged, dims = ladder_model(protos, ONNX_RUNG_INPUT)
    rungs = tuple(Rung(int(b.nodes), int(b.edges), int(b.graphs), f"rung{i}")
                  for i, b in enumerate(budgets))
    t = budgets[top]
    contract = updated(contract, nodes=int(t.nodes), edges=int(t.edges), graphs=int(t.graphs),
                       inputs=inputs, rungs=rungs, onnx_rung_input=ONNX_RUNG_INPUT,
                       onnx_input_names=in_names,
                       onnx_rung_dims={k: tuple(v) for k, v in dims.items()},
                       onnx_output_names=tuple(o.name for o in merged.graph.output))
    # each rung checked in the session serve makes for it (its sizes as dim overrides)
    groups = [({ONNX_RUNG_INPUT: feed}, {k: v[i] for k, v in dims.items()}, name, cases)
              for feed, i, name, cases in groups]
    worst = _check_onnx(merged, contract, groups, threads, groups=True)
    contract = updated(contract, verified_max_abs_diff=max(worst), rungs=tuple(
          dataclasses.replace(r, verified_max_abs_diff=w) for r, w in zip(rungs, worst)))
    _save_onnx(merged, contract, path)
    return contract
