"""graph_adapter: run unmodified PyG GNNs under compilers that demand stable inputs.

The data path, one package a stage (imports run one way: each uses the ones
above it; ``docs/dev/ARCHITECTURE.md`` draws them):

* :mod:`graph_adapter.contract`: the padded flat dict's rules, no torch: every
  reserved key and key naming, levels, padding, the micro-batch dim, the
  signature, the errors
* :mod:`graph_adapter.format`: PyG object <-> flat dict + JSON spec (the
  contract's names re-exported), value rules, unpadding of batches and outputs
* :mod:`graph_adapter.batching`: budgets, packing, collate, ``FixedSizeLoader``
* :mod:`graph_adapter.sampling`: subgraphs of one large graph at one shape
  (``FixedSizeNeighborLoader`` and the loaders built on its base)
* :mod:`graph_adapter.nn`: inside the wrapped forward. ``ipu_wrap(model)``,
  static sizes for PyG's ops, BatchNorm & co. over real rows, masked losses
* :mod:`graph_adapter.ipu`: ``IPUOptions``, the poptorch backend, its CPU
  emulator and the dispatcher's rules
* :mod:`graph_adapter.checker`: ``check``, what poptorch's dispatcher would
  reject, found on CPU
* :mod:`graph_adapter.backends`: ``compile(wrapped, backend=...)``, one
  compile per budget
* :mod:`graph_adapter.tuning`: optional, makes ``"inductor"`` fast (graph
  rewrites, CPU settings, precompiled entries, background compiles)
* :mod:`graph_adapter.exporter`: ``export(wrapped, loader, path)``, one
  artifact (``.pt2`` / ``.onnx``) with its input contract
* :mod:`graph_adapter.lightning`: a Lightning module around a wrapped model
* :mod:`graph_adapter.app`: the ``graph-adapter`` command (never imported here)
* :mod:`graph_adapter.serve`: the runtime of exported artifacts
  (``graph_adapter.export`` writes them): torch or onnxruntime, no PyG

``import graph_adapter`` works without PyG too (a server that only runs an
artifact): then ``graph_adapter.serve`` is all there is, ``__all__`` is empty
and every name below raises an ``ImportError`` naming PyG
(``PYG_IMPORT_ERROR`` holds why PyG did not import).

The public names below are re-exported here. The old module paths that 0.1.0
kept as deprecated aliases (``graph_adapter.spec``, ``graph_adapter.data.loader``,
...) were removed in 0.2.0: ``CHANGELOG.md`` maps each to its new one.

Importing this package never imports poptorch.
"""
# Everything but the serving runtime (graph_adapter.serve) builds on PyG. Where PyG is not
# importable (a server that only runs an exported artifact), the package still imports and
# graph_adapter.serve works; the PyG-dependent names then raise an ImportError naming PyG
# on access (``__getattr__`` below) instead of failing ``import graph_adapter.serve``.
import importlib as _importlib

try:  # probed first, so that the names below import all together or all wait
    _importlib.import_module("torch_geometric")
except ImportError as _error:  # absent, blocked, or broken: kept for the message
    #: why PyG did not import (None where it did): the cause of every name's ImportError
    PYG_IMPORT_ERROR: "ImportError | None" = _error
else:
    PYG_IMPORT_ERROR = None

if PYG_IMPORT_ERROR is None:
    from .format import (BatchMismatchError, ClassNotAllowedError, DeviceMismatchError,
                         DtypeMismatchError, Field, MissingKeyError, ShapeMismatchError, Spec,
                         SpecError, SpecFormatError, UnexpectedKeyError, UnsupportedAttributeError,
                         flatten, register_pytree, unflatten, unpad_batch)
    from .batching import (Budget, Collator, FixedSizeLoader, GraphSizes, LoaderStats,
                           collate_padded, graph_sizes, plan_efficiency, plan_epoch)
    from .sampling import (FixedSizeClusterLoader, FixedSizeHeteroNeighborLoader,
                           FixedSizeLinkNeighborLoader, FixedSizeNeighborLoader, LinkLoaderStats,
                           NeighborLoaderStats)
    from .nn import (AmbiguousLevelError, InputValueError, IPUWrapped, MissingInputError,
                     StaticSizeError, UnboundInputError, global_mean_scale, ipu_wrap,
                     link_loss, losses, masked_link_bce, masked_loss, masked_triplet_bce,
                     unpad, unwrap)
    from .ipu import EmulatorError, IPUEmulator, IPUOptions, compile_ipu
    from .checker import CheckReport, Finding, check
    from .backends import Compiled, ShapeChangedError, compile
    try:  # the tuning wing is optional: without it, compile() runs untuned (slower)
        _importlib.import_module("graph_adapter.tuning")  # registers it with backends
    except ModuleNotFoundError as _missing:
        if _missing.name != "graph_adapter.tuning":  # a module the wing needs: a real error
            raise
    from .exporter import export


__version__ = "0.2.0"  # setup.cfg's version too (tests/test_version.py)

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
    "unwrap",
    "unpad",
    "IPUWrapped",
    "MissingInputError",
    "InputValueError",
    "StaticSizeError",
    "losses",
    "masked_loss",
    "global_mean_scale",
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
    "export",
    "FixedSizeLinkNeighborLoader",
    "LinkLoaderStats",
    "link_loss",
    "masked_link_bce",
    "masked_triplet_bce",
    "FixedSizeHeteroNeighborLoader",
    "FixedSizeClusterLoader",
]
#: the names above that need PyG: all of them (the serving runtime is a subpackage)
PYG_NAMES = frozenset(__all__)
if PYG_IMPORT_ERROR is not None:
    __all__.clear()  # ``from graph_adapter import *`` without PyG: nothing that would raise


def __getattr__(name: str):
    if name in PYG_NAMES and PYG_IMPORT_ERROR is not None:
        raise ImportError(
            f"graph_adapter.{name} needs torch_geometric (PyG), which did not import here "
            f"({type(PYG_IMPORT_ERROR).__name__}: {PYG_IMPORT_ERROR}): install it with "
            f"`pip install torch-geometric`. Running an exported artifact needs no PyG: "
            f"graph_adapter.serve.load(path).predict(graphs)") from PYG_IMPORT_ERROR
    if name == "serve":  # the runtime, importable with or without PyG
        return _importlib.import_module("graph_adapter.serve")
    raise AttributeError(f"module 'graph_adapter' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__) | {"serve"})

