"""docs/migrating.md's graphium recipe, run as written: graphium 2.4.7's YAML-built model,
its featurizer, ``FixedSizeLoader`` + ``ipu_wrap`` + ``FlatDictModule`` and graphium's
Lightning trainer form, under the CPU emulation of poptorch (issue 25, items 4-5). Runs in
``.ci/graphium``'s venv; the main suite skips it. Nothing runs on an IPU.

graphium builds its IPU trainer as (``graphium/config/_loader.py``, ``load_trainer``)
``Trainer(strategy=IPUStrategy(training_opts=..., inference_opts=...),
accelerator=IPUAccelerator(), devices=1)``, no precision plugin. The block imports graphium
(hence Lightning) before ``emulate_poptorch()``, as a graphium user's script does.
"""
import importlib
import os
import re
import sys

import pytest
import torch

if os.environ.get("GRAPH_ADAPTER_GRAPHIUM_CI") == "1":
    importlib.import_module("graphium")  # .ci/graphium's own venv: a failed import fails CI
else:
    pytest.importorskip("graphium", reason="graphium 2.4.7 needs lightning 2.0.9; .ci/graphium "
                                           "tests it in its own venv (tests/graphium_venv)")

from graph_adapter.compat import graphium as compat  # noqa: E402

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "migrating.md")
MARKER = "needs graphium 2.4.7; tests/graphium_venv runs it"


def _recipe():
    """The one ```python block of docs/migrating.md marked as graphium's recipe."""
    text = open(DOCS).read()
    pattern = r"<!--\s*docs-test:([^>]*)-->\s*```python\n(.*?)```"
    blocks = [code for markers, code in re.findall(pattern, text, re.S) if MARKER in markers]
    assert len(blocks) == 1, "docs/migrating.md must have one graphium recipe block"
    return blocks[0]


def _predictions(wrapped, loader):
    """``(predictions, targets)`` of every real graph of ``loader`` (eager, eval, one
    micro-batch at a time)."""
    preds, ys = [], []
    wrapped.eval()
    with torch.no_grad():
        for host in loader:
            for i in range(host["graph_mask"].size(0)):
                flat = {k: v[i] for k, v in host.items()}
                m = flat["graph_mask"]
                preds.append(wrapped(flat)["output/tpsa"][m]), ys.append(flat["y"][m])
    return torch.cat(preds), torch.cat(ys)


def test_the_docs_recipe_trains_below_a_constant_predictor():
    from graphium.features import featurizer

    compat.unpatch()  # graphium exactly as it ships
    original_adjacency = featurizer.mol_to_adjacency_matrix
    ns = {"__name__": "graphium_docs_recipe"}
    sys.modules["graphium_docs_recipe"] = type(sys)("graphium_docs_recipe")  # ipu_wrap reads it
    try:
        with pytest.warns(UserWarning, match=r"IPUPrecision\('32-true'\)"):  # graphium's form
            exec(compile(_recipe(), DOCS, "exec"), ns)
    finally:
        featurizer.mol_to_adjacency_matrix = original_adjacency  # the recipe's workaround
        sys.modules.pop("graphium_docs_recipe", None)
    trainer, train, val = ns["trainer"], ns["train"], ns["val"]
    assert type(trainer.strategy).__name__ == "IPUStrategy"
    assert type(trainer.strategy.precision_plugin).__name__ == "IPUPrecision"
    assert len(train) == 512 and len(val) == 128
    # one global step a host batch (lightning-graphcore); the shuffled loader packs each
    # epoch anew, so an epoch can hold a host batch more or less than len() says
    n = len(ns["train_loader"])
    assert 4 * (n - 1) <= trainer.global_step <= 4 * (n + 1)
    logged = trainer.callback_metrics  # FlatDictModule's batch-end hooks
    assert torch.isfinite(logged["train_loss"]) and torch.isfinite(logged["val_loss"])

    pred, y = _predictions(ns["wrapped"], ns["val_loader"])
    assert y.numel() == len(val)
    constant = torch.cat([g.y for g in train]).mean()  # the best constant on the training set
    model_mse = float(((pred - y) ** 2).mean())
    constant_mse = float(((constant - y) ** 2).mean())
    print(f"val MSE: model {model_mse:.3f}, constant predictor {constant_mse:.3f}, "
          f"steps {trainer.global_step}")
    assert model_mse < 0.8 * constant_mse, (model_mse, constant_mse)
