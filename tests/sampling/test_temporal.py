"""Temporal neighbour sampling (``time_attr`` / ``input_time`` / ``temporal_strategy``):
PyG 2.8's rule, no sampled neighbour (node time) or edge (edge time) later than the
seed of its tree, every hop; ``"last"`` keeps the most recent; one tree per seed;
homogeneous and heterogeneous, sampler and loaders. The loader tests restate, on our
loaders, what PyG's own ``test_neighbor_loader.py`` checks of temporal sampling."""
from __future__ import annotations

import warnings
from typing import Dict

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data, HeteroData

from graph_adapter.batching import RESERVED_NODES
from graph_adapter.sampling import (CSC, FixedSizeHeteroNeighborLoader, FixedSizeNeighborLoader,
                                    TemporalSamplingError, sample_neighbors)
from graph_adapter.sampling.hetero_sample import sample_hetero_neighbors


def _temporal_graph(n: int, m: int, seed: int, span: int = 6) -> Data:
    g = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(n, 2, generator=g),
                edge_index=torch.randint(0, n, (2, m), generator=g),
                time=torch.randint(0, span, (n,), generator=g),
                edge_time=torch.randint(0, span, (m,), generator=g))


@st.composite
def homo_cases(draw):
    n = draw(st.integers(1, 30))
    d = _temporal_graph(n, draw(st.integers(0, 120)), draw(st.integers(0, 10 ** 6)))
    seeds = torch.randperm(n, generator=torch.Generator().manual_seed(draw(st.integers(0, 99))))
    seeds = seeds[:draw(st.integers(1, min(n, 6)))]
    return dict(data=d, seeds=seeds, level=draw(st.sampled_from(["node", "edge"])),
                strategy=draw(st.sampled_from(["uniform", "last"])),
                replace=draw(st.booleans()),
                fan=draw(st.lists(st.sampled_from([-1, 0, 1, 2, 3]), min_size=1, max_size=3)),
                seed_time=draw(st.none() | st.integers(0, 6)), gen=draw(st.integers(0, 99)))


def _edge_times(d: Data, level: str) -> torch.Tensor:
    """The time each input edge is judged by: its own, or its source node's."""
    return d.edge_time if level == "edge" else d.time[d.edge_index[0]]


def _run_homo(cfg):
    d, seeds = cfg["data"], cfg["seeds"]
    csc = CSC.from_edge_index(d.edge_index, d.num_nodes)
    st_ = cfg["seed_time"]
    if cfg["level"] == "edge" and st_ is None:
        st_ = 3  # edge-level times need seed times (PyG's rule)
    seed_time = None if st_ is None else torch.full((seeds.numel(),), st_)
    kw = dict(node_time=d.time) if cfg["level"] == "node" else dict(edge_time=d.edge_time)
    s = sample_neighbors(csc, seeds, cfg["fan"], replace=cfg["replace"], seed_time=seed_time,
                         temporal_strategy=cfg["strategy"],
                         generator=torch.Generator().manual_seed(cfg["gen"]), **kw)
    times = seed_time if seed_time is not None else d.time[seeds]
    return s, times


@given(homo_cases())
@settings(max_examples=40, deadline=None)
def test_no_sampled_edge_is_later_than_its_seed(cfg):
    d = cfg["data"]
    s, seed_times = _run_homo(cfg)
    assert s.seed_of is not None  # temporal sampling is disjoint (PyG forces it)
    assert s.seed_of[:cfg["seeds"].numel()].tolist() == list(range(cfg["seeds"].numel()))
    src_row, dst_row = s.edge_index
    # each sampled edge is an input edge, and within one tree
    assert torch.equal(s.seed_of[src_row], s.seed_of[dst_row])
    ei = d.edge_index[:, s.e_id]
    assert torch.equal(ei[0], s.n_id[src_row]) and torch.equal(ei[1], s.n_id[dst_row])
    judged = _edge_times(d, cfg["level"])[s.e_id]
    assert bool((judged <= seed_times[s.seed_of[dst_row]]).all())
    if cfg["level"] == "node":  # and so every sampled row but the seeds is no later
        rows = torch.arange(cfg["seeds"].numel(), s.num_nodes)
        assert bool((d.time[s.n_id[rows]] <= seed_times[s.seed_of[rows]]).all())


def _expanded_rows(s) -> int:
    """Rows every hop but the last expanded (their in-edges were drawn)."""
    return sum(s.nodes_per_hop[:len(s.edges_per_hop)])


@given(homo_cases())
@settings(max_examples=40, deadline=None)
def test_each_row_gets_the_right_valid_edges(cfg):
    """Without replacement a row gets min(k, valid) of its valid in-edges; ``"last"``:
    exactly the k most recent (ties: the later input edge)."""
    if cfg["replace"]:
        return
    d = cfg["data"]
    s, seed_times = _run_homo(cfg)
    judged = _edge_times(d, cfg["level"])
    hop_of_row = torch.repeat_interleave(torch.arange(len(s.nodes_per_hop)),
                                         torch.tensor(s.nodes_per_hop))
    for r in range(_expanded_rows(s)):
        k = cfg["fan"][int(hop_of_row[r])]
        v, t = int(s.n_id[r]), seed_times[int(s.seed_of[r])]
        valid = ((d.edge_index[1] == v) & (judged <= t)).nonzero().view(-1)
        got = s.e_id[s.edge_index[1] == r]
        want = valid.numel() if k < 0 else min(k, valid.numel())
        assert got.numel() == want
        assert set(got.tolist()) <= set(valid.tolist())
        if cfg["strategy"] == "last" and k >= 0:
            # the k most recent valid edges, the later input edge first among equal times
            order = sorted(valid.tolist(), key=lambda e: (int(judged[e]), e), reverse=True)
            assert sorted(got.tolist()) == sorted(order[:k])


ETS = [("user", "rates", "item"), ("item", "rev_rates", "user"), ("item", "sim", "item")]


def _hetero_graph(nu: int, ni: int, m: int, seed: int, node_level_on=("user", "item")
                  ) -> HeteroData:
    g = torch.Generator().manual_seed(seed)
    h = HeteroData()
    h["user"].x, h["item"].x = torch.randn(nu, 2, generator=g), torch.randn(ni, 2, generator=g)
    for t, n in (("user", nu), ("item", ni)):
        if t in node_level_on:
            h[t].time = torch.randint(0, 6, (n,), generator=g)
    size = {"user": nu, "item": ni}
    for et in ETS:
        h[et].edge_index = torch.stack([torch.randint(0, size[et[0]], (m,), generator=g),
                                        torch.randint(0, size[et[2]], (m,), generator=g)])
        h[et].edge_time = torch.randint(0, 6, (m,), generator=g)
    return h


@st.composite
def hetero_cases(draw):
    return dict(nu=draw(st.integers(1, 15)), ni=draw(st.integers(1, 15)),
                m=draw(st.integers(0, 60)), seed=draw(st.integers(0, 10 ** 6)),
                level=draw(st.sampled_from(["node", "node_item_only", "edge"])),
                strategy=draw(st.sampled_from(["uniform", "last"])),
                replace=draw(st.booleans()), hops=draw(st.integers(1, 3)),
                k=draw(st.sampled_from([-1, 1, 2])), B=draw(st.integers(1, 5)),
                gen=draw(st.integers(0, 99)))


@given(hetero_cases())
@settings(max_examples=30, deadline=None)
def test_hetero_no_sampled_edge_is_later_than_its_seed(cfg):
    on = ("item",) if cfg["level"] == "node_item_only" else ("user", "item")
    h = _hetero_graph(cfg["nu"], cfg["ni"], cfg["m"], cfg["seed"], on)
    n = {"user": cfg["nu"], "item": cfg["ni"]}
    cscs = {et: CSC.from_edge_index(h[et].edge_index, n[et[2]], num_src_nodes=n[et[0]])
            for et in ETS}
    scratch = {t: torch.full((c,), -1, dtype=torch.long) for t, c in n.items()}
    seeds = torch.arange(min(cfg["B"], n["user"]))
    seed_time = torch.randint(0, 6, (seeds.numel(),),
                              generator=torch.Generator().manual_seed(cfg["gen"]))
    kw: Dict = dict(seed_time=seed_time)
    if cfg["level"] == "edge":
        kw["edge_time"] = {et: h[et].edge_time for et in ETS}
    else:
        kw["node_time"] = {t: h[t].time for t in on}
    s = sample_hetero_neighbors(cscs, scratch, "user", seeds, {et: [cfg["k"]] * cfg["hops"]
                                                              for et in ETS},
                                replace=cfg["replace"], temporal_strategy=cfg["strategy"],
                                generator=torch.Generator().manual_seed(cfg["gen"]), **kw)
    assert s.seed_of is not None  # disjoint
    for et in ETS:
        src_row, dst_row = s.edge_index[et]
        eid = s.e_id[et]
        assert torch.equal(s.seed_of[et[0]][src_row], s.seed_of[et[2]][dst_row])
        assert torch.equal(h[et].edge_index[0, eid], s.n_id[et[0]][src_row])
        limit = seed_time[s.seed_of[et[2]][dst_row]]
        if cfg["level"] == "edge":
            assert bool((h[et].edge_time[eid] <= limit).all())
        elif et[0] in on:  # a source type with times: none later than the seed
            assert bool((h[et[0]].time[s.n_id[et[0]][src_row]] <= limit).all())


# --------------------------------------------------------------------------
# The loaders
# --------------------------------------------------------------------------
@given(st.integers(2, 40), st.integers(0, 150), st.integers(0, 10 ** 6), st.integers(1, 7),
       st.sampled_from(["uniform", "last"]), st.booleans())
@settings(max_examples=12, deadline=None)
def test_loader_every_seed_once_an_epoch_and_nothing_later_than_its_seed(n, m, seed, B, strategy,
                                                                         shuffle):
    d = _temporal_graph(n, m, seed)
    L = FixedSizeNeighborLoader(d, [2, 2], B, time_attr="time", temporal_strategy=strategy,
                                shuffle=shuffle, seed=seed, success_ratio=1.0)
    assert L.disjoint  # forced, as PyG's
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for b in L:
            nm, sm = b["node_mask"], b["seed_mask"]
            seen.append(b["n_id"][sm])
            so = b["seed_of"]
            seed_rows = sm.nonzero().view(-1)
            # PyG's batch: the seed position of each real row; the time key gathered
            seed_t = b["time"][seed_rows][so[nm]]
            assert bool((b["time"][nm] <= seed_t).all())
            assert torch.equal(b["time"][nm], d.time[b["n_id"][nm]])
    assert sorted(torch.cat(seen).tolist()) == list(range(n))


def test_loader_seed_first_and_no_row_later_than_it_karate_style():
    """PyG: ``time[0] >= time[1:]`` with one seed per batch and full fanouts, node
    times decreasing with the node id."""
    g = torch.Generator().manual_seed(3)
    n = 34
    d = Data(x=torch.randn(n, 2, generator=g),
             edge_index=torch.randint(0, n, (2, 156), generator=g),
             time=torch.arange(n, 0, -1))
    for data, kw in ((d, {}), (_as_hetero(d), dict(input_nodes="v"))):
        L = FixedSizeNeighborLoader(data, [-1, -1], 1, time_attr="time", **kw)
        key = "v/time" if kw else "time"
        mask = "v/node_mask" if kw else "node_mask"
        for b in L:
            t = b[key][b[mask]]
            assert bool((t[0] >= t[1:]).all())


def _as_hetero(d: Data) -> HeteroData:
    h = HeteroData()
    h["v"].x, h["v"].time = d.x, d.time
    h["v", "to", "v"].edge_index = d.edge_index
    return h


def _chain() -> Data:
    ei = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4], [1, 0, 2, 1, 3, 2, 4, 3]])
    return Data(edge_index=ei, edge_time=torch.arange(8), num_nodes=5)


def test_loader_edge_level_time_with_input_time_homo_and_hetero():
    """PyG: edge times 0..7 on a chain, every seed's time 4: no batch edge after 4."""
    d = _chain()
    h = HeteroData()
    h["A"].num_nodes = 5
    h["A", "A"].edge_index, h["A", "A"].edge_time = d.edge_index, d.edge_time
    for data, kw, k in ((d, {}, ""), (h, dict(input_nodes="A"), "A__to__A/")):
        L = FixedSizeNeighborLoader(data, [-1, -1], 1, time_attr="edge_time",
                                    input_time=torch.full((5,), 4), **kw)
        count = 0
        for b in L:
            et = b[k + "edge_time"][b[k + "edge_mask"]]
            count += et.numel()
            assert bool((et <= 4).all())
        assert count > 0  # not vacuous: edges 0..4 are reachable


def test_loader_hetero_single_link_times():
    """PyG: seeds of a type without times, input_time i for seed i; type b's node i at
    time i (valid), type c's at i + 1 (later): every b, no c."""
    h = HeteroData()
    for t in "abc":
        h[t].x = torch.arange(10)
    h["b"].time, h["c"].time = torch.arange(0, 10), torch.arange(1, 11)
    loop = torch.arange(10).view(1, -1).repeat(2, 1)
    for s_, d_ in (("a", "b"), ("b", "a"), ("a", "c"), ("c", "a")):
        h[s_, "to", d_].edge_index = loop
    L = FixedSizeNeighborLoader(h, [-1], 10, input_nodes="a", time_attr="time",
                                input_time=torch.arange(10))
    b = next(iter(L))
    assert int(b["a/node_mask"].sum()) == 10
    assert int(b["b/node_mask"].sum()) == 10
    assert int(b["c/node_mask"].sum()) == 0


def test_budget_is_fitted_to_temporal_samples():
    """Seeds whose time is before every neighbour's: the fit sees seeds alone."""
    d = _temporal_graph(40, 200, 1)
    d.time = torch.arange(40) + 10
    L = FixedSizeNeighborLoader(d, [5, 5], 8, time_attr="time",
                                input_time=torch.zeros(40, dtype=torch.long))
    assert all(e == 0 and n <= 8 for n, e in L.fit_sizes)
    assert int(L.budget.nodes) - RESERVED_NODES <= 9  # the seeds (ties nudged by one)
    plain = FixedSizeNeighborLoader(d, [5, 5], 8)
    assert any(e > 0 for _, e in plain.fit_sizes)  # the same graph samples edges untimed


def test_input_time_follows_its_seed_through_the_shuffle():
    d = _temporal_graph(30, 150, 4)
    inp = torch.tensor([5, 9, 2, 17, 11, 0])
    times = torch.tensor([0, 1, 2, 3, 4, 5])
    L = FixedSizeNeighborLoader(d, [-1], 2, input_nodes=inp, time_attr="edge_time",
                                input_time=times, shuffle=True, seed=7)
    want = dict(zip(inp.tolist(), times.tolist()))
    for b in L:
        sm, so, em = b["seed_mask"], b["seed_of"], b["edge_mask"]
        seeds = b["n_id"][sm]
        dst = b["edge_index"][1, em]
        limit = torch.tensor([want[int(x)] for x in seeds])[so[dst]] if dst.numel() else dst
        assert bool((b["edge_time"][em] <= limit).all())


def test_temporal_errors_are_named():
    d = _temporal_graph(10, 30, 0)
    with pytest.raises(TemporalSamplingError, match="conflicting 'input_time' and 'time_attr'"):
        FixedSizeNeighborLoader(d, [2], 4, input_time=torch.zeros(10))
    with pytest.raises(TemporalSamplingError, match="neither a node-level or edge-level"):
        FixedSizeNeighborLoader(d, [2], 4, time_attr="when")
    with pytest.raises(TemporalSamplingError, match="input_time"):
        FixedSizeNeighborLoader(d, [2], 4, time_attr="edge_time")  # edge-level: needs seed times
    with pytest.raises(TemporalSamplingError, match="one time per seed"):
        FixedSizeNeighborLoader(d, [2], 4, time_attr="time", input_time=torch.zeros(3))
    with pytest.raises(TemporalSamplingError, match="induced"):
        FixedSizeNeighborLoader(d, [2], 4, time_attr="time", subgraph_type="induced")
    with pytest.raises(TemporalSamplingError, match="temporal_strategy='recent'"):
        FixedSizeNeighborLoader(d, [2], 4, time_attr="time", temporal_strategy="recent")
    h = _hetero_graph(5, 5, 10, 0, node_level_on=("item",))
    with pytest.raises(TemporalSamplingError, match="input_time"):  # users have no time
        FixedSizeNeighborLoader(h, [2], 2, input_nodes="user", time_attr="time")
    h["user"].edge_time = torch.zeros(5)
    with pytest.raises(TemporalSamplingError, match="both node-level and edge-level"):
        FixedSizeNeighborLoader(h, [2], 2, input_nodes="item", time_attr="edge_time")
    with pytest.raises(TemporalSamplingError, match="edge-level times need the seeds. times"):
        csc = CSC.from_edge_index(d.edge_index, 10)
        sample_neighbors(csc, torch.arange(2), [2], edge_time=d.edge_time)  # no seed times


def test_hetero_loader_matches_its_sampler_with_times():
    """The hetero loader hands its times to the sampler: every batch obeys the rule."""
    h = _hetero_graph(12, 12, 50, 5)
    L = FixedSizeHeteroNeighborLoader(h, [2, 2], 3, input_nodes=("user", None),
                                      time_attr="time", temporal_strategy="last")
    for b in L:
        sm = b["user/seed_mask"]
        seed_t = b["user/time"][sm]
        for t in ("user", "item"):
            nm = b[f"{t}/node_mask"]
            assert bool((b[f"{t}/time"][nm] <= seed_t[b[f"{t}/seed_of"][nm]]).all())
