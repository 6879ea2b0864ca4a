"""A Triton Inference Server model for an ``.onnx`` artifact, with ragged batching.

The exported ONNX program takes *padded* calls (the budget's static ``N`` / ``E`` / ``G``
rows, masks, ``batch``, ``ptr`` and, for the sums, neighbour tables the packer builds):
Triton's ONNX Runtime backend cannot build those from ragged requests. So the model runs
on Triton's Python backend: Triton's dynamic batcher gathers requests of any graph sizes
(``allow_ragged_batch`` on every feature: one graph a request, ``[1, n, ...]``), and
:class:`TritonPythonModel` packs the whole dynamic batch over the artifact's budget (or
its ladder) with :mod:`graph_adapter.serve`'s packer, runs it on onnxruntime, and splits
the outputs back per request, as ``Predictor.predict`` does.

The batch inputs carry PyG's ``ptr`` of the dynamic batch: for each feature of a level,
``BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO`` of one feature of that level is
``[0, c_1, c_1 + c_2, ...]`` in elements, i.e. ``ptr`` (nodes) or the edge offsets
times the feature's elements per row. Where the backend delivers them the model checks
its own offsets against them; the packer's own ``ptr`` is what the program reads.

Triton itself was not run here (no Triton server in this environment): ``config_for``'s
text is checked against the contract and :class:`TritonPythonModel` against a stand-in of
``triton_python_backend_utils`` (``tests/serve/test_triton.py``), not against Triton.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..contract import Contract, InputField, OutputField
from ..errors import ArtifactError, FeatureShapeError, GraphInputError

__all__ = ["config_for", "TRITON_DTYPES", "ptr_input_name", "TritonPythonModel"]

#: the contract's dtype names -> Triton's ``DataType`` names (model_config.proto)
TRITON_DTYPES = {"bool": "TYPE_BOOL", "uint8": "TYPE_UINT8", "int8": "TYPE_INT8",
                 "int16": "TYPE_INT16", "int32": "TYPE_INT32", "int64": "TYPE_INT64",
                 "float16": "TYPE_FP16", "bfloat16": "TYPE_BF16", "float32": "TYPE_FP32",
                 "float64": "TYPE_FP64"}
#: the prefix of the batch inputs that carry a level's offsets (``ptr``): a name no
#: feature of a graph_adapter contract can take (features never start with it)
_PTR_PREFIX = "graph_adapter_ptr_"


def ptr_input_name(level: str) -> str:
    """The batch input that carries the dynamic batch's offsets of ``level`` (``node``:
    PyG's ``ptr``, ``edge``: the edge offsets), in elements of its source feature."""
    return _PTR_PREFIX + level


def _triton_dtype(dtype: str, key: str) -> str:
    try:
        return TRITON_DTYPES[dtype]
    except KeyError:
        raise ArtifactError(f"key {key!r} has dtype {dtype}, which Triton has no type for; "
                            f"export the model with a feature of one of "
                            f"{sorted(TRITON_DTYPES)}") from None


def _feature_dims(f: InputField) -> List[int]:
    """A feature's per-graph shape as Triton ``dims`` (the batch dim left out): ``-1`` on
    the dim graphs are concatenated along, whose size varies a graph (ragged)."""
    return [-1 if s is None else int(s) for s in f.shape]


def _output_dims(f: OutputField) -> List[int]:
    """An output's per-graph shape: node/edge-level rows vary a graph (``-1``); a
    graph-level output has one row a graph, the batch dim."""
    return [-1, *map(int, f.shape[1:])] if f.level in ("node", "edge") else \
        [int(s) for s in f.shape[1:]]


def _level_sources(contract: Contract) -> Dict[str, InputField]:
    """The first feature of each of the node and edge levels: the source of that level's
    offsets batch input."""
    out: Dict[str, InputField] = {}
    for f in contract.features:
        if f.level in ("node", "edge") and f.level not in out:
            out[f.level] = f
    return out


def config_for(contract: Contract, *, name: str = "graph_adapter",
               artifact: str = "model.onnx", max_batch_size: Optional[int] = None,
               max_queue_delay_us: int = 2000, instances: int = 1,
               threads: int = 1) -> str:
    """The ``config.pbtxt`` of a Triton model serving an ``.onnx`` artifact.

    One request is one graph (its features with a leading batch dim of 1; several graphs
    of the same sizes may share a request). Every feature is a ragged input
    (``allow_ragged_batch``), so Triton's dynamic batcher merges requests of any graph
    sizes; the batch inputs give the merged batch's offsets (PyG's ``ptr``).

    Args:
        contract: the artifact's contract (``serve.read_contract(path)``); ``.onnx`` only.
        name: the model's name in the repository (its directory's name).
        artifact: the artifact's file name inside the version directory (``1/``).
        max_batch_size: graphs a dynamic batch merges at most; default: the real graph
            slots of one call of the largest budget (``graphs - 1``).
        max_queue_delay_us: how long the oldest request waits for others (Triton's
            ``max_queue_delay_microseconds``; ``graph-adapter serve --max-delay-ms``).
        instances: model instances (processes) on the CPU.
        threads: onnxruntime's intra-op threads an instance.

    Returns:
        The ``config.pbtxt`` text (protobuf text format).

    Raises:
        ArtifactError: a ``.pt2`` contract, or a key whose dtype Triton has no type for.
    """
    if contract.format != "onnx":
        raise ArtifactError(f"config_for: a {contract.format} artifact; Triton's model here "
                            f"runs an .onnx one (export with format='onnx')")
    if max_batch_size is None:
        max_batch_size = max(1, contract.graphs - 1)
    inputs = [[("name", f'"{f.key}"'), ("data_type", _triton_dtype(f.dtype, f.key)),
               ("dims", _dims(_feature_dims(f))), ("allow_ragged_batch", "true")]
              for f in contract.features]
    batch_inputs = [[("kind", "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO"),
                     ("target_name", f'"{ptr_input_name(level)}"'), ("data_type", "TYPE_INT32"),
                     ("source_input", f'"{f.key}"')]
                    for level, f in _level_sources(contract).items()]
    outputs = [[("name", f'"{o.key}"'), ("data_type", _triton_dtype(o.dtype, o.key)),
                ("dims", _dims(_output_dims(o)))] for o in contract.outputs]
    params = [[("key", f'"{k}"'), ("value", f'{{ string_value: "{v}" }}')]
              for k, v in (("artifact", artifact), ("threads", int(threads)))]
    lines = [f'name: "{name}"', 'backend: "python"', f"max_batch_size: {int(max_batch_size)}",
             *_entries("input", inputs), *_entries("batch_input", batch_inputs),
             *_entries("output", outputs),
             "dynamic_batching {", f"  max_queue_delay_microseconds: {int(max_queue_delay_us)}",
             "}",
             *_entries("instance_group", [[("kind", "KIND_CPU"), ("count", int(instances))]]),
             *_entries("parameters", params)]
    return "\n".join(lines) + "\n"


def _dims(dims: Sequence[int]) -> str:
    return f"[ {', '.join(map(str, dims))} ]"


def _entries(field: str, entries: Sequence[Sequence[Tuple[str, Any]]]) -> List[str]:
    """A repeated message field in protobuf's text format: ``field [ {...}, {...} ]``."""
    lines = [f"{field} ["]
    for i, entry in enumerate(entries):
        lines += ["  {", *(f"    {k}: {v}" for k, v in entry),
                  "  }" + ("," if i < len(entries) - 1 else "")]
    return lines + ["]"]


class TritonPythonModel:
    """The Python backend's model: ``model.py`` in the model's version directory is
    ``from graph_adapter.serve.engines.triton import TritonPythonModel``.

    ``execute`` packs every request of a dynamic batch into the artifact's calls at
    once (``Predictor.predict``'s packing), so requests of a batch merge as they do in
    ``graph-adapter serve``. A request the contract refuses gets its own error (the named
    error's text); the others of its batch are answered.
    """

    def initialize(self, args: Dict[str, str]) -> None:
        """Load the artifact named by the config's ``artifact`` parameter from the
        version directory (Triton's ``args``: ``model_config`` JSON,
        ``model_repository``, ``model_version``)."""
        from .. import load

        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        path = os.path.join(args["model_repository"], str(args["model_version"]),
                            params.get("artifact", "model.onnx"))
        self.predictor = load(path, threads=int(params.get("threads", "1") or 1))
        self.contract = self.predictor.contract
        self.features = self.contract.features
        self.sources = _level_sources(self.contract)

    def _graphs(self, request: Any, pb: Any) -> List[Dict[str, Any]]:
        """A request's graphs: its features split along the batch dim."""
        arrays = {}
        for f in self.features:
            t = pb.get_input_tensor_by_name(request, f.key)
            if t is not None:
                arrays[f.key] = t.as_numpy()
        count = {a.shape[0] for a in arrays.values()} if arrays else {0}
        if len(count) != 1:
            dims = {k: a.shape[0] for k, a in arrays.items()}
            raise FeatureShapeError(f"the request's features have batch dims {dims}: give "
                                    f"each feature one entry a graph (one graph a request, "
                                    f"or several graphs of the same sizes)", 0,
                                    next(iter(dims)))
        return [{k: a[i] for k, a in arrays.items()} for i in range(count.pop())]

    def _check_offsets(self, requests: Sequence[Any], graphs: Sequence[Sequence[Dict]],
                       pb: Any) -> List[str]:
        """Where the backend delivered the batch inputs, how they differ from the offsets
        of the graphs read (elements of each level's source feature, accumulated):
        one line a level that differs."""
        wrong = []
        for level, f in self.sources.items():
            got = [pb.get_input_tensor_by_name(r, ptr_input_name(level)) for r in requests]
            if not got or any(g is None for g in got):
                continue
            seen = [int(v) for g in got for v in g.as_numpy().reshape(-1)]
            want, total = [0], 0
            for gs in graphs:
                total += sum(int(g[f.key].size) for g in gs if f.key in g)
                want.append(total)
            if seen != want:
                wrong.append(f"the batch input {ptr_input_name(level)} is {seen}, the "
                             f"requests' {f.key} give {want}")
        return wrong

    def execute(self, requests: Sequence[Any]) -> List[Any]:
        """One response a request, in order: the requests' graphs packed together."""
        import triton_python_backend_utils as pb

        per: List[Tuple[Optional[List[Dict[str, Any]]], Any]] = []
        for r in requests:
            try:
                gs = self._graphs(r, pb)
                per.append((gs, self.predictor.check(gs)))
            except GraphInputError as e:
                per.append((None, e))
        ok = [i for i, (gs, _) in enumerate(per) if gs is not None]
        for line in self._check_offsets([requests[i] for i in ok], [per[i][0] for i in ok], pb):
            # the packer's own offsets rule (what it packs is what it read); said, not hidden
            logging.getLogger(__name__).warning("%s (the model packs by its own offsets)", line)
        preds: Optional[List[Any]] = None
        checked = [g for i in ok for g in per[i][1]]
        try:
            preds = self.predictor.predict_checked(checked) if checked else []
        except GraphInputError:  # an index range (checked when packed): request by request
            preds = None
        out: List[Any] = []
        at = 0
        for gs, c in per:
            if gs is not None and preds is not None:
                mine, at = preds[at:at + len(c)], at + len(c)
            elif gs is not None:
                try:
                    mine = self.predictor.predict_checked(c) if c else []
                except GraphInputError as e:
                    gs, c = None, e
            if gs is None:
                out.append(pb.InferenceResponse(output_tensors=[], error=pb.TritonError(str(c))))
                continue
            out.append(pb.InferenceResponse(output_tensors=self._tensors(mine, pb)))
        return out

    def _tensors(self, preds: Sequence[Any], pb: Any) -> List[Any]:
        """A request's outputs: each key's per-graph predictions stacked on the batch dim."""
        import numpy as np

        tensors = []
        for o in self.contract.outputs:
            rows = [np.asarray(p[o.key] if isinstance(p, dict) else p) for p in preds]
            empty = (0, *[max(d, 0) for d in _output_dims(o)])
            tensors.append(pb.Tensor(o.key, np.stack(rows) if rows else
                                     np.zeros(empty, o.dtype)))
        return tensors
