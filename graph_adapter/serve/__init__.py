"""Serving: run an artifact of ``graph_adapter.export`` on plain graphs, without PyG.

``load(path).predict(graphs)``: ``graphs`` are dicts of arrays/tensors (``x``,
``edge_index``, ``edge_attr``, ...) or PyG ``Data``; they are checked against the
artifact's JSON contract, packed into its budget (several padded calls for many graphs,
the layout of ``docs/dev/FORMAT.md``), run, and split back: one prediction per graph.
``PredictServer`` / ``graph-adapter serve``: the same over HTTP + JSON, concurrent requests
merged into one call (:mod:`.server`, on uvicorn); ``create_app(predictor, limits)``: that
HTTP API as an ASGI app of its own (:mod:`.app`, Starlette). See ``docs/deploy.md``.

This subpackage may import the standard library, torch (the ``.pt2`` path, imported only
when a pt2 artifact is loaded) and numpy + onnxruntime (the ``.onnx`` path, which never
imports torch), and starlette + uvicorn for the HTTP server: nothing of torch_geometric,
nothing else of graph_adapter (it is a stage of its own, rank 0, so that a server needs
only the runtime).
"""
from .contract import CONTRACT_FILE, ONNX_METADATA_KEY, Contract, InputField, OutputField, Rung
from .errors import (ArtifactError, EdgeIndexError, FeatureDtypeError, FeatureShapeError,
                     GraphInputError, GraphTooLargeError, MissingFeatureError,
                     RuntimeMissingError, ServeError)
from .runtime import Predictor, load, onnx_session, read_contract
from .batcher import DynamicBatcher, QueueFullError
from .decode import NPZ_TYPE, PayloadError, decode_graphs, decode_npz, encode_prediction
from .limits import (BodyTimeoutError, DeadlineExceededError, Limits, OverloadedError,
                     ServerStoppingError, TooLargeError, TooManyConnectionsError)
from .server import PredictServer, serve_main

__all__ = ["load", "Predictor", "read_contract", "onnx_session", "Contract", "InputField", "OutputField", "Rung",
           "ServeError", "ArtifactError", "RuntimeMissingError", "GraphInputError",
           "MissingFeatureError", "FeatureDtypeError", "FeatureShapeError", "EdgeIndexError",
           "GraphTooLargeError", "CONTRACT_FILE", "ONNX_METADATA_KEY",
           "PredictServer", "DynamicBatcher", "PayloadError", "QueueFullError",
           "decode_graphs", "decode_npz", "NPZ_TYPE", "encode_prediction", "serve_main",
           "create_app", "Limits", "TooLargeError", "BodyTimeoutError", "DeadlineExceededError",
           "OverloadedError", "ServerStoppingError", "TooManyConnectionsError"]


def __getattr__(name: str) -> object:
    # the ASGI app needs starlette (the serve extra): imported when it is asked for, so
    # that load(path).predict(...) runs where only the artifact's runtime is installed
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
