"""layout="ell" / "hyb": the collator's neighbour tables and the routed message passing.

* the tables hold exactly each node's real in-/out-edges, in order, padded
  with ``E`` (property over drawn graphs: 0-edge graphs, isolated nodes,
  self-loops, repeated edges);
* a wrapped model computes the same outputs and gradients on real rows with
  the tables (ELL routing) as without (PyG's scatter path) and as the
  unpadded eager model;
* under Dynamo (``aot_eager``) the routing holds: one compile per mode and no
  ``index_add`` in the forward or backward graphs;
* layout="hyb" (narrow tables + spill lists): every real edge is in exactly
  one place (its node's row, or the spill list past the row), the spill
  capacity fits every batch of the fitted dataset; outputs and gradients equal
  the unpadded model in float64; the only scatters left are the spill lists';
* a graph over the degree widths raises the named error; hetero refuses.
"""
import copy

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from torch_geometric.data import Batch, Data, HeteroData
from torch_geometric.nn import BatchNorm, GINConv, SAGEConv

import graph_adapter as ga
from graph_adapter.nn import static_layout
from graph_adapter.batching import _layout
from graph_adapter.batching import DegreeWidthError
from graph_adapter.batching import Collator
from graph_adapter.format import ELL_IN, ELL_OUT, SPILL_IN, SPILL_OUT

from strategies import model_graph_lists, paddings
from _padding import untied

ATOL = 1e-4
ATOL64 = 1e-9


def _budget(graphs, padding):
    n = sum(d.num_nodes for d in graphs)
    e = sum(d.num_edges for d in graphs)
    # (+1: the collator keeps 2 padding nodes now, paddings() draws >= 1; a row
    # more where N, E, G would tie: Budget refuses it)
    G = len(graphs) + padding[2]
    # the no-empty-padding-slot rule (FORMAT.md): nodes >= graphs + largest graph - 1
    nodes = max(n + padding[0] + 1, G + max(max(d.num_nodes for d in graphs) - 1, 0))
    N, E, G = untied(nodes, e + padding[1], G)
    return n, e, ga.Budget(nodes=N, edges=E, graphs=G)


@given(graphs=model_graph_lists(), padding=paddings())
def test_tables_list_each_nodes_real_edges_in_order(graphs, padding):
    n, e, budget = _budget(graphs, padding)
    flat = Collator(graphs, budget, layout="ell").collate_indices(range(len(graphs)))
    ei, E = flat["edge_index"], flat["edge_index"].size(1)
    for key, row in ((ELL_IN, 1), (ELL_OUT, 0)):
        table = flat[key]
        assert table.shape[0] == budget.nodes
        for node in range(budget.nodes):
            want = [j for j in range(e) if int(ei[row, j]) == node]  # real edges come first
            got = table[node].tolist()
            assert got == want + [E] * (table.shape[1] - len(want)), (key, node)


@given(graphs=model_graph_lists(), padding=paddings(), widths=st.tuples(st.integers(1, 3),
                                                                         st.integers(1, 3)))
def test_hyb_tables_hold_every_real_edge_once_in_order(graphs, padding, widths):
    n, e, budget = _budget(graphs, padding)
    c = Collator(graphs, budget, layout="hyb", layout_widths=widths)
    flat = c.collate_indices(range(len(graphs)))
    ei, E, N = flat["edge_index"], flat["edge_index"].size(1), budget.nodes
    for key, sp_key, row, w, cap in ((ELL_IN, SPILL_IN, 1, widths[0], c.layout_spills[0]),
                                     (ELL_OUT, SPILL_OUT, 0, widths[1], c.layout_spills[1])):
        table, spill = flat[key], flat[sp_key]
        assert table.shape == (N, w) and spill.shape == (2, cap)
        # the spill list: real columns first, then padding (E, N - 1)
        k = int((spill[0] < E).sum())
        assert (spill[0, k:] == E).all() and (spill[1, k:] == N - 1).all()
        spilled = {}
        for j in range(k):
            spilled.setdefault(int(spill[1, j]), []).append(int(spill[0, j]))
        for node in range(N):
            want = [j for j in range(e) if int(ei[row, j]) == node]
            got = table[node].tolist()
            assert got == want[:w] + [E] * (w - len(want[:w])), (key, node)
            assert spilled.get(node, []) == want[w:], (sp_key, node)


def test_hyb_fit_widths_and_capacity():
    """Widths: the 99.5th percentile of the degrees; capacity: the G largest spills."""
    star = Data(x=torch.randn(6, 4), edge_index=torch.tensor([[1, 2, 3, 4, 5], [0] * 5]))
    data = _molecules(300) + [star, star]  # chains: in-degrees 1-2; each star spills 3 at width 2
    c = Collator(data, ga.Budget.fit(data, 4), layout="hyb")
    assert c.layout_widths == (2, 2)
    assert c.layout_spills == (6, 1)  # both stars fit in one batch; no out-spill (min 1)
    g = ga.Budget.fit(data, 4).graphs
    assert _layout.fit_hyb(np.array([[1, 2, 3, 4, 5], [0] * 5]), np.array([5]), np.array([6]),
                           g, (1, 1)) == ((1, 1), (4, 1))
    with pytest.raises(DegreeWidthError, match=r"graph 0 .*its node 0 has 5 in-edges \(the batch "
                                               r"spills 4 past the width, the capacity is 1\)"):
        pairs = [Data(x=torch.randn(2, 4), edge_index=torch.tensor([[0], [1]]))] * 3
        Collator(pairs, ga.Budget.fit(data, 4), layout="hyb",
                 layout_widths=(1, 1)).collate([star])  # a graph it was not fitted on


class Net(torch.nn.Module):
    """Sum (GIN) and mean (SAGE, tuple input) message passing with a BatchNorm."""

    def __init__(self, f=4, h=8):
        super().__init__()
        # (a first layer with weights: the messages need a gradient in training)
        self.lin = torch.nn.Linear(f, f)
        self.c1 = GINConv(torch.nn.Linear(f, h))
        self.norm = BatchNorm(h)
        self.c2 = SAGEConv(h, h, aggr="mean")

    def forward(self, x, edge_index):
        h = torch.relu(self.norm(self.c1(self.lin(x), edge_index)))
        return self.c2(h, edge_index)


def _node_loss(out):
    return (out * torch.linspace(-1, 1, out.size(-1))).square().sum()


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@given(graphs=model_graph_lists(), padding=paddings())
def test_ell_path_equals_scatter_path_and_unpadded_model(train, graphs, padding):
    """float64: the slot sums add in another order than PyG's scatter."""
    n, e, budget = _budget(graphs, padding)
    assume(len({budget.nodes, budget.edges, budget.graphs}) == 3)
    if train:
        assume(n >= 2)  # eager PyG's BatchNorm raises on fewer than 2 nodes in train()
    graphs = [d.clone() for d in graphs]
    for d in graphs:
        d.x = d.x.double()
    torch.manual_seed(0)
    ref = Net().double().train(train)
    b = Batch.from_data_list(graphs)
    x_ref = b.x.clone().requires_grad_(True)
    norm_in = []
    hook = ref.norm.register_forward_hook(lambda m, i, o: norm_in.append(i[0].detach()))
    out_ref = ref(x_ref, b.edge_index)
    hook.remove()
    if train:
        # a channel whose real rows are all equal (identical graphs) has batch variance 0:
        # BatchNorm outputs rounding noise (~1e-14) times 1 / sqrt(eps), and its sign,
        # which depends on the order of the sums, decides the relu's gradient
        assume(float(norm_in[0].var(0, unbiased=False).min()) > 1e-9)
    _node_loss(out_ref).backward()
    idx = range(len(graphs))
    # hyb with width 1: most nodes spill, so both parts of the sums run
    for layout, widths in ((None, None), ("ell", None), ("hyb", None), ("hyb", (1, 1))):
        mine = copy.deepcopy(ref)
        for p in mine.parameters():
            p.grad = None
        flat = Collator(graphs, budget, layout=layout, layout_widths=widths).collate_indices(idx)
        flat["x"].requires_grad_(True)
        out = ga.ipu_wrap(mine).train(train)(flat)["output"]
        real = out[flat["node_mask"]]
        torch.testing.assert_close(real, out_ref, atol=ATOL64, rtol=1e-9)
        _node_loss(real).backward()
        torch.testing.assert_close(flat["x"].grad[flat["node_mask"]], x_ref.grad, atol=ATOL64,
                                   rtol=1e-9)
        for (name, p), q in zip(ref.named_parameters(), mine.parameters()):
            torch.testing.assert_close(q.grad, p.grad, atol=ATOL64, rtol=1e-9,
                                       msg=lambda m: f"{layout} {widths} {name}: {m}")


def test_hyb_spills_given_share_one_shape_between_loaders():
    """A test loader given the train loader's widths and spill capacities (fitted on
    all graphs) yields batches of the train loader's shape; a batch that spills more
    than the given capacity is refused naming the graph; bad arguments are refused."""
    star = Data(x=torch.randn(6, 4), edge_index=torch.tensor([[1, 2, 3, 4, 5], [0] * 5]))
    data = _molecules(300) + [star] * 6  # widths (2, 2): each star spills 3
    budget = ga.Budget.fit(data, 4)
    fitted = ga.FixedSizeLoader(data, budget, layout="hyb")
    assert fitted.collator.layout_widths == (2, 2)
    w, k = fitted.collator.layout_widths, fitted.collator.layout_spills
    test = ga.FixedSizeLoader(_molecules(10, seed=1) + [star], budget, layout="hyb",
                              layout_widths=w, layout_spills=k)
    own = ga.FixedSizeLoader(_molecules(10, seed=1) + [star], budget, layout="hyb")
    # fitted alone, the test set gets other tables (so another compile)
    assert (own.collator.layout_widths, own.collator.layout_spills) != (w, k)
    shapes = {tuple(v.shape) for f in fitted for key, v in f.items() if "spill" in key}
    assert shapes == {tuple(v.shape) for f in test for key, v in f.items() if "spill" in key}
    with pytest.raises(DegreeWidthError, match=r"graph 0 .*its node 0 has 5 in-edges"):
        ga.FixedSizeLoader([star], budget, layout="hyb", layout_widths=(1, 1),
                           layout_spills=(0, 0)).collator.collate([star])
    for kwargs in (dict(layout="ell", layout_widths=w, layout_spills=k),
                   dict(layout="hyb", layout_spills=k)):
        with pytest.raises(ValueError, match="layout_spills"):
            ga.FixedSizeLoader(data, budget, **kwargs)


def _molecules(k=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(k):
        n = 3 + i % 4
        src = torch.arange(n - 1)
        ei = torch.cat([torch.stack([src, src + 1]), torch.stack([src + 1, src])], 1)
        out.append(Data(x=torch.randn(n, 4, generator=g), edge_index=ei))
    return out


def _ops_backend(seen):
    """An aot_eager-like backend recording every ATen op of the forward and backward graphs."""
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_module_simplified

    def record(gm, _):
        seen.update(str(nd.target) for nd in gm.graph.nodes if nd.op == "call_function")
        return make_boxed_func(gm.forward)

    return lambda gm, ex: aot_module_simplified(gm, ex, fw_compiler=record, bw_compiler=record)


def _ops_backend_with_sizes(seen):
    """As :func:`_ops_backend`, recording ``(op, index length)`` of scatter-like ops too."""
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_module_simplified

    def record(gm, _):
        for nd in gm.graph.nodes:
            if nd.op != "call_function":
                continue
            op = str(nd.target)
            if "index_add" in op or "scatter" in op or "index_put" in op:
                idx = nd.args[2] if "index_add" in op or "scatter" in op else nd.args[1][0]
                # the index length (dim 0): a scatter's index is expanded to [K, F]
                seen.add((op, tuple(idx.meta["val"].shape)[:1]))
            else:
                seen.add((op, None))
        return make_boxed_func(gm.forward)

    return lambda gm, ex: aot_module_simplified(gm, ex, fw_compiler=record, bw_compiler=record)


@pytest.mark.parametrize("layout", [None, "ell", "hyb"])
def test_routing_holds_under_dynamo(layout):
    """The ELL graphs have no index_add / scatter over edges; the scatter path does; HYB's
    only ones are over its spill lists (length K, not E)."""
    torch._dynamo.reset()
    data = _molecules()
    loader = ga.FixedSizeLoader(data, ga.Budget.fit(data, 3), layout=layout,
                                layout_widths=(1, 1) if layout == "hyb" else None)
    seen = set()
    w = ga.ipu_wrap(Net())
    c = torch.compile(w, backend=_ops_backend_with_sizes(seen), fullgraph=True)
    flat = next(iter(loader))
    c(flat)["output"].sum().backward()
    scatters = {(op, shape) for op, shape in seen if shape is not None}
    assert bool(scatters) == (layout != "ell"), scatters
    if layout == "hyb":
        k = loader.collator.layout_spills
        assert k[0] != flat["edge_index"].size(1)  # the lengths tell spills from edges
        assert {shape for _, shape in scatters} <= {(k[0],), (k[1],)}, (scatters, k)
    if layout is None:
        assert (flat["edge_index"].size(1),) in {shape for _, shape in scatters}


@pytest.mark.parametrize("layout", ["ell", "hyb"])
def test_inference_uses_only_the_narrow_tables(layout):
    """Without a gradient to record, HYB's narrow tables aggregate (faster than ATen's
    serial scatter forward at 2 threads) and ELL's wide ones leave it to PyG's scatter
    (which beat them)."""
    torch._dynamo.reset()
    data = _molecules()
    loader = ga.FixedSizeLoader(data, ga.Budget.fit(data, 3), layout=layout)
    seen = set()
    c = torch.compile(ga.ipu_wrap(Net()).eval(), backend=_ops_backend_with_sizes(seen),
                      fullgraph=True)
    with torch.no_grad():
        flat = next(iter(loader))
        c(flat)
    e = flat["edge_index"].size(1)
    if layout == "hyb":
        assert e not in loader.collator.layout_spills  # the lengths tell spills from edges
    scattered_edges = {shape for _, shape in seen if shape == (e,)}
    assert bool(scattered_edges) == (layout == "ell"), (layout, seen)


def _narrow_loader(n, layout):
    """Batches of 4 of ``n`` molecules with ``layout``; ``hyb`` at width 1 so that
    most edges spill."""
    data = _molecules(n)
    return ga.FixedSizeLoader(data, ga.Budget.fit(data, 4), layout=layout,
                              layout_widths=(1, 1) if layout == "hyb" else None)


@pytest.mark.parametrize("layout", ["ell", "hyb"])
def test_one_compile_per_mode_and_same_results(layout):
    loader = _narrow_loader(12, layout)
    torch.manual_seed(0)
    eager = ga.ipu_wrap(Net())
    compiled = ga.compile(ga.ipu_wrap(copy.deepcopy(eager.model)), "aot_eager")
    for train in (True, False):
        eager.train(train)
        compiled.train(train)
        for flat in loader:
            want = eager(flat)["output"]
            got = compiled(flat)["output"]
            torch.testing.assert_close(got, want, atol=ATOL, rtol=1e-4)
    assert compiled.compile_count == 2  # one per mode, every batch the same shapes


def test_graph_over_the_widths_names_it():
    star = Data(x=torch.randn(4, 4), edge_index=torch.tensor([[1, 2, 3], [0, 0, 0]]))
    data = _molecules(3) + [star]
    budget = ga.Budget.fit(data, 4)
    with pytest.raises(DegreeWidthError, match=r"graph 3 .*its node 0 has 3 in-edges, more than "
                                               r"the ELL width 2 .*given.*layout_widths"):
        Collator(data, budget, layout="ell", layout_widths=(2, 2)).collate_indices([0, 3])
    fitted = Collator(data, budget, layout="ell")
    assert fitted.layout_widths == (3, 2)
    hub = Data(x=torch.randn(4, 4), edge_index=torch.tensor([[0, 0, 0], [1, 2, 3]]))
    with pytest.raises(DegreeWidthError, match=r"graph 0 .*its node 0 has 3 out-edges.*fitted"):
        fitted.collate([hub])  # a graph the widths were not fitted on


def test_hetero_and_unknown_layouts_are_refused():
    h = HeteroData()
    h["a"].x = torch.randn(2, 3)
    h["a", "r", "a"].edge_index = torch.tensor([[0], [1]])
    with pytest.raises(ValueError, match="homogeneous"):
        ga.FixedSizeLoader([h], ga.Budget.fit([h], 1), layout="ell")
    data = _molecules(2)
    with pytest.raises(ValueError, match="layout must be"):
        ga.FixedSizeLoader(data, ga.Budget.fit(data, 2), layout="csr")


@pytest.mark.parametrize("layout", ["ell", "hyb"])
def test_unpad_leaves_the_tables_out(layout):
    data = _molecules(3)
    c = Collator(data, ga.Budget.fit(data, 3), layout=layout)
    back = c.unpad(c.collate_indices([0, 1, 2]))
    assert [sorted(d.keys()) for d in back] == [sorted(d.keys()) for d in data]


@pytest.mark.parametrize("layout", ["ell", "hyb"])
def test_double_backward_through_the_transposes(layout):
    """Each function's backward is the other, so second derivatives exist."""
    ei = torch.tensor([[0, 1, 1, 2, 2], [1, 0, 2, 1, 1]])
    flat = Collator([Data(x=torch.zeros(3, 1), edge_index=ei)],
                    ga.Budget(nodes=5, edges=6, graphs=2), layout=layout,
                    layout_widths=(1, 1) if layout == "hyb" else None).collate_indices([0])
    x = torch.randn(5, 2, dtype=torch.float64, requires_grad=True)
    src, dst = flat["edge_index"]
    sp_in, sp_out = flat.get(SPILL_IN), flat.get(SPILL_OUT)
    if layout == "hyb":
        assert (sp_in[0] < 6).sum() == 2 and (sp_out[0] < 6).sum() == 2

    def f(x):
        return static_layout.ell_sum(static_layout.ell_gather(x, src, flat[ELL_OUT], sp_out) ** 2,
                                     dst, flat[ELL_IN], sp_in)

    assert torch.autograd.gradcheck(f, (x,))
    assert torch.autograd.gradgradcheck(f, (x,))


@pytest.mark.slow  # ell runs in CI's second step (extended): the main suite stays under 10 min
@pytest.mark.parametrize("layout", [pytest.param("ell", marks=pytest.mark.extended), "hyb"])
def test_inductor_matches_eager_on_ell_batches(layout):
    loader = _narrow_loader(8, layout)
    torch.manual_seed(0)
    eager = ga.ipu_wrap(Net())
    compiled = ga.compile(ga.ipu_wrap(copy.deepcopy(eager.model)), "inductor")
    for flat in loader:
        want = eager(flat)
        got = compiled(flat)
        torch.testing.assert_close(got["output"], want["output"], atol=ATOL, rtol=1e-4)
    np.testing.assert_equal(compiled.compile_count, 1)


def test_loaders_fitted_apart_get_a_shape_error_that_says_what_to_do():
    """Train and test loaders that fit their HYB tables apart give batches of two
    shapes; the compiled model's error names the table and the fix."""
    from graph_adapter.backends import ShapeChangedError

    star = Data(x=torch.randn(6, 4), edge_index=torch.tensor([[1, 2, 3, 4, 5], [0] * 5]))
    data = _molecules(300) + [star] * 6
    budget = ga.Budget.fit(data, 4)
    train = ga.FixedSizeLoader(data, budget, layout="hyb")
    test = ga.FixedSizeLoader(_molecules(10, seed=1) + [star], budget, layout="hyb")
    c = ga.compile(ga.ipu_wrap(Net()).eval(), "eager")
    with torch.no_grad():
        c(next(iter(train)))
        with pytest.raises(ShapeChangedError, match=r"a layout table: .*layout_widths / "
                                                     r"layout_spills to both"):
            c(next(iter(test)))
