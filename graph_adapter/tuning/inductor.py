"""The tuning wing's :class:`~graph_adapter.backends.Tuner`: what ``"inductor"`` runs with it.

:class:`InductorTuner` compiles each Dynamo graph through inductor's
``compile_fx`` with the registry's enabled entries (:func:`compile_graph`: the
passes of each point, the settings, the ``index_add`` gradients, the host checks
answered from disk, the generated code read for atomic adds), and serves
precompiled entries (:mod:`.precompile`) and background compiles
(:mod:`.background`) to the compile core. ``import graph_adapter.tuning``
registers one (:func:`graph_adapter.backends.register_tuner`).
"""
from __future__ import annotations

import collections
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import nn

from ..backends import Engine, EngineSettings, InductorCompile
from . import background as _background
from . import cpu_settings as _cpu
from . import host_checks as _host_checks
from . import precompile as _precompile
from .registry import enabled

__all__ = ["InductorTuner", "compile_graph"]


def compile_graph(gm: torch.fx.GraphModule, example_inputs: List[Any],
                  settings: EngineSettings) -> InductorCompile:
    """Compile one Dynamo graph with inductor and the enabled entries; ``rewrites``
    of the result counts what fired (a live count: a backward compiled later adds
    to it)."""
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx

    fired: Dict[str, int] = collections.Counter()
    keyed = enabled("index_add_gradients")
    fallback = keyed and _cpu.use_index_add_fallback(settings.index_add_fallback)
    decomps = _cpu.decompositions(fallback)
    patches = {**_cpu.config_patches(cpu_inference=_cpu.is_cpu_inference(example_inputs),
                                     fired=fired),
               **(settings.options or {})}
    if keyed:  # the decomposition table is not in inductor's cache key: put it there
        patches["post_grad_custom_pre_pass"] = _cpu.key_decompositions(
            fallback, patches.get("post_grad_custom_pre_pass", config.post_grad_custom_pre_pass))
    with config.patch(patches), _host_checks.remembered_host_checks(), \
            _cpu.quiet_proxy_executor_notice():
        def run() -> Any:
            return compile_fx(gm, example_inputs, decompositions=decomps)

        if enabled("read_atomic_adds"):
            fn, atomic = _cpu.compile_and_scan(run)
        else:
            from torch._functorch import config as functorch_config

            with functorch_config.patch(**_cpu.functorch_patches()):
                fn, atomic = run(), None
    return InductorCompile(fn, atomic, fired)


class InductorTuner:
    """What the compile core asks of the tuning wing (:class:`~graph_adapter.backends.Tuner`)."""

    name = "graph_adapter.tuning"

    def compile_inductor(self, gm: torch.fx.GraphModule, example_inputs: List[Any],
                         settings: EngineSettings) -> InductorCompile:
        return compile_graph(gm, example_inputs, settings)

    def precompile_by_default(self) -> bool:
        return _precompile.ENABLED

    def precompiled_calls(self, wrapped: nn.Module, entry: Callable[..., Any],
                          backend: Callable[..., Any],
                          settings: EngineSettings) -> _precompile.PrecompiledEntries:
        return _precompile.PrecompiledEntries(wrapped, entry, backend, settings)

    def precompiled_counts(self) -> Tuple[int, int]:
        return _precompile.COUNTS["loaded"], _precompile.COUNTS["saved"]

    def plan_background(self, backend: str, engine: Any, wrapped: nn.Module,
                        background: Optional[bool], precompile: Optional[bool]) -> bool:
        return _background.plan_background(backend, engine, wrapped, background, precompile)

    def in_background(self, wrapped: nn.Module, engine: Engine) -> Engine:
        return _background.BackgroundEngine(wrapped, engine)
