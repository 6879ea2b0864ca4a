"""Static ``knn``, ``knn_graph``, ``radius`` and ``radius_graph`` for wrapped forwards.

PyG's graph construction (``torch_geometric.nn.knn`` & co., backed by
``torch_cluster`` or ``pyg-lib``) returns as many edges as there are
neighbours: a data-dependent count, and C++ kernels no compiler can trace.
SchNet, DimeNet++, ``DynamicEdgeConv`` and point-cloud models call them in
forward.

Inside a wrapped forward (a frame of :mod:`graph_adapter.nn.static` is active)
:func:`graph_adapter.nn.static.install` substitutes these functions with dense,
static versions (no ``torch_cluster`` needed):

* distances between every query row ``y[i]`` and every candidate ``x[j]``
  (``[M, N]``, under masks: same graph by the batch vectors, real nodes only
  when the tensor is node-level, no self pair for the ``*_graph`` versions
  unless ``loop=True``);
* a fixed number of slots per query row: ``k`` for ``knn``,
  ``max_num_neighbors`` for ``radius`` (``None``: all ``N`` candidates);
  the nearest valid candidates fill the slots (``topk``);
* slots left empty become padding edges: ``(M - 1, N - 1)`` for
  ``knn``/``radius`` (``[2, M * k]``: query row, candidate row) and the
  self-loop ``(N - 1, N - 1)`` on the last node for the graph versions (a
  padding node in the padded format: the padding convention's own padding
  edge). So ``radius_graph`` returns ``[2, N * max_num_neighbors]`` edges.

Differences from ``torch_cluster``: when more than ``max_num_neighbors``
candidates are within ``r``, these versions keep the nearest ones
(``torch_cluster``'s CPU kernel keeps an arbitrary subset); pick a
``max_num_neighbors`` no graph exceeds to get the same edges. The edge order
differs (grouped by query row, nearest first). Outside a wrapped forward the
originals run.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple

import torch
from torch import Tensor

import torch_geometric.nn.pool as _pool

from . import static
from ..format import NODE_MASK

__all__ = ["ORIGINALS", "REPLACEMENTS", "neighbors"]

ORIGINALS: Dict[str, Callable] = {name: getattr(_pool, name)
                                  for name in ("knn", "knn_graph", "radius", "radius_graph")}


def _real_rows(frame: Dict, t: Tensor) -> Optional[Tensor]:
    """The node mask when ``t`` is node-level (``N`` rows) in a homogeneous batch."""
    mask = frame.get(NODE_MASK)
    if mask is not None and t.size(0) == mask.size(0):
        return mask.bool()
    return None


def neighbors(x: Tensor, y: Tensor, slots: int, batch_x: Optional[Tensor] = None,
              batch_y: Optional[Tensor] = None, r: Optional[float] = None,
              exclude_self: bool = False, cosine: bool = False,
              mask_x: Optional[Tensor] = None, mask_y: Optional[Tensor] = None
              ) -> Tuple[Tensor, Tensor, Tensor]:
    """The ``slots`` nearest valid candidates in ``x`` of each row of ``y``.

    Args:
        x: ``[N, D]`` candidates; y: ``[M, D]`` queries.
        slots: neighbours kept per query row (static).
        batch_x, batch_y: graph of each row; ``None``: one graph.
        r: keep candidates at distance ``<= r`` only.
        exclude_self: drop the pair ``(i, i)`` (``x`` and ``y`` are the same rows).
        cosine: cosine distance instead of euclidean.
        mask_x, mask_y: real rows (``None``: all).

    Returns:
        ``(query, candidate, valid)``, each ``[M * slots]``: the query row, the
        candidate row and whether the slot holds a real neighbour (invalid
        slots point at ``(M - 1, N - 1)``).
    """
    m, n = y.size(0), x.size(0)
    xd, yd = x.detach(), y.detach()
    if cosine:
        dist = 1 - torch.nn.functional.normalize(yd, dim=-1) @ torch.nn.functional.normalize(xd, dim=-1).t()
    else:
        dist = (yd.unsqueeze(1) - xd.unsqueeze(0)).pow(2).sum(-1)
    valid = torch.ones(m, n, dtype=torch.bool, device=x.device)
    if batch_x is not None or batch_y is not None:
        bx = batch_x if batch_x is not None else x.new_zeros(n, dtype=torch.long)
        by = batch_y if batch_y is not None else y.new_zeros(m, dtype=torch.long)
        valid = valid & (by.unsqueeze(1) == bx.unsqueeze(0))
    if mask_x is not None:
        valid = valid & mask_x.unsqueeze(0)
    if mask_y is not None:
        valid = valid & mask_y.unsqueeze(1)
    if r is not None:
        valid = valid & (dist <= r * r if not cosine else dist <= r)
    if exclude_self:
        valid = valid & ~torch.eye(m, n, dtype=torch.bool, device=x.device)
    score = torch.where(valid, dist, torch.full_like(dist, float("inf")))
    take = min(slots, n)
    best, cand = torch.topk(score, take, dim=1, largest=False)
    ok = torch.isfinite(best)
    if take < slots:  # fewer candidates than slots: the rest stay empty
        cand = torch.cat([cand, cand.new_zeros(m, slots - take)], dim=1)
        ok = torch.cat([ok, ok.new_zeros(m, slots - take)], dim=1)
    query = torch.arange(m, device=x.device).view(-1, 1).expand(m, slots)
    query = torch.where(ok, query, torch.full_like(query, m - 1)).reshape(-1)
    cand = torch.where(ok, cand, torch.full_like(cand, n - 1)).reshape(-1)
    return query, cand, ok.reshape(-1)


def _graph_edges(query: Tensor, cand: Tensor, valid: Tensor, n: int, flow: str) -> Tensor:
    """``[2, E]`` with empty slots as the self-loop on the last node."""
    trash = torch.full_like(query, n - 1)
    query = torch.where(valid, query, trash)
    cand = torch.where(valid, cand, trash)
    if flow == "source_to_target":
        return torch.stack([cand, query], dim=0)
    return torch.stack([query, cand], dim=0)


def knn(x: Tensor, y: Tensor, k: int, batch_x: Optional[Tensor] = None,
        batch_y: Optional[Tensor] = None, cosine: bool = False, num_workers: int = 1,
        batch_size: Optional[int] = None) -> Tensor:
    frame = static.current_frame()
    if frame is None:
        return ORIGINALS["knn"](x, y, k, batch_x, batch_y, cosine, num_workers, batch_size)
    query, cand, _ = neighbors(x, y, k, batch_x, batch_y, cosine=cosine,
                               mask_x=_real_rows(frame, x), mask_y=_real_rows(frame, y))
    return torch.stack([query, cand], dim=0)


def knn_graph(x: Tensor, k: int, batch: Optional[Tensor] = None, loop: bool = False,
              flow: str = "source_to_target", cosine: bool = False, num_workers: int = 1,
              batch_size: Optional[int] = None) -> Tensor:
    frame = static.current_frame()
    if frame is None:
        return ORIGINALS["knn_graph"](x, k, batch, loop, flow, cosine, num_workers, batch_size)
    mask = _real_rows(frame, x)
    query, cand, valid = neighbors(x, x, k, batch, batch, exclude_self=not loop, cosine=cosine,
                                   mask_x=mask, mask_y=mask)
    return _graph_edges(query, cand, valid, x.size(0), flow)


def radius(x: Tensor, y: Tensor, r: float, batch_x: Optional[Tensor] = None,
           batch_y: Optional[Tensor] = None, max_num_neighbors: Optional[int] = 32,
           num_workers: int = 1, batch_size: Optional[int] = None) -> Tensor:
    frame = static.current_frame()
    if frame is None:
        return ORIGINALS["radius"](x, y, r, batch_x, batch_y, max_num_neighbors, num_workers,
                                   batch_size)
    slots = x.size(0) if max_num_neighbors is None else max_num_neighbors
    query, cand, _ = neighbors(x, y, slots, batch_x, batch_y, r=r,
                               mask_x=_real_rows(frame, x), mask_y=_real_rows(frame, y))
    return torch.stack([query, cand], dim=0)


def radius_graph(x: Tensor, r: float, batch: Optional[Tensor] = None, loop: bool = False,
                 max_num_neighbors: Optional[int] = 32, flow: str = "source_to_target",
                 num_workers: int = 1, batch_size: Optional[int] = None) -> Tensor:
    frame = static.current_frame()
    if frame is None:
        return ORIGINALS["radius_graph"](x, r, batch, loop, max_num_neighbors, flow, num_workers,
                                         batch_size)
    mask = _real_rows(frame, x)
    slots = x.size(0) if max_num_neighbors is None else max_num_neighbors
    query, cand, valid = neighbors(x, x, slots, batch, batch, r=r, exclude_self=not loop,
                                   mask_x=mask, mask_y=mask)
    return _graph_edges(query, cand, valid, x.size(0), flow)


REPLACEMENTS: Dict[str, Callable] = {
    "knn": knn, "knn_graph": knn_graph, "radius": radius, "radius_graph": radius_graph,
}
for _name, _fn in REPLACEMENTS.items():
    _fn.__wrapped__ = ORIGINALS[_name]  # type: ignore[attr-defined]

