"""The benchmarks live in a source checkout, not in the installed package: each script of
``benchmarks/`` is a thin entry point to :mod:`benchmarks.harness` that runs from the
checkout's root; the suite prints one table and names a benchmark that cannot run."""
import os
import subprocess
import sys

import pytest

from benchmarks.harness import suite

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = ("bench_all.py", "bench_collate.py", "bench_efficiency.py", "bench_throughput.py",
           "bench_layout.py", "bench_value_check.py", "bench_memory.py", "bench_million.py",
           "bench_opcount.py", "bench_parity.py", "bench_ddp.py")


def test_the_installed_package_has_no_benchmark_command(capsys):
    from graph_adapter.app import cli

    assert not os.path.exists(os.path.join(ROOT, "graph_adapter", "app", "bench"))
    assert cli.main(["bench"]) == 2  # an unknown subcommand: argparse's usage error
    assert "invalid choice: 'bench'" in capsys.readouterr().err


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_are_thin_entry_points(script, tmp_path):
    """Each script names its harness module and answers ``--help`` from any directory."""
    path = os.path.join(ROOT, "benchmarks", script)
    code = [line for line in open(path) if line.strip() and not line.lstrip().startswith("#")]
    assert len(code) < 30, f"{script}: {len(code)} lines; the benchmark belongs in benchmarks/harness"
    assert "benchmarks.harness." in "".join(code)
    out = subprocess.run([sys.executable, path, "--help"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "usage" in out.stdout


def test_the_suite_refuses_an_unknown_benchmark_before_any_work(monkeypatch, capsys):
    def slow(*args, **kwargs):
        raise AssertionError("a benchmark started before the usage error")

    monkeypatch.setattr(suite, "run_suite", slow)
    with pytest.raises(SystemExit) as e:
        suite.main(["--only", "nope"])
    assert e.value.code == 2 and "nope" in capsys.readouterr().err


def test_the_suite_names_the_missing_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "rdkit", None)
    monkeypatch.setitem(sys.modules, "rdkit.RDConfig", None)
    monkeypatch.setattr(suite, "run_suite", lambda *a, **k: pytest.fail("ran without rdkit"))
    assert suite.main(["--only", "collate"]) == 2
    assert ".[chem]" in capsys.readouterr().err


def test_the_suite_reports_a_benchmark_that_cannot_run(monkeypatch, capsys):
    """A benchmark that fails is named under the table, with why; the exit code is 1."""
    pytest.importorskip("rdkit")

    def missing(data, quick, verbose):
        raise FileNotFoundError("NCI-5k molecule file missing")

    monkeypatch.setitem(suite.BENCHMARKS, "collate", ("collate", missing))
    assert suite.main(["--only", "collate"]) == 1
    assert "missing" in capsys.readouterr().out


@pytest.mark.filterwarnings("ignore")
def test_the_suite_prints_one_table(capsys):
    """Quick, without the inductor throughput run."""
    pytest.importorskip("rdkit")
    assert suite.main(["--quick", "--only", "collate", "efficiency"]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith("|")]
    assert table[0].split("|")[1].strip() == "benchmark"
    text = "\n".join(table)
    for needle in ("collate", "pad-to-max", "DynamicBatchSampler", "distinct batch shapes"):
        assert needle in text
