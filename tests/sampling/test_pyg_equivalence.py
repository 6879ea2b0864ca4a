"""``loader.to_pyg(batch)`` is PyG's batch: properties over random graphs.

* every seed (node loader), supervision edge (link loader) or node (cluster loader) is in
  exactly one batch an epoch, read from the PyG objects;
* where the sampler is deterministic (every fanout ``-1``; the induced subgraph; whole
  clusters) the unpadded batch equals, key by key and in order, an independent reference
  written here (a breadth-first search over the input edges), and, where torch-sparse is
  importable (``needs_scatter``), PyG's own ``NeighborLoader`` / ``LinkNeighborLoader``
  (hetero: the same node and edge sets; PyG's order of edge types within a hop follows its
  backend); the cluster loader equals PyG's ``ClusterLoader`` / ``ClusterData`` (no
  compiled op needed).

PyG orders a node's in-edges by a sort of the destinations: ``torch.sort`` unstable where
pyg-lib is absent, pyg-lib's radix ``index_sort`` where it is present. Ours keeps input order
among a node's in-edges (a stable sort), which is what PyG gives with a stable sort, so
the comparisons with PyG run its sort stable (:func:`_pyg_sorts_stable`); with the unstable
one only the order of one node's in-edges (and the new nodes they bring) may differ.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Dict, List, Tuple
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st
from torch_geometric.data import Data

from graph_adapter.sampling import (FixedSizeClusterLoader, FixedSizeHeteroNeighborLoader,
                                    FixedSizeLinkNeighborLoader, FixedSizeNeighborLoader)
from graph_adapter.sampling.to_pyg import sampled_per_hop

SETTINGS = settings(max_examples=15, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def graphs(draw, max_nodes: int = 30) -> Data:
    """A random directed multigraph (self-loops, duplicates and isolated nodes possible)."""
    n = draw(st.integers(2, max_nodes))
    m = draw(st.integers(0, 4 * n))
    seed = draw(st.integers(0, 2 ** 16))
    g = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(n, 3, generator=g), edge_index=torch.randint(0, n, (2, m), generator=g),
                edge_attr=torch.randn(m, 2, generator=g), y=torch.randint(0, 4, (n,), generator=g))


def _batches(loader) -> List[Data]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [loader.to_pyg(flat) for flat in loader]


# ------------------------------------------------------------------ every seed once
@SETTINGS
@given(graphs(), st.integers(1, 9), st.booleans(), st.integers(0, 3))
def test_every_seed_in_one_batch_an_epoch(data, batch_size, shuffle, seed):
    n = data.num_nodes
    loader = FixedSizeNeighborLoader(data, [2, 2], batch_size, shuffle=shuffle, seed=seed)
    got = torch.cat([b.n_id[:b.batch_size] for b in _batches(loader)])
    assert sorted(got.tolist()) == list(range(n))
    assert all(torch.equal(b.input_id, b.n_id[:b.batch_size]) for b in _batches(loader))
    if data.num_edges:
        links = FixedSizeLinkNeighborLoader(data, [2], batch_size=batch_size, shuffle=shuffle,
                                            seed=seed)
        ids = torch.cat([b.input_id for b in _batches(links)])
        assert sorted(ids.tolist()) == list(range(data.num_edges))
    parts = torch.arange(n) % min(n, 4)
    clusters = FixedSizeClusterLoader(data, batch_size=min(batch_size, 4), partition=parts,
                                      shuffle=shuffle, seed=seed)
    nodes = torch.cat([c.x for c in _batches(clusters)])
    assert sorted(map(tuple, nodes.tolist())) == sorted(map(tuple, data.x.tolist()))


# ------------------------------------------------------------------ the reference
def _in_edges(data: Data) -> Dict[int, List[int]]:
    """Each node's in-edges (ids), in input order."""
    out: Dict[int, List[int]] = {v: [] for v in range(data.num_nodes)}
    for e, v in enumerate(data.edge_index[1].tolist()):
        out[v].append(e)
    return out


def reference(data: Data, seeds: List[int], hops: int, induced: bool, disjoint: bool
              ) -> Tuple[List[int], List[Tuple[int, int, int]], List[int], List[int], List[int]]:
    """A full-fanout sample, breadth first: ``(n_id, [(src row, dst row, e_id)], tree of
    each row, nodes per hop, edges per hop)``.

    Rows are the seeds, then the new sources of each hop in the order their edges are
    met (frontier rows in row order, each one's in-edges in input order); a row is a
    node (a (tree, node) pair with ``disjoint``). ``induced``: the same rows, and for each
    row in row order every in-edge from a row (input order).
    """
    ins, src = _in_edges(data), data.edge_index[0].tolist()
    key = (lambda tree, v: (tree, v)) if disjoint else (lambda tree, v: v)
    row_of: Dict[object, int] = {}
    n_id: List[int] = []
    tree: List[int] = []
    for i, s in enumerate(seeds):
        row_of[key(i, s)] = len(n_id)
        n_id.append(s)
        tree.append(i)
    edges: List[Tuple[int, int, int]] = []
    frontier = list(range(len(seeds)))
    nodes_per_hop, edges_per_hop = [len(seeds)], []
    for _ in range(hops):
        new: List[int] = []
        before = len(edges)
        for r in frontier:
            for e in ins[n_id[r]]:
                k = key(tree[r], src[e])
                if k not in row_of:
                    row_of[k] = len(n_id)
                    n_id.append(src[e])
                    tree.append(tree[r])
                    new.append(row_of[k])
                edges.append((row_of[k], r, e))
        nodes_per_hop.append(len(new))
        edges_per_hop.append(len(edges) - before)
        frontier = new
    if induced:
        edges = [(row_of[src[e]], r, e) for r in range(len(n_id)) for e in ins[n_id[r]]
                 if src[e] in row_of]
    return n_id, edges, tree, nodes_per_hop, edges_per_hop


def _equal_to_reference(data: Data, b: Data, hops: int, induced: bool, disjoint: bool) -> None:
    n_id, edges, tree, nph, eph = reference(data, b.input_id.tolist(), hops, induced, disjoint)
    assert b.n_id.tolist() == n_id
    want = torch.tensor(edges, dtype=torch.long).view(-1, 3)
    assert torch.equal(b.edge_index, want[:, :2].t())
    assert torch.equal(b.e_id, want[:, 2])
    assert torch.equal(b.x, data.x[b.n_id]) and torch.equal(b.y, data.y[b.n_id])
    assert torch.equal(b.edge_attr, data.edge_attr[b.e_id])
    assert b.batch_size == b.input_id.numel()
    if disjoint:
        assert b.batch.tolist() == tree
    if induced:
        assert "num_sampled_nodes" not in b  # PyG's induced sampler gives none
    else:
        assert b.num_sampled_nodes == nph and b.num_sampled_edges == eph


@SETTINGS
@given(graphs(), st.integers(1, 3), st.integers(1, 8), st.sampled_from(
    ["directed", "induced", "disjoint"]), st.booleans())
def test_full_fanouts_equal_the_reference(data, hops, batch_size, mode, shuffle):
    induced, disjoint = mode == "induced", mode == "disjoint"
    loader = FixedSizeNeighborLoader(data, [-1] * hops, batch_size, shuffle=shuffle,
                                     directed=not induced, disjoint=disjoint,
                                     success_ratio=1.0, fit_batches=1000, oversize="error")
    for b in _batches(loader):
        _equal_to_reference(data, b, hops, induced, disjoint)


def test_the_reference_is_not_vacuous():
    """A batch the reference would reject: one edge dropped, one row swapped."""
    data = Data(x=torch.arange(6.0).view(-1, 1), edge_index=torch.tensor([[1, 2, 3, 4, 5],
                                                                           [0, 0, 1, 2, 2]]),
                edge_attr=torch.arange(5.0).view(-1, 1), y=torch.arange(6))
    loader = FixedSizeNeighborLoader(data, [-1, -1], 1, input_nodes=torch.tensor([0]),
                                     success_ratio=1.0, oversize="error")
    (b,) = _batches(loader)
    _equal_to_reference(data, b, 2, False, False)
    assert b.num_sampled_nodes == [1, 2, 3] and b.num_sampled_edges == [2, 3]
    cut = b.clone()
    cut.edge_index, cut.e_id, cut.edge_attr = b.edge_index[:, 1:], b.e_id[1:], b.edge_attr[1:]
    with pytest.raises(AssertionError):
        _equal_to_reference(data, cut, 2, False, False)
    swapped = b.clone()
    swapped.n_id = b.n_id[[0, 2, 1, 3, 4, 5]]
    with pytest.raises(AssertionError):
        _equal_to_reference(data, swapped, 2, False, False)


@SETTINGS
@given(graphs(), st.integers(1, 3))
def test_per_hop_counts_read_back_from_a_sample(data, hops):
    """:func:`sampled_per_hop` on a sampled batch gives the sampler's own per-hop counts."""
    loader = FixedSizeNeighborLoader(data, [3] * hops, 4, success_ratio=1.0, oversize="error")
    for chunk in range(len(loader)):
        seeds = loader.chunk_seeds(0, chunk)
        s = loader.sample(seeds, 0, chunk)
        got = sampled_per_hop(s.edge_index, s.num_nodes, int(seeds.numel()), hops)
        assert got == (list(s.nodes_per_hop), list(s.edges_per_hop))


# ------------------------------------------------------------------ PyG's own loaders
@contextlib.contextmanager
def _pyg_sorts_stable():
    """PyG's CSC / partition sorts made stable (pyg-lib's radix sort is; torch's default
    sort, which PyG uses without pyg-lib, is not): see the module doc."""
    import torch_geometric.loader.cluster as cluster
    import torch_geometric.sampler.utils as sampler_utils
    import torch_geometric.utils._sort_edge_index as sort_edge_index

    def stable(x, max_value=None, stable=False):
        return x.sort(stable=True)

    with mock.patch.object(sampler_utils, "index_sort", stable), \
            mock.patch.object(cluster, "index_sort", stable), \
            mock.patch.object(sort_edge_index, "index_sort", stable):
        yield


def _same(ours: Data, theirs: Data, skip=()) -> None:
    for k in theirs.keys():
        if k in skip:
            continue
        a, b = ours[k], theirs[k]
        if isinstance(b, torch.Tensor):
            assert isinstance(a, torch.Tensor) and torch.equal(a, b), k
        else:
            assert a == b, k
    extra = set(ours.keys()) - set(theirs.keys())
    # PyG's torch-sparse path gives no per-hop counts (its pyg-lib path does: held above)
    assert extra <= {"num_sampled_nodes", "num_sampled_edges"}, extra


@pytest.mark.needs_scatter
@SETTINGS
@given(graphs(), st.integers(1, 3), st.integers(1, 8), st.booleans())
def test_node_batches_equal_pygs(data, hops, batch_size, induced):
    from torch_geometric.loader import NeighborLoader

    ours = FixedSizeNeighborLoader(data, [-1] * hops, batch_size, directed=not induced,
                                   success_ratio=1.0, fit_batches=1000, oversize="error")
    with _pyg_sorts_stable():
        theirs = list(NeighborLoader(data, num_neighbors=[-1] * hops, batch_size=batch_size,
                                     subgraph_type="induced" if induced else "directional"))
    mine = _batches(ours)
    assert len(mine) == len(theirs)
    for a, b in zip(mine, theirs):
        _same(a, b)


@pytest.mark.needs_scatter
@SETTINGS
@given(graphs(), st.integers(1, 2), st.integers(1, 6))
def test_link_batches_equal_pygs(data, hops, batch_size):
    from torch_geometric.loader import LinkNeighborLoader

    if data.num_edges == 0:
        return
    ours = FixedSizeLinkNeighborLoader(data, [-1] * hops, batch_size=batch_size,
                                       neg_sampling=None, success_ratio=1.0, fit_batches=1000,
                                       oversize="error")
    with _pyg_sorts_stable():
        theirs = list(LinkNeighborLoader(data, num_neighbors=[-1] * hops,
                                         batch_size=batch_size))
    mine = _batches(ours)
    assert len(mine) == len(theirs)
    for a, b in zip(mine, theirs):
        _same(a, b)


def _with_ring(data: Data) -> Data:
    """``data`` plus the edges ``i -> i + 1`` (mod n), shuffled in: PyG's ``ClusterLoader``
    fails on a batch whose nodes have no edge (``map_index`` of nothing), so every node
    gets one in and one out."""
    n = data.num_nodes
    ring = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])
    ei = torch.cat([data.edge_index, ring], 1)
    perm = torch.randperm(ei.size(1), generator=torch.Generator().manual_seed(n))
    return Data(x=data.x, y=data.y, edge_index=ei[:, perm],
                edge_attr=torch.cat([data.edge_attr, torch.zeros(n, 2)])[perm])


@SETTINGS
@given(graphs(), st.integers(1, 5), st.integers(1, 3), st.sampled_from(["csr", "csc"]))
def test_cluster_batches_equal_pygs(data, parts, batch_size, fmt):
    from torch_geometric.loader import ClusterData, ClusterLoader

    data = _with_ring(data)
    parts = min(parts, data.num_nodes)
    part = torch.arange(data.num_nodes) % parts
    ours = FixedSizeClusterLoader(data, batch_size=batch_size, partition=part, sparse_format=fmt,
                                  success_ratio=1.0, oversize="error")
    with _pyg_sorts_stable(), mock.patch.object(ClusterData, "_metis", lambda *a: part):
        theirs = list(ClusterLoader(ClusterData(data, parts, log=False, sparse_format=fmt),
                                    batch_size=batch_size))
    mine = _batches(ours)
    assert len(mine) == len(theirs)
    for a, b in zip(mine, theirs):
        _same(a, b)
        assert set(a.keys()) == set(b.keys())


@SETTINGS
@given(graphs(), st.integers(1, 5), st.sampled_from(["csr", "csc"]))
def test_kept_inter_cluster_edges_equal_cluster_datas(data, parts, fmt):
    from torch_geometric.loader import ClusterData

    parts = min(parts, data.num_nodes)
    part = torch.arange(data.num_nodes) % parts
    ours = FixedSizeClusterLoader(data, batch_size=1, partition=part, sparse_format=fmt,
                                  keep_inter_cluster_edges=True, success_ratio=1.0,
                                  oversize="error")
    with _pyg_sorts_stable(), mock.patch.object(ClusterData, "_metis", lambda *a: part):
        theirs = ClusterData(data, parts, log=False, sparse_format=fmt,
                             keep_inter_cluster_edges=True)
    mine = _batches(ours)
    assert len(mine) == len(theirs)
    for i, a in enumerate(mine):
        _same(a, theirs[i])
        assert set(a.keys()) == set(theirs[i].keys())


def test_to_pyg_of_a_dict_that_is_no_batch_of_the_loader_is_named():
    from graph_adapter.sampling.to_pyg import ForeignBatchError

    data = Data(x=torch.randn(10, 2), edge_index=torch.randint(0, 10, (2, 30)))
    loader = FixedSizeNeighborLoader(data, [2], 4)
    with pytest.raises(ForeignBatchError, match=r"FixedSizeNeighborLoader.to_pyg: the dict "
                                                r"lacks \['edge_mask', 'n_id', 'node_mask'\]"):
        loader.to_pyg({"x": data.x, "edge_index": data.edge_index})
    with pytest.raises(ForeignBatchError, match="got a Data; pass a padded batch"):
        loader.to_pyg(data)
    assert isinstance(ForeignBatchError("x"), ValueError)


@st.composite
def hetero_graphs(draw):
    """A random graph of node types ``p`` and ``a`` and three edge types (one with attributes)."""
    from torch_geometric.data import HeteroData

    n = {"p": draw(st.integers(2, 15)), "a": draw(st.integers(1, 15))}
    g = torch.Generator().manual_seed(draw(st.integers(0, 2 ** 16)))
    data = HeteroData()
    for t, k in n.items():
        data[t].x = torch.randn(k, 2, generator=g)
    for src, dst in (("p", "p"), ("p", "a"), ("a", "p")):
        m = draw(st.integers(0, 3 * n[dst]))
        data[src, "to", dst].edge_index = torch.stack([
            torch.randint(0, n[src], (m,), generator=g), torch.randint(0, n[dst], (m,), generator=g)])
    data["a", "to", "p"].edge_attr = torch.randn(data["a", "to", "p"].num_edges, 3, generator=g)
    return data


@pytest.mark.needs_scatter
@SETTINGS
@given(hetero_graphs(), st.integers(1, 2), st.integers(1, 6), st.booleans())
def test_hetero_batches_hold_pygs_nodes_and_edges(data, hops, batch_size, induced):
    """Hetero: PyG's order of edge types within a hop follows its backend (torch-sparse walks
    a hash map of them), so the rows of a type may come in another order; the seeds, every
    type's node and edge sets and each edge's ends and attributes are PyG's."""
    from torch_geometric.loader import NeighborLoader

    ours = FixedSizeHeteroNeighborLoader(data, [-1] * hops, batch_size, input_nodes=("p", None),
                                         directed=not induced, success_ratio=1.0,
                                         fit_batches=1000, oversize="error")
    with _pyg_sorts_stable():
        theirs = list(NeighborLoader(data, num_neighbors=[-1] * hops, batch_size=batch_size,
                                     input_nodes="p",
                                     subgraph_type="induced" if induced else "directional"))
    mine = _batches(ours)
    assert len(mine) == len(theirs)
    for a, b in zip(mine, theirs):
        assert torch.equal(a["p"].input_id, b["p"].input_id)
        assert a["p"].batch_size == b["p"].batch_size
        assert torch.equal(a["p"].n_id[:a["p"].batch_size], b["p"].n_id[:b["p"].batch_size])
        for t in data.node_types:
            assert sorted(a[t].n_id.tolist()) == sorted(b[t].n_id.tolist()), t
            assert torch.equal(a[t].x, data[t].x[a[t].n_id])
        for et in data.edge_types:
            assert sorted(a[et].e_id.tolist()) == sorted(b[et].e_id.tolist()), et
            src, _, dst = et
            glob = torch.stack([a[src].n_id[a[et].edge_index[0]], a[dst].n_id[a[et].edge_index[1]]])
            assert torch.equal(glob, data[et].edge_index[:, a[et].e_id])
        assert torch.equal(a["a", "to", "p"].edge_attr, data["a", "to", "p"].edge_attr[a["a", "to", "p"].e_id])


@SETTINGS
@given(graphs(), st.integers(1, 6), st.booleans(), st.booleans())
def test_temporal_batches_carry_pygs_seed_time(data, batch_size, shuffle, given_times):
    """PyG's temporal batch: ``seed_time`` (``input_time``, else the seeds' node times), and
    no sampled row of a seed's tree later than it (``batch``: temporal sampling is disjoint;
    the seed itself is its tree's root whatever its own time)."""
    n = data.num_nodes
    g = torch.Generator().manual_seed(n)
    data.time = torch.randint(0, 10, (n,), generator=g)
    input_time = torch.randint(0, 10, (n,), generator=g) if given_times else None
    loader = FixedSizeNeighborLoader(data, [2, 2], batch_size, time_attr="time",
                                     input_time=input_time, shuffle=shuffle)
    for b in _batches(loader):
        want = (input_time if given_times else data.time)[b.input_id]
        assert torch.equal(b.seed_time, want)
        k = b.batch_size
        assert bool((b.time[k:] <= b.seed_time[b.batch[k:]]).all())
