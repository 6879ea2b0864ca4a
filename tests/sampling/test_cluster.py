"""FixedSizeClusterLoader: Cluster-GCN batches at one shape; METIS named where missing."""
from __future__ import annotations

import threading
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data
from torch_geometric.nn import GraphSAGE

from graph_adapter import ipu_wrap
from graph_adapter.sampling import cluster
from graph_adapter.sampling import (FixedSizeClusterLoader, MetisUnavailableError, PartitionError,
                                    metis_available, metis_partition)
from graph_adapter.sampling import SubgraphOversizeError


def _graph(n, m, seed):
    g = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(n, 4, generator=g), edge_index=torch.randint(0, n, (2, m), generator=g),
                y=torch.randint(0, 3, (n,), generator=g), edge_attr=torch.randn(m, 2, generator=g))


@st.composite
def setups(draw):
    n = draw(st.integers(2, 60))
    P = draw(st.integers(1, min(n, 12)))
    seed = draw(st.integers(0, 10 ** 6))
    g = torch.Generator().manual_seed(seed)
    part = torch.cat([torch.arange(P), torch.randint(0, P, (n - P,), generator=g)])
    part = part[torch.randperm(n, generator=g)]  # every part non-empty
    return dict(data=_graph(n, draw(st.integers(0, 300)), seed), partition=part,
                batch_size=draw(st.integers(1, P)), shuffle=draw(st.booleans()),
                world_size=draw(st.integers(1, 3)), F=draw(st.integers(1, 2)),
                edges_fit=draw(st.sampled_from([0.5, 0.99])))


@given(setups())
@settings(max_examples=30, deadline=None)
def test_every_node_once_an_epoch_one_signature_induced_edges(cfg):
    d, part = cfg["data"], cfg["partition"]
    n = d.num_nodes
    seen, sigs, cut = [], set(), 0
    for r in range(cfg["world_size"]):
        L = FixedSizeClusterLoader(d, batch_size=cfg["batch_size"], partition=part,
                                   shuffle=cfg["shuffle"], micro_batches=cfg["F"], rank=r,
                                   world_size=cfg["world_size"], success_ratio=cfg["edges_fit"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for flat in L:
                sigs.add(tuple((k, tuple(v.shape), v.dtype) for k, v in flat.items()))
                for i in range(cfg["F"]):
                    f = {k: v[i] for k, v in flat.items()} if cfg["F"] > 1 else flat
                    nm, em = f["node_mask"], f["edge_mask"]
                    assert torch.equal(f["seed_mask"], nm)  # every real row is a loss row
                    nid = f["n_id"][nm]
                    seen.append(nid)
                    # the rows are whole clusters
                    cl = part[nid].unique()
                    assert sorted(nid.tolist()) == sorted((part[:, None] == cl).any(1)
                                                          .nonzero().view(-1).tolist())
                    # edges: input edges between the rows, all of them unless trimmed
                    assert torch.equal(f["n_id"][f["edge_index"][:, em]],
                                       d.edge_index[:, f["e_id"][em]])
                    assert torch.equal(f["edge_attr"][em], d.edge_attr[f["e_id"][em]])
                    inside = torch.zeros(n, dtype=torch.bool)
                    inside[nid] = True
                    want = int((inside[d.edge_index[0]] & inside[d.edge_index[1]]).sum())
                    assert int(em.sum()) <= want
                    cut += want - int(em.sum())
        assert L.stats.trimmed_nodes == 0  # the node budget holds the largest batch
    assert len(sigs) == 1
    assert sorted(torch.cat(seen).tolist()) == list(range(n))  # each node once, over ranks


def test_padding_does_not_change_a_models_outputs_on_real_rows():
    d = _graph(80, 400, 5)
    part = torch.arange(80) % 6
    L = FixedSizeClusterLoader(d, batch_size=2, partition=part, shuffle=True)
    torch.manual_seed(0)
    model = GraphSAGE(4, 8, num_layers=2, out_channels=3)
    w = ipu_wrap(model)
    w.eval()
    for flat in L:
        out = w(flat)["output"]
        nm, em = flat["node_mask"], flat["edge_mask"]
        ref = model(flat["x"][nm], flat["edge_index"][:, em])
        torch.testing.assert_close(out[nm], ref)


def test_trim_cuts_edges_only_counted_and_error_policy_names_the_batch():
    d = _graph(60, 900, 1)
    part = torch.arange(60) % 5
    L = FixedSizeClusterLoader(d, batch_size=2, partition=part, shuffle=True,
                               success_ratio=0.1)
    with pytest.warns(UserWarning, match="trimmed"):
        for _ in L:
            pass
    assert L.stats.trimmed_batches > 0 and L.stats.trimmed_nodes == 0
    assert L.stats.trimmed_edges > 0
    E = FixedSizeClusterLoader(d, batch_size=2, partition=part, shuffle=True,
                               success_ratio=0.1, oversize="error")
    with pytest.raises(SubgraphOversizeError, match="clusters"):
        for _ in E:
            pass


def test_bad_partitions_and_budgets_are_named():
    d = _graph(10, 30, 0)
    with pytest.raises(PartitionError, match="10 nodes"):
        FixedSizeClusterLoader(d, batch_size=1, partition=torch.zeros(9, dtype=torch.long))
    with pytest.raises(PartitionError, match="no node in part 1"):
        FixedSizeClusterLoader(d, batch_size=1, partition=torch.tensor([0, 2] * 5))
    with pytest.raises(PartitionError, match=r"partition\[3\] = -1"):
        FixedSizeClusterLoader(d, batch_size=1, partition=torch.tensor([0, 0, 0, -1] + [0] * 6))
    with pytest.raises(PartitionError, match="integer part id"):
        FixedSizeClusterLoader(d, batch_size=1, partition=torch.zeros(10))
    with pytest.raises(ValueError, match="largest clusters"):
        FixedSizeClusterLoader(d, batch_size=1, partition=torch.zeros(10, dtype=torch.long),
                               budget={"nodes": 9, "edges": 40, "graphs": 2})
    with pytest.raises(PartitionError, match="num_parts"):
        FixedSizeClusterLoader(d, batch_size=1)


def test_metis_is_used_where_available_else_the_error_names_what_to_install():
    d = _graph(40, 200, 3)
    ok, why = metis_available()
    if ok:
        L = FixedSizeClusterLoader(d, num_parts=4, batch_size=2)
        assert L.num_parts == 4 and int(L.node_perm.numel()) == 40
    else:
        with pytest.raises(MetisUnavailableError, match="pip install pymetis") as e:
            FixedSizeClusterLoader(d, num_parts=4, batch_size=2)
        assert why in str(e.value) and "partition=" in str(e.value)


def test_the_node_budget_holds_the_largest_clusters_together_whatever_the_quantile():
    d = _graph(23, 120, 2)
    part = torch.tensor([0, 1, 2] + [3] * 20)  # clusters of 1, 1, 1 and 20 nodes
    L = FixedSizeClusterLoader(d, batch_size=2, partition=part, shuffle=True,
                               success_ratio=0.5, fit_batches=1)
    assert int(L.budget.nodes) >= 21 + 2  # the 20-node cluster with a 1-node one
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for epoch in range(3):
            L.set_epoch(epoch)
            seen = torch.cat([f["n_id"][f["node_mask"]] for f in L])
            assert sorted(seen.tolist()) == list(range(23)) and L.stats.trimmed_nodes == 0


def test_without_any_metis_the_error_names_pip_install_pymetis(monkeypatch):
    monkeypatch.setattr(cluster, "_PROBES", {k: (lambda k=k: f"{k} is absent (test)")
                                             for k in cluster.METIS_BACKENDS})
    ok, why = metis_available()
    assert not ok and "pymetis is absent (test)" in why
    with pytest.raises(MetisUnavailableError, match="pip install pymetis") as e:
        metis_partition(torch.tensor([[0, 1], [1, 0]]), 2, 2)
    assert why in str(e.value) and "partition=" in str(e.value)
    with pytest.raises(ValueError, match="choose one of"):
        metis_available("metis5")
    with pytest.raises(PartitionError, match="num_parts=5 > the graph's 2 nodes"):
        metis_partition(torch.tensor([[0, 1], [1, 0]]), 2, 5)


# --------------------------------------------------------------------------
# prefetch=k: the neighbour loader's background thread, the same batches
# --------------------------------------------------------------------------
def _epoch_and_stats(loader):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trims: counted in stats, compared
        return list(loader), loader.stats.as_dict()


@given(setups(), st.integers(1, 3), st.integers(0, 2))
@settings(deadline=None)
def test_prefetched_cluster_batches_and_stats_equal_the_callers_thread(cfg, depth, epoch):
    kw = dict(batch_size=cfg["batch_size"], partition=cfg["partition"], shuffle=cfg["shuffle"],
              micro_batches=cfg["F"], world_size=cfg["world_size"],
              rank=cfg["batch_size"] % cfg["world_size"], success_ratio=cfg["edges_fit"])
    ref = FixedSizeClusterLoader(cfg["data"], **kw)
    pre = FixedSizeClusterLoader(cfg["data"], prefetch=depth, **kw)
    ref.set_epoch(epoch)
    pre.set_epoch(epoch)
    (a, sa), (b, sb) = _epoch_and_stats(ref), _epoch_and_stats(pre)
    assert pre.prefetch == depth and len(a) == len(b) == len(ref)
    for x, y in zip(a, b):
        assert list(x) == list(y) and all(torch.equal(x[k], y[k]) for k in x)
    assert sa == sb  # trims, fill, partition: the same counts
    assert not [t for t in threading.enumerate()
                if t.name == "graph_adapter-prefetch"]  # the epoch's thread has ended


def test_prefetched_cluster_error_reaches_the_consumer_at_its_batch():
    d = _graph(60, 900, 1)
    kw = dict(batch_size=2, partition=torch.arange(60) % 5, shuffle=True, success_ratio=0.1,
              oversize="error")
    got = []
    with pytest.raises(SubgraphOversizeError, match="clusters") as plain:
        for f in FixedSizeClusterLoader(d, **kw):
            got.append(f)
    n_plain = len(got)
    with pytest.raises(SubgraphOversizeError, match="clusters") as pre:
        for f in FixedSizeClusterLoader(d, prefetch=2, **kw):
            got.append(f)
    assert str(plain.value) == str(pre.value) and len(got) == 2 * n_plain


def test_a_prefetching_cluster_loader_builds_its_batches_in_the_thread():
    d = _graph(60, 300, 2)
    L = FixedSizeClusterLoader(d, batch_size=1, partition=torch.arange(60) % 10, prefetch=2)
    assert len(L) == 10  # more batches than the thread holds ahead: it runs at the first
    running = [bool([t for t in threading.enumerate() if t.name == "graph_adapter-prefetch"])
               for _ in L]
    assert running[0] and len(running) == 10


def test_bad_cluster_prefetch_values_are_named():
    d = _graph(20, 60, 5)
    part = torch.arange(20) % 4
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match=r"prefetch="):
            FixedSizeClusterLoader(d, batch_size=2, partition=part, prefetch=bad)
    with pytest.raises(ValueError, match=r"prefetch=2 with num_workers=1.*use one of them"):
        FixedSizeClusterLoader(d, batch_size=2, partition=part, prefetch=2, num_workers=1)


def test_batches_built_in_the_loop_body_while_prefetching_are_not_disturbed():
    """The thread and the caller build induced subgraphs of one CSC (one scratch array)
    at once: the CSC's lock keeps each whole."""
    d = _graph(20000, 400000, 3)  # batches of 1,667 nodes: long enough to overlap
    kw = dict(batch_size=2, partition=torch.arange(20000) % 24, shuffle=True, seed=4)
    ref = _epoch_and_stats(FixedSizeClusterLoader(d, **kw))[0]
    L = FixedSizeClusterLoader(d, prefetch=3, **kw)
    want = [L.batch(2, c) for c in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, f in enumerate(L):
            for c in range(3):  # the caller builds batches while the thread does
                g = L.batch(2, c)
                assert all(torch.equal(g[k], want[c][k]) for k in g), (i, c)
            assert all(torch.equal(f[k], ref[i][k]) for k in f), i
