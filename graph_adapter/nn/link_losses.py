"""Masked link losses for :class:`~graph_adapter.sampling.link.FixedSizeLinkNeighborLoader` batches.

A link batch has a fixed number of supervision slots (``edge_label_index``
``[2, L]`` / ``edge_label`` ``[L]``, or the triplet keys ``[B]``), the real
ones marked by ``link_mask``; padding slots point at the last padding node
and carry label 0. These losses average over the real slots only, with
``torch.where`` and sums (no boolean indexing: static shapes), so on real
slots they equal ``F.binary_cross_entropy_with_logits(..., reduction="mean")``
of the unpadded batch; a batch without a real slot gives 0.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Union

import torch
from torch import Tensor

from ..format import DST_NEG_INDEX, EDGE_LABEL, LINK_MASK
from .losses import masked_bce_with_logits

__all__ = ["masked_link_bce", "masked_triplet_bce", "link_loss"]


def masked_link_bce(scores: Tensor, edge_label: Tensor, link_mask: Tensor) -> Tensor:
    """BCE with logits of ``scores`` [L] against ``edge_label`` [L] (1 positive, 0
    negative; PyG's binary labels) over the slots where ``link_mask`` [L] is True."""
    return masked_bce_with_logits(scores.reshape(-1), edge_label.reshape(-1).to(scores.dtype),
                                  link_mask.reshape(-1))


def masked_triplet_bce(pos_scores: Tensor, neg_scores: Tensor, link_mask: Tensor) -> Tensor:
    """BCE with logits for triplet batches: ``pos_scores`` [B] (target 1) and
    ``neg_scores`` [B] or [B, k] (target 0), over the rows where ``link_mask`` [B]
    is True; a mean over every real positive and negative score."""
    neg = neg_scores.reshape(pos_scores.size(0), -1)
    scores = torch.cat([pos_scores.reshape(-1, 1), neg], 1)
    target = torch.zeros_like(scores)
    target[:, 0] = 1
    mask = link_mask.reshape(-1, 1).expand_as(scores)
    return masked_bce_with_logits(scores, target, mask)


def link_loss(output_key: Optional[Union[int, str]] = None) -> Callable[[Any, Any], Tensor]:
    """A ``loss_fn(output, batch)`` for ``ipu_wrap``: :func:`masked_link_bce` of the model's
    scores (``output[output_key]`` when it returns a tuple or dict) against the batch's
    ``edge_label`` over ``link_mask``; a triplet batch (``dst_neg_index`` present) takes
    ``output = (pos_scores, neg_scores)`` and :func:`masked_triplet_bce`."""
    def loss_fn(output: Any, batch: Any) -> Tensor:
        out = output if output_key is None else output[output_key]
        if DST_NEG_INDEX in batch:
            pos, neg = out
            return masked_triplet_bce(pos, neg, batch[LINK_MASK])
        return masked_link_bce(out, batch[EDGE_LABEL], batch[LINK_MASK])
    return loss_fn
