"""graph_adapter: run unmodified PyG GNNs under compilers that demand stable inputs.

The data path, one module a stage:

* :mod:`graph_adapter.data.spec`: PyG object <-> flat dict of tensors + a static spec
* :mod:`graph_adapter.data.pytree`: PyG classes as ``torch.utils._pytree`` nodes
* :mod:`graph_adapter.data.budget`: fixed budgets of nodes, edges and graphs, learned from data
* :mod:`graph_adapter.data.packing`: which graphs go into which fixed-size batch
* :mod:`graph_adapter.data.collate`: a list of graphs -> a padded flat dict (masks included)
* :mod:`graph_adapter.data.loader`: ``FixedSizeLoader``, whose batches never change shape
* :mod:`graph_adapter.nn.wrap`: ``ipu_wrap(model)``, the model behind a fixed-key dict; ``unpad``
* :mod:`graph_adapter.nn.static`: static sizes for PyG ops, active only inside a wrapped forward
* :mod:`graph_adapter.nn.norm`: BatchNorm & co. over real rows only
* :mod:`graph_adapter.nn.losses`: masked losses
* :mod:`graph_adapter.backends`: ``compile(wrapped, backend=...)``, one compile per budget
* :mod:`graph_adapter.ipu`: ``IPUOptions``, the poptorch backend and its CPU emulator
* :mod:`graph_adapter.checker`: what poptorch's dispatcher would reject, found on CPU

Importing this package never imports poptorch.
"""
from .data.spec import (
    BatchMismatchError,
    ClassNotAllowedError,
    DeviceMismatchError,
    DtypeMismatchError,
    Field,
    MissingKeyError,
    ShapeMismatchError,
    Spec,
    SpecError,
    SpecFormatError,
    UnexpectedKeyError,
    UnsupportedAttributeError,
    flatten,
    unflatten,
)
from .data.pytree import register_pytree
from .data.budget import Budget
from .data.packing import GraphSizes, graph_sizes, plan_efficiency, plan_epoch
from .data.collate import Collator, collate_padded, unpad_batch
from .data.loader import FixedSizeLoader, LoaderStats
from .nn import losses
from .nn.wrap import (AmbiguousLevelError, InputValueError, IPUWrapped, MissingInputError,
                   UnboundInputError, ipu_wrap, unpad)
from .nn.static import StaticSizeError
from .nn.losses import masked_loss
from .backends import Compiled, ShapeChangedError, compile
from .ipu import EmulatorError, IPUEmulator, IPUOptions, compile_ipu
from .checker import CheckReport, Finding, check

from . import _moved

_moved.install()  # graph_adapter.spec & co.: deprecated aliases of their new paths


def __getattr__(name: str):
    # ``graph_adapter.spec`` as an attribute (it was one before the move): the alias too
    if name in _moved.MOVED:
        return _moved.moved_module(name)
    raise AttributeError(f"module 'graph_adapter' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "BatchMismatchError",
    "ClassNotAllowedError",
    "DeviceMismatchError",
    "SpecFormatError",
    "AmbiguousLevelError",
    "UnboundInputError",
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
    "Budget",
    "GraphSizes",
    "graph_sizes",
    "plan_efficiency",
    "plan_epoch",
    "Collator",
    "collate_padded",
    "unpad_batch",
    "FixedSizeLoader",
    "LoaderStats",
    "ipu_wrap",
    "unpad",
    "IPUWrapped",
    "MissingInputError",
    "InputValueError",
    "StaticSizeError",
    "losses",
    "masked_loss",
    "compile",
    "Compiled",
    "ShapeChangedError",
    "IPUOptions",
    "IPUEmulator",
    "EmulatorError",
    "compile_ipu",
    "check",
    "CheckReport",
    "Finding",
]
