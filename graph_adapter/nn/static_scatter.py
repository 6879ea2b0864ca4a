"""Static, traceable stand-ins for ``torch_scatter``'s Python functions.

Much PyG-era code (graphium's pooling, PNA and GatedGCN layers, older PyG
layers through ``torch_geometric.typing.torch_scatter``) calls
``torch_scatter`` directly. Its ``max``/``min``/``mul`` and ``segment_*`` /
``gather_*`` functions run custom C++ ops (``torch.ops.torch_scatter.*``)
that have no fake (meta) kernel: ``torch.compile``, ``torch.export`` and
poptorch's dispatcher cannot trace them; and every function computes
``int(index.max()) + 1`` when ``dim_size`` is missing.

When ``torch_scatter`` is installed, :func:`graph_adapter.nn.static.install`
swaps each function below, wherever code looks it up (the ``torch_scatter``
and ``torch_sparse`` modules, PyG's modules, the user's model modules), for
a replacement that calls the original **unless a wrapped forward is running**
(a frame of :mod:`graph_adapter.nn.static` is active). Inside one, the
replacement computes the same values with plain ATen ops whose shapes are
static (``scatter_add``, ``scatter_reduce``, ``gather``, ``searchsorted``):

* a missing ``dim_size`` comes from the padded budget
  (:func:`graph_adapter.nn.static.index_size`: the batch vector -> ``G``, an
  edge -> node index -> ``N``);
* ``max``/``min`` return ``(values, argmax)`` like ``torch_scatter``: empty
  slots hold 0 and the arg ``src.size(dim)``; ties go to the first position;
  the gradient flows to the arg position only;
* ``segment_csr``/``gather_csr`` take a 1-D ``indptr`` (e.g. the batch's
  ``ptr``, whose last entry is ``N`` in the padded format); ``gather_csr``
  without ``out`` needs ``indptr`` of length ``G + 1`` (-> ``N`` rows) or
  ``N + 1`` (-> ``E`` rows).

``torch_sparse`` needs no table of its own: its functional code
(``spmm``, ``SparseTensor`` reductions) calls ``torch_scatter`` through
module globals, which are swapped too. ``SparseTensor`` itself (a
data-dependent number of non-zeros) is not made static.
"""
from __future__ import annotations

import importlib
from typing import Callable, Dict, Optional, Tuple

import torch
from torch import Tensor

from . import static

__all__ = ["available", "ORIGINALS", "REPLACEMENTS", "MODULE_PREFIXES"]

#: Modules whose globals are scanned for the functions below.
MODULE_PREFIXES = ("torch_scatter", "torch_sparse")

try:  # torch_scatter is optional; PyG itself does not need it
    torch_scatter = importlib.import_module("torch_scatter")
except ImportError:  # pragma: no cover - depends on the environment
    torch_scatter = None


def available() -> bool:
    """Whether ``torch_scatter`` is installed (and so substituted)."""
    return torch_scatter is not None


# --------------------------------------------------------------------------
# Shapes
# --------------------------------------------------------------------------
def _broadcast(index: Tensor, src: Tensor, dim: int) -> Tensor:
    """``index`` expanded to ``src``'s shape, as ``torch_scatter`` does.

    A 1-D index runs along ``dim``; a k-D index covers ``src``'s first k dims.
    """
    if index.dim() == 1:
        shape = [1] * src.dim()
        shape[dim] = -1
        index = index.view(shape)
    while index.dim() < src.dim():
        index = index.unsqueeze(-1)
    return index.expand(src.shape)


def _dim_size(src: Tensor, index: Tensor, dim: int, out: Optional[Tensor],
              dim_size: Optional[int], op: str) -> int:
    """The output length along ``dim``: ``out``'s, ``dim_size``, or the budget's."""
    if out is not None:
        return out.size(dim)
    if dim_size is not None:
        return dim_size
    if index.numel() == 0:
        return 0
    frame = static.current_frame()
    probe = index if index.dim() == 1 else index.new_empty((src.size(dim),))
    return static.index_size(frame, probe, op, "dim_size")


def _out_shape(src: Tensor, dim: int, size: int):
    shape = list(src.shape)
    shape[dim] = size
    return shape


def _positions(src: Tensor, dim: int) -> Tensor:
    """``src``-shaped tensor holding each element's position along ``dim``."""
    shape = [1] * src.dim()
    shape[dim] = -1
    pos = torch.arange(src.size(dim), device=src.device).view(shape)
    return pos.expand(src.shape)


# --------------------------------------------------------------------------
# The reductions (index already broadcast to src's shape, dim >= 0)
# --------------------------------------------------------------------------
def _sum(src: Tensor, idx: Tensor, dim: int, out: Optional[Tensor], size: int) -> Tensor:
    base = out if out is not None else src.new_zeros(_out_shape(src, dim, size))
    return base.scatter_add(dim, idx, src)


def _mul(src: Tensor, idx: Tensor, dim: int, out: Optional[Tensor], size: int) -> Tensor:
    base = out if out is not None else src.new_ones(_out_shape(src, dim, size))
    return base.scatter_reduce(dim, idx, src, "prod", include_self=True)


def _mean(src: Tensor, idx: Tensor, dim: int, out: Optional[Tensor], size: int) -> Tensor:
    total = _sum(src, idx, dim, out, size)
    count = _sum(torch.ones_like(src), idx, dim, None, total.size(dim)).clamp(min=1)
    if total.is_floating_point():
        return total / count
    return torch.div(total, count, rounding_mode="floor")


def _arg(src: Tensor, idx: Tensor, dim: int, out: Optional[Tensor], size: int,
         which: str) -> Tuple[Tensor, Tensor]:
    """``(values, arg)`` of a max (``which="amax"``) or min (``"amin"``) scatter."""
    length = src.size(dim)
    base = out if out is not None else src.new_zeros(_out_shape(src, dim, size))
    arg = torch.full(base.shape, length, dtype=torch.long, device=src.device)
    if length == 0:
        return base, arg
    # Where each slot's extreme is (found without gradient), then the values
    # gathered from there: the gradient reaches the arg position only, as in
    # torch_scatter.
    best = base.detach().scatter_reduce(dim, idx, src.detach(), which,
                                        include_self=out is not None)
    hit = src.detach() == best.gather(dim, idx)
    if out is not None:  # torch_scatter keeps out's value unless src beats it
        ref = out.detach().gather(dim, idx)
        hit = hit & ((src.detach() > ref) if which == "amax" else (src.detach() < ref))
    cand = torch.where(hit, _positions(src, dim), torch.full_like(idx, length))
    arg = arg.scatter_reduce(dim, idx, cand, "amin", include_self=True)
    found = arg < length
    values = src.gather(dim, arg.clamp(max=length - 1))
    return torch.where(found, values, base), arg


# --------------------------------------------------------------------------
# The public torch_scatter signatures
# --------------------------------------------------------------------------
def _norm_dim(dim: int, src: Tensor) -> int:
    return dim + src.dim() if dim < 0 else dim


def _prepare(src, index, dim, out, dim_size, op):
    dim = _norm_dim(dim, src)
    size = _dim_size(src, index, dim, out, dim_size, op)
    return _broadcast(index, src, dim), dim, size


def _scatter_fn(name: str, body: Callable) -> Callable:
    """A replacement for ``torch_scatter.<name>(src, index, dim=-1, out=None, dim_size=None)``."""
    orig = getattr(torch_scatter, name)

    def fn(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
           dim_size: Optional[int] = None):
        if static.current_frame() is None:
            return orig(src, index, dim, out, dim_size)
        idx, d, size = _prepare(src, index, dim, out, dim_size, f"torch_scatter.{name}")
        return body(src, idx, d, out, size)

    fn.__name__ = fn.__qualname__ = name
    fn.__wrapped__ = orig  # type: ignore[attr-defined]
    return fn


def _scatter(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
             dim_size: Optional[int] = None, reduce: str = "sum") -> Tensor:
    if static.current_frame() is None:
        return ORIGINALS["scatter"](src, index, dim, out, dim_size, reduce)
    idx, d, size = _prepare(src, index, dim, out, dim_size, f"torch_scatter.scatter(reduce={reduce!r})")
    if reduce in ("sum", "add"):
        return _sum(src, idx, d, out, size)
    if reduce == "mul":
        return _mul(src, idx, d, out, size)
    if reduce == "mean":
        return _mean(src, idx, d, out, size)
    if reduce in ("max", "min"):
        return _arg(src, idx, d, out, size, "a" + reduce)[0]
    raise ValueError(f"torch_scatter.scatter: unknown reduce={reduce!r}")


def _std(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
         dim_size: Optional[int] = None, unbiased: bool = True) -> Tensor:
    if static.current_frame() is None:
        return ORIGINALS["scatter_std"](src, index, dim, out, dim_size, unbiased)
    idx, d, size = _prepare(src, index, dim, out, dim_size, "torch_scatter.scatter_std")
    count = _sum(torch.ones_like(src), idx, d, None, size)
    mean = _sum(src, idx, d, None, size) / count.clamp(min=1)
    var = src - mean.gather(d, idx)
    res = _sum(var * var, idx, d, out, size)
    count = (count - 1).clamp(min=1) if unbiased else count.clamp(min=1)
    return (res / (count + 1e-6)).sqrt()


def _logsumexp(src: Tensor, index: Tensor, dim: int = -1, out: Optional[Tensor] = None,
               dim_size: Optional[int] = None, eps: float = 1e-12) -> Tensor:
    if static.current_frame() is None:
        return ORIGINALS["scatter_logsumexp"](src, index, dim, out, dim_size, eps)
    if not torch.is_floating_point(src):
        raise ValueError("torch_scatter.scatter_logsumexp needs floating point src")
    idx, d, size = _prepare(src, index, dim, out, dim_size, "torch_scatter.scatter_logsumexp")
    neg = torch.full(_out_shape(src, d, size), float("-inf"), dtype=src.dtype, device=src.device)
    if out is not None:
        neg = torch.maximum(neg, out)
    top = neg.scatter_reduce(d, idx, src.detach(), "amax", include_self=True)
    shifted = src - top.gather(d, idx)
    shifted = shifted.masked_fill(torch.isnan(shifted), float("-inf"))
    base = None if out is None else (out - top).exp()
    total = _sum(shifted.exp(), idx, d, base, size)
    return (total + eps).log().add(top).nan_to_num(neginf=0.0)


def _softmax_parts(src: Tensor, index: Tensor, dim: int, dim_size: Optional[int], op: str):
    if not torch.is_floating_point(src):
        raise ValueError(f"{op} needs floating point src")
    idx, d, size = _prepare(src, index, dim, None, dim_size, op)
    top = _arg(src.detach(), idx, d, None, size, "amax")[0]
    shifted = src - top.gather(d, idx)
    return shifted, idx, d, size


def _softmax(src: Tensor, index: Tensor, dim: int = -1, dim_size: Optional[int] = None) -> Tensor:
    if static.current_frame() is None:
        return ORIGINALS["scatter_softmax"](src, index, dim, dim_size)
    shifted, idx, d, size = _softmax_parts(src, index, dim, dim_size, "torch_scatter.scatter_softmax")
    e = shifted.exp()
    return e / _sum(e, idx, d, None, size).gather(d, idx)


def _log_softmax(src: Tensor, index: Tensor, dim: int = -1, eps: float = 1e-12,
                 dim_size: Optional[int] = None) -> Tensor:
    if static.current_frame() is None:
        return ORIGINALS["scatter_log_softmax"](src, index, dim, eps, dim_size)
    shifted, idx, d, size = _softmax_parts(src, index, dim, dim_size,
                                           "torch_scatter.scatter_log_softmax")
    norm = (_sum(shifted.exp(), idx, d, None, size) + eps).log()
    return shifted - norm.gather(d, idx)


# --------------------------------------------------------------------------
# segment_* and gather_* (COO: sorted index; CSR: pointer vector)
# --------------------------------------------------------------------------
_REDUCERS = {"sum": _sum, "add": _sum, "mean": _mean}


def _reduce(src, idx, dim, out, size, reduce: str, op: str):
    if reduce in _REDUCERS:
        return _REDUCERS[reduce](src, idx, dim, out, size)
    if reduce in ("max", "min"):
        return _arg(src, idx, dim, out, size, "a" + reduce)
    raise ValueError(f"{op}: unknown reduce={reduce!r}")


def _coo(src: Tensor, index: Tensor, out: Optional[Tensor], dim_size: Optional[int],
         reduce: str, op: str):
    dim = index.dim() - 1
    idx, d, size = _prepare(src, index, dim, out, dim_size, op)
    return _reduce(src, idx, d, out, size, reduce, op)


def _csr_index(indptr: Tensor, length: int, op: str) -> Tensor:
    """The segment of each of ``length`` positions; ``len(indptr) - 1`` outside any."""
    if indptr.dim() != 1:
        raise static.StaticSizeError(
            f"{op} inside a wrapped forward takes a 1-D indptr (got shape {tuple(indptr.shape)}); "
            f"use torch_scatter.scatter with an index vector instead")
    pos = torch.arange(length, device=indptr.device, dtype=indptr.dtype)
    seg = torch.searchsorted(indptr, pos, right=True) - 1
    trash = indptr.size(0) - 1
    return torch.where((seg < 0) | (seg >= trash), torch.full_like(seg, trash), seg)


def _csr(src: Tensor, indptr: Tensor, out: Optional[Tensor], reduce: str, op: str):
    dim = indptr.dim() - 1
    groups = indptr.size(-1) - 1
    seg = _csr_index(indptr, src.size(dim), op)
    idx = _broadcast(seg, src, dim)
    # one extra slot collects positions outside every segment, then is dropped
    extra = None if out is None else torch.cat([out, out.narrow(dim, 0, 1)], dim=dim)
    res = _reduce(src, idx, dim, extra, groups + 1, reduce, op)
    if isinstance(res, tuple):
        return tuple(r.narrow(dim, 0, groups) for r in res)
    return res.narrow(dim, 0, groups)


def _coo_fn(name: str, reduce: str) -> Callable:
    orig = getattr(torch_scatter, name)

    def fn(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
           dim_size: Optional[int] = None):
        if static.current_frame() is None:
            return orig(src, index, out, dim_size)
        return _coo(src, index, out, dim_size, reduce, f"torch_scatter.{name}")

    fn.__name__ = fn.__qualname__ = name
    fn.__wrapped__ = orig  # type: ignore[attr-defined]
    return fn


def _csr_fn(name: str, reduce: str) -> Callable:
    orig = getattr(torch_scatter, name)

    def fn(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None):
        if static.current_frame() is None:
            return orig(src, indptr, out)
        return _csr(src, indptr, out, reduce, f"torch_scatter.{name}")

    fn.__name__ = fn.__qualname__ = name
    fn.__wrapped__ = orig  # type: ignore[attr-defined]
    return fn


def _segment_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None,
                 dim_size: Optional[int] = None, reduce: str = "sum"):
    if static.current_frame() is None:
        return ORIGINALS["segment_coo"](src, index, out, dim_size, reduce)
    res = _coo(src, index, out, dim_size, reduce, "torch_scatter.segment_coo")
    return res[0] if isinstance(res, tuple) else res


def _segment_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None,
                 reduce: str = "sum"):
    if static.current_frame() is None:
        return ORIGINALS["segment_csr"](src, indptr, out, reduce)
    res = _csr(src, indptr, out, reduce, "torch_scatter.segment_csr")
    return res[0] if isinstance(res, tuple) else res


def _gather_coo(src: Tensor, index: Tensor, out: Optional[Tensor] = None) -> Tensor:
    if static.current_frame() is None:
        return ORIGINALS["gather_coo"](src, index, out)
    dim = index.dim() - 1
    shape = list(src.shape)
    shape[dim] = index.size(-1)
    idx = index
    while idx.dim() < src.dim():
        idx = idx.unsqueeze(-1)
    return src.gather(dim, idx.expand(shape))


def _gather_rows(frame, indptr: Tensor, op: str) -> int:
    groups = indptr.size(0) - 1
    if groups == frame["G"] and frame["N"] is not None:
        return frame["N"]
    if groups == frame["N"] and frame["E"] is not None:
        return frame["E"]
    raise static.StaticSizeError(
        f"{op}: the output length is indptr[-1] (data-dependent); indptr has {groups + 1} "
        f"entries, neither G + 1 = {frame['G'] + 1} nor N + 1 (budget). Pass out= of the "
        f"right size")


def _gather_csr(src: Tensor, indptr: Tensor, out: Optional[Tensor] = None) -> Tensor:
    frame = static.current_frame()
    if frame is None:
        return ORIGINALS["gather_csr"](src, indptr, out)
    op = "torch_scatter.gather_csr"
    dim = indptr.dim() - 1
    rows = out.size(dim) if out is not None else _gather_rows(frame, indptr, op)
    seg = _csr_index(indptr, rows, op)
    inside = seg < indptr.size(0) - 1
    picked = src.index_select(dim, seg.clamp(max=max(src.size(dim) - 1, 0)))
    shape = [1] * src.dim()
    shape[dim] = -1
    fill = out if out is not None else torch.zeros_like(picked)
    return torch.where(inside.view(shape), picked, fill)


# --------------------------------------------------------------------------
# The table static.install reads
# --------------------------------------------------------------------------
ORIGINALS: Dict[str, Callable] = {}
REPLACEMENTS: Dict[str, Callable] = {}


def _register(name: str, fn: Callable) -> None:
    ORIGINALS[name] = getattr(torch_scatter, name)
    REPLACEMENTS[name] = fn
    fn.__wrapped__ = ORIGINALS[name]  # type: ignore[attr-defined]


if torch_scatter is not None:
    for _name, _body in (("scatter_sum", _sum), ("scatter_add", _sum), ("scatter_mul", _mul),
                         ("scatter_mean", _mean)):
        _register(_name, _scatter_fn(_name, _body))
    _register("scatter_max", _scatter_fn("scatter_max", lambda s, i, d, o, n: _arg(s, i, d, o, n, "amax")))
    _register("scatter_min", _scatter_fn("scatter_min", lambda s, i, d, o, n: _arg(s, i, d, o, n, "amin")))
    for _name, _fn in (("scatter", _scatter), ("scatter_std", _std),
                       ("scatter_logsumexp", _logsumexp), ("scatter_softmax", _softmax),
                       ("scatter_log_softmax", _log_softmax), ("segment_coo", _segment_coo),
                       ("segment_csr", _segment_csr), ("gather_coo", _gather_coo),
                       ("gather_csr", _gather_csr)):
        _register(_name, _fn)
    for _red in ("sum", "add", "mean", "min", "max"):
        _register(f"segment_{_red}_coo", _coo_fn(f"segment_{_red}_coo", _red))
        _register(f"segment_{_red}_csr", _csr_fn(f"segment_{_red}_csr", _red))


#: the top-level packages scanned for imported copies (none without torch_scatter)
SCAN_PREFIXES = MODULE_PREFIXES if torch_scatter is not None else ()
