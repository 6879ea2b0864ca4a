"""The named errors of the serving runtime: what was wrong, where, and what to do."""
from __future__ import annotations

__all__ = ["ServeError", "ArtifactError", "GraphInputError", "MissingFeatureError",
           "FeatureDtypeError", "FeatureShapeError", "GraphTooLargeError", "EdgeIndexError",
           "RuntimeMissingError"]


class ServeError(Exception):
    """Base of every error :mod:`graph_adapter.serve` raises on purpose."""


class ArtifactError(ServeError, ValueError):
    """The file is not an artifact this runtime can run (no contract, unknown version)."""


class RuntimeMissingError(ServeError, ImportError):
    """The artifact's runtime (torch for pt2, onnxruntime + numpy for onnx) is not installed."""


class GraphInputError(ServeError, ValueError):
    """A request graph does not match the artifact's input contract.

    Attributes: ``graph`` (its position in the request), ``key`` (the feature, or None).
    """

    def __init__(self, message: str, graph: int, key: "str | None" = None):
        super().__init__(message)
        self.graph = graph
        self.key = key


class MissingFeatureError(GraphInputError, KeyError):
    """A graph lacks a feature the exported model reads."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class FeatureDtypeError(GraphInputError, TypeError):
    """A feature's dtype is not the one the model was exported for."""


class FeatureShapeError(GraphInputError):
    """A feature's shape (its width, or rows that disagree with the graph's size) is wrong."""


class EdgeIndexError(GraphInputError):
    """An index key points outside its own graph (the model would mix or misread rows)."""


class GraphTooLargeError(GraphInputError):
    """A graph holds more nodes or edges than one padded call of the artifact can take.

    Never cut: export with a larger budget (``Budget.fit`` over data that includes such
    graphs) or leave the graph out yourself.
    """
