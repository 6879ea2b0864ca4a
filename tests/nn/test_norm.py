"""graph_adapter/nn/norm.py inside a wrapped eager forward: the zero rows shared by the
norms of one forward, and the op counter's observer mode (issue 14 item 2).

The masked batch norm's eager path (real rows first: torch's BatchNorm on
``x[:n]``, then zero rows appended) shares one tensor of zero rows per shape
among the norms of a forward (``_zero_rows``). These tests hold every norm's
output, in a model with several of them on node and graph rows, to: padding
rows exactly zero, real rows equal to ``BatchNorm1d`` on the unpadded batch,
gradients likewise.
"""
import copy

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode
from torch_geometric.data import Batch
from torch_geometric.nn import global_add_pool

from graph_adapter.nn import norm as N
from graph_adapter.nn import ipu_wrap

from _padding import pad_batch, random_graphs


class _TwoLevels(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.bn1 = torch.nn.BatchNorm1d(3)
        self.bn2 = torch.nn.BatchNorm1d(3)
        self.bng = torch.nn.BatchNorm1d(3)

    def forward(self, x, batch):
        h = self.bn2(self.bn1(self.lin(x)).relu() + 1.0)
        return self.bng(global_add_pool(h, batch))


def _outputs(model, call):
    seen = {}
    hooks = [getattr(model, n).register_forward_hook(
        lambda m, i, o, n=n: seen.__setitem__(n, o)) for n in ("bn1", "bn2", "bng")]
    try:
        out = call()
    finally:
        for h in hooks:
            h.remove()
    return out, seen


def test_every_norm_of_a_forward_pads_with_zeros_and_matches_batchnorm():
    graphs = random_graphs(torch.Generator().manual_seed(3), 5)
    b = Batch.from_data_list(graphs)
    flat = pad_batch(graphs, b.num_nodes + 4, b.edge_index.size(1) + 2, b.num_graphs + 3)
    torch.manual_seed(0)
    model = _TwoLevels().double()
    ref_model = copy.deepcopy(model)
    w = ipu_wrap(model).train()
    flat = {k: v.double() if v.is_floating_point() else v for k, v in flat.items()}
    x = flat["x"].clone().requires_grad_()
    out, seen = _outputs(model, lambda: w({**flat, "x": x})["output"])
    xr = b.x.double().clone().requires_grad_()
    ref, ref_seen = _outputs(ref_model, lambda: ref_model(xr, b.batch))
    n, g = b.num_nodes, b.num_graphs
    for name, rows in (("bn1", n), ("bn2", n), ("bng", g)):
        o = seen[name]
        assert torch.equal(o[rows:], torch.zeros_like(o[rows:])), name
        torch.testing.assert_close(o[:rows], ref_seen[name])
    weights = torch.randn(out[:g].shape, dtype=torch.float64)
    (out[:g] * weights).sum().backward()
    (ref * weights).sum().backward()
    torch.testing.assert_close(x.grad[:n], xr.grad)
    assert torch.equal(x.grad[n:], torch.zeros_like(x.grad[n:]))
    for (k, p), (_, q) in zip(model.named_parameters(), ref_model.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=k)


def test_zero_rows_shared_per_frame_and_shape():
    y = torch.randn(3, 2)
    frame = {}
    a = N._zero_rows(4, y, frame)
    assert torch.equal(a, torch.zeros(4, 2)) and N._zero_rows(4, y, frame) is a
    assert N._zero_rows(5, y, frame).shape == (5, 2)
    assert N._zero_rows(4, y.double(), frame).dtype == torch.float64
    assert N._zero_rows(4, y, None) is not a


class _Watch(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _Observer(_Watch):
    observes_only = True


def test_an_observing_dispatch_mode_keeps_the_eager_path():
    x = torch.randn(6, 3)
    assert N.eager_ok(x)
    with _Observer():
        assert N.eager_ok(x)
    with _Watch():  # any other mode may be a tracer (make_fx, fake): masked math
        assert not N.eager_ok(x)


def _autograd_masked_bn(x, real, w, b, eps):
    """The masked math of the traced path, differentiated by autograd (the reference)."""
    red = [0] + list(range(2, x.dim()))
    cshape = [1, -1] + [1] * (x.dim() - 2)
    m = real.to(x.dtype)
    count = m.sum() * (x[0, 0].numel())
    cc = count.clamp(min=1.0)
    mean = (x * m).sum(dim=red) / cc
    c = x - mean.view(cshape)
    var = (c * c * m).sum(dim=red) / cc
    out = c * torch.rsqrt(var + eps).view(cshape)
    if w is not None:
        out = out * w.view(cshape) + b.view(cshape)
    return torch.where(real, out, 0.0)


@given(rows=st.integers(1, 12), channels=st.integers(1, 4), length=st.sampled_from([0, 2]),
       affine=st.booleans(), seed=st.integers(0, 2**16))
@settings(max_examples=40, deadline=None)
def test_closed_form_backward_is_the_derivative_of_the_masked_math(rows, channels, length,
                                                                   affine, seed):
    """``_MaskedBatchNorm`` (the compiled path): outputs equal the masked math, and its
    hand-written backward equals autograd's derivative of that math, for any mask
    (none real, one, all), 2-d and 3-d, with and without affine parameters (float64),
    and passes ``gradcheck`` (a second derivative too)."""
    g = torch.Generator().manual_seed(seed)
    shape = (rows, channels) + ((length,) if length else ())
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * 3 + 1).requires_grad_()
    real = (torch.rand(rows, generator=g) < 0.7).view((-1,) + (1,) * (len(shape) - 1))
    w = (torch.rand(channels, generator=g, dtype=torch.float64) + 0.5).requires_grad_() \
        if affine else None
    b = torch.randn(channels, generator=g, dtype=torch.float64).requires_grad_() \
        if affine else None
    out, mean, var, count = N._MaskedBatchNorm.apply(x, real, w, b, 1e-5)
    ref = _autograd_masked_bn(x, real, w, b, 1e-5)
    torch.testing.assert_close(out, ref)
    assert int(count) == int(real.sum()) * (length or 1)
    assert not (mean.requires_grad or var.requires_grad or count.requires_grad)
    up = torch.randn(shape, generator=g, dtype=torch.float64)
    inputs = [t for t in (x, w, b) if t is not None]
    got = torch.autograd.grad((out * up).sum(), inputs)
    want = torch.autograd.grad((ref * up).sum(), inputs)
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e)
    assert torch.equal(got[0][~real.expand(shape)], torch.zeros_like(got[0][~real.expand(shape)]))
    if int(real.sum()) > 1:
        fn = lambda *t: N._MaskedBatchNorm.apply(t[0], real, *(t[1:] if affine else (None, None)),
                                                 1e-5)[0]
        assert torch.autograd.gradcheck(fn, tuple(inputs))
        assert torch.autograd.gradgradcheck(fn, tuple(inputs))
