"""The loader's planning state is arrays, not Python ints (issue 15, "Memory").

The packers and the loader keep a plan as two arrays (``packing.FlatPlan``):
these tests check that the array bookkeeping gives exactly the plans of the
plain list algorithm (a reference copy below), and that planning an epoch
leaves a few bytes a graph allocated, not the ~40 of a list of Python ints.
The memory goal itself (columnar copy + 20%) is measured side by side with
PyG's DataLoader by ``python benchmarks/bench_memory.py``.
"""
import gc
import tracemalloc

import numpy as np
import torch
from hypothesis import given, strategies as st
from torch_geometric.data import Data

from graph_adapter.batching import Budget
from graph_adapter.batching.loader import FixedSizeLoader, _split_to_multiple
from graph_adapter.batching.packing import FlatPlan, pack_greedy


def _greedy_reference(matrix, order, cap, graph_cap, open_batches):
    """The greedy packer as plain lists (the algorithm before issue 15)."""
    cap = [int(c) for c in cap]
    plan, bins = [], []  # bins: [remaining, members]
    for i in order:
        s = matrix[i].tolist()
        for b in bins:
            if all(x <= r for x, r in zip(s, b[0])):
                b[0] = [r - x for r, x in zip(b[0], s)]
                b[1].append(int(i))
                if len(b[1]) >= graph_cap:
                    bins.remove(b)
                    plan.append(b[1])
                break
        else:
            if graph_cap <= 1:
                plan.append([int(i)])
                continue
            if len(bins) >= open_batches:
                plan.append(bins.pop(0)[1])
            bins.append([[c - x for c, x in zip(cap, s)], [int(i)]])
    return plan + [b[1] for b in bins]


def _split_reference(plan, unit):
    out = [list(b) for b in plan]
    for _ in range((-len(out)) % unit):
        j = max(range(len(out)), key=lambda i: len(out[i]), default=None)
        if j is None or len(out[j]) < 2:
            break
        b = out[j]
        out[j:j + 1] = [b[:len(b) // 2], b[len(b) // 2:]]
    return out


@given(st.integers(0, 10_000), st.integers(0, 120), st.sampled_from([1, 2, 3, 5]),
       st.integers(1, 12), st.integers(1, 6))
def test_array_greedy_packer_equals_list_algorithm(seed, n, dims, graph_cap, open_batches):
    rng = np.random.default_rng(seed)
    m = rng.integers(0, 8, (n, dims))
    cap = rng.integers(8, 30, dims)
    order = rng.permutation(n)
    assert pack_greedy(m, order, cap, graph_cap, open_batches) == \
        _greedy_reference(m, order, cap, graph_cap, open_batches)


@given(st.lists(st.integers(1, 9), max_size=30), st.integers(1, 12))
def test_split_to_multiple_equals_list_algorithm(counts, unit):
    plan = [list(range(sum(counts[:j]), sum(counts[:j + 1]))) for j in range(len(counts))]
    got = _split_to_multiple(FlatPlan.from_lists(plan), unit).to_lists()
    assert got == _split_reference(plan, unit)


def _tiny_graphs(n):
    g = torch.Generator().manual_seed(0)
    return [Data(x=torch.randn(3 + i % 4, 2, generator=g),
                 edge_index=torch.randint(0, 3, (2, 4), generator=g)) for i in range(n)]


def test_planning_an_epoch_keeps_a_few_bytes_a_graph():
    """The plan, the rank's items and the split plan of an epoch: arrays of
    at most 8 bytes a graph (a list of Python ints would be ~40)."""
    n = 20_000
    loader = FixedSizeLoader(_tiny_graphs(n), Budget(nodes=80, edges=90, graphs=30),
                             shuffle=True, micro_batches=2, world_size=3, rank=1)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        items = len(loader)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert items > 0
    assert held < 8 * n, f"planning one epoch of {n} graphs holds {held / n:.1f} bytes a graph"
    # and the plan is still the JSON list of every graph exactly once
    plan = loader.plan()
    assert sorted(i for b in plan for i in b) == list(range(n))
    assert all(type(i) is int for i in plan[0])
