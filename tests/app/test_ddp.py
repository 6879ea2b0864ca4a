"""Two processes under torchrun (gloo on CPU): DDP over fixed-size batches.

Every rank must run the same number of steps on one shape (one compile),
end with the same parameters (DDP keeps them in step), and the loss must fall.
"""
import json
import os
import socket
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torchrun_two_ranks_train_in_step(tmp_path):
    out = tmp_path / "reports"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(_free_port()),
           "-m", "graph_adapter.app.ddp", "--graphs", "150", "--epochs", "3",
           "--graphs-per-batch", "12", "--out", str(out)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["rank"] for r in reports] == [0, 1]
    assert all(r["world_size"] == 2 for r in reports)
    assert reports[0]["steps"] == reports[1]["steps"] == 3 * reports[0]["batches_per_epoch"]
    assert all(r["distinct_shapes"] == 1 and r["compiles"] == 1 for r in reports)
    assert reports[0]["param_checksum"] == reports[1]["param_checksum"]
    for r in reports:
        assert r["epoch_loss"][-1] < 0.7 * r["epoch_loss"][0], r["epoch_loss"]


def test_global_mean_scale_on_one_process():
    import torch

    from graph_adapter import global_mean_scale

    assert not torch.distributed.is_initialized()
    assert float(global_mean_scale(5)) == 1.0 and float(global_mean_scale(torch.tensor(0))) == 1.0
