"""Loss scaling (issue 23 item 4): one training step's gradient through the
adapter (FixedSizeLoader batch -> ipu_wrap -> masked L1 loss, the mean over the
batch's *real* graphs) equals eager PyG's on the same graphs unpadded
(``Batch.from_data_list`` -> ``l1_loss``, PyG's mean over its batch), for every
batch the packer makes, whatever its real-graph count: a loss divided by the
graph budget instead (or by the padded rows) would scale every gradient by
``g / G`` and fail here.  The demo's models (BatchNorm included), float64.
Graphs have at least 2 nodes: eager PyG's own BatchNorm refuses a batch of
one node in training.
"""
import copy
import warnings

import torch
from hypothesis import given, settings, strategies as st
from torch_geometric.data import Batch, Data
from torch_geometric.utils.smiles import e_map, x_map

import graph_adapter as ga
from graph_adapter.app.models import build_model


def _molecule(gen: torch.Generator, n: int) -> Data:
    """A random molecule-like graph with the demo's categorical features."""
    x = torch.stack([torch.randint(0, len(v), (n,), generator=gen) for v in x_map.values()], 1)
    e = 2 * n
    ei = torch.randint(0, n, (2, e), generator=gen)
    ea = torch.stack([torch.randint(0, len(v), (e,), generator=gen) for v in e_map.values()], 1)
    y = torch.randn(1, generator=gen, dtype=torch.float64) * 10
    return Data(x=x, edge_index=ei, edge_attr=ea, y=y)


def _grads(model):
    return {k: p.grad for k, p in model.named_parameters() if p.grad is not None}


@settings(deadline=None, max_examples=6)
@given(seed=st.integers(0, 10**6), num=st.integers(2, 40), k=st.integers(1, 12),
       max_nodes=st.integers(2, 12), model=st.sampled_from(["gine", "gin"]),
       trim=st.booleans(), packer=st.sampled_from(["greedy", "histogram"]))
def test_one_step_gradient_equals_eager_pyg(seed, num, k, max_nodes, model, trim, packer):
    gen = torch.Generator().manual_seed(seed)
    graphs = [_molecule(gen, int(torch.randint(2, max_nodes + 1, (1,), generator=gen)))
              for _ in range(num)]
    torch.manual_seed(seed)
    net = build_model(model, hidden=8, layers=2).double().train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = ga.FixedSizeLoader(graphs, ga.Budget.fit(graphs, k), shuffle=True,
                                    seed=seed, packer=packer)
        counts = set()
        for ids, flat in zip(loader.plan(), loader):
            counts.add(len(ids))
            assert int(flat["graph_mask"].sum()) == len(ids)
            ref, pad = copy.deepcopy(net), copy.deepcopy(net)
            b = Batch.from_data_list([graphs[i] for i in ids])
            out = ref(b.x, b.edge_index, b.edge_attr, b.batch)
            torch.nn.functional.l1_loss(out.view(-1), b.y.view(-1)).backward()
            wrapped = ga.ipu_wrap(pad, loss_fn=ga.masked_loss("l1"), trim=trim)
            wrapped(flat)["loss"].backward()
            want, got = _grads(ref), _grads(pad)
            assert set(want) == set(got)
            for name in want:
                torch.testing.assert_close(got[name], want[name], atol=1e-10, rtol=1e-8,
                                           msg=lambda m: f"{model} {name}: {m}")
    assert counts  # at least one batch was compared
