"""Opt-in compatibility patches for client libraries whose code a compiler refuses as shipped.

Each patch names exactly what it changes, changes nothing until called, and
can be undone:

* :mod:`graph_adapter.compat.graphium`: ``patch()`` rewrites graphium 2.4.7's
  ``torch.prod(torch.as_tensor(h.shape[:-1])) == 0`` tests (in
  ``FCLayer.forward`` and ``FullGraphMultiTaskNetwork.forward``) to
  ``math.prod(h.shape[:-1]) == 0``, which ``torch.compile(fullgraph=True)``
  reads as a constant; ``unpatch()`` restores them.

It imports nothing of graph_adapter (only the standard library and torch):
any stage may import it.
"""
from .graphium import CompatError, patch, patched, rewrite_shape_tests, unpatch

__all__ = ["CompatError", "patch", "unpatch", "patched", "rewrite_shape_tests"]
