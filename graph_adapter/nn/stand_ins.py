"""Every static stand-in the wrapper installs, in one explicit list.

:mod:`graph_adapter.nn.static` replaces PyG's data-dependent ops while a
wrapped forward runs. Its own table covers PyG's scatter, softmax, pooling and
batching utilities; the modules below add theirs: the geometric graph
builders (``knn``, ``radius``: :mod:`~graph_adapter.nn.static_geometry`),
``torch_scatter``'s functions (:mod:`~graph_adapter.nn.static_scatter`), the
indexing rules run under a dispatch mode (:mod:`~graph_adapter.nn.static_index`)
and the routing of aggregations through the layout tables
(:mod:`~graph_adapter.nn.static_layout`). A new stand-in module goes in
:data:`TABLES` or :data:`HOOKS`; nothing registers itself on import.
"""
from __future__ import annotations

from typing import Callable, Dict, Tuple

from . import static, static_geometry, static_index, static_layout, static_scatter

__all__ = ["TABLES", "HOOKS", "register_all"]

#: ``(name prefix, originals, replacements, extra packages to scan)`` per table of ops
TABLES: Tuple[Tuple[str, Dict[str, Callable], Dict[str, Callable], Tuple[str, ...]], ...] = (
    ("", static_geometry.ORIGINALS, static_geometry.REPLACEMENTS, ()),
    ("torch_scatter.", static_scatter.ORIGINALS, static_scatter.REPLACEMENTS,
     static_scatter.SCAN_PREFIXES),
)
#: ``(install, uninstall)`` run by :func:`static.install` / :func:`static.uninstall`
HOOKS: Tuple[Tuple[Callable[[], None], Callable[[], None]], ...] = (
    (static_index.install, static_index.uninstall),
    (static_layout.install, static_layout.uninstall),
)
_registered = False


def register_all() -> None:
    """Hand every table and hook above to :mod:`graph_adapter.nn.static` (once)."""
    global _registered
    if _registered:
        return
    for table in TABLES:
        static.register(*table)
    for hooks in HOOKS:
        static.register_hooks(*hooks)
    _registered = True
