"""torch_scatter's functions inside a wrapped forward: static stand-ins
(graph_adapter.nn.static_scatter) that equal torch_scatter's own results."""
import copy

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch_geometric.data import Batch

from graph_adapter import check
from graph_adapter.nn import static
from graph_adapter.nn import ipu_wrap

from _compile_count import compile_counted
from _padding import pad_batch, random_graphs

pytestmark = pytest.mark.needs_scatter
torch_scatter = pytest.importorskip(
    "torch_scatter", reason="torch_scatter is not installed (pip install ../shared/wheels/"
    "torch_scatter-*.whl, or build it: pip wheel --no-build-isolation torch-scatter)")
from graph_adapter.nn import static_scatter  # noqa: E402

ts = torch_scatter


def _calls(src, index, ptr, size):
    """(name, thunk) for every public function, with the sizes given."""
    idx2 = index.view(-1, 1).expand_as(src)
    return [
        ("scatter_sum", lambda: ts.scatter_sum(src, index, 0, dim_size=size)),
        ("scatter_add", lambda: ts.scatter_add(src, idx2, 0, dim_size=size)),
        ("scatter_mul", lambda: ts.scatter_mul(src, index, 0, dim_size=size)),
        ("scatter_mean", lambda: ts.scatter_mean(src, index, 0, dim_size=size)),
        ("scatter_max", lambda: ts.scatter_max(src, index, 0, dim_size=size)),
        ("scatter_min", lambda: ts.scatter_min(src, index, 0, dim_size=size)),
        ("scatter_max_t", lambda: ts.scatter_max(src.t(), index, -1, dim_size=size)),
        ("scatter_max_out", lambda: ts.scatter_max(src, index, 0, out=src.new_full((size, src.size(1)), 0.5))),
        ("scatter/max", lambda: ts.scatter(src, index, 0, dim_size=size, reduce="max")),
        ("scatter/min", lambda: ts.scatter(src, index, 0, dim_size=size, reduce="min")),
        ("scatter/mean", lambda: ts.scatter(src, index, 0, dim_size=size, reduce="mean")),
        ("scatter/mul", lambda: ts.scatter(src, index, 0, dim_size=size, reduce="mul")),
        ("scatter_std", lambda: ts.scatter_std(src, index, 0, dim_size=size)),
        ("scatter_std_biased", lambda: ts.scatter_std(src, index, 0, dim_size=size, unbiased=False)),
        ("scatter_logsumexp", lambda: ts.scatter_logsumexp(src, index, 0, dim_size=size)),
        ("scatter_softmax", lambda: ts.scatter_softmax(src, index, 0, dim_size=size)),
        ("scatter_log_softmax", lambda: ts.scatter_log_softmax(src, index, 0, dim_size=size)),
        ("segment_coo/max", lambda: ts.segment_coo(src, index, dim_size=size, reduce="max")),
        ("segment_max_coo", lambda: ts.segment_max_coo(src, index, dim_size=size)),
        ("segment_min_coo", lambda: ts.segment_min_coo(src, index, dim_size=size)),
        ("segment_mean_coo", lambda: ts.segment_mean_coo(src, index, dim_size=size)),
        ("segment_sum_coo", lambda: ts.segment_sum_coo(src, index, dim_size=size)),
        ("gather_coo", lambda: ts.gather_coo(src.new_tensor(range(size)).view(-1, 1), index)),
        ("segment_csr/max", lambda: ts.segment_csr(src, ptr, reduce="max")),
        ("segment_max_csr", lambda: ts.segment_max_csr(src, ptr)),
        ("segment_min_csr", lambda: ts.segment_min_csr(src, ptr)),
        ("segment_mean_csr", lambda: ts.segment_mean_csr(src, ptr)),
        ("segment_sum_csr", lambda: ts.segment_sum_csr(src, ptr)),
        ("segment_add_csr", lambda: ts.segment_add_csr(src, ptr)),
        ("gather_csr", lambda: ts.gather_csr(src.new_tensor(range(size)).view(-1, 1), ptr)),
    ]


@st.composite
def rows(draw):
    """Integer-valued float rows (ties on purpose), a sorted index with empty slots."""
    size = draw(st.integers(1, 6))
    length = draw(st.integers(1, 12))
    index = sorted(draw(st.lists(st.integers(0, size - 1), min_size=length, max_size=length)))
    feats = draw(st.integers(1, 3))
    vals = draw(st.lists(st.integers(-3, 3), min_size=length * feats, max_size=length * feats))
    src = torch.tensor(vals, dtype=torch.float32).view(length, feats)
    index = torch.tensor(index)
    ptr = torch.cat([torch.zeros(1, dtype=torch.long),
                     torch.bincount(index, minlength=size).cumsum(0)])
    return src, index, ptr, size


def _same(a, b, name):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b), name
        for x, y in zip(a, b):
            _same(x, y, name)
        return
    assert a.shape == b.shape and a.dtype == b.dtype, (name, a.shape, b.shape)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=name)


@given(rows())
def test_equal_to_torch_scatter(args):
    src, index, ptr, size = args
    reference = {name: f() for name, f in _calls(src, index, ptr, size)}
    frame = {"G": size, "N": src.size(0), "E": None, "batches": [], "hetero": False}
    static.install()
    static.push_frame(frame)
    try:
        for name, f in _calls(src, index, ptr, size):
            _same(f(), reference[name], name)
    finally:
        static.pop_frame()


@given(rows())
def test_gradients_equal(args):
    """max/min route the gradient to the arg position, as torch_scatter does."""
    src, index, ptr, size = args
    weights = torch.randn(size, src.size(1), generator=torch.Generator().manual_seed(0))

    def grads(active):
        static.install()
        s = src.clone().requires_grad_(True)
        if active:
            static.push_frame({"G": size, "N": None, "E": None, "batches": [], "hetero": False})
        try:
            loss = sum((ts.scatter_max(s, index, 0, dim_size=size)[0] * weights).sum()
                       + (ts.scatter_std(s, index, 0, dim_size=size) * weights).sum()
                       + (ts.segment_min_csr(s, ptr)[0] * weights).sum()
                       for _ in [0])
        finally:
            if active:
                static.pop_frame()
        loss.backward()
        return s.grad

    torch.testing.assert_close(grads(True), grads(False), equal_nan=True)  # std at 0: nan in both


class GraphiumStylePool(torch.nn.Module):
    """Written like graphium's pooling and PNA aggregators: torch_scatter, dim_size from the batch."""

    def __init__(self, f=4, hidden=8):
        super().__init__()
        self.lin = torch.nn.Linear(f, hidden)
        self.head = torch.nn.Linear(6 * hidden, 1)

    def forward(self, data):
        h = self.lin(data.x).relu()
        row, col = data.edge_index
        msg = h[row]
        # PNA-style aggregators over edges (dim_size given, as graphium does)
        n = h.size(0)
        aggs = [ts.scatter(msg, col, 0, dim_size=n, reduce="max"),
                ts.scatter(msg, col, 0, dim_size=n, reduce="min"), ts.scatter_std(msg, col, 0, dim_size=n)]
        h = h + sum(aggs)
        # pooling over the batch vector, no dim_size (the budget supplies G)
        pools = [ts.scatter(h, data.batch, 0, reduce="max"), ts.scatter(h, data.batch, 0, reduce="sum"),
                 ts.scatter(h, data.batch, 0, reduce="mean"), ts.segment_csr(h, data.ptr, reduce="min"),
                 ts.scatter_logsumexp(h, data.batch, 0),
                 ts.scatter_max(h, data.batch, 0)[0]]
        return self.head(torch.cat(pools, dim=-1)).squeeze(-1)


@pytest.fixture
def padded():
    graphs = random_graphs(torch.Generator().manual_seed(3), 5)
    b = Batch.from_data_list(graphs)
    return b, pad_batch(graphs, b.num_nodes + 4, b.edge_index.size(1) + 6, b.num_graphs + 2)


def test_graphium_style_equals_unpadded_and_compiles_once(padded):
    b, flat = padded
    torch.manual_seed(0)
    model = GraphiumStylePool()
    ref = model(b)
    w = ipu_wrap(copy.deepcopy(model))
    torch.testing.assert_close(w(flat)["output"][flat["graph_mask"]], ref, atol=1e-5, rtol=1e-5)
    compiled, counter = compile_counted(w, aot=True)
    out = compiled(flat)
    assert counter.count == 1
    torch.testing.assert_close(out["output"][flat["graph_mask"]], ref, atol=1e-5, rtol=1e-5)


def test_check_is_clean(padded):
    _, flat = padded
    report = check(ipu_wrap(GraphiumStylePool()), flat)
    assert report.ok, str(report)
    assert not report.by_kind("unsupported-op")


def test_without_the_substitution_check_fails(padded):
    """The reason for all this: torch_scatter's own max has no fake kernel."""
    _, flat = padded
    static.uninstall()
    try:
        class Raw(torch.nn.Module):
            def forward(self, data):
                return static_scatter.ORIGINALS["scatter"](data.x, data.batch, 0, dim_size=3,
                                                           reduce="max")

        assert not check(ipu_wrap(Raw(), mask_norm=False), flat).ok
    finally:
        static.install()


def test_outside_a_wrapped_forward_the_originals_run(padded):
    b, _ = padded
    ipu_wrap(GraphiumStylePool())
    assert torch_scatter.scatter is static_scatter.REPLACEMENTS["scatter"]
    out = torch_scatter.scatter_max(b.x, b.batch, 0)
    torch.testing.assert_close(out[0], static_scatter.ORIGINALS["scatter_max"](b.x, b.batch, 0)[0])


def test_gather_csr_needs_a_size_it_can_know(padded):
    _, flat = padded

    class Bad(torch.nn.Module):
        def forward(self, data):
            return ts.gather_csr(data.x[:3], torch.tensor([0, 2, 3]))

    with pytest.raises(static.StaticSizeError, match="gather_csr"):
        ipu_wrap(Bad())(flat)
