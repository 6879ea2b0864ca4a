"""The parity sweep's summary (benchmarks.harness.parity): the per-seed
difference, its standard error and the verdict, on made-up rows (no demo run)."""
import math

import pytest

from benchmarks.harness.parity import format_summary, summarize


def _row(seed, a, e):
    col = lambda mae: {"test_mae": mae, "steps": 700, "mean_graphs_per_batch": 64.0,  # noqa
                       "train_graphs": 44800}
    return {"seed": seed, "model": "gine", "backend": "eager", "adapter": col(a),
            "eager": col(e), "epochs": 10}


def test_summary_difference_standard_error_and_verdict():
    rows = [_row(0, 5.0, 4.0), _row(1, 4.0, 5.0), _row(2, 6.0, 5.0)]
    s = summarize(rows)
    diffs = [1.0, -1.0, 1.0]
    md = sum(diffs) / 3
    se = math.sqrt(sum((d - md) ** 2 for d in diffs) / 2 / 3)
    assert s["mean_diff"] == pytest.approx(md) and s["se_diff"] == pytest.approx(se)
    assert s["within_one_se"] and s["adapter_above_in"] == 2
    assert "| 1 | 4.00 | 5.00 | -1.00 |" in format_summary(rows)
    far = [_row(i, 6.0 + 0.01 * i, 5.0) for i in range(4)]
    s = summarize(far)
    assert not s["within_one_se"] and not s["within_3pct"]
    assert "NO parity" in format_summary(far)
    with pytest.raises(ValueError, match="no seeds"):
        summarize([])


def test_the_script_runs_the_sweep_with_its_options(monkeypatch, capsys):
    """``python benchmarks/bench_parity.py`` reaches the sweep with its own options (one seed
    a row; run_seed stubbed: the demo runs themselves are the benchmark's job, not a test's)."""
    from benchmarks.harness import parity

    seen = []

    def fake_run_seed(seed, model, backend, epochs, limit, threads):
        seen.append((seed, model, backend, epochs))
        return _row(seed, 5.0 + seed, 5.0)

    monkeypatch.setattr(parity, "run_seed", fake_run_seed)
    assert parity.main(["--seeds", "0", "1", "--models", "gin", "--epochs", "2"]) == 0
    assert seen == [(0, "gin", "eager", 2), (1, "gin", "eager", 2)]
    assert "--model gin" in capsys.readouterr().out
