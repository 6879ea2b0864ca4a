"""The errors of the format: the contract's error family (:mod:`graph_adapter.contract`).

Each names the key it is about and says what to do; every one is a
:class:`SpecError` (``except SpecError`` catches them all) and also the builtin
error a caller would expect (``KeyError``, ``TypeError``, ``ValueError``).
"""
from ..contract import (BatchMismatchError, ClassNotAllowedError, DeviceMismatchError,
                        DtypeMismatchError, InputValueError, MissingKeyError, ShapeChangedError,
                        ShapeMismatchError, SpecError, SpecFormatError, UnexpectedKeyError,
                        UnsupportedAttributeError)

__all__ = ["SpecError", "MissingKeyError", "UnexpectedKeyError", "DtypeMismatchError",
           "ShapeMismatchError", "UnsupportedAttributeError", "DeviceMismatchError",
           "BatchMismatchError", "SpecFormatError", "ClassNotAllowedError", "InputValueError",
           "ShapeChangedError"]
