"""Module paths that moved when the package was laid out by stage (0.2), kept as aliases.

``import graph_adapter.spec`` (and ``from graph_adapter.spec import Spec``,
``graph_adapter.spec.Spec``) still works: it gives the module at its new path
itself (``graph_adapter.spec is graph_adapter.data.spec``) and emits a
``DeprecationWarning`` that names the new path. The aliases go in 0.3.
Only public modules are here; private ones moved without an alias.
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

#: old name (under ``graph_adapter.``) -> new module path
MOVED: Dict[str, str] = {
    "format": "graph_adapter.data.format",
    "spec": "graph_adapter.data.spec",
    "pytree": "graph_adapter.data.pytree",
    "budget": "graph_adapter.data.budget",
    "packing": "graph_adapter.data.packing",
    "collate": "graph_adapter.data.collate",
    "loader": "graph_adapter.data.loader",
    "wrap": "graph_adapter.nn.wrap",
    "static": "graph_adapter.nn.static",
    "static_geometry": "graph_adapter.nn.static_geometry",
    "static_index": "graph_adapter.nn.static_index",
    "static_layout": "graph_adapter.nn.static_layout",
    "static_scatter": "graph_adapter.nn.static_scatter",
    "norm": "graph_adapter.nn.norm",
    "losses": "graph_adapter.nn.losses",
}
_PREFIX = "graph_adapter."


def moved_module(old: str, stacklevel: int = 3) -> ModuleType:
    """The module that ``graph_adapter.<old>`` became, with a ``DeprecationWarning``."""
    new = MOVED[old]
    warnings.warn(f"graph_adapter.{old} moved to {new}: import it from there (the old path "
                  f"goes in graph_adapter 0.3)", DeprecationWarning, stacklevel=stacklevel)
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
