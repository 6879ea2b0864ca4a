"""A Lightning DDP script as Lightning's docs write it, run by tests/test_lightning.py.

``python tests/_lightning_ddp.py OUT_DIR STRATEGY FORM``: STRATEGY is ``ddp`` or
``ddp_spawn``; FORM ``loaders`` builds the ``FixedSizeLoader``s in the script,
before ``trainer.fit`` starts the process group, and passes them to ``fit``;
``datamodule`` passes a ``LightningDataModule`` that builds them. Each rank
writes ``OUT_DIR/rank<k>.json``: the graphs it trained and validated on per
epoch and the logged ``val_loss``.
"""
import json
import os
import sys

import torch
from torch import nn

import lightning.pytorch as pl

from graph_adapter import Budget, FixedSizeLoader, ipu_wrap
from graph_adapter.lightning import FlatDictModule
from graph_adapter.nn import masked_loss


def graphs(n, offset=0):
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(offset)
    out = []
    for i in range(n):
        k = 3 + (i * 5) % 6
        x = torch.randn(k, 4, generator=g)
        out.append(Data(x=x, edge_index=torch.randint(0, k, (2, 2 * k), generator=g),
                        y=x.sum().reshape(1, 1) / 4, idx=torch.tensor([offset + i])))
    return out


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        from torch_geometric.nn import GIN

        torch.manual_seed(0)
        self.gin = GIN(4, 16, 2, out_channels=1)

    def forward(self, x, edge_index, batch):
        from torch_geometric.nn import global_add_pool

        return global_add_pool(self.gin(x, edge_index), batch)


class Recording(FlatDictModule):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.seen = {"train": {}, "val": {}}

    def _record(self, split, batch):
        ids = batch["idx"][batch["graph_mask"]].reshape(-1).tolist()
        self.seen[split].setdefault(str(self.current_epoch), []).extend(ids)

    def training_step(self, batch, batch_idx):
        self._record("train", batch)
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx):
        self._record("val", batch)
        return super().validation_step(batch, batch_idx)

    def on_validation_epoch_end(self):
        val = self.trainer.callback_metrics.get("val_loss")
        self.seen.setdefault("val_loss", []).append(None if val is None else float(val))

    def on_fit_end(self):
        out = os.path.join(OUT, f"rank{self.global_rank}.json")
        with open(out, "w") as f:
            json.dump(dict(self.seen, world=self.trainer.world_size,
                           train_batches=self.trainer.num_training_batches), f)


def loaders():
    train, val = graphs(40), graphs(14, offset=1000)
    budget = Budget.tight(train + val, 6)
    return (FixedSizeLoader(train, budget, shuffle=True, seed=1),
            FixedSizeLoader(val, budget))


class Data(pl.LightningDataModule):
    def setup(self, stage):
        self.train, self.val = loaders()

    def train_dataloader(self):
        return self.train

    def val_dataloader(self):
        return self.val


OUT = sys.argv[1] if __name__ == "__main__" else os.environ.get("GA_TEST_OUT", ".")

if __name__ == "__main__":
    strategy, form = sys.argv[2], sys.argv[3]
    os.environ["GA_TEST_OUT"] = OUT  # ddp_spawn's children import this module
    module = Recording(ipu_wrap(Net(), loss_fn=masked_loss("mse")), lr=1e-2)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_epochs=2,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0)
    if form == "loaders":
        train, val = loaders()
        trainer.fit(module, train_dataloaders=train, val_dataloaders=val)
    else:
        trainer.fit(module, datamodule=Data())
