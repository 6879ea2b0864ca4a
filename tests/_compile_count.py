"""A cheap Dynamo backend that counts compiles (shared by the static-op tests).

``torch.compile(model, backend=counter)`` hands each captured graph to
``counter``, which records it and runs it as captured (``gm.forward``, no
inductor), or through ``aot_eager`` with ``aot=True`` (autograd traced too, as
a training compile would be). ``len(counter.graphs)`` is the compile count.
"""
from __future__ import annotations

from typing import Any, Callable, List, Tuple

import torch
import torch._dynamo


class CompileCounter:
    """A Dynamo backend recording every graph it compiles (see the module docstring)."""

    def __init__(self, aot: bool = False):
        self.graphs: List[torch.fx.GraphModule] = []
        self._aot = torch._dynamo.lookup_backend("aot_eager") if aot else None

    def __call__(self, gm: torch.fx.GraphModule, inputs: List[Any]) -> Callable:
        self.graphs.append(gm)
        return self._aot(gm, inputs) if self._aot is not None else gm.forward

    @property
    def count(self) -> int:
        return len(self.graphs)


def compile_counted(model: torch.nn.Module, aot: bool = False) -> Tuple[Callable, CompileCounter]:
    """``torch.compile(model, fullgraph=True, dynamic=False)`` after a Dynamo reset,
    with a fresh :class:`CompileCounter` as the backend."""
    torch._dynamo.reset()
    counter = CompileCounter(aot=aot)
    return torch.compile(model, fullgraph=True, dynamic=False, backend=counter), counter
