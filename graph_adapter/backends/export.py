"""``export(wrapped, loader_or_budget, path)``: one deployable artifact of a wrapped model.

The inference-mode graph of an ``ipu_wrap``-ped model (``eval()``, no loss) is captured
with ``torch.export`` on one padded batch of the budget, then compiled:

* ``format="pt2"``: ``torch._inductor.aoti_compile_and_package``, an AOTInductor package
  (a zip: a shared library of the model, weights inside) that runs on torch alone;
* ``format="onnx"``: ``torch.onnx.export(exported_program, dynamo=True)`` (from the
  exported program: exporting the wrapper directly fails), run by onnxruntime.

Before compiling, the exported program gets the graph rewrite the compile path gives
inductor (:func:`rewritten_program`: a linear of a sum of embedding lookups projects the
tables); the ONNX model has its row-wise scatter adds summed as sorted segments, which
onnxruntime computes the same at any thread count (:mod:`~graph_adapter.backends._export_opt`).
Both keep the function; ``rewrite=False`` turns them off.

The artifact carries its input contract as JSON (:class:`graph_adapter.serve.Contract`:
the budget, every input key with its level, dtype and per-graph shape, every output with
its level), in the ``.pt2`` archive's ``extra/graph_adapter.json`` or the ONNX model's
``metadata_props``; nothing is pickled. Inputs the program never reads (``y``, labels, a
feature the forward names but ignores) are left out of it, so requests need not carry
them. Before the file is written the artifact runs on a few padded batches (the ONNX one
twice each, at the server's thread count and at 2 and 4 threads) and must equal the
eager wrapper within :data:`TOLERANCE` every time (else :class:`ExportMismatchError`,
naming the output, the batch and the threads).

``ladder=``: several budgets in one artifact (``docs/deploy.md``, a ladder of budgets):
a ``.pt2`` archive of one AOTInductor program a rung, or one ONNX model whose rungs are
``If`` branches on an int64 input (:data:`ONNX_RUNG_INPUT`); each rung traced and
checked on its own batches.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib.metadata
import re
import os
import tempfile
import zipfile
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from ..batching import Budget
from ..batching import Collator
from ..format import LOSS_KEY, RESERVED_KEYS, has_micro_batch_dim, micro_batch
from ..batching import FixedSizeLoader
from ..nn import IPUWrapped
from ..serve import CONTRACT_FILE, ONNX_METADATA_KEY, Contract, InputField, OutputField, Rung
from ._export_opt import deterministic_row_scatters, ladder_model
from .inductor.rewrites import project_embedding_tables

__all__ = ["export", "ExportError", "UnsupportedExportError", "ExportMismatchError",
           "TOLERANCE", "FORMATS", "CHECK_THREADS", "CHECK_RUNS", "contract_inputs",
           "rewritten_program", "LADDER_GRAPHS", "ladder_budgets", "ONNX_RUNG_INPUT"]

FORMATS = ("pt2", "onnx")
#: ``|artifact - eager| <= atol + rtol * |eager|`` on every output, checked at export.
#: pt2 runs inductor's fused C++ kernels (sums reordered), onnx onnxruntime's kernels.
TOLERANCE = {"pt2": {"atol": 1e-5, "rtol": 1e-5}, "onnx": {"atol": 1e-4, "rtol": 1e-4}}
_RESERVED_LEVEL = {"batch": "node", "ptr": "other", "node_mask": "node",
                   "edge_mask": "edge", "graph_mask": "graph"}


class ExportError(RuntimeError):
    """Base of the errors :func:`export` raises on purpose."""


class UnsupportedExportError(ExportError, ValueError):
    """What the serving runtime cannot pack or split (hetero graphs, layout tables, ...)."""


class ExportMismatchError(ExportError):
    """The compiled artifact's outputs differ from the eager wrapper's beyond tolerance."""


class _Inference(nn.Module):
    """The wrapper's outputs without the loss (the artifact is the inference graph).

    ``fill``: key -> ``(shape, dtype)`` of the inputs the program never reads: made as
    zeros inside forward (a forward that names them still gets them), so that they
    are no input of the program and no request carries them."""

    def __init__(self, wrapped: IPUWrapped,
                 fill: Optional[Dict[str, Tuple[Tuple[int, ...], torch.dtype]]] = None):
        super().__init__()
        self.wrapped = wrapped
        self.fill = dict(fill or {})

    def forward(self, flat: Dict[str, Tensor]) -> Dict[str, Tensor]:
        if self.fill:
            flat = {**flat, **{k: torch.zeros(shape, dtype=dtype)
                               for k, (shape, dtype) in self.fill.items()}}
        out = self.wrapped(flat)
        return {k: v for k, v in out.items() if k != LOSS_KEY}


def _collator_and_example(source: Any, example: Optional[Sequence[Any]]
                          ) -> Tuple[Collator, Dict[str, Tensor]]:
    """The schema's collator and one padded batch with real graphs in it."""
    if isinstance(source, FixedSizeLoader):
        col = source.collator
        first = source.plan(0)[0]
        if col.columnar:
            return col, col.collate_indices(first)
        flat = next(iter(source))
        return col, micro_batch(flat, 0) if has_micro_batch_dim(flat) else flat
    if isinstance(source, (Budget, Mapping, str)):
        budget = source if isinstance(source, Budget) else (
            Budget.from_json(source) if isinstance(source, str) else Budget.from_dict(source))
        if not example:
            raise TypeError("export(wrapped, budget, path) needs example=[graphs] (a few PyG "
                            "Data the model takes: they give the feature schema); or pass "
                            "the FixedSizeLoader instead of its budget")
        col = Collator(list(example), budget, warn=False)
        return col, col.collate_indices(range(len(example)))
    raise TypeError(f"loader_or_budget must be a FixedSizeLoader or a Budget, got "
                    f"{type(source).__name__}")


def _check_batches(source: Any, example: Optional[Sequence[Any]], col: Collator,
                   first: Dict[str, Tensor], count: int = 3) -> List[Dict[str, Tensor]]:
    """``first`` and up to ``count - 1`` more padded batches for the artifact's check:
    the loader's next batches of its plan, or the example graphs packed in other orders
    and subsets (other rows share a target, other padding)."""
    out = [first]
    if isinstance(source, FixedSizeLoader):
        # from the plan, not by iterating (which would move the loader's epoch)
        for b in source.plan(0)[1:count]:
            out.append(col.collate_indices(b) if col.columnar else
                       col.collate([source.dataset[i] for i in b], ids=b))
        return out
    n = len(example or ())
    for order in (list(range(n))[::-1], list(range(0, n, 2))):
        if order and len(out) < count:
            out.append(col.collate_indices(order))
    return out


def _unused_inputs(ep: Any, keys: List[str]) -> List[str]:
    """Input keys whose placeholder has no user in the exported graph (same order)."""
    names = list(ep.graph_signature.user_inputs)
    nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    return [k for k, name in zip(keys, names) if not nodes[name].users]


def _feature_field(f: Any) -> InputField:
    if f.level not in ("node", "edge", "graph") or f.inc == "custom" or \
            (f.inc == "nodes" and f.level != "edge"):
        raise UnsupportedExportError(
            f"input {f.key!r} ({f.level}-level, inc={f.inc!r}) is read by the model but "
            f"graph_adapter.serve packs only node/edge/graph-level features and edge-level "
            f"index keys (edge_index); compute it inside the model instead")
    return InputField(f.key, "feature", f.level, f.dtype, tuple(f.shape), f.inc, int(f.rows))


def contract_inputs(col: Collator, flat: Mapping[str, Tensor]) -> Tuple[InputField, ...]:
    """The contract's input fields of a padded dict of ``col`` (in the dict's key order):
    the features with their schema (level, dtype, per-graph shape, increment), the
    reserved keys (``batch``, ``ptr``, masks) with their padded dtype and shape."""
    schema = {f.key: f for f in col.schema}
    out = []
    for k, v in flat.items():
        dtype = str(v.dtype).replace("torch.", "")
        if k in RESERVED_KEYS:
            out.append(InputField(k, "reserved", _RESERVED_LEVEL[k], dtype, tuple(v.shape)))
        else:
            out.append(_feature_field(schema[k]))
    return tuple(out)


def _outputs(ref: Mapping[str, Tensor], budget: Budget) -> Tuple[OutputField, ...]:
    rows = {budget.nodes: "node", budget.edges: "edge", budget.graphs: "graph"}
    out = []
    for k, v in ref.items():
        if not isinstance(v, Tensor) or v.dim() == 0 or v.shape[0] not in rows:
            shape = tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__
            raise UnsupportedExportError(
                f"output {k!r} ({shape}) has no node/edge/graph rows (budget nodes="
                f"{budget.nodes}, edges={budget.edges}, graphs={budget.graphs}), so it "
                f"cannot be split per graph; return per-node/edge/graph tensors")
        out.append(OutputField(k, rows[v.shape[0]], str(v.dtype).replace("torch.", ""),
                               tuple(v.shape)))
    return tuple(out)


def _real_rows(contract: Contract, flat: Mapping[str, Tensor]) -> Dict[str, int]:
    """Output key -> its real rows in ``flat`` (the mask's count of its level); padding
    rows follow them and are never part of a prediction."""
    masks = {"node": "node_mask", "edge": "edge_mask", "graph": "graph_mask"}
    out = {}
    for f in contract.outputs:
        m = flat.get(masks[f.level])
        out[f.key] = int(m.sum()) if isinstance(m, Tensor) else int(f.shape[0])
    return out


def _max_diff(got: Mapping[str, Any], ref: Mapping[str, Tensor], contract: Contract,
              flat: Mapping[str, Tensor], where: str = "") -> float:
    """The largest ``|artifact - eager|`` over the real rows of every output; raises
    ``ExportMismatchError`` beyond ``contract.tolerance``.

    Padding rows are left out: they hold what the padding self-loops add up on the
    padding nodes (values of 1e8 and more after a few sum layers), whose rounding
    depends on the order of adds, and no request ever reads them (``serve`` splits the
    real rows only). Their shape is checked. ``where`` (e.g. ``" of batch 2, run 1 at 2
    onnxruntime threads"``) goes into the error."""
    tol, real = contract.tolerance, _real_rows(contract, flat)
    worst = 0.0
    for k, r in ref.items():
        g = torch.as_tensor(got[k]).to(r.dtype)
        if g.shape != r.shape:
            raise ExportMismatchError(f"output {k!r}{where}: shape {tuple(g.shape)} from "
                                      f"the artifact, {tuple(r.shape)} from the eager wrapper")
        g, r = g[:real[k]], r[:real[k]]
        if not r.is_floating_point():
            if not torch.equal(g, r):
                raise ExportMismatchError(f"output {k!r} (integer){where} differs from "
                                          f"eager; not written")
            continue
        d = (g - r).abs()
        worst = max(worst, float(d.max()) if d.numel() else 0.0)
        bad = d > tol["atol"] + tol["rtol"] * r.abs()
        if bool(bad.any()):
            raise ExportMismatchError(
                f"output {k!r}: the artifact differs from the eager wrapper by up to "
                f"{float(d.max()):.3g} on the real rows{where} (tolerance atol={tol['atol']}, "
                f"rtol={tol['rtol']}); not written")
    return worst


def _versions() -> Dict[str, str]:
    import torch_geometric

    try:
        ga = importlib.metadata.version("graph_adapter")
    except importlib.metadata.PackageNotFoundError:  # a source checkout
        ga = "unknown"
    return {"torch": torch.__version__, "torch_geometric": torch_geometric.__version__,
            "graph_adapter": ga}


def _trace(module: nn.Module, flat: Dict[str, Tensor]) -> Any:
    with torch.no_grad():
        return torch.export.export(module, (flat,))


def rewritten_program(ep: Any, flat: Dict[str, Tensor]) -> Tuple[Any, int]:
    """``(program, rewritten)``: ``ep`` with the compile path's graph rewrite applied
    (:func:`~graph_adapter.backends.inductor.rewrites.project_embedding_tables`: a linear of a
    sum of embedding lookups projects the tables instead), traced again on ``flat`` so
    that every node has its metadata; ``rewritten`` counts the linears (``0``: ``ep``
    itself, untouched; else ``ep``'s own graph is rewritten too: pass a program you
    no longer need).

    ``graph_adapter.compile(..., "inductor")`` runs the rewrite as inductor's pre-grad
    pass on Dynamo's torch-level graph; an exported program is ATen, so it is run here,
    before AOTInductor or the ONNX exporter see the graph. On the demo's GINE 4 x 64
    (requests of 256 molecules, 1 thread) the ``.pt2`` program went from 1.7x to 3.0x
    eager PyG with it: the four ``[E, 64] x [64, 64]`` edge projections were the whole
    difference to the compiled model (``docs/deploy.md``, Speed).
    """
    rewritten = project_embedding_tables(ep.graph_module.graph)
    if not rewritten:
        return ep, 0
    # the lookup sums the linears read are dead now; fx keeps the ops that write an input
    # (is_impure: a mutable schema, e.g. max_norm's embedding_renorm_), and buffer
    # updates of an exported program are outputs, so nothing else is dropped
    ep.graph_module.graph.eliminate_dead_code()
    ep.graph_module.recompile()
    return _trace(ep.module(), flat), rewritten


#: one check case: (the padded batch fed, the eager outputs on it, the full batch whose
#: masks give the real rows)
_Case = Tuple[Dict[str, Tensor], Dict[str, Tensor], Dict[str, Tensor]]


def _write_pt2(ep: Any, path: str, contract: Contract, cases: Sequence[_Case],
               inductor_configs: Optional[Dict[str, Any]]) -> Contract:
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(suffix=".pt2", prefix=".export-", dir=d)
    os.close(fd)
    try:
        torch._inductor.aoti_compile_and_package(ep, package_path=tmp,
                                                 inductor_configs=dict(inductor_configs or {}))
        model = torch._inductor.aoti_load_package(tmp)
        worst = 0.0
        for b, (flat, ref, full) in enumerate(cases):
            with torch.inference_mode():
                got = model(flat)
            worst = max(worst, _max_diff(got, ref, contract, full, f" of check batch {b}"))
        contract = _with(contract, verified_max_abs_diff=worst)
        with zipfile.ZipFile(tmp, "a") as z:
            root = z.namelist()[0].split("/")[0]
            z.writestr(f"{root}/extra/{CONTRACT_FILE}", contract.to_json())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return contract


#: graphs per call of the rungs ``ladder=True`` fits on the data: one request graph
#: (a single molecule), a small request, and the bulk of a large one
LADDER_GRAPHS = (1, 16, 256)


def _top_rung(max_nodes: int, max_edges: int) -> Budget:
    """The smallest budget that takes one graph of ``max_nodes`` / ``max_edges``."""
    nodes, edges = int(max_nodes) + 2, max(int(max_edges), 1)
    while edges in (nodes, 2):  # a budget's three counts must differ (dims are told by size)
        edges += 1
    return Budget(nodes=nodes, edges=edges, graphs=2)


def ladder_budgets(data: Sequence[Any], max_nodes: Optional[int] = None,
                   max_edges: Optional[int] = None,
                   graphs_per_call: Sequence[int] = LADDER_GRAPHS) -> List[Budget]:
    """The default rungs of ``export(..., ladder=True)``: ``Budget.fit(data, k)`` for each
    ``k`` of ``graphs_per_call`` the data has graphs for (``fit`` never sizes one below
    the data's largest graph), plus a top rung for one graph of ``max_nodes`` nodes and
    ``max_edges`` edges when either is given (the largest graph a server must take);
    duplicates dropped, cheapest first."""
    rungs = [Budget.fit(data, int(k)) for k in graphs_per_call if int(k) <= len(data)]
    if max_nodes is not None or max_edges is not None:
        rungs.append(_top_rung(max_nodes or 1, max_edges or 1))
    out: List[Budget] = []
    for b in sorted(rungs, key=lambda b: (b.nodes + b.edges, b.graphs)):
        if all((b.nodes, b.edges, b.graphs) != (o.nodes, o.edges, o.graphs) for o in out):
            out.append(b)
    return out


def _data_of(source: Any, example: Optional[Sequence[Any]]) -> Sequence[Any]:
    return source.dataset if isinstance(source, FixedSizeLoader) else list(example or ())


def _rung_batches(data: Sequence[Any], b: Budget, scan: int = 2048) -> List[Dict[str, Tensor]]:
    """Check batches of rung ``b``: the data's first graphs that fit one call, and the
    largest graph (of the first ``scan``) that fits alone."""
    graphs = [data[i] for i in range(min(len(data), scan))]
    cap = min(b.nodes - 2, b.nodes - b.graphs + 1)
    fits = [g for g in graphs if g.num_nodes <= cap and g.num_edges <= b.edges]
    if not fits:
        raise ValueError(f"rung nodes={b.nodes}, edges={b.edges}, graphs={b.graphs} holds "
                         f"none of the data's graphs: its check needs one; give a larger rung")
    pick, n, e = [], 0, 0
    for g in fits:
        k = len(pick) + 1
        if k > b.graphs - 1 or n + g.num_nodes > b.nodes - 2 or e + g.num_edges > b.edges \
                or b.nodes - (n + g.num_nodes) < b.graphs - k:
            break
        pick.append(g)
        n, e = n + g.num_nodes, e + g.num_edges
    big = max(fits, key=lambda g: (g.num_nodes, g.num_edges))
    return [Collator(p, b, warn=False).collate_indices(range(len(p))) for p in (pick, [big])]


def _pt2_rung(module: _Inference, dropped: List[str], b: Budget, data: Sequence[Any],
              rewrite: bool, contract: Contract, configs: Optional[Dict[str, Any]],
              d: str) -> Tuple[str, float]:
    """One rung compiled into a temporary package in ``d`` and checked against eager on
    its check batches: ``(package path, largest difference)``."""
    cases = _cases(module, dropped, None, _rung_batches(data, b))
    fed = cases[0][0]
    ep = _trace(module, fed)
    if rewrite:
        ep, _ = rewritten_program(ep, fed)
    c = _with(contract, nodes=int(b.nodes), edges=int(b.edges), graphs=int(b.graphs))
    fd, tmp = tempfile.mkstemp(suffix=".pt2", prefix=".export-", dir=d)
    os.close(fd)
    try:
        torch._inductor.aoti_compile_and_package(ep, package_path=tmp,
                                                 inductor_configs=dict(configs or {}))
        model = torch._inductor.aoti_load_package(tmp)
        worst = 0.0
        for i, (flat, ref, full) in enumerate(cases):
            with torch.inference_mode():
                got = model(flat)
            where = f" of rung nodes={b.nodes}, edges={b.edges}, graphs={b.graphs}, " \
                    f"check batch {i}"
            worst = max(worst, _max_diff(got, ref, c, full, where))
    except BaseException:
        os.remove(tmp)
        raise
    return tmp, worst


def _merge_pt2(packages: Sequence[Tuple[str, str]], contract: Contract, path: str) -> None:
    """One archive of several AOTInductor packages: the first keeps its program name
    ``model``, every other one's goes under ``data/aotinductor/<name>/``."""
    base = packages[0][1]
    with zipfile.ZipFile(base, "a") as out:
        root = out.namelist()[0].split("/")[0]
        for name, pkg in packages[1:]:
            with zipfile.ZipFile(pkg) as z:
                for info in z.infolist():
                    rel = info.filename.split("/", 1)[1]
                    if rel.startswith("data/aotinductor/model/"):
                        info2 = copy.copy(info)
                        info2.filename = f"{root}/data/aotinductor/{name}/" + \
                            rel[len("data/aotinductor/model/"):]
                        out.writestr(info2, z.read(info.filename))
        out.writestr(f"{root}/extra/{CONTRACT_FILE}", contract.to_json())
    os.replace(base, path)


def _write_pt2_ladder(module: _Inference, dropped: List[str], budgets: Sequence[Budget],
                      data: Sequence[Any], path: str, contract: Contract, rewrite: bool,
                      configs: Optional[Dict[str, Any]]) -> Contract:
    """Every rung compiled and checked, then one archive: the largest rung is the
    program ``model`` (and the contract's top-level budget), rung ``i`` ``rung<i>``."""
    d = os.path.dirname(os.path.abspath(path))
    top = max(range(len(budgets)), key=lambda i: (budgets[i].nodes + budgets[i].edges))
    built: List[Tuple[str, str]] = []
    rungs: List[Rung] = []
    try:
        for i, b in enumerate(budgets):
            tmp, worst = _pt2_rung(module, dropped, b, data, rewrite, contract, configs, d)
            name = "model" if i == top else f"rung{i}"
            built.append((name, tmp))
            rungs.append(Rung(int(b.nodes), int(b.edges), int(b.graphs), name, worst))
        built.sort(key=lambda p: p[0] != "model")
        t = budgets[top]
        contract = _with(contract, nodes=int(t.nodes), edges=int(t.edges),
                         graphs=int(t.graphs), rungs=tuple(rungs),
                         verified_max_abs_diff=max(r.verified_max_abs_diff for r in rungs))
        _merge_pt2(built, contract, path)
    finally:
        for _, tmp in built:
            if os.path.exists(tmp):
                os.remove(tmp)
    return contract


#: thread counts the ONNX artifact is checked at besides the server's (``threads``):
#: onnxruntime splits a kernel's rows over its intra-op threads only at 2 and more
CHECK_THREADS = (2, 4)
#: runs of each check batch at each thread count (a race shows in some runs only)
CHECK_RUNS = 2


def _onnx_session(model: bytes, threads: Optional[int],
                  dims: Optional[Mapping[str, int]] = None) -> Any:
    """An onnxruntime CPU session as ``serve.load(path, threads=threads)`` makes it;
    ``dims``: free dimension overrides (a ladder's rung, as ``serve`` makes its session)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads is not None:
        opts.intra_op_num_threads = int(threads)
        opts.inter_op_num_threads = 1
    for name, size in (dims or {}).items():
        opts.add_free_dimension_override_by_name(name, int(size))
    return ort.InferenceSession(model, sess_options=opts, providers=["CPUExecutionProvider"])


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


def _onnx_node_layer(proto: Any, message: str) -> str:
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
_CaseGroup = Tuple[Dict[str, Any], Dict[str, int], str, Sequence[_Case]]


def _check_onnx(proto: Any, contract: Contract, cases: Union[Sequence[_Case], Sequence[_CaseGroup]],
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
                sess = _onnx_session(model, t, dims) if dims else _onnx_session(model, t)
            except Exception as e:  # noqa: BLE001 - onnxruntime raises its own kinds
                raise UnsupportedExportError(
                    f"onnxruntime cannot run the exported model{_onnx_node_layer(proto, str(e))}"
                    f": {str(e).splitlines()[0][:300]}; export format='pt2' instead") from e
            for b, (flat, ref, full) in enumerate(group):
                feed = {n: flat[f.key].numpy() for n, f in zip(in_names, contract.inputs) if n}
                feed.update(extra)
                for run in range(CHECK_RUNS):
                    got = dict(zip([f.key for f in contract.outputs], sess.run(out_names, feed)))
                    where = f"{name} of check batch {b}, run {run + 1} at {label}"
                    worst[g] = max(worst[g], _max_diff(got, ref, contract, full, where))
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


def _onnx_proto(ep: Any, rewrite: bool) -> Tuple[Any, Tuple[str, ...]]:
    """``(model, input names)``: the ONNX model of ``ep`` (its row scatters made
    deterministic with ``rewrite``) and the ONNX input name of each of ``ep``'s user
    inputs (``""``: pruned from the ONNX graph, as an input the program never reads may
    be: fed as nothing)."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as e:
        raise ImportError("format='onnx' needs onnx, onnxscript and onnxruntime: "
                          "pip install 'graph_adapter[serve]'") from e
    proto = _onnx_program(ep).model_proto
    if rewrite:
        deterministic_row_scatters(proto)
    names = {i.name for i in proto.graph.input}
    return proto, tuple(n if n in names else "" for n in ep.graph_signature.user_inputs)


def _save_onnx(proto: Any, contract: Contract, path: str) -> None:
    import onnx

    entry = proto.metadata_props.add()
    entry.key, entry.value = ONNX_METADATA_KEY, contract.to_json()
    tmp = path + ".tmp"
    onnx.save(proto, tmp)
    os.replace(tmp, path)


def _write_onnx(ep: Any, path: str, contract: Contract, cases: Sequence[_Case],
                rewrite: bool = True, threads: Optional[int] = None) -> Contract:
    proto, in_names = _onnx_proto(ep, rewrite)
    out_names = tuple(o.name for o in proto.graph.output)
    contract = _with(contract, onnx_input_names=in_names, onnx_output_names=out_names)
    worst, = _check_onnx(proto, contract, cases, threads)
    contract = _with(contract, verified_max_abs_diff=worst)
    _save_onnx(proto, contract, path)
    return contract


#: the int64 scalar input of an ONNX ladder that selects the rung
#: (``Contract.onnx_rung_input``)
ONNX_RUNG_INPUT = "graph_adapter_rung"


def _write_onnx_ladder(module: _Inference, dropped: List[str], budgets: Sequence[Budget],
                       data: Sequence[Any], path: str, contract: Contract, rewrite: bool,
                       threads: Optional[int]) -> Contract:
    """Every rung exported to ONNX, then one model of them all
    (:func:`~graph_adapter.backends._export_opt.ladder_model`: an ``If`` a rung on the
    length of the ``graph_adapter_rung`` input), checked like a one-budget artifact on
    each rung's check batches, in the session ``serve`` makes for that rung."""
    import numpy as np

    protos, groups, in_names = [], [], None
    for i, b in enumerate(budgets):
        cases = _cases(module, dropped, None, _rung_batches(data, b))
        fed = cases[0][0]
        ep = _trace(module, fed)
        if rewrite:
            ep, _ = rewritten_program(ep, fed)
        proto, names = _onnx_proto(ep, rewrite)
        # an input any rung reads is an input of the ladder (each rung reads what it needs)
        in_names = names if in_names is None else tuple(a or n for a, n in zip(in_names, names))
        protos.append(proto)
        groups.append((np.zeros(i + 1, dtype=np.int64), i,
                       f" of rung nodes={b.nodes}, edges={b.edges}, graphs={b.graphs},", cases))
    merged, dims = ladder_model(protos, ONNX_RUNG_INPUT)
    top = max(range(len(budgets)), key=lambda i: (budgets[i].nodes + budgets[i].edges))
    rungs = tuple(Rung(int(b.nodes), int(b.edges), int(b.graphs), f"rung{i}")
                  for i, b in enumerate(budgets))
    t = budgets[top]
    contract = _with(contract, nodes=int(t.nodes), edges=int(t.edges), graphs=int(t.graphs),
                     rungs=rungs, onnx_rung_input=ONNX_RUNG_INPUT, onnx_input_names=in_names,
                     onnx_rung_dims={k: tuple(v) for k, v in dims.items()},
                     onnx_output_names=tuple(o.name for o in merged.graph.output))
    # each rung checked in the session serve makes for it (its sizes as dim overrides)
    groups = [({ONNX_RUNG_INPUT: feed}, {k: v[i] for k, v in dims.items()}, name, cases)
              for feed, i, name, cases in groups]
    worst = _check_onnx(merged, contract, groups, threads, groups=True)
    contract = _with(contract, verified_max_abs_diff=max(worst), rungs=tuple(
        dataclasses.replace(r, verified_max_abs_diff=w) for r, w in zip(rungs, worst)))
    _save_onnx(merged, contract, path)
    return contract


def _drop_unread(wrapped: IPUWrapped, flat: Dict[str, Tensor]
                 ) -> Tuple[_Inference, List[str], Dict[str, Tensor]]:
    """``(module, dropped, ref)``: the inference module without the inputs the traced
    program never reads (features and labels: ``y``, an ``edge_attr`` the forward names
    but ignores; reserved keys stay, the packer makes them), which it makes as zeros
    itself, and its eager outputs on ``flat`` without them. They must equal the
    wrapper's on the whole ``flat`` (a key read outside the graph, by Python, keeps
    its place in the contract)."""
    module = _Inference(wrapped)
    unused = _unused_inputs(_trace(copy.deepcopy(module), flat), list(flat))
    dropped = [k for k in unused if k not in RESERVED_KEYS]
    with torch.no_grad():
        ref = module(flat)
        if not dropped:
            return module, [], ref
        fill = {k: (tuple(flat[k].shape), flat[k].dtype) for k in dropped}
        reduced = _Inference(wrapped, fill)
        try:
            got = reduced({k: v for k, v in flat.items() if k not in dropped})
        except Exception:  # noqa: BLE001 - the whole dict's outputs stand
            return module, [], ref
    same = got.keys() == ref.keys() and all(
        torch.equal(got[k], ref[k]) or (ref[k].is_floating_point() and torch.allclose(
            got[k], ref[k], equal_nan=True)) for k in ref)
    return (reduced, dropped, got) if same else (module, [], ref)


def _refuse_unservable(col: Collator) -> None:
    """``UnsupportedExportError`` for what the serving packer cannot build."""
    if col.is_hetero:
        raise UnsupportedExportError(
            "hetero graphs (HeteroData) are not supported by graph_adapter.serve yet: its "
            "packer builds homogeneous batches only; export a homogeneous model")
    if col.node_sets:
        raise UnsupportedExportError(
            f"several node sets in one store ({sorted(col.node_sets)}: PairData or a bipartite "
            f"edge_index): the serving packer builds one node set a graph; map the sets to "
            f"a HeteroData model, or serve the model in a process with graph_adapter")
    if col.layout is not None:
        raise UnsupportedExportError(
            f"a loader with layout={col.layout!r}: the serving packer does not build the "
            f"neighbour tables; export with a FixedSizeLoader without layout= (same model, "
            f"same weights)")


def _cases(module: _Inference, dropped: List[str], ref: Optional[Dict[str, Tensor]],
           batches: List[Dict[str, Tensor]]) -> List[_Case]:
    """The check cases of ``batches`` (the first one's eager outputs are ``ref``): each
    batch without the ``dropped`` keys, the module's eager outputs on it, the batch."""
    out = []
    for i, b in enumerate(batches):
        fed = {k: v for k, v in b.items() if k not in dropped}
        with torch.no_grad():
            out.append((fed, ref if i == 0 and ref is not None else module(fed), b))
    return out


@contextlib.contextmanager
def _num_threads(n: int) -> Iterator[None]:
    """``torch.set_num_threads(n)`` inside, the previous count restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _with(c: Contract, **kw: Any) -> Contract:
    return dataclasses.replace(c, **kw)


def _check_args(wrapped: Any, path: str, format: str, threads: Optional[int]) -> None:
    """``export``'s argument errors, named."""
    if format not in FORMATS:
        raise ValueError(f"format={format!r}; choose one of {FORMATS}")
    if not str(path).endswith("." + format):
        raise ValueError(f"path {path!r} must end in .{format} for format={format!r}")
    if threads is not None and int(threads) < 1:
        raise ValueError(f"threads={threads}: give the server's thread count (1 or more)")
    if not isinstance(wrapped, IPUWrapped):
        raise TypeError(f"export takes an ipu_wrap-ped model, got {type(wrapped).__name__}: "
                        f"export(ipu_wrap(model), loader, path)")


def _ladder_of(source: Any, example: Optional[Sequence[Any]], ladder: Any,
               max_nodes: Optional[int], max_edges: Optional[int]) -> List[Budget]:
    """The rungs ``export`` compiles (``[]``: one budget, today's artifact)."""
    if ladder is None or ladder is False:
        if max_nodes is not None or max_edges is not None:
            raise ValueError("max_nodes= / max_edges= size the top rung of a ladder: pass "
                             "ladder=True with them (or fit the one budget on such graphs)")
        return []
    if ladder is True:
        budgets = ladder_budgets(_data_of(source, example), max_nodes, max_edges)
    else:
        budgets = [b if isinstance(b, Budget) else Budget.from_dict(b) for b in ladder]
        if max_nodes is not None or max_edges is not None:
            budgets.append(_top_rung(max_nodes or 1, max_edges or 1))
    if not budgets or any(b.is_hetero for b in budgets):
        raise ValueError(f"ladder={ladder!r}: give one or more homogeneous Budgets "
                         f"(or ladder=True)")
    return budgets


def _write(module: _Inference, dropped: List[str], cases: List[_Case], budgets: List[Budget],
           data: Sequence[Any], path: str, contract: Contract, rewrite: bool,
           threads: Optional[int], configs: Optional[Dict[str, Any]]) -> Contract:
    """The artifact of ``export`` written (one budget: traced on ``cases[0]``; a ladder:
    one program a rung of ``budgets``, each traced on its own batches of ``data``)."""
    if not budgets:
        fed = cases[0][0]
        ep = _trace(module, fed)
        if rewrite:
            ep, _ = rewritten_program(ep, fed)
    if contract.format == "onnx":
        if budgets:
            return _write_onnx_ladder(module, dropped, budgets, data, path, contract, rewrite,
                                      threads)
        return _write_onnx(ep, path, contract, cases, rewrite, threads)
    n = torch.get_num_threads() if threads is None else int(threads)
    with _num_threads(n):
        if budgets:
            return _write_pt2_ladder(module, dropped, budgets, data, path,
                                     _with(contract, threads=n), rewrite, configs)
        return _write_pt2(ep, path, _with(contract, threads=n), cases, configs)


def export(wrapped: IPUWrapped, loader_or_budget: Union[FixedSizeLoader, Budget], path: str,
           format: str = "pt2", *, example: Optional[Sequence[Any]] = None,
           inductor_configs: Optional[Dict[str, Any]] = None, rewrite: bool = True,
           threads: Optional[int] = None,
           ladder: Union[None, bool, Sequence[Budget]] = None,
           max_nodes: Optional[int] = None, max_edges: Optional[int] = None) -> Contract:
    """Write the inference graph of ``wrapped`` for one budget as a servable artifact.

    Args:
        wrapped: an ``ipu_wrap``-ped model (trained). Exported in ``eval()`` mode without
            its ``loss_fn``; its own mode and loss are restored afterwards.
        loader_or_budget: the ``FixedSizeLoader`` it was trained or evaluated with (its
            budget and feature schema), or a ``Budget`` with ``example=[Data, ...]``.
        path: the file to write: ``*.pt2`` for ``format="pt2"``, ``*.onnx`` for onnx.
        format: ``"pt2"`` (AOTInductor, runs on torch) or ``"onnx"`` (onnxruntime).
        example: with a ``Budget``: a few graphs the model takes (they must fit one batch).
        inductor_configs: pt2 only: passed to ``aoti_compile_and_package``.
        threads: the threads the server runs it with (``serve.load(path,
            threads=...)``). pt2: inductor compiles its loops for a fixed thread count
            (its OpenMP regions), so the kernels are compiled under
            ``torch.set_num_threads(threads)`` (restored after); ``None``: this
            process's count. Recorded in the contract (``threads``). On the demo's
            model, compiled at 2 threads and run at 1: 6.3 ms a call, compiled at 1:
            5.3 ms. onnx: the check runs the artifact at this count (``None``:
            onnxruntime's default) and at each of :data:`CHECK_THREADS`.
        rewrite: apply the compile path's graph rewrite to the exported program
            (:func:`rewritten_program`) and, for onnx, sum row-wise scatter adds as
            sorted segments, the same at any thread count
            (:mod:`~graph_adapter.backends._export_opt`); ``False`` exports the graph
            as traced.
        ladder: ``None``: one budget; ``True``: several in one artifact, one program
            each (:func:`ladder_budgets`, ``docs/deploy.md``); or a list of ``Budget``.
            pt2: an AOTInductor program a rung in one archive; onnx: one model, an
            ``If`` branch a rung on its ``graph_adapter_rung`` input. Every rung is
            checked as a one-budget artifact is, on its own batches of the data.
            ``max_nodes`` / ``max_edges``: a top rung for one such graph.

    Inputs the traced program never reads (``y``; a feature the forward names but
    ignores) are left out of the contract (``dropped_inputs``): requests need not carry
    them. Before anything is written the artifact runs on up to three padded batches
    (the loader's first ones, or the example graphs in other orders): pt2 once each,
    onnx :data:`CHECK_RUNS` times each at ``threads`` and at :data:`CHECK_THREADS`.

    Returns the artifact's :class:`~graph_adapter.serve.Contract` (also in the file).
    Raises ``UnsupportedExportError`` for hetero graphs, layout tables (``layout=``),
    outputs without node/edge/graph rows, and (onnx) a layer with an op the ONNX
    exporter or onnxruntime cannot run (named: its module path and class);
    ``ExportMismatchError`` when an output of the artifact differs from the eager
    wrapper's beyond :data:`TOLERANCE` on any check batch, run or thread count (named).
    """
    _check_args(wrapped, path, format, threads)
    budgets = _ladder_of(loader_or_budget, example, ladder, max_nodes, max_edges)
    col, flat = _collator_and_example(loader_or_budget, example)
    _refuse_unservable(col)
    was_training, loss_fn = wrapped.training, wrapped.loss_fn
    try:
        wrapped.eval()
        wrapped.loss_fn = None
        module, dropped, ref = _drop_unread(wrapped, flat)
        cases = _cases(module, dropped, ref, _check_batches(loader_or_budget, example, col, flat))
        fed = cases[0][0]
        b = col.budget
        contract = Contract(format=format, nodes=int(b.nodes), edges=int(b.edges),
                            graphs=int(b.graphs), inputs=contract_inputs(col, fed),
                            outputs=_outputs(ref, b), dropped_inputs=tuple(dropped),
                            tolerance=dict(TOLERANCE[format]), versions=_versions())
        return _write(module, dropped, cases, budgets, _data_of(loader_or_budget, example),
                      str(path), contract, rewrite, threads, inductor_configs)
    finally:
        wrapped.loss_fn = loss_fn
        wrapped.train(was_training)
