"""Masked losses: means over real graphs or nodes, NaN targets ignored, static shapes.

Every helper takes ``(pred, target, mask)`` with ``mask`` a boolean row mask
(``batch.graph_mask`` for graph-level targets, ``batch.node_mask`` for
node-level ones) and returns a scalar: the mean of the element-wise loss over
the elements whose row is real and whose target is not NaN. Nothing is
indexed with a boolean mask (``torch.where`` and sums only), so shapes stay
static and the gradient never sees a NaN (padding targets are NaN by the
format). On an unpadded batch with ``mask`` all True and no NaN target, each
equals its ``torch.nn.functional`` counterpart with ``reduction="mean"``.

:func:`masked_loss` builds the ``loss_fn(output, batch)`` that
``ipu_wrap(model, loss_fn=...)`` calls inside the compiled region.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from ..format import MASK_OF_LEVEL

__all__ = ["masked_mean", "masked_mse_loss", "masked_l1_loss", "masked_bce_with_logits",
           "masked_cross_entropy", "masked_loss", "MaskedLoss", "global_mean_scale"]


def _expand(mask: Tensor, like: Tensor) -> Tensor:
    mask = mask.bool()
    return mask.view(mask.shape + (1,) * (like.dim() - mask.dim())).expand_as(like)


def _rows(mask: Tensor, like: Tensor) -> Tensor:
    """``mask`` viewed to broadcast along ``like``'s trailing dims (no expand)."""
    mask = mask.bool()
    if mask.dim() == like.dim():
        return mask  # a view to the same shape would be one more op
    return mask.view(mask.shape + (1,) * (like.dim() - mask.dim()))


def _as_pred(target: Tensor, pred: Tensor) -> Tensor:
    """``target`` viewed as ``pred`` when it has as many elements (``[G]`` for ``[G, 1]``)."""
    if target.shape == pred.shape or target.numel() != pred.numel():
        return target
    return target.view_as(pred)


def masked_mean(values: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """Mean of ``values`` over elements where ``mask`` (broadcast along trailing dims)."""
    if mask is None:
        return values.mean()
    m = _expand(mask, values)
    # a 0-d zero, not zeros_like: the same where, without a full tensor of zeros
    total = torch.where(m, values, values.new_zeros(())).sum()
    return total / m.sum().clamp(min=1).to(values.dtype)


def _valid(target: Tensor, mask: Optional[Tensor], like: Tensor) -> Tensor:
    """Where an element counts: its row is real and its target is not NaN; ``like``'s shape.

    ``target == target`` is the NaN test (one op; ``~isnan`` is two).
    """
    if target.is_floating_point():
        valid = target == target
        if mask is not None:
            valid = _rows(mask, like) & valid
    elif mask is not None:
        valid = _rows(mask, like)
    else:
        return torch.ones_like(like, dtype=torch.bool)
    return valid if valid.shape == like.shape else valid.expand_as(like)


def _elementwise(fn: Callable[[Tensor, Tensor], Tensor], pred: Tensor, target: Tensor,
                 mask: Optional[Tensor]) -> Tensor:
    target = _as_pred(target, pred)
    valid = _valid(target, mask, pred)
    # Both inputs of fn are made finite (padding targets are NaN: a NaN there
    # would reach the gradient as 0 * NaN) and its output is zeroed off the valid
    # elements (fn(0, 0) need not be 0: BCE gives log 2). One 0-d zero serves
    # the three wheres.
    zero = pred.new_zeros(())
    safe_target = torch.where(valid, target.to(pred.dtype), zero)
    safe_pred = torch.where(valid, pred, zero)
    loss = torch.where(valid, fn(safe_pred, safe_target), zero)
    return loss.sum() / valid.sum().clamp(min=1).to(pred.dtype)


def _of_difference(fn: Callable[[Tensor], Tensor], pred: Tensor, target: Tensor,
                   mask: Optional[Tensor]) -> Tensor:
    """``_elementwise`` for a loss of ``pred - target`` with ``fn(0) == 0`` (MSE, L1).

    One ``where`` on the difference does what ``_elementwise``'s three do: a
    NaN target's difference is replaced, not multiplied by zero, so the
    gradient there is ``fn'(0) * 0``-free (``where``'s backward selects), and
    ``fn(0) == 0`` needs no mask after ``fn``. On valid elements the
    difference, the loss and its gradient are those of ``_elementwise``, bit
    for bit (same ops, same order).
    """
    target = _as_pred(target, pred)
    valid = _valid(target, mask, pred)
    diff = torch.where(valid, pred - target.to(pred.dtype), pred.new_zeros(()))
    return fn(diff).sum() / valid.sum().clamp(min=1).to(pred.dtype)


def masked_mse_loss(pred: Tensor, target: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """Mean squared error over real rows and non-NaN targets."""
    return _of_difference(lambda d: d ** 2, pred, target, mask)


def masked_l1_loss(pred: Tensor, target: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """Mean absolute error over real rows and non-NaN targets."""
    return _of_difference(torch.abs, pred, target, mask)


def masked_bce_with_logits(pred: Tensor, target: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    """Binary cross-entropy on logits over real rows and non-NaN targets."""
    return _elementwise(
        lambda p, t: F.binary_cross_entropy_with_logits(p, t, reduction="none"), pred, target, mask
    )


def masked_cross_entropy(logits: Tensor, target: Tensor, mask: Optional[Tensor] = None,
                         ignore_index: int = -100) -> Tensor:
    """Cross-entropy of ``logits`` [R, C] with integer ``target`` [R] over real rows.

    Targets equal to ``ignore_index`` are skipped too (as torch does).
    """
    target = (target if target.dim() == 1 else target.view(-1)).long()
    valid = target != ignore_index
    if mask is not None:
        mask = mask.bool()
        valid = valid & (mask if mask.dim() == 1 else mask.view(-1))
    safe = torch.where(valid, target, target.new_zeros(()))
    loss = F.cross_entropy(logits, safe, reduction="none")
    loss = torch.where(valid, loss, loss.new_zeros(()))
    return loss.sum() / valid.sum().clamp(min=1).to(logits.dtype)


_KINDS = {
    "mse": masked_mse_loss,
    "l1": masked_l1_loss,
    "bce": masked_bce_with_logits,
    "cross_entropy": masked_cross_entropy,
}


def masked_loss(kind: Union[str, Callable] = "mse", target: str = "y", level: str = "graph",
                output_key: Optional[Union[int, str]] = None) -> Callable:
    """A ``loss_fn(output, batch)`` for ``ipu_wrap``.

    Args:
        kind: ``"mse"``, ``"l1"``, ``"bce"``, ``"cross_entropy"`` or a
            ``fn(pred, target, mask)``.
        target: the batch attribute holding the target.
        level: ``"graph"`` (mask ``batch.graph_mask``), ``"node"``
            (``batch.node_mask``) or ``"edge"`` (``batch.edge_mask``).
        output_key: pick ``output[output_key]`` when the model returns a
            tuple or dict.

    Returns:
        A :class:`MaskedLoss`: ``loss_fn(output, batch)`` is the mean over the real
        rows whose target is not NaN (padding rows weigh nothing);
        ``.count(batch)`` is how many elements it averaged.

    Raises:
        ValueError: a ``level`` other than ``"graph"``, ``"node"``, ``"edge"``.
        KeyError: a ``kind`` name that is none of the four.

    Example:
        ```python
        import torch
        from torch_geometric.data import Batch, Data

        from graph_adapter import masked_loss

        batch = Batch.from_data_list([Data(num_nodes=2, y=torch.tensor([1.0])),
                                      Data(num_nodes=1, y=torch.tensor([0.0]))])
        batch.graph_mask = torch.tensor([True, False])  # graph slot 1 is padding
        loss = masked_loss("mse")(torch.tensor([3.0, 100.0]), batch)
        assert loss.item() == 4.0  # (3 - 1) ** 2: the padding slot is not counted
        ```
    """
    fn = _KINDS[kind] if isinstance(kind, str) else kind
    if level not in ("graph", "node", "edge"):
        raise ValueError(f"level={level!r}; choose 'graph', 'node' or 'edge'")
    name = f"masked_{kind if isinstance(kind, str) else getattr(kind, '__name__', 'loss')}"
    return MaskedLoss(fn, target, MASK_OF_LEVEL[level], output_key, name)


class MaskedLoss:
    """The ``loss_fn(output, batch)`` that :func:`masked_loss` returns.

    A plain object, not a closure, so that a wrapped model pickles with its loss
    (Lightning's ``ddp_spawn`` sends the module to each process; ``torch.save``).
    """

    def __init__(self, fn: Callable, target: str, mask_name: str,
                 output_key: Optional[Union[int, str]], name: str):
        self.fn, self.target, self.mask_name, self.output_key = fn, target, mask_name, output_key
        self.__name__ = name

    def __call__(self, output: Any, batch: Any) -> Tensor:
        pred = output if self.output_key is None else output[self.output_key]
        return self.fn(pred, batch[self.target], batch[self.mask_name])

    def count(self, batch: Any) -> Tensor:
        """How many target elements this loss's mean divides by in ``batch``: real
        rows with a non-NaN target (cross-entropy: a target that is not -100).

        Up to a factor the same on every rank (a ``[G]`` target against a ``[G, d]``
        prediction counts ``G``, the mean ``G * d``), which :func:`global_mean_scale`
        does not see: it uses only the ratio of a rank's count to the sum.
        """
        target, mask = batch[self.target], batch[self.mask_name].bool()
        if self.fn is masked_cross_entropy:
            valid = target.reshape(-1) != -100
            return (valid & mask.reshape(-1)).sum()
        valid = target == target if target.is_floating_point() else \
            torch.ones_like(target, dtype=torch.bool)
        return (valid & _rows(mask, valid)).sum()

    def __repr__(self) -> str:
        return (f"{self.__name__}(target={self.target!r}, mask={self.mask_name!r}"
                + ("" if self.output_key is None else f", output_key={self.output_key!r}") + ")")


def global_mean_scale(count: Union[int, Tensor], group: Any = None) -> Tensor:
    """The factor that turns this rank's masked-mean loss into its share of the mean
    over every rank's real elements, under ``DistributedDataParallel``.

    DDP averages gradients over ranks; ranks whose batches hold different numbers
    of real graphs (a fill batch holds none) then weigh their graphs unequally.
    Multiplying each rank's mean by ``world_size * count / sum(counts)`` (``count``:
    this rank's, e.g. :meth:`MaskedLoss.count`, summed over ranks with one
    ``all_reduce`` of a scalar) makes DDP's averaged gradient exactly that of the
    mean loss over every real element of the step, as one process with all the
    ranks' graphs in one batch. ``0`` when no rank has a real element; ``1``
    without a process group of more than one rank. A collective: every rank of
    ``group`` calls it once a step::

        out = step(batch)
        (out["loss"] * global_mean_scale(loss_fn.count(batch))).backward()

    Returns a 0-d float64 tensor on ``count``'s device (CPU for an int).
    """
    dist = torch.distributed
    c = torch.as_tensor(count, dtype=torch.float64)
    if not (dist.is_available() and dist.is_initialized()):
        return torch.ones((), dtype=torch.float64, device=c.device)
    world = dist.get_world_size(group)
    if world == 1:
        return torch.ones((), dtype=torch.float64, device=c.device)
    total = c.detach().clone().reshape(1)
    dist.all_reduce(total, group=group)
    if float(total) == 0:
        return torch.zeros((), dtype=torch.float64, device=c.device)
    return world * c.detach() / total[0]
