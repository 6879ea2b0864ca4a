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

The public names below are re-exported here, each imported on first access: ``import
graph_adapter`` and ``import graph_adapter.serve`` import neither torch nor PyG (the
``.onnx`` runtime needs neither); the first training name read imports them. The old
module paths that 0.1.0 kept as deprecated aliases (``graph_adapter.spec``,
``graph_adapter.data.loader``, ...) were removed in 0.2.0: ``CHANGELOG.md`` maps each to
its new one.

Importing this package never imports poptorch, torch or PyG.
"""
# Everything but the serving runtime (graph_adapter.serve) builds on PyG. Nothing is imported
# here: each public name is resolved on first access (``__getattr__`` below, PEP 562), so that
# ``import graph_adapter.serve`` (a server running an ONNX artifact) costs what serve needs,
# not torch and PyG (3 s and 300 MB a process where they are installed). The first PyG name
# read imports them all together (and the optional tuning wing), as an eager import did.
# Where PyG is not importable the package still imports and graph_adapter.serve works; the
# PyG-dependent names then raise an ImportError naming PyG.
import importlib as _importlib
import importlib.util as _importlib_util

#: each public name -> the stage that defines it (imported on first access)
_HOMES = {
    "format": ("BatchMismatchError", "ClassNotAllowedError", "DeviceMismatchError",
               "DtypeMismatchError", "Field", "MissingKeyError", "ShapeMismatchError", "Spec",
               "SpecError", "SpecFormatError", "UnexpectedKeyError", "UnsupportedAttributeError",
               "flatten", "register_pytree", "unflatten", "unpad_batch"),
    "batching": ("Budget", "Collator", "FixedSizeLoader", "GraphSizes", "LoaderStats",
                 "collate_padded", "graph_sizes", "plan_efficiency", "plan_epoch"),
    "sampling": ("FixedSizeClusterLoader", "FixedSizeHeteroNeighborLoader",
                 "FixedSizeLinkNeighborLoader", "FixedSizeHeteroLinkNeighborLoader",
                 "FixedSizeNeighborLoader", "LinkLoaderStats", "NeighborLoaderStats",
                 "HopBudget", "MemmapFeatureStore", "ExcludedAttributeWarning",
                 "FanoutLengthError", "SubgraphTypeError", "TemporalSamplingError",
                 "HopBudgetError", "FeatureStoreError", "GraphStructureError",
                 "ReservedAttributeError", "MemmapStoreError", "ForeignBatchError"),
    "nn": ("AmbiguousLevelError", "InputValueError", "IPUWrapped", "MissingInputError",
           "StaticSizeError", "UnboundInputError", "global_mean_scale", "ipu_wrap", "link_loss",
           "losses", "masked_link_bce", "masked_loss", "masked_triplet_bce", "unpad", "unwrap"),
    "ipu": ("EmulatorError", "IPUEmulator", "IPUOptions", "compile_ipu"),
    "checker": ("CheckReport", "Finding", "check"),
    "backends": ("Compiled", "ShapeChangedError", "compile"),
    "exporter": ("export",),
}
_HOME_OF = {name: stage for stage, names in _HOMES.items() for name in names}


def _probe_pyg() -> "ImportError | None":
    """Why PyG cannot be imported, told without importing it (``find_spec``); ``None``:
    it looks importable (an import that then fails is caught on first access)."""
    try:
        if _importlib_util.find_spec("torch_geometric") is None:
            return ModuleNotFoundError("No module named 'torch_geometric'",
                                       name="torch_geometric")
    except (ImportError, ValueError) as error:  # blocked by an import hook, or broken
        return error if isinstance(error, ImportError) else ImportError(str(error))
    return None


_ABSENT = _probe_pyg()
if _ABSENT is not None:
    #: why PyG did not import (None where it did): the cause of every name's ImportError.
    #: Where PyG looks installed it is read on first access (which imports PyG).
    PYG_IMPORT_ERROR: "ImportError | None" = _ABSENT
_LOADED = False  # whether the PyG-dependent stages were imported (all together)


def _import_tuning() -> None:
    """Import the optional tuning wing, which registers itself with ``backends``."""
    try:  # the tuning wing is optional: without it, compile() runs untuned (slower)
        _importlib.import_module("graph_adapter.tuning")
    except ModuleNotFoundError as missing:
        if missing.name != "graph_adapter.tuning":  # a module the wing needs: a real error
            raise


class _TuningAfterBackends:
    """An import hook of one use: right after ``graph_adapter.backends`` is first imported
    (by any path: ``from graph_adapter.backends import compile`` reads no name here), the
    tuning wing is imported too, so that it is registered wherever the compile core is, as
    when this package imported everything eagerly. (The core itself never imports the
    wing, which ranks after it.)"""

    def find_spec(self, name, path=None, target=None):
        if name != "graph_adapter.backends":
            return None
        import sys

        if self in sys.meta_path:
            sys.meta_path.remove(self)  # one use; also keeps the lookup below off this hook
        spec = _importlib_util.find_spec(name)
        loader = getattr(spec, "loader", None)
        run = getattr(loader, "exec_module", None)
        if run is None:
            return spec

        def exec_module(module):
            run(module)
            _import_tuning()

        loader.exec_module = exec_module  # this one loader object's, for this one module
        return spec


def _install_tuning_hook() -> None:
    import sys

    if "graph_adapter.backends" not in sys.modules:
        sys.meta_path.insert(0, _TuningAfterBackends())


_install_tuning_hook()


def _load_pyg_names() -> None:
    """Import the PyG-dependent stages and bind every public name here (once); records
    ``PYG_IMPORT_ERROR`` where PyG does not import."""
    global _LOADED, PYG_IMPORT_ERROR
    if _LOADED:
        return
    try:  # probed first, so that the names below import all together or all wait
        _importlib.import_module("torch_geometric")
    except ImportError as error:  # absent, blocked, or broken: kept for the message
        PYG_IMPORT_ERROR = error
        _LOADED = True
        __all__.clear()  # ``from graph_adapter import *`` without PyG: nothing that would raise
        return
    PYG_IMPORT_ERROR = None
    found = {}
    for stage, names in _HOMES.items():
        module = _importlib.import_module(f"graph_adapter.{stage}")
        found.update({n: getattr(module, n) for n in names})
    _import_tuning()  # (the hook above did already, where backends was imported first)
    globals().update(found)
    _LOADED = True


__version__ = "0.4.0"  # setup.cfg's version too (tests/test_version.py)

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
    "FixedSizeHeteroLinkNeighborLoader",
    "HopBudget",
    "MemmapFeatureStore",
    "ExcludedAttributeWarning",
    "FanoutLengthError",
    "SubgraphTypeError",
    "TemporalSamplingError",
    "HopBudgetError",
    "FeatureStoreError",
    "GraphStructureError",
    "ReservedAttributeError",
    "MemmapStoreError",
    "ForeignBatchError",
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
assert PYG_NAMES == set(_HOME_OF), "every public name needs its stage in _HOMES"
if _ABSENT is not None:
    __all__.clear()  # ``from graph_adapter import *`` without PyG: nothing that would raise


def __getattr__(name: str):
    if name == "serve":  # the runtime, importable with or without PyG
        return _importlib.import_module("graph_adapter.serve")
    if name in PYG_NAMES or name == "PYG_IMPORT_ERROR":
        if _ABSENT is None:
            _load_pyg_names()
        error = _ABSENT if _ABSENT is not None else globals()["PYG_IMPORT_ERROR"]
        if name == "PYG_IMPORT_ERROR":
            return error
        if error is not None:
            raise ImportError(
                f"graph_adapter.{name} needs torch_geometric (PyG), which did not import here "
                f"({type(error).__name__}: {error}): install it with "
                f"`pip install torch-geometric`. Running an exported artifact needs no PyG: "
                f"graph_adapter.serve.load(path).predict(graphs)") from error
        return globals()[name]
    if not name.startswith("_") and _is_subpackage(name):  # ``graph_adapter.format.X`` after
        return _importlib.import_module(f"graph_adapter.{name}")  # a bare import, as before
    raise AttributeError(f"module 'graph_adapter' has no attribute {name!r}")


def _is_subpackage(name: str) -> bool:
    try:
        return _importlib_util.find_spec(f"graph_adapter.{name}") is not None
    except (ImportError, ValueError):
        return False


def __dir__():
    return sorted(set(globals()) | set(__all__) | {"serve"})
