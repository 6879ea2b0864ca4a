"""Module paths that moved, kept as aliases for one release.

``import graph_adapter.spec`` (and ``from graph_adapter.data.spec import Spec``,
``graph_adapter.spec.Spec``) still works: it gives the module at its new path
itself (``graph_adapter.spec is graph_adapter.format.spec``) and emits a
``DeprecationWarning`` that names the new path. The paths moved in 0.2 go in
0.3, those moved in 0.3 in 0.4. Only public modules are here; private ones
moved without an alias, but for ``backends._export_opt`` (its tests and benchmarks
imported it; now ``graph_adapter.backends.export.onnx_rewrites``).
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Dict, Optional

__all__ = ["MOVED", "install", "moved_module"]

#: old name (under ``graph_adapter.``) -> new module path. The first block moved in
#: 0.2 (the layout by stage), the second in 0.3 (``graph_adapter.data`` split into the
#: format, batching and sampling stages; ``graph_adapter.format`` is now that stage's
#: package and still holds every name the old module had).
MOVED: Dict[str, str] = {
    "spec": "graph_adapter.format.spec",
    "pytree": "graph_adapter.format.pytree",
    "budget": "graph_adapter.batching.budget",
    "packing": "graph_adapter.batching.packing",
    "collate": "graph_adapter.batching.collate",
    "loader": "graph_adapter.batching.loader",
    "wrap": "graph_adapter.nn.wrap",
    "static": "graph_adapter.nn.static",
    "static_geometry": "graph_adapter.nn.static_geometry",
    "static_index": "graph_adapter.nn.static_index",
    "static_layout": "graph_adapter.nn.static_layout",
    "static_scatter": "graph_adapter.nn.static_scatter",
    "norm": "graph_adapter.nn.norm",
    "losses": "graph_adapter.nn.losses",
    # 0.3: graph_adapter.data.* (public modules only)
    "data.format": "graph_adapter.format.keys",
    "data.spec": "graph_adapter.format.spec",
    "data.classes": "graph_adapter.format.classes",
    "data.errors": "graph_adapter.format.errors",
    "data.values": "graph_adapter.format.values",
    "data.pytree": "graph_adapter.format.pytree",
    "data.unpad": "graph_adapter.format.unpad",
    "data.budget": "graph_adapter.batching.budget",
    "data.packing": "graph_adapter.batching.packing",
    "data.collate": "graph_adapter.batching.collate",
    "data.loader": "graph_adapter.batching.loader",
    "data.csr": "graph_adapter.sampling.csr",
    "data.pyg_sampler": "graph_adapter.sampling.pyg_sampler",
    "data.hetero_sample": "graph_adapter.sampling.hetero_sample",
    "data.sampled": "graph_adapter.sampling.sampled",
    "data.neighbor": "graph_adapter.sampling.neighbor",
    "data.link": "graph_adapter.sampling.link",
    "data.cluster": "graph_adapter.sampling.cluster",
    "data.hetero_neighbor": "graph_adapter.sampling.hetero_neighbor",
    # 0.3: export as a package of its own (the ONNX rewrites a module of it)
    "backends._export_opt": "graph_adapter.backends.export.onnx_rewrites",
}
_PREFIX = "graph_adapter."


def moved_module(old: str, stacklevel: int = 3) -> ModuleType:
    """The module that ``graph_adapter.<old>`` became, with a ``DeprecationWarning``."""
    new = MOVED[old]
    gone = "0.4" if old.startswith(("data.", "backends.")) else "0.3"
    warnings.warn(f"graph_adapter.{old} moved to {new}: import it from there (the old path "
                  f"goes in graph_adapter {gone})", DeprecationWarning, stacklevel=stacklevel)
    return importlib.import_module(new)


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``graph_adapter.<old>`` for every old name; loading it swaps in the new module."""

    def find_spec(self, fullname: str, path: object = None, target: object = None
                  ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname.startswith(_PREFIX) and fullname[len(_PREFIX):] in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a throwaway module; exec_module puts the real one in its place

    def exec_module(self, module: ModuleType) -> None:
        # warnings skips importlib's own frames: stacklevel 3 (moved_module, here, then
        # the importer) names the line that imported the old path
        sys.modules[module.__name__] = moved_module(module.__name__[len(_PREFIX):])


def install() -> None:
    """Put the alias finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.append(_AliasFinder())
