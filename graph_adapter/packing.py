"""Packing graphs into fixed-size budgets.

A *packing plan* is a list of batches, each a list of dataset indices (plain
Python ints, so a plan is JSON-serialisable).  Every index given to a packer
appears in exactly one batch; a packer never drops a graph (graphs that do not
fit a budget at all are the loader's business: see ``oversize``).

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

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .format import store_name

__all__ = ["GraphSizes", "graph_sizes", "pack_greedy", "pack_histogram", "plan_epoch",
           "plan_efficiency", "find_oversize", "slot_dims", "PACKERS"]

Plan = List[List[int]]


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
    from ._stored import stored_of, stored_sizes
    from ._view import as_graphs, check_graph_item

    stored = stored_of(dataset) if transform is None else None
    m = stored_sizes(stored) if stored is not None else None
    if m is not None:  # an InMemoryDataset: its slices, no graph read
        return GraphSizes(m)
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
            check_graph_item(d, i)
            # look the stores up, never d[t]: that would add an empty store to
            # the user's graph when it lacks the type
            nodes, edges = d._node_store_dict, d._edge_store_dict
            for j, t in enumerate(nts):
                m[i, j] = (nodes[t].num_nodes or 0) if t in nodes else 0
            for j, t in enumerate(ets):
                m[i, len(nts) + j] = edges[t].num_edges if t in edges else 0
        return GraphSizes(m, nts, tuple(_edge_type_name(e) for e in ets))
    m = np.zeros((n, 2), dtype=np.int64)
    for i in range(n):
        d = first if i == 0 else dataset[i]
        check_graph_item(d, i)
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
    """Indices of graphs that fit no batch of ``budget`` (sorted)."""
    cap, gcap = _capacity(sizes, budget)
    if gcap < 1:
        return np.arange(sizes.num_graphs)
    return np.nonzero(np.any(sizes.matrix > cap[None, :], axis=1))[0]


# --------------------------------------------------------------------- greedy
def pack_greedy(matrix: np.ndarray, order: Sequence[int], cap: np.ndarray, graph_cap: int,
                open_batches: int = 8) -> Plan:
    """Streaming first-fit over a window of ``open_batches`` open batches.

    ``order`` gives the dataset indices in arrival order; every one of them
    must fit an empty batch.  Returns the plan in emission order.
    """
    if open_batches < 1:
        raise ValueError("open_batches must be >= 1")
    if len(cap) <= 3:  # homogeneous graphs (nodes, edges, slot weight): the fast loop
        return _pack_greedy3(matrix, order, cap, graph_cap, open_batches)
    cap_t = tuple(int(c) for c in cap)
    rows = matrix.tolist()
    plan: Plan = []
    # open bins: [remaining tuple as list, members]
    bins: List[List[Any]] = []
    for i in order:
        i = int(i)
        s = rows[i]
        placed = False
        for b in bins:
            rem = b[0]
            if all(x <= r for x, r in zip(s, rem)):
                for d in range(len(cap_t)):
                    rem[d] -= s[d]
                b[1].append(i)
                if len(b[1]) >= graph_cap:
                    bins.remove(b)
                    plan.append(b[1])
                placed = True
                break
        if placed:
            continue
        if any(x > c for x, c in zip(s, cap_t)):
            raise ValueError(f"graph {i} with sizes {s} does not fit capacity {list(cap_t)}")
        b = [[c - x for c, x in zip(cap_t, s)], [i]]
        if graph_cap <= 1:
            plan.append(b[1])
            continue
        if len(bins) >= open_batches:
            plan.append(bins.pop(0)[1])
        bins.append(b)
    plan.extend(b[1] for b in bins)
    return plan


def _pack_greedy3(matrix: np.ndarray, order: Sequence[int], cap: np.ndarray, graph_cap: int,
                  open_batches: int) -> Plan:
    """:func:`pack_greedy` for at most 3 dims, unrolled (a million graphs are
    planned in about a second): the same plan, dim by dim compared with
    local names instead of generic loops over the dims."""
    D = len(cap)
    pad = 3 - D  # missing dims: size 0, capacity 0 (always fit)
    m3 = np.concatenate([matrix, np.zeros((matrix.shape[0], pad), np.int64)], axis=1) \
        if pad else matrix
    order = np.asarray(order, dtype=np.int64).reshape(-1)
    c0, c1, c2 = [int(c) for c in cap] + [0] * pad
    plan: Plan = []
    bins: List[List[Any]] = []  # [remaining 0, 1, 2, members]
    for i, (s0, s1, s2) in zip(order.tolist(), m3[order].tolist()):
        for b in bins:
            if s0 <= b[0] and s1 <= b[1] and s2 <= b[2]:
                b[0] -= s0
                b[1] -= s1
                b[2] -= s2
                members = b[3]
                members.append(i)
                if len(members) >= graph_cap:
                    bins.remove(b)
                    plan.append(members)
                break
        else:
            if s0 > c0 or s1 > c1 or s2 > c2:
                raise ValueError(f"graph {i} with sizes {[s0, s1, s2][:D]} does not fit capacity "
                                 f"{[int(c) for c in cap]}")
            if graph_cap <= 1:
                plan.append([i])
                continue
            if len(bins) >= open_batches:
                plan.append(bins.pop(0)[3])
            bins.append([c0 - s0, c1 - s1, c2 - s2, [i]])
    plan.extend(b[3] for b in bins)
    return plan


# ------------------------------------------------------------------ histogram
def pack_histogram(matrix: np.ndarray, indices: Sequence[int], cap: np.ndarray, graph_cap: int,
                   rng: Optional[np.random.Generator] = None, max_tries: int = 64) -> Plan:
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
    indices = np.asarray(list(indices) if not isinstance(indices, np.ndarray) else indices,
                         dtype=np.int64)
    if indices.size == 0:
        return []
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
    return pack_greedy(matrix, indices, cap, graph_cap, open_batches=16)


def _lpt(keys, counts, gorder, by_group, starts, indices, cap2, capf, nb) -> Optional[Plan]:
    used = np.zeros((nb, cap2.shape[0]), dtype=np.int64)
    load = np.zeros(nb, dtype=np.float64)  # max relative load of each batch
    members: List[List[int]] = [[] for _ in range(nb)]
    for g in gorder:
        s = keys[g]
        grp = indices[by_group[starts[g]:starts[g + 1]]].tolist()
        for i in grp:
            new = used + s[None, :]
            fits = np.all(new <= cap2[None, :], axis=1)
            if not fits.any():
                return None
            after = np.max(new / capf[None, :], axis=1)
            after[~fits] = np.inf
            j = int(np.argmin(after))
            used[j] += s
            load[j] = after[j]
            members[j].append(i)
    return [m for m in members if m]


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
    ``N - G`` so that none is capped).
    """
    cap, _ = budget.capacity()
    nd = sizes.num_node_dims
    jcap = cap[:nd] + 1 - budget.graphs  # N - G per node dim
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
    (``fill_slots=False``: not, as before issue 15; only to probe a graph cap).
    """
    sizes = graph_sizes(sizes)
    cap, gcap = _capacity(sizes, budget)
    if indices is None:
        indices = np.arange(sizes.num_graphs)
    indices = np.asarray(list(indices) if not isinstance(indices, np.ndarray) else indices,
                         dtype=np.int64)
    # node and edge slots, plus one padding node for every padding graph slot
    w, jcap = slot_dims(sizes, budget) if fill_slots else (np.zeros((sizes.num_graphs, 0),
                                                                      np.int64), cap[:0])
    matrix = np.concatenate([sizes.matrix, w], axis=1)
    cap = np.concatenate([cap, jcap]).astype(np.int64)
    rng = np.random.default_rng([int(seed), int(epoch)]) if shuffle else None
    if packer == "greedy":
        order = indices[rng.permutation(indices.size)] if rng is not None else indices
        return pack_greedy(matrix, order, cap, gcap, open_batches=open_batches)
    if packer == "histogram":
        plan = pack_histogram(matrix, indices, cap, gcap, rng=rng)
        if rng is not None:
            plan = [plan[i] for i in rng.permutation(len(plan))]
            plan = [[b[i] for i in rng.permutation(len(b))] for b in plan]
        return plan
    raise ValueError(f"unknown packer {packer!r}; choose one of {PACKERS}")


def plan_efficiency(plan: Plan, sizes: GraphSizes, budget, extra_batches: int = 0) -> Dict[str, Any]:
    """Real slots / budget slots over a plan (plus ``extra_batches`` fully
    padded batches).  Budget slots include the reserved padding node/graph."""
    sizes = graph_sizes(sizes)
    nb = len(plan) + int(extra_batches)
    nd = sizes.num_node_dims
    flat = [i for b in plan for i in b]
    tot = sizes.matrix[flat].sum(axis=0) if flat else np.zeros(sizes.matrix.shape[1], np.int64)
    if budget.is_hetero:
        node_slots = sum(budget.nodes.values())
        edge_slots = sum(budget.edges.values())
    else:
        node_slots, edge_slots = budget.nodes, budget.edges
    real_nodes = int(tot[:nd].sum())
    real_edges = int(tot[nd:].sum())
    return {
        "batches": nb,
        "graphs": len(flat),
        "real_nodes": real_nodes,
        "real_edges": real_edges,
        "node_efficiency": real_nodes / max(1, nb * node_slots),
        "edge_efficiency": real_edges / max(1, nb * edge_slots) if edge_slots else 1.0,
        "graph_efficiency": len(flat) / max(1, nb * budget.graphs),
        "mean_graphs_per_batch": len(flat) / max(1, nb),
    }
