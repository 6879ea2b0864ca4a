"""Message passing over the ELL tables: gathers both ways, no atomics.

When a padded batch carries the ELL tables (``FixedSizeLoader(...,
layout="ell" | "hyb")``, keys ``in_slots`` / ``out_slots``, see
:mod:`graph_adapter.batching._layout` and ``docs/dev/FORMAT.md``), the two halves of
a message-passing step become gathers in the forward *and* the backward:

* :func:`ell_gather` ``(x, index, slots)``: ``x[index]`` (``x_j = x[src]``);
  its backward sums the gradient of each node's edges through ``slots``
  (``out_slots`` for ``index = edge_index[0]``) instead of an ``index_add``;
* :func:`ell_sum` ``(msg, index, slots)``: ``out[n] = sum(msg[slots[n]])``
  (``in_slots`` for ``index = edge_index[1]``: the sum over in-edges); its
  backward is ``grad[index]``.

The two are each other's transposes, so each one's backward is the other
(second derivatives work too). Under ``layout="hyb"`` the tables are narrow
and each sum adds the few edges past a node's width from a spill list
(``in_spill`` / ``out_spill``, ``[2, K]``) with one ``scatter_add`` of ``K``
rows (:func:`add_rows`; poptorch has a handler for it, none for
``index_add``): the gather stays a gather, the backward's atomics shrink from
``E`` rows to ``K``. The slot id ``E`` reads as a zero
row (a masked gather); padding edges are in no table, so the rows of
padding nodes differ from the ``index_add`` path (real rows are equal: padding
edges only touch padding nodes).

Routing, so that models stay unmodified: inside a wrapped forward whose
batch has the tables (a frame of :mod:`graph_adapter.nn.static` with ``ell``),
PyG's ``x_j`` / ``x_i`` gather (``MessagePassing._index_select``, told the
row by the ``_set_size`` call PyG makes just before it) uses :func:`ell_gather`
when its index is a row of the batch's ``edge_index`` and the layer's flow is
``source_to_target``, and ``MessagePassing.aggregate`` uses :func:`ell_sum` when the layer's
aggregation is exactly ``SumAggregation`` / ``MeanAggregation`` (``aggr="add"
| "sum" | "mean"``), its node dim is 0, a gradient is being recorded or the
layout is ``"hyb"`` (without a backward, PyG's scatter forward beat ELL's wide
tables; HYB's narrow ones beat it), and the index is a row of the batch's
``edge_index`` (a view of the same tensor, of length ``E``): the row is the
layer's target row (``edge_index[1]`` for ``flow="source_to_target"``), as in
PyG's ``propagate``. Anything else (another aggregation, an edge index the
model built, a custom ``aggregate``) takes PyG's own code, unchanged.

Source tables (``FixedSizeNeighborLoader(layout="sources")``, key ``in_sources``
``[R, D]``: each of the first ``R`` rows' in-edge sources, padding id ``N``): when no
gradient is recorded, a sum or mean aggregation (the same conditions) whose messages
*are* the rows PyG gathered from the source side (``message`` returned ``x_j``
itself, as SAGEConv's and GINConv's do: checked by identity) is
:func:`source_aggregate` of those rows: a gather of node rows, parallel over nodes,
and the per-edge ``x_j`` then goes unread (a compiled graph drops it). Other
messages (GCN's weighted ones), and training, take PyG's path. Known
limit: an index that is a length-``E`` view of the batch's ``edge_index``
but not the target row (``edge_index.view(-1)[:E]`` passed to
``super().aggregate``) would be misread; PyG's own layers never do that.
"""
# (no `from __future__ import annotations`: PyG's Inspector evaluates the patched
# methods' annotation strings in the layer's module, which may lack `Optional`)

from typing import Any, Dict, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.nn.aggr import MeanAggregation, SumAggregation
from torch_geometric.nn.conv import MessagePassing

from . import static
from ..format.torch_internals import view_base

__all__ = ["ell_gather", "ell_sum", "ell_mean", "source_aggregate", "add_rows", "SPILL_ADD",
           "install", "uninstall", "installed"]


def _rows(t: Tensor, ids: Tensor) -> Tensor:
    """``t[ids]`` where ``ids < len(t)``, zero rows where ``ids == len(t)`` (the padding id).

    A masked gather rather than a gather from ``t`` with a zero row appended:
    inductor fuses the mask into the consumer's loop, where the appended row
    cost a copy of ``t`` per call (a ``cat`` kernel per layer and direction).
    """
    n = t.size(0)
    if n == 0:  # static: a budget without edges
        return t.new_zeros(tuple(ids.shape) + tuple(t.shape[1:]))
    got = t[ids.clamp(max=n - 1)]
    keep = (ids < n).view(tuple(ids.shape) + (1,) * (t.dim() - 1))
    return torch.where(keep, got, torch.zeros((), dtype=t.dtype, device=t.device))


#: How the spilled edges of ``layout="hyb"`` are added: ``"scatter_add"`` (default;
#: poptorch has a handler for it, none for ``index_add``, so the layout runs on the
#: IPU backends too) or ``"index_add"`` (the spill of before). Read at trace time:
#: a compiled model keeps the choice it was compiled with. Under inductor the two
#: run at the same speed (``benchmarks/bench_spill.py``; see docs/dev/RESULTS.md).
SPILL_ADD = "scatter_add"


def add_rows(out: Tensor, index: Tensor, rows: Tensor) -> Tensor:
    """``out`` with ``rows[k]`` added to ``out[index[k]]`` along dim 0 (``index``:
    ``[K]``, ``rows``: ``[K, *out.shape[1:]]``), as :data:`SPILL_ADD` says: a
    ``scatter_add`` with the index expanded to ``rows``' shape (int64: torch
    2.13's CPU ``scatter_add`` rejects int32), or ``index_add``. Same sums;
    the order of the additions into one row may differ."""
    if SPILL_ADD == "index_add":
        return out.index_add(0, index, rows)
    idx = index.long().view((-1,) + (1,) * (rows.dim() - 1)).expand(rows.shape)
    return out.scatter_add(0, idx, rows)


#: Widths up to this are summed slot by slot when compiled (:func:`_slot_sum`).
UNROLL_MAX_WIDTH = 32


def _slot_sum(msg: Tensor, slots: Tensor) -> Tensor:
    """``sum over k of msg[slots[:, k]]`` (zero rows for the padding id): ``[N, *]``.

    Under ``torch.compile`` a table of at most :data:`UNROLL_MAX_WIDTH` slots is
    summed one slot column at a time: inductor fuses the adds into one loop over
    nodes, vectorised over the channels. Its lowering of ``gather(...).sum(1)``
    vectorised the slot dim instead (a masked 16-lane gather per channel, far
    slower than PyG's scatter: see docs/dev/RESULTS.md). The
    slot-by-slot order is each node's edge order, PyG's own. Eager (and the IPU
    path) keep one gather and one sum.
    """
    width = slots.size(1)
    if width == 0 or width > UNROLL_MAX_WIDTH or not torch.compiler.is_compiling():
        return _rows(msg, slots).sum(1)
    out = _rows(msg, slots[:, 0])
    for k in range(1, width):
        out = out + _rows(msg, slots[:, k])
    return out


def _slot_count(slots: Tensor, E: int, dtype: torch.dtype) -> Tensor:
    """``(slots < E).sum(1)`` as ``dtype`` (slot by slot when compiled, as :func:`_slot_sum`)."""
    width = slots.size(1)
    if width == 0 or width > UNROLL_MAX_WIDTH or not torch.compiler.is_compiling():
        return (slots < E).sum(1).to(dtype)
    out = (slots[:, 0] < E).to(dtype)
    for k in range(1, width):
        out = out + (slots[:, k] < E).to(dtype)
    return out


def _spilled(out: Tensor, msg: Tensor, spill: Optional[Tensor]) -> Tensor:
    """``out`` plus the spilled edges' rows of ``msg`` (``[2, K]``: edge id, node)."""
    if spill is None:
        return out
    return add_rows(out, spill[1], _rows(msg, spill[0]))


def _save_tables(ctx: Any, inputs: Tuple[Any, ...], output: Tensor) -> None:
    """``setup_context`` of :class:`_Gather` and :class:`_Sum` (inputs ``(values,
    index, slots, spill)``): keep the tables for the backward, which is the other one."""
    ctx.save_for_backward(*(t for t in inputs[1:4] if t is not None))


def _saved_tables(ctx: Any) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
    """``(index, slots, spill or None)`` as :func:`_save_tables` kept them."""
    index, slots, *spill = ctx.saved_tensors
    return index, slots, (spill[0] if spill else None)


class _Gather(torch.autograd.Function):
    """``x[index]``; backward: ``sum(grad[slots[n]])`` per node (a gather, no atomics;
    plus a scatter of the few spilled edges under ``layout="hyb"``)."""

    @staticmethod
    def forward(x: Tensor, index: Tensor, slots: Tensor, spill: Optional[Tensor]) -> Tensor:
        return x.index_select(0, index)

    setup_context = staticmethod(_save_tables)

    @staticmethod
    def backward(ctx: Any, grad: Tensor):
        return _Sum.apply(grad, *_saved_tables(ctx)), None, None, None


class _Sum(torch.autograd.Function):
    """``out[n] = sum(msg[slots[n]])`` (+ spilled edges); backward: ``grad[index]`` (a gather)."""

    @staticmethod
    def forward(msg: Tensor, index: Tensor, slots: Tensor, spill: Optional[Tensor]) -> Tensor:
        return _spilled(_slot_sum(msg, slots), msg, spill)

    setup_context = staticmethod(_save_tables)

    @staticmethod
    def backward(ctx: Any, grad: Tensor):
        return _Gather.apply(grad, *_saved_tables(ctx)), None, None, None


def ell_gather(x: Tensor, index: Tensor, slots: Tensor, spill: Optional[Tensor] = None
               ) -> Tensor:
    """``x[index]`` along dim 0 (``[N, *] -> [E, *]``).

    ``index``: ``[E]`` (e.g. ``edge_index[0]``); ``slots``: ``[N, D]``, the
    ids of the edges ``e`` with ``index[e] == n`` (padding id ``E``), e.g.
    ``out_slots`` for ``edge_index[0]``; ``spill``: ``[2, K]``, the edges
    (row 0) past their node's (row 1) width (``out_spill``, ``layout="hyb"``).
    Edges listed nowhere get no gradient back to ``x``.
    """
    return _Gather.apply(x, index, slots, spill)


def ell_sum(msg: Tensor, index: Tensor, slots: Tensor, spill: Optional[Tensor] = None
            ) -> Tensor:
    """``out[n] = sum of msg[e] over slots[n]`` and ``spill`` (``[E, *] -> [N, *]``).

    ``index``/``slots``/``spill`` as in :func:`ell_gather` (``edge_index[1]``
    with ``in_slots`` / ``in_spill`` for a sum over in-edges).
    """
    return _Sum.apply(msg, index, slots, spill)


def ell_mean(msg: Tensor, index: Tensor, slots: Tensor, spill: Optional[Tensor] = None
             ) -> Tensor:
    """The mean over ``slots[n]`` and ``spill`` (0 for a node without edges, as PyG)."""
    E = msg.size(0)
    deg = _slot_count(slots, E, msg.dtype)
    if spill is not None:
        deg = add_rows(deg, spill[1], (spill[0] < E).to(msg.dtype))
    deg = deg.clamp(min=1)
    return ell_sum(msg, index, slots, spill) / deg.view((-1,) + (1,) * (msg.dim() - 1))


def source_aggregate(x: Tensor, sources: Tensor, num_rows: int, mean: bool) -> Tensor:
    """``out[r] = sum (or mean) of x[sources[r, k]]`` over the real ids (``< len(x)``;
    ``len(x)`` pads) for the first ``R = len(sources)`` rows, zero rows after them up to
    ``num_rows``: ``[num_rows, *x.shape[1:]]``. The mean divides by the count of real
    ids, at least 1 (0 for a row without in-edges, as PyG)."""
    out = _slot_sum(x, sources)
    if mean:
        count = _slot_count(sources, x.size(0), x.dtype).clamp(min=1)
        out = out / count.view((-1,) + (1,) * (x.dim() - 1))
    rows = sources.size(0)
    if num_rows > rows:
        out = torch.cat([out, out.new_zeros((num_rows - rows,) + tuple(out.shape[1:]))])
    return out


# --------------------------------------------------------------------------
# Routing inside a wrapped forward
# --------------------------------------------------------------------------
_ORIG: Dict[str, Any] = {name: getattr(MessagePassing, name)
                         for name in ("_set_size", "_index_select", "aggregate")}
_ROW = "ell_row"  # frame entry: the edge_index row PyG's collect is about to gather with
_GATHERED = "sources_x_j"  # frame entry: (x_j, x) of the last source-side gather


def _tables() -> Optional[Tuple[Tensor, Tensor, Tensor, Optional[Tensor], Optional[Tensor]]]:
    """``(edge_index, in_slots, out_slots, in_spill, out_spill)`` of the active
    frame (spills None unless ``layout="hyb"``), or None."""
    frame = static.current_frame()
    if frame is None or frame.get("ell") is None or frame.get("edge_index") is None:
        return None
    return (frame["edge_index"],) + tuple(frame["ell"])


def _is_row_of(index: Any, ei: Tensor) -> bool:
    """Whether ``index`` is a length-``E`` view of the batch's ``edge_index``.

    ``_base`` identity is traceable by Dynamo (a view is a new object each
    time, and its ``storage_offset()`` is not traceable), so which row it is
    comes from the caller (the layer's flow, or :data:`_ROW`)."""
    root = ei if view_base(ei) is None else view_base(ei)
    return isinstance(index, Tensor) and view_base(index) is root and index.dim() == 1 \
        and index.size(0) == ei.size(1)


def _set_size(self: MessagePassing, size: Any, dim: int, src: Any) -> None:
    # PyG's collect (generated or not) calls _set_size(size, row, x) right
    # before x_i / x_j = _index_select(x, edge_index[row]): remember the row.
    # (For a (x_src, x_dst) tuple it passes the tuple position, which is the
    # row only for flow="source_to_target"; _index_select checks the flow.)
    frame = static.current_frame()
    if frame is not None and (frame.get("ell") is not None or frame.get("sources") is not None):
        frame[_ROW] = dim
    return _ORIG["_set_size"](self, size, dim, src)


def _index_select(self: MessagePassing, src: Tensor, index: Any) -> Tensor:
    t = _tables()
    if t is None:
        out = _ORIG["_index_select"](self, src, index)
        _note_source_gather(self, src, index, out)
        return out
    frame = static.current_frame()
    row = frame.get(_ROW)
    frame[_ROW] = None  # one use: a later _index_select without _set_size takes PyG's path
    ei, ins, outs, in_sp, out_sp = t
    if row not in (0, 1) or self.flow != "source_to_target" or not isinstance(src, Tensor) \
            or self.node_dim % src.dim() != 0 or not _is_row_of(index, ei):
        return _ORIG["_index_select"](self, src, index)
    return ell_gather(src, index, *((outs, out_sp) if row == 0 else (ins, in_sp)))


def _note_source_gather(self: MessagePassing, src: Any, index: Any, out: Tensor) -> None:
    """Under ``layout="sources"``: remember ``(x_j, x)`` of a gather of source rows by
    the batch's ``edge_index[0]`` (the row ``_set_size`` told), for :func:`_aggregate`."""
    frame = static.current_frame()
    if frame is None or frame.get("sources") is None:
        return
    row = frame.get(_ROW)
    frame[_ROW] = None
    ei = frame.get("edge_index")
    if row == 0 and self.flow == "source_to_target" and isinstance(src, Tensor) \
            and ei is not None and self.node_dim % src.dim() == 0 and _is_row_of(index, ei) \
            and src.size(0) == frame.get("N"):
        frame[_GATHERED] = (out, src)


def _source_rows(self: MessagePassing, inputs: Any, index: Any, ptr: Any,
                 dim_size: Optional[int]) -> Optional[Tensor]:
    """The source-table aggregation of ``inputs`` (module doc), or None where it does not
    apply."""
    frame = static.current_frame()
    if frame is None or frame.get("sources") is None or frame.get(_GATHERED) is None:
        return None
    kind = type(getattr(self, "aggr_module", None))
    x_j, x = frame[_GATHERED]
    n = frame.get("N")
    if kind not in (SumAggregation, MeanAggregation) or ptr is not None \
            or not isinstance(inputs, Tensor) or inputs is not x_j \
            or (torch.is_grad_enabled() and inputs.requires_grad) \
            or self.flow != "source_to_target" or not _is_row_of(index, frame["edge_index"]) \
            or dim_size not in (None, n):
        return None
    return source_aggregate(x, frame["sources"], n, kind is MeanAggregation)


def _aggregate(self: MessagePassing, inputs: Tensor, index: Tensor, ptr: Optional[Tensor] = None,
               dim_size: Optional[int] = None) -> Tensor:
    by_sources = _source_rows(self, inputs, index, ptr, dim_size)
    if by_sources is not None:
        return by_sources
    t = _tables()
    kind = type(getattr(self, "aggr_module", None))
    # Without a gradient to record, only the narrow HYB tables: their slot sums run
    # in parallel over nodes where the scatter forward is ATen's serial kernel, while
    # ELL's tables as wide as the largest degree lost to it (docs/benchmarks.md).
    inference = not (torch.is_grad_enabled() and isinstance(inputs, Tensor)
                     and inputs.requires_grad)
    if t is None or kind not in (SumAggregation, MeanAggregation) or ptr is not None \
            or not isinstance(inputs, Tensor) or (inference and t[3] is None) \
            or not _is_row_of(index, t[0]) \
            or self.node_dim % inputs.dim() != 0 \
            or (dim_size is not None and dim_size != t[1].size(0)):
        return _ORIG["aggregate"](self, inputs, index, ptr=ptr, dim_size=dim_size)
    _, ins, outs, in_sp, out_sp = t
    # PyG's propagate aggregates over edge_index[i]: i = 1 for source_to_target
    slots = (ins, in_sp) if self.flow == "source_to_target" else (outs, out_sp)
    fn = ell_sum if kind is SumAggregation else ell_mean
    return fn(inputs, index, *slots)


_PATCHES = {"_set_size": _set_size, "_index_select": _index_select, "aggregate": _aggregate}
for _name, _fn in _PATCHES.items():
    # PyG's Inspector files signatures under func.__name__ and looks up "aggregate"
    _fn.__name__ = _name
    _fn.__qualname__ = f"MessagePassing.{_name}"


def install() -> None:
    """Patch ``MessagePassing._set_size`` / ``_index_select`` / ``aggregate``
    (idempotent); they behave exactly like PyG's outside a frame with ELL tables."""
    for name, fn in _PATCHES.items():
        setattr(MessagePassing, name, fn)


def uninstall() -> None:
    for name, fn in _ORIG.items():
        setattr(MessagePassing, name, fn)


def installed() -> bool:
    return MessagePassing.aggregate is _aggregate



