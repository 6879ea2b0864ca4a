"""Train ``ipu_wrap``-ped models with Lightning on flat-dict batches (optional extra).

``pip install graph_adapter[lightning]``. Two pieces:

* :class:`FlatDictBatchMixin`: put it first in the bases of your own
  ``LightningModule``; batch transfer then moves the tensors of a flat dict
  (``{key: tensor}``) one by one and refuses PyG objects, so ``.to()`` is never
  called on a PyG ``Data``/``Batch`` (the call that failed with "There is no
  active dispatch" on poptorch's dispatcher once ``traceModel(True)`` was gone).
* :class:`FlatDictModule`: a ready ``LightningModule`` around a wrapped model
  (``ipu_wrap(model, loss_fn=...)``): ``training_step`` returns the ``"loss"``
  output, logs ``train_loss`` / ``val_loss``, and builds the optimizer you pass.

Feed it ``FixedSizeLoader`` batches. On CPU/GPU use ``micro_batches=1`` and
``Trainer(accumulate_grad_batches=A)`` for accumulation.

On IPUs, through lightning-graphcore's ``IPUStrategy`` (tested against
:func:`graph_adapter.ipu.emulate_poptorch`, never on an IPU): build the
loader with ``micro_batches=opts.micro_batches`` and the strategy with
``IPUStrategy(**ipu_strategy_options(opts))``, which passes options for both
stages (training, and inference with the same ``F``). There ``training_step``
runs inside the poptorch model on one micro-batch, so :class:`FlatDictModule`
marks its loss with ``poptorch.identity_loss`` (poptorch needs a marked
loss), logs nothing inside the model, and logs the mean of the
per-micro-batch losses poptorch hands back in ``on_train_batch_end`` /
``on_validation_batch_end`` (as graphium did). ``docs/ipu.md`` has the recipe.
"""
from __future__ import annotations

import importlib
import math
import sys
import warnings
from typing import Any, Callable, Dict, Iterable, Mapping, Optional

import torch
from torch import Tensor, nn

from .format import LOSS_KEY, loss_of
from .nn import global_mean_scale

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

__all__ = ["FlatDictBatchMixin", "FlatDictModule", "move_flat", "ipu_strategy_options"]


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
    return loss.float().mean() if loss.dim() else loss


def _poptorch_running() -> Optional[Any]:
    """The poptorch module when this forward runs inside a poptorch model, else None.

    Reads ``sys.modules`` (never imports poptorch): poptorch is only there when
    the user's code (or lightning-graphcore) imported it.
    """
    pt = sys.modules.get("poptorch")
    return pt if pt is not None and pt.isRunningOnIpu() else None


def ipu_strategy_options(options: Any, poptorch: Any = None,
                         precision: Optional[str] = "32-true") -> Dict[str, Any]:
    """Keyword arguments for lightning-graphcore's ``IPUStrategy(**...)``, for both stages.

    Args:
        options: an :class:`~graph_adapter.ipu.IPUOptions`; the loader must
            stack ``options.micro_batches`` micro-batches a host batch.
        poptorch: the poptorch module (default: import it).
        precision: for ``lightning_graphcore.IPUPrecision`` (``"32-true"``,
            ``"16-mixed"``, ``"16-true"``), or None to leave the precision
            plugin out. With Lightning 2.0 the strategy needs it passed: the
            trainer picks ``IPUPrecision`` only for Lightning's own (removed)
            IPU accelerator, and the default plugin would run backward on the
            host, outside the poptorch model.

    Returns:
        ``training_opts=options.to_poptorch()``,
        ``inference_opts=options.for_inference().to_poptorch()`` (the same
        ``F``, accumulation steps as device iterations, output mode all;
        without it the strategy builds ``deviceIterations(1)``, which does not
        match a loader with F > 1) and ``precision_plugin``.
    """
    kwargs: Dict[str, Any] = {
        "training_opts": options.to_poptorch(poptorch),
        "inference_opts": options.for_inference().to_poptorch(poptorch),
    }
    if precision is not None:
        from lightning_graphcore import IPUPrecision

        kwargs["precision_plugin"] = IPUPrecision(precision)
    return kwargs


def _is_ipu_strategy(strategy: Any) -> bool:
    """lightning-graphcore's ``IPUStrategy`` (or a subclass), without importing it."""
    return any(c.__name__ == "IPUStrategy" and c.__module__.startswith("lightning_graphcore")
               for c in type(strategy).__mro__)


def _default_precision_class() -> type:
    """Lightning's default (32-bit) precision plugin class: ``Precision`` in newer
    Lightning, ``PrecisionPlugin`` in 2.0."""
    plugins = importlib.import_module(pl.__name__ + ".plugins.precision")
    return getattr(plugins, "Precision", None) or getattr(plugins, "PrecisionPlugin")


class FlatDictModule(FlatDictBatchMixin, pl.LightningModule):
    """A ``LightningModule`` for a wrapped model that takes a flat dict.

    Args:
        wrapped: e.g. ``ipu_wrap(model, loss_fn=masked_loss("mse"))``, or that
            compiled (``graph_adapter.compile(...)``); forward takes a flat dict and
            returns a dict with ``"loss"``.
        optimizer: ``fn(parameters) -> torch.optim.Optimizer`` (default: Adam, ``lr``).
        lr: learning rate of the default optimizer.
        loss_key: where the loss is in the output dict.

    On CPU/GPU the steps log their loss themselves. Inside a poptorch model
    (lightning-graphcore's ``IPUStrategy``) ``training_step`` marks the loss
    with ``poptorch.identity_loss(loss, reduction="none")`` and neither step
    logs (a log call inside the model would be compiled into it); the batch-end
    hooks log the mean of the losses poptorch returns, one per micro-batch.
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
        if not isinstance(wrapped, nn.Module):  # a compiled model (graph_adapter.compile):
            # its module goes in as a submodule, so that Lightning sees its parameters and
            # moves its mode and device
            self.host_module = wrapped.host_module
        self._optimizer = optimizer
        self.lr = lr
        self.loss_key = loss_key

    def forward(self, batch: Mapping[str, Tensor]) -> Any:
        return self.model(batch)

    def training_step(self, batch: Mapping[str, Tensor], batch_idx: Any) -> Tensor:
        pt = _poptorch_running()
        if pt is not None:  # one micro-batch, inside the poptorch model
            return pt.identity_loss(loss_of(self.model(batch), self.loss_key), reduction="none")
        loss = _loss(self.model(batch), self.loss_key)
        self.log("train_loss", loss.detach(), prog_bar=True, batch_size=1)
        return loss * self._global_mean_scale(batch, loss)

    def _global_mean_scale(self, batch: Mapping[str, Tensor], loss: Tensor) -> Any:
        """Under DDP with more than one rank, the factor that makes the ranks' averaged
        gradient that of the mean over every rank's real graphs (``global_mean_scale``
        of the loss's own count); 1 otherwise, or for a loss without ``count``
        (warned once)."""
        try:
            trainer = self.trainer
        except RuntimeError:  # Lightning 2.x: "not attached to a `Trainer`" (a bare call)
            trainer = None
        if trainer is None or trainer.world_size < 2 or not torch.distributed.is_initialized():
            return 1.0
        count = getattr(getattr(self.model, "loss_fn", None), "count", None)
        if count is None:
            if not getattr(self, "_warned_scale", False):
                self._warned_scale = True
                warnings.warn(
                    f"FlatDictModule on {trainer.world_size} ranks: the loss_fn has no "
                    f".count(batch), so each rank's mean loss weighs its graphs by 1/(its "
                    f"real graphs) and DDP's averaged gradient is biased when ranks hold "
                    f"different numbers; use graph_adapter.masked_loss, or give the loss a "
                    f"count method (graph_adapter.global_mean_scale)", stacklevel=2)
            return 1.0
        return global_mean_scale(count(batch)).to(loss.dtype)

    def validation_step(self, batch: Mapping[str, Tensor], batch_idx: Any) -> Tensor:
        if _poptorch_running() is not None:
            return loss_of(self.model(batch), self.loss_key)
        loss = _loss(self.model(batch), self.loss_key)
        # sync_dist: each rank validates its own share (the loaders shard), so the
        # epoch's figure is the mean over ranks, the same on every rank
        self.log("val_loss", loss.detach(), prog_bar=True, batch_size=1, sync_dist=True)
        return loss

    def setup(self, stage: str) -> None:
        """Give lightning-graphcore's ``IPUStrategy`` the precision plugin it needs.

        graphium builds its trainer as ``Trainer(strategy=IPUStrategy(training_opts=...,
        inference_opts=...), accelerator=IPUAccelerator(), devices=1)``, with no
        precision plugin: Lightning 2.0 then keeps its default one, which runs
        backward on the host, outside the poptorch model ("element 0 of tensors does
        not require grad"). Lightning calls this hook before the strategy sets up,
        so the default plugin is swapped for ``IPUPrecision("32-true")`` here, with a
        warning naming the explicit form. Any other non-IPU plugin raises
        :class:`TypeError` naming the fix.
        """
        strategy = getattr(self.trainer, "strategy", None)
        if strategy is None or not _is_ipu_strategy(strategy):
            return
        plugin = strategy.precision_plugin
        if type(plugin).__name__ == "IPUPrecision":
            return
        from lightning_graphcore import IPUPrecision

        if type(plugin) is not _default_precision_class() or plugin.precision != "32-true":
            raise TypeError(
                f"lightning-graphcore's IPUStrategy needs precision_plugin=IPUPrecision(...), got "
                f"{type(plugin).__name__}({plugin.precision!r}): build it with "
                f"IPUStrategy(**graph_adapter.lightning.ipu_strategy_options(opts, precision=...))")
        strategy.precision_plugin = IPUPrecision("32-true")
        warnings.warn(
            "graph_adapter: IPUStrategy had Lightning's default precision plugin, which runs "
            "backward outside the poptorch model; using lightning_graphcore.IPUPrecision('32-true') "
            "(pass it yourself: IPUStrategy(**ipu_strategy_options(opts)))", UserWarning,
            stacklevel=2)

    def on_train_start(self) -> None:
        """Tell a compiled model the run's length, as the trainer knows it (``max_epochs``,
        ``max_steps``): ``graph_adapter.compile``'s background compile then waits for the
        run's end where it cannot pay back within it (``Compiled.expect_calls``). Counted
        as training calls (optimizer steps x ``accumulate_grad_batches``); validation
        calls count down too, so a held compile may start a little before the end. An
        endless run (``max_epochs=-1``) says nothing."""
        tell = getattr(self.model, "expect_calls", None)
        if tell is None or self._on_poptorch_strategy():
            return
        steps = float(self.trainer.estimated_stepping_batches)
        if math.isfinite(steps):
            tell(int(steps) * max(1, int(self.trainer.accumulate_grad_batches)))

    def _on_poptorch_strategy(self) -> bool:
        # lightning-graphcore's IPUStrategy keeps its poptorch models here.
        return getattr(self.trainer.strategy, "poptorch_models", None) is not None

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._on_poptorch_strategy():
            self.log("train_loss", _loss(outputs, "loss").detach(), prog_bar=True, batch_size=1)

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        if self._on_poptorch_strategy():
            self.log("val_loss", _loss(outputs, self.loss_key).detach(), prog_bar=True,
                     batch_size=1, sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        if self._optimizer is not None:
            return self._optimizer(self.parameters())
        return torch.optim.Adam(self.parameters(), lr=self.lr)
