"""The artifact's input contract (:class:`graph_adapter.serve.Contract`) built from the
collator's schema and one padded batch, and what the serving packer cannot take.

Inputs: every key of the padded dict fed to the program, a feature with its level
(``node``: ``[N, ...]`` rows, ``edge``: ``[E, ...]``, ``graph``: ``[G, ...]`` for the
budget's ``N``/``E``/``G``), dtype, per-graph shape and increment, or a reserved key
(``batch`` ``[N]``, ``ptr`` ``[G + 1]``, the masks ``[N]``/``[E]``/``[G]``) with its
padded dtype and shape. Outputs: each with its level, told by its first dim.
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
from typing import Any, Dict, Mapping, Tuple

import torch
from torch import Tensor

from ..batching import Budget, Collator
from ..contract import BATCH, LEVEL_OF_MASK, PTR, RESERVED_KEYS
from ..serve import Contract, InputField, OutputField
from .errors import UnsupportedExportError

__all__ = ["FORMATS", "TOLERANCE", "contract_inputs", "output_fields", "versions", "updated",
           "refuse_unservable"]


FORMATS = ("pt2", "onnx")


#: ``|artifact - eager| <= atol + rtol * |eager|`` on every output, checked at export.
#: pt2 runs inductor's fused C++ kernels (sums reordered), onnx onnxruntime's kernels.
TOLERANCE = {"pt2": {"atol": 1e-5, "rtol": 1e-5}, "onnx": {"atol": 1e-4, "rtol": 1e-4}}


#: the level of each reserved key of the contract (``batch`` has a row a node, ``ptr``
#: ``G + 1``, a mask a row of its level)
_RESERVED_LEVEL = {BATCH: "node", PTR: "other", **LEVEL_OF_MASK}


def _feature_field(f: Any) -> InputField:
    """The contract field of one schema feature; ``UnsupportedExportError`` for what the
    serving packer cannot build (a custom increment, node indices off edge level, other
    levels)."""
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


def output_fields(ref: Mapping[str, Tensor], budget: Budget) -> Tuple[OutputField, ...]:
    """The contract's output fields of the eager outputs ``ref``: each a tensor whose
    first dim is the budget's nodes ``N``, edges ``E`` or graphs ``G`` (its level);
    anything else is refused, naming the output."""
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


def versions() -> Dict[str, str]:
    """The torch, PyG and graph_adapter versions the artifact was written with
    (``"unknown"``: a source checkout)."""
    import torch_geometric

    try:
        ga = importlib.metadata.version("graph_adapter")
    except importlib.metadata.PackageNotFoundError:  # a source checkout
        ga = "unknown"
    return {"torch": torch.__version__, "torch_geometric": torch_geometric.__version__,
            "graph_adapter": ga}


def updated(c: Contract, **kw: Any) -> Contract:
    """``c`` with the fields ``kw`` replaced (a ``Contract`` is frozen)."""
    return dataclasses.replace(c, **kw)


def refuse_unservable(col: Collator) -> None:
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
