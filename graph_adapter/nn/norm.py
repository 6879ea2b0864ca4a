"""Normalisation layers that pool statistics over real rows only.

In ``train()`` a BatchNorm computes its batch mean and variance over every
row, padding included, so a padded batch would give different outputs and
running statistics than the unpadded one. :func:`mask_norms` swaps, in
place, the class of every ``torch.nn.BatchNorm1d`` of a model (PyG's
``torch_geometric.nn.norm.BatchNorm`` wraps one, so it is covered) for
:class:`MaskedBatchNorm1d`: same parameters, buffers, hooks and
``state_dict`` keys, so checkpoints load both ways.

Inside an ``ipu_wrap``-ped forward (a frame of :mod:`graph_adapter.nn.static` is
active) and in ``train()`` mode, :class:`MaskedBatchNorm1d` takes the mask
whose length equals the row count (``node_mask`` for ``N`` rows,
``graph_mask`` for ``G``, ``edge_mask`` for ``E``; a :class:`~graph_adapter.batching.budget.Budget`
never has two equal counts, so only a flat dict made by hand can tie: then the
node or graph mask wins over the edge mask) and computes the batch
statistics over the real rows only; the running statistics are updated as
torch does (momentum, or a cumulative average when ``momentum=None``;
unbiased variance), except that a batch with no real row (a fully padded fill
batch) leaves them and ``num_batches_tracked`` untouched. Padding rows come
out as zeros (zero gradient). In eager mode, when the mask is a prefix (``FixedSizeLoader`` puts real rows first),
it runs torch's fused batch norm on the real rows (see
:func:`masked_batch_norm`). Outside a frame, or in ``eval()``, it is exactly
``BatchNorm1d``.

PyG norms that compute a per-graph size themselves (``GraphNorm``,
``InstanceNorm``, ``LayerNorm(mode="graph")``, ``PairNorm``,
``MeanSubtractionNorm``) get the static ``batch_size`` from the frame when
they are called with the batch vector and no ``batch_size``.
"""
from __future__ import annotations

from typing import Any, Iterator, List, Optional, Tuple

import torch
from torch import Tensor, nn

from . import static
from ..format import mask_of_rows
from ..format.torch_internals import BatchNormBase, current_dispatch_mode

__all__ = ["MaskedBatchNorm1d", "mask_norms", "unmask_norms", "plain_class",
           "masked_batch_norm", "real_prefix"]


def _row_mask(rows: int, op: str) -> Optional[Tensor]:
    """The mask of the padded batch whose length is ``rows`` (None outside a frame).

    The level is picked by :func:`graph_adapter.format.keys.mask_of_rows`. A
    ``Budget`` never ties two counts; in a flat dict made by hand an
    edge-level tie loses (node- and graph-level norms are the common ones)
    and a node/graph tie is an error.
    """
    frame = static.current_frame()
    if frame is None:
        return None
    cache = frame.setdefault("_row_mask", {})  # the norms of a forward share their row counts
    hit = cache.get(rows)
    if hit is not None:
        return hit
    mask, levels = mask_of_rows(rows, frame["masks"])
    if mask is None:
        raise static.StaticSizeError(
            f"{op}: input has {rows} rows, which matches no mask of the padded batch "
            f"(nodes, graphs, edges); BatchNorm statistics would include padding rows. "
            f"Normalise node-, graph- or edge-level tensors only, or use eval()."
        )
    if "node" in levels and "graph" in levels:
        raise static.StaticSizeError(
            f"{op}: input has {rows} rows and the padded batch has as many nodes as graph "
            f"slots, so it cannot tell node rows from graph rows; choose a budget where "
            f"they differ."
        )
    cache[rows] = mask
    return mask


def eager_ok(x: Tensor) -> bool:
    """Plain eager execution on real data: a host sync is allowed and means something."""
    if torch.compiler.is_compiling() or torch.jit.is_tracing() or torch.jit.is_scripting():
        return False
    if type(x) not in (Tensor, nn.Parameter) or x.device.type not in ("cpu", "cuda"):
        return False  # FakeTensor, FunctionalTensor, meta, IPU, ... (tracing)
    # no make_fx / fake mode active; a mode that only watches the ops (the op
    # counter of benchmarks/harness/opcount.py) leaves them real
    mode = current_dispatch_mode()
    return mode is None or getattr(mode, "observes_only", False) is True


def real_prefix(mask: Tensor, frame: Optional[dict] = None) -> Optional[int]:
    """``n`` if ``mask`` is ``n`` True values followed by False ones, else ``None``.

    FixedSizeLoader puts real rows first, so its masks are prefixes. Two host
    syncs; cached in ``frame`` (one look per mask and wrapped forward).
    """
    cache = frame.setdefault("_prefix", {}) if frame is not None else None
    if cache is not None:
        hit = cache.get(id(mask))
        if hit is not None and hit[0] is mask:
            return hit[1]
    n = int(mask.sum())
    ok: Optional[int] = n if n == 0 or bool(mask[:n].all()) else None
    if cache is not None:
        cache[id(mask)] = (mask, ok)
    return ok


def _zero_rows(rows: int, like: Tensor, frame: Optional[dict]) -> Tensor:
    """``rows`` zero rows shaped like ``like``'s, one tensor per frame and shape:
    the norms of a forward share it (``cat`` only reads it, nothing else sees it)."""
    shape = (rows,) + tuple(like.shape[1:])
    if frame is None:
        return like.new_zeros(shape)
    cache = frame.setdefault("_zero_rows", {})
    key = (shape, like.dtype, like.device)
    z = cache.get(key)
    if z is None:
        z = cache[key] = like.new_zeros(shape)
    return z


def _update_running_stats(bn: BatchNormBase, mean: Tensor, var: Tensor,
                          count: Tensor) -> None:
    """Running statistics as torch updates them (momentum or cumulative average, unbiased).

    A batch with no real row (``count == 0``: a fully padded fill batch) moves
    nothing, not even ``num_batches_tracked``: the update factor is zero there
    (``torch.where``, no host sync, so it traces), and ``x * 1 + 0`` leaves
    the buffers bit-identical.
    """
    if not (bn.track_running_stats and bn.running_mean is not None):
        return
    with torch.no_grad():
        real = (count > 0).to(mean.dtype)  # 0-d: 1.0 if any real row, else 0.0
        if bn.num_batches_tracked is not None:
            bn.num_batches_tracked.add_(real.to(bn.num_batches_tracked.dtype))
        if bn.momentum is None:
            factor = real / bn.num_batches_tracked.to(mean.dtype).clamp(min=1.0)
        else:
            factor = real * bn.momentum
        unbiased = var.detach() * count / (count - 1).clamp(min=1.0)
        bn.running_mean.mul_(1 - factor).add_(mean.detach() * factor)
        bn.running_var.mul_(1 - factor).add_(unbiased * factor)


def _stats_shapes(x: Tensor) -> Tuple[List[int], List[int], int]:
    """``(reduce_dims, channel_shape, per_row)`` of a ``[R, C]`` or ``[R, C, L]`` input."""
    per_row = 1
    for d in range(2, x.dim()):
        per_row *= x.size(d)
    return [0] + list(range(2, x.dim())), [1, -1] + [1] * (x.dim() - 2), per_row


class _MaskedBatchNorm(torch.autograd.Function):
    """Training-mode batch norm over the rows where ``real`` (a bool ``[R, 1, ...]``), with
    its backward in closed form (the compiled path of :func:`masked_batch_norm`).

    ``forward(x, real, weight, bias, eps) -> (out, mean, var, count)``: ``out`` is 0 on
    padding rows; ``mean``, ``var`` (biased) and ``count`` (real rows x per-row
    positions) feed the running statistics and carry no gradient. The backward is
    BatchNorm's, ``dx = w * rstd * (dy - mean(dy) - xhat * mean(dy * xhat))`` over the
    real rows (0 on padding rows), with ``dw = sum(dy * xhat)`` and ``db = sum(dy)``:
    inductor fuses it into one loop with two sums and one pointwise pass. Autograd's
    derivative of the forward math instead differentiates through the mean and the
    variance: two more passes over ``[R, C]`` per norm (GIN 4 x 128: 0.5 ms of a
    17 ms training step, ``docs/benchmarks.md``). The backward is written in
    differentiable ops, with the statistics recomputed from ``x`` under
    ``create_graph=True``, so a second derivative works too.
    """

    @staticmethod
    def forward(x: Tensor, real: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                eps: float) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        reduce_dims, cshape, per_row = _stats_shapes(x)
        m = real.to(x.dtype)
        count = m.sum() * per_row
        count_c = count.clamp(min=1.0)
        mean = (x * m).sum(dim=reduce_dims) / count_c
        centered = x - mean.view(cshape)
        var = (centered * centered * m).sum(dim=reduce_dims) / count_c
        scale = torch.rsqrt(var + eps)
        if weight is not None:
            out = torch.addcmul(bias.view(cshape), centered, (scale * weight).view(cshape))
        else:
            out = centered * scale.view(cshape)
        return torch.where(real, out, 0.0), mean, var, count

    @staticmethod
    def setup_context(ctx: Any, inputs: Tuple[Any, ...], output: Tuple[Tensor, ...]) -> None:
        x, real, weight, bias, eps = inputs
        _, mean, var, count = output
        ctx.mark_non_differentiable(mean, var, count)
        ctx.eps = eps
        ctx.has_bias = bias is not None
        ctx.save_for_backward(x, real, weight, mean, var, count)

    @staticmethod
    def backward(ctx: Any, grad: Tensor, *_: Any) -> Tuple[Optional[Tensor], ...]:
        x, real, weight, mean, var, count = ctx.saved_tensors
        reduce_dims, cshape, _ = _stats_shapes(x)
        count_c = count.clamp(min=1.0)
        if torch.is_grad_enabled():
            # a differentiable backward (create_graph=True): the statistics as functions
            # of x again, so that the second derivative sees them depend on it
            m = real.to(x.dtype)
            mean = (x * m).sum(dim=reduce_dims) / count_c
            centered = x - mean.view(cshape)
            var = (centered * centered * m).sum(dim=reduce_dims) / count_c
        rstd = torch.rsqrt(var + ctx.eps)
        grad = torch.where(real, grad, 0.0)
        xhat = (x - mean.view(cshape)) * rstd.view(cshape)
        dbias = grad.sum(dim=reduce_dims)
        dweight = (grad * xhat).sum(dim=reduce_dims)
        scale = rstd if weight is None else rstd * weight
        dx = None
        if ctx.needs_input_grad[0]:
            dx = torch.where(real, scale.view(cshape) * (grad - (dbias / count_c).view(cshape)
                                                          - xhat * (dweight / count_c).view(cshape)),
                             0.0)
        dw = dweight if weight is not None and ctx.needs_input_grad[2] else None
        db = dbias if ctx.has_bias and ctx.needs_input_grad[3] else None
        return dx, None, dw, db, None


def masked_batch_norm(x: Tensor, mask: Tensor, bn: BatchNormBase,
                      frame: Optional[dict] = None) -> Tensor:
    """Training-mode batch norm of ``x`` ([R, C] or [R, C, L]) over rows where ``mask``.

    Rows where ``mask`` is False (padding) come out as zeros, with zero gradient.

    * Eager, on real tensors, when the mask is a prefix (``FixedSizeLoader``'s
      layout) of more than one row: torch's fused batch norm on the real rows
      ``x[:n]`` (``BatchNorm1d.forward`` itself, so outputs, gradients and
      running statistics are torch's), padded with zero rows.
    * Compiled (``torch.compile``, ``torch.export``): :class:`_MaskedBatchNorm`,
      two-pass statistics written as masked sums (inductor fuses each pass into
      one loop) and BatchNorm's closed-form backward.
    * Otherwise (traced by poptorch or ``make_fx``, fake tensors, a non-prefix
      mask in eager): the same masked math, differentiated by autograd.
    """
    if eager_ok(x) and x.dim() >= 2:
        n = real_prefix(mask, frame)
        if n is not None and n > 1:
            y = BatchNormBase.forward(bn, x[:n])
            if n == x.size(0):
                return y
            return torch.cat([y, _zero_rows(x.size(0) - n, y, frame)])
    shape = [-1] + [1] * (x.dim() - 1)
    m = mask.to(x.dtype).view(shape)
    mb = mask.view(shape) if mask.dtype == torch.bool else m != 0
    if torch.compiler.is_compiling():
        out, mean, var, count = _MaskedBatchNorm.apply(
            x, mb, bn.weight if bn.affine else None, bn.bias if bn.affine else None, bn.eps)
        _update_running_stats(bn, mean, var, count)
        return out
    reduce_dims, cshape, per_row = _stats_shapes(x)
    count = m.sum() * per_row
    count_c = count.clamp(min=1.0)
    if x.dim() == 2:
        # eager: reductions over rows as [1, R] @ [R, C] products (one pass each)
        mrow = m.view(1, -1)
        mean = (mrow @ x).view(-1) / count_c
        centered = x - mean
        var = (mrow @ (centered * centered)).view(-1) / count_c
    else:
        mean = (x * m).sum(dim=reduce_dims) / count_c
        centered = x - mean.view(cshape)
        var = (centered * centered * m).sum(dim=reduce_dims) / count_c
    _update_running_stats(bn, mean, var, count)
    scale = torch.rsqrt(var + bn.eps)
    if bn.affine:
        out = torch.addcmul(bn.bias.view(cshape), centered, (scale * bn.weight).view(cshape))
    else:
        out = centered * scale.view(cshape)
    return torch.where(mb, out, 0.0)


class _PicklesAsPlain:
    """Mixin: pickled (``torch.save``, ``copy.deepcopy``) as the plain class it
    stands in for. A model saved after training through ``ipu_wrap`` then loads
    where graph_adapter is not installed, as the model the user built; an
    ``IPUWrapped`` masks its model's norms again when it is itself unpickled."""

    def __reduce_ex__(self, protocol: Any) -> Any:
        out = list(super().__reduce_ex__(protocol))  # type: ignore[misc]
        # object.__new__(plain class), then the state: pickle refuses copyreg's
        # __newobj__ with a class other than the object's own
        out[0], out[1] = object.__new__, (plain_class(type(self)),)
        return tuple(out)


class MaskedBatchNorm1d(_PicklesAsPlain, nn.BatchNorm1d):
    """``BatchNorm1d`` whose training statistics skip padding rows (see module doc)."""

    def forward(self, x: Tensor) -> Tensor:
        use_batch = self.training or not self.track_running_stats
        if use_batch and static.current_frame() is not None:
            mask = _row_mask(x.size(0), "BatchNorm1d")
            if mask is not None:
                return masked_batch_norm(x, mask, self, static.current_frame())
        return super().forward(x)


class _BatchSizeFromFrame:
    """Mixin: fill ``batch_size`` from the frame when called with the batch vector."""

    def forward(self, x: Tensor, batch: Optional[Tensor] = None, batch_size: Optional[int] = None,
                *args, **kwargs):
        frame = static.current_frame()
        if batch is not None and batch_size is None and frame is not None:
            batch_size = static.index_size(frame, batch, type(self).__name__, "batch_size")
        return super().forward(x, batch, batch_size, *args, **kwargs)


_SWAPPED: dict = {}


_PLAIN: dict = {MaskedBatchNorm1d: nn.BatchNorm1d}  # stand-in class -> the class it stands in for


def _batch_size_class(cls: type) -> type:
    new = _SWAPPED.get(cls)
    if new is None:
        new = type(cls.__name__, (_PicklesAsPlain, _BatchSizeFromFrame, cls),
                   {"__module__": cls.__module__, "__qualname__": cls.__qualname__})
        _SWAPPED[cls] = new
        _PLAIN[new] = cls
    return new


def plain_class(cls: type) -> type:
    """The class a stand-in of :func:`mask_norms` stands in for (``cls`` itself if none)."""
    return _PLAIN.get(cls, cls)


def unmask_norms(model: nn.Module) -> int:
    """Undo :func:`mask_norms`: every stand-in of ``model`` back to its plain class, in
    place (parameters, buffers and hooks untouched). Returns how many were changed."""
    changed = 0
    for m in model.modules():
        plain = plain_class(type(m))
        if plain is not type(m):
            m.__class__ = plain
            changed += 1
    return changed


def _batch_size_norms() -> tuple:
    import torch_geometric.nn.norm as N

    out = []
    for name in ("GraphNorm", "InstanceNorm", "LayerNorm", "PairNorm", "MeanSubtractionNorm"):
        cls = getattr(N, name, None)
        if cls is not None:
            out.append(cls)
    return tuple(out)


def _modules_of(model: nn.Module) -> Iterator[nn.Module]:
    """``model.modules()``, past children that are not modules: the stubs torch puts in
    a precompiled entry's guard state for submodules no guard reads (an unpickled
    wrapper masks its norms again, and PyG's ``GIN`` has such children there)."""
    yield model
    for _, child in model.named_children():
        if isinstance(child, nn.Module):
            yield from _modules_of(child)


def mask_norms(model: nn.Module) -> int:
    """Swap, in place, the class of the model's batch-pooling norms (see module doc).

    Returns how many modules were swapped. Idempotent.
    """
    swapped = 0
    fixed = _batch_size_norms()
    for m in _modules_of(model):
        if type(m) is nn.BatchNorm1d:
            m.__class__ = MaskedBatchNorm1d
            swapped += 1
        elif type(m) in fixed:
            m.__class__ = _batch_size_class(type(m))
            swapped += 1
    return swapped
