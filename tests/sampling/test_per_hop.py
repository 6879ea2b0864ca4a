"""FixedSizeNeighborLoader(per_hop_budget=...): one block of rows and edges per hop.

The layout's invariants over random graphs (one signature; every edge of hop
``h``'s block joins rows of blocks ``<= h``, into block ``h - 1``; padding
edges are self-loops on a padding row of the seeds' block; trimming ``k``
layers with PyG's own ``trim_to_layer`` keeps exactly blocks ``<= H - k``), the
unpadded batch equal to the raw sample (PyG's layout and per-hop counts), the
cuts of ``oversize``, and the named errors."""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data
from torch_geometric.utils import trim_to_layer

from graph_adapter.format import (ALL_RESERVED_KEYS, EDGE_MASK, GRAPH_MASK, HOP_EDGES, HOP_NODES,
                                  NODE_MASK, SEED_MASK, hop_budgets, hop_shape, unpad_batch,
                                  value_problems)
from graph_adapter.sampling import (FixedSizeNeighborLoader, HopBudget, HopBudgetError,
                                    SubgraphOversizeError, fit_to_hops)

# the cuts of low quantiles are the point of some examples: counted, warned, checked here
pytestmark = pytest.mark.filterwarnings("ignore:.*were trimmed:UserWarning")


def _graph(n: int, m: int, seed: int, feat: int = 3) -> Data:
    g = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(n, feat, generator=g), y=torch.arange(n),
                edge_index=torch.randint(0, n, (2, m), generator=g),
                edge_attr=torch.randn(m, 2, generator=g))


@st.composite
def setups(draw):
    n = draw(st.integers(6, 60))
    return dict(data=_graph(n, draw(st.integers(1, 300)), draw(st.integers(0, 10 ** 6))),
                num_neighbors=draw(st.lists(st.sampled_from([-1, 1, 2, 4]), min_size=1,
                                            max_size=3)),
                batch_size=draw(st.integers(1, 7)), replace=draw(st.booleans()),
                disjoint=draw(st.booleans()), seed=draw(st.integers(0, 99)),
                # low quantiles: hops over their blocks, cut
                success_ratio=draw(st.sampled_from([0.3, 0.7, 1.0])))


def _signature(flat):
    return {k: (v.dtype, tuple(v.shape)) for k, v in flat.items()}


def _starts(sizes):
    out, acc = [], 0
    for s in sizes:
        out.append(acc)
        acc += s
    return out + [acc]


def _check_layout(flat, hb: HopBudget):
    b, e = list(hb.nodes), list(hb.edges)
    assert hop_budgets(flat[HOP_NODES].shape) == b and hop_budgets(flat[HOP_EDGES].shape) == e
    ns, es = _starts(b), _starts(e)
    nm, em, ei = flat[NODE_MASK], flat[EDGE_MASK], flat["edge_index"]
    assert nm.numel() == ns[-1] and em.numel() == es[-1]
    pad_row = b[0] - 1
    assert not nm[pad_row]  # the padding edges' row is a padding row of block 0
    for h in range(len(b)):  # each block: its real rows, then padding
        blk = nm[ns[h]:ns[h + 1]]
        assert torch.equal(blk, torch.arange(blk.numel()) < int(blk.sum()))
    assert torch.equal(flat[SEED_MASK][:int(flat[SEED_MASK].sum())],
                       torch.ones(int(flat[SEED_MASK].sum()), dtype=torch.bool))
    for h in range(1, len(b)):
        blk, cols = em[es[h - 1]:es[h]], ei[:, es[h - 1]:es[h]]
        assert torch.equal(blk, torch.arange(blk.numel()) < int(blk.sum()))
        real, pad = cols[:, blk], cols[:, ~blk]
        assert bool((real < ns[h + 1]).all())  # rows of blocks <= h only
        assert bool(((real[1] >= ns[h - 1]) & (real[1] < ns[h])).all())  # into block h - 1
        assert bool(nm[real].all())  # between real rows
        assert bool((pad == pad_row).all())
    assert bool(em.sum() == 0) or bool(nm[ei[:, em]].all())
    assert flat["batch"].tolist() == (~nm).long().tolist() or not bool(flat[GRAPH_MASK][0])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups())
def test_the_per_hop_layout_and_its_trimming(setup):
    loader = FixedSizeNeighborLoader(**setup, per_hop_budget=True)
    hb = loader.hop_budget
    assert hb.hops == len(setup["num_neighbors"]) and loader.budget == hb.budget
    sig = None
    H = hb.hops
    for flat in loader:
        sig = sig or _signature(flat)
        assert _signature(flat) == sig  # one signature every batch
        _check_layout(flat, hb)
        assert {k for k in flat if k not in setup["data"].keys()} <= set(ALL_RESERVED_KEYS)
        assert value_problems(flat) == []  # every value rule but a sorted batch vector
        x = torch.arange(flat[NODE_MASK].numel())
        ei, ea = flat["edge_index"], torch.arange(flat[EDGE_MASK].numel())
        nodes, edges = list(hb.nodes), list(hb.edges)
        for k in range(1, H + 1):  # PyG's own trimming, layer by layer
            x, ei, ea = trim_to_layer(k, nodes, edges, x, ei, ea)
            kept_n, kept_e = sum(nodes[:H + 1 - k]), sum(edges[:H - k])
            assert torch.equal(x, torch.arange(kept_n))  # exactly blocks <= H - k
            assert torch.equal(ea, torch.arange(kept_e))
            assert bool((ei < kept_n).all())  # no edge left pointing at a cut row


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups())
def test_unpadded_batches_are_the_samples_in_pygs_layout(setup):
    loader = FixedSizeNeighborLoader(**setup, per_hop_budget=True)
    hb, data = loader.hop_budget, setup["data"]
    for chunk in range(len(loader)):
        seeds = loader.chunk_seeds(0, chunk)
        raw = loader.sample(seeds, 0, chunk)
        fitted, cut_n, cut_e = fit_to_hops(raw, hb)
        flat = loader.batch(0, chunk)
        graphs = unpad_batch(flat)
        if seeds.numel() == 0:
            assert graphs == []
            continue
        (d,) = graphs
        assert d.num_sampled_nodes == fitted.nodes_per_hop  # PyG's per-hop counts
        assert d.num_sampled_edges == fitted.edges_per_hop
        assert torch.equal(d.n_id, fitted.n_id) and torch.equal(d.e_id, fitted.e_id)
        assert torch.equal(d.edge_index, fitted.edge_index)
        assert torch.equal(d.x, data.x[fitted.n_id]) and torch.equal(d.y, fitted.n_id)
        assert torch.equal(d.edge_attr, data.edge_attr[fitted.e_id])
        if cut_n == cut_e == 0:  # the sample as sampled, nothing dropped
            assert torch.equal(d.edge_index, raw.edge_index)
            assert d.num_sampled_nodes == raw.nodes_per_hop


def test_a_sample_within_its_blocks_is_kept_whole_and_an_oversize_one_cut_per_hop():
    data = _graph(40, 200, 1)
    loader = FixedSizeNeighborLoader(data, [4, 4], batch_size=4, per_hop_budget=True)
    raw = loader.sample(loader.chunk_seeds(0, 0), 0, 0)
    assert fit_to_hops(raw, HopBudget(nodes=(6, 100, 200), edges=(100, 300)))[1:] == (0, 0)
    small = HopBudget(nodes=(6, 3, 2), edges=(5, 4))
    cut, cn, ce = fit_to_hops(raw, small)
    assert cut.nodes_per_hop == [4] + [min(c, m) for c, m in zip(raw.nodes_per_hop[1:], (3, 2))]
    assert all(a <= c for a, c in zip(cut.edges_per_hop, (5, 4)))
    assert cn == raw.num_nodes - cut.num_nodes and ce == raw.num_edges - cut.num_edges > 0
    hop2 = raw.nodes_per_hop[0] + raw.nodes_per_hop[1]
    assert torch.equal(cut.n_id, torch.cat([raw.n_id[:4], raw.n_id[4:4 + 3], raw.n_id[hop2:][:2]]))
    strict = FixedSizeNeighborLoader(data, [4, 4], batch_size=4, per_hop_budget=small,
                                     oversize="error")
    with pytest.raises(SubgraphOversizeError, match="per hop"):
        next(iter(strict))
    with pytest.warns(UserWarning, match="HopBudget"):
        for flat in FixedSizeNeighborLoader(data, [4, 4], batch_size=4, per_hop_budget=small):
            _check_layout(flat, small)


def test_micro_batches_fill_batches_and_a_given_budget():
    data = _graph(30, 120, 2)
    hb = HopBudget(nodes=(6, 12, 20), edges=(14, 40))
    loader = FixedSizeNeighborLoader(data, [3, 3], batch_size=4, micro_batches=3,
                                     input_nodes=torch.arange(5), per_hop_budget=hb.to_json())
    assert loader.hop_budget == hb == HopBudget.from_dict(hb.to_dict())
    (flat,) = list(loader)  # 5 seeds: chunks of 4 and 1, then a fill batch
    assert flat[HOP_NODES].shape == (3,) + hop_shape(hb.nodes)
    assert hop_budgets(flat[HOP_NODES].shape) == list(hb.nodes)
    graphs = unpad_batch(flat)
    assert [d.num_sampled_nodes[0] for d in graphs] == [4, 1]  # the fill batch: no graph
    assert flat[GRAPH_MASK].tolist() == [[True, False], [True, False], [False, False]]
    assert flat["batch"][2].tolist().count(0) == 1  # no empty graph slot


@pytest.mark.parametrize("kw, match", [
    (dict(budget=dict(nodes=50, edges=90, graphs=2)), "budget="),
    (dict(directed=False), "subgraph_type='induced'"),
    (dict(subgraph_type="bidirectional"), "subgraph_type='bidirectional'"),
    (dict(layout="hyb"), "layout="),
    (dict(per_hop_budget=HopBudget(nodes=(6, 10), edges=(12,))), "1 hops, num_neighbors 2"),
    (dict(per_hop_budget=HopBudget(nodes=(5, 10, 10), edges=(12, 12))), "batch_size=4"),
])
def test_what_the_per_hop_layout_cannot_be_is_refused(kw, match):
    kw = {"per_hop_budget": True, **kw}
    with pytest.raises(HopBudgetError, match=match):
        FixedSizeNeighborLoader(_graph(20, 60, 0), [2, 2], batch_size=4, **kw)


def test_per_hop_layout_of_zero_hops_is_refused():
    with pytest.raises(HopBudgetError, match=r"num_neighbors=\[\]"):
        FixedSizeNeighborLoader(_graph(20, 60, 0), [], batch_size=4, per_hop_budget=True)


@pytest.mark.parametrize("nodes, edges, match", [
    ((6, 10), (3, 3), "one edge"), ((2, 10), (3,), "seeds' block"),
    ((6, -1), (3,), "negative"), ((6, 4), (10,), "must differ"),
])
def test_a_hop_budget_that_cannot_be_is_named(nodes, edges, match):
    with pytest.raises(HopBudgetError, match=match):
        HopBudget(nodes=nodes, edges=edges)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups())
def test_plain_batches_unpad_with_pygs_per_hop_counts(setup):
    """The plain layout carries no hop boundaries: ``unpad_batch(flat, hops=H)`` finds
    them from the sampled edges (a row's hop is its distance from the seeds)."""
    setup = dict(setup, success_ratio=1.0)
    loader = FixedSizeNeighborLoader(**setup)
    H = len(setup["num_neighbors"])
    for chunk in range(len(loader)):
        seeds = loader.chunk_seeds(0, chunk)
        raw = loader.sample(seeds, 0, chunk)
        graphs = unpad_batch(loader.batch(0, chunk), hops=H)
        if seeds.numel() == 0:
            assert graphs == []
            continue
        (d,) = graphs
        if d.num_nodes == raw.num_nodes and d.edge_index.size(1) == raw.num_edges:  # not cut
            assert d.num_sampled_nodes == raw.nodes_per_hop
            assert d.num_sampled_edges == raw.edges_per_hop
        assert sum(d.num_sampled_nodes) == d.num_nodes  # cut or not, every row counted once
        assert sum(d.num_sampled_edges) == d.edge_index.size(1)
        assert len(d.num_sampled_nodes) == H + 1 and len(d.num_sampled_edges) == H
