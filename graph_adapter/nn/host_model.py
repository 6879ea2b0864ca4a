"""The host-model interface: what a training loop calls, whatever runs the model.

A wrapped model (:func:`~graph_adapter.nn.wrap.ipu_wrap`) runs behind one of
several runners: a compiled model of :mod:`graph_adapter.backends`, a saved
export loaded again, poptorch's runner or its CPU emulator
(:mod:`graph_adapter.ipu`). Each is called with a flat dict and returns a
dict, and each subclasses :class:`HostModel` for the rest: ``train(mode)`` /
``eval()`` (a runner that cannot change mode says so in :meth:`_set_mode`),
``parameters()`` of the module it runs, and ``set_optimizer(opt)`` (nothing by
default: the caller steps its own optimizer; runners that own the step, as
poptorch's ``trainingModel`` does, keep it). ``steps_optimizer`` says which.
"""
from __future__ import annotations

from typing import Iterator

import torch
from torch import nn

__all__ = ["HostModel"]


class HostModel:
    """Base of every runner of a wrapped model on the host.

    A subclass provides :attr:`host_module` (the ``nn.Module`` whose parameters
    and mode these are) and, where a mode change does more than
    ``host_module.train(mode)``, overrides :meth:`_set_mode`.
    """

    #: True when a training call runs backward and the optimizer step itself
    steps_optimizer: bool = False

    @property
    def host_module(self) -> nn.Module:
        raise NotImplementedError(f"{type(self).__name__} does not say which module it runs")

    def _set_mode(self, mode: bool) -> None:
        """Put the runner in training (True) or eval mode."""
        self.host_module.train(mode)

    def train(self, mode: bool = True) -> "HostModel":
        self._set_mode(bool(mode))
        return self

    def eval(self) -> "HostModel":
        return self.train(False)

    def parameters(self) -> Iterator[nn.Parameter]:
        return self.host_module.parameters()

    def set_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Nothing to do: the caller steps its own optimizer."""
