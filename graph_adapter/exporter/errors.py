"""The errors :func:`~graph_adapter.exporter.export` raises on purpose."""
from __future__ import annotations

__all__ = ["ExportError", "UnsupportedExportError", "ExportMismatchError"]


class ExportError(RuntimeError):
    """Base of the errors :func:`export` raises on purpose."""


class UnsupportedExportError(ExportError, ValueError):
    """What the serving runtime cannot pack or split (hetero graphs, layout tables, ...)."""


class ExportMismatchError(ExportError):
    """The compiled artifact's outputs differ from the eager wrapper's beyond tolerance."""
