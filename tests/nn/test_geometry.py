"""Static knn/radius graph construction inside a wrapped forward (no torch_cluster)."""
import copy

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch_geometric.data import Batch, Data
from torch_geometric.nn import knn, knn_graph, radius, radius_graph
from torch_geometric.nn.models import SchNet

from graph_adapter import check
from graph_adapter.nn import masked_loss
from graph_adapter.nn import ipu_wrap

from _compile_count import compile_counted
from _padding import pad_batch


def molecules(seed, num, max_nodes=7):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(num):
        n = int(torch.randint(1, max_nodes + 1, (1,), generator=gen))
        out.append(Data(z=torch.randint(1, 10, (n,), generator=gen),
                        pos=torch.randn(n, 3, generator=gen) * 1.5,
                        y=torch.randn(1, generator=gen)))
    return out


def padded(seed, num, extra_nodes=3, extra_graphs=2, nodes=None):
    """A batch of ``num`` molecules and its padded flat dict (``nodes``: a fixed node budget)."""
    graphs = molecules(seed, num)
    b = Batch.from_data_list(graphs)
    for g in graphs:
        g.edge_index = torch.zeros(2, 0, dtype=torch.long)
    flat = pad_batch(graphs, nodes or b.num_nodes + extra_nodes, 4, b.num_graphs + extra_graphs,
                     node_keys=("z", "pos"))
    return b, flat


def host_pairs(pos, batch, r=None, k=None, loop=False):
    """The reference on the host: plain torch, one graph at a time (set of (source, target))."""
    d = torch.cdist(pos, pos)
    same = batch.view(-1, 1) == batch.view(1, -1)
    if not loop:
        same &= ~torch.eye(len(pos), dtype=torch.bool)
    pairs = set()
    for i in range(len(pos)):
        cand = [j for j in range(len(pos)) if same[i, j] and (r is None or d[i, j] <= r)]
        if k is not None:
            cand = sorted(cand, key=lambda j: float(d[i, j]))[:k]
        pairs |= {(j, i) for j in cand}
    return pairs


class HostRadiusGraph(torch.nn.Module):
    """SchNet's interaction graph computed on the host in plain torch (no torch_cluster)."""

    def __init__(self, r):
        super().__init__()
        self.r = r

    def forward(self, pos, batch):
        ei = torch.tensor(sorted(host_pairs(pos, batch, r=self.r)), dtype=torch.long).view(-1, 2).t()
        return ei, (pos[ei[0]] - pos[ei[1]]).norm(dim=-1)


class Graphs(torch.nn.Module):
    def __init__(self, r, k):
        super().__init__()
        self.r, self.k = r, k

    def forward(self, pos, batch):
        return {"radius_graph": radius_graph(pos, self.r, batch, max_num_neighbors=8),
                "knn_graph": knn_graph(pos, self.k, batch),
                "radius": radius(pos, pos, self.r, batch, batch, max_num_neighbors=8),
                "knn": knn(pos, pos, self.k, batch, batch),
                "one_graph": radius_graph(pos, self.r, max_num_neighbors=32)}


def _real(edges, n_real):
    return {(int(a), int(b)) for a, b in edges.t().tolist() if a < n_real and b < n_real}


@given(st.integers(0, 10_000), st.integers(1, 4), st.floats(0.5, 3.0), st.integers(1, 4))
def test_equal_to_host_reference(seed, num, r, k):
    b, flat = padded(seed, num)
    out = ipu_wrap(Graphs(r, k), inputs="tensors")(flat)
    N, n = flat["node_mask"].numel(), b.num_nodes
    assert out["output/radius_graph"].shape == (2, N * 8)
    assert out["output/knn_graph"].shape == (2, N * k)
    assert _real(out["output/radius_graph"], n) == host_pairs(b.pos, b.batch, r=r)
    assert _real(out["output/knn_graph"], n) == host_pairs(b.pos, b.batch, k=k)
    one = torch.zeros_like(b.batch)  # no batch vector: one graph, padding rows masked out
    edges = {tuple(e) for e in out["output/one_graph"].t().tolist()} - {(N - 1, N - 1)}
    assert edges == host_pairs(b.pos, one, r=r)
    # knn / radius: (query, candidate) rows, loops included
    assert {(q, c) for c, q in _real(out["output/radius"], n)} == host_pairs(b.pos, b.batch, r=r, loop=True)
    assert {(q, c) for c, q in _real(out["output/knn"], n)} == host_pairs(b.pos, b.batch, k=k, loop=True)
    # empty slots are the padding edge: the self-loop on the last node (a padding node)
    for key in ("output/radius_graph", "output/knn_graph"):
        e = out[key]
        touching_pad = (e >= n).any(0)
        assert (e[:, touching_pad] == N - 1).all()


def test_check_is_clean():
    _, flat = padded(0, 3)
    report = check(ipu_wrap(Graphs(1.5, 2), inputs="tensors"), flat)
    assert report.ok, str(report)


def test_outside_a_wrapped_forward_the_original_runs():
    ipu_wrap(Graphs(1.0, 1), inputs="tensors")
    import torch_geometric.nn.models.schnet as schnet

    assert schnet.radius_graph is not radius_graph.__wrapped__  # patched where SchNet looks
    with pytest.raises(ImportError):  # no torch_cluster here: PyG's own error
        schnet.radius_graph(torch.randn(4, 3), 1.0)


def _schnet():
    torch.manual_seed(0)
    return SchNet(hidden_channels=16, num_filters=16, num_interactions=2, num_gaussians=10,
                  cutoff=2.5, max_num_neighbors=8)


def test_schnet_trains_through_ipu_wrap_like_the_unpadded_model():
    """Three SGD steps on three batches of one budget: the same parameters as the
    unpadded model (host radius graph), and one compile (aot_eager)."""
    batches = [padded(s, 3, extra_graphs=2, nodes=3 * 7 + 2) for s in range(3)]
    model = _schnet()
    ref = copy.deepcopy(model)
    ref.interaction_graph = HostRadiusGraph(2.5)
    w = ipu_wrap(model, inputs="tensors", loss_fn=masked_loss("mse"))
    compiled, counter = compile_counted(w)
    opt_w = torch.optim.SGD(w.parameters(), lr=0.05)
    opt_r = torch.optim.SGD(ref.parameters(), lr=0.05)
    for b, flat in batches:
        out = compiled(flat)
        pred = ref(b.z, b.pos, b.batch).view(-1)
        torch.testing.assert_close(out["output"].view(-1)[flat["graph_mask"]], pred, atol=1e-5, rtol=1e-4)
        loss = torch.nn.functional.mse_loss(pred, b.y)
        torch.testing.assert_close(out["loss"], loss, atol=1e-5, rtol=1e-4)
        opt_w.zero_grad(), opt_r.zero_grad()
        out["loss"].backward()
        loss.backward()
        opt_w.step(), opt_r.step()
    for (k, p), q in zip(ref.named_parameters(), model.parameters()):
        torch.testing.assert_close(q, p, atol=1e-5, rtol=1e-4, msg=k)
    assert counter.count == 1
