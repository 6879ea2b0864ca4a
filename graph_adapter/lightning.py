"""Train ``ipu_wrap``-ped models with Lightning on flat-dict batches (optional extra).

``pip install graph_adapter[lightning]``. Two pieces:

* :class:`FlatDictBatchMixin`: put it first in the bases of your own
  ``LightningModule``; batch transfer then moves the tensors of a flat dict
  (``{key: tensor}``) one by one and refuses PyG objects, so ``.to()`` is never
  called on a PyG ``Data``/``Batch`` (the call that failed with "There is no
  active dispatch" on poptorch's dispatcher once ``traceModel(True)`` was gone).
* :class:`FlatDictModule`: a ready ``LightningModule`` around a wrapped model
  (``ipu_wrap(model, loss_fn=...)``): ``training_step`` returns the ``"loss"``
  output (averaged when poptorch hands back one loss per micro-batch), logs
  ``train_loss`` / ``val_loss``, and builds the optimizer you pass.

Feed it ``FixedSizeLoader`` batches. On CPU/GPU use ``micro_batches=1`` and
``Trainer(accumulate_grad_batches=A)`` for accumulation. On IPUs, through
``lightning-graphcore``'s ``IPUStrategy`` (not tested here: no IPU, and it
needs poptorch), build the loader with ``micro_batches=IPUOptions(...).micro_batches``
and pass the matching ``poptorch.Options`` (``IPUOptions.to_poptorch()``) as
the strategy's ``training_opts``; ``docs/ipu.md`` has the recipe.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Optional

import torch
from torch import Tensor, nn

from .format import LOSS_KEY, loss_of

try:  # Lightning 2.x ships as ``lightning``; older installs as ``pytorch_lightning``.
    import lightning.pytorch as pl
except ImportError:  # pragma: no cover - depends on the machine
    try:
        import pytorch_lightning as pl  # type: ignore[no-redef]
    except ImportError as exc:
        raise ImportError(
            "graph_adapter.lightning needs Lightning: pip install 'graph_adapter[lightning]' "
            f"(or pip install lightning). Original error: {exc!r}"
        ) from exc

__all__ = ["FlatDictBatchMixin", "FlatDictModule", "move_flat"]


def move_flat(batch: Any, device: torch.device) -> Any:
    """Move every tensor of a flat dict (or list/tuple of them) to ``device``.

    Raises:
        TypeError: ``batch`` is (or holds) a PyG ``Data``/``Batch``: flatten it
            first (``FixedSizeLoader`` yields flat dicts), since ``.to()`` on a
            PyG object is what poptorch's dispatcher rejects.
    """
    from torch_geometric.data.data import BaseData

    if isinstance(batch, BaseData):
        raise TypeError(
            f"got a PyG {type(batch).__name__} as a batch: graph_adapter never calls .to() on "
            f"PyG objects (poptorch's dispatcher fails with 'There is no active dispatch'). "
            f"Use FixedSizeLoader, which yields flat dicts of tensors."
        )
    if isinstance(batch, Tensor):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return {k: move_flat(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_flat(v, device) for v in batch)
    return batch


class FlatDictBatchMixin:
    """Batch transfer for flat dicts: tensors moved one by one, PyG objects refused."""

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        return move_flat(batch, device)


def _loss(out: Any, key: str) -> Tensor:
    loss = loss_of(out, key)
    # poptorch returns one loss per micro-batch (output mode all/every_n) or
    # per replica (final/sum); the Mean reduction makes their mean the step's loss.
    return loss.mean() if loss.dim() else loss


class FlatDictModule(FlatDictBatchMixin, pl.LightningModule):
    """A ``LightningModule`` for a wrapped model that takes a flat dict.

    Args:
        wrapped: e.g. ``ipu_wrap(model, loss_fn=masked_loss("mse"))``; forward
            takes a flat dict and returns a dict with ``"loss"``.
        optimizer: ``fn(parameters) -> torch.optim.Optimizer`` (default: Adam, ``lr``).
        lr: learning rate of the default optimizer.
        loss_key: where the loss is in the output dict.
    """

    def __init__(
        self,
        wrapped: nn.Module,
        optimizer: Optional[Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]] = None,
        lr: float = 1e-3,
        loss_key: str = LOSS_KEY,
    ) -> None:
        super().__init__()
        self.model = wrapped
        self._optimizer = optimizer
        self.lr = lr
        self.loss_key = loss_key

    def forward(self, batch: Mapping[str, Tensor]) -> Any:
        return self.model(batch)

    def training_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> Tensor:
        loss = _loss(self.model(batch), self.loss_key)
        self.log("train_loss", loss.detach(), prog_bar=True, batch_size=1)
        return loss

    def validation_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> Tensor:
        loss = _loss(self.model(batch), self.loss_key)
        self.log("val_loss", loss.detach(), prog_bar=True, batch_size=1)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        if self._optimizer is not None:
            return self._optimizer(self.parameters())
        return torch.optim.Adam(self.parameters(), lr=self.lr)
