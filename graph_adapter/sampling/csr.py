"""A large graph as CSC + a vectorised torch neighbour sampler (no compiled extension).

PyG 2.8's ``NeighborLoader`` needs pyg-lib or torch-sparse; this module needs
torch only. It samples as PyG's ``NeighborSampler`` does for node-level
training with ``directed=True`` (the default):

* hop ``h`` samples, for every node *added* in hop ``h - 1`` (the seeds for
  hop 0), ``num_neighbors[h]`` of its in-neighbours (sources ``u`` of edges
  ``u -> v``): without replacement (each of a node's in-edges at most once,
  uniformly: a uniformly random ``k``-subset), all of them where the fanout
  is ``-1`` or the node has at most ``k``, or ``k`` draws with replacement
  with ``replace=True``;
* a sampled source not seen before becomes a new row (rows in order of first
  appearance, seeds first); one already seen keeps its row and is not
  expanded again;
* the subgraph's ``edge_index`` is ``[source row, destination row]`` of the
  sampled edges only (a directed subgraph: message flow towards the seeds),
  ``e_id`` their ids in the input ``edge_index`` (``directed=False``: every
  input edge between the sampled nodes instead, :func:`induced_edges`);
* ``disjoint=True``: every seed grows its own tree (a node reached from two
  seeds is two rows); ``seed_of`` gives each row's seed position;
* PyG 2.8's other sampling arguments (:func:`sample_neighbors`): temporal
  sampling (``node_time`` / ``edge_time`` with ``seed_time``; ``"uniform"`` or
  ``"last"``; no edge later than its tree's seed, always disjoint), weighted
  draws (``edge_weight``), ``subgraph_type="bidirectional"`` (the sampled edges
  and their reverses, :func:`bidirectional_edges`) and zero hops
  (``num_neighbors=[]``). Times and weights take :func:`sample_hop_keyed`, a
  slower path whose cost is the frontier's in-degree
  (``benchmarks/bench_sampling_modes.py``).

Randomness comes only from the ``torch.Generator`` passed in, so a sample is
a function of (graph, seeds, fanouts, generator state): the loaders seed one
per batch from ``(seed, epoch, batch index)``, deterministic with any number
of workers.

Memory: the :class:`CSC` keeps ``colptr`` and the slot order ``perm`` (int32
below ``2**31`` edges) and reads sources through the graph's own
``edge_index[0]``: ``4 (N + 1) + 4 E`` bytes beside the graph (plus the sampler's ``[N]`` int32 scratch
array), built by a chunked counting sort whose
temporaries are the chunk's size (1M nodes / 20M edges: 84 MiB with the scratch array, 2.4 s;
docs/large_graphs.md).

Cost: without replacement a fanout ``k <= FLOYD_MAX_K`` draws each node's subset
with Floyd's algorithm, ``k`` draws per node whatever its degree (a hub costs
what any node does); a larger ``k`` sorts one random key per in-edge of the
frontier. Gathers go through ``index_select`` (:func:`take`). At 1 thread on the
100k SBM (``[10, 5]``, 512 seeds) a sample took 16.4 ms with advanced indexing
and an argsort of float64 keys, 7.1 ms with ``take`` and an int64 radix sort,
about 6 ms with Floyd's draw (docs/large_graphs.md).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import torch
from torch import Tensor

__all__ = ["CSC", "Sample", "FanoutError", "FanoutLengthError", "SubgraphTypeError",
           "TemporalSamplingError", "check_fanouts", "sample_neighbors", "sample_hop",
           "sample_hop_keyed", "induced_edges", "bidirectional_edges", "resolve_subgraph_type", "check_temporal_inputs",
           "unique_in_order", "take", "ArrayRows", "SUBGRAPH_TYPES", "TEMPORAL_STRATEGIES"]

#: PyG 2.8's ``subgraph_type`` values: the sampled edges, the sampled edges and their
#: reverses, or every input edge between the sampled nodes.
SUBGRAPH_TYPES = ("directional", "bidirectional", "induced")
#: PyG 2.8's ``temporal_strategy`` values.
TEMPORAL_STRATEGIES = ("uniform", "last")


class FanoutError(ValueError):
    """A ``num_neighbors`` that is not a list of ints ``>= -1`` (or, per edge type,
    lists of one length for edge types the graph has)."""


class FanoutLengthError(FanoutError):
    """Per-edge-type fanout lists of different lengths (PyG's wording: "Number of
    hops must be the same across all edge types")."""


class SubgraphTypeError(ValueError):
    """A ``subgraph_type`` that is not one of :data:`SUBGRAPH_TYPES`, or one that
    contradicts ``directed=False`` (which means ``"induced"``)."""


class TemporalSamplingError(ValueError):
    """Temporal or weighted sampling asked for with inputs it cannot use: a time or
    weight attribute the graph lacks or of the wrong length, an edge-level time
    without seed times, a strategy that is not one of :data:`TEMPORAL_STRATEGIES`,
    or an induced subgraph (temporal sampling grows one tree per seed)."""


def resolve_subgraph_type(subgraph_type: Optional[str], directed: bool = True,
                          owner: str = "sample_neighbors") -> str:
    """The one subgraph type meant by ``subgraph_type`` and the older ``directed``.

    ``directed=False`` is ``"induced"`` (PyG's deprecated spelling); ``directed=True``
    (the default) leaves ``subgraph_type`` to choose (``None``: ``"directional"``).

    Raises:
        SubgraphTypeError: an unknown ``subgraph_type``, or ``directed=False``
            with ``"directional"`` / ``"bidirectional"``.
    """
    if subgraph_type is not None and not isinstance(subgraph_type, str):
        subgraph_type = getattr(subgraph_type, "value", subgraph_type)  # PyG's SubgraphType enum
    if subgraph_type is not None and subgraph_type not in SUBGRAPH_TYPES:
        raise SubgraphTypeError(f"{owner}(subgraph_type={subgraph_type!r}): choose one of "
                                f"{SUBGRAPH_TYPES}")
    if not directed:
        if subgraph_type not in (None, "induced"):
            raise SubgraphTypeError(
                f"{owner}(directed=False, subgraph_type={subgraph_type!r}): directed=False "
                f"means subgraph_type='induced'; give subgraph_type alone")
        return "induced"
    return subgraph_type or "directional"


def check_fanouts(num_neighbors: Sequence[int], where: str = "num_neighbors") -> List[int]:
    """``num_neighbors`` as a list of ints, or a :class:`FanoutError` naming the bad entry.

    ``[]`` is zero hops (the seeds alone, no edges), as in PyG."""
    if isinstance(num_neighbors, (int, str)) or not hasattr(num_neighbors, "__len__"):
        raise FanoutError(f"{where}={num_neighbors!r}: give one fanout per hop as a list, "
                          f"e.g. [10, 5] (-1 = all neighbours)")
    fan = list(num_neighbors)
    for i, k in enumerate(fan):
        if isinstance(k, bool) or not isinstance(k, int) or k < -1:
            raise FanoutError(f"{where}[{i}]={k!r}: a fanout is an int >= 0, or -1 for all "
                              f"neighbours")
    return fan


def take(a: Tensor, idx: Tensor) -> Tensor:
    """``a[idx]`` along dim 0, through ``index_select``: on the CPU at one thread
    advanced indexing (``aten::index``) took 7.6 ms to gather 100k int64 entries of
    a 2M-entry array where ``index_select`` took 0.34 ms (22x; 3.9 vs 0.2 ms for
    25k rows of ``[100k, 32]`` features), the sampler's and padding's main cost
    (docs/large_graphs.md, "Where an epoch's host time goes"). ``idx`` is int64 or
    int32."""
    return a.index_select(0, idx)


@dataclass
class CSC:
    """In-neighbour lists of a graph, holding no copy of its edges: for destination
    ``v`` the CSC slots are ``colptr[v]:colptr[v + 1]``; slot ``p`` is input edge
    ``perm[p]``, whose source is ``src[perm[p]]`` (:meth:`sources`).

    ``colptr`` [N + 1] and ``perm`` [E] int32 (int64 when ``E >= 2**31``); ``perm``: the
    input edge id of each slot, sources of one destination in input edge order
    (a stable sort); ``src`` [E]: the input ``edge_index[0]`` itself (a view, not
    a copy). So the CSC costs ``4 (N + 1) + 4 E`` bytes beside the graph, plus
    ``4 N`` for the sampler's scratch array once made (PyG's,
    through torch-sparse, keeps ``colptr``, ``row`` and ``perm`` in int64:
    ``8 (N + 1) + 16 E``). ``keep_edge_ids=False`` only drops ``e_id`` from
    the samples.
    """

    colptr: Tensor
    perm: Tensor
    src: Tensor
    num_nodes: int
    keep_edge_ids: bool = True
    _scratch: Optional[Tensor] = field(default=None, repr=False, compare=False)
    #: held while a sample uses the scratch array: a loader's prefetching thread and
    #: the caller's own ``loader.batch()`` may sample one CSC at once
    lock: Any = field(default_factory=threading.RLock, repr=False, compare=False)

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("lock")  # a lock does not pickle (spawned workers): each copy makes its own
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.lock = threading.RLock()

    @classmethod
    def from_edge_index(cls, edge_index: Tensor, num_nodes: int, keep_edge_ids: bool = True,
                        chunk: int = 1 << 18, num_src_nodes: Optional[int] = None) -> "CSC":
        """Build the CSC of ``edge_index`` [2, E] (``u -> v``: row 0 source, row 1 destination).

        ``num_nodes`` is the destinations' count (the sources' too, unless
        ``num_src_nodes`` gives theirs: a bipartite edge type of a hetero graph).

        A stable counting sort by destination, ``chunk`` edges at a time, so the
        temporaries are ``O(chunk + N)``, not the ``O(E)`` values and indices of one
        global sort (see docs/dev/RESULTS.md: a graph of 20M edges).
        """
        if edge_index.dim() != 2 or edge_index.size(0) != 2:
            raise ValueError(f"edge_index has shape {tuple(edge_index.shape)}; expected [2, E]")
        if edge_index.is_floating_point() or edge_index.dtype == torch.bool:
            raise TypeError(f"edge_index has dtype {edge_index.dtype}; expected an integer dtype")
        E = int(edge_index.size(1))
        n_src = num_nodes if num_src_nodes is None else int(num_src_nodes)
        for r, n in ((0, n_src), (1, num_nodes)):
            ix = edge_index[r]
            if E and (int(ix.min()) < 0 or int(ix.max()) >= n):
                bad = int(((ix < 0) | (ix >= n)).nonzero()[0])
                raise ValueError(f"edge_index column {bad} = {edge_index[:, bad].tolist()} is "
                                 f"outside [0, {n}) in row {r} ({n} "
                                 f"{'source' if r == 0 else 'destination'} nodes)")
        dst = edge_index[1]
        counts = torch.bincount(dst, minlength=num_nodes)
        colptr = torch.zeros(num_nodes + 1, dtype=torch.long)
        torch.cumsum(counts, 0, out=colptr[1:])
        del counts
        perm = _counting_order(dst, colptr, chunk)
        if E < 2**31:  # slot offsets fit: half the bytes (read back as int64, slot_range)
            colptr = colptr.to(torch.int32)
        return cls(colptr, perm, edge_index[0], num_nodes, keep_edge_ids)

    @property
    def row(self) -> Tensor:
        """The source of every CSC slot [E] int64 (a new tensor: tests and small graphs)."""
        return self.src[self.perm].long()

    def sources(self, pos: Tensor) -> Tensor:
        """The source node (int64) of each CSC slot in ``pos``."""
        return self.sources_and_edge_ids(pos)[0]

    def edge_ids(self, pos: Tensor) -> Tensor:
        """The input edge id (int64) of each CSC slot in ``pos``."""
        return take(self.perm, pos).long()

    def sources_and_edge_ids(self, pos: Tensor) -> tuple:
        """``(source node, input edge id)`` (int64 each) of each CSC slot in ``pos``: one
        read of ``perm`` for both."""
        eid = take(self.perm, pos)
        return take(self.src, eid).long(), eid.long()

    def nbytes(self) -> int:
        """Bytes this CSC holds beside the graph (``src`` is the graph's own tensor)."""
        own = [self.colptr, self.perm] + ([self._scratch] if self._scratch is not None else [])
        return sum(t.numel() * t.element_size() for t in own)

    def scratch(self) -> Tensor:
        """A ``[N]`` array of ``-1`` kept for the sampler (made on first use): int32 below
        ``2**31`` nodes (row ids of one sample), else int64."""
        if self._scratch is None:
            dt = torch.int32 if self.num_nodes < 2**31 else torch.long
            self._scratch = torch.full((self.num_nodes,), -1, dtype=dt)
        return self._scratch

    def slot_range(self, nodes: Tensor) -> tuple:
        """``(first CSC slot, in-degree)`` of each of ``nodes``, int64."""
        start = take(self.colptr, nodes).long()
        return start, take(self.colptr, nodes + 1).long() - start

    def in_degree(self, nodes: Tensor) -> Tensor:
        """In-degree (int64) of each of ``nodes``."""
        return self.slot_range(nodes)[1]


def _counting_order(dst: Tensor, colptr: Tensor, chunk: int) -> Tensor:
    """The CSC slot order: ``perm[p]`` = the input edge in slot ``p`` [E] (int32 below
    ``2**31`` edges), edges of one destination in input order.

    A counting sort: each chunk of edges is sorted stably on its own, an edge's
    slot is its destination's next free slot (``fill``) plus its rank among the
    chunk's edges of that destination; then ``fill`` moves past the chunk.
    """
    E = int(dst.numel())
    perm = torch.empty(E, dtype=torch.int32 if E < 2**31 else torch.long)
    fill = colptr[:-1].clone()
    for s in range(0, E, max(int(chunk), 1)):
        d = dst[s:s + chunk]
        sd, order = torch.sort(d, stable=True)
        n = sd.numel()
        idx = torch.arange(n)
        first = torch.ones(n, dtype=torch.bool)
        first[1:] = sd[1:] != sd[:-1]
        run_start = torch.cummax(torch.where(first, idx, torch.zeros_like(idx)), 0).values
        perm[fill[sd] + (idx - run_start)] = (order + s).to(perm.dtype)
        fill.index_add_(0, sd.long(), torch.ones(n, dtype=torch.long))
    return perm


@dataclass
class Sample:
    """One sampled subgraph (global ids; rows = positions in ``n_id``).

    ``n_id`` [n]: global node id of each row, seeds first (in the order given);
    ``edge_index`` [2, m]: ``[source row, destination row]``, hop by hop;
    ``e_id`` [m]: input edge id of each sampled edge (``None`` without ids);
    ``nodes_per_hop`` / ``edges_per_hop``: rows / edges added by each hop
    (``nodes_per_hop[0]`` = the seeds); ``seed_of`` [n]: the seed position of
    each row's tree (``disjoint=True``; else ``None``).
    """

    n_id: Tensor
    edge_index: Tensor
    e_id: Optional[Tensor]
    nodes_per_hop: List[int]
    edges_per_hop: List[int]
    seed_of: Optional[Tensor] = None

    @property
    def num_nodes(self) -> int:
        return int(self.n_id.numel())

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.size(1))


def _segments(counts: Tensor) -> Tensor:
    """``[0]*c0 + [1]*c1 + ...`` for ``counts`` [F]."""
    return torch.repeat_interleave(torch.arange(counts.numel()), counts)


#: The largest fanout drawn by Floyd's subset algorithm (:func:`_floyd_subsets`: ``k``
#: passes over the nodes, ``O(k**2)`` compares each); above it, one sort of a random
#: key per in-edge of the frontier.
FLOYD_MAX_K = 32


def _floyd_subsets(deg: Tensor, k: int, gen: torch.Generator) -> Tensor:
    """A uniformly random ``k``-subset of ``range(deg[i])`` for each ``i`` [B] (every
    ``deg[i] > k``): ``[B, k]`` offsets, ascending along each row.

    Floyd's algorithm, all rows at once: for ``j = d - k, ..., d - 1`` draw ``t``
    uniform in ``[0, j]`` and take ``t``, or ``j`` when ``t`` is taken already.
    Each node's cost is ``k`` draws, not one per in-edge (a hub's whole list).
    """
    chosen = torch.empty(deg.numel(), k, dtype=torch.long)
    for i in range(k):
        j = deg - k + i
        t = torch.minimum((torch.rand(deg.numel(), generator=gen, dtype=torch.float64)
                           * (j + 1)).long(), j)  # min: a draw of 1 - 2**-53 rounded up
        if i:
            t = torch.where((chosen[:, :i] == t.unsqueeze(1)).any(1), j, t)
        chosen[:, i] = t
    return chosen.sort(1).values


def sample_hop(csc: CSC, frontier: Tensor, k: int, replace: bool, gen: torch.Generator
               ) -> tuple:
    """Sample ``k`` in-edges of each of ``frontier`` (global ids) [F].

    Returns ``(seg, pos)``: for every sampled edge, the frontier position of
    its destination and its CSC slot, grouped by frontier position in order.
    Without replacement a node with more than ``k`` in-edges gets a uniformly
    random ``k``-subset, in CSC order (``k <= FLOYD_MAX_K``: Floyd's algorithm,
    :func:`_floyd_subsets`; larger ``k``: its slots sorted by a random 31-bit
    key, a tie, chance about ``deg**2 / 2**32`` per node, keeping CSC order);
    ``k == -1`` or at most ``k`` in-edges: all of them.
    """
    start, deg = csc.slot_range(frontier)
    if replace and k >= 0:
        cnt = torch.where(deg > 0, torch.full_like(deg, k), torch.zeros_like(deg))
        seg = _segments(cnt)
        r = torch.rand(seg.numel(), generator=gen, dtype=torch.float64)
        d = take(deg, seg)
        pos = take(start, seg) + (r * d).long().clamp(max=(d - 1).clamp(min=0))
        return seg, pos
    if 0 <= k <= FLOYD_MAX_K:
        return _floyd_hop(start, deg, k, gen)
    seg = _segments(deg)
    seg_start = torch.cumsum(deg, 0) - deg  # first expanded slot of each segment
    off = torch.arange(seg.numel()) - take(seg_start, seg)  # slot's rank in CSC order
    pos = take(start, seg) + off
    if k < 0 or not bool((deg > k).any()):
        return seg, pos
    # A uniform k-subset of every segment: sort the slots by (segment, random key)
    # in one stable sort of int64 keys (a radix sort: faster than an argsort of
    # float64 keys; see docs/dev/RESULTS.md) and keep the first k of each
    # segment. Sorted by segment first, the j-th slot of the sorted order lies
    # in segment seg[j] (seg is non-decreasing), so its rank there is off[j]; a
    # keep mask over CSC order keeps CSC order. Segments of at most k slots
    # keep all of them (off < deg <= k).
    key = torch.randint(0, 2 ** 31, (seg.numel(),), generator=gen)
    order = torch.sort((seg << 31) | key, stable=True).indices
    keep = torch.empty(seg.numel(), dtype=torch.bool).scatter_(0, order, off < k)
    idx = keep.nonzero().view(-1)
    return take(seg, idx), take(pos, idx)


def _floyd_hop(start: Tensor, deg: Tensor, k: int, gen: torch.Generator) -> tuple:
    """:func:`sample_hop` without replacement for ``0 <= k <= FLOYD_MAX_K``: every slot
    of a node with at most ``k``, a Floyd subset of the others' (in CSC order)."""
    cnt = deg.clamp(max=k)
    seg = _segments(cnt)
    rank = torch.arange(seg.numel()) - take(torch.cumsum(cnt, 0) - cnt, seg)  # 0..cnt-1
    big = (deg > k).nonzero().view(-1)
    off = rank
    if big.numel():
        chosen = _floyd_subsets(take(deg, big), k, gen).view(-1)  # [B * k]
        row = torch.full((deg.numel(),), -1, dtype=torch.long).index_copy_(
            0, big, torch.arange(big.numel()))
        r = take(row, seg)  # the node's row of `chosen`, -1: all of its slots
        off = torch.where(r >= 0, take(chosen, r.clamp(min=0) * k + rank), rank)
    return seg, take(start, seg) + off


def _top_k_mask(seg: Tensor, keys: Sequence[Tensor], k: int, num_segments: int) -> Tensor:
    """A bool mask over candidates: the ``k`` largest of each segment, by ``keys``
    (most significant first; later keys break ties), candidates of one segment
    anywhere in the array. Stable sorts from the least significant key up, then by
    segment; a candidate's rank in its segment is its place in that order."""
    n = seg.numel()
    order = torch.arange(n)
    for key in reversed(list(keys)):
        order = take(order, torch.sort(take(key, order), descending=True, stable=True).indices)
    order = take(order, torch.sort(take(seg, order), stable=True).indices)
    cnt = torch.bincount(seg, minlength=num_segments)
    first = torch.cumsum(cnt, 0) - cnt
    rank = torch.arange(n) - take(first, take(seg, order))
    return torch.empty(n, dtype=torch.bool).scatter_(0, order, rank < k)


def sample_hop_keyed(csc: CSC, frontier: Tensor, k: int, replace: bool, gen: torch.Generator,
                     *, frontier_time: Optional[Tensor] = None,
                     node_time: Optional[Tensor] = None, edge_time: Optional[Tensor] = None,
                     temporal_strategy: str = "uniform",
                     edge_weight: Optional[Tensor] = None) -> tuple:
    """:func:`sample_hop` with times and weights: ``(seg, pos)`` of ``k`` in-edges of
    each of ``frontier`` [F], grouped by frontier position, CSC order within one.

    A candidate is every in-edge of a frontier node; with ``frontier_time`` [F]
    (the time of each frontier node's seed) only those whose time is at most it
    (PyG's rule, ``time <= seed time``): the edge's own ``edge_time`` [E], or the
    source node's ``node_time`` [N_src] (both in input order). Of a node's valid
    candidates, ``k == -1`` or at most ``k`` of them (without replacement): all;
    else ``temporal_strategy="last"`` keeps the ``k`` most recent (a tie: the later
    input edge, as PyG's time-sorted CSC), ``"uniform"`` a random ``k``-subset,
    each candidate's chance proportional to its ``edge_weight`` [E] where given
    (Efraimidis-Spirakis keys ``log(u) / w``: a zero weight is drawn only when a
    node has fewer than ``k`` positive-weight candidates). ``replace=True``:
    ``k`` independent draws (proportional to the weights; ``"last"``: among the
    ``k`` most recent). Cost: one gather per candidate and a few sorts of them,
    against :func:`sample_hop`'s ``k`` draws per node.
    """
    F = frontier.numel()
    start, deg = csc.slot_range(frontier)
    seg = _segments(deg)
    pos = take(start, seg) + torch.arange(seg.numel()) - take(torch.cumsum(deg, 0) - deg, seg)
    if k == 0 or seg.numel() == 0:
        return seg[:0], pos[:0]
    eid = csc.edge_ids(pos)
    t: Optional[Tensor] = None
    if frontier_time is not None and (node_time is not None or edge_time is not None):
        t = (take(edge_time, eid) if edge_time is not None
             else take(node_time, take(csc.src, eid).long()))
        ok = (t <= take(frontier_time, seg)).nonzero().view(-1)  # promoted: int vs float times
        seg, pos, eid, t = take(seg, ok), take(pos, ok), take(eid, ok), take(t, ok)
    if k < 0 or seg.numel() == 0:
        return seg, pos
    if t is not None and temporal_strategy == "last":  # the window: the k most recent
        keep = _top_k_mask(seg, [t, eid], k, F).nonzero().view(-1)
        seg, pos, eid = take(seg, keep), take(pos, keep), take(eid, keep)
    w = None if edge_weight is None else take(edge_weight, eid).to(torch.float64)
    cnt = torch.bincount(seg, minlength=F)
    if replace:
        return _draws_with_replacement(seg, pos, cnt, k, w, gen)
    if not bool((cnt > k).any()):
        return seg, pos
    if w is None:  # a uniform k-subset: one sort of (segment, random 31-bit key)
        keep = _random_k_mask(seg, k, F, gen).nonzero().view(-1)
        return take(seg, keep), take(pos, keep)
    u = torch.rand(seg.numel(), generator=gen, dtype=torch.float64)
    # log(u) / w: the k largest are a weighted draw without replacement
    key = torch.where(w > 0, torch.log(u.clamp(min=1e-300)) / w.clamp(min=1e-300),
                      torch.full_like(u, float("-inf")))
    keys = [key]
    if not bool((w > 0).all()):  # zero weights tie at -inf: a random order among them
        keys.append(torch.rand(seg.numel(), generator=gen, dtype=torch.float64))
    keep = _top_k_mask(seg, keys, k, F).nonzero().view(-1)
    return take(seg, keep), take(pos, keep)


def _random_k_mask(seg: Tensor, k: int, num_segments: int, gen: torch.Generator) -> Tensor:
    """A bool mask over candidates (``seg`` non-decreasing): a uniformly random
    ``k``-subset of each segment (all of a segment of at most ``k``), as
    :func:`sample_hop`'s sort path: one stable sort of ``(segment, random key)``."""
    n = seg.numel()
    cnt = torch.bincount(seg, minlength=num_segments)
    first = torch.cumsum(cnt, 0) - cnt
    key = torch.randint(0, 2 ** 31, (n,), generator=gen)
    order = torch.sort((seg << 31) | key, stable=True).indices
    rank = torch.arange(n) - take(first, take(seg, order))
    return torch.empty(n, dtype=torch.bool).scatter_(0, order, rank < k)


def _draws_with_replacement(seg: Tensor, pos: Tensor, cnt: Tensor, k: int,
                            w: Optional[Tensor], gen: torch.Generator) -> tuple:
    """``k`` draws with replacement among each segment's candidates (``seg`` sorted,
    ``cnt`` per segment): uniform, or proportional to ``w`` (a segment whose weights
    are all zero: uniform)."""
    has = (cnt > 0).nonzero().view(-1)
    s = torch.repeat_interleave(has, k)
    first = torch.cumsum(cnt, 0) - cnt
    lo, n = take(first, s), take(cnt, s)
    r = torch.rand(s.numel(), generator=gen, dtype=torch.float64)
    j = lo + (r * n).long().clamp(max=(n - 1).clamp(min=0))
    if w is not None:
        cw = torch.cumsum(w, 0)
        total = torch.zeros(cnt.numel(), dtype=torch.float64).index_add_(0, seg, w)
        base = take(cw - w, take(first, s).clamp(max=max(cw.numel() - 1, 0)))
        tot = take(total, s)
        jw = torch.searchsorted(cw, base + r * tot, right=True)
        jw = torch.minimum(torch.maximum(jw, lo), lo + n - 1)
        j = torch.where(tot > 0, jw, j)
    return s, take(pos, j)


def bidirectional_edges(edge_index: Tensor, e_id: Optional[Tensor], num_dst: int,
                        rev_edge_index: Optional[Tensor] = None,
                        rev_e_id: Optional[Tensor] = None) -> tuple:
    """The sampled edges and their reverses, coalesced (PyG's ``to_bidirectional``).

    ``edge_index`` [2, m] rows ``[source row, destination row]``; the reverses are
    those of ``rev_edge_index`` (default: ``edge_index`` itself; a hetero edge type
    gives its reverse type's edges). Every distinct ``(source, destination)`` pair
    once, ordered by destination row, then source row (PyG's ``coalesce`` with
    ``sort_by_row=False``). Returns ``(edge_index, e_id, dst_counts)``: ``e_id`` the
    input edge id behind each edge (a reverse: the id of the edge it reverses; a
    pair present both ways: the id of the edge sampled in that direction), ``None``
    without ids; ``dst_counts`` [num_dst] edges per destination row.
    """
    rev = edge_index if rev_edge_index is None else rev_edge_index
    ei = torch.cat([edge_index, rev.flip(0)], 1)
    eid = None
    if e_id is not None:
        eid = torch.cat([e_id, e_id if rev_edge_index is None else rev_e_id])
    n_src = int(ei[0].max()) + 1 if ei.size(1) else 1
    key = ei[1] * n_src + ei[0]
    order = torch.sort(key, stable=True).indices  # stable: the forward edge first
    sk = take(key, order)
    first = torch.ones(sk.numel(), dtype=torch.bool)
    first[1:] = sk[1:] != sk[:-1]
    keep = take(order, first.nonzero().view(-1))
    out = ei.index_select(1, keep)
    return (out, None if eid is None else take(eid, keep),
            torch.bincount(out[1], minlength=num_dst))


def unique_in_order(keys: Tensor) -> Tensor:
    """Distinct values of ``keys`` in order of first occurrence."""
    if keys.numel() == 0:
        return keys
    uniq, inv = torch.unique(keys, return_inverse=True)
    first = torch.full((uniq.numel(),), keys.numel(), dtype=torch.long)
    first.scatter_reduce_(0, inv, torch.arange(keys.numel()), reduce="amin")
    return uniq[torch.argsort(first)]


class _Rows:
    """Row ids of node keys seen so far (sorted keys + their rows: searchsorted lookups)."""

    def __init__(self, keys: Tensor):
        self.keys_in_order = [keys]
        self.n = keys.numel()
        self.sorted, idx = torch.sort(keys)
        self.rows = idx

    def lookup(self, keys: Tensor) -> Tensor:
        """Row of each key, ``-1`` where unseen."""
        if self.sorted.numel() == 0:
            return torch.full_like(keys, -1)
        at = torch.searchsorted(self.sorted, keys).clamp(max=self.sorted.numel() - 1)
        hit = self.sorted[at] == keys
        return torch.where(hit, self.rows[at], torch.full_like(keys, -1))

    def add(self, new: Tensor) -> None:
        """Give ``new`` (distinct, unseen keys) the next rows, in order."""
        if new.numel() == 0:
            return
        rows = torch.arange(self.n, self.n + new.numel())
        self.keys_in_order.append(new)
        self.n += new.numel()
        allk = torch.cat([self.sorted, new])
        allr = torch.cat([self.rows, rows])
        self.sorted, o = torch.sort(allk)
        self.rows = allr[o]


class ArrayRows:
    """Row ids of global node ids in a scratch array [N] (``-1`` = unseen): O(1)
    lookups for the non-disjoint case; :meth:`reset` leaves it all ``-1`` again."""

    def __init__(self, scratch: Tensor, keys: Tensor):
        self.scratch, self.n, self.touched = scratch, keys.numel(), [keys]
        scratch.index_copy_(0, keys, torch.arange(keys.numel(), dtype=scratch.dtype))

    def lookup(self, keys: Tensor) -> Tensor:
        return take(self.scratch, keys).long()

    def add(self, new: Tensor) -> None:
        self.scratch.index_copy_(0, new, torch.arange(self.n, self.n + new.numel(),
                                                      dtype=self.scratch.dtype))
        self.touched.append(new)
        self.n += new.numel()

    def add_unseen(self, keys: Tensor) -> Tensor:
        """Give the distinct unseen ids of ``keys`` the next rows, in order of first
        occurrence, and return them (what ``unique_in_order`` of the unseen keys and
        :meth:`add` do, without a sort): each unseen id's entry first takes the
        smallest position it occurs at (``amin``), the occurrences at that
        position are the first ones."""
        cand = take(keys, (take(self.scratch, keys) < 0).nonzero().view(-1))
        if cand.numel() == 0:
            return cand
        self.touched.append(cand)  # reset() clears them even if this stops half-way
        at = torch.arange(cand.numel(), dtype=self.scratch.dtype)
        self.scratch.scatter_reduce_(0, cand, at, "amin", include_self=False)
        new = take(cand, (take(self.scratch, cand) == at).nonzero().view(-1))
        self.add(new)  # every distinct candidate is in new: no position is left behind
        return new

    def reset(self) -> None:
        for t in self.touched:
            self.scratch.index_fill_(0, t, -1)


def induced_edges(csc: CSC, n_id: Tensor, scratch: Tensor,
                  src_n_id: Optional[Tensor] = None) -> tuple:
    """Every input edge from a row of ``src_n_id`` to a row of ``n_id`` (distinct ids).

    ``src_n_id`` defaults to ``n_id`` (a homogeneous graph); a bipartite edge type
    of a hetero graph gives its source type's rows, ``scratch`` then being a
    ``[N_src]`` array. Returns ``(edge_index [2, m] rows, e_id [m], dst_counts
    [n])``: for each row of ``n_id`` in row order, its in-edges whose source is a
    row, in CSC (input) order; a multi-edge is there as often as in the input.
    ``scratch`` is an array of ``-1`` and is left so.
    """
    src_ids = n_id if src_n_id is None else src_n_id
    with csc.lock:  # the scratch array may be the CSC's own (RLock: sample_neighbors holds it)
        return _induced_edges(csc, n_id, scratch, src_ids)


def _induced_edges(csc: CSC, n_id: Tensor, scratch: Tensor, src_ids: Tensor) -> tuple:
    """:func:`induced_edges` with the lock held."""
    scratch.index_copy_(0, src_ids, torch.arange(src_ids.numel(), dtype=scratch.dtype))
    try:
        start, deg = csc.slot_range(n_id)
        seg = _segments(deg)
        pos = take(start, seg) + torch.arange(seg.numel()) - take(torch.cumsum(deg, 0) - deg, seg)
        src, eid = csc.sources_and_edge_ids(pos)
        src_row = take(scratch, src).long()
    finally:
        scratch.index_fill_(0, src_ids, -1)
    keep = (src_row >= 0).nonzero().view(-1)
    seg = take(seg, keep)
    return (torch.stack([take(src_row, keep), seg]), take(eid, keep),
            torch.bincount(seg, minlength=n_id.numel()))


def sample_neighbors(csc: CSC, seeds: Tensor, num_neighbors: Sequence[int], *,
                     replace: bool = False, disjoint: bool = False, directed: bool = True,
                     subgraph_type: Optional[str] = None, seed_time: Optional[Tensor] = None,
                     node_time: Optional[Tensor] = None, edge_time: Optional[Tensor] = None,
                     temporal_strategy: str = "uniform", edge_weight: Optional[Tensor] = None,
                     generator: Optional[torch.Generator] = None) -> Sample:
    """Sample the ``len(num_neighbors)``-hop subgraph around ``seeds`` (PyG 2.8's
    ``NeighborSampler`` semantics).

    Args:
        csc: the graph (:meth:`CSC.from_edge_index`).
        seeds: [B] global node ids, distinct (a repeated seed would be two rows
            only with ``disjoint=True``).
        num_neighbors: fanout per hop (``-1`` = all in-neighbours; ``[]``: zero
            hops, the seeds alone and no edge).
        replace: sample with replacement (``k`` draws per node with any in-edge).
        disjoint: one tree per seed (rows are (seed, node) pairs).
        directed: ``False`` is ``subgraph_type="induced"`` (the older spelling).
        subgraph_type: ``"directional"`` (default): the sampled edges;
            ``"bidirectional"``: the sampled edges and their reverses, coalesced
            (:func:`bidirectional_edges`); ``"induced"``: the nodes sampled the
            same way, the edges every input edge between them, ordered by
            destination row (:func:`induced_edges`). For both of the latter
            ``edges_per_hop`` has one entry per entry of ``nodes_per_hop``: the
            edges whose destination row came in that hop (the seeds' first).
        seed_time: [B] the time of each seed (PyG's ``input_time``); default
            ``node_time[seeds]`` where ``node_time`` is given.
        node_time: [N] a time per node: a neighbour is sampled only if its time is
            at most its seed's (``time <= seed_time``, PyG's rule, every hop
            against the seed of the tree).
        edge_time: [E] a time per input edge (input order): an edge is sampled
            only if its time is at most its seed's; needs ``seed_time``.
        temporal_strategy: ``"uniform"``: a uniform draw among the valid edges;
            ``"last"``: the ``k`` most recent valid ones.
        edge_weight: [E] (input order): draws proportional to the weights
            (without replacement unless ``replace``).
        generator: the only source of randomness.

    Temporal sampling (``node_time`` or ``edge_time``) is always disjoint, as
    PyG's: the sample has ``seed_of``. Times and weights take the slower path of
    :func:`sample_hop_keyed` (every in-edge of the frontier is a candidate); the
    rest keeps :func:`sample_hop`'s (Floyd subsets).

    Returns a :class:`Sample` (see the module docstring for the order). Holds
    ``csc.lock`` throughout (the scratch array is the CSC's, one per process).

    Raises:
        FanoutError: a bad ``num_neighbors``.
        SubgraphTypeError: an unknown ``subgraph_type`` or one against ``directed``.
        TemporalSamplingError: times or weights of the wrong length, both node and
            edge times, edge times without ``seed_time``, an unknown strategy, or
            temporal sampling with ``"induced"``.
    """
    sub = resolve_subgraph_type(subgraph_type, directed)
    temporal = check_temporal_inputs(csc, seeds, seed_time, node_time, edge_time, temporal_strategy,
                               edge_weight, sub)
    if temporal:
        disjoint = True
        if seed_time is None:
            seed_time = take(node_time, seeds.long().reshape(-1))
    with csc.lock:
        return _sample_neighbors(csc, seeds, num_neighbors, replace=replace, disjoint=disjoint,
                                 subgraph_type=sub, seed_time=seed_time if temporal else None,
                                 node_time=node_time, edge_time=edge_time,
                                 temporal_strategy=temporal_strategy, edge_weight=edge_weight,
                                 generator=generator)


def check_temporal_inputs(csc: CSC, seeds: Tensor, seed_time: Optional[Tensor],
                    node_time: Optional[Tensor], edge_time: Optional[Tensor], strategy: str,
                    edge_weight: Optional[Tensor], subgraph_type: str,
                    what: str = "sample_neighbors", num_src_nodes: Optional[int] = None) -> bool:
    """Check the time and weight inputs of one CSC (``what`` names the caller in the
    errors); True where the sample is temporal.

    Raises:
        TemporalSamplingError: see :func:`sample_neighbors`.
    """
    if strategy not in TEMPORAL_STRATEGIES:
        raise TemporalSamplingError(f"{what}: temporal_strategy={strategy!r}; choose one of "
                                    f"{TEMPORAL_STRATEGIES}")
    E = int(csc.perm.numel())
    n_src = csc.num_nodes if num_src_nodes is None else num_src_nodes
    for name, v, n, per in (("node_time", node_time, n_src, "source node"),
                            ("edge_time", edge_time, E, "edge"),
                            ("edge_weight", edge_weight, E, "edge")):
        if v is not None and (v.dim() != 1 or v.numel() != n):
            raise TemporalSamplingError(f"{what}: {name} has shape {tuple(v.shape)}; expected "
                                        f"[{n}] (one per {per})")
    if node_time is not None and edge_time is not None:
        raise TemporalSamplingError(f"{what}: both node_time and edge_time given; a time "
                                    f"attribute is node-level or edge-level: give one")
    temporal = node_time is not None or edge_time is not None
    if seed_time is not None and not temporal:
        raise TemporalSamplingError(f"{what}: seed_time without node_time or edge_time: give "
                                    f"the times the seeds' times are compared to")
    if edge_time is not None and seed_time is None:
        raise TemporalSamplingError(f"{what}: edge-level times need the seeds' times "
                                    f"(seed_time / input_time): a node has no time of its own")
    if seed_time is not None and seed_time.numel() != seeds.numel():
        raise TemporalSamplingError(f"{what}: seed_time has {seed_time.numel()} entries for "
                                    f"{seeds.numel()} seeds: give one time per seed")
    if temporal and subgraph_type == "induced":
        raise TemporalSamplingError(f"{what}: temporal sampling with subgraph_type='induced': "
                                    f"temporal samples are disjoint trees (as PyG's), and an "
                                    f"induced subgraph per tree is not built; use "
                                    f"'directional' or 'bidirectional'")
    return temporal


def _sample_neighbors(csc: CSC, seeds: Tensor, num_neighbors: Sequence[int], *, replace: bool,
                      disjoint: bool, subgraph_type: str, seed_time: Optional[Tensor],
                      node_time: Optional[Tensor], edge_time: Optional[Tensor],
                      temporal_strategy: str, edge_weight: Optional[Tensor],
                      generator: Optional[torch.Generator]) -> Sample:
    """:func:`sample_neighbors` with ``csc.lock`` held (inputs checked)."""
    fan = check_fanouts(num_neighbors)
    if subgraph_type == "induced" and disjoint:
        raise NotImplementedError("sample_neighbors(directed=False, disjoint=True): an induced "
                                  "subgraph per seed tree is not built (PyG's "
                                  "subgraph_type='induced' with disjoint); use one of them")
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    seeds = seeds.long().reshape(-1)
    N = csc.num_nodes
    B = seeds.numel()
    tree = torch.arange(B) if disjoint else None
    keys = tree * N + seeds if disjoint else seeds
    if not disjoint and unique_in_order(seeds).numel() != B:
        raise ValueError("sample_neighbors: the seeds repeat a node; give distinct seeds "
                         "(or disjoint=True, one tree per seed)")
    keyed = seed_time is not None or edge_weight is not None
    # Non-disjoint: a scratch array of the graph's size (O(1) lookups), one per
    # CSC and process (workers fork their own copy); disjoint keys are
    # (tree, node) pairs: sorted keys + searchsorted.
    rows = _Rows(keys) if disjoint else ArrayRows(csc.scratch(), keys)
    n_ids = [seeds]
    trees = [tree] if disjoint else []
    frontier, frontier_rows, frontier_tree = seeds, torch.arange(B), tree
    src_rows: List[Tensor] = []
    dst_rows: List[Tensor] = []
    e_ids: List[Tensor] = []
    nodes_per_hop, edges_per_hop = [B], []
    try:
        for k in fan:
            if keyed:
                seg, pos = sample_hop_keyed(
                    csc, frontier, k, replace, gen,
                    frontier_time=None if seed_time is None else take(seed_time, frontier_tree),
                    node_time=node_time, edge_time=edge_time,
                    temporal_strategy=temporal_strategy, edge_weight=edge_weight)
            else:
                seg, pos = sample_hop(csc, frontier, k, replace, gen)
            src, eid = csc.sources_and_edge_ids(pos)
            if disjoint:
                src_key = take(frontier_tree, seg) * N + src
                new = unique_in_order(src_key[rows.lookup(src_key) < 0])
                rows.add(new)
            else:
                src_key = src
                new = rows.add_unseen(src_key)
            r = rows.lookup(src_key)
            src_rows.append(r)
            dst_rows.append(take(frontier_rows, seg))
            if csc.keep_edge_ids:
                e_ids.append(eid)
            new_nodes = new % N if disjoint else new
            n_ids.append(new_nodes)
            new_tree = new // N if disjoint else None
            if disjoint:
                trees.append(new_tree)
            nodes_per_hop.append(int(new.numel()))
            edges_per_hop.append(int(r.numel()))
            frontier = new_nodes
            frontier_rows = torch.arange(rows.n - new.numel(), rows.n)
            frontier_tree = new_tree
    finally:  # leave the scratch all -1 for the next call, even after an error
        if not disjoint:
            rows.reset()
    return _finish(csc, subgraph_type, torch.cat(n_ids), torch.cat(trees) if disjoint else None,
                   src_rows, dst_rows, e_ids, nodes_per_hop, edges_per_hop)


def _finish(csc: CSC, subgraph_type: str, n_id: Tensor, seed_of: Optional[Tensor],
            src_rows: List[Tensor], dst_rows: List[Tensor], e_ids: List[Tensor],
            nodes_per_hop: List[int], edges_per_hop: List[int]) -> Sample:
    """The :class:`Sample` of the hops' rows and drawn edges, as ``subgraph_type`` asks:
    the drawn edges, them and their reverses, or the induced edges."""
    empty = torch.zeros(0, dtype=torch.long)
    if subgraph_type == "induced":
        edge_index, e_id, dst_counts = induced_edges(csc, n_id, csc.scratch())
        return Sample(n_id=n_id, edge_index=edge_index,
                      e_id=e_id if csc.keep_edge_ids else None,
                      nodes_per_hop=nodes_per_hop,
                      edges_per_hop=_per_hop(dst_counts, nodes_per_hop))
    edge_index = (torch.stack([torch.cat(src_rows), torch.cat(dst_rows)]) if src_rows
                  else torch.zeros(2, 0, dtype=torch.long))
    e_id = (torch.cat(e_ids) if e_ids else empty) if csc.keep_edge_ids else None
    if subgraph_type == "bidirectional":
        edge_index, e_id, dst_counts = bidirectional_edges(edge_index, e_id, int(n_id.numel()))
        edges_per_hop = _per_hop(dst_counts, nodes_per_hop)
    return Sample(n_id=n_id, edge_index=edge_index, e_id=e_id, nodes_per_hop=nodes_per_hop,
                  edges_per_hop=edges_per_hop, seed_of=seed_of)


def _per_hop(dst_counts: Tensor, nodes_per_hop: List[int]) -> List[int]:
    """Edges per hop of their destination row (``dst_counts`` [n] per row)."""
    hop_end = torch.tensor(nodes_per_hop).cumsum(0)
    csum = torch.cat([torch.zeros(1, dtype=torch.long), dst_counts.cumsum(0)])
    ends = take(csum, hop_end)
    return torch.diff(ends, prepend=torch.zeros(1, dtype=torch.long)).tolist()
