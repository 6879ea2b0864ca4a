"""Deprecated: ``graph_adapter.data`` was split into three stages in 0.3.

* the format contract: :mod:`graph_adapter.format` (was ``data.format``,
  ``data.spec``, ``data.errors``, ``data.values``, ``data.pytree``, ``data.unpad``);
* batching: :mod:`graph_adapter.batching` (``data.budget``, ``data.packing``,
  ``data.collate``, ``data.loader``);
* sampling: :mod:`graph_adapter.sampling` (``data.csr``, ``data.neighbor``,
  ``data.link``, ``data.cluster``, ``data.hetero_neighbor``, ...).

``import graph_adapter.data.spec`` and ``graph_adapter.data.spec`` still give the
module at its new path, with a ``DeprecationWarning`` naming it
(:mod:`graph_adapter._moved`); the old paths go in 0.4. This package holds no
module of its own and may import only :mod:`graph_adapter._moved`.
"""
from .. import _moved as _aliases


def __getattr__(name: str):
    if f"data.{name}" in _aliases.MOVED:
        return _aliases.moved_module(f"data.{name}")
    raise AttributeError(f"module 'graph_adapter.data' has no attribute {name!r} (the package "
                         f"was split into graph_adapter.format, .batching and .sampling)")
