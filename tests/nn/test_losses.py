"""The masked losses (graph_adapter/nn/losses.py) after the op cuts of issue 14 item 2.

The losses were rewritten to dispatch fewer ATen ops (one ``where`` on the
difference for MSE/L1, a 0-d zero instead of ``zeros_like``, ``t == t`` as the
NaN test). The differential property test holds them to the implementation
before the cuts (``_before_*`` below, verbatim but for names): the same loss
and the same gradient, bit for bit, on random predictions, targets with NaN
anywhere, masks of any pattern, several shapes and both float dtypes. The
other test holds them to ``torch.nn.functional`` on the real, non-NaN
elements (float64).
"""
from typing import Callable, Optional

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import Tensor

from graph_adapter.nn import (masked_bce_with_logits, masked_cross_entropy, masked_l1_loss,
                              masked_mean, masked_mse_loss)


# --------------------------------------------------------------------------
# The implementation before the cuts (commit 897da4f), the reference
# --------------------------------------------------------------------------
def _before_expand(mask: Tensor, like: Tensor) -> Tensor:
    mask = mask.bool()
    return mask.view(mask.shape + (1,) * (like.dim() - mask.dim())).expand_as(like)


def _before_mean(values: Tensor, mask: Optional[Tensor] = None) -> Tensor:
    if mask is None:
        return values.mean()
    m = _before_expand(mask, values)
    total = torch.where(m, values, torch.zeros_like(values)).sum()
    return total / m.sum().clamp(min=1).to(values.dtype)


def _before_valid(target: Tensor, mask: Optional[Tensor], like: Tensor) -> Tensor:
    valid = torch.ones_like(like, dtype=torch.bool) if mask is None else _before_expand(mask, like)
    if target.is_floating_point():
        valid = valid & ~torch.isnan(target.expand_as(like))
    return valid


def _before_elementwise(fn: Callable, pred: Tensor, target: Tensor,
                        mask: Optional[Tensor]) -> Tensor:
    target = target.to(pred.dtype).view_as(pred) if target.numel() == pred.numel() else target
    valid = _before_valid(target, mask, pred)
    safe_target = torch.where(valid, target.expand_as(pred), torch.zeros_like(pred))
    safe_pred = torch.where(valid, pred, torch.zeros_like(pred))
    loss = fn(safe_pred, safe_target)
    loss = torch.where(valid, loss, torch.zeros_like(loss))
    return loss.sum() / valid.sum().clamp(min=1).to(pred.dtype)


def _before_cross_entropy(logits, target, mask=None, ignore_index=-100):
    target = target.view(-1).long()
    valid = target != ignore_index
    if mask is not None:
        valid = valid & mask.bool().view(-1)
    safe = torch.where(valid, target, torch.zeros_like(target))
    loss = F.cross_entropy(logits, safe, reduction="none")
    loss = torch.where(valid, loss, torch.zeros_like(loss))
    return loss.sum() / valid.sum().clamp(min=1).to(logits.dtype)


_BEFORE = {
    "mse": lambda p, t, m: _before_elementwise(lambda a, b: (a - b) ** 2, p, t, m),
    "l1": lambda p, t, m: _before_elementwise(lambda a, b: (a - b).abs(), p, t, m),
    "bce": lambda p, t, m: _before_elementwise(
        lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction="none"), p, t, m),
}
_NOW = {"mse": masked_mse_loss, "l1": masked_l1_loss, "bce": masked_bce_with_logits}


@st.composite
def _cases(draw):
    rows = draw(st.integers(1, 9))
    shape = draw(st.sampled_from(["R", "R1", "R2"]))
    pshape = {"R": (rows,), "R1": (rows, 1), "R2": (rows, 2)}[shape]
    # a target of pred's numel in another shape ([R] for [R, 1]) is viewed as pred;
    # [R, 1] against [R, 2] broadcasts
    tshape = draw(st.sampled_from([pshape, (rows,) if shape == "R1" else pshape]
                                  + ([(rows, 1)] if shape == "R2" else [])))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    pred = torch.randn(pshape, generator=g, dtype=dtype)
    target = torch.randn(tshape, generator=g, dtype=dtype)
    nan = torch.rand(tshape, generator=g) < draw(st.sampled_from([0.0, 0.3, 1.0]))
    target = torch.where(nan, torch.full_like(target, float("nan")), target)
    mask = draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=rows, max_size=rows)))
    return pred, target, None if mask is None else torch.tensor(mask)


def _loss_and_grad(fn, pred, target, mask):
    p = pred.clone().requires_grad_()
    loss = fn(p, target, mask)
    loss.backward()
    return loss.detach(), p.grad


@given(_cases(), st.sampled_from(["mse", "l1", "bce"]))
def test_same_loss_and_gradient_as_before_bit_for_bit(case, kind):
    pred, target, mask = case
    if kind == "bce":  # targets in [0, 1] (NaN kept)
        target = torch.where(torch.isnan(target), target, (target > 0).to(target.dtype))
    before = _loss_and_grad(_BEFORE[kind], pred, target, mask)
    now = _loss_and_grad(_NOW[kind], pred, target, mask)
    assert now[0].dtype == before[0].dtype and now[1].dtype == before[1].dtype
    torch.testing.assert_close(now[0], before[0], rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(now[1], before[1], rtol=0, atol=0)
    assert torch.isfinite(now[1]).all()


@given(st.integers(1, 9), st.integers(2, 4), st.integers(0, 2**31 - 1),
       st.sampled_from([None, 0, 1]))
def test_cross_entropy_and_mean_as_before_bit_for_bit(rows, classes, seed, ignore_at):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, classes, generator=g, dtype=torch.float64)
    target = torch.randint(0, classes, (rows,), generator=g)
    if ignore_at is not None and ignore_at < rows:
        target[ignore_at] = -100
    mask = torch.rand(rows, generator=g) < 0.7
    for m in (None, mask):
        before = _loss_and_grad(_before_cross_entropy, logits, target, m)
        now = _loss_and_grad(masked_cross_entropy, logits, target, m)
        torch.testing.assert_close(now[0], before[0], rtol=0, atol=0, equal_nan=True)
        torch.testing.assert_close(now[1], before[1], rtol=0, atol=0)
        values = logits.clone()
        torch.testing.assert_close(masked_mean(values, m), _before_mean(values, m),
                                   rtol=0, atol=0, equal_nan=True)


@given(_cases(), st.sampled_from(["mse", "l1", "bce"]))
def test_equals_torch_on_real_non_nan_elements(case, kind):
    pred, target, mask = case
    pred, target = pred.double(), target.double()
    if kind == "bce":
        target = torch.where(torch.isnan(target), target, (target > 0).double())
    t = target.view_as(pred) if target.numel() == pred.numel() else target.expand_as(pred)
    keep = ~torch.isnan(t)
    if mask is not None:
        keep = keep & mask.view(mask.shape + (1,) * (pred.dim() - 1)).expand_as(pred)
    ref = {"mse": F.mse_loss, "l1": F.l1_loss, "bce": F.binary_cross_entropy_with_logits}[kind]
    loss = _NOW[kind](pred, target, mask)
    if keep.any():
        torch.testing.assert_close(loss, ref(pred[keep], t[keep]))
    else:  # nothing real: 0 / 1
        assert loss.item() == 0.0


def test_padding_nan_never_reaches_the_gradient():
    pred = torch.randn(5, 1, requires_grad=True)
    target = torch.tensor([1.0, float("nan"), 2.0, float("nan"), float("nan")])
    mask = torch.tensor([True, True, True, False, False])
    for fn in (masked_mse_loss, masked_l1_loss, masked_bce_with_logits):
        pred.grad = None
        fn(pred, target, mask).backward()
        assert torch.isfinite(pred.grad).all()
        assert (pred.grad[[1, 3, 4]] == 0).all()


def test_loss_of_a_target_in_another_dtype_is_in_pred_dtype():
    # [R, 1] target against [R, 2] pred (broadcast) in float64, pred float32: the
    # loss is float32 now, as when the target has pred's numel (before: float64)
    pred = torch.randn(3, 2)
    target = torch.randn(3, 1, dtype=torch.float64)
    assert masked_mse_loss(pred, target, torch.ones(3, dtype=torch.bool)).dtype == torch.float32
    with pytest.raises(RuntimeError):
        masked_l1_loss(torch.randn(3, 2), torch.randn(4, 2))


def test_masked_loss_pickles_with_the_wrapped_model():
    """Lightning's ddp_spawn pickles the module: the loss must not be a closure."""
    import pickle

    from graph_adapter.nn import masked_loss

    for kind, level in (("mse", "graph"), ("cross_entropy", "node"), ("l1", "edge")):
        fn = pickle.loads(pickle.dumps(masked_loss(kind, level=level, output_key=0)))
        assert fn.__name__ == f"masked_{kind}" and repr(fn).startswith(f"masked_{kind}(")
    pred, y = torch.randn(4, 1), torch.randn(4, 1)
    batch = {"y": y, "graph_mask": torch.tensor([True, True, False, True])}
    fn = pickle.loads(pickle.dumps(masked_loss("mse")))
    assert torch.equal(fn(pred, batch), ((pred - y)[batch["graph_mask"]] ** 2).mean())
