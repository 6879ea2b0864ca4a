"""Rank and world size are read when an epoch is planned, not when a loader is built.

A loader built before ``init_process_group`` (as Lightning's scripts build it)
shards once the group exists; given values that disagree with a running group
warn once; ranks that built their loaders on different data all raise.
"""
import os
import sys
import warnings

import pytest
import torch

from graph_adapter.batching import Budget, FixedSizeLoader, RankMismatchError, Ranks

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _ranks import error_text, finish, init, run_ranks  # noqa: E402


def _graphs(n: int = 29):
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        k = 1 + (i * 7) % 9
        out.append(Data(x=torch.randn(k, 3, generator=g),
                        edge_index=torch.randint(0, k, (2, (i * 5) % 13), generator=g),
                        y=torch.randn(1, 1, generator=g), idx=torch.tensor([i])))
    return out


BUDGET = Budget(nodes=40, edges=50, graphs=5)


def _ids(loader):
    ids = []
    for item in loader:
        ids.extend(item["idx"][item["graph_mask"]].tolist())
    return ids


# ---------------------------------------------------------------- one process
@pytest.mark.parametrize("rank, world, err", [(2, 2, ValueError), (-1, 2, ValueError),
                                              (0, 0, ValueError), (True, 2, TypeError),
                                              (0.5, 2, TypeError), ("0", 2, TypeError)])
def test_bad_ranks_are_named(rank, world, err):
    with pytest.raises(err, match="rank|world_size"):
        FixedSizeLoader(_graphs(3), BUDGET, rank=rank, world_size=world)


def test_without_a_group_a_loader_is_rank_0_of_1_and_given_values_stand():
    assert not torch.distributed.is_initialized()
    ld = FixedSizeLoader(_graphs(), BUDGET)
    assert (ld.rank, ld.world_size) == (0, 1)
    assert sorted(_ids(ld)) == list(range(29))
    ld = FixedSizeLoader(_graphs(), BUDGET, rank=1, world_size=3)
    assert (ld.rank, ld.world_size) == (1, 3)
    assert Ranks(None, 4, "L").resolve() == (0, 4)
    with pytest.raises(ValueError, match="rank 2 is not in \\[0, 1\\)"):
        Ranks(2, None, "L").resolve()  # world_size 1 without a group: named at the epoch


# ------------------------------------------------------------- two processes
def _worker(argv):
    graphs = _graphs()
    before = FixedSizeLoader(graphs, BUDGET, shuffle=True, seed=3)  # no group yet
    rank, world, out, _ = init(argv)
    res = {"before_len": len(before), "rank": before.rank, "world": before.world_size}
    res["before_ids"] = [_ids(before) for _ in range(2)]
    res["stats_rank"] = before.stats.rank
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        explicit = FixedSizeLoader(graphs, BUDGET, rank=0, world_size=1)
        res["explicit_ids"] = [sorted(_ids(explicit)) for _ in range(2)]
    res["explicit_warnings"] = [str(w.message) for w in seen
                                if "torch.distributed runs" in str(w.message)]
    mine = graphs if rank == 0 else graphs[:-1]
    res["mismatch"] = error_text(lambda: _ids(FixedSizeLoader(mine, BUDGET)), RankMismatchError)
    finish(out, res)


def test_a_loader_built_before_the_group_shards_once_it_exists():
    pytest.importorskip("torch.distributed")
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("gloo backend not available")
    r0, r1 = run_ranks(os.path.abspath(__file__), 2)
    for r, res in enumerate((r0, r1)):
        assert (res["rank"], res["world"], res["stats_rank"]) == (r, 2, r)
    assert r0["before_len"] == r1["before_len"]
    for e in range(2):  # disjoint shares, every graph once, for every epoch
        a, b = r0["before_ids"][e], r1["before_ids"][e]
        assert not set(a) & set(b) and sorted(a + b) == list(range(29))
    assert r0["before_ids"][0] != r0["before_ids"][1]  # shuffled per epoch
    # rank=0, world_size=1 given under a 2-rank group: all the data, one warning naming the fix
    for res in (r0, r1):
        assert res["explicit_ids"] == [list(range(29))] * 2
        assert len(res["explicit_warnings"]) == 1
        assert "leave rank and world_size unset" in res["explicit_warnings"][0].lower()
    # rank 1 built its loader on 28 graphs: both ranks raise, naming what differs
    for res in (r0, r1):
        assert res["mismatch"] is not None
        assert "graphs in the dataset: rank 0 has 29, rank 1 has 28" in res["mismatch"]


if __name__ == "__main__":
    _worker(sys.argv)
