"""The rungs of a ladder (several budgets in one artifact, ``docs/deploy.md``): the
default budgets ``ladder=True`` fits on the data, the ones ``export`` is given, and each
rung's check batches (padded dicts in the rung's shapes)."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

from torch import Tensor

from ..batching import Budget, Collator
from ..contract import misfit
from .batches import data_of

__all__ = ["LADDER_GRAPHS", "Ladder", "ladder_budgets", "ladder_of", "rung_batches",
           "served_size"]


#: graphs per call of the rungs ``ladder=True`` fits on the data: one request graph
#: (a single molecule), a small request, and the bulk of a large one
LADDER_GRAPHS = (1, 16, 256)


class Ladder(list):
    """The rungs ``export`` compiles (a list of ``Budget``), with ``served``: the largest
    single graph served, ``(max_nodes, max_edges)``, where they were given (``None``:
    what the rungs take) and ``top``: the rung added for it."""

    served: Optional[Tuple[int, int]] = None
    top: Optional[Budget] = None


def served_size(data: Sequence[Any], max_nodes: Optional[int], max_edges: Optional[int]
                ) -> Tuple[int, int]:
    """``(max_nodes, max_edges)`` with the one not given derived from the data's densest
    graph: ``max_edges = ceil(max_nodes * r)``, ``r`` the most edges per node among the
    data's first 4096 graphs (at least 1); ``max_nodes = ceil(max_edges * q)``, ``q``
    the most nodes per edge among those with edges (at least 1)."""
    if max_nodes is not None and max_edges is not None:
        return int(max_nodes), int(max_edges)
    graphs = [data[i] for i in range(min(len(data), 4096))]
    if max_edges is None:
        r = max([g.num_edges / g.num_nodes for g in graphs if g.num_nodes] + [1.0])
        return int(max_nodes), max(int(math.ceil(int(max_nodes) * r - 1e-9)), 1)
    q = max([g.num_nodes / g.num_edges for g in graphs if g.num_edges] + [1.0])
    return max(int(math.ceil(int(max_edges) * q - 1e-9)), 1), int(max_edges)


def _top_rung(max_nodes: int, max_edges: int) -> Budget:
    """The smallest budget that takes one graph of ``max_nodes`` / ``max_edges``."""
    nodes, edges = int(max_nodes) + 2, max(int(max_edges), 1)
    while edges in (nodes, 2):  # a budget's three counts must differ (dims are told by size)
        edges += 1
    return Budget(nodes=nodes, edges=edges, graphs=2)


def ladder_budgets(data: Sequence[Any], max_nodes: Optional[int] = None,
                   max_edges: Optional[int] = None,
                   graphs_per_call: Sequence[int] = LADDER_GRAPHS) -> List[Budget]:
    """The default rungs of ``export(..., ladder=True)``: ``Budget.fit(data, k)`` for each
    ``k`` of ``graphs_per_call`` the data has graphs for (``fit`` never sizes one below
    the data's largest graph), plus a top rung for one graph of ``max_nodes`` nodes and
    ``max_edges`` edges when either is given (the largest graph a server must take);
    duplicates dropped, cheapest first."""
    rungs = [Budget.fit(data, int(k)) for k in graphs_per_call if int(k) <= len(data)]
    if max_nodes is not None or max_edges is not None:
        rungs.append(_top_rung(max_nodes or 1, max_edges or 1))
    out: List[Budget] = []
    for b in sorted(rungs, key=lambda b: (b.nodes + b.edges, b.graphs)):
        if all((b.nodes, b.edges, b.graphs) != (o.nodes, o.edges, o.graphs) for o in out):
            out.append(b)
    return out


def ladder_of(source: Any, example: Optional[Sequence[Any]], ladder: Any,
              max_nodes: Optional[int], max_edges: Optional[int]) -> Ladder:
    """The rungs ``export`` compiles (``[]``: one budget, today's artifact); with
    ``max_nodes`` / ``max_edges`` (either derived from the other: :func:`served_size`),
    a top rung for one such graph and ``served`` set."""
    sized = max_nodes is not None or max_edges is not None
    if ladder is None or ladder is False:
        if sized:
            raise ValueError("max_nodes= / max_edges= size the top rung of a ladder: pass "
                             "ladder=True with them (or fit the one budget on such graphs)")
        return Ladder()
    for name, v in (("max_nodes", max_nodes), ("max_edges", max_edges)):
        if v is not None and int(v) < 1:
            raise ValueError(f"{name}={v}: give the largest graph's count (1 or more)")
    served = served_size(data_of(source, example), max_nodes, max_edges) if sized else None
    if ladder is True:
        budgets = ladder_budgets(data_of(source, example), *(served or (None, None)))
    else:
        budgets = [b if isinstance(b, Budget) else Budget.from_dict(b) for b in ladder]
        if served:
            budgets.append(_top_rung(*served))
    if not budgets or any(b.is_hetero for b in budgets):
        raise ValueError(f"ladder={ladder!r}: give one or more homogeneous Budgets "
                         f"(or ladder=True)")
    out = Ladder(budgets)
    if served:
        out.served, out.top = served, _top_rung(*served)
    return out


def rung_batches(data: Sequence[Any], b: Budget, scan: int = 2048) -> List[Dict[str, Tensor]]:
    """Check batches of rung ``b``: the data's first graphs that fit one call, and the
    largest graph (of the first ``scan``) that fits alone."""
    graphs = [data[i] for i in range(min(len(data), scan))]
    N, E, G = int(b.nodes), int(b.edges), int(b.graphs)
    fits = [g for g in graphs if not misfit(1, g.num_nodes, g.num_edges, G, N, E)]
    if not fits:
        raise ValueError(f"rung nodes={b.nodes}, edges={b.edges}, graphs={b.graphs} holds "
                         f"none of the data's graphs: its check needs one; give a larger rung")
    pick, n, e = [], 0, 0
    for g in fits:
        if misfit(len(pick) + 1, n + g.num_nodes, e + g.num_edges, G, N, E):
            break
        pick.append(g)
        n, e = n + g.num_nodes, e + g.num_edges
    big = max(fits, key=lambda g: (g.num_nodes, g.num_edges))
    return [Collator(p, b, warn=False).collate_indices(range(len(p))) for p in (pick, [big])]
