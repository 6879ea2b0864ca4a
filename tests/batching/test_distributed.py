"""Two processes with the gloo backend on CPU: every rank gets the same number
of batches and shapes, ranks see disjoint graphs, together all of them."""
import json
import os
import socket
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _graphs():
    import torch
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(37):  # odd count: the ranks need a padded fill batch
        n = 1 + (i * 7) % 11
        e = (i * 5) % 17
        out.append(Data(x=torch.randn(n, 3, generator=g),
                        edge_index=torch.randint(0, n, (2, e), generator=g),
                        y=torch.randn(1, 1, generator=g), idx=torch.tensor([i])))
    return out


def _worker(rank: int, world: int, port: int, out_path: str) -> None:
    import torch
    import torch.distributed as dist

    from graph_adapter.batching import Budget
    from graph_adapter.batching import FixedSizeLoader

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        budget = Budget(nodes=40, edges=50, graphs=6)
        res = {}
        for F in (1, 2):
            loader = FixedSizeLoader(_graphs(), budget, shuffle=True, seed=7, micro_batches=F)
            assert loader.rank == rank and loader.world_size == world
            epochs = []
            for epoch in range(2):
                loader.set_epoch(epoch)
                ids, shapes, n = [], set(), 0
                for item in loader:
                    n += 1
                    shapes.add(json.dumps({k: list(v.shape) + [str(v.dtype)]
                                           for k, v in item.items()}, sort_keys=True))
                    gm, idx = item["graph_mask"], item["idx"]
                    ids.extend(idx[gm].tolist())
                # every rank must take part in the same number of collectives
                t = torch.tensor([n])
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                assert int(t) == n == len(loader)
                epochs.append({"ids": ids, "shapes": sorted(shapes), "len": n,
                               "padded": loader.stats.padded_batches})
            res[F] = epochs
        with open(out_path, "w") as f:
            json.dump(res, f)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_ranks_gloo(tmp_path):
    pytest.importorskip("torch.distributed")
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("gloo backend not available")
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1")
    outs = [tmp_path / f"rank{r}.json" for r in range(2)]
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), str(r), "2", str(port),
                               str(outs[r])], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for r in range(2)]
    logs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        logs.append(out.decode(errors="replace"))
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-3000:]
    res = [json.loads(o.read_text()) for o in outs]
    for F in ("1", "2"):
        for epoch in range(2):
            r0, r1 = res[0][F][epoch], res[1][F][epoch]
            assert r0["len"] == r1["len"] > 0
            assert r0["shapes"] == r1["shapes"] and len(r0["shapes"]) == 1
            assert not set(r0["ids"]) & set(r1["ids"])
            assert sorted(r0["ids"] + r1["ids"]) == list(range(37))
        # a new epoch reshuffles
        assert res[0][F][0]["ids"] != res[0][F][1]["ids"]


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
