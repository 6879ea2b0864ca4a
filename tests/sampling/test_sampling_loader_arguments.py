"""Every public argument of the sampling loaders changes what they yield: a test that goes
red if the argument were silently ignored (replaced by its default).

The four loaders (neighbour, link, cluster, hetero neighbour) share most settings
(:class:`graph_adapter.sampling.SamplingSettings`); each shared one is tested here on
every loader that takes it, so a loader that dropped one on the way to its base goes
red. The loader-specific ones follow. Small graphs: each test runs well under a second.

Held elsewhere: ``sampler="pyg"``'s batches when pyg-lib or torch-sparse is installed
(``test_pyg_sampler.py``, ``test_hetero_pyg_sampler.py``); here, without them, the named
error that says so.
"""
import os
import threading
import warnings

import pytest
import torch
from torch_geometric.data import Data, HeteroData

from graph_adapter.batching import Budget
from graph_adapter.sampling import (METIS_BACKENDS, FixedSizeClusterLoader,
                                    FixedSizeHeteroNeighborLoader, FixedSizeLinkNeighborLoader,
                                    FixedSizeNeighborLoader, MetisUnavailableError,
                                    PygSamplerUnavailableError, SubgraphOversizeError,
                                    metis_available, pyg_sampler_backend)

N = 60


def _graph(n=N, seed=0):
    """A ring plus random chords: degrees vary (so fitted budgets depend on the quantile)."""
    g = torch.Generator().manual_seed(seed)
    ring = torch.stack([torch.arange(n), torch.arange(n).roll(-1)])
    chords = torch.randint(0, n, (2, 3 * n), generator=g)
    hubs = torch.stack([torch.randint(0, n, (40,), generator=g), torch.zeros(40, dtype=torch.long)])
    ei = torch.cat([ring, ring.flip(0), chords, hubs], 1)
    return Data(x=torch.arange(n, dtype=torch.float).view(-1, 1), edge_index=ei,
                y=torch.arange(n), num_nodes=n)


def _hetero(seed=0):
    g = torch.Generator().manual_seed(seed)
    h = HeteroData()
    h["paper"].x = torch.arange(40, dtype=torch.float).view(-1, 1)
    h["author"].x = torch.arange(25, dtype=torch.float).view(-1, 1)
    h["author", "writes", "paper"].edge_index = torch.stack(
        [torch.randint(0, 25, (120,), generator=g), torch.randint(0, 40, (120,), generator=g)])
    h["paper", "cites", "paper"].edge_index = torch.stack(
        [torch.randint(0, 40, (150,), generator=g), torch.randint(0, 40, (150,), generator=g)])
    return h


G, H = _graph(), _hetero()
PART = torch.arange(N) % 6  # six clusters of ten nodes
KINDS = ["neighbor", "link", "cluster", "hetero"]
HOPS = ["neighbor", "link", "hetero"]  # the loaders that sample hops
BIG = {  # budgets no sample of these graphs exceeds (nothing trimmed)
    "neighbor": Budget(nodes=70, edges=700, graphs=2),
    "link": Budget(nodes=70, edges=700, graphs=2),
    "cluster": Budget(nodes=70, edges=700, graphs=2),
    "hetero": Budget(nodes={"paper": 50, "author": 30},
                     edges={"author__writes__paper": 130, "paper__cites__paper": 160}, graphs=2),
}


def make(kind, cls=None, **kw):
    """The loader ``kind`` on the small graphs (``cls``: a subclass of it)."""
    if kind == "neighbor":
        return (cls or FixedSizeNeighborLoader)(G, num_neighbors=kw.pop("num_neighbors", [3, 2]),
                                                batch_size=kw.pop("batch_size", 8), **kw)
    if kind == "link":
        return (cls or FixedSizeLinkNeighborLoader)(G, num_neighbors=kw.pop("num_neighbors", [2]),
                                                    batch_size=kw.pop("batch_size", 8), **kw)
    if kind == "cluster":
        kw.setdefault("partition", PART)
        return (cls or FixedSizeClusterLoader)(G, batch_size=kw.pop("batch_size", 2), **kw)
    return (cls or FixedSizeHeteroNeighborLoader)(H, num_neighbors=kw.pop("num_neighbors", [3, 2]),
                                                  batch_size=kw.pop("batch_size", 8),
                                                  input_nodes=kw.pop("input_nodes", ("paper", None)),
                                                  **kw)


def _p(kind):
    return "paper/" if kind == "hetero" else ""


def units(kind, flat):
    """What a batch covers once an epoch: its seeds (neighbour, hetero), its clusters'
    nodes (cluster) or its supervision edges (link), as global ids."""
    if kind == "link":
        return flat["input_id"][flat["input_id"] >= 0].tolist()
    if kind == "cluster":
        return flat["n_id"][flat["node_mask"]].tolist()
    p = _p(kind)
    return flat[p + "n_id"][flat[p + "seed_mask"]].tolist()


def epoch(kind, loader):
    """Every batch's real ``n_id`` rows: the epoch's fingerprint."""
    p = _p(kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # oversize="trim"'s note, where a test trims
        return [b[p + "n_id"][b[p + "node_mask"]].tolist() for b in loader]


# ---------------------------------------------------------------------------
# the shared settings, on every loader that takes them
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_shuffle_changes_the_order_and_without_it_the_order_is_fixed(kind):
    def order(ld):
        return [u for b in ld for u in units(kind, b)]

    plain = make(kind, budget=BIG[kind])
    first = order(plain)
    assert order(plain) == first  # the next epoch: the same seed order
    if kind != "cluster":
        assert first == sorted(first)
    shuffled = make(kind, budget=BIG[kind], shuffle=True)
    mixed = order(shuffled)
    assert mixed != first and sorted(mixed) == sorted(first)
    assert order(shuffled) != mixed  # another epoch, another order


@pytest.mark.parametrize("kind", KINDS)
def test_seed_picks_the_order_and_the_samples(kind):
    a, b, c = (make(kind, budget=BIG[kind], shuffle=True, seed=s) for s in (0, 1, 1))
    eb = epoch(kind, b)
    assert epoch(kind, a) != eb and epoch(kind, c) == eb


@pytest.mark.parametrize("kind", KINDS)
def test_micro_batches_stack_on_a_leading_dim(kind):
    one = make(kind, budget=BIG[kind])
    two = make(kind, budget=BIG[kind], micro_batches=2)
    assert len(two) == -(-len(one) // 2)
    item = next(iter(two))
    flat = next(iter(one))
    assert {k: v.shape for k, v in item.items()} == {k: (2,) + v.shape for k, v in flat.items()}


@pytest.mark.parametrize("kind", KINDS)
def test_rank_and_world_size_split_the_epoch(kind):
    whole = make(kind, budget=BIG[kind], shuffle=True)
    parts = [make(kind, budget=BIG[kind], shuffle=True, rank=r, world_size=2) for r in (0, 1)]
    assert all(p.rank == r and p.world_size == 2 for r, p in enumerate(parts))
    got = [sorted(u for b in p for u in units(kind, b)) for p in parts]
    assert len(parts[0]) == len(parts[1]) == -(-len(whole) // 2)
    assert not set(got[0]) & set(got[1])
    assert sorted(got[0] + got[1]) == sorted(u for b in whole for u in units(kind, b))


@pytest.mark.parametrize("kind", KINDS)
def test_pad_id_fills_the_padding_rows_of_n_id_and_e_id(kind):
    p = _p(kind)
    flat = next(iter(make(kind, budget=BIG[kind], pad_id=-7)))
    pad_n = flat[p + "n_id"][~flat[p + "node_mask"]]
    assert pad_n.numel() and bool((pad_n == -7).all())
    e = "author__writes__paper/" if kind == "hetero" else ""
    if e + "e_id" in flat:
        pad_e = flat[e + "e_id"][~flat[e + "edge_mask"]]
        assert pad_e.numel() and bool((pad_e == -7).all())


def _small(kind):
    """A budget every batch's sample exceeds in edges (the seeds still fit)."""
    if kind == "hetero":
        return Budget(nodes={"paper": 50, "author": 30},
                      edges={"author__writes__paper": 3, "paper__cites__paper": 5}, graphs=2)
    return Budget(nodes=70, edges=3, graphs=2)


@pytest.mark.parametrize("kind", KINDS)
def test_oversize_error_raises_where_trim_cuts_and_counts(kind):
    with pytest.warns(UserWarning, match="trimmed"):
        trimmed = make(kind, budget=_small(kind))
        list(trimmed)
    assert trimmed.stats.trimmed_batches > 0
    with pytest.raises(SubgraphOversizeError, match="exceeds the budget|has .* edges"):
        list(make(kind, budget=_small(kind), oversize="error"))


@pytest.mark.parametrize("kind", KINDS)
def test_budget_given_as_a_budget_dict_or_json_is_that_budget(kind):
    b = BIG[kind]
    for given in (b, b.to_dict(), b.to_json()):
        ld = make(kind, budget=given)
        assert ld.budget == b
    p = _p(kind)
    nodes = b.nodes["paper"] if kind == "hetero" else b.nodes
    assert next(iter(ld))[p + "node_mask"].shape == (nodes,)


@pytest.mark.parametrize("kind", KINDS)
def test_success_ratio_sets_the_fitted_quantile(kind):
    low, high = make(kind, success_ratio=0.3), make(kind, success_ratio=1.0)

    def counts(b):
        return (list(b.nodes.values()) + list(b.edges.values())) if b.is_hetero \
            else [b.nodes, b.edges]

    lo, hi = counts(low.budget), counts(high.budget)
    assert lo != hi and all(a <= b + 1 for a, b in zip(lo, hi))  # (+1: a tie nudged)


@pytest.mark.parametrize("kind", KINDS)
def test_fit_batches_is_the_number_of_samples_the_fit_sees(kind):
    assert len(make(kind, fit_batches=2).fit_sizes) == 2
    assert len(make(kind, fit_batches=3).fit_sizes) == 3


@pytest.mark.parametrize("kind", ["neighbor", "link", "cluster"])
def test_round_to_rounds_the_fitted_counts_up(kind):
    plain, rounded = make(kind), make(kind, round_to=32)
    assert (rounded.budget.nodes, rounded.budget.edges) != (plain.budget.nodes,
                                                            plain.budget.edges)
    assert rounded.budget.nodes % 32 in (0, 1) and rounded.budget.edges % 32 in (0, 1)
    assert rounded.budget.nodes >= plain.budget.nodes


def _probed(kind):
    """A subclass of ``kind``'s loader that stamps each batch with where it was made."""
    base = type(make(kind, budget=BIG[kind]))

    def _batch_now(self, epoch, chunk):
        flat, cn, ce = base._batch_now(self, epoch, chunk)
        flat = dict(flat, probe=torch.tensor([os.getpid(), threading.get_native_id(),
                                              torch.get_num_threads()]))
        return flat, cn, ce

    return type("Probed" + base.__name__, (base,), {"_batch_now": _batch_now})


@pytest.mark.parametrize("kind", KINDS)
def test_num_workers_samples_in_worker_processes(kind):
    ld = make(kind, _probed(kind), budget=BIG[kind], num_workers=1)
    pids = {int(b["probe"][0]) for b in ld}
    assert pids and os.getpid() not in pids


@pytest.mark.parametrize("kind", ["neighbor", "link", "cluster"])
def test_prefetch_samples_in_a_background_thread(kind):
    ld = make(kind, _probed(kind), budget=BIG[kind], prefetch=2)
    tids = {int(b["probe"][1]) for b in ld}
    assert tids and threading.get_native_id() not in tids
    plain = make(kind, _probed(kind), budget=BIG[kind])
    assert {int(b["probe"][1]) for b in plain} == {threading.get_native_id()}


@pytest.mark.parametrize("kind", KINDS)
def test_sampler_threads_is_torchs_thread_count_while_sampling(kind):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for threads, want in ((2, 2), (None, 1)):
            ld = make(kind, _probed(kind), budget=BIG[kind], sampler_threads=threads)
            assert {int(b["probe"][2]) for b in ld} == {want}, threads
            assert torch.get_num_threads() == 1  # restored after each batch
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("kind", ["neighbor", "link", "hetero"])
def test_sampler_pyg_is_pygs_sampler(kind):
    if pyg_sampler_backend() is not None:
        pytest.skip("pyg-lib / torch-sparse installed: test_pyg_sampler.py compares the batches")
    with pytest.raises(PygSamplerUnavailableError):
        make(kind, budget=BIG[kind], sampler="pyg")


# ---------------------------------------------------------------------------
# the hop settings: replace, disjoint, directed, num_neighbors
# ---------------------------------------------------------------------------
def _real_eids(kind, flat):
    if kind == "hetero":
        k = "paper__cites__paper/"
        return flat[k + "e_id"][flat[k + "edge_mask"]].tolist()
    return flat["e_id"][flat["edge_mask"]].tolist()


@pytest.mark.parametrize("kind", HOPS)
def test_replace_samples_with_replacement(kind):
    """A fanout over the degrees: with replacement an edge is drawn more than once."""
    def repeats(ld):
        return sum(len(e) - len(set(e)) for e in (_real_eids(kind, b) for b in ld))

    assert repeats(make(kind, budget=BIG[kind], num_neighbors=[12])) == 0
    assert repeats(make(kind, budget=BIG[kind], num_neighbors=[12], replace=True)) > 0


@pytest.mark.parametrize("kind", HOPS)
def test_disjoint_gives_each_seed_its_own_tree(kind):
    p = _p(kind)
    assert p + "seed_of" not in next(iter(make(kind, budget=BIG[kind])))
    flat = next(iter(make(kind, budget=BIG[kind], disjoint=True)))
    seed_of = flat[p + "seed_of"][flat[p + "node_mask"]]
    assert seed_of.unique().numel() > 1


@pytest.mark.parametrize("kind", HOPS)
def test_directed_false_takes_the_induced_subgraph(kind):
    """Every input edge between the sampled nodes is in the batch (and more of them than
    the sampled tree has)."""
    kw = dict(budget=BIG[kind], num_neighbors=[2])
    d, u = next(iter(make(kind, **kw))), next(iter(make(kind, directed=False, **kw)))
    assert len(_real_eids(kind, u)) > len(_real_eids(kind, d))
    if kind != "hetero":
        nodes = set(u["n_id"][u["node_mask"]].tolist())
        ei = G.edge_index
        inside = [e for e in range(ei.size(1))
                  if int(ei[0, e]) in nodes and int(ei[1, e]) in nodes]
        assert sorted(_real_eids(kind, u)) == inside


@pytest.mark.parametrize("kind", HOPS)
def test_num_neighbors_is_the_fanout_per_hop(kind):
    def edges(fan):
        return sum(len(_real_eids(kind, b)) for b in make(kind, budget=BIG[kind],
                                                          num_neighbors=fan))

    assert edges([1]) < edges([3]) < edges([3, 3])


@pytest.mark.parametrize("kind", KINDS)
def test_batch_size_is_the_seeds_of_a_batch(kind):
    for bs in (2, 4):
        first = next(iter(make(kind, budget=BIG[kind], batch_size=bs)))
        if kind == "cluster":  # clusters of ten nodes
            assert len(units(kind, first)) == 10 * bs
        else:
            assert len(units(kind, first)) == bs


# ---------------------------------------------------------------------------
# the seeds: input_nodes
# ---------------------------------------------------------------------------
def test_input_nodes_are_the_seeds():
    picked = torch.tensor([5, 9, 17, 33, 41])
    for given in (picked, torch.isin(torch.arange(N), picked)):
        ld = make("neighbor", budget=BIG["neighbor"], input_nodes=given)
        assert sorted(u for b in ld for u in units("neighbor", b)) == picked.tolist()


def test_hetero_input_nodes_pick_the_seed_type_and_its_seeds():
    ld = make("hetero", budget=BIG["hetero"], input_nodes=("author", torch.tensor([3, 7])))
    flat = next(iter(ld))
    seeds = flat["author/n_id"][flat["author/seed_mask"]].tolist()
    assert seeds == [3, 7] and "paper/seed_mask" not in flat


# ---------------------------------------------------------------------------
# the link loader's supervision
# ---------------------------------------------------------------------------
LINKS = torch.tensor([[0, 1, 2, 3, 4, 5], [10, 11, 12, 13, 14, 15]])


def _link(**kw):
    kw.setdefault("budget", BIG["link"])
    return make("link", batch_size=kw.pop("batch_size", 3), **kw)


def _positives(flat):
    """The global ``(src, dst)`` of a binary batch's positive slots."""
    pos = flat["input_id"] >= 0
    return [tuple(flat["n_id"][flat["edge_label_index"][:, j]].tolist())
            for j in pos.nonzero().view(-1).tolist()]


def test_edge_label_index_are_the_supervision_edges():
    got = sorted(p for b in _link(edge_label_index=LINKS) for p in _positives(b))
    assert got == sorted(zip(LINKS[0].tolist(), LINKS[1].tolist()))


def test_edge_label_is_carried_to_the_positive_slots():
    lab = torch.tensor([2, 3, 4, 5, 6, 7])
    for b in _link(edge_label_index=LINKS, edge_label=lab):
        pos = b["input_id"] >= 0
        assert b["edge_label"][pos].tolist() == lab[b["input_id"][pos]].tolist()


def test_neg_sampling_none_binary_and_triplet():
    none = next(iter(_link(edge_label_index=LINKS, neg_sampling=None)))
    assert bool((none["input_id"][none["link_mask"]] >= 0).all())  # positives only
    binary = next(iter(_link(edge_label_index=LINKS)))
    assert int((binary["link_mask"] & (binary["input_id"] < 0)).sum()) == 3  # ratio 1
    triplet = next(iter(_link(edge_label_index=LINKS, neg_sampling="triplet")))
    assert {"src_index", "dst_pos_index", "dst_neg_index"} <= set(triplet)
    assert "src_index" not in binary


def test_neg_sampling_ratio_is_the_negatives_per_positive():
    for r in (1, 2):
        ld = _link(edge_label_index=LINKS, neg_sampling_ratio=r)
        list(ld)
        assert ld.stats.negatives == r * ld.stats.links == r * 6
    trip = next(iter(_link(edge_label_index=LINKS, neg_sampling="triplet",
                           neg_sampling_ratio=2)))
    assert trip["dst_neg_index"].shape[-1] == 2


# ---------------------------------------------------------------------------
# the cluster loader's clusters
# ---------------------------------------------------------------------------
def test_partition_given_is_the_clusters_of_the_batches():
    part = (torch.arange(N) // 20)  # three clusters of 20 consecutive nodes
    ld = make("cluster", budget=BIG["cluster"], partition=part, batch_size=1)
    assert ld.num_parts == 3 and ld.partitioner == "given"
    assert sorted(sorted(units("cluster", b)) for b in ld) == [
        list(range(0, 20)), list(range(20, 40)), list(range(40, 60))]


@pytest.mark.skipif(not metis_available()[0], reason="no METIS backend installed")
def test_num_parts_and_recursive_reach_metis():
    kw = dict(budget=BIG["cluster"], partition=None, batch_size=1)
    four = make("cluster", num_parts=4, **kw)
    five = make("cluster", num_parts=5, **kw)
    assert (four.num_parts, five.num_parts) == (4, 5) and len(five) == 5
    rec = make("cluster", num_parts=4, recursive=True, **kw)
    kway = make("cluster", num_parts=4, recursive=False, **kw)
    assert not torch.equal(rec.node_perm, kway.node_perm) \
        or not torch.equal(rec.partptr, kway.partptr)


@pytest.mark.skipif(not metis_available()[0], reason="no METIS backend installed")
def test_seed_reaches_metis():
    """On a graph of planted blocks METIS's partition depends on its seed: the loader's."""
    from graph_adapter.app.demo.node import sbm_graph

    g = sbm_graph(300, 4, 5.0, 0.9, 0.3, 4, 0)
    kw = dict(num_parts=4, budget=Budget(nodes=303, edges=6000, graphs=2))
    a, b, c = (FixedSizeClusterLoader(g, seed=s, **kw).node_perm for s in (7, 12345, 7))
    assert not torch.equal(a, b) and torch.equal(a, c)


@pytest.mark.parametrize("backend", METIS_BACKENDS)
def test_metis_backend_is_the_one_that_runs(backend):
    kw = dict(budget=BIG["cluster"], partition=None, num_parts=4, metis_backend=backend)
    ok, why = metis_available(backend)
    if not ok:  # not installed here: named, never another backend in its place
        with pytest.raises(MetisUnavailableError, match=backend):
            make("cluster", **kw)
        return
    assert make("cluster", **kw).partitioner == backend
