"""The host side: the padded flat-dict format and everything that builds it.

This subpackage owns the format (:mod:`~graph_adapter.data.format`, the
contract of ``docs/dev/FORMAT.md``), PyG object <-> flat dict
(:mod:`~graph_adapter.data.spec`, its checks and errors, the pytree
registration), the value rules of a flat dict (:mod:`~graph_adapter.data.values`),
and the batching path: scanning datasets, budgets, packing plans, collate,
the layout tables and ``FixedSizeLoader``.

It may import torch, PyG and numpy only: nothing else of graph_adapter (it is
the bottom of the stack; ``nn``, ``ipu``, ``checker`` and ``backends`` build on it).
"""
