"""Compiled models under ``DistributedDataParallel``: ``compile(DDP(wrapped), ...)``.

Dynamo cannot trace DDP's own ``forward`` with ``fullgraph=True`` (it stops in
DDP's logging, ``self.logger.set_runtime_stats_and_log()``), and a trace that
breaks there gives up the one-graph guarantee. So the wrapped module inside DDP
is compiled alone, as every other backend compiles it, and DDP runs eagerly
around it: each call goes through DDP's ``forward`` (buffers broadcast from rank
0, the reducer prepared for backward) with the compiled model standing in for
``ddp.module`` during the call. The parameters are the wrapped module's, the
ones DDP registered its gradient hooks on, so the gradient all-reduce runs as
in eager DDP: when the compiled backward has produced each bucket's gradients.

One compile per rank and mode (every rank has the same budget: the loaders
pad to it). Scale each rank's loss with
:func:`~graph_adapter.nn.global_mean_scale` to average over every rank's real
graphs (:class:`~graph_adapter.lightning.FlatDictModule` does).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Mapping

from torch import Tensor, nn

from ..nn import HostModel

__all__ = ["CompiledDDP", "is_ddp"]


def is_ddp(module: Any) -> bool:
    """Whether ``module`` is a ``torch.nn.parallel.DistributedDataParallel``."""
    return isinstance(module, nn.parallel.DistributedDataParallel)


class _Stand(nn.Module):
    """What ``ddp.module`` is during a call: the compiled model, with the wrapped
    module as its one submodule (so its parameters and buffers are the same)."""

    def __init__(self, wrapped: nn.Module, run: Callable[[Mapping[str, Tensor]], Any]):
        super().__init__()
        self.wrapped = wrapped
        self._run = run

    def forward(self, flat: Mapping[str, Tensor]) -> Any:
        return self._run(flat)


class CompiledDDP(HostModel):
    """What :func:`~graph_adapter.backends.compile` returns for a DDP module.

    Call it with flat dicts as a :class:`~graph_adapter.backends.Compiled`; it
    runs ``ddp(flat)`` with the compiled wrapped model inside.

    Attributes:
        ddp: the user's ``DistributedDataParallel`` (unchanged between calls).
        inner: the compiled wrapped module (``compile(ddp.module, ...)``).
    """

    def __init__(self, ddp: nn.parallel.DistributedDataParallel, inner: Any):
        self.ddp = ddp
        self.inner = inner
        self.wrapped = ddp.module
        self._stand = _Stand(self.wrapped, inner)

    @property
    def host_module(self) -> nn.Module:
        return self.ddp

    @property
    def training(self) -> bool:
        return self.ddp.training

    @property
    def compile_count(self) -> int:
        return self.inner.compile_count

    @property
    def backend(self) -> str:
        return self.inner.backend

    @property
    def steps_optimizer(self) -> bool:  # type: ignore[override]
        return False

    def __call__(self, flat: Mapping[str, Tensor]) -> Dict[str, Tensor]:
        # ddp.module is swapped for the call only: the user's DDP object (its
        # state_dict keys, its module) is what it was before and after
        self.ddp.module = self._stand
        try:
            return self.ddp(flat)
        finally:
            self.ddp.module = self.wrapped
