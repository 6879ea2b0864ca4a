"""The graph-adapter command: demo (eager backend, a few molecules), check, bench, errors."""
import json
import subprocess
import sys
from importlib import metadata

import pytest

from graph_adapter import cli
from graph_adapter.demo import MODELS, run_demo


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
    assert eps and eps[0].value == "graph_adapter.cli:main"


def test_python_m_graph_adapter():
    out = subprocess.run([sys.executable, "-m", "graph_adapter", "--version"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "graph-adapter" in out.stdout


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    assert "demo" in capsys.readouterr().out


def test_check_delegates_to_check_main(monkeypatch):
    import graph_adapter.checker as checker

    seen = []
    monkeypatch.setattr(checker, "check_main", lambda argv: seen.append(list(argv)) or 1)
    assert cli.main(["check", "pkg.mod:factory", "--training"]) == 1
    assert seen == [["pkg.mod:factory", "--training"]]


@pytest.mark.filterwarnings("ignore")
def test_demo_cli_end_to_end(tmp_path, capsys):
    pytest.importorskip("rdkit")
    out_json = tmp_path / "demo.json"
    rc = cli.main(["demo", "--limit", "200", "--epochs", "1", "--backend", "eager",
                   "--hidden", "32", "--layers", "2", "--quiet", "--json", str(out_json)])
    out = capsys.readouterr().out
    assert rc == 0, out
    for needle in ("padding efficiency", "compiles", "graphs/s", "test MAE", "eager PyG"):
        assert needle in out
    res = json.loads(out_json.read_text())
    assert res["num_graphs"] == 200 and res["num_train"] + res["num_test"] == 200
    a, e = res["adapter"], res["eager"]
    assert a["distinct_shapes"] == 1  # one budget, one shape
    assert a["compiles"] == 2  # train + eval
    assert 0.5 < res["node_efficiency"] <= 1.0
    assert a["train_graphs"] == e["train_graphs"] == res["num_train"]  # every graph once
    assert a["eval_graphs"] == e["eval_graphs"] == res["num_test"]
    assert a["test_mae"] == a["test_mae"] and e["test_mae"] == e["test_mae"]  # not NaN
    assert a["train_graphs_per_second"] > 0 and e["train_graphs_per_second"] > 0


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("model", sorted(MODELS))
def test_every_model_trains_through_the_adapter(model):
    pytest.importorskip("rdkit")
    r = run_demo(limit=60, epochs=1, backend="aot_eager", model=model, hidden=16, layers=2,
                 eager_baseline=False, progress=False)
    assert r.adapter.compiles == 2 and r.adapter.distinct_shapes == 1
    assert r.adapter.test_mae == r.adapter.test_mae


@pytest.mark.filterwarnings("ignore")
def test_demo_on_the_ipu_emulator():
    pytest.importorskip("rdkit")
    r = run_demo(limit=60, epochs=2, backend="ipu-emulator", hidden=16, layers=2,
                 eager_baseline=False, progress=False)
    assert r.adapter.train_graphs == 2 * r.num_train
    assert r.adapter.epoch_loss[1] == r.adapter.epoch_loss[1]


@pytest.mark.filterwarnings("ignore")
def test_demo_skips_bad_smiles(tmp_path, capsys):
    pytest.importorskip("rdkit")
    csv = tmp_path / "mols.csv"
    good = ["CCO", "c1ccccc1O", "CC(=O)O", "CCN", "CCCC", "C1CCCCC1", "CC(C)O", "OCCO"]
    csv.write_text("".join(f"{s},{10.0 + i}\n" for i, s in enumerate(good)) + "bad((,1\nC1CC,2\n")
    rc = cli.main(["demo", "--data", str(csv), "--epochs", "1", "--backend", "eager",
                   "--hidden", "8", "--layers", "1", "--batch-graphs", "4", "--quiet", "--no-eager"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "2 unparsable SMILES skipped" in out


def test_demo_missing_file_is_a_clear_error(tmp_path, capsys):
    pytest.importorskip("rdkit")
    rc = cli.main(["demo", "--data", str(tmp_path / "missing.csv"), "--quiet"])
    assert rc == 2
    assert "missing.csv" in capsys.readouterr().err


def test_demo_without_rdkit_names_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "rdkit", None)
    monkeypatch.setitem(sys.modules, "rdkit.RDConfig", None)
    assert cli.main(["demo", "--quiet"]) == 2
    assert '.[chem]' in capsys.readouterr().err


def test_plot_without_matplotlib_names_the_extra(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert cli.main(["demo", "--quiet", "--plot", str(tmp_path / "p.png")]) == 2
    assert '.[plot]' in capsys.readouterr().err


def test_demo_rejects_a_bad_backend(capsys):
    assert cli.main(["demo", "--backend", "nope", "--quiet"]) == 2
    assert "nope" in capsys.readouterr().err


def test_bench_without_benchmarks_dir(tmp_path, capsys):
    rc = cli.main(["bench", "--dir", str(tmp_path), "--only", "collate"])
    assert rc == 1
    assert "missing" in capsys.readouterr().out


@pytest.mark.filterwarnings("ignore")
def test_quickstart_example_runs(tmp_path, capsys, monkeypatch):
    """The training loop of docs/quickstart.md runs (smaller, on a cheap backend)."""
    pytest.importorskip("rdkit")
    import os
    import re

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
    importlib.import_module("quickstart_example")
    out = capsys.readouterr().out
    assert "compiles: 1" in out


@pytest.mark.filterwarnings("ignore")
def test_bench_prints_one_table(capsys):
    """`graph-adapter bench` (quick, without the inductor throughput run)."""
    pytest.importorskip("rdkit")
    if cli._bench_dir(None) is None:
        pytest.skip("no benchmarks/ directory (not a source checkout)")
    rc = cli.main(["bench", "--quick", "--only", "collate", "efficiency"])
    out = capsys.readouterr().out
    assert rc == 0, out
    table = [line for line in out.splitlines() if line.startswith("|")]
    assert table[0].split("|")[1].strip() == "benchmark"
    text = "\n".join(table)
    for needle in ("collate", "pad-to-max", "DynamicBatchSampler", "distinct batch shapes"):
        assert needle in text


@pytest.mark.filterwarnings("ignore")
def test_demo_plot(tmp_path):
    pytest.importorskip("rdkit")
    pytest.importorskip("matplotlib")
    png = tmp_path / "demo.png"
    r = run_demo(limit=60, epochs=2, backend="eager", hidden=8, layers=1, progress=False,
                 plot=str(png))
    assert png.stat().st_size > 1000
    assert len(r.batch_node_fill) == r.adapter.batches_per_epoch
