"""Fixed-size budgets for padded batches.

A :class:`Budget` fixes the shape of every batch: ``nodes`` node rows,
``edges`` edge columns and ``graphs`` graph slots.  **The reserved padding
nodes and padding graph slot are part of the budget**: a batch holds at most
``nodes - 2`` real nodes (per node type) and at most ``graphs - 1`` real
graphs, because every batch keeps at least :data:`RESERVED_NODES` = 2 padding
nodes and one padding graph slot (the last one, ``graphs - 1``, which owns the
padding nodes).  Two, not one: the padding edges point at the last node
``N - 1``, and the static ``remove_self_loops`` moves a self-loop onto a
padding edge ``(P, N - 1)`` between two *different* padding nodes, which is
no loop only when there are two (``ClusterGCNConv`` counts exactly ``N``
loops after ``add_self_loops``; ``docs/dev/FORMAT.md``).  Edges need no
reservation: a batch may hold exactly ``edges`` real edges, in which case it
carries no padding edge.

Budgets can be written by hand, or learned from data:

* :meth:`Budget.tight` -- every batch of ``graphs_per_batch`` graphs fits, whatever
  graphs it holds (sum of the largest sizes);
* :meth:`Budget.fit` -- the tightest budget that holds ``success_ratio`` of random
  batches of ``graphs_per_batch`` graphs (TF-GNN's fit-or-skip idea), except that
  nothing is skipped: the packer moves what does not fit to a later batch.  The
  graph count becomes a cap so the packer can fill the node and edge slots.

Budgets are serialised as JSON (:meth:`to_json` / :meth:`from_json`), never
pickled.

Heterogeneous budgets give ``nodes`` per node type and ``edges`` per edge type
(edge types written ``"src__rel__dst"``, as in the flat-dict keys).  So do the
budgets of graphs with several node sets in one store (PyG's ``PairData``, a
bipartite ``edge_index``): ``nodes`` per node set, ``edges`` per edge set,
named as :func:`graph_adapter.format.node_sets` names them
(``{"x_s": 40, "x_t": 36}``, ``{"edge_index_s": 70, "edge_index_t": 60}``;
``""`` the store's own nodes or edges; ``graph_adapter/batching/_sets.py``).

**No two row counts of a budget are equal** (``N``, ``E``, ``G`` pairwise
different; hetero: every node type's, every edge type's and the graph count).
Inside ``ipu_wrap`` the masked layers (the masked BatchNorm) find the mask of a
tensor by its row count alone (:func:`graph_adapter.format.keys.mask_of_rows`), so
with ``N == E`` an edge-level BatchNorm would get the node mask and compute
its statistics over the wrong rows, without an error.  ``Budget(...)`` (and so
``from_json``) refuses such a tie with a ``ValueError`` naming both counts and
the fix (one more padding slot, which changes no result); :meth:`Budget.fit`
and :meth:`Budget.tight` never produce one (they add a row where two would be
equal).  Hetero budgets follow the same rule across types, same level
included: :func:`~graph_adapter.format.keys.mask_of_rows` takes the *first* mask of
a level whose length matches, so two node types with as many rows each would
give one type's BatchNorm the other type's mask.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union

import numpy as np

from ..format import RESERVED_NODES, SEP, pick_level, store_name

__all__ = ["Budget", "RESERVED_NODES"]  # RESERVED_NODES: a format rule, re-exported here

Count = Union[int, Mapping[str, int]]


def _norm_count(name: str, value: Any) -> Any:
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if isinstance(k, tuple):
                k = store_name(k)
            if not isinstance(k, str) or SEP in k:
                raise ValueError(f"Budget.{name}: bad type name {k!r}")
            out[k] = _norm_count(f"{name}[{k!r}]", v)
        return dict(sorted(out.items()))
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"Budget.{name} must be an int (or a dict of ints), got {value!r}")
    value = int(value)
    if value < 0:
        raise ValueError(f"Budget.{name} must be >= 0, got {value}")
    return value


@dataclass(frozen=True)
class Budget:
    """Shape of every padded batch.

    Args:
        nodes: node rows per batch (int), or a dict ``{node_type: rows}`` for
            hetero graphs (``{node_set: rows}`` for several node sets in one
            store, PyG's ``PairData``: ``{"x_s": 40, "x_t": 36}``).  Includes two reserved padding nodes (per node
            type), so at most ``nodes - 2`` real nodes fit; at least 2.
        edges: edge columns per batch (int), or ``{"src__rel__dst": cols}``
            (``{edge_set: cols}``, named by its index key: ``"edge_index_s"``).
            No reservation: up to ``edges`` real edges fit; when a batch is
            exactly full it has no padding edge.
        graphs: graph slots per batch, including the reserved padding graph
            slot ``graphs - 1``: at most ``graphs - 1`` real graphs fit.
            No two of ``nodes``, ``edges`` and ``graphs`` (hetero: of all the
            per-type counts and ``graphs``) may be equal: a row count must name
            its level (``ValueError`` otherwise, saying which count to grow).
        report: optional information about how the budget was learned
            (expected efficiency, ...); not part of equality.

    Raises:
        TypeError: a count that is not an int (or a dict of ints).
        ValueError: a negative count, ``nodes < 2``, ``graphs < 2``, fewer nodes than
            graph slots, int nodes with dict edges (or the reverse), or two equal row
            counts (the message says which to grow).

    Example:
        ```python
        from torch_geometric.datasets import FakeDataset

        from graph_adapter import Budget

        graphs = FakeDataset(num_graphs=20, avg_num_nodes=10)
        budget = Budget.tight(graphs, graphs_per_batch=4)  # any 4 of these graphs fit
        assert budget == Budget.from_json(budget.to_json())
        print(Budget(nodes=64, edges=128, graphs=9))  # 62 real nodes, 8 real graphs
        ```
    """

    nodes: Count
    edges: Count
    graphs: int
    report: Optional[Dict[str, Any]] = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        self._validate(check_ties=True)

    @classmethod
    def _unchecked(cls, nodes: Count, edges: Count, graphs: int,
                   report: Optional[Dict[str, Any]] = None) -> "Budget":
        """A budget whose row counts may tie: :meth:`fit`'s and :meth:`tight`'s
        intermediate budgets only (a packing probe, the counts before
        :func:`_distinct_levels`); never returned to a user."""
        b = object.__new__(cls)
        for name, v in (("nodes", nodes), ("edges", edges), ("graphs", graphs),
                        ("report", report)):
            object.__setattr__(b, name, v)
        cls._validate(b, check_ties=False)
        return b

    def _validate(self, check_ties: bool) -> None:
        nodes = _norm_count("nodes", self.nodes)
        edges = _norm_count("edges", self.edges)
        graphs = _norm_count("graphs", self.graphs)
        if isinstance(nodes, dict) != isinstance(edges, dict):
            raise ValueError("Budget: nodes and edges must both be ints (homogeneous) "
                             "or both be dicts (heterogeneous)")
        if graphs < 2:
            raise ValueError(f"Budget.graphs must be >= 2 (one real graph slot plus the "
                             f"reserved padding slot), got {graphs}")
        for t, n in (nodes.items() if isinstance(nodes, dict) else [(None, nodes)]):
            if n < RESERVED_NODES:
                where = "" if t is None else f"[{t!r}]"
                raise ValueError(
                    f"Budget.nodes{where} must be >= {RESERVED_NODES}: every batch keeps "
                    f"{RESERVED_NODES} padding nodes (at most nodes - {RESERVED_NODES} real "
                    f"nodes fit), got {n}; Budget.fit / Budget.tight size it from the data")
        if check_ties and not isinstance(nodes, dict) and nodes < graphs:
            # a fully padded batch spreads N padding nodes over G slots
            raise ValueError(
                f"Budget(nodes={nodes}, graphs={graphs}): fewer node rows than graph slots "
                f"leaves a padding graph slot without a node, and docs/dev/FORMAT.md "
                f"promises no empty padding graph slot (every per-graph op on padding rows "
                f"stays finite). Give nodes >= graphs + (largest graph's nodes) - 1, e.g. "
                f"nodes={graphs + 1}, or fewer graph slots; Budget.fit / Budget.tight do it")
        if check_ties:
            _check_no_tie(nodes, edges, graphs)
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "edges", edges)
        object.__setattr__(self, "graphs", graphs)

    # ------------------------------------------------------------------ info
    @property
    def is_hetero(self) -> bool:
        return isinstance(self.nodes, dict)

    @property
    def max_real_nodes(self) -> Count:
        """Real nodes a batch holds at most: ``nodes - RESERVED_NODES`` (per type)."""
        if self.is_hetero:
            return {k: v - RESERVED_NODES for k, v in self.nodes.items()}
        return self.nodes - RESERVED_NODES

    @property
    def max_real_graphs(self) -> int:
        return self.graphs - 1

    def capacity(self) -> Tuple[np.ndarray, int]:
        """Real-slot capacity as a vector (node dims, then edge dims) and the
        real graph cap (``nodes - RESERVED_NODES``, ``edges``, ``graphs - 1``).
        Used by the packers and the collate."""
        if self.is_hetero:
            cap = [v - RESERVED_NODES for v in self.nodes.values()] + list(self.edges.values())
        else:
            cap = [self.nodes - RESERVED_NODES, self.edges]
        return np.asarray(cap, dtype=np.int64), self.graphs - 1

    def dims(self) -> Tuple[str, ...]:
        """Names of the capacity dims (matching :meth:`capacity`)."""
        if self.is_hetero:
            return tuple(self.nodes) + tuple(self.edges)
        return ("nodes", "edges")

    # ------------------------------------------------------------------ json
    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"nodes": self.nodes, "edges": self.edges, "graphs": self.graphs}
        if self.report is not None:
            d["report"] = self.report
        return d

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Budget":
        """The budget of :meth:`to_dict`'s dict, validated: unknown or missing
        fields and wrong types (``"64"`` for ``64``) are named errors."""
        if not isinstance(d, Mapping):
            raise TypeError(f"Budget.from_dict: expected a dict with keys 'nodes', 'edges', "
                            f"'graphs' (and optionally 'report'), got {type(d).__name__}")
        unknown = set(d) - {"nodes", "edges", "graphs", "report"}
        if unknown:
            raise ValueError(f"Budget.from_dict: unknown keys {sorted(unknown)}; a budget has "
                             f"'nodes', 'edges', 'graphs' and optionally 'report'")
        missing = [k for k in ("nodes", "edges", "graphs") if k not in d]
        if missing:
            raise ValueError(f"Budget.from_dict: missing keys {missing}; a budget has 'nodes', "
                             f"'edges' and 'graphs' (Budget.to_json writes all three)")
        report = d.get("report")
        if report is not None and not isinstance(report, Mapping):
            raise TypeError(f"Budget.from_dict: 'report' must be a dict or null, got "
                            f"{type(report).__name__}")
        return cls(nodes=d["nodes"], edges=d["edges"], graphs=d["graphs"],
                   report=None if report is None else dict(report))

    @classmethod
    def from_json(cls, s: str) -> "Budget":
        """The budget of :meth:`to_json`'s string, validated (see :meth:`from_dict`)."""
        if not isinstance(s, (str, bytes, bytearray)):
            raise TypeError(f"Budget.from_json: expected a JSON string, got {type(s).__name__}")
        try:
            d = json.loads(s)
        except json.JSONDecodeError as e:
            raise ValueError(f"Budget.from_json: not valid JSON ({e}); Budget.to_json writes "
                             f'e.g. {{"nodes": 64, "edges": 128, "graphs": 9}}') from None
        return cls.from_dict(d)

    # ------------------------------------------------------------ from data
    @classmethod
    def tight(cls, dataset, graphs_per_batch: int, *,
              transform: Optional[Callable[[Any], Any]] = None) -> "Budget":
        """The smallest budget in which *every* batch of ``graphs_per_batch``
        graphs of ``dataset`` fits: the sums of the ``graphs_per_batch``
        largest node and edge counts, plus the two reserved padding nodes and
        the padding graph slot.  With this budget any batching (fixed count, any order) fits.
        ``transform``: as :meth:`fit`'s.

        No two row counts of the result are equal (``N``, ``E``, ``G``; hetero:
        every node type's and edge type's count and ``G``): where the sums
        would tie, the node or edge count is nudged up by one (an extra
        padding slot is harmless), as ``Budget(...)`` requires."""
        from .packing import graph_sizes

        k = _check_k(graphs_per_batch)
        sizes = graph_sizes(dataset, transform)
        if sizes.num_graphs == 0:
            raise ValueError("Budget.tight: empty dataset")
        k = min(k, sizes.num_graphs)
        top = -np.sort(-sizes.matrix, axis=0)[:k].sum(axis=0)
        # any k graphs leave a padding node for every padding slot (packing.slot_dims:
        # their n_i - 1 sum to at most N - G), also where some graphs have no node
        nt = sizes.num_node_dims
        slots = -np.sort(-np.maximum(sizes.matrix[:, :nt] - 1, 0), axis=0)[:k].sum(axis=0)
        top[:nt] = np.maximum(top[:nt], slots + k + 1 - RESERVED_NODES)
        b = cls._from_vector(sizes, _room_for_slots(top, sizes, k + 1, 1), graphs=k + 1,
                             report={"method": "tight", "graphs_per_batch": k})
        # the sums may tie (N == E, E == G, ...): one more row where they do
        return _distinct_levels(b, 1)

    @classmethod
    def fit(cls, dataset, graphs_per_batch: int, success_ratio: float = 0.99, *,
            num_samples: int = 2000, seed: int = 0, packer: str = "greedy",
            round_to: int = 1, graph_cap: Optional[int] = None,
            transform: Optional[Callable[[Any], Any]] = None,
            fill_to_brim: bool = False) -> "Budget":
        """A budget whose batches hold ``graphs_per_batch`` real graphs on
        average, as ``DataLoader(batch_size=graphs_per_batch)``'s do.

        The packer fills every batch by nodes and edges, so the number of
        graphs a batch holds follows the node and edge budget, not the graph
        cap.  ``fit`` therefore sizes the node and edge budget for the *mean*
        graph count the packer achieves: it plans one shuffled epoch with
        ``packer`` for a scale of ``graphs_per_batch`` x the mean graph size
        and searches the scale (bisection) until the plan's mean real graphs
        a batch is ``graphs_per_batch`` (so an epoch has as many optimizer
        steps as ``DataLoader``'s ``ceil(n / k)``, within about 2%).  Node
        fill is what greedy packing gives (about 97-99% on molecules).  The
        budget is never smaller than the largest single graph, so every graph
        fits.  The graph count is a cap (``graph_cap`` real graphs, default:
        the most graphs the packer put in one batch when run without a cap in
        random order, or ``1.25 k`` where that gives the higher node fill at
        the same mean, plus one reserved slot; where graphs are so small that
        one node more or less moves the mean by over 1%, a cap of ``k`` or
        ``k + 1`` binds instead, as ``DataLoader``'s ``batch_size`` does).

        ``fill_to_brim=True`` keeps the older sizing: node and edge
        budgets are the ``success_ratio`` quantiles of the sums of
        ``num_samples`` random batches of ``graphs_per_batch`` graphs, and the
        packer then fills those to the brim, so batches hold *more* than
        ``graphs_per_batch`` graphs on average (73.6 for 64 on NCI-5k) and an
        epoch has fewer steps.  ``success_ratio`` only matters there
        (``report["sampled_fit_ratio"]`` is reported for both).

        The expected figures (one epoch packed with ``packer``) are in
        ``budget.report``: ``node_efficiency``, ``edge_efficiency``,
        ``graph_efficiency``, ``batches`` (= ``steps_per_epoch``),
        ``mean_graphs_per_batch``, and ``dataloader_steps_per_epoch``
        (``ceil(n / k)``) beside them.
        ``round_to`` rounds node and edge budgets up to a multiple.  Above
        200,000 graphs the graph cap and the efficiency are those of a random
        sample of 200,000 graphs (``report["planned_graphs"]``).

        No two row counts of the result are equal (``N``, ``E``, ``G``; hetero:
        every node type's and edge type's count and ``G``): where two would
        tie, the node or edge count is nudged up by one (by ``round_to`` when
        rounding; an extra padding slot is harmless), so a tensor's row count
        names its level without a guess (``unpad`` without a schema, the
        masked BatchNorm), as ``Budget(...)`` requires.

        ``transform``: a function from a dataset item to a ``Data`` /
        ``HeteroData`` (graphium's items are dicts), as ``FixedSizeLoader``'s.
        The dataset's graphs are only read, never changed.
        """
        from .packing import graph_sizes

        k = _check_k(graphs_per_batch)
        if not 0.0 < success_ratio <= 1.0:
            raise ValueError(f"success_ratio must be in (0, 1], got {success_ratio}")
        sizes = graph_sizes(dataset, transform)
        if sizes.num_graphs == 0:
            raise ValueError("Budget.fit: empty dataset")
        fit = _Fit(sizes, min(k, sizes.num_graphs), num_samples, seed, packer, round_to)
        budget, plan = fit.quantiles(success_ratio, graph_cap) if fill_to_brim else \
            fit.mean(graph_cap)
        report = fit.report(budget, plan, success_ratio, fill_to_brim)
        return cls(nodes=budget.nodes, edges=budget.edges, graphs=budget.graphs, report=report)

    @classmethod
    def _from_vector(cls, sizes, vec, graphs: int, report=None) -> "Budget":
        """Budget whose real-slot capacity is ``vec`` (node dims + the reserved).

        Unchecked: its counts may tie (an intermediate of :meth:`fit` /
        :meth:`tight`, which pass it through :func:`_distinct_levels`)."""
        vec = [int(v) for v in vec]
        r = RESERVED_NODES
        if sizes.node_types is None:
            return cls._unchecked(nodes=vec[0] + r, edges=vec[1], graphs=graphs, report=report)
        nt = len(sizes.node_types)
        return cls._unchecked(nodes={t: v + r for t, v in zip(sizes.node_types, vec[:nt])},
                              edges={t: v for t, v in zip(sizes.edge_types, vec[nt:])},
                              graphs=graphs, report=report)


#: Graph count above which Budget.fit plans a random sample of this many graphs.
_PLAN_GRAPHS = 200_000


class _Fit:
    """One :meth:`Budget.fit`: the sampled batch sums, the planned sample and
    the budget of given real capacities, shared by its two sizings (the mean
    graph count, the ``fill_to_brim`` quantiles) and its report."""

    def __init__(self, sizes, k: int, num_samples: int, seed: int, packer: str, round_to: int):
        self.sizes, self.k, self.seed, self.packer = sizes, k, seed, packer
        self.round_to, self.step = round_to, max(1, round_to)
        n = self.n = sizes.num_graphs
        rng = np.random.default_rng(seed)
        # random batches of k distinct graphs
        idx = np.stack([rng.choice(n, size=k, replace=False) for _ in range(num_samples)])
        self.sums = sizes.matrix[idx].sum(axis=1)  # [samples, D]
        # the plans (graph cap, expected efficiency) run on a random sample of a
        # large dataset: a million graphs would take seconds each
        self.sample = None if n <= _PLAN_GRAPHS else np.sort(rng.choice(n, _PLAN_GRAPHS,
                                                                        replace=False))
        self.planned = n if self.sample is None else int(self.sample.size)

    def make(self, q: np.ndarray, cap: Optional[int]):
        """``(budget, plan, q)`` for real capacities ``q`` (at least the largest
        graph's, rounded, room for the slots) and graph cap ``cap`` (``None``: the
        most graphs the greedy packer puts in a batch without a cap)."""
        from .packing import plan_epoch_flat

        sizes = self.sizes
        q = np.maximum(q, sizes.matrix.max(axis=0))
        if self.round_to > 1:
            q = _round_vec(q, sizes, self.round_to)
        if cap is None:
            probe = Budget._from_vector(sizes, q, graphs=self.n + 1)
            # the greedy packer in random order: the histogram packer without a
            # cap would pile the smallest graphs into one batch
            pp = plan_epoch_flat(sizes, probe, packer="greedy", shuffle=True, seed=self.seed,
                                 fill_slots=False, indices=self.sample)
            cap = max(self.k, int(pp.counts().max()))
        G = int(cap) + 1
        q = _room_for_slots(q, sizes, G, self.step)
        b = _distinct_levels(Budget._from_vector(sizes, q, graphs=G), self.step)
        plan = plan_epoch_flat(sizes, b, packer=self.packer, shuffle=True, seed=self.seed,
                               indices=self.sample)
        return b, plan, q

    def quantiles(self, success_ratio: float, graph_cap: Optional[int]):
        """``fill_to_brim=True``: the ``success_ratio`` quantiles of the sampled sums."""
        q = np.ceil(np.quantile(self.sums, success_ratio, axis=0, method="higher")
                    ).astype(np.int64)
        return self.make(q, graph_cap)[:2]

    def mean(self, graph_cap: Optional[int]):
        """The budget whose plan's mean real graphs a batch is ``DataLoader``'s."""
        # Two graph caps: the packer's own (probed) and 1.25 k. On molecules the
        # probe is the smaller (NCI-5k, k=64: 73); on sets of very uneven small
        # graphs it lets a batch take 13 graphs for k=8 and needs more node slots
        # for the same mean (37 graphs of 1-6 nodes: nodes 37, fill 70%; a cap of
        # 10: nodes 30, fill 86%, batches 10-5 instead of 13-1).
        k = self.k
        caps = [graph_cap] if graph_cap is not None else [None, int(np.ceil(1.25 * k))]
        fits = [_fit_mean(self.make, self.sizes, k, c, self.planned) for c in caps]
        target = self.planned / -(-self.planned // k)
        return min(fits, key=lambda f: _fit_rank(f, self.sizes, target))[:2]

    def report(self, budget: "Budget", plan, success_ratio: float,
               fill_to_brim: bool) -> Dict[str, Any]:
        """``Budget.report`` of a fitted budget (the efficiency of one planned epoch)."""
        from .packing import plan_efficiency

        eff = plan_efficiency(plan, self.sizes, budget)
        sample_fit = float(np.mean(np.all(self.sums <= budget.capacity()[0], axis=1)))
        report = {"method": "fit", "graphs_per_batch": self.k, "success_ratio": success_ratio,
                  "fill_to_brim": bool(fill_to_brim),
                  "sampled_fit_ratio": sample_fit, "packer": self.packer, "seed": self.seed,
                  **eff, "steps_per_epoch": eff["batches"],
                  "dataloader_steps_per_epoch": -(-self.planned // self.k)}
        if self.sample is not None:  # the efficiency figures are those of the sample
            report["planned_graphs"] = self.planned
        return report


def _fit_rank(fit, sizes, target: float) -> Tuple[bool, float]:
    """Order of :func:`_fit_mean` results: within 1% of the target mean graph count
    first, then the highest node fill."""
    from .packing import plan_efficiency

    b, plan, _ = fit
    mean = plan.flat.size / max(1, plan.num_batches)
    return abs(mean - target) > 0.01 * target, -plan_efficiency(plan, sizes, b)["node_efficiency"]


def _fit_mean(make, sizes, k: int, graph_cap: Optional[int], planned: int):
    """Bisection on the scale ``t`` of the real capacities ``t * k * mean
    size`` (per dim) until the packer's mean real graphs a batch is
    ``DataLoader(batch_size=k)``'s, ``planned / ceil(planned / k)`` (``k``
    but for the last, partial batch): the mean rises with the capacity (not
    strictly, packing is discrete), so the candidate closest to it among those
    tried is kept, ties to the smaller budget.  Capacities never exceed the
    sums of the ``k`` largest sizes (:meth:`Budget.tight`'s: any ``k`` graphs
    fit there).  Returns ``make``'s ``(budget, plan, q)``."""
    base = k * sizes.matrix.mean(axis=0)
    top = -np.sort(-sizes.matrix, axis=0)[:k].sum(axis=0)
    target = planned / -(-planned // k)
    k = target
    best = None

    def trial(t, cap=graph_cap):
        nonlocal best
        q = np.minimum(np.ceil(t * base).astype(np.int64), top)
        b, plan, q = make(q, cap)
        mean = plan.flat.size / max(1, plan.num_batches)
        key = (abs(mean - k), float(q.sum()))
        if best is None or key < best[0]:
            best = (key, (b, plan, q), t)
        return mean

    lo, hi = 0.5, 1.5
    while trial(hi) < k and hi < 64 and np.any(np.ceil(hi * base) < top):
        hi *= 2  # very uneven sizes: the largest graphs dominate
    for _ in range(18):
        mid = 0.5 * (lo + hi)
        m = trial(mid)
        if abs(m - k) <= 0.002 * k:
            break
        if m < k:
            lo = mid
        else:
            hi = mid
    if graph_cap is None and best[0][0] > 0.01 * k:
        # Tiny graphs: one node more or less moves the mean by several percent
        # (1-2 node graphs, k=16: 15.7 or 16.7, never 16), so let the graph cap
        # bind, as DataLoader's batch_size does, over a little more capacity.
        t0 = best[2]
        for cap in (int(np.ceil(k)), int(np.ceil(k)) + 1):
            for f in (1.0, 1.05, 1.1, 1.2, 1.4):
                trial(t0 * f, cap)
    return best[1]


def _room_for_slots(q: np.ndarray, sizes, graphs: int, step: int) -> np.ndarray:
    """Real node capacities ``q`` grown (by ``step``) until ``N - G`` holds the
    largest graph's ``n - 1``: then the packer can give every padding graph
    slot a padding node in every batch (``packing.slot_dims``)."""
    q = q.copy()
    nt = sizes.num_node_dims
    if sizes.num_graphs:
        # N - G >= max n - 1, with N = q + RESERVED_NODES
        need = np.maximum(sizes.matrix[:, :nt].max(axis=0) - 1, 0) + graphs - RESERVED_NODES
        while np.any(q[:nt] < need):
            q[:nt] = np.where(q[:nt] < need, q[:nt] + step, q[:nt])
    return q


def _nudged(nodes: Count, edges: Count, graphs: int, step: int) -> Tuple[Count, Count]:
    """``nodes`` and ``edges`` (ints, or dicts per type) grown by ``step``
    until no two counts (every node type, every edge type, the graph slots)
    are equal, in the order nodes then edges (graphs never moves: it is the
    packer's cap).  Growing a count only adds padding slots."""
    n = dict(nodes) if isinstance(nodes, Mapping) else {"": nodes}
    e = dict(edges) if isinstance(edges, Mapping) else {"": edges}
    taken = {graphs}
    for counts in (n, e):
        for t in counts:
            while counts[t] in taken:
                counts[t] += step
            taken.add(counts[t])
    if not isinstance(nodes, Mapping):
        return n[""], e[""]
    return n, e


def _distinct_levels(b: Budget, step: int) -> Budget:
    """``b`` with node and edge row counts grown by ``step`` until no two
    counts (every node type, every edge type, the graph slots) are equal, so
    that a row count names its level (``docs/dev/FORMAT.md``)."""
    nodes, edges = _nudged(b.nodes, b.edges, b.graphs, step)
    return Budget(nodes=nodes, edges=edges, graphs=b.graphs, report=b.report)


def _labelled_counts(nodes: Count, edges: Count, graphs: int):
    """``(label, level, type, count)`` of every row count: ``nodes`` /
    ``edges`` / ``graphs`` (type ``None``), hetero ``nodes['paper']`` /
    ``edges['a__r__b']`` (type ``'paper'`` / ``'a__r__b'``)."""
    if isinstance(nodes, Mapping):
        yield from ((f"nodes[{t!r}]", "node", t, v) for t, v in nodes.items())
        yield from ((f"edges[{t!r}]", "edge", t, v) for t, v in edges.items())
    else:
        yield "nodes", "node", None, nodes
        yield "edges", "edge", None, edges
    yield "graphs", "graph", None, graphs


def _check_no_tie(nodes: Count, edges: Count, graphs: int) -> None:
    """Raise if two row counts of a budget are equal (see the module docstring).

    Why every pair: ``format.mask_of_rows`` picks a tensor's mask by its row
    count alone, node before graph before edge, and the *first* mask of a
    level (hetero: of a node or edge type) whose length matches.  So a tie
    between levels gives the losing level's BatchNorm the winner's mask, and a
    tie between two types of one level gives one type the other type's mask:
    statistics over the wrong rows, no error.  (The masked BatchNorm raises
    on a node/graph tie itself, at trace time; here every tie fails at once.)
    """
    seen: Dict[int, Tuple[str, str, Optional[str]]] = {}
    for label, level, typ, v in _labelled_counts(nodes, edges, graphs):
        if v not in seen:
            seen[v] = (label, level, typ)
            continue
        first, first_level, first_typ = seen[v]
        fn, fe = _nudged(nodes, edges, graphs, 1)
        changed = [f"{a[0]}={b[3]}" for a, b in zip(_labelled_counts(nodes, edges, graphs),
                                                    _labelled_counts(fn, fe, graphs))
                   if a[3] != b[3]]
        if first_level == level:  # two node (or edge) types
            what = (f"a BatchNorm on the {level} features of one of {first_typ!r} and "
                    f"{typ!r} would get the other's mask")
        else:  # the level mask_of_rows would pick, and the one that loses
            win = pick_level((first_level, level))
            lose = level if win == first_level else first_level
            what = (f"{'an' if lose == 'edge' else 'a'} {lose}-level BatchNorm "
                    f"(nn.BatchNorm1d on {lose} rows) would get the {win} mask")
        raise ValueError(
            f"Budget: {first} and {label} are both {v}. Inside ipu_wrap, masked layers "
            f"find a tensor's level by its row count (format.mask_of_rows; "
            f"docs/dev/FORMAT.md#the-level-of-a-key), so {what} and compute its "
            f"statistics over the wrong rows, silently. Make every count differ, e.g. "
            f"{', '.join(changed)} (extra padding slots change no result): "
            f"Budget(nodes={fn!r}, edges={fe!r}, graphs={graphs}). "
            f"Budget.fit / Budget.tight never make such a tie.")


def _round_vec(q: np.ndarray, sizes, m: int) -> np.ndarray:
    # node dims are stored + RESERVED_NODES later: round that up to a multiple of m
    nt = 1 if sizes.node_types is None else len(sizes.node_types)
    r = RESERVED_NODES
    out = q.copy()
    out[:nt] = (-(-(q[:nt] + r) // m)) * m - r
    out[nt:] = (-(-q[nt:] // m)) * m
    return out


def _check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"graphs_per_batch must be a positive int, got {k!r}")
    return int(k)
