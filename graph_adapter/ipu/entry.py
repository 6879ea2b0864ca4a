"""``compile_ipu``: the entry point of the IPU backends (``graph_adapter.compile`` calls it)."""
from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional

import torch
from torch import nn

from .emulator import IPUEmulator
from .options import IPUOptions
from .poptorch_backend import build_poptorch

__all__ = ["IPU_BACKENDS", "compile_ipu"]


def _emulator(wrapped: nn.Module, options: IPUOptions, optimizer: Optional[torch.optim.Optimizer],
              training: bool, check_bounds: Optional[bool] = None, **kwargs: Any) -> IPUEmulator:
    """On CPU: what poptorch does with inputs, outputs and optimizer steps
    (``check_bounds`` unused: the emulator's eager forward names a bad value)."""
    return IPUEmulator(wrapped, options, optimizer=optimizer, training=training, **kwargs)


#: The IPU backends: name -> ``build(wrapped, options, optimizer, training, **kwargs)``.
IPU_BACKENDS: Dict[str, Callable[..., Any]] = {
    "poptorch": build_poptorch,
    "ipu-emulator": _emulator,
}


def _as_options(options: Any) -> IPUOptions:
    if options is None:
        return IPUOptions()
    if isinstance(options, Mapping):
        return IPUOptions(**options)
    if not isinstance(options, IPUOptions):
        raise TypeError(f"options must be a graph_adapter.IPUOptions, got {type(options).__name__}")
    return options


def compile_ipu(
    wrapped: nn.Module,
    backend: str,
    options: Optional[IPUOptions] = None,
    optimizer: Optional[torch.optim.Optimizer] = None,
    **kwargs: Any,
) -> Any:
    """Compile ``wrapped`` (a module taking a flat dict) for the IPU or its CPU emulation.

    Args:
        wrapped: e.g. ``ipu_wrap(model, loss_fn)``; its forward takes a flat
            dict and returns a dict (``"loss"`` when training).
        backend: ``"poptorch"`` or ``"ipu-emulator"``.
        options: an :class:`IPUOptions` or a dict of its fields (default: all
            ones, output mode all).
        optimizer: a ``torch.optim`` optimizer (or a ``poptorch.optim`` one for
            the poptorch backend); training when given.
        kwargs: ``training`` forces training (poptorch's default SGD
            lr=0.01) or inference. For ``"poptorch"``: ``poptorch`` (a module to use instead of
            importing it), ``poptorch_options`` (a ``poptorch.Options`` to fill
            in), ``pyg_arg_parser`` (opt in to the PyG arg parser, default
            False; never replaces poptorch_geometric's), ``allow_new_shapes`` (on a new input signature, ``destroy()``
            and recompile, as poptorch's error message advises); the rest go to ``poptorch.trainingModel`` /
            ``inferenceModel``. For ``"ipu-emulator"``: ``loss_key``,
            ``narrow_inputs``, ``narrow_ints``, ``allow_new_shapes`` (re-record the signature).

    Returns:
        a :class:`~graph_adapter.ipu.PoptorchRunner` or an :class:`IPUEmulator`:
        both are called with one host batch whose tensors carry a leading dim
        ``options.micro_batches``, switch mode with ``.train()`` / ``.eval()``
        and, in training, step the optimizer themselves (``steps_optimizer``).

    Raises:
        ValueError: a ``backend`` that is not an IPU backend.
        TypeError: ``options`` that is neither an ``IPUOptions`` nor its dict.
        ImportError: ``"poptorch"`` where poptorch (Poplar SDK) is not installed.

    Example:
        ```python
        from torch_geometric.datasets import FakeDataset
        from torch_geometric.nn import GCN

        from graph_adapter import (Budget, FixedSizeLoader, IPUOptions, compile_ipu,
                                   ipu_wrap)

        graphs = FakeDataset(num_graphs=16, avg_num_nodes=10, num_channels=8)
        opts = IPUOptions(device_iterations=2)
        loader = FixedSizeLoader(graphs, Budget.tight(graphs, 4),
                                 micro_batches=opts.micro_batches)
        runner = compile_ipu(ipu_wrap(GCN(8, 16, 2)), "ipu-emulator", opts)  # or "poptorch"
        out = runner(next(iter(loader)))  # one host batch of 2 micro-batches, one call
        ```
    """
    build = IPU_BACKENDS.get(backend)
    if build is None:
        raise ValueError(f"backend={backend!r}; the IPU backends are {tuple(IPU_BACKENDS)}")
    options = _as_options(options)
    training = kwargs.pop("training", None)
    training = (optimizer is not None) if training is None else bool(training)
    return build(wrapped, options, optimizer, training, **kwargs)
