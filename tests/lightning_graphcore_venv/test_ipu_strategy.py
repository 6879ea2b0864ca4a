"""FlatDictModule on lightning-graphcore's IPUStrategy, against the emulated poptorch.

Runs in CI in a venv of its own (``.ci/run``: ``lightning==2.0.9.post0``,
``lightning-graphcore==0.1.0``, ``setuptools<81``; lightning-graphcore does not
import with current Lightning). The main suite skips this file. Nothing here
runs on an IPU: poptorch is ``graph_adapter.ipu.emulate_poptorch()``.

The folder is not named ``lightning_graphcore``: with ``tests/`` on ``sys.path`` it
would shadow the package as a namespace package. The training test runs docs/ipu.md's
recipe block itself (with the page's
set-up block before it), so the docs and the test cannot drift apart.
"""
import os
import re
import sys

import pytest
import torch

from graph_adapter.ipu import EmulatorError, emulate_poptorch

# lightning-graphcore reads poptorch when it is imported (ipuHardwareIsAvailable()), so the
# emulation must be in place first; sys.modules is restored right after.
_installed = emulate_poptorch()
try:
    if os.environ.get("GRAPH_ADAPTER_LIGHTNING_GRAPHCORE_CI") == "1":
        import lightning_graphcore as lg  # .ci/run's own venv: a failed import fails CI
    else:
        lg = pytest.importorskip(
            "lightning_graphcore",
            reason="lightning-graphcore 0.1.0 needs lightning==2.0.9.post0; .ci/run tests it in "
                   "its own venv (tests/lightning_graphcore_venv)")
finally:
    _installed.restore()

import lightning.pytorch as pl  # noqa: E402 (after the skip)

import graph_adapter as ga  # noqa: E402
from graph_adapter.lightning import FlatDictModule, ipu_strategy_options  # noqa: E402

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "ipu.md")


def _docs_blocks():
    """``(markers, code)`` of every ```python block of docs/ipu.md, in order."""
    text = open(DOCS).read()
    pattern = r"(?:<!--\s*docs-test:([^>]*)-->\s*)?```python\n(.*?)```"
    return [(m.group(1) or "", m.group(2)) for m in re.finditer(pattern, text, re.S)]


def _recipe():
    """The page's set-up block (it defines Net, ds, budget) and its lightning-graphcore block."""
    blocks = _docs_blocks()
    setup = next(code for _, code in blocks if "class Net" in code)
    recipe = [code for markers, code in blocks if "requires lightning_graphcore" in markers]
    assert len(recipe) == 1, "docs/ipu.md must have one lightning-graphcore recipe block"
    return setup, recipe[0]


@pytest.fixture(scope="module")
def trained():
    """Run the docs' recipe once; its namespace (trainer, module, predictions, ...)."""
    setup, recipe = _recipe()
    torch.manual_seed(0)
    ns = {"__name__": "ipu_docs_recipe"}
    sys.modules["ipu_docs_recipe"] = type(sys)("ipu_docs_recipe")  # ipu_wrap reads the model's module
    exec(compile(setup, DOCS, "exec"), ns)
    exec(compile(recipe, DOCS, "exec"), ns)
    assert "poptorch" not in sys.modules or not getattr(sys.modules["poptorch"], "emulated", False)
    return ns


def _trainer(opts, **kw):
    return pl.Trainer(accelerator=lg.IPUAccelerator(), strategy=lg.IPUStrategy(**ipu_strategy_options(opts)),
                      logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, **kw)


def test_recipe_trains_validates_and_predicts(trained):
    trainer, module, opts = trained["trainer"], trained["module"], trained["ipu_opts"]
    assert opts.micro_batches == 4
    strategy = trainer.strategy
    assert isinstance(strategy, lg.IPUStrategy)
    # Both stages got options with F = 4 (without inference_opts it would be deviceIterations(1)).
    assert strategy.inference_opts.device_iterations * strategy.inference_opts.replication_factor == 4
    # one host batch a step; a shuffled epoch's packing plan can hold a batch more or
    # less than len(loader) (epoch 0's)
    n = len(trained["train"])
    assert 3 * (n - 1) <= trainer.global_step <= 3 * (n + 1)
    metrics = trained["metrics"]  # logged by FlatDictModule's batch-end hooks
    assert torch.isfinite(metrics["train_loss"]) and torch.isfinite(metrics["val_loss"])

    # The loss fell: the trained module's validation loss is below an untrained one's.
    with emulate_poptorch():
        torch.manual_seed(0)
        fresh = FlatDictModule(ga.ipu_wrap(trained["Net"](), loss_fn=ga.masked_loss("mse")))
        before = _trainer(opts).validate(fresh, trained["val"], verbose=False)[0]["val_loss"]
        after = _trainer(opts).validate(module, trained["val"], verbose=False)[0]["val_loss"]
    print("val_loss before, after training:", before, after)
    assert after < 0.9 * before, (before, after)

    # Predictions in output mode all: per host batch F losses and F * G graph outputs.
    preds = trained["predictions"]
    assert len(preds) == len(trained["val"])
    G = next(iter(trained["val"]))["graph_mask"].shape[-1]
    for p in preds:
        assert p["loss"].shape == (4,) and p["output"].shape == (4 * G, 1)  # Net: [G, 1] a micro-batch


class _Refused(torch.nn.Module):
    """A stock PyG GIN whose forward reads a value on the host (``.item()``) or moves to the CPU."""

    def __init__(self, how):
        super().__init__()
        from torch_geometric.nn import GIN

        self.gnn, self.head, self.how = GIN(8, 16, num_layers=2), torch.nn.Linear(16, 1), how

    def forward(self, x, edge_index, batch):
        from torch_geometric.nn import global_add_pool

        h = self.gnn(x, edge_index)
        if self.how == "item":
            h = h / h.abs().max().item()
        else:
            h = h.cpu()
        return self.head(global_add_pool(h, batch))


@pytest.mark.parametrize("how, message", [
    ("item", r"aten::item is only supported in eager mode"),
    ("cpu", r"Illegal move to CPU"),
])
def test_model_reading_values_or_moving_to_cpu_is_refused(trained, how, message):
    opts = trained["ipu_opts"]
    loader = ga.FixedSizeLoader(trained["ds"][:64], trained["budget"], micro_batches=opts.micro_batches)
    module = FlatDictModule(ga.ipu_wrap(_Refused(how), loss_fn=ga.masked_loss("mse")))
    with emulate_poptorch():
        with pytest.raises(EmulatorError, match=message):
            _trainer(opts, max_steps=1).fit(module, train_dataloaders=loader)


def test_unmarked_loss_is_refused_as_poptorch_refuses_it(trained):
    class Unmarked(FlatDictModule):  # FlatDictModule without its identity_loss
        def training_step(self, batch, batch_idx):
            return self.model(batch)["loss"]

    opts = trained["ipu_opts"]
    loader = ga.FixedSizeLoader(trained["ds"][:64], trained["budget"], micro_batches=opts.micro_batches)
    module = Unmarked(ga.ipu_wrap(trained["Net"](), loss_fn=ga.masked_loss("mse")))
    with emulate_poptorch():
        with pytest.raises(EmulatorError, match="Couldn't find a loss in graph!"):
            _trainer(opts, max_steps=1).fit(module, train_dataloaders=loader)


def _graphium_trainer(opts, **kw):
    """graphium's own form (graphium/config/_loader.py, load_trainer): both options, no
    precision plugin."""
    strategy = lg.IPUStrategy(training_opts=opts.to_poptorch(),
                              inference_opts=opts.for_inference().to_poptorch())
    return pl.Trainer(strategy=strategy, accelerator=lg.IPUAccelerator(), devices=1, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, **kw)


def test_graphiums_trainer_form_trains_with_a_warning_naming_the_explicit_form(trained):
    """Issue 27 item 2: with no precision plugin Lightning 2.0 keeps its default one (backward
    on the host: "element 0 of tensors does not require grad"); FlatDictModule.setup swaps in
    IPUPrecision("32-true") and says so."""
    opts = trained["ipu_opts"]
    with emulate_poptorch():
        torch.manual_seed(0)
        module = FlatDictModule(ga.ipu_wrap(trained["Net"](), loss_fn=ga.masked_loss("mse")), lr=1e-2)
        before = _trainer(opts).validate(module, trained["val"], verbose=False)[0]["val_loss"]
        trainer = _graphium_trainer(opts, max_epochs=3)
        with pytest.warns(UserWarning, match=r"using lightning_graphcore.IPUPrecision\('32-true'\)"):
            trainer.fit(module, train_dataloaders=trained["train"])
        assert type(trainer.strategy.precision_plugin).__name__ == "IPUPrecision"
        # one optimizer step a host batch; the shuffled loader packs each epoch anew, so
        # len() (the last packing's) can differ by one from an earlier epoch's (measured:
        # 47 steps for len() 16, and 46 for len() 15, in 3 epochs)
        n = len(trained["train"])
        assert 3 * (n - 1) <= trainer.global_step <= 3 * (n + 1), (trainer.global_step, n)
        after = _trainer(opts).validate(module, trained["val"], verbose=False)[0]["val_loss"]
    print("graphium form: val_loss before, after:", before, after)
    assert after < 0.9 * before, (before, after)


def test_another_precision_plugin_on_the_ipu_strategy_is_named(trained):
    from lightning.pytorch.plugins.precision import MixedPrecisionPlugin

    opts = trained["ipu_opts"]
    with emulate_poptorch():
        strategy = lg.IPUStrategy(training_opts=opts.to_poptorch(),
                                  inference_opts=opts.for_inference().to_poptorch(),
                                  precision_plugin=MixedPrecisionPlugin("16-mixed", "cpu"))
        module = FlatDictModule(ga.ipu_wrap(trained["Net"](), loss_fn=ga.masked_loss("mse")))
        trainer = pl.Trainer(strategy=strategy, accelerator=lg.IPUAccelerator(), devices=1,
                             logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             max_steps=1)
        with pytest.raises(TypeError, match=r"IPUStrategy needs precision_plugin=IPUPrecision.*"
                           r"ipu_strategy_options\(opts"):
            trainer.fit(module, train_dataloaders=trained["train"])


_ORDER = """
import {first}
from lightning_utilities.core.imports import package_available
from graph_adapter.ipu import emulate_poptorch
emulate_poptorch()
import lightning_graphcore as lg
print(package_available("poptorch"), lg.IPUAccelerator.is_available())
"""


def test_emulation_after_lightning_was_imported(tmp_path):
    """Issue 25 item 3: graphium imports Lightning before the user's emulate_poptorch()."""
    import subprocess

    proc = subprocess.run([sys.executable, "-c", _ORDER.format(first="lightning.pytorch")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-2:] == ["True", "True"], proc.stdout
    # lightning-graphcore itself imported first: one line says what to do.
    proc = subprocess.run([sys.executable, "-c", _ORDER.format(first="lightning_graphcore")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert ("lightning_graphcore.accelerator was imported before emulate_poptorch()"
            in proc.stderr), proc.stderr[-3000:]
