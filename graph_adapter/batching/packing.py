"""Packing graphs into fixed-size budgets.

A *packing plan* is a list of batches, each a list of dataset indices (plain
Python ints, so a plan is JSON-serialisable).  Every index given to a packer
appears in exactly one batch; a packer never drops a graph (graphs that do not
fit a budget at all are the loader's business: see ``oversize``).  Inside, the
packers and the loader keep a plan as two int64 arrays (:class:`FlatPlan`:
the indices batch after batch and the batch boundaries), 8 bytes a graph: a
list of Python ints costs about 40 a graph, and its many small objects
fragment the heap (``benchmarks/bench_memory.py`` measures it).

Two packers:

* ``"greedy"`` (:func:`pack_greedy`) -- streaming: graphs arrive in (shuffled)
  order, each goes into the first of at most ``open_batches`` open batches where
  it fits, otherwise a new batch opens and, if too many are open, the oldest
  is emitted.  ``open_batches=1`` is plain next-fit (jraph's
  ``dynamically_batch``).  Memory is bounded; the order is random.
* ``"histogram"`` (:func:`pack_histogram`) -- offline: the (nodes, edges)
  histogram of the dataset is packed longest-first, in the spirit of
  Graphcore's longest-pack-first histogram packing (LPFHP), into the fewest
  batches the totals allow, each graph going to the least loaded batch where
  it fits.  Highest fill and evenly filled batches; the batch structure
  follows the size histogram, the epoch seed shuffles which graphs of equal
  size go where and the batch order.

Sizes are a matrix ``[num_graphs, D]`` (node counts per node type, then edge
counts per edge type; ``D = 2`` for homogeneous graphs), capacities a vector
``[D]`` of real slots (``Budget.capacity()``), plus a cap on real graphs.
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..format import RESERVED_NODES, store_name
from ..format.pyg import typed_stores

__all__ = ["GraphSizes", "graph_sizes", "pack_greedy", "pack_histogram", "plan_epoch",
           "plan_efficiency", "find_oversize", "oversize_reasons", "slot_dims", "PACKERS"]

Plan = List[List[int]]


class FlatPlan:
    """A packing plan as arrays: ``flat`` (``[graphs]``, the dataset indices
    batch after batch; int32 while they fit, else int64) and ``bounds`` (int64
    ``[batches + 1]``, batch ``j`` is ``flat[bounds[j]:bounds[j + 1]]``).
    Batches are never empty."""

    __slots__ = ("flat", "bounds")

    def __init__(self, flat: np.ndarray, bounds: np.ndarray):
        if flat.dtype != np.int32 and (flat.size == 0 or int(flat.max()) < 2**31):
            flat = flat.astype(np.int32)  # 4 bytes a graph (indices are >= 0)
        self.flat = flat
        self.bounds = bounds

    @property
    def num_batches(self) -> int:
        return int(self.bounds.size) - 1

    def counts(self) -> np.ndarray:
        """Graphs per batch, ``[batches]``."""
        return np.diff(self.bounds)

    def batch(self, j: int) -> List[int]:
        """Batch ``j`` as a list of Python ints."""
        return self.flat[self.bounds[j]:self.bounds[j + 1]].tolist()

    def to_lists(self) -> Plan:
        """The plan as a JSON-serialisable list of lists of ints."""
        if self.num_batches <= 0:
            return []
        return [a.tolist() for a in np.split(self.flat, self.bounds[1:-1])]

    @classmethod
    def from_lists(cls, plan: Plan) -> "FlatPlan":
        counts = np.fromiter((len(b) for b in plan), np.int64, len(plan))
        flat = np.fromiter((i for b in plan for i in b), np.int64, int(counts.sum()))
        return cls(flat, _bounds(counts))

    @classmethod
    def from_assignment(cls, items: np.ndarray, bins: np.ndarray,
                        rank: np.ndarray) -> "FlatPlan":
        """The plan that puts ``items[p]`` (arrival order) into bin ``bins[p]``,
        the bins ordered by ``rank[bin]`` and each holding its items in arrival
        order; empty bins are dropped."""
        key = rank[bins]
        perm = np.argsort(key, kind="stable")
        counts = np.bincount(key, minlength=rank.size)
        return cls(items[perm], _bounds(counts[counts > 0]))


def _bounds(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def _as_index_array(order: Sequence[int]) -> np.ndarray:
    return np.asarray(list(order) if not isinstance(order, np.ndarray) else order,
                      dtype=np.int64).reshape(-1)


def _check_fits(matrix: np.ndarray, order: np.ndarray, cap: np.ndarray) -> None:
    """Every graph of ``order`` fits an empty batch, else the first (in
    ``order``) that does not is named."""
    if order.size == 0:
        return
    sub = matrix[order]
    bad = np.nonzero(np.any(sub > cap[None, :], axis=1))[0]
    if bad.size:
        p = int(bad[0])
        raise ValueError(f"graph {int(order[p])} with sizes {sub[p].tolist()} does not fit "
                         f"capacity {[int(c) for c in cap]}")


#: Graphs whose sizes the greedy packer turns into Python ints at a time
#: (a million at once would be a transient of about 100 MiB).
_CHUNK = 1 << 14


@dataclass
class GraphSizes:
    """Per-graph sizes: ``matrix[i] = (nodes..., edges...)`` of graph ``i``."""

    matrix: np.ndarray
    node_types: Optional[Tuple[str, ...]] = None  # None: homogeneous
    edge_types: Optional[Tuple[str, ...]] = None

    @property
    def num_graphs(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def dims(self) -> Tuple[str, ...]:
        if self.node_types is None:
            return ("nodes", "edges")
        return tuple(self.node_types) + tuple(self.edge_types)

    @property
    def num_node_dims(self) -> int:
        return 1 if self.node_types is None else len(self.node_types)


def _edge_type_name(et) -> str:
    return store_name(et) if isinstance(et, tuple) else str(et)


def graph_sizes(dataset, transform=None) -> GraphSizes:
    """Node/edge counts of every graph of ``dataset`` (one pass, read only).

    Accepts a :class:`GraphSizes` (returned as is), an int array ``[n, 2]`` of
    (nodes, edges), a PyG dataset or a list of ``Data`` / ``HeteroData``, or
    of any items with ``transform`` (item -> ``Data``).  The graphs are never
    changed (a hetero graph lacking a type counts 0 for it; nothing is added).
    """
    if isinstance(dataset, GraphSizes):
        return dataset
    if isinstance(dataset, np.ndarray):
        m = np.asarray(dataset, dtype=np.int64)
        if m.ndim != 2 or m.shape[1] != 2:
            raise ValueError("graph_sizes: an array must have shape [num_graphs, 2]")
        return GraphSizes(m)
    from torch_geometric.data import Data

    from ._sets import SAMPLE, node_sets_of
    from ._stored import stored_of, stored_sizes
    from ._view import as_graphs, check_graph_item

    stored = stored_of(dataset) if transform is None else None
    m = stored_sizes(stored) if stored is not None else None
    if m is not None and (len(dataset) == 0 or _is_hetero(dataset[0]) or
                          node_sets_of(dataset[0]) is None):
        return GraphSizes(m)  # an InMemoryDataset: its slices, no graph read
    dataset = as_graphs(dataset, transform)
    n = len(dataset)
    if n == 0:
        return GraphSizes(np.zeros((0, 2), dtype=np.int64))
    first = dataset[0]
    check_graph_item(first, 0)
    if _is_hetero(first):
        # sorted by name, the order of a hetero Budget's dicts and capacity()
        nts = tuple(sorted(first.node_types))
        ets = tuple(sorted(first.edge_types, key=_edge_type_name))
        m = np.zeros((n, len(nts) + len(ets)), dtype=np.int64)
        for i in range(n):
            d = first if i == 0 else dataset[i]
            check_graph_item(d, i, first)
            # look the stores up, never d[t]: that would add an empty store to
            # the user's graph when it lacks the type
            nodes, edges = typed_stores(d)
            for j, t in enumerate(nts):
                m[i, j] = (nodes[t].num_nodes or 0) if t in nodes else 0
            for j, t in enumerate(ets):
                m[i, len(nts) + j] = edges[t].num_edges if t in edges else 0
        return GraphSizes(m, nts, tuple(_edge_type_name(e) for e in ets))
    sets = node_sets_of(first, (), [first] + [dataset[i] for i in range(1, min(n, SAMPLE))]
                        if type(first).__inc__ is not Data.__inc__ else ())
    if sets is not None:  # node sets of their own in one store (PairData): a column each
        dims = sets.dims()
        m = np.zeros((n, len(dims)), dtype=np.int64)
        for i in range(n):
            d = first if i == 0 else dataset[i]
            check_graph_item(d, i, first)
            m[i] = [sets.count(d, dim) for dim in dims]
        return GraphSizes(m, sets.nodes, sets.edges)
    m = np.zeros((n, 2), dtype=np.int64)
    for i in range(n):
        d = first if i == 0 else dataset[i]
        check_graph_item(d, i, first)
        m[i, 0] = d.num_nodes or 0
        m[i, 1] = d.num_edges
    return GraphSizes(m)


def _is_hetero(d) -> bool:
    try:
        from torch_geometric.data import HeteroData
    except Exception:  # pragma: no cover
        return False
    return isinstance(d, HeteroData)


def _capacity(sizes: GraphSizes, budget):
    """``budget.capacity()``, checked against the dims of ``sizes`` (by name for
    hetero sizes: the columns must be the budget's types in the budget's order)."""
    cap, gcap = budget.capacity()
    if sizes.matrix.shape[1] != cap.shape[0] or \
            (sizes.node_types is not None and tuple(sizes.dims) != tuple(budget.dims())):
        raise ValueError(f"budget has dims {budget.dims()} but the data has {sizes.dims}")
    return cap, gcap


def find_oversize(sizes: GraphSizes, budget) -> np.ndarray:
    """Indices of graphs that fit no batch of ``budget`` (sorted).

    A graph is oversize when its nodes or edges exceed the real capacity
    (``N - 2`` nodes, ``E`` edges), or when, alone in a batch, it would leave
    a padding graph slot without a padding node: ``N - n`` padding nodes for
    ``G - 1`` padding slots, so ``n - 1 > N - G`` breaks the "no empty
    padding graph slot" rule of ``docs/dev/FORMAT.md`` (homogeneous budgets;
    see :func:`oversize_reasons`)."""
    return np.nonzero(oversize_reasons(sizes, budget) != "")[0]


def oversize_reasons(sizes: GraphSizes, budget) -> np.ndarray:
    """Per graph, why it fits no batch of ``budget``: ``""`` (it fits),
    ``"capacity"`` (more nodes or edges than the batch holds) or
    ``"empty padding slot"`` (alone in a batch it leaves a padding graph slot
    without a padding node: ``n - 1 > N - G``; homogeneous budgets only)."""
    cap, gcap = _capacity(sizes, budget)
    out = np.full(sizes.num_graphs, "", dtype=object)
    if gcap < 1:
        out[:] = "capacity"
        return out
    m = sizes.matrix
    nd = sizes.num_node_dims
    jcap = cap[:nd] + RESERVED_NODES - budget.graphs  # N - G per node dim
    # homogeneous only: a hetero graph may lack a node type, so a slot without
    # nodes of one type is what real graphs have too (slot_dims still keeps a
    # node of each type with N_t >= G per padding slot where it can); a
    # homogeneous budget has N >= G (Budget refuses fewer)
    if sizes.node_types is None:
        out[m[:, 0] - 1 > jcap[0]] = "empty padding slot"
    out[np.any(m > cap[None, :], axis=1)] = "capacity"
    return out


# --------------------------------------------------------------------- greedy
def pack_greedy(matrix: np.ndarray, order: Sequence[int], cap: np.ndarray, graph_cap: int,
                open_batches: int = 8) -> Plan:
    """Streaming first-fit over a window of ``open_batches`` open batches.

    ``order`` gives the dataset indices in arrival order; every one of them
    must fit an empty batch.  Returns the plan in emission order.
    """
    return _pack_greedy_flat(matrix, order, cap, graph_cap, open_batches).to_lists()


def _pack_greedy_flat(matrix: np.ndarray, order: Sequence[int], cap: np.ndarray,
                      graph_cap: int, open_batches: int = 8) -> FlatPlan:
    """:func:`pack_greedy` as a :class:`FlatPlan`.  The loop records only the
    open batch each graph joins (an id per graph, in a compact ``array``) and
    the order in which batches close; the plan is then one stable sort."""
    if open_batches < 1:
        raise ValueError("open_batches must be >= 1")
    order = _as_index_array(order)
    cap = np.asarray(cap, dtype=np.int64)
    _check_fits(matrix, order, cap)
    m = order.size
    if graph_cap <= 1:  # every graph alone, in arrival order
        return FlatPlan(order.copy(), np.arange(m + 1, dtype=np.int64))
    if len(cap) <= 3:  # homogeneous graphs (nodes, edges, slot weight): the fast loop
        bin_of, emitted, nb = _greedy3(matrix, order, cap, graph_cap, open_batches)
    else:
        bin_of, emitted, nb = _greedy_any(matrix, order, cap, graph_cap, open_batches)
    rank = np.empty(nb, np.int64)
    rank[np.frombuffer(emitted, np.int64)] = np.arange(nb)
    return FlatPlan.from_assignment(order, np.frombuffer(bin_of, np.int64), rank)


def _greedy_any(matrix, order, cap, graph_cap, open_batches):
    """The greedy loop for any number of dims: ``(bin of each arrival, bins in
    emission order, number of bins)``."""
    cap_t = tuple(int(c) for c in cap)
    D = len(cap_t)
    bin_of, emitted = array("q"), array("q")
    bins: List[List[Any]] = []  # open bins: [remaining (list), count, id]
    nid = 0
    for c0 in range(0, order.size, _CHUNK):
        for s in matrix[order[c0:c0 + _CHUNK]].tolist():
            for b in bins:
                rem = b[0]
                if all(x <= r for x, r in zip(s, rem)):
                    for d in range(D):
                        rem[d] -= s[d]
                    b[1] += 1
                    bin_of.append(b[2])
                    if b[1] >= graph_cap:
                        bins.remove(b)
                        emitted.append(b[2])
                    break
            else:
                bin_of.append(nid)
                if len(bins) >= open_batches:
                    emitted.append(bins.pop(0)[2])
                bins.append([[c - x for c, x in zip(cap_t, s)], 1, nid])
                nid += 1
    emitted.extend(b[2] for b in bins)
    return bin_of, emitted, nid


def _greedy3(matrix, order, cap, graph_cap, open_batches):
    """:func:`_greedy_any` for at most 3 dims, unrolled (a million graphs are
    planned in about a second): the same plan, dim by dim compared with
    local names instead of generic loops over the dims."""
    D = len(cap)
    c0, c1, c2 = [int(c) for c in cap] + [0] * (3 - D)  # missing dims: size 0, capacity 0
    bin_of, emitted = array("q"), array("q")
    append = bin_of.append
    bins: List[List[int]] = []  # [remaining 0, 1, 2, count, id]
    nid = 0
    for p0 in range(0, order.size, _CHUNK):
        cols = matrix[order[p0:p0 + _CHUNK]].T.tolist()
        cols += [repeat(0)] * (3 - D)
        for s0, s1, s2 in zip(*cols):
            for b in bins:
                if s0 <= b[0] and s1 <= b[1] and s2 <= b[2]:
                    b[0] -= s0
                    b[1] -= s1
                    b[2] -= s2
                    b[3] += 1
                    append(b[4])
                    if b[3] >= graph_cap:
                        bins.remove(b)
                        emitted.append(b[4])
                    break
            else:
                append(nid)
                if len(bins) >= open_batches:
                    emitted.append(bins.pop(0)[4])
                bins.append([c0 - s0, c1 - s1, c2 - s2, 1, nid])
                nid += 1
    emitted.extend(b[4] for b in bins)
    return bin_of, emitted, nid


# ------------------------------------------------------------------ histogram
def pack_histogram(matrix: np.ndarray, indices: Sequence[int], cap: np.ndarray, graph_cap: int,
                   rng: Optional[np.random.Generator] = None, max_tries: int = 64) -> Plan:
    """Offline longest-first packing (see :func:`_pack_histogram_flat`)."""
    return _pack_histogram_flat(matrix, indices, cap, graph_cap, rng, max_tries).to_lists()


def _pack_histogram_flat(matrix: np.ndarray, indices: Sequence[int], cap: np.ndarray,
                         graph_cap: int, rng: Optional[np.random.Generator] = None,
                         max_tries: int = 64) -> FlatPlan:
    """Offline longest-first packing over the size histogram, for the fewest
    batches.

    Graphs are grouped by their size vector (the histogram over (nodes,
    edges) for homogeneous graphs); groups are taken largest first (largest
    relative size), and each graph goes to the batch that stays least loaded
    after taking it (its largest relative load over nodes, edges and graph
    slots) among those where it fits.  The number of batches starts at the
    lower bound ``max(total / capacity)`` over all dims and grows only when a
    graph finds no room, so the fill is as high as the data allow.  ``rng``
    shuffles which graph of a size group lands where; without it the
    assignment follows ``indices``.
    """
    indices = _as_index_array(indices)
    if indices.size == 0:
        return FlatPlan(np.zeros(0, np.int64), np.zeros(1, np.int64))
    if graph_cap < 1:
        raise ValueError("graph_cap must be >= 1")
    if rng is not None:
        indices = indices[rng.permutation(indices.size)]
    sub = matrix[indices]
    if np.any(sub > cap[None, :]):
        bad = indices[np.any(sub > cap[None, :], axis=1)][0]
        raise ValueError(f"graph {int(bad)} does not fit capacity {cap.tolist()}")
    # the graph slot is one more dim
    cap2 = np.concatenate([cap, [graph_cap]]).astype(np.int64)
    sub2 = np.concatenate([sub, np.ones((sub.shape[0], 1), np.int64)], axis=1)
    keys, inverse, counts = np.unique(sub2, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    by_group = np.argsort(inverse, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)])
    capf = np.maximum(cap2.astype(np.float64), 1.0)
    rel = keys / capf
    gorder = np.lexsort((-rel.sum(axis=1), -rel.max(axis=1)))
    total = sub2.sum(axis=0)
    nb = int(max(1, np.max(np.ceil(total / capf))))
    for _ in range(max_tries):
        plan = _lpt(keys, counts, gorder, by_group, starts, indices, cap2, capf, nb)
        if plan is not None:
            return plan
        nb = nb + max(1, nb // 100)
    # cannot happen with graphs that fit an empty batch, but stay safe:
    return _pack_greedy_flat(matrix, indices, cap, graph_cap, open_batches=16)


def _lpt(keys, counts, gorder, by_group, starts, indices, cap2, capf, nb
         ) -> Optional[FlatPlan]:
    used = np.zeros((nb, cap2.shape[0]), dtype=np.int64)
    load = np.zeros(nb, dtype=np.float64)  # max relative load of each batch
    bin_of = array("q")  # the batch of each graph, in arrival order
    for g in gorder:
        s = keys[g]
        for _ in range(int(counts[g])):
            new = used + s[None, :]
            fits = np.all(new <= cap2[None, :], axis=1)
            if not fits.any():
                return None
            after = np.max(new / capf[None, :], axis=1)
            after[~fits] = np.inf
            j = int(np.argmin(after))
            used[j] += s
            load[j] = after[j]
            bin_of.append(j)
    arrival = indices[np.concatenate([by_group[starts[g]:starts[g + 1]] for g in gorder])]
    return FlatPlan.from_assignment(arrival, np.frombuffer(bin_of, np.int64),
                                     np.arange(nb, dtype=np.int64))


PACKERS = ("greedy", "histogram")


def slot_dims(sizes: GraphSizes, budget) -> Tuple[np.ndarray, np.ndarray]:
    """Extra packing dims that leave no padding graph slot without a padding node.

    A batch of ``g`` graphs with ``n`` real nodes (of one node type) has
    ``N - n`` padding nodes for ``G - g`` padding slots; one each needs
    ``n - g <= N - G``, a sum over its graphs of ``n_i - 1``.  Returns the
    per-graph weights ``[num_graphs, k]`` (``max(n_i - 1, 0)``, capped at the
    capacity so that every graph still fits alone) and the capacities ``[k]``
    (``N - G``), one per node dim where ``N >= G``; a batch with a capped
    graph may keep an empty padding slot (``Budget.fit`` / ``tight`` choose
    ``N - G`` so that none is capped).  (The node capacity itself,
    ``N - 2``, keeps the two padding nodes every batch has.)
    """
    cap, _ = budget.capacity()
    nd = sizes.num_node_dims
    jcap = cap[:nd] + RESERVED_NODES - budget.graphs  # N - G per node dim
    keep = jcap >= 0
    w = np.maximum(sizes.matrix[:, :nd] - 1, 0)
    w = np.minimum(w, np.maximum(jcap, 0)[None, :])
    return w[:, keep], jcap[keep]


def plan_epoch(sizes: GraphSizes, budget, *, packer: str = "greedy", shuffle: bool = True,
               seed: int = 0, epoch: int = 0, indices: Optional[Sequence[int]] = None,
               open_batches: int = 8, fill_slots: bool = True) -> Plan:
    """Packing plan of one epoch: a list of batches of dataset indices.

    Deterministic in ``(seed, epoch)``.  ``indices`` restricts the plan to
    those graphs (default: all); each appears exactly once.  Besides the
    budget's node, edge and graph slots, every batch keeps a padding node for
    each padding graph slot (:func:`slot_dims`), so no padding slot is empty
    (``fill_slots=False``: not, the older plan; only to probe a graph cap).
    """
    return plan_epoch_flat(sizes, budget, packer=packer, shuffle=shuffle, seed=seed,
                            epoch=epoch, indices=indices, open_batches=open_batches,
                            fill_slots=fill_slots).to_lists()


def plan_epoch_flat(sizes: GraphSizes, budget, *, packer: str = "greedy",
                     shuffle: bool = True, seed: int = 0, epoch: int = 0,
                     indices: Optional[Sequence[int]] = None, open_batches: int = 8,
                     fill_slots: bool = True) -> FlatPlan:
    """:func:`plan_epoch` as a :class:`FlatPlan` (what the loader keeps)."""
    sizes = graph_sizes(sizes)
    cap, gcap = _capacity(sizes, budget)
    if indices is None:
        indices = np.arange(sizes.num_graphs)
    indices = _as_index_array(indices)
    # node and edge slots, plus one padding node for every padding graph slot
    w, jcap = slot_dims(sizes, budget) if fill_slots else (np.zeros((sizes.num_graphs, 0),
                                                                      np.int64), cap[:0])
    matrix = np.concatenate([sizes.matrix, w], axis=1)
    cap = np.concatenate([cap, jcap]).astype(np.int64)
    rng = np.random.default_rng([int(seed), int(epoch)]) if shuffle else None
    if packer == "greedy":
        order = indices[rng.permutation(indices.size)] if rng is not None else indices
        return _pack_greedy_flat(matrix, order, cap, gcap, open_batches=open_batches)
    if packer == "histogram":
        plan = _pack_histogram_flat(matrix, indices, cap, gcap, rng=rng)
        if rng is not None and plan.num_batches:
            # the batch order, then each batch's graphs (in the new batch order)
            bp = rng.permutation(plan.num_batches)
            counts = plan.counts()[bp]
            pos = [plan.bounds[b] + rng.permutation(c) for b, c in zip(bp.tolist(),
                                                                       counts.tolist())]
            plan = FlatPlan(plan.flat[np.concatenate(pos)], _bounds(counts))
        return plan
    raise ValueError(f"unknown packer {packer!r}; choose one of {PACKERS}")


def plan_efficiency(plan: Union[Plan, FlatPlan], sizes: GraphSizes, budget,
                    extra_batches: int = 0) -> Dict[str, Any]:
    """Real slots / budget slots over a plan (plus ``extra_batches`` fully
    padded batches).  Budget slots include the reserved padding nodes/graph."""
    sizes = graph_sizes(sizes)
    if not isinstance(plan, FlatPlan):
        plan = FlatPlan.from_lists(plan)
    nb = plan.num_batches + int(extra_batches)
    nd = sizes.num_node_dims
    flat = plan.flat
    tot = sizes.matrix[flat].sum(axis=0) if flat.size else \
        np.zeros(sizes.matrix.shape[1], np.int64)
    if budget.is_hetero:
        node_slots = sum(budget.nodes.values())
        edge_slots = sum(budget.edges.values())
    else:
        node_slots, edge_slots = budget.nodes, budget.edges
    real_nodes = int(tot[:nd].sum())
    real_edges = int(tot[nd:].sum())
    return {
        "batches": nb,
        "graphs": int(flat.size),
        "real_nodes": real_nodes,
        "real_edges": real_edges,
        "node_efficiency": real_nodes / max(1, nb * node_slots),
        "edge_efficiency": real_edges / max(1, nb * edge_slots) if edge_slots else 1.0,
        "graph_efficiency": int(flat.size) / max(1, nb * budget.graphs),
        "mean_graphs_per_batch": int(flat.size) / max(1, nb),
    }
