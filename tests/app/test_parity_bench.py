"""The parity sweep's summary (graph_adapter.app.bench.parity): the per-seed
difference, its standard error and the verdict, on made-up rows (no demo run)."""
import math

import pytest

from graph_adapter.app.bench.parity import format_summary, summarize


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
