"""The graph-adapter command: demo (eager backend, a few molecules), check, errors;
the application's place (graph_adapter.app imports the library, never the reverse)."""
import importlib.util
import json
import math
import os
import subprocess
import sys
from importlib import metadata

import pytest

from graph_adapter.app import cli
from graph_adapter.app.demo.graph import MODELS, run_demo

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "graph_adapter")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Every compiled model here compiles the same IPUWrapped.forward code object;
    Dynamo's per-code-object recompile limit (8) would otherwise be reached
    across tests."""
    import torch

    torch._dynamo.reset()
    yield


def test_console_script_is_declared():
    eps = [ep for ep in metadata.entry_points(group="console_scripts") if ep.name == "graph-adapter"]
    assert eps and eps[0].value == "graph_adapter.app.cli:main"


def test_python_m_graph_adapter():
    out = subprocess.run([sys.executable, "-m", "graph_adapter", "--version"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "graph-adapter" in out.stdout


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    assert "demo" in capsys.readouterr().out


def test_check_delegates_to_check_main(monkeypatch):
    from graph_adapter.app import check_cli

    seen = []
    monkeypatch.setattr(check_cli, "check_main", lambda argv: seen.append(list(argv)) or 1)
    assert cli.main(["check", "pkg.mod:factory", "--training"]) == 1
    assert seen == [["pkg.mod:factory", "--training"]]


@pytest.mark.filterwarnings("ignore")
def test_demo_cli_end_to_end(tmp_path, capsys, monkeypatch):
    """The demo trains (eager backend, 300 molecules, 5 short epochs: about a second): the
    adapter's and eager PyG's test MAE end well below the mean predictor's, their training
    loss well below its first epoch's (measured: MAE 0.46x and 0.41x the mean predictor's,
    last epoch's loss 0.49x the first's; an optimizer that does not step gives 1.0x)."""
    pytest.importorskip("rdkit")
    out_json = tmp_path / "demo.json"
    monkeypatch.chdir(tmp_path)  # where the default plot goes
    rc = cli.main(["demo", "--limit", "300", "--epochs", "5", "--batch-graphs", "32",
                   "--lr", "0.005", "--backend", "eager", "--hidden", "32", "--layers", "2",
                   "--quiet", "--json", str(out_json), "--no-pyg-compile"])
    out = capsys.readouterr().out
    assert rc == 0, out
    for needle in ("padding efficiency", "graphs compiled", "graphs/s", "test MAE", "eager PyG"):
        assert needle in out
    res = json.loads(out_json.read_text())
    assert res["num_graphs"] == 300 and res["num_train"] + res["num_test"] == 300
    a, e = res["adapter"], res["eager"]
    assert res["pyg_compiled"] is None  # --no-pyg-compile
    assert a["distinct_shapes"] == 1  # one budget, one shape
    assert a["compiles"] is None  # the eager backend compiles nothing
    assert 0.5 < res["node_efficiency"] <= 1.0
    # every graph once an epoch
    assert a["train_graphs"] == e["train_graphs"] == 5 * res["num_train"]
    assert a["eval_graphs"] == e["eval_graphs"] == res["num_test"]
    assert all(math.isfinite(v) for v in a["epoch_loss"] + e["epoch_loss"])
    for run in (a, e):  # it learned: far below predicting the training mean
        assert run["test_mae"] < 0.75 * res["_mean_mae"], (run["test_mae"], res["_mean_mae"])
        assert run["epoch_loss"][-1] < 0.75 * run["epoch_loss"][0], run["epoch_loss"]
    assert a["train_graphs_per_second"] > 0 and e["train_graphs_per_second"] > 0
    # inference timed side by side: the ratio and its range over the rounds are in the JSON
    med, lo, hi = a["inference_ratio_to_eager"]
    assert lo <= med <= hi and len(a["infer_round_seconds"]) == res["infer_rounds"]
    assert "interleaved rounds" in out
    # the report: the table, then the end-to-end line, the method notes only on --explain
    lines = out.strip().splitlines()
    assert len(lines) <= 45, len(lines)
    table_end = next(i for i, line in enumerate(lines) if line.startswith("deterministic"))
    assert lines[table_end + 2].startswith("end to end: graph_adapter trained in")
    assert "[2] steady state" not in out and "graph-adapter demo --explain" in out
    if importlib.util.find_spec("matplotlib") is not None:  # the plot by default
        assert (tmp_path / cli.DEFAULT_PLOT).stat().st_size > 0
        assert f"plot written to {cli.DEFAULT_PLOT}" in out


def test_demo_explain_prints_the_method_notes(capsys):
    pytest.importorskip("rdkit")
    rc = cli.main(["demo", "--limit", "40", "--epochs", "1", "--batch-graphs", "32",
                   "--backend", "eager", "--hidden", "8", "--layers", "1", "--quiet",
                   "--no-pyg-compile", "--no-plot", "--explain", "--train-rounds", "2",
                   "--infer-rounds", "2"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "[2] steady state" in out and "[4] training" in out and "--explain" not in out
    assert "plot written" not in out


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("model", [  # the demo's default in the main suite, the rest extended
    m if m == "gine" else pytest.param(m, marks=pytest.mark.extended) for m in sorted(MODELS)])
def test_every_model_trains_through_the_adapter(model):
    """Three epochs of about 7 steps (batches of 16): the mean training loss falls by more
    than batch-to-batch noise (measured: last epoch 0.49x-0.93x the first's, attentivefp
    the slowest; an optimizer that does not step gives 1.00x-1.01x)."""
    pytest.importorskip("rdkit")
    r = run_demo(limit=160, epochs=3, batch_graphs=16, lr=5e-3, test_fraction=0.25,
                 backend="aot_eager", model=model, hidden=16, layers=2,
                 eager_baseline=False, pyg_compile=False, progress=False)
    assert r.adapter.compiles == 2 and r.adapter.distinct_shapes == 1
    assert r.adapter.steps >= 15  # (the packer fills 6-7 batches an epoch here)
    loss = r.adapter.epoch_loss
    assert len(loss) == 3 and all(math.isfinite(v) for v in loss), loss
    assert loss[-1] < 0.97 * loss[0], f"{model}: the training loss did not fall: {loss}"
    assert math.isfinite(r.adapter.test_mae)


@pytest.mark.filterwarnings("ignore")
def test_demo_on_the_ipu_emulator():
    pytest.importorskip("rdkit")
    r = run_demo(limit=60, epochs=2, backend="ipu-emulator", hidden=16, layers=2,
                 eager_baseline=False, pyg_compile=False, progress=False)
    assert r.adapter.train_graphs == 2 * r.num_train
    loss = r.adapter.epoch_loss
    assert all(math.isfinite(v) for v in loss) and loss[1] < loss[0], loss


@pytest.mark.filterwarnings("ignore")
def test_demo_skips_bad_smiles(tmp_path, capsys):
    pytest.importorskip("rdkit")
    csv = tmp_path / "mols.csv"
    good = ["CCO", "c1ccccc1O", "CC(=O)O", "CCN", "CCCC", "C1CCCCC1", "CC(C)O", "OCCO"]
    csv.write_text("".join(f"{s},{10.0 + i}\n" for i, s in enumerate(good)) + "bad((,1\nC1CC,2\n")
    rc = cli.main(["demo", "--data", str(csv), "--epochs", "1", "--backend", "eager",
                   "--hidden", "8", "--layers", "1", "--batch-graphs", "4", "--quiet", "--no-eager",
                   "--no-pyg-compile", "--no-plot"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "2 bad rows skipped" in out


def test_quickstart_example_runs(tmp_path, capsys, monkeypatch):
    """The training loop of docs/quickstart.md runs (smaller, on a cheap backend) without a
    warning: UserWarnings (the library's own, and torch's requires-grad warning for
    ``float(loss)``) are errors here."""
    import warnings

    pytest.importorskip("rdkit")
    import os
    import re

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    text = open(os.path.join(root, "docs", "quickstart.md")).read()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    code = next(b for b in blocks if "class Net" in b)
    for old, new in [('backend="inductor"', 'backend="aot_eager"'), ("limit=2000", "limit=150"),
                     ("range(3)", "range(1)")]:
        assert old in code
        code = code.replace(old, new)
    (tmp_path / "quickstart_example.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    sys.modules.pop("quickstart_example", None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        importlib.import_module("quickstart_example")
    out = capsys.readouterr().out
    assert "compiles: 1" in out


@pytest.mark.filterwarnings("ignore")
def test_demo_plot(tmp_path):
    pytest.importorskip("rdkit")
    pytest.importorskip("matplotlib")
    png = tmp_path / "demo.png"
    r = run_demo(limit=60, epochs=2, backend="eager", hidden=8, layers=1, progress=False,
                 plot=str(png), pyg_compile=False)
    assert png.stat().st_size > 1000
    assert len(r.batch_node_fill) == r.adapter.batches_per_epoch


# --------------------------------------------------------------------------
# the application's place in the package
# --------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore")
def test_demo_seeds_report_the_test_mae_spread(capsys):
    pytest.importorskip("rdkit")
    rc = cli.main(["demo", "--limit", "40", "--epochs", "1", "--batch-graphs", "32",
                   "--backend", "eager", "--hidden", "8", "--layers", "1", "--quiet",
                   "--no-pyg-compile", "--no-plot", "--seeds", "3", "--seed", "5",
                   "--train-rounds", "2", "--infer-rounds", "2"])
    out = capsys.readouterr().out
    assert rc == 0
    head, *rows = out.strip().splitlines()[-3:]
    assert head == "test MAE (TPSA, A^2) over 3 seeds (5, 6, 7):"
    for row, name in zip(rows, ("graph_adapter", "eager PyG")):
        maes = [float(v) for v in row.split("(")[1].rstrip(")").split(", ")]
        assert row.startswith(f"  {name}: mean {sum(maes) / 3:.2f}, range "
                              f"{min(maes):.2f}-{max(maes):.2f}")
        assert len(set(maes)) > 1  # the seeds differ
    assert cli.main(["demo", "--seeds", "0"]) == 2
