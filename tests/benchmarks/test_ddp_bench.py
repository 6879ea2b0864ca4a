"""``python benchmarks/bench_ddp.py``: 1 process against 2 under torchrun, on a few graphs."""
import math

import pytest

from benchmarks.harness import ddp


@pytest.mark.slow
@pytest.mark.extended  # three torchrun launches: ~30 s, CI's second step
def test_bench_ddp_measures_both_and_the_ratio(capsys):
    r = ddp.measure(graphs=60, epochs=2, per_batch=16)
    for n in ("1", "2"):
        assert r[n]["graphs"] == 60  # epoch 2's graphs, every one once over the ranks
        assert r[n]["graphs_per_s"] > 0 and r[n]["seconds"] > 0
    assert r["2"]["steps_per_rank"] < r["1"]["steps_per_rank"]  # each rank half the data
    assert math.isclose(r["ratio"], r["2"]["graphs_per_s"] / r["1"]["graphs_per_s"])
    ddp.main(["--graphs", "40", "--epochs", "2", "--graphs-per-batch", "16"])
    assert "2 processes / 1:" in capsys.readouterr().out


def test_bench_ddp_needs_two_epochs():
    with pytest.raises(ValueError, match="epochs >= 2"):
        ddp.measure(epochs=1)
