"""FixedSizeNeighborLoader(prefetch=k): a background thread samples ahead, the batches
are the same; threads, errors, early exits and concurrent sampling."""
from __future__ import annotations

import pickle
import threading
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data

from graph_adapter import Budget
from graph_adapter.sampling import CSC, sample_neighbors
from graph_adapter.sampling.neighbor import (FixedSizeNeighborLoader, SubgraphOversizeError,
                                         prefetched)


def _graph(n: int, m: int, seed: int) -> Data:
    g = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(n, 3, generator=g), edge_index=torch.randint(0, n, (2, m), generator=g),
                y=torch.randint(0, 3, (n,), generator=g), edge_attr=torch.randn(m, 2, generator=g))


def _epoch(loader):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trims: counted in stats, compared below
        return list(loader), loader.stats.as_dict()


def _prefetch_threads():
    return [t for t in threading.enumerate() if t.name == "graph_adapter-prefetch"]


@given(n=st.integers(5, 80), m=st.integers(0, 400), bs=st.integers(1, 9),
       depth=st.integers(1, 4), world=st.integers(1, 3), F=st.integers(1, 2),
       shuffle=st.booleans(), disjoint=st.booleans(), seed=st.integers(0, 100))
@settings(max_examples=25, deadline=None)
def test_prefetched_batches_and_stats_equal_the_callers_thread(n, m, bs, depth, world, F,
                                                               shuffle, disjoint, seed):
    d = _graph(n, m, seed)
    kw = dict(shuffle=shuffle, disjoint=disjoint, seed=seed, micro_batches=F, world_size=world,
              rank=seed % world, budget=Budget(nodes=60, edges=61, graphs=2))
    for epoch in (0, 1):
        ref_loader = FixedSizeNeighborLoader(d, [3, 2], bs, **kw)
        pre_loader = FixedSizeNeighborLoader(d, [3, 2], bs, prefetch=depth, **kw)
        ref_loader.set_epoch(epoch)
        pre_loader.set_epoch(epoch)
        (a, sa), (b, sb) = _epoch(ref_loader), _epoch(pre_loader)
        assert len(a) == len(b) == len(ref_loader)
        for x, y in zip(a, b):
            assert list(x) == list(y) and all(torch.equal(x[k], y[k]) for k in x)
        assert sa == sb
    assert not _prefetch_threads()  # each epoch's thread has ended


def test_threads_of_the_caller_and_of_new_threads_are_left_alone():
    d = _graph(300, 1500, 1)
    L = FixedSizeNeighborLoader(d, [3, 2], 16, prefetch=2, sampler_threads=1,
                                budget=Budget(nodes=200, edges=260, graphs=2))
    before = torch.get_num_threads()
    target = 2 if before != 2 else 3
    torch.set_num_threads(target)
    try:
        seen = []
        for _ in L:
            seen.append(torch.get_num_threads())  # the caller's count while the thread samples
        assert seen and set(seen) == {target}
        new = []
        t = threading.Thread(target=lambda: new.append(torch.get_num_threads()))
        t.start()
        t.join()
        assert new == [target]  # the default of new threads given back
    finally:
        torch.set_num_threads(before)


def test_an_error_reaches_the_consumer_at_its_batch():
    d = _graph(200, 2000, 2)
    kw = dict(oversize="error", budget=Budget(nodes=20, edges=21, graphs=2))
    got = []
    with pytest.raises(SubgraphOversizeError, match=r"epoch 0, chunk 0") as plain:
        for f in FixedSizeNeighborLoader(d, [5, 5], 8, **kw):
            got.append(f)
    with pytest.raises(SubgraphOversizeError, match=r"epoch 0, chunk 0") as pre:
        for f in FixedSizeNeighborLoader(d, [5, 5], 8, prefetch=3, **kw):
            got.append(f)
    assert not got and str(plain.value) == str(pre.value)
    assert not _prefetch_threads()


def test_prefetched_raises_at_the_failing_item_after_the_earlier_ones():
    class Items:
        def __len__(self):
            return 5

        def __getitem__(self, i):
            if i == 3:
                raise KeyError(f"item {i}")
            return i

    out = []
    with pytest.raises(KeyError, match="item 3"):
        for v in prefetched(Items(), 2):
            out.append(v)
    assert out == [0, 1, 2]


def test_leaving_early_stops_the_thread():
    d = _graph(400, 4000, 3)
    L = FixedSizeNeighborLoader(d, [4, 3], 4, prefetch=2,
                                budget=Budget(nodes=300, edges=301, graphs=2))
    it = iter(L)
    next(it)
    assert _prefetch_threads()
    it.close()  # what a `break` out of the for loop does once the iterator is dropped
    assert not _prefetch_threads()


def test_sampling_in_the_loop_body_while_prefetching_is_not_disturbed():
    """The thread and the caller sample one CSC (one scratch array) at once: the
    CSC's lock keeps each sample whole."""
    d = _graph(3000, 60000, 4)
    kw = dict(shuffle=True, seed=5, input_nodes=torch.arange(0, 3000, 10),
              budget=Budget(nodes=2500, edges=2601, graphs=2))
    ref = _epoch(FixedSizeNeighborLoader(d, [10, 5], 8, **kw))[0]
    L = FixedSizeNeighborLoader(d, [10, 5], 8, prefetch=4, **kw)
    want = [L.batch(3, c) for c in range(4)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, f in enumerate(L):
            for c in range(4):  # the caller samples while the thread does
                g = L.batch(3, c)
                assert all(torch.equal(g[k], want[c][k]) for k in g), (i, c)
            assert all(torch.equal(f[k], ref[i][k]) for k in f), i


def test_bad_prefetch_values_are_named():
    d = _graph(20, 60, 5)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match=r"prefetch="):
            FixedSizeNeighborLoader(d, [2], 4, prefetch=bad)
    with pytest.raises(ValueError, match=r"prefetch=2 with num_workers=1.*use one of them"):
        FixedSizeNeighborLoader(d, [2], 4, prefetch=2, num_workers=1)
    with pytest.raises(ValueError, match=r"prefetch=0"):
        list(prefetched([1, 2], 0))


def test_a_csc_pickles_without_its_lock_and_samples_the_same():
    d = _graph(50, 300, 6)
    csc = CSC.from_edge_index(d.edge_index, 50)
    back = pickle.loads(pickle.dumps(csc))
    assert back.lock is not csc.lock
    a, b = (sample_neighbors(c, torch.arange(5), [3, 2],
                             generator=torch.Generator().manual_seed(1)) for c in (csc, back))
    assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)


def test_link_loader_prefetches_the_same_batches():
    from graph_adapter.sampling import FixedSizeLinkNeighborLoader

    d = _graph(200, 1200, 7)
    kw = dict(batch_size=16, shuffle=True, seed=2, budget=Budget(nodes=190, edges=301, graphs=2))
    a, sa = _epoch(FixedSizeLinkNeighborLoader(d, [3, 2], **kw))
    L = FixedSizeLinkNeighborLoader(d, [3, 2], prefetch=2, **kw)
    b, running = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for f in L:
            running.append(bool(_prefetch_threads()))  # a thread made it
            b.append(f)
    sb = L.stats.as_dict()
    assert running[0] and len(a) == len(b) > 3 and sa == sb  # (the thread ends 2 batches early)
    for x, y in zip(a, b):
        assert list(x) == list(y) and all(torch.equal(x[k], y[k]) for k in x)
