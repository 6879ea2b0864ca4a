"""The large-graph loaders read rank and world size when an epoch starts.

Built before ``init_process_group`` (as in a Lightning script), the neighbour,
link, cluster and hetero loaders shard once the group exists: every seed (or
supervision edge, or node of a cluster) once over the two ranks.
"""
import os
import sys
import warnings

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _ranks import error_text, finish, init, run_ranks  # noqa: E402


def _graph():
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(0)
    n, m = 50, 200
    return Data(x=torch.randn(n, 3, generator=g), edge_index=torch.randint(0, n, (2, m), generator=g))


def _hetero():
    from torch_geometric.data import HeteroData

    g = torch.Generator().manual_seed(1)
    h = HeteroData()
    h["paper"].x = torch.randn(30, 3, generator=g)
    h["author"].x = torch.randn(20, 3, generator=g)
    w = torch.stack([torch.randint(0, 20, (60,), generator=g), torch.randint(0, 30, (60,), generator=g)])
    h["author", "writes", "paper"].edge_index = w
    h["paper", "rev_writes", "author"].edge_index = w.flip(0)
    return h


def _loaders():
    from graph_adapter.sampling import (FixedSizeClusterLoader, FixedSizeHeteroNeighborLoader,
                                        FixedSizeLinkNeighborLoader, FixedSizeNeighborLoader)

    d = _graph()
    part = torch.arange(50) % 7
    return {"neighbor": FixedSizeNeighborLoader(d, [3, 2], batch_size=4, shuffle=True),
            "link": FixedSizeLinkNeighborLoader(d, [2], batch_size=16, shuffle=True),
            "cluster": FixedSizeClusterLoader(d, batch_size=2, partition=part, shuffle=True),
            "hetero": FixedSizeHeteroNeighborLoader(_hetero(), [2], batch_size=4,
                                                    input_nodes=("paper", None), shuffle=True)}


def _covered(name, loader):
    """What a rank's epoch covers: seed ids (neighbour, hetero), node ids (cluster),
    the number of positives (link)."""
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trims of the small fitted budgets
        for flat in loader:
            if name == "link":
                continue
            if name == "hetero":
                out += flat["paper/n_id"][flat["paper/seed_mask"]].tolist()
            elif name == "cluster":
                out += flat["n_id"][flat["node_mask"]].tolist()
            else:
                out += flat["n_id"][flat["seed_mask"]].tolist()
    if name == "link":
        return [loader.stats.links, loader.stats.total_links]
    return out


def _worker(argv):
    loaders = _loaders()  # no group yet
    rank, world, out, _ = init(argv)
    res = {name: {"rank": L.rank, "world": L.world_size, "len": len(L),
                  "covered": _covered(name, L), "stats_rank": L.stats.rank}
           for name, L in loaders.items()}
    from graph_adapter.batching import RankMismatchError
    from graph_adapter.sampling import FixedSizeClusterLoader

    part = torch.arange(50) % 7
    mine = FixedSizeClusterLoader(_graph(), batch_size=2, partition=part if rank == 0
                                  else (part + rank) % 7)  # rank 1 partitioned otherwise
    res["mismatch"] = error_text(lambda: _covered("cluster", mine), RankMismatchError)
    finish(out, res)


def test_sampling_loaders_built_before_the_group_shard_once_it_exists():
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("gloo backend not available")
    r0, r1 = run_ranks(os.path.abspath(__file__), 2)
    for name in ("neighbor", "link", "cluster", "hetero"):
        a, b = r0[name], r1[name]
        assert (a["rank"], a["world"], b["rank"], b["world"]) == (0, 2, 1, 2), name
        assert a["stats_rank"] == 0 and b["stats_rank"] == 1, name
        assert a["len"] == b["len"] > 0, name
        if name == "link":  # every supervision edge a positive once over both ranks
            assert a["covered"][0] + b["covered"][0] == a["covered"][1] == 200
            assert a["covered"][0] > 0 and b["covered"][0] > 0
            continue
        total = {"neighbor": 50, "cluster": 50, "hetero": 30}[name]
        assert not set(a["covered"]) & set(b["covered"]), name
        assert sorted(a["covered"] + b["covered"]) == list(range(total)), name
    for res in (r0, r1):  # ranks whose partitions differ: both raise, naming it
        assert res["mismatch"] is not None and "partition fingerprint: rank 0 has" in res["mismatch"]


if __name__ == "__main__":
    _worker(sys.argv)
