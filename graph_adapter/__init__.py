"""graph_adapter: run unmodified PyG GNNs under compilers that demand stable inputs.

The data path, one subpackage a stage (imports run upward only: each uses the
ones above it):

* :mod:`graph_adapter.data`: the host side. The padded format, PyG object <->
  flat dict + JSON spec, budgets, packing, collate, ``FixedSizeLoader``, unpad
* :mod:`graph_adapter.nn`: inside the wrapped forward. ``ipu_wrap(model)``,
  static sizes for PyG's ops, BatchNorm & co. over real rows, masked losses
* :mod:`graph_adapter.ipu`: ``IPUOptions``, the poptorch backend, its CPU
  emulator and the dispatcher's rules
* :mod:`graph_adapter.checker`: ``check``, what poptorch's dispatcher would
  reject, found on CPU
* :mod:`graph_adapter.backends`: ``compile(wrapped, backend=...)``, one
  compile per budget
* :mod:`graph_adapter.lightning`: a Lightning module around a wrapped model
* :mod:`graph_adapter.app`: the ``graph-adapter`` command (never imported here)

The public names below are re-exported here; the module paths of before the
split (``graph_adapter.spec``, ``.wrap``, ``.losses``, ...) are deprecated
aliases (:mod:`graph_adapter._moved`).

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
from .data.neighbor import FixedSizeNeighborLoader, NeighborLoaderStats
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
    "FixedSizeNeighborLoader",
    "NeighborLoaderStats",
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
