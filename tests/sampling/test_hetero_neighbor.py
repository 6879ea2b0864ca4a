"""FixedSizeHeteroNeighborLoader: fixed signature, seeds once, real edges, padding
invariance of a to_hetero SAGE model, named errors."""
from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import HeteroData
from torch_geometric.nn import SAGEConv, to_hetero

from graph_adapter import ipu_wrap
from graph_adapter.sampling import FanoutError
from graph_adapter.sampling import FixedSizeHeteroNeighborLoader, trim_hetero
from graph_adapter.sampling import InputNodesError, SubgraphOversizeError
from graph_adapter.nn import masked_cross_entropy

ETS = [("author", "writes", "paper"), ("paper", "rev_writes", "author"),
       ("paper", "cites", "paper")]


def _hetero(n_paper, n_author, m, seed):
    g = torch.Generator().manual_seed(seed)
    h = HeteroData()
    h["paper"].x = torch.randn(n_paper, 4, generator=g)
    h["paper"].y = torch.randint(0, 3, (n_paper,), generator=g)
    h["author"].x = torch.randn(n_author, 4, generator=g)
    w = torch.stack([torch.randint(0, n_author, (m[0],), generator=g),
                     torch.randint(0, n_paper, (m[0],), generator=g)])
    h[ETS[0]].edge_index = w
    h[ETS[1]].edge_index = w.flip(0)
    h[ETS[2]].edge_index = torch.randint(0, n_paper, (2, m[1]), generator=g)
    h[ETS[2]].edge_attr = torch.randn(m[1], 2, generator=g)
    return h


@st.composite
def setups(draw):
    h = _hetero(draw(st.integers(2, 40)), draw(st.integers(1, 30)),
                (draw(st.integers(0, 200)), draw(st.integers(0, 200))), draw(st.integers(0, 10**6)))
    hops = draw(st.integers(1, 2))
    fan = {et: draw(st.lists(st.sampled_from([-1, 0, 1, 3]), min_size=hops, max_size=hops))
           for et in ETS}
    return dict(data=h, num_neighbors=fan, batch_size=draw(st.integers(1, 8)),
                shuffle=draw(st.booleans()), replace=draw(st.booleans()),
                world_size=draw(st.integers(1, 2)), F=draw(st.integers(1, 2)),
                success_ratio=draw(st.sampled_from([0.5, 1.0])), seed=draw(st.integers(0, 99)))


def _rows(flat, F, i):
    return {k: v[i] for k, v in flat.items()} if F > 1 else flat


@given(setups())
@settings(max_examples=25, deadline=None)
def test_one_signature_seeds_once_and_every_edge_is_a_graph_edge(cfg):
    h, F = cfg["data"], cfg["F"]
    sigs, seen = set(), []
    for rank in range(cfg["world_size"]):
        L = FixedSizeHeteroNeighborLoader(
            h, cfg["num_neighbors"], cfg["batch_size"], input_nodes=("paper", None),
            shuffle=cfg["shuffle"], replace=cfg["replace"], seed=cfg["seed"], micro_batches=F,
            rank=rank, world_size=cfg["world_size"], success_ratio=cfg["success_ratio"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for flat in L:
                sigs.add(tuple((k, tuple(v.shape), v.dtype) for k, v in flat.items()))
                for i in range(F):
                    f = _rows(flat, F, i)
                    sm = f["paper/seed_mask"]
                    b = int(sm.sum())
                    assert bool(sm[:b].all()) and not bool(sm[b:].any())  # seeds first
                    seen.append(f["paper/n_id"][:b])
                    for t in ("paper", "author"):
                        nm = f[f"{t}/node_mask"]
                        nid = f[f"{t}/n_id"]
                        assert bool((nid[~nm] == -1).all())
                        assert torch.equal(f[f"{t}/x"][nm], h[t].x[nid[nm]])
                        assert torch.unique(nid[nm]).numel() == int(nm.sum())  # a node: a row
                    for et in ETS:
                        k = "__".join(et)
                        em = f[f"{k}/edge_mask"]
                        ei = f[f"{k}/edge_index"][:, em]
                        eid = f[f"{k}/e_id"][em]
                        glob = torch.stack([f[f"{et[0]}/n_id"][ei[0]], f[f"{et[2]}/n_id"][ei[1]]])
                        assert torch.equal(glob, h[et].edge_index[:, eid])
                        assert bool((f[f"{k}/e_id"][~em] == -1).all())
                    em = f["paper__cites__paper/edge_mask"]
                    assert torch.equal(f["paper__cites__paper/edge_attr"][em],
                                       h[ETS[2]].edge_attr[f["paper__cites__paper/e_id"][em]])
        assert L.stats.trimmed_nodes == 0 or L.stats.trimmed_batches > 0
    assert len(sigs) == 1
    assert sorted(torch.cat(seen).tolist()) == list(range(h["paper"].num_nodes))


def test_one_hop_all_neighbours_is_every_in_edge_of_the_seeds():
    h = _hetero(30, 20, (120, 90), 7)
    fan = {ETS[0]: [-1], ETS[1]: [-1], ETS[2]: [-1]}
    L = FixedSizeHeteroNeighborLoader(h, fan, 5, input_nodes=("paper", torch.arange(30)))
    s = L.sample(L.chunk_seeds(0, 0), 0, 0)
    seeds = L.chunk_seeds(0, 0)
    for et in (ETS[0], ETS[2]):  # into paper: every in-edge of the seeds, once
        want = torch.isin(h[et].edge_index[1], seeds).nonzero().view(-1)
        assert sorted(s.e_id[et].tolist()) == want.tolist()
    assert s.e_id[ETS[1]].numel() == 0  # nothing into author before hop 2


@given(setups())
@settings(max_examples=20, deadline=None)
def test_directed_false_is_every_edge_between_the_sampled_nodes_of_each_type(cfg):
    h = cfg["data"]
    kw = dict(input_nodes=("paper", None), replace=cfg["replace"], seed=cfg["seed"])
    L = FixedSizeHeteroNeighborLoader(h, cfg["num_neighbors"], cfg["batch_size"],
                                      directed=False, **kw)
    D = FixedSizeHeteroNeighborLoader(h, cfg["num_neighbors"], cfg["batch_size"], **kw)
    seeds = L.chunk_seeds(0, 0)
    s, ref = L.sample(seeds, 0, 0), D.sample(seeds, 0, 0)
    for t in s.n_id:
        assert torch.equal(s.n_id[t], ref.n_id[t])  # the nodes are the directed sample's
    for et in ETS:
        src_in = torch.zeros(h[et[0]].num_nodes, dtype=torch.bool)
        src_in[s.n_id[et[0]]] = True
        dst_in = torch.zeros(h[et[2]].num_nodes, dtype=torch.bool)
        dst_in[s.n_id[et[2]]] = True
        ei = h[et].edge_index
        want = (src_in[ei[0]] & dst_in[ei[1]]).nonzero().view(-1)
        assert sorted(s.e_id[et].tolist()) == want.tolist()
        glob = torch.stack([s.n_id[et[0]][s.edge_index[et][0]], s.n_id[et[2]][s.edge_index[et][1]]])
        assert torch.equal(glob, ei[:, s.e_id[et]])
    flat = L.batch(0, 0)  # and it pads like the directed batches
    assert set(flat) == set(D.batch(0, 0))
    assert all(bool((v == -1).all()) for v in L.scratch.values())


def test_an_edge_type_left_out_of_the_fanouts_keeps_its_keys_and_no_edge():
    h = _hetero(30, 20, (100, 100), 0)
    L = FixedSizeHeteroNeighborLoader(h, {ETS[0]: [2, 2], ETS[2]: [3, 1]}, 4,
                                      input_nodes=("paper", None))
    assert ETS[1] not in L.cscs  # nothing sampled there: no CSC built
    sigs = set()
    for flat in L:
        sigs.add(tuple((k, tuple(v.shape)) for k, v in flat.items()))
        assert not bool(flat["paper__rev_writes__author/edge_mask"].any())
        assert bool(flat["paper__cites__paper/edge_mask"].any())
    assert len(sigs) == 1 and L.stats.seeds == 30


class _GNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = SAGEConv((4, 4), 8)
        self.c2 = SAGEConv((8, 8), 3)

    def forward(self, x, edge_index):
        return self.c2(self.c1(x, edge_index).relu(), edge_index)


class _Paper(torch.nn.Module):
    """forward(data) of a to_hetero model: the paper rows."""

    def __init__(self, metadata):
        super().__init__()
        self.m = to_hetero(_GNN(), metadata, aggr="sum")

    def forward(self, data):
        return self.m(data.x_dict, data.edge_index_dict)["paper"]


@given(st.integers(0, 10 ** 6), st.integers(1, 6))
@settings(max_examples=8, deadline=None)
def test_padding_does_not_change_a_hetero_sage_on_seed_rows_outputs_and_grads(seed, bs):
    h = _hetero(40, 25, (150, 120), seed)
    L = FixedSizeHeteroNeighborLoader(h, [3, 2], bs, input_nodes=("paper", None), shuffle=True,
                                      seed=seed)
    torch.manual_seed(0)
    plain = _Paper(h.metadata())
    mine = _Paper(h.metadata())
    mine.load_state_dict(plain.state_dict())
    wrapped = ipu_wrap(mine, loss_fn=lambda out, b: masked_cross_entropy(
        out, b["paper"].y, b["paper"].seed_mask))
    flat = L.batch(0, 0)
    b = L.seeds_in(flat)
    s, _, _ = trim_hetero(L.sample(L.chunk_seeds(0, 0), 0, 0), L.budget)  # as the batch's
    sub = L.subgraph(s, b)  # the same sample, unpadded
    ref = plain(sub)
    torch.nn.functional.cross_entropy(ref[:b], sub["paper"].y[:b]).backward()
    out = wrapped(flat)
    out["loss"].backward()
    torch.testing.assert_close(out["output"][:b], ref[:b], rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(plain.named_parameters(), mine.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_oversize_trim_is_counted_and_error_names_the_type():
    h = _hetero(200, 100, (900, 900), 3)
    L = FixedSizeHeteroNeighborLoader(h, [5, 5], 16, input_nodes=("paper", None),
                                      success_ratio=0.05, shuffle=True)
    with pytest.warns(UserWarning, match="trimmed"):
        for _ in L:
            pass
    assert L.stats.trimmed_batches > 0 and L.stats.seeds == 200  # seeds never cut
    E = FixedSizeHeteroNeighborLoader(h, [5, 5], 16, input_nodes=("paper", None),
                                      budget=L.budget, oversize="error")
    with pytest.raises(SubgraphOversizeError, match=r"exceeds the budget \((paper|author)"):
        for _ in E:
            pass


def test_bad_inputs_and_what_is_not_built_are_named():
    h = _hetero(10, 5, (20, 20), 0)
    mk = FixedSizeHeteroNeighborLoader
    with pytest.raises(NotImplementedError, match="directed=False, disjoint=True"):
        mk(h, [2], 2, input_nodes=("paper", None), disjoint=True, directed=False)
    with pytest.raises(ValueError, match="num_workers=-1"):
        mk(h, [2], 2, input_nodes=("paper", None), num_workers=-1)
    with pytest.raises(InputNodesError, match="seeds of one node type"):
        mk(h, [2], 2, input_nodes={"paper": None, "author": None})
    with pytest.raises(InputNodesError, match="node type 'venue'"):
        mk(h, [2], 2, input_nodes=("venue", None))
    with pytest.raises(InputNodesError, match=r"input_nodes\[0\] = 10 is out of range"):
        mk(h, [2], 2, input_nodes=("paper", torch.tensor([10])))
    with pytest.raises(InputNodesError, match="node_type, index"):
        mk(h, [2], 2, input_nodes=torch.arange(3))
    with pytest.raises(FanoutError, match="lacks"):
        mk(h, {("paper", "x", "paper"): [2]}, 2, input_nodes=("paper", None))
    with pytest.raises(ValueError, match="every node type"):
        mk(h, [2], 2, input_nodes=("paper", None),
           budget={"nodes": {"paper": 9}, "edges": {"__".join(et): 11 + i
                                                    for i, et in enumerate(ETS)}, "graphs": 2})


def test_hetero_host_batches_check_clean_for_the_ipu_path():
    """micro_batches=F stacks F hetero batches on a leading dim; check() finds nothing for
    a to_hetero SAGE model in training (the IPU path's stand-in; no IPU run)."""
    from graph_adapter.checker import check
    from graph_adapter.ipu import IPUOptions

    h = _hetero(60, 30, (200, 150), 11)
    opts = IPUOptions(2, 1, 2)
    L = FixedSizeHeteroNeighborLoader(h, [3, 2], 8, input_nodes=("paper", None), shuffle=True,
                                      micro_batches=opts.micro_batches)
    host = next(iter(L))
    assert host["paper/x"].shape[0] == opts.micro_batches
    torch.manual_seed(0)
    wrapped = ipu_wrap(_Paper(h.metadata()), loss_fn=lambda out, b: masked_cross_entropy(
        out, b["paper"].y, b["paper"].seed_mask))
    report = check(wrapped, host, training=True, options=opts)
    assert report.ok and report.findings == [], report


def test_repeated_seeds_are_named_unless_disjoint():
    """A repeated seed would be two writes of one scratch entry (its row undefined): named,
    as the homogeneous sampler names it; ``disjoint=True`` gives each its own tree."""
    from graph_adapter.sampling import sample_hetero_neighbors

    L = FixedSizeHeteroNeighborLoader(_hetero(20, 10, (60, 60), 0), [2], 4,
                                      input_nodes=("paper", None))
    seeds = torch.tensor([3, 5, 3])
    fan = {et: L.fanouts[et] for et in L.cscs}
    with pytest.raises(ValueError, match=r"'paper' seeds repeat a node.*disjoint=True"):
        sample_hetero_neighbors(L.cscs, L.scratch, "paper", seeds, fan)
    assert all(bool((v == -1).all()) for v in L.scratch.values())  # left as it was
    s = sample_hetero_neighbors(L.cscs, L.scratch, "paper", seeds, fan, disjoint=True)
    assert s.n_id["paper"][:3].tolist() == [3, 5, 3]
    assert s.seed_of["paper"][:3].tolist() == [0, 1, 2]
