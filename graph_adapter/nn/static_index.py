"""Boolean-mask reads inside a few PyG methods, made static in a wrapped forward.

Some PyG layers select rows with a boolean mask or ``nonzero``, which gives a
data-dependent shape (poptorch's dispatcher and ``torch.export`` reject it),
although the padded format knows the answer:

* ``GPSConv.forward``: ``h[mask]`` after ``to_dense_batch``. The static
  ``to_dense_batch`` (:mod:`graph_adapter.nn.static`) puts every one of the
  ``N`` nodes in a ``[G, N, F]`` dense batch and records where
  (``frame["dense_masks"]``), so ``h[mask]`` is the gather of those ``N``
  positions, in node order, as PyG's boolean read gives.
* ``ChebConv.__norm__``: ``edge_weight[loop_mask] -= 1``, a read-modify-write.
  The read returns a full-size copy, the in-place update runs on every row,
  and the write keeps the updated rows where the mask is set
  (``torch.where``): same values, static shape.
* ``MFConv.forward``: ``idx = (deg == i).nonzero()`` then
  ``index_select(idx)`` -> a linear layer -> ``out.index_copy_(idx, r)``, one
  degree at a time. ``nonzero`` returns every position; the layer then runs on
  every row, and ``index_copy_`` keeps the rows where ``deg == i``: the same
  output, ``max_degree + 1`` dense matmuls instead of one split.

* ``ClusterGCNConv.forward``: ``edge_weight[row == col] += lambda * deg_inv``
  after ``add_self_loops``: the ``k``-th self-loop gets node ``k``'s value,
  which PyG's shapes require to be one loop per node, in node order. The
  static read is a full copy (the ``ChebConv`` rule), the update adds
  ``deg_inv[row]`` at every position (the loop at edge ``e`` is node
  ``row[e]``'s), and the write keeps the loops. Same values on every real
  node; a loop the static ``remove_self_loops`` had to leave on the trash
  node (a batch with a single padding node) gets the trash node's value
  instead of shifting every real node's.
* ``RGCNConv.forward``: ``masked_edge_index(edge_index, edge_type == i)``
  (``edge_index[:, mask]``), one relation at a time, then ``propagate``. The
  read keeps all ``E`` columns and sends every edge of another relation to
  the trash node (``(N - 1, N - 1)``, a padding node the format always
  reserves): no real node sends, receives or counts it, whatever the
  aggregation, so the real rows are PyG's. ``RGCNConv`` also sizes a
  ``segment_matmul`` heuristic with ``int(segment_count.max())``; inside a
  wrapped forward ``torch_geometric.backend.use_segment_matmul`` is ``False``
  for the call (the per-relation loop, the path PyG takes under
  ``torch.compile``: same values, and ``segment_matmul`` would need the
  edges sorted by type, a data-dependent permutation).
* ``HypergraphConv.forward`` without ``num_edges``: PyG computes
  ``int(hyperedge_index[1].max()) + 1`` (and asks for ``num_edges`` under
  dynamic shapes). When ``hyperedge_index`` is the batch's own
  ``edge_index`` its ids are node ids of the batch (the packer checks
  ``0 <= id < num_nodes``), so ``N`` hyperedge slots hold them all; the
  unused slots are empty (PyG's ``B = 1 / 0 -> 0``) and reach no node. Any
  other hyperedge index raises :class:`~graph_adapter.nn.static.StaticSizeError`
  asking for ``num_edges=`` (your hyperedge budget).

How: :func:`install` wraps exactly those methods; inside a wrapped forward
(a frame of :mod:`graph_adapter.nn.static` is active) each runs under a
:class:`torch.overrides.TorchFunctionMode` that applies the rules above
(Dynamo traces the mode, so ``torch.compile(fullgraph=True)`` sees only
static ops). A result of a rewritten read used any other way (its size, a
plain read, an arithmetic with a tensor) raises
:class:`~graph_adapter.nn.static.StaticSizeError` naming the op, never a wrong
value. Outside a wrapped forward the methods run unchanged.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, Tuple

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

from . import static

__all__ = ["install", "uninstall", "SCOPED"]

#: (module, class, method, rule): the methods run under the mode, and which rule.
SCOPED: List[Tuple[str, str, str, str]] = [
    ("torch_geometric.nn.conv.gps_conv", "GPSConv", "forward", "dense"),
    ("torch_geometric.nn.conv.cheb_conv", "ChebConv", "__norm__", "rmw"),
    ("torch_geometric.nn.conv.mf_conv", "MFConv", "forward", "partition"),
    ("torch_geometric.nn.conv.rgcn_conv", "RGCNConv", "forward", "relations"),
    ("torch_geometric.nn.conv.hypergraph_conv", "HypergraphConv", "forward", "hyperedges"),
    ("torch_geometric.nn.conv.cluster_gcn_conv", "ClusterGCNConv", "forward", "loops"),
]

_INPLACE = {
    Tensor.__isub__, Tensor.__iadd__, Tensor.__imul__, Tensor.__itruediv__,
    Tensor.sub_, Tensor.add_, Tensor.mul_, Tensor.div_, Tensor.clamp_, Tensor.neg_,
}
_PASS_INDEX = {Tensor.view, Tensor.reshape, Tensor.flatten, Tensor.squeeze}
_HARMLESS = {"dtype", "device", "requires_grad", "layout", "is_sparse", "is_cuda", "dim",
             "is_floating_point", "ndim"}


#: Dynamo's ``x[mask] = v`` runs without the active torch-function modes from torch
#: 2.15 on (its STORE_SUBSCR goes straight to the tensor's setitem), so the masked
#: write of the read-modify-write rules cannot be made static in a compiled forward
#: there; eager forwards, the IPU path and torch.export of an eager trace still can.
_COMPILED_SETITEM_SKIPS_MODES = tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 15)


def _is_bool(t: Any) -> bool:
    return isinstance(t, Tensor) and t.dtype == torch.bool


def _rows_mask(m: Tensor, t: Tensor) -> Tensor:
    """``m`` (the leading dims of ``t``) broadcast to ``t``'s shape."""
    return m.reshape(tuple(m.shape) + (1,) * (t.dim() - m.dim())).expand(t.shape)


def _edge_columns(t: Any, key: Any) -> bool:
    """``t[:, mask]`` on an ``[2, E]`` edge index with a boolean ``[E]`` mask."""
    return (isinstance(t, Tensor) and t.dim() == 2 and t.size(0) == 2 and isinstance(key, tuple)
            and len(key) == 2 and key[0] == slice(None) and _is_bool(key[1])
            and key[1].dim() == 1 and key[1].size(0) == t.size(1))


def _name(func: Callable) -> str:
    name = getattr(func, "__name__", str(func))
    owner = getattr(func, "__objclass__", None) or getattr(func, "__self__", None)
    if name == "__get__" and owner is not None:
        return getattr(owner, "__name__", "attr")
    return name


class _StaticIndexMode(TorchFunctionMode):
    """The rules of one scoped method call (see the module docstring)."""

    def __init__(self, frame: Dict[str, Any], rule: str, where: str):
        super().__init__()
        self.frame = frame
        self.rule = rule
        self.where = where
        self.pending: List[Tuple[Tensor, Tensor]] = []  # (full copy, mask) of a masked read
        self.lazy: List[Tuple[Tensor, Tensor]] = []  # (all positions, mask) of a nonzero
        self.loops: List[Tuple[Tensor, Tensor]] = []  # (row == col, row) of an edge index

    # -- lookups by identity (Dynamo traces `is`) --------------------------
    def _pending(self, t: Any):
        for p, m in self.pending:
            if t is p:
                return m
        return None

    def _lazy(self, t: Any):
        for i, m in self.lazy:
            if t is i:
                return m
        return None

    def _loop_rows(self, m: Any):
        for mask, row in self.loops:
            if m is mask:
                return row
        return None

    def _dense(self, m: Tensor):
        for mask, pos in self.frame.get("dense_masks", []):
            if m is mask:
                return pos
        return None

    def _misuse(self, func: Callable, args, kwargs) -> None:
        if _name(func) in _HARMLESS:
            return
        for a in list(args) + list(kwargs.values()):
            if self._pending(a) is not None or self._lazy(a) is not None:
                raise static.StaticSizeError(
                    f"{_name(func)} on the result of a boolean-mask read / nonzero inside "
                    f"{self.where}: graph_adapter made that read static only for the pattern "
                    f"this layer uses; its size would be data-dependent. Run the layer outside "
                    f"ipu_wrap or open an issue with the line")

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if (self.rule == "relations" and func is Tensor.__getitem__ and len(args) == 2
                and _edge_columns(*args)):
            t, (_, m) = args
            return torch.where(m.view(1, -1), t, torch.full_like(t, self.frame["N"] - 1))
        if func is Tensor.__getitem__ and len(args) == 2 and _is_bool(args[1]):
            t, m = args
            pos = self._dense(m)
            if pos is not None and m.dim() == 2 and tuple(t.shape[:2]) == tuple(m.shape):
                return t.flatten(0, 1).index_select(0, pos)
            if self.rule in ("rmw", "loops"):
                if _COMPILED_SETITEM_SKIPS_MODES and torch.compiler.is_compiling():
                    raise static.StaticSizeError(
                        f"{self.where}: a masked read-modify-write (`x[mask] op= v`) cannot "
                        f"be made static under torch.compile on torch {torch.__version__}: its "
                        f"Dynamo runs `x[mask] = v` without the torch-function mode that "
                        f"graph_adapter rewrites it with, so the write's shape would be "
                        f"data-dependent. Run this model with backend='eager' (or "
                        f"'ipu-emulator'), or compile it on torch 2.13")
                copy = t.clone()
                self.pending.append((copy, m))
                return copy
        if func is Tensor.__setitem__ and len(args) == 3 and _is_bool(args[1]):
            t, m, v = args
            if self._pending(v) is m:
                t.copy_(torch.where(_rows_mask(m, t), v, t))
                return None
        if self.rule == "partition":
            if func in (Tensor.nonzero, torch.nonzero) and _is_bool(args[0]) and args[0].dim() == 1:
                m = args[0]
                idx = torch.arange(m.size(0), device=m.device).view(-1, 1)
                self.lazy.append((idx, m))
                return idx
            if func in _PASS_INDEX and self._lazy(args[0]) is not None:
                out = func(*args, **kwargs)
                self.lazy.append((out, self._lazy(args[0])))
                return out
            if func in (Tensor.index_select, torch.index_select) and self._lazy(args[2]) is not None:
                return args[0]  # every row: the positions are all of them
            if func is Tensor.index_copy_ and self._lazy(args[2]) is not None:
                out, dim, idx, src = args
                m = self._lazy(idx)
                shape = [1] * out.dim()
                shape[dim] = -1
                return out.copy_(torch.where(m.view(shape), src, out))
        if (self.rule == "loops" and func in (Tensor.__eq__, Tensor.eq, torch.eq) and len(args) == 2
                and all(isinstance(a, Tensor) and a.dim() == 1 and not a.is_floating_point()
                        for a in args) and args[0].shape == args[1].shape):
            out = func(*args, **kwargs)
            self.loops.append((out, args[0]))
            return out
        if func in _INPLACE and self._pending(args[0]) is not None:
            m, out = self._pending(args[0]), None
            if all(not isinstance(a, Tensor) or a.dim() == 0 for a in args[1:]):
                out = func(*args, **kwargs)
            else:
                row = self._loop_rows(m)
                v = args[1] if len(args) == 2 else None
                if (row is not None and isinstance(v, Tensor) and v.dim() >= 1
                        and v.size(0) == self.frame["N"] and args[0].size(0) == row.size(0)):
                    # `w[row == col] op= v`: the k-th loop is node k's (exactly one
                    # loop per node, in node order, as PyG's add_self_loops leaves
                    # them), i.e. the loop at edge e gets v[row[e]]; every position
                    # is computed, __setitem__ keeps the loops.
                    out = func(args[0], v[row])
            if out is not None:
                if out is not args[0]:
                    # the updated copy is still the masked read's: under Dynamo (torch
                    # >= 2.15) an in-place op's result need not be the object it updated
                    self.pending.append((out, m))
                return out
        self._misuse(func, args, kwargs)
        return func(*args, **kwargs)


def _scoped(orig: Callable, rule: str, where: str) -> Callable:
    @functools.wraps(orig)
    def method(*args, **kwargs):
        frame = static.current_frame()
        if frame is None:
            return orig(*args, **kwargs)
        if rule == "hyperedges":
            return orig(*args, **_num_hyperedges(frame, args, kwargs))
        if rule == "relations":
            import torch_geometric.backend as backend

            before = backend.use_segment_matmul
            backend.use_segment_matmul = False
            try:
                with _StaticIndexMode(frame, rule, where):
                    return orig(*args, **kwargs)
            finally:
                backend.use_segment_matmul = before
        with _StaticIndexMode(frame, rule, where):
            return orig(*args, **kwargs)

    method.__static_index_orig__ = orig  # type: ignore[attr-defined]
    return method


def _num_hyperedges(frame: Dict[str, Any], args: tuple, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """``HypergraphConv.forward``'s kwargs with a static ``num_edges`` (module docstring)."""
    names = ("self", "x", "hyperedge_index", "hyperedge_weight", "hyperedge_attr", "num_edges")
    bound = dict(zip(names, args))
    if "num_edges" in kwargs or bound.get("num_edges") is not None:
        return kwargs
    index = bound.get("hyperedge_index", kwargs.get("hyperedge_index"))
    if index is not frame.get("edge_index") or frame.get("N") is None:
        raise static.StaticSizeError(
            "HypergraphConv.forward without num_edges inside a wrapped forward: PyG would size "
            "the hyperedges as int(hyperedge_index[1].max()) + 1 (data-dependent), and this "
            "hyperedge_index is not the batch's edge_index (whose ids are node ids, < N). "
            "Pass num_edges= (a static bound on the batch's hyperedge ids)")
    return dict(kwargs, num_edges=frame["N"])


def install() -> None:
    """Wrap the methods of :data:`SCOPED` (idempotent)."""
    import importlib

    for module, cls_name, meth, rule in SCOPED:
        cls = getattr(importlib.import_module(module), cls_name)
        current = cls.__dict__[meth]
        if not hasattr(current, "__static_index_orig__"):
            setattr(cls, meth, _scoped(current, rule, f"{cls_name}.{meth}"))


def uninstall() -> None:
    """Put the original methods back."""
    import importlib

    for module, cls_name, meth, _ in SCOPED:
        cls = getattr(importlib.import_module(module), cls_name)
        current = cls.__dict__[meth]
        orig = getattr(current, "__static_index_orig__", None)
        if orig is not None:
            setattr(cls, meth, orig)



