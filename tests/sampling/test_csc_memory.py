"""The CSC and the neighbour loader hold no copy of the graph: order and bytes.

The 1M-node / 20M-edge memory goal (docs/large_graphs.md, section 4 of
``benchmarks/bench_large_graph.py``) rests on two facts checked here without
timing: the CSC's slot order is PyG's (a stable sort by destination) whatever
the chunk of its counting sort, and the loader's own tensors are the CSC's
``colptr``, ``perm`` and scratch array plus the seed order, nothing the size
of the edge list in int64.
"""
from __future__ import annotations

import dataclasses
import warnings

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data

from graph_adapter.sampling import CSC, sample_neighbors
from graph_adapter.sampling import FixedSizeNeighborLoader


@given(st.integers(1, 40), st.integers(0, 400), st.integers(1, 64),
       st.sampled_from([torch.long, torch.int32]), st.integers(0, 10 ** 6))
@settings(max_examples=60, deadline=None)
def test_counting_sort_is_a_stable_sort_by_destination(n, m, chunk, dtype, seed):
    ei = torch.randint(0, n, (2, m), generator=torch.Generator().manual_seed(seed)).to(dtype)
    csc = CSC.from_edge_index(ei, n, chunk=chunk)
    ref = torch.sort(ei[1].long(), stable=True).indices
    assert torch.equal(csc.perm.long(), ref)
    assert csc.perm.dtype == torch.int32  # 4 bytes a slot below 2**31 edges
    assert csc.colptr.dtype == torch.int32
    assert torch.equal(csc.colptr.long(), torch.cat([
        torch.zeros(1, dtype=torch.long), torch.bincount(ei[1].long(), minlength=n).cumsum(0)]))
    assert torch.equal(csc.row, ei[0].long()[ref])
    assert csc.src.data_ptr() == ei[0].data_ptr()  # the graph's own sources, not a copy


def test_int32_edge_index_samples_as_int64():
    g = torch.Generator().manual_seed(3)
    ei = torch.randint(0, 50, (2, 600), generator=g)
    seeds = torch.arange(8)
    a, b = (sample_neighbors(CSC.from_edge_index(e, 50), seeds, [4, 3],
                             generator=torch.Generator().manual_seed(1))
            for e in (ei, ei.int()))
    assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
    assert torch.equal(a.e_id, b.e_id) and b.e_id.dtype == torch.long


def _tensors(obj, seen, out):
    """Every tensor reachable from ``obj`` through attributes, dicts, lists, tuples and
    dataclasses (each object once)."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _tensors(v, seen, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _tensors(v, seen, out)
    elif hasattr(obj, "__dict__") and (type(obj).__module__.startswith("graph_adapter")
                                       or dataclasses.is_dataclass(obj)):
        for v in vars(obj).values():
            _tensors(v, seen, out)


def _own_bytes(loader, data, *given):
    """Bytes of the loader's tensors whose storage is neither the graph's nor ``given``'s."""
    graph = {v.untyped_storage().data_ptr() for v in list(data.values()) + list(given)
             if isinstance(v, torch.Tensor)}
    found = []
    _tensors(loader, set(), found)
    own = {}
    for t in found:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in graph:
            own[ptr] = t.untyped_storage().nbytes()
    return sum(own.values())


def test_the_loader_holds_no_copy_of_the_graph_beyond_the_csc():
    n, m = 3000, 40000
    g = torch.Generator().manual_seed(0)
    data = Data(x=torch.randn(n, 8, generator=g), edge_index=torch.randint(0, n, (2, m), generator=g),
                y=torch.randint(0, 3, (n,), generator=g), edge_attr=torch.randn(m, 2, generator=g))
    seeds = torch.randperm(n, generator=g)[: n // 2].clone()
    L = FixedSizeNeighborLoader(data, [5, 3], 64, input_nodes=seeds, shuffle=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in L:  # an epoch: the seed order is cached, the scratch array made
            pass
    csc_bytes = 4 * (n + 1) + 4 * m + 4 * n  # colptr, perm, scratch: int32
    assert L.csc.nbytes() == csc_bytes
    order_bytes = 8 * seeds.numel()  # the epoch's shuffled seed order (int64)
    # the seeds given are int64 and kept as given: not counted as the loader's own
    assert L.seeds.data_ptr() == seeds.data_ptr()
    assert _own_bytes(L, data, seeds) == csc_bytes + order_bytes
    # the edge list in int64 (what PyG's CSC keeps twice: row and perm) would not fit
    assert _own_bytes(L, data, seeds) < 8 * m + order_bytes
