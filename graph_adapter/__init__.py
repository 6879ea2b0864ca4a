"""graph_adapter: run unmodified PyG GNNs under compilers that demand stable inputs.

The data path, one module a stage:

* :mod:`graph_adapter.spec`: PyG object <-> flat dict of tensors + a static spec
* :mod:`graph_adapter.pytree`: PyG classes as ``torch.utils._pytree`` nodes

Importing this package never imports poptorch.
"""
from .spec import (
    DtypeMismatchError,
    Field,
    MissingKeyError,
    ShapeMismatchError,
    Spec,
    SpecError,
    UnexpectedKeyError,
    UnsupportedAttributeError,
    flatten,
    unflatten,
)
from .pytree import register_pytree

__version__ = "0.1.0"

__all__ = [
    "DtypeMismatchError",
    "Field",
    "MissingKeyError",
    "ShapeMismatchError",
    "Spec",
    "SpecError",
    "UnexpectedKeyError",
    "UnsupportedAttributeError",
    "flatten",
    "unflatten",
    "register_pytree",
]
