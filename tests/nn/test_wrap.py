"""ipu_wrap: inputs, output keys, micro-batch dim, masks, unpad, losses, norms."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GCN, GIN, global_add_pool
from torch_geometric.nn.norm import BatchNorm

from graph_adapter.nn import (masked_bce_with_logits, masked_cross_entropy, masked_l1_loss,
                              masked_loss, masked_mean, masked_mse_loss)
from graph_adapter.nn import MaskedBatchNorm1d, mask_norms
from graph_adapter.nn import MissingInputError, ipu_wrap, unpad

from _padding import pad_batch, random_graphs


@pytest.fixture
def data():
    graphs = random_graphs(torch.Generator().manual_seed(0), 3)
    b = Batch.from_data_list(graphs)
    flat = pad_batch(graphs, b.num_nodes + 2, b.edge_index.size(1) + 3, b.num_graphs + 2)
    return b, flat


class Multi(torch.nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, data):
        h = self.lin(data.x)
        g = global_add_pool(h, data.batch)
        if self.kind == "tuple":
            return h, (g, None)
        if self.kind == "dict":
            return {"node": h, "graph": g}
        if self.kind == "data":
            return Data(x=h, edge_index=data.edge_index)
        return g


@pytest.mark.parametrize("kind,keys", [
    ("tensor", ["output"]),
    ("tuple", ["output/0", "output/1/0"]),
    ("dict", ["output/node", "output/graph"]),
    ("data", ["output/edge_index", "output/x"]),
])
def test_output_keys(data, kind, keys):
    _, flat = data
    assert sorted(ipu_wrap(Multi(kind))(flat)) == sorted(keys)


def test_bad_output_type(data):
    class M(torch.nn.Module):
        def forward(self, data):
            return "nope"

    with pytest.raises(TypeError, match="only tensors"):
        ipu_wrap(M())(data[1])


def test_micro_batch_dim(data):
    _, flat = data
    w = ipu_wrap(Multi("tensor"))
    mb = {k: v.unsqueeze(0) for k, v in flat.items()}
    torch.testing.assert_close(w(mb)["output"], w(flat)["output"])
    two = {k: torch.stack([v, v]) for k, v in flat.items()}
    with pytest.raises(ValueError, match="micro-batch dim of size 2"):
        w(two)


def test_named_tensor_models(data):
    b, flat = data
    torch.manual_seed(0)
    gcn = GCN(4, 8, 2, 3)
    out = ipu_wrap(copy.deepcopy(gcn))(flat)["output"]
    torch.testing.assert_close(out[flat["node_mask"]], gcn(b.x, b.edge_index), atol=1e-5, rtol=1e-4)


def test_missing_parameter_is_named(data):
    _, flat = data

    class M(torch.nn.Module):
        def forward(self, x, edge_index, edge_weight):
            return x

    with pytest.raises(MissingInputError, match="'edge_weight'.*bind="):
        ipu_wrap(M())(flat)
    # bind maps it to a key
    out = ipu_wrap(M(), bind={"edge_weight": "edge_mask"})(flat)
    assert out["output"].shape == flat["x"].shape


def test_masks_on_batch(data):
    _, flat = data
    seen = {}

    class M(torch.nn.Module):
        def forward(self, batch):
            seen.update(n=batch.node_mask, e=batch.edge_mask, g=batch.graph_mask)
            return batch.x

    ipu_wrap(M())(flat)
    assert seen["n"] is flat["node_mask"] and seen["e"] is flat["edge_mask"]
    assert seen["g"] is flat["graph_mask"]


def test_unpad(data):
    """unpad keeps exactly the real rows: equal to the bare model on the unpadded
    batch; per micro-batch in order, for stacked [F, R] and poptorch's [F * R] outputs."""
    b, flat = data
    model = Multi("tuple")
    w = ipu_wrap(model, loss_fn=lambda out, batch: out[0].sum())
    out = w(flat)
    real = unpad(out, flat)
    with torch.no_grad():
        node_ref, (graph_ref, _) = model(b)
    torch.testing.assert_close(real["output/0"], node_ref)
    torch.testing.assert_close(real["output/1/0"], graph_ref)
    torch.testing.assert_close(real["loss"], out["loss"])  # a scalar stays as it is
    # two different micro-batches (the second with x doubled), so a swap shows
    flat2 = dict(flat, x=flat["x"] * 2)
    out2 = w(flat2)
    b2 = b.clone()
    b2.x = b.x * 2
    with torch.no_grad():
        node_ref2, (graph_ref2, _) = model(b2)
    mb = {k: torch.stack([flat[k], flat2[k]]) for k in flat}
    stacked = {k: torch.stack([out[k], out2[k]]) for k in out}
    cat = {k: torch.cat([out[k], out2[k]]) if out[k].dim() else stacked[k] for k in out}
    for outs in (stacked, cat):  # [F, R, ...] and poptorch-style [F * R, ...]
        per = unpad(outs, mb)
        assert isinstance(per, list) and len(per) == 2
        torch.testing.assert_close(per[0]["output/0"], node_ref)
        torch.testing.assert_close(per[1]["output/0"], node_ref2)
        torch.testing.assert_close(per[0]["output/1/0"], graph_ref)
        torch.testing.assert_close(per[1]["output/1/0"], graph_ref2)


def test_losses_match_torch_and_ignore_nan():
    torch.manual_seed(0)
    pred, target = torch.randn(6), torch.randn(6)
    mask = torch.tensor([True] * 4 + [False] * 2)
    padded_t = torch.where(mask, target, torch.full_like(target, float("nan")))
    torch.testing.assert_close(masked_mse_loss(pred, padded_t, mask), F.mse_loss(pred[:4], target[:4]))
    torch.testing.assert_close(masked_l1_loss(pred, padded_t, mask), F.l1_loss(pred[:4], target[:4]))
    t01 = (target > 0).float()
    torch.testing.assert_close(masked_bce_with_logits(pred, t01, mask),
                               F.binary_cross_entropy_with_logits(pred[:4], t01[:4]))
    logits, cls = torch.randn(6, 3), torch.tensor([0, 2, 1, 1, 0, 0])
    torch.testing.assert_close(masked_cross_entropy(logits, cls, mask), F.cross_entropy(logits[:4], cls[:4]))
    # NaN targets inside real rows are ignored, shapes untouched, gradients finite
    t2 = target.clone()
    t2[1] = float("nan")
    p = pred.clone().requires_grad_()
    loss = masked_mse_loss(p, t2, mask)
    loss.backward()
    keep = torch.tensor([0, 2, 3])
    torch.testing.assert_close(loss, F.mse_loss(pred[keep], target[keep]))
    assert torch.isfinite(p.grad).all() and p.grad[1] == 0 and p.grad[4:].abs().sum() == 0
    # multi-target rows
    P, T = torch.randn(6, 2), torch.randn(6, 2)
    torch.testing.assert_close(masked_mse_loss(P, T, mask), F.mse_loss(P[:4], T[:4]))
    torch.testing.assert_close(masked_mean(P, mask), P[:4].mean())


def test_loss_fn_in_wrapper(data):
    b, flat = data
    torch.manual_seed(0)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def forward(self, data):
            return global_add_pool(self.lin(data.x), data.batch).squeeze(-1)

    m = M()
    out = ipu_wrap(copy.deepcopy(m), loss_fn=masked_loss("mse"))(flat)
    torch.testing.assert_close(out["loss"], F.mse_loss(m(b), b.y))
    with pytest.raises(TypeError, match="scalar"):
        ipu_wrap(M(), loss_fn=lambda o, b: o)(flat)


def test_mask_norms_keeps_state_dict_keys():
    torch.manual_seed(0)
    model = GIN(4, 8, 2, 8, norm="batch_norm")
    pyg_bn = BatchNorm(8)
    model.extra = pyg_bn
    keys = list(model.state_dict())
    sd = copy.deepcopy(model.state_dict())
    n = mask_norms(model)
    assert n >= 3 and isinstance(pyg_bn.module, MaskedBatchNorm1d)
    assert list(model.state_dict()) == keys
    model.load_state_dict(sd)
    # outside a wrapped forward: exactly BatchNorm1d
    x = torch.randn(10, 8)
    ref = torch.nn.BatchNorm1d(8)
    torch.testing.assert_close(pyg_bn(x), ref(x))
    torch.testing.assert_close(pyg_bn.module.running_var, ref.running_var)


def test_masked_batchnorm_momentum_none_and_graph_level(data):
    """Cumulative averages (momentum=None) and a graph-level BatchNorm."""
    b, flat = data
    torch.manual_seed(0)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)
            self.bn_n = torch.nn.BatchNorm1d(3, momentum=None)
            self.bn_g = torch.nn.BatchNorm1d(3)

        def forward(self, data):
            h = self.bn_n(self.lin(data.x))
            return self.bn_g(global_add_pool(h, data.batch))

    ref = M()
    mine = copy.deepcopy(ref)
    w = ipu_wrap(mine)
    for _ in range(2):
        out = w(flat)["output"]
        r = ref(b)
    torch.testing.assert_close(out[flat["graph_mask"]], r, atol=1e-5, rtol=1e-4)
    for (k, v), (_, u) in zip(ref.state_dict().items(), mine.state_dict().items()):
        torch.testing.assert_close(u.float(), v.float(), atol=1e-6, rtol=1e-5, msg=lambda m: f"{k}: {m}")


# ---------------------------------------------------------------------------
# masked BatchNorm: the eager prefix path, the masked math, the fallbacks
# ---------------------------------------------------------------------------
def _bn_case(seed=0, rows=11, real=7, channels=5, dim3=False):
    gen = torch.Generator().manual_seed(seed)
    shape = (rows, channels, 3) if dim3 else (rows, channels)
    x = torch.randn(shape, generator=gen) * 3 + 1
    bn = torch.nn.BatchNorm1d(channels)
    with torch.no_grad():
        bn.weight.copy_(torch.rand(channels, generator=gen) + 0.5)
        bn.bias.copy_(torch.randn(channels, generator=gen))
    return x, bn, torch.randn(shape, generator=gen)


class _MaskedCall(torch.nn.Module):
    def __init__(self, bn):
        super().__init__()
        self.bn = bn

    def forward(self, x, mask):
        from graph_adapter.nn import masked_batch_norm

        return masked_batch_norm(x, mask, self.bn)


def _bn_run(fn, x, bn, g):
    x = x.clone().requires_grad_()
    bn = copy.deepcopy(bn)
    out = fn(x, bn)
    (out * g).sum().backward()
    return out.detach(), x.grad, bn.weight.grad, bn.bias.grad, bn.running_mean, bn.running_var


@pytest.mark.parametrize("how", ["prefix", "holes", "compiled", "fake"])
@pytest.mark.parametrize("dim3", [False, True], ids=["2d", "3d"])
def test_masked_batch_norm_paths_match_batchnorm_on_real_rows(how, dim3):
    """Every path: real rows, gradients and running stats are BatchNorm1d's on the real rows;
    padding rows are 0 with zero gradient."""
    from graph_adapter.nn import masked_batch_norm

    x, bn, g = _bn_case(dim3=dim3)
    rows, real = x.size(0), 7
    if how == "holes":
        perm = torch.randperm(rows, generator=torch.Generator().manual_seed(1))
        mask = torch.zeros(rows, dtype=torch.bool)
        mask[perm[:real]] = True
        assert not bool(mask[:real].all())
    else:
        mask = torch.arange(rows) < real
    idx = mask.nonzero().view(-1)
    ref = _bn_run(lambda x, bn: bn(x[idx]), x, bn, g[idx])
    if how == "fake":
        from torch._subclasses.fake_tensor import FakeTensorMode

        from torch.func import functional_call

        mode = FakeTensorMode(allow_non_fake_inputs=True)  # no .item() allowed, as on the IPU
        state = {k: mode.from_tensor(v) for k, v in bn.state_dict().items()}
        with mode:
            fx, fm = mode.from_tensor(x), mode.from_tensor(mask)
            out = functional_call(_MaskedCall(bn), {"bn." + k: v for k, v in state.items()},
                                  (fx, fm))
        assert out.shape == x.shape
        return
    fn = masked_batch_norm
    if how == "compiled":
        torch._dynamo.reset()
        fn = torch.compile(masked_batch_norm, backend="aot_eager", fullgraph=True)
    got = _bn_run(lambda x, bn: fn(x, mask, bn), x, bn, g)
    torch.testing.assert_close(got[0][idx], ref[0], atol=1e-5, rtol=1e-5)
    assert torch.equal(got[0][~mask], torch.zeros_like(got[0][~mask]))
    torch.testing.assert_close(got[1], ref[1], atol=1e-5, rtol=1e-5)  # 0 on padding rows
    assert torch.equal(got[1][~mask], torch.zeros_like(got[1][~mask]))
    for a, b in zip(got[2:], ref[2:]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_real_prefix_cached_per_frame():
    from graph_adapter.nn.norm import real_prefix

    m = torch.tensor([True, True, True, False, False])
    frame = {}
    assert real_prefix(m, frame) == 3
    m[4] = True  # a cached mask object is not looked at again within the frame
    assert real_prefix(m, frame) == 3
    assert real_prefix(m) is None
    assert real_prefix(torch.zeros(4, dtype=torch.bool)) == 0
    assert real_prefix(torch.ones(4, dtype=torch.bool)) == 4


def test_masked_batch_norm_single_real_row_falls_back():
    """One real row: torch's BatchNorm would raise; the masked math gives the bias."""
    from graph_adapter.nn import masked_batch_norm

    x, bn, _ = _bn_case()
    mask = torch.arange(x.size(0)) < 1
    out = masked_batch_norm(x, mask, bn)
    torch.testing.assert_close(out[0], bn.bias.detach())
    assert torch.equal(out[1:], torch.zeros_like(out[1:]))


def test_masked_batch_norm_refuses_a_node_graph_tie():
    """A budget with as many nodes as graph slots leaves a norm unable to tell node
    rows from graph rows: an error naming the rows and the fix, never a guess."""
    from graph_adapter.nn import StaticSizeError

    graphs = random_graphs(torch.Generator().manual_seed(0), 3)
    b = Batch.from_data_list(graphs)
    N = max(b.num_nodes + 2, b.edge_index.size(1) + 3, b.num_graphs + 2) + 1
    flat = pad_batch(graphs, N, N + 1, N)

    class NodeNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.BatchNorm1d(4)

        def forward(self, data):
            return self.norm(data.x)

    with pytest.raises(StaticSizeError, match=rf"{N} rows.*as many nodes as graph slots.*differ"):
        ipu_wrap(NodeNorm()).train()(flat)
