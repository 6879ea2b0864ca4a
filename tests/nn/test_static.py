"""The static-size substitutions: active only inside the wrapped forward."""
import torch
import pytest
from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode
from torch_geometric.data import Batch
from torch_geometric.nn import GATConv, GCNConv, global_mean_pool
from torch_geometric.nn.aggr import MeanAggregation
import torch_geometric.utils as U

from graph_adapter.nn import static
from graph_adapter.nn import ipu_wrap

from _padding import pad_batch, random_graphs


@pytest.fixture
def padded():
    graphs = random_graphs(torch.Generator().manual_seed(0), 4)
    b = Batch.from_data_list(graphs)
    flat = pad_batch(graphs, b.num_nodes + 3, b.edge_index.size(1) + 5, b.num_graphs + 2)
    return b, flat


class Pools(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.aggr = MeanAggregation()

    def forward(self, data):
        x, batch = data.x, data.batch
        dense, mask = U.to_dense_batch(x, batch)
        return {
            "mean": global_mean_pool(x, batch),
            "scatter": U.scatter(x, batch, reduce="max"),
            "aggr": self.aggr(x, batch),
            "softmax": U.softmax(x, batch),
            "dense": dense,
            "num_nodes": x.new_full((1,), data.num_nodes),
        }


def test_static_sizes_and_values(padded):
    b, flat = padded
    out = ipu_wrap(Pools())(flat)
    G, N = flat["graph_mask"].numel(), flat["node_mask"].numel()
    gm, nm = flat["graph_mask"], flat["node_mask"]
    for k in ("mean", "scatter", "aggr"):
        assert out[f"output/{k}"].shape[0] == G
    torch.testing.assert_close(out["output/mean"][gm], global_mean_pool(b.x, b.batch))
    torch.testing.assert_close(out["output/scatter"][gm], U.scatter(b.x, b.batch, reduce="max"))
    torch.testing.assert_close(out["output/aggr"][gm], MeanAggregation()(b.x, b.batch))
    torch.testing.assert_close(out["output/softmax"][nm], U.softmax(b.x, b.batch))
    assert out["output/dense"].shape[:2] == (G, N)
    dense_ref, _ = U.to_dense_batch(b.x, b.batch)
    torch.testing.assert_close(out["output/dense"][gm][:, : dense_ref.size(1)], dense_ref)
    assert out["output/num_nodes"].item() == N


def test_fake_mode_needs_the_substitution(padded):
    """Under FakeTensorMode (the poptorch stand-in) data-dependent sizes raise;
    the wrapped forward runs, the bare model does not."""
    _, flat = padded
    w = ipu_wrap(Pools())
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = {k: mode.from_tensor(v) for k, v in flat.items()}
        out = w(fake)
        assert out["output/mean"].shape[0] == flat["graph_mask"].numel()
        with pytest.raises(DataDependentOutputException):  # the data-dependent size
            global_mean_pool(fake["x"], fake["batch"])


def test_self_loop_layers_trace_in_fake_mode(padded):
    _, flat = padded

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gcn = GCNConv(4, 4)
            self.gat = GATConv(4, 4, heads=2, concat=False)

        def forward(self, x, edge_index):
            return self.gat(self.gcn(x, edge_index), edge_index)

    w = ipu_wrap(M())
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        out = w({k: mode.from_tensor(v) for k, v in flat.items()})
    assert out["output"].shape == (flat["node_mask"].numel(), 4)


def test_inactive_outside_the_wrapped_forward(padded):
    b, _ = padded
    ipu_wrap(Pools())  # installs
    assert static.installed() and static.current_frame() is None
    # Outside a frame the replacements are the originals (data-dependent size).
    assert U.scatter(b.x, b.batch).shape[0] == int(b.batch.max()) + 1
    ei = torch.tensor([[0, 1, 1], [1, 1, 0]])
    ei2, _ = U.remove_self_loops(ei)
    assert ei2.shape == (2, 2)


def test_frame_popped_on_exception(padded):
    _, flat = padded

    class Boom(torch.nn.Module):
        def forward(self, data):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        ipu_wrap(Boom())(flat)
    assert static.current_frame() is None


def test_ambiguous_size_names_op_and_line(padded):
    _, flat = padded

    class Bad(torch.nn.Module):
        def forward(self, data):
            idx = torch.zeros(3, dtype=torch.long)
            return U.scatter(data.x[:3], idx)  # the line the error must name

    with pytest.raises(static.StaticSizeError) as e:
        ipu_wrap(Bad())(flat)
    msg = str(e.value)
    assert "scatter" in msg and "test_static.py" in msg and "the line the error must name" in msg


def test_user_module_bindings_are_patched():
    """A model module that imported scatter by name gets the static version."""
    import types

    mod = types.ModuleType("user_model_mod")
    exec("from torch_geometric.utils import scatter\n"
         "import torch\n"
         "class M(torch.nn.Module):\n"
         "    def forward(self, data):\n"
         "        return scatter(data.x, data.batch)\n", mod.__dict__)
    import sys

    sys.modules["user_model_mod"] = mod
    try:
        graphs = random_graphs(torch.Generator().manual_seed(1), 2)
        flat = pad_batch(graphs, 20, 30, 5)
        w = ipu_wrap(mod.M())
        assert mod.scatter is static.scatter
        with FakeTensorMode(allow_non_fake_inputs=True) as fm:
            out = w({k: fm.from_tensor(v) for k, v in flat.items()})
        assert out["output"].shape[0] == 5
    finally:
        del sys.modules["user_model_mod"]


def test_uninstall_restores():
    ipu_wrap(Pools())
    assert U.scatter is static.scatter
    static.uninstall()
    try:
        assert U.scatter is static._ORIG["scatter"]
        import torch_geometric.nn.pool.glob as glob

        assert glob.scatter is static._ORIG["scatter"]
        from torch_geometric.nn.aggr.base import Aggregation

        assert Aggregation.__call__ is static._ORIG_AGGR_CALL
    finally:
        static.install()


def test_fullgraph_compile_num_nodes_and_pooling(padded):
    _, flat = padded
    torch._dynamo.reset()
    w = ipu_wrap(Pools())
    eager = w(flat)
    compiled = torch.compile(w, fullgraph=True, dynamic=False, backend="eager")(flat)
    for k in eager:
        torch.testing.assert_close(compiled[k], eager[k])
