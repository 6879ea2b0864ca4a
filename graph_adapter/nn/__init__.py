"""What runs inside the wrapped forward: ``ipu_wrap`` and the ops it makes static.

This subpackage owns :func:`~graph_adapter.nn.wrap.ipu_wrap` (binding the
flat dict to the model's arguments, rebuilding the PyG batch, trimming eager
calls to the real rows), the static-size substitutions for PyG's ops
(:mod:`~graph_adapter.nn.static` and its ``static_*`` modules), BatchNorm
and friends over real rows (:mod:`~graph_adapter.nn.norm`) and the masked
losses (:mod:`~graph_adapter.nn.losses`).

It may import :mod:`graph_adapter.data`, torch and PyG; never ``ipu``,
``checker``, ``backends``, ``lightning`` or ``app``.
"""
