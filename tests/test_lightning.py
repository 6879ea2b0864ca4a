"""Lightning on flat-dict batches (optional extra): a few CPU steps, the loss falls."""
import pytest
import torch
from torch import nn

pl = pytest.importorskip("lightning.pytorch", reason="the 'lightning' extra is not installed")

from graph_adapter.lightning import FlatDictModule, move_flat  # noqa: E402


def _graphs(n=32):
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        k = int(torch.randint(3, 7, (1,), generator=g))
        x = torch.randn(k, 4, generator=g)
        out.append(Data(x=x, edge_index=torch.randint(0, k, (2, 2 * k), generator=g),
                        y=x.sum().reshape(1) / 4))
    return out


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        from torch_geometric.nn import GIN

        torch.manual_seed(0)
        self.gin = GIN(4, 16, 2, out_channels=1)

    def forward(self, data):
        from torch_geometric.nn import global_add_pool

        return global_add_pool(self.gin(data.x, data.edge_index), data.batch,
                               size=data.num_graphs).squeeze(-1)


def test_move_flat_refuses_pyg_objects():
    from torch_geometric.data import Data

    with pytest.raises(TypeError, match="no active dispatch"):
        move_flat(Data(x=torch.zeros(2, 1)), torch.device("cpu"))
    moved = move_flat({"x": torch.zeros(2)}, torch.device("cpu"))
    assert set(moved) == {"x"}


def test_a_module_without_a_trainer_scales_its_loss_by_one():
    """Outside a Trainer (Lightning's ``trainer`` raises) the DDP scale is 1."""
    from graph_adapter.nn import ipu_wrap, masked_loss

    module = FlatDictModule(ipu_wrap(_Net(), loss_fn=masked_loss("mse")))
    with pytest.raises(RuntimeError, match="not attached"):
        module.trainer
    assert module._global_mean_scale({}, torch.zeros(())) == 1.0


def test_trainer_fit_on_cpu_loss_falls():
    import graph_adapter.nn.wrap as wrap
    import graph_adapter.batching.loader as loader_mod
    from graph_adapter.batching import Budget
    from graph_adapter.nn import masked_loss

    ds = _graphs()
    loader = loader_mod.FixedSizeLoader(ds, Budget.tight(ds, 8), shuffle=True)
    module = FlatDictModule(wrap.ipu_wrap(_Net(), loss_fn=masked_loss("mse")), lr=1e-2)
    losses = []

    class Record(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            losses.append(float(outputs["loss"]))

    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=12, accumulate_grad_batches=2,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[Record()])
    trainer.fit(module, train_dataloaders=loader)
    assert trainer.global_step == 12
    k = 4
    assert sum(losses[-k:]) / k < sum(losses[:k]) / k, losses


class _Told(nn.Module):
    """A wrapped model that records what it is told about the run's length."""

    def __init__(self, wrapped):
        super().__init__()
        self.wrapped, self.told = wrapped, []

    def forward(self, flat):
        return self.wrapped(flat)

    def expect_calls(self, n):
        self.told.append(n)


@pytest.mark.parametrize("max_epochs, accumulate", [(3, 1), (2, 2), (-1, 1)])
def test_trainer_fit_tells_a_compiled_model_the_run_length(max_epochs, accumulate):
    """on_train_start passes the trainer's length (training calls) to expect_calls, so a
    background compile that cannot pay back waits; an endless run tells nothing."""
    import graph_adapter.nn.wrap as wrap
    import graph_adapter.batching.loader as loader_mod
    from graph_adapter.batching import Budget
    from graph_adapter.nn import masked_loss

    ds = _graphs()
    loader = loader_mod.FixedSizeLoader(ds, Budget.tight(ds, 8), shuffle=True)
    model = _Told(wrap.ipu_wrap(_Net(), loss_fn=masked_loss("mse")))
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=max_epochs,
                         max_steps=4 if max_epochs < 0 else -1,
                         accumulate_grad_batches=accumulate, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(FlatDictModule(model, lr=1e-2), train_dataloaders=loader)
    if max_epochs < 0:  # max_steps=4 bounds it: 4 optimizer steps
        assert model.told == [4]
    else:
        assert len(loader) % accumulate == 0 and model.told == [max_epochs * len(loader)]


def test_a_compiled_model_trains_and_its_background_compile_waits_for_a_short_run():
    """FlatDictModule(ga.compile(...)): the parameters are the optimizer's, the loss
    falls, and a 2-epoch run told its length holds its cold compile until the end."""
    import graph_adapter as ga
    from graph_adapter.batching import Budget

    ds = _graphs()
    loader = ga.FixedSizeLoader(ds, Budget.tight(ds, 8), shuffle=True)
    compiled = ga.compile(ga.ipu_wrap(_Net(), loss_fn=ga.masked_loss("mse")), "aot_eager",
                          background=True)
    module = FlatDictModule(compiled, lr=1e-2)
    assert len(list(module.parameters())) == len(list(compiled.parameters())) > 0
    losses = []

    class Record(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            losses.append(float(outputs["loss"]))

    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=3, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[Record()])
    trainer.fit(module, train_dataloaders=loader)
    assert sum(losses[-4:]) < sum(losses[:4]), losses
    (info,) = compiled.stats.background.keys
    assert info["deferred"] and "calls left" in info["deferred"], compiled.stats.summary()
    compiled.close()


def test_an_endless_run_tells_nothing(monkeypatch):
    from types import SimpleNamespace

    import graph_adapter.nn.wrap as wrap
    from graph_adapter.nn import masked_loss

    model = _Told(wrap.ipu_wrap(_Net(), loss_fn=masked_loss("mse")))
    module = FlatDictModule(model)
    fake = SimpleNamespace(estimated_stepping_batches=float("inf"), accumulate_grad_batches=1,
                           strategy=SimpleNamespace())
    monkeypatch.setattr(FlatDictModule, "trainer", property(lambda self: fake))
    module.on_train_start()
    assert model.told == []
    fake.estimated_stepping_batches = 5
    module.on_train_start()
    assert model.told == [5]


def test_ipu_strategy_options_keep_F_for_inference():
    from graph_adapter.ipu import IPUOptions, emulate_poptorch
    from graph_adapter.lightning import ipu_strategy_options

    with emulate_poptorch() as pt:
        kw = ipu_strategy_options(IPUOptions(2, 1, 3, output_mode="final"), precision=None)
        t, i = kw["training_opts"], kw["inference_opts"]
        assert set(kw) == {"training_opts", "inference_opts"}
        assert t.device_iterations * t.Training.gradient_accumulation == 6
        # inferenceModel needs A = 1: the accumulation steps become device iterations (same F)
        assert i.device_iterations == 6 and i.Training.gradient_accumulation == 1
        assert i.output_mode == pt.OutputMode.All


def test_training_step_marks_its_loss_inside_poptorch():
    """Inside a poptorch model FlatDictModule marks its loss (poptorch needs one) and logs nothing."""
    from graph_adapter.batching import Budget
    from graph_adapter.ipu import IPUOptions, emulate_poptorch
    from graph_adapter.batching import FixedSizeLoader
    from graph_adapter.nn import masked_loss
    from graph_adapter.nn import ipu_wrap

    ds = _graphs(16)
    opts = IPUOptions(device_iterations=2, gradient_accumulation=2)
    host = next(iter(FixedSizeLoader(ds, Budget.tight(ds, 2), micro_batches=opts.micro_batches)))
    module = FlatDictModule(ipu_wrap(_Net(), loss_fn=masked_loss("mse")))
    module.log = lambda *a, **k: pytest.fail("logged inside the poptorch model")

    class Step(nn.Module):  # what lightning-graphcore's wrapper runs inside trainingModel
        def __init__(self):
            super().__init__()
            self.module = module

        def forward(self, batch):
            return self.module.training_step(batch, 0)

    with emulate_poptorch() as pt:
        model = pt.trainingModel(Step(), opts.to_poptorch(pt),
                                 torch.optim.SGD(module.parameters(), lr=0.01))
        loss = model(host)
        assert loss.shape == (4,) and model.emulator.steps == 2


@pytest.mark.slow
@pytest.mark.parametrize("strategy, form", [
    ("ddp", "loaders"),
    # ~35 s more: CI's second step
    pytest.param("ddp_spawn", "datamodule", marks=pytest.mark.extended)])
def test_ddp_shards_training_and_validation_and_syncs_val_loss(tmp_path, strategy, form):
    """Two CPU ranks on gloo, loaders built before the process group (``loaders``) or
    by a DataModule: every training and validation graph once over both ranks each
    epoch, equal step counts, one ``val_loss`` reduced across the ranks."""
    import json
    import os
    import subprocess
    import sys

    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("gloo backend not available")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, os.path.join(root, "tests", "_lightning_ddp.py"),
                        str(tmp_path), strategy, form], cwd=root, env=env, timeout=300,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    log = p.stdout.decode(errors="replace")
    assert p.returncode == 0, log[-4000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2))
    assert r0["world"] == r1["world"] == 2
    assert r0["train_batches"] == r1["train_batches"]
    for split, ids in (("train", range(40)), ("val", range(1000, 1014))):
        for epoch in ("0", "1"):
            a, b = r0[split][epoch], r1[split][epoch]
            assert a and b and not set(a) & set(b), (split, epoch)
            assert sorted(a + b) == list(ids), (split, epoch)
    assert r0["val_loss"] == r1["val_loss"] and len(r0["val_loss"]) == 2
