"""``export(wrapped, loader_or_budget, path)``: one deployable artifact of a wrapped model.

The inference-mode graph of an ``ipu_wrap``-ped model (``eval()``, no loss) is captured
with ``torch.export`` on one padded batch of the budget, then compiled:

* ``format="pt2"``: ``torch._inductor.aoti_compile_and_package``, an AOTInductor package
  (a zip: a shared library of the model, weights inside) that runs on torch alone;
* ``format="onnx"``: ``torch.onnx.export(exported_program, dynamo=True)`` (from the
  exported program: exporting the wrapper directly fails), run by onnxruntime.

The artifact carries its input contract as JSON (:class:`graph_adapter.serve.Contract`:
the budget, every input key with its level, dtype and per-graph shape, every output with
its level), in the ``.pt2`` archive's ``extra/graph_adapter.json`` or the ONNX model's
``metadata_props``; nothing is pickled. Inputs the model never reads (``y``, labels) are
left out of the program, so requests need not carry them. Before the file is written the
artifact runs on the example batch and must equal the eager wrapper within
:data:`TOLERANCE` (else :class:`ExportMismatchError`).
"""
from __future__ import annotations

import copy
import importlib.metadata
import os
import tempfile
import zipfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from ..data.budget import Budget
from ..data.collate import Collator
from ..data.format import LOSS_KEY, RESERVED_KEYS, has_micro_batch_dim, micro_batch
from ..data.loader import FixedSizeLoader
from ..nn.wrap import IPUWrapped
from ..serve.contract import CONTRACT_FILE, ONNX_METADATA_KEY, Contract, InputField, OutputField

__all__ = ["export", "ExportError", "UnsupportedExportError", "ExportMismatchError",
           "TOLERANCE", "FORMATS", "contract_inputs"]

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
    """The wrapper's outputs without the loss (the artifact is the inference graph)."""

    def __init__(self, wrapped: IPUWrapped):
        super().__init__()
        self.wrapped = wrapped

    def forward(self, flat: Dict[str, Tensor]) -> Dict[str, Tensor]:
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


def _max_diff(got: Mapping[str, Any], ref: Mapping[str, Tensor], tol: Dict[str, float]
              ) -> float:
    worst = 0.0
    for k, r in ref.items():
        g = torch.as_tensor(got[k]).to(r.dtype)
        if g.shape != r.shape:
            raise ExportMismatchError(f"output {k!r}: shape {tuple(g.shape)} from the "
                                      f"artifact, {tuple(r.shape)} from the eager wrapper")
        if not r.is_floating_point():
            if not torch.equal(g, r):
                raise ExportMismatchError(f"output {k!r} (integer) differs from eager")
            continue
        d = (g - r).abs()
        worst = max(worst, float(d.max()) if d.numel() else 0.0)
        bad = d > tol["atol"] + tol["rtol"] * r.abs()
        if bool(bad.any()):
            raise ExportMismatchError(
                f"output {k!r}: the artifact differs from the eager wrapper by up to "
                f"{float(d.max()):.3g} (tolerance atol={tol['atol']}, rtol={tol['rtol']}); "
                f"not written")
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


def _write_pt2(ep: Any, path: str, contract: Contract, flat: Dict[str, Tensor],
               ref: Mapping[str, Tensor], inductor_configs: Optional[Dict[str, Any]]) -> Contract:
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(suffix=".pt2", prefix=".export-", dir=d)
    os.close(fd)
    try:
        torch._inductor.aoti_compile_and_package(ep, package_path=tmp,
                                                 inductor_configs=dict(inductor_configs or {}))
        model = torch._inductor.aoti_load_package(tmp)
        with torch.inference_mode():
            got = model(flat)
        contract = _with(contract, verified_max_abs_diff=_max_diff(got, ref, contract.tolerance))
        with zipfile.ZipFile(tmp, "a") as z:
            root = z.namelist()[0].split("/")[0]
            z.writestr(f"{root}/extra/{CONTRACT_FILE}", contract.to_json())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return contract


def _write_onnx(ep: Any, path: str, contract: Contract, flat: Dict[str, Tensor],
                ref: Mapping[str, Tensor]) -> Contract:
    try:
        import onnx
        import onnxruntime as ort
    except ImportError as e:
        raise ImportError("format='onnx' needs onnx, onnxscript and onnxruntime: "
                          "pip install 'graph_adapter[serve]'") from e
    program = torch.onnx.export(ep, dynamo=True, verbose=False)
    proto = program.model_proto
    names = {i.name for i in proto.graph.input}
    placeholders = list(ep.graph_signature.user_inputs)
    # an input the program never reads may be pruned from the ONNX graph: fed as nothing
    in_names = tuple(n if n in names else "" for n in placeholders)
    out_names = tuple(o.name for o in proto.graph.output)
    contract = _with(contract, onnx_input_names=in_names, onnx_output_names=out_names)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {n: flat[f.key].numpy() for n, f in zip(in_names, contract.inputs) if n}
    got = dict(zip([f.key for f in contract.outputs], sess.run(list(out_names), feed)))
    contract = _with(contract, verified_max_abs_diff=_max_diff(got, ref, contract.tolerance))
    entry = proto.metadata_props.add()
    entry.key, entry.value = ONNX_METADATA_KEY, contract.to_json()
    tmp = path + ".tmp"
    onnx.save(proto, tmp)
    os.replace(tmp, path)
    return contract


def _reference(module: nn.Module, flat: Dict[str, Tensor], dropped: List[str]
               ) -> Tuple[Dict[str, Tensor], Dict[str, Tensor], List[str]]:
    """The eager outputs on ``flat`` without the unread keys ``dropped``; where the wrapper
    still asks for one of them (a parameter bound by name, e.g. an ``edge_index`` the model
    ignores), they are kept (requests must carry them) instead."""
    reduced = {k: v for k, v in flat.items() if k not in dropped}
    with torch.no_grad():
        if dropped:
            try:
                return reduced, module(reduced), dropped
            except Exception:  # noqa: BLE001 - the full dict below raises whatever is real
                pass
        return flat, module(flat), []


def _with(c: Contract, **kw: Any) -> Contract:
    import dataclasses

    return dataclasses.replace(c, **kw)


def export(wrapped: IPUWrapped, loader_or_budget: Union[FixedSizeLoader, Budget], path: str,
           format: str = "pt2", *, example: Optional[Sequence[Any]] = None,
           inductor_configs: Optional[Dict[str, Any]] = None) -> Contract:
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

    Returns the artifact's :class:`~graph_adapter.serve.Contract` (also in the file).
    Raises ``UnsupportedExportError`` for hetero graphs, layout tables (``layout=``),
    outputs without node/edge/graph rows; ``ExportMismatchError`` when the compiled
    artifact's outputs differ from the eager wrapper's beyond :data:`TOLERANCE`.
    """
    if format not in FORMATS:
        raise ValueError(f"format={format!r}; choose one of {FORMATS}")
    if not str(path).endswith("." + format):
        raise ValueError(f"path {path!r} must end in .{format} for format={format!r}")
    if not isinstance(wrapped, IPUWrapped):
        raise TypeError(f"export takes an ipu_wrap-ped model, got {type(wrapped).__name__}: "
                        f"export(ipu_wrap(model), loader, path)")
    col, flat = _collator_and_example(loader_or_budget, example)
    if col.is_hetero:
        raise UnsupportedExportError(
            "hetero graphs (HeteroData) are not supported by graph_adapter.serve yet: its "
            "packer builds homogeneous batches only; export a homogeneous model")
    if col.layout is not None:
        raise UnsupportedExportError(
            f"a loader with layout={col.layout!r}: the serving packer does not build the "
            f"neighbour tables; export with a FixedSizeLoader without layout= (same model, "
            f"same weights)")
    was_training, loss_fn = wrapped.training, wrapped.loss_fn
    try:
        wrapped.eval()
        wrapped.loss_fn = None
        module = _Inference(wrapped)
        unused = _unused_inputs(_trace(copy.deepcopy(module), flat), list(flat))
        dropped = [k for k in unused if k not in RESERVED_KEYS]
        flat, ref, dropped = _reference(module, flat, dropped)
        ep = _trace(module, flat)
        b = col.budget
        contract = Contract(format=format, nodes=int(b.nodes), edges=int(b.edges),
                            graphs=int(b.graphs), inputs=contract_inputs(col, flat),
                            outputs=_outputs(ref, b), dropped_inputs=tuple(dropped),
                            tolerance=dict(TOLERANCE[format]), versions=_versions())
        if format == "pt2":
            return _write_pt2(ep, str(path), contract, flat, ref, inductor_configs)
        return _write_onnx(ep, str(path), contract, flat, ref)
    finally:
        wrapped.loss_fn = loss_fn
        wrapped.train(was_training)
