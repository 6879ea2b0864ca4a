"""The named errors of the serving runtime: what was wrong, where, and what to do.

A request graph that breaks the contract raises a :class:`GraphInputError`, which is
also the contract's error for the same failure (:mod:`graph_adapter.contract`: a
missing feature is a ``MissingKeyError``, a wrong dtype a ``DtypeMismatchError``, ...),
so ``except SpecError`` catches the host's and the server's failures alike.
"""
from __future__ import annotations

from ..contract import (BatchMismatchError, DtypeMismatchError, InputValueError,
                        MissingKeyError, ShapeMismatchError, SpecError)

__all__ = ["ServeError", "ArtifactError", "GraphInputError", "MissingFeatureError",
           "FeatureDtypeError", "FeatureShapeError", "GraphTooLargeError", "EdgeIndexError",
           "RuntimeMissingError", "CodeRangeError", "NonFiniteError", "EmptyGraphError"]


class ServeError(Exception):
    """Base of every error :mod:`graph_adapter.serve` raises on purpose."""


class ArtifactError(ServeError, ValueError):
    """The file is not an artifact this runtime can run (no contract, unknown version)."""


class RuntimeMissingError(ServeError, ImportError):
    """The artifact's runtime (torch for pt2, onnxruntime + numpy for onnx) is not installed."""


class GraphInputError(ServeError, SpecError, ValueError):
    """A request graph does not match the artifact's input contract.

    Attributes: ``graph`` (its position in the request), ``key`` (the feature, or None).
    """

    def __init__(self, message: str, graph: int, key: "str | None" = None):
        super().__init__(message)
        self.graph = graph
        self.key = key


class MissingFeatureError(GraphInputError, MissingKeyError):
    """A graph lacks a feature the exported model reads."""


class FeatureDtypeError(GraphInputError, DtypeMismatchError):
    """A feature's dtype is not the one the model was exported for."""


class FeatureShapeError(GraphInputError, ShapeMismatchError):
    """A feature's shape (its width, or rows that disagree with the graph's size) is wrong."""


class EdgeIndexError(GraphInputError, InputValueError):
    """An index key points outside its own graph (the model would mix or misread rows)."""


class GraphTooLargeError(GraphInputError, BatchMismatchError):
    """A graph holds more nodes or edges than one padded call of the artifact can take.

    Never cut: export with a larger budget (``Budget.fit`` over data that includes such
    graphs) or leave the graph out yourself.
    """


class CodeRangeError(GraphInputError, InputValueError):
    """A categorical code outside the rows of the embedding table it indexes (negative, or
    past the table): refused before any call, as eager PyG would fail on it (an ONNX
    ``Gather`` would wrap a negative code to another row and answer with that row's
    prediction). ``column``: the feature's column (``None`` for a 1-d feature)."""

    def __init__(self, message: str, graph: int, key: "str | None" = None,
                 column: "int | None" = None):
        super().__init__(message, graph, key)
        self.column = column


class NonFiniteError(GraphInputError, InputValueError):
    """A NaN or infinite value in a float feature whose export data held none (the
    contract's ``finite``): the model was never fitted on such values."""


class EmptyGraphError(GraphInputError, InputValueError):
    """A graph of 0 nodes: eager PyG gives it no prediction (its pooled row does not
    exist), so the runtime refuses it rather than invent one; leave it out."""
