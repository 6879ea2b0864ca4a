"""The benchmarks ship with the package: `graph-adapter bench` runs without a source
checkout; the scripts of benchmarks/ are thin entry points to the packaged code."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPTS = ("bench_collate.py", "bench_efficiency.py", "bench_throughput.py", "bench_layout.py",
           "bench_value_check.py")


def _env(pythonpath):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = pythonpath
    return env


@pytest.mark.extended  # ~10 s (a subprocess bench): CI's second step; test_bench_help_from_elsewhere stays
@pytest.mark.filterwarnings("ignore")
def test_bench_runs_from_a_copy_of_the_package_alone(tmp_path):
    """A copy of graph_adapter/ with no benchmarks/ beside it (as `pip install` leaves it),
    run from an unrelated directory: the packaged benchmarks run."""
    pytest.importorskip("rdkit")
    site = tmp_path / "site"
    shutil.copytree(os.path.join(ROOT, "graph_adapter"), site / "graph_adapter",
                    ignore=shutil.ignore_patterns("__pycache__"))
    work = tmp_path / "work"
    work.mkdir()
    env = _env(str(site))
    where = subprocess.run(
        [sys.executable, "-c", "import graph_adapter.app.bench as b; print(b.__file__)"],
        cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip().startswith(str(site))  # the copy, not the checkout
    out = subprocess.run([sys.executable, "-m", "graph_adapter", "bench", "--quick", "--only",
                          "efficiency"], cwd=work, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "pad-to-max" in out.stdout and "DynamicBatchSampler" in out.stdout


def test_bench_help_from_elsewhere(tmp_path):
    out = subprocess.run([sys.executable, "-m", "graph_adapter", "bench", "--help"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    for name in ("collate", "efficiency", "throughput", "--quick"):
        assert name in out.stdout


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_are_thin_entry_points(script, tmp_path):
    path = os.path.join(ROOT, "benchmarks", script)
    code = [line for line in open(path) if line.strip() and not line.lstrip().startswith("#")]
    assert len(code) < 30, f"{script}: {len(code)} lines; the benchmark belongs in graph_adapter.app.bench"
    assert "graph_adapter.app.bench." in "".join(code)
    out = subprocess.run([sys.executable, path, "--help"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "usage" in out.stdout
