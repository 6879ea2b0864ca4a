"""The rebuild traces: torch.compile(fullgraph=True) and torch.export, strict and not."""
import io

import pytest
import torch
from torch_geometric.data import Batch, Data, HeteroData
from torch_geometric.nn import GINConv, global_add_pool

import graph_adapter as ga
from graph_adapter.format import infer_spec


class CountingBackend:
    """A torch.compile backend that counts the graphs it is given and runs them eagerly."""

    def __init__(self):
        self.compiles = 0

    def __call__(self, gm, example_inputs):
        self.compiles += 1
        return gm.forward


def padded_batch(seed, nodes=12, edges=20, graphs=4, dim=3):
    """A padded batch of one fixed shape, built by hand (the loader is its own module)."""
    g = torch.Generator().manual_seed(seed)
    real_graphs = graphs - 1
    sizes = torch.randint(1, 3, (real_graphs,), generator=g)
    ptr = torch.zeros(graphs + 1, dtype=torch.long)
    ptr[1:graphs] = torch.cumsum(sizes, 0)
    ptr[graphs] = nodes
    batch = torch.repeat_interleave(torch.arange(graphs), torch.diff(ptr))
    n_real = int(ptr[real_graphs])
    e_real = int(torch.randint(0, edges // 2, (1,), generator=g))
    src = torch.randint(0, max(n_real, 1), (e_real,), generator=g)
    edge_index = torch.full((2, edges), nodes - 1, dtype=torch.long)  # padding: self-loops on a padding node
    edge_index[:, :e_real] = torch.stack([src, src])  # any real edges will do
    return {
        "x": torch.randn(nodes, dim, generator=g),
        "edge_index": edge_index,
        "batch": batch,
        "ptr": ptr,
        "y": torch.randn(graphs, generator=g),
        "node_mask": torch.arange(nodes) < n_real,
        "edge_mask": torch.arange(edges) < e_real,
        "graph_mask": torch.arange(graphs) < real_graphs,
    }


class GIN(torch.nn.Module):
    def __init__(self, dim=3, hidden=8):
        super().__init__()
        self.conv = GINConv(torch.nn.Sequential(torch.nn.Linear(dim, hidden), torch.nn.ReLU()))
        self.out = torch.nn.Linear(hidden, 1)

    def forward(self, data):
        h = self.conv(data.x, data.edge_index)
        return self.out(global_add_pool(h, data.batch, size=data.num_graphs)).squeeze(-1)


class FromFlat(torch.nn.Module):
    """Takes the flat dict and rebuilds the batch inside forward."""

    def __init__(self, model, spec=None):
        super().__init__()
        self.model, self.spec = model, spec

    def forward(self, flat):
        spec = self.spec if self.spec is not None else infer_spec(flat)
        return self.model(ga.unflatten(flat, spec, validate=False))


def test_compiles_once_for_five_batches_of_one_shape():
    torch.manual_seed(0)
    model = FromFlat(GIN())
    backend = CountingBackend()
    compiled = torch.compile(model, backend=backend, fullgraph=True, dynamic=False)
    for seed in range(5):
        flat = padded_batch(seed)
        out = compiled(flat)
        assert torch.allclose(out, model(flat), atol=1e-6)
    assert backend.compiles == 1


def test_num_graphs_is_a_static_int_inside_forward():
    seen = []

    def f(flat):
        b = ga.unflatten(flat, infer_spec(flat), validate=False)
        seen.append(type(b.num_graphs))
        return b.x * b.num_graphs

    torch.compile(f, backend="eager", fullgraph=True, dynamic=False)(padded_batch(0))
    assert seen == [int]


def test_full_spec_rebuild_compiles_with_batch_metadata():
    batch = Batch.from_data_list([Data(x=torch.randn(n, 3), edge_index=torch.tensor([[0], [n - 1]])) for n in (2, 3)])
    flat, spec = ga.flatten(batch)
    model = FromFlat(GIN(), spec)
    backend = CountingBackend()
    out = torch.compile(model, backend=backend, fullgraph=True)(flat)
    assert torch.allclose(out, model.model(batch), atol=1e-6) and backend.compiles == 1


def test_hetero_rebuild_compiles():
    h = HeteroData()
    h["a"].x = torch.randn(3, 2)
    h["b"].x = torch.randn(2, 2)
    h["a", "r", "b"].edge_index = torch.tensor([[0, 2], [1, 0]])
    flat, spec = ga.flatten(Batch.from_data_list([h, h]))

    def f(fl):
        b = ga.unflatten(fl, spec.static(), validate=False)
        return b["b"].x.sum() + b["a", "r", "b"].edge_index.sum() + b.num_graphs

    assert torch.compile(f, backend="eager", fullgraph=True)(flat) == f(flat)


# --------------------------------------------------------------------------
# torch.export: a model that takes a PyG batch (pytree) and one that takes the flat dict
# --------------------------------------------------------------------------
def _save_load(ep):
    # torch.export.save pickles the example inputs; a PyG batch among them
    # makes torch.export.load fall back to weights_only=False (and log through
    # a broken format string). The program itself needs no example inputs.
    ep.example_inputs = None
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    return torch.export.load(buf)


@pytest.mark.parametrize("strict", [False, True])
def test_export_model_taking_a_batch(strict):
    torch.manual_seed(0)
    batch = Batch.from_data_list(
        [Data(x=torch.randn(n, 3), edge_index=torch.tensor([[0], [n - 1]]), smiles="C" * n) for n in (2, 3)]
    )
    model = GIN()
    ep = torch.export.export(model, (batch,), strict=strict)
    loaded = _save_load(ep)
    assert torch.allclose(loaded.module()(batch), model(batch), atol=1e-6)


@pytest.mark.parametrize("strict", [False, True])
def test_export_model_taking_the_flat_dict(strict):
    torch.manual_seed(0)
    model = FromFlat(GIN())
    ep = torch.export.export(model, (padded_batch(0),), strict=strict)
    loaded = _save_load(ep)
    for seed in (1, 2):  # other batches of the same budget
        flat = padded_batch(seed)
        assert torch.allclose(loaded.module()(flat), model(flat), atol=1e-6)


def test_pytree_round_trip_is_exact():
    import torch.utils._pytree as pytree

    batch = Batch.from_data_list([Data(x=torch.randn(2, 1), tag="a"), Data(x=torch.randn(1, 1), tag="b")])
    leaves, treespec = pytree.tree_flatten({"b": batch})
    out = pytree.tree_unflatten(leaves, treespec)["b"]
    assert type(out) is type(batch) and out.tag == ["a", "b"] and torch.equal(out.x, batch.x)
    assert [g.tag for g in out.to_data_list()] == ["a", "b"]
    # the context serialises as JSON
    text = pytree.treespec_dumps(treespec)
    assert pytree.treespec_loads(text) == treespec
