"""The server's ASGI app on Ray Serve: replicas of one artifact behind Ray's HTTP proxy.

``pip install 'graph_adapter[ray]'`` (Ray Serve). Each replica loads the artifact itself
from a path every replica can read (the model is never pickled across the cluster), and
serves the same ASGI app as ``graph-adapter serve``
(:func:`graph_adapter.serve.app.create_app`): the same endpoints, answers and errors, its
own dynamic batcher. Ray's proxy routes the requests over the replicas::

    import ray
    from ray import serve as ray_serve
    from graph_adapter.serve.engines.ray_serve import deployment

    ray.init()
    ray_serve.start(http_options={"host": "127.0.0.1", "port": 8000})
    ray_serve.run(deployment("/models/tpsa.onnx", replicas=2), route_prefix="/")
    # POST http://127.0.0.1:8000/predict, as with graph-adapter serve

This module imports Ray when a function is called, never at import, and
``import graph_adapter.serve`` does not import this module.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
from typing import Any, Dict, Mapping, Optional, Union

from ..errors import RuntimeMissingError

__all__ = ["deployment", "APP_FACTORY"]

#: the ASGI app each replica serves: ``module:function`` taking ``(predictor, limits,
#: max_delay_ms=, max_batch=)``
APP_FACTORY = "graph_adapter.serve.app:create_app"


def _ray_serve() -> Any:
    try:
        from ray import serve
    except ImportError as e:
        raise RuntimeMissingError("graph_adapter.serve.engines.ray_serve runs on Ray Serve, "
                                  "which is not installed (pip install "
                                  "'graph_adapter[ray]' or 'ray[serve]')") from e
    return serve


def _limits_dict(limits: Any) -> Optional[Dict[str, Any]]:
    """The limits as plain data (what crosses to the replicas), or ``None``: the app's
    defaults."""
    if limits is None:
        return None
    if dataclasses.is_dataclass(limits):
        return dataclasses.asdict(limits)
    return dict(limits)


def _factory(spec: str) -> Any:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


class _Replica:
    """One replica: the artifact loaded from its path, the app built around it (Ray calls
    ``__serve_build_asgi_app__`` after ``__init__``, in the replica's process)."""

    def __init__(self, artifact: str, threads: Optional[int], limits: Optional[Dict[str, Any]],
                 app_factory: str, app_options: Dict[str, Any]):
        from .. import load

        self.predictor = load(artifact, threads=threads)
        self.limits = limits
        self.app_factory = app_factory
        self.app_options = app_options

    def __serve_build_asgi_app__(self) -> Any:
        limits = None
        if self.limits is not None:
            from ..limits import Limits

            limits = Limits(**self.limits)
        return _factory(self.app_factory)(self.predictor, limits, **self.app_options)


def deployment(artifact: Union[str, "os.PathLike[str]"], *, replicas: int = 1,
               threads: Optional[int] = 1, limits: Union[None, Any, Mapping[str, Any]] = None,
               max_delay_ms: float = 2.0, max_batch: Optional[int] = None,
               name: str = "graph_adapter", num_cpus: Optional[float] = None,
               app_factory: str = APP_FACTORY, **options: Any) -> Any:
    """A Ray Serve application of ``replicas`` replicas serving ``artifact``.

    Args:
        artifact: the ``.onnx`` / ``.pt2`` file; each replica loads it from this path
            (give one every node of the cluster can read: a shared volume, the image).
        replicas: Ray Serve replicas (``num_replicas``); each runs its own batcher.
        threads: intra-op threads a replica's program runs on (``serve.load(threads=)``).
        limits: the app's limits (a :class:`graph_adapter.serve.limits.Limits` or a dict of
            its fields); ``None``: its defaults. Connection and header limits belong to
            the HTTP server, here Ray's proxy: only the app's own limits apply.
        max_delay_ms: how long a replica's oldest queued request waits for others to
            merge with (``graph-adapter serve --max-delay-ms``).
        max_batch: graphs a replica's merged call holds at most (``--max-batch``).
        name: the deployment's name.
        num_cpus: CPUs Ray reserves a replica (default: ``threads``, at least 1).
        app_factory: ``module:function`` building the ASGI app from ``(predictor,
            limits, max_delay_ms=, max_batch=)`` in the replica (to add middleware, say);
            default :data:`APP_FACTORY`.
        **options: other ``ray.serve.deployment`` options (``max_ongoing_requests``,
            ``autoscaling_config`` in place of ``replicas``, ...).

    Returns:
        A Ray Serve ``Application``: ``ray.serve.run(app, route_prefix="/")`` deploys it.

    Raises:
        FileNotFoundError: no file at ``artifact`` here (checked before deploying).
        RuntimeMissingError: Ray Serve is not installed (names the extra).
    """
    artifact = os.path.abspath(os.fspath(artifact))
    if not os.path.exists(artifact):
        raise FileNotFoundError(f"no artifact at {artifact}")
    serve = _ray_serve()
    actor = dict(options.pop("ray_actor_options", {}) or {})
    actor.setdefault("num_cpus", num_cpus if num_cpus is not None else max(1, threads or 1))
    if "autoscaling_config" not in options:
        options["num_replicas"] = replicas
    dep = serve.deployment(serve.ingress()(_Replica), name=name, ray_actor_options=actor, **options)
    return dep.bind(artifact, threads, _limits_dict(limits), app_factory,
                    {"max_delay_ms": float(max_delay_ms), "max_batch": max_batch})
