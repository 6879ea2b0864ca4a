"""Normalisation layers that pool statistics over real rows only.

In ``train()`` a BatchNorm computes its batch mean and variance over every
row, padding included, so a padded batch would give different outputs and
running statistics than the unpadded one. :func:`mask_norms` swaps, in
place, the class of every ``torch.nn.BatchNorm1d`` of a model (PyG's
``torch_geometric.nn.norm.BatchNorm`` wraps one, so it is covered) for
:class:`MaskedBatchNorm1d`: same parameters, buffers, hooks and
``state_dict`` keys, so checkpoints load both ways.

Inside an ``ipu_wrap``-ped forward (a frame of :mod:`graph_adapter.static` is
active) and in ``train()`` mode, :class:`MaskedBatchNorm1d` takes the mask
whose length equals the row count (``node_mask`` for ``N`` rows,
``graph_mask`` for ``G``, ``edge_mask`` for ``E``; when ``E`` equals ``N`` or ``G``
the node or graph mask wins) and computes the batch
statistics over the real rows only; the running statistics are updated as
torch does (momentum, or a cumulative average when ``momentum=None``;
unbiased variance). Outside a frame, or in ``eval()``, it is exactly
``BatchNorm1d``.

PyG norms that compute a per-graph size themselves (``GraphNorm``,
``InstanceNorm``, ``LayerNorm(mode="graph")``, ``PairNorm``,
``MeanSubtractionNorm``) get the static ``batch_size`` from the frame when
they are called with the batch vector and no ``batch_size``.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from . import static

__all__ = ["MaskedBatchNorm1d", "mask_norms", "masked_batch_norm"]


def _row_mask(rows: int, op: str) -> Optional[Tensor]:
    frame = static.current_frame()
    if frame is None:
        return None
    found = [m for m in frame["row_masks"] if m.size(0) == rows]
    if not found:
        raise static.StaticSizeError(
            f"{op}: input has {rows} rows, which matches no mask of the padded batch "
            f"(nodes, graphs, edges); BatchNorm statistics would include padding rows. "
            f"Normalise node-, graph- or edge-level tensors only, or use eval()."
        )
    first = found[0]
    # row_masks is ordered node, graph, edge: an edge-level tie loses (node-
    # and graph-level norms are the common ones); a node/graph tie is an error.
    if len(found) > 1 and found[1] is not first and frame["graph_mask"] is not None \
            and found[1] is frame["graph_mask"]:
        raise static.StaticSizeError(
            f"{op}: input has {rows} rows and the padded batch has as many nodes as graph "
            f"slots, so it cannot tell node rows from graph rows; choose a budget where "
            f"they differ."
        )
    return first


def masked_batch_norm(x: Tensor, mask: Tensor, bn: nn.modules.batchnorm._BatchNorm) -> Tensor:
    """Training-mode batch norm of ``x`` ([R, C] or [R, C, L]) over rows where ``mask``."""
    if x.dim() == 2:
        # Reductions over rows as [1, R] @ [R, C] products: one pass each.
        m = mask.to(x.dtype).view(1, -1)
        count = m.sum()
        count_c = count.clamp(min=1.0)
        mean = (m @ x).view(-1) / count_c
        centered = x - mean
        var = (m @ (centered * centered)).view(-1) / count_c
        cshape = [1, -1]
    else:
        reduce_dims = [0] + list(range(2, x.dim()))
        shape = [-1] + [1] * (x.dim() - 1)
        m = mask.to(x.dtype).view(shape)
        per_row = 1
        for d in range(2, x.dim()):
            per_row *= x.size(d)
        count = m.sum() * per_row
        count_c = count.clamp(min=1.0)
        mean = (x * m).sum(dim=reduce_dims) / count_c
        cshape = [1, -1] + [1] * (x.dim() - 2)
        centered = x - mean.view(cshape)
        var = (centered * centered * m).sum(dim=reduce_dims) / count_c
    if bn.track_running_stats and bn.running_mean is not None:
        if bn.num_batches_tracked is not None:
            bn.num_batches_tracked.add_(1)
        if bn.momentum is None:
            factor = 1.0 / bn.num_batches_tracked.to(x.dtype)
        else:
            factor = bn.momentum
        with torch.no_grad():
            unbiased = var.detach() * count / (count - 1).clamp(min=1.0)
            bn.running_mean.mul_(1 - factor).add_(mean.detach() * factor)
            bn.running_var.mul_(1 - factor).add_(unbiased * factor)
    scale = torch.rsqrt(var + bn.eps)
    if bn.affine:
        scale = scale * bn.weight
        return torch.addcmul(bn.bias.view(cshape), centered, scale.view(cshape))
    return centered * scale.view(cshape)


class MaskedBatchNorm1d(nn.BatchNorm1d):
    """``BatchNorm1d`` whose training statistics skip padding rows (see module doc)."""

    def forward(self, x: Tensor) -> Tensor:
        use_batch = self.training or not self.track_running_stats
        if use_batch and static.current_frame() is not None:
            mask = _row_mask(x.size(0), "BatchNorm1d")
            if mask is not None:
                return masked_batch_norm(x, mask, self)
        return super().forward(x)


class _BatchSizeFromFrame:
    """Mixin: fill ``batch_size`` from the frame when called with the batch vector."""

    def forward(self, x: Tensor, batch: Optional[Tensor] = None, batch_size: Optional[int] = None,
                *args, **kwargs):
        frame = static.current_frame()
        if batch is not None and batch_size is None and frame is not None:
            batch_size = static._index_size(frame, batch, type(self).__name__, "batch_size")
        return super().forward(x, batch, batch_size, *args, **kwargs)


_SWAPPED: dict = {}


def _batch_size_class(cls: type) -> type:
    new = _SWAPPED.get(cls)
    if new is None:
        new = type(cls.__name__, (_BatchSizeFromFrame, cls), {"__module__": cls.__module__,
                                                               "__qualname__": cls.__qualname__})
        _SWAPPED[cls] = new
    return new


def _batch_size_norms() -> tuple:
    import torch_geometric.nn.norm as N

    out = []
    for name in ("GraphNorm", "InstanceNorm", "LayerNorm", "PairNorm", "MeanSubtractionNorm"):
        cls = getattr(N, name, None)
        if cls is not None:
            out.append(cls)
    return tuple(out)


def mask_norms(model: nn.Module) -> int:
    """Swap, in place, the class of the model's batch-pooling norms (see module doc).

    Returns how many modules were swapped. Idempotent.
    """
    swapped = 0
    fixed = _batch_size_norms()
    for m in model.modules():
        if type(m) is nn.BatchNorm1d:
            m.__class__ = MaskedBatchNorm1d
            swapped += 1
        elif type(m) in fixed:
            m.__class__ = _batch_size_class(type(m))
            swapped += 1
    return swapped
