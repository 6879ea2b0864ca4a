"""The errors of the format: each names the key it is about and says what to do.

Every one is a :class:`SpecError` (``except SpecError`` catches them all) and
also the builtin error a caller would expect (``KeyError``, ``TypeError``,
``ValueError``).
"""
from __future__ import annotations

__all__ = ["SpecError", "MissingKeyError", "UnexpectedKeyError", "DtypeMismatchError",
           "ShapeMismatchError", "UnsupportedAttributeError", "DeviceMismatchError",
           "BatchMismatchError", "SpecFormatError", "ClassNotAllowedError", "InputValueError"]


# --------------------------------------------------------------------------
# Errors. Each names the key it is about and says what to do.
# --------------------------------------------------------------------------
class SpecError(Exception):
    """Base class: a flat dict, a spec or an attribute that does not fit."""


class _KeyErrorMessage(KeyError):
    # KeyError repr()s its message; show it as written instead.
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class MissingKeyError(SpecError, _KeyErrorMessage):
    """The flat dict lacks a key that the spec names."""


class UnexpectedKeyError(SpecError, _KeyErrorMessage):
    """The flat dict has a key that the spec does not name."""


class DtypeMismatchError(SpecError, TypeError):
    """A tensor's dtype differs from the spec's."""


class ShapeMismatchError(SpecError, ValueError):
    """A tensor's shape differs from the spec's (other than on its cat dim)."""


class UnsupportedAttributeError(SpecError, TypeError):
    """An attribute is neither a dense tensor nor a JSON value."""


class DeviceMismatchError(SpecError, ValueError):
    """A tensor sits on another device than the rest of the input (or the model)."""


class BatchMismatchError(SpecError, ValueError):
    """A flat dict's row counts disagree with the batch its spec describes."""


class InputValueError(SpecError, ValueError):
    """A value of a flat dict breaks the padded format: an index out of its range, an
    unsorted ``batch``, a mask that contradicts ``batch`` or ``edge_index``
    (:mod:`graph_adapter.format.values`). ``.key``, ``.position`` and ``.value``
    name the first offending entry."""


class SpecFormatError(SpecError, ValueError):
    """A spec's JSON has a missing, unknown or wrongly typed field."""


class ClassNotAllowedError(SpecError, TypeError):
    """A spec names a class that is not a PyG ``Data``/``HeteroData`` subclass,
    or lives in a module that is neither imported nor allowed."""
