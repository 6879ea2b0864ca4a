"""The tuning wing: what makes ``graph_adapter.compile(..., "inductor")`` fast.

Optional: the compile core (:mod:`graph_adapter.backends`) runs without it, slower
(``"inductor"`` is then inductor as it is, and ``precompile=`` / ``background=``
are unavailable). Importing this package registers its tuner with the core
(:func:`graph_adapter.backends.register_tuner`); ``import graph_adapter`` imports
it where it is installed. ``GRAPH_ADAPTER_TUNING=0`` in the environment at import
turns the whole wing off: nothing is registered, and :func:`rewrite_exported`
rewrites nothing.

* :mod:`~graph_adapter.tuning.registry`: one registry of every graph rewrite and
  every setting that changes what inductor compiles (:class:`Entry`: name, doc,
  pass point, version, the torch releases it was verified on; off, with one log
  line, on any other torch). ``compiled.stats.rewrites`` counts what fired.
* :mod:`~graph_adapter.tuning.rewrites`: the graph rewrites, one module a rewrite;
* :mod:`~graph_adapter.tuning.cpu_settings`: the settings (boolean masks
  recomputed in the backward, ``index_add`` gradients, the C++ wrapper for CPU
  inference, no size asserts, AOTAutograd's cache for custom Functions) and the
  inductor config one compile gets;
* :mod:`~graph_adapter.tuning.host_checks`: inductor's per-process host checks
  answered from an earlier process's records;
* :mod:`~graph_adapter.tuning.precompile`: precompiled entries
  (``compile(..., precompile=True)``);
* :mod:`~graph_adapter.tuning.background`: ``compile(..., background=True)``,
  eager steps while a forked child compiles;
* :mod:`~graph_adapter.tuning.inductor`: the tuner the core calls.

These modules touch torch's inductor and Dynamo internals by design (listed in
``docs/dev/ARCHITECTURE.md``); the measurements behind each entry are in
``docs/dev/RESULTS.md``. It may import :mod:`graph_adapter.format`, ``nn`` and
:mod:`graph_adapter.backends` (rank below); the core never imports it.
"""
from __future__ import annotations

import os
from typing import Dict

import torch

from ..backends import register_tuner
from . import registry, rewrites
from .background import BACKGROUND_DEFAULT, BackgroundEngine, BackgroundStats
from .inductor import InductorTuner
from .registry import Entry, disabled, enabled, replaced

__all__ = ["registry", "rewrites", "Entry", "disabled", "enabled", "replaced",
           "rewrite_exported", "InductorTuner", "BackgroundEngine", "BackgroundStats",
           "BACKGROUND_DEFAULT", "ON"]

#: Whether the wing is on in this process (``GRAPH_ADAPTER_TUNING=0`` at import: off).
ON = os.environ.get("GRAPH_ADAPTER_TUNING", "1") != "0"


def rewrite_exported(gm: torch.fx.GraphModule) -> Dict[str, int]:
    """Apply the enabled rewrites meant for exported programs (the ``"exported"``
    point: today ``project_embedding_tables``) to ``gm``'s graph in place; return what
    fired (name -> count; empty with the wing off). The caller drops dead nodes and
    recompiles ``gm``."""
    if not ON:
        return {}
    return registry.fired(registry.run_point("exported", gm.graph))


if ON:
    register_tuner(InductorTuner())
