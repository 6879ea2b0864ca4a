"""The micro-batch dim: a leading ``F`` on every tensor of a flat dict, in one place.

poptorch splits dim 0 of every input by ``F = deviceIterations x replicationFactor
x gradientAccumulation`` (``docs/ipu.md``), so a host batch for it carries a new
leading dim ``F`` and the model sees one micro-batch (``[...]``) at a time. A dict
has that dim iff ``graph_mask.dim() == 2`` (the contract's rule,
:func:`graph_adapter.contract.has_micro_batch_dim`). The loaders stack micro-batches
(:func:`stack_micro_batches`), the backends and the IPU emulator run them one at a
time (:func:`split_micro_batches`, :func:`per_micro_batch`), and the value checks
read each one (:func:`micro_batches_of`).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Sequence

import torch
from torch import Tensor

from ..contract import GRAPH_MASK, has_micro_batch_dim
from .torch_internals import pytree

__all__ = ["has_micro_batch_dim", "num_micro_batches", "micro_batch", "split_micro_batches",
           "stack_micro_batches", "strip_micro_batch", "per_micro_batch", "micro_batches_of",
           "host_micro_batch"]


def num_micro_batches(flat: Mapping[str, Tensor]) -> int:
    """``F`` of a dict with a micro-batch dim, else 1."""
    return flat[GRAPH_MASK].size(0) if has_micro_batch_dim(flat) else 1


def micro_batch(flat: Mapping[str, Any], i: int) -> Dict[str, Any]:
    """Micro-batch ``i`` of a dict with a micro-batch dim (that dim removed)."""
    return {k: v[i] for k, v in flat.items()}


def split_micro_batches(flat: Mapping[str, Tensor]) -> List[Dict[str, Tensor]]:
    """The micro-batches of ``flat``, each without the micro-batch dim (``[flat]`` if it has none)."""
    if not has_micro_batch_dim(flat):
        return [dict(flat)]
    return [micro_batch(flat, i) for i in range(flat[GRAPH_MASK].size(0))]


def stack_micro_batches(flats: Sequence[Mapping[str, Tensor]]) -> Dict[str, Tensor]:
    """Inverse of :func:`split_micro_batches`: a new leading dim ``F = len(flats)``."""
    if not flats:
        raise ValueError("stack_micro_batches needs at least one micro-batch")
    return {k: torch.stack([f[k] for f in flats]) for k in flats[0]}


def strip_micro_batch(flat: Mapping[str, Tensor]) -> Dict[str, Tensor]:
    """Remove a leading micro-batch dim of size 1 (error if it is larger)."""
    if not has_micro_batch_dim(flat):
        return dict(flat)
    f = flat[GRAPH_MASK].size(0)
    if f != 1:
        raise ValueError(
            f"the flat dict has a leading micro-batch dim of size {f}; the wrapped model takes "
            f"one micro-batch at a time. Split it (graph_adapter.compile's poptorch backends do), "
            f"or index it: {{k: v[i] for k, v in flat.items()}}."
        )
    return micro_batch(flat, 0)


def per_micro_batch(run: Callable[[Dict[str, Tensor]], Dict[str, Tensor]],
                    flat: Mapping[str, Tensor]) -> Dict[str, Tensor]:
    """``run`` on each micro-batch of ``flat``, outputs stacked on a new dim 0 (``[F, ...]``)."""
    if GRAPH_MASK in flat and num_micro_batches(flat) > 1:
        return stack_micro_batches([run(mb) for mb in split_micro_batches(flat)])
    return run(dict(flat))


def micro_batches_of(flat: Mapping[str, Tensor]) -> List[Dict[str, Tensor]]:
    """``flat``'s micro-batches (split on a leading micro-batch dim), ``[flat]`` without
    one, ``[]`` when its leading dims do not split (a malformed dict: nothing to check)."""
    try:
        if GRAPH_MASK in flat and has_micro_batch_dim(flat):
            return split_micro_batches(flat)
    except Exception:  # noqa: BLE001 - inconsistent leading dims
        return []
    return [dict(flat)]


def host_micro_batch(obj: Any, micro_batches: int, i: int) -> Any:
    """Micro-batch ``i`` of ``micro_batches`` of a host batch, as poptorch splits dim 0.

    ``obj`` is any nest of tuples, lists and dicts of tensors (what poptorch takes).
    A tensor ``[n, ...]`` becomes ``[n / F, ...]``: a batch from
    ``FixedSizeLoader(micro_batches=F)`` (``[F, ...]``) gives the model a
    leading dim 1. Tensors that do not split (0-d, or ``n`` not a multiple of
    ``F``) are passed whole; ``IPUOptions.split_problems`` reports them.
    """
    F = micro_batches
    if F == 1:
        return obj

    def part(t: Any) -> Any:
        if isinstance(t, Tensor) and t.dim() and t.size(0) % F == 0:
            return t.reshape(F, -1, *t.shape[1:])[i]
        return t

    return pytree.tree_map(part, obj, is_leaf=lambda v: not isinstance(v, (tuple, list, dict)))
