"""graph_adapter: run unmodified PyG GNNs under compilers that demand stable inputs.

The data path, one module a stage:

* :mod:`graph_adapter.spec`: PyG object <-> flat dict of tensors + a static spec
* :mod:`graph_adapter.pytree`: PyG classes as ``torch.utils._pytree`` nodes
* :mod:`graph_adapter.budget`: fixed budgets of nodes, edges and graphs, learned from data
* :mod:`graph_adapter.packing`: which graphs go into which fixed-size batch
* :mod:`graph_adapter.collate`: a list of graphs -> a padded flat dict (masks included)
* :mod:`graph_adapter.loader`: ``FixedSizeLoader``, whose batches never change shape
* :mod:`graph_adapter.ipu`: ``IPUOptions``, the poptorch backend and its CPU emulator
* :mod:`graph_adapter.check`: what poptorch's dispatcher would reject, found on CPU

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
from .budget import Budget
from .packing import GraphSizes, graph_sizes, plan_efficiency, plan_epoch
from .collate import Collator, collate_padded, unpad_batch
from .loader import FixedSizeLoader, LoaderStats
from .ipu import EmulatorError, IPUEmulator, IPUOptions, compile_ipu
from .check import CheckReport, Finding, check

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
    "IPUOptions",
    "IPUEmulator",
    "EmulatorError",
    "compile_ipu",
    "check",
    "CheckReport",
    "Finding",
]
