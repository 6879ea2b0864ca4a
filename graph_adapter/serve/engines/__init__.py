"""Serving an artifact on an existing engine: Ray Serve replicas of the server's ASGI app
(:mod:`.ray_serve`, the ``[ray]`` extra) and a Triton Inference Server model for an
``.onnx`` artifact (:mod:`.triton`). Neither engine is imported by ``import
graph_adapter.serve`` nor by this package: each module imports its engine when called.
"""
