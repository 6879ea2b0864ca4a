"""The headline path, end to end with real inductor code: FixedSizeLoader ->
ipu_wrap -> compile(backend="inductor") trains a BatchNorm GNN exactly as eager
PyG trains the same model on the same (unpadded) batches.

Per step: the outputs of the real graphs, the loss, every parameter gradient,
and, after the optimizer step, every parameter and every BatchNorm buffer
(running mean/var, num_batches_tracked).  Then eval: the running statistics
are used, and the outputs still match.  Two compiles (train + eval), no more.
"""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GIN, global_add_pool

from graph_adapter import Budget, FixedSizeLoader, compile, ipu_wrap
from graph_adapter.nn import masked_loss

pytestmark = pytest.mark.slow  # real inductor compiles (tens of seconds cold)

ATOL, RTOL = 1e-4, 1e-4


class GINRegressor(torch.nn.Module):
    """PyG's GIN with BatchNorm, a sum pool sized by the batch, a linear head: forward(data)."""

    def __init__(self, hidden=16):
        super().__init__()
        self.gin = GIN(3, hidden, 2, hidden, norm="batch_norm")
        self.head = torch.nn.Linear(hidden, 1)

    def forward(self, data):
        h = self.gin(data.x, data.edge_index)
        return self.head(global_add_pool(h, data.batch, size=data.num_graphs)).squeeze(-1)


def _dataset(n=40, seed=0):
    """Graphs of 0-9 nodes (a 0-node and a 0-edge graph among them), features, a target."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        nodes = 0 if i == 5 else int(torch.randint(1, 10, (1,), generator=g))
        edges = 0 if i in (5, 7) else int(torch.randint(0, 2 * nodes + 1, (1,), generator=g))
        out.append(Data(x=torch.randn(nodes, 3, generator=g),
                        edge_index=torch.randint(0, max(nodes, 1), (2, edges), generator=g),
                        y=torch.randn(1, generator=g), idx=torch.tensor([i]), num_nodes=nodes))
    return out


def _real_batch(dataset, flat):
    """The same graphs as the padded item, batched by PyG without padding."""
    ids = flat["idx"][flat["graph_mask"]].tolist()
    return Batch.from_data_list([dataset[i] for i in ids])


def _close(actual, expected, what):
    torch.testing.assert_close(actual, expected, atol=ATOL, rtol=RTOL, msg=lambda m: f"{what}: {m}")


@pytest.mark.extended  # ~11 s cold: CI's second step (test_inductor_cpu's gradient tests stand in the main suite)
def test_inductor_training_matches_eager_on_a_batchnorm_gin():
    dataset = _dataset()
    loader = FixedSizeLoader(dataset, Budget.tight(dataset, 8), shuffle=True, seed=0)
    torch.manual_seed(0)
    ref = GINRegressor()
    mine = copy.deepcopy(ref)
    compiled = compile(ipu_wrap(mine, loss_fn=masked_loss("mse")), backend="inductor")
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.01, momentum=0.5)
    opt_mine = torch.optim.SGD(mine.parameters(), lr=0.01, momentum=0.5)
    ref.train()
    compiled.train()

    steps = 0
    for flat in loader:
        b = _real_batch(dataset, flat)
        opt_ref.zero_grad()
        opt_mine.zero_grad()
        out_ref = ref(b)
        loss_ref = F.mse_loss(out_ref, b.y)
        loss_ref.backward()
        res = compiled(flat)
        res["loss"].backward()
        _close(res["output"][flat["graph_mask"]], out_ref, f"step {steps} outputs")
        _close(res["loss"], loss_ref, f"step {steps} loss")
        # Biases right before a BatchNorm have a gradient that is 0 up to rounding,
        # so gradients are compared on the scale of the largest one.
        scale = max(float(p.grad.abs().max()) for p in ref.parameters())
        for (name, p), q in zip(ref.named_parameters(), mine.parameters()):
            torch.testing.assert_close(q.grad, p.grad, atol=ATOL * max(scale, 1.0), rtol=RTOL,
                                       msg=lambda m: f"step {steps} grad of {name}: {m}")
        opt_ref.step()
        opt_mine.step()
        for (name, v), w in zip(ref.state_dict().items(), mine.state_dict().values()):
            _close(w.float(), v.float(), f"step {steps} {name}")  # params and BatchNorm buffers
        steps += 1
        if steps == 4:
            break
    assert steps == 4
    assert int(mine.gin.norms[0].module.num_batches_tracked) == 4  # padding did not count

    ref.eval()
    compiled.eval()
    with torch.no_grad():
        for flat in loader:
            _close(compiled(flat)["output"][flat["graph_mask"]], ref(_real_batch(dataset, flat)),
                   "eval outputs (running statistics)")
    assert compiled.compile_count == 2  # train + eval
