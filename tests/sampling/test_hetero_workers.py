"""FixedSizeHeteroNeighborLoader(num_workers > 0): the same batches and stats as in
one process (every batch a function of (seed, epoch, chunk)), every seed once an epoch."""
from __future__ import annotations

import warnings

import pytest
import torch

from graph_adapter.sampling import FixedSizeHeteroNeighborLoader

from test_hetero_neighbor import _hetero


def _epochs(loader, epochs):
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trimmed batches: counted in stats, compared below
        for e in epochs:
            loader.set_epoch(e)
            out.append(([dict(f) for f in loader], loader.stats.as_dict()))
    return out


@pytest.mark.parametrize("disjoint,F", [(False, 1), (True, 2)])
def test_workers_give_the_same_batches_and_stats_as_one_process(disjoint, F):
    h = _hetero(120, 60, (500, 400), 4)
    kw = dict(input_nodes=("paper", None), shuffle=True, seed=3, disjoint=disjoint,
              micro_batches=F, success_ratio=0.3)  # a low quantile: some batches trimmed
    runs = [_epochs(FixedSizeHeteroNeighborLoader(h, [3, 2], 8, num_workers=w, **kw), [0, 2])
            for w in (0, 2)]
    trimmed = 0
    for (b0, st0), (b2, st2) in zip(*runs):
        assert len(b0) == len(b2) and st0 == st2
        trimmed += st0["trimmed_batches"]
        for f0, f2 in zip(b0, b2):
            assert f0.keys() == f2.keys()
            for k in f0:
                assert torch.equal(f0[k], f2[k]), k
    assert trimmed > 0  # the cut counts came back from the workers too
    assert not torch.equal(runs[0][0][0][0]["paper/n_id"], runs[0][1][0][0]["paper/n_id"])


def test_every_seed_once_an_epoch_with_workers_across_ranks():
    h = _hetero(90, 40, (300, 300), 9)
    seeds = torch.arange(0, 90, 2)
    seen = []
    for rank in range(2):
        L = FixedSizeHeteroNeighborLoader(h, [2, 2], 7, input_nodes=("paper", seeds),
                                          shuffle=True, rank=rank, world_size=2, num_workers=2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for f in L:
                sm = f["paper/seed_mask"]
                seen.append(f["paper/n_id"][sm])
        assert L.stats.seeds == sum(int(s.numel()) for s in seen[-len(L):])
    assert sorted(torch.cat(seen).tolist()) == seeds.tolist()


def test_the_batches_come_from_worker_processes(monkeypatch):
    import os

    from graph_adapter.sampling import hetero_neighbor

    orig = hetero_neighbor._HeteroBatches.__getitem__

    def tagged(self, i):  # forked into the workers with the dataset's class
        flat, cuts = orig(self, i)
        return dict(flat, pid=torch.tensor(os.getpid())), cuts

    monkeypatch.setattr(hetero_neighbor._HeteroBatches, "__getitem__", tagged)
    h = _hetero(40, 20, (100, 100), 1)
    L = FixedSizeHeteroNeighborLoader(h, [2], 4, input_nodes=("paper", None), num_workers=2)
    pids = {int(f["pid"]) for f in L}
    assert len(pids) == 2 and os.getpid() not in pids
