"""layout="hyb" spills with ``scatter_add`` (poptorch has a handler for it, none for
``index_add``): :func:`static_layout.add_rows` sums like ``index_add`` whatever the
index, and the dispatcher checker passes a HYB model in training where the
``index_add`` spill is reported."""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch_geometric.data import Data
from torch_geometric.nn import GINConv, SAGEConv

from graph_adapter.checker import check
from graph_adapter.batching import Budget
from graph_adapter.batching import FixedSizeLoader
from graph_adapter.nn import static_layout
from graph_adapter.nn import masked_mse_loss
from graph_adapter.nn import ipu_wrap


@given(n=st.integers(1, 12), k=st.integers(0, 30), feat=st.integers(0, 2),
       dtype=st.sampled_from([torch.int64, torch.int32]), seed=st.integers(0, 2**16))
def test_add_rows_equals_index_add(n, k, feat, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    shape = (n,) + (3,) * feat
    out = torch.randint(-5, 5, shape, generator=g).double()
    rows = torch.randint(-5, 5, (k,) + shape[1:], generator=g).double()
    index = torch.randint(0, n, (k,), generator=g).to(dtype)
    want = out.index_add(0, index, rows)  # integers in float64: exact in any order
    for kind in ("scatter_add", "index_add"):
        old, static_layout.SPILL_ADD = static_layout.SPILL_ADD, kind
        try:
            got = static_layout.add_rows(out, index, rows)
        finally:
            static_layout.SPILL_ADD = old
        assert torch.equal(got, want), kind
    assert torch.equal(out, out.clone())  # not in place


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.c1 = GINConv(torch.nn.Linear(4, 8))
        self.c2 = SAGEConv(8, 1, aggr="mean")

    def forward(self, x, edge_index):
        return self.c2(torch.relu(self.c1(self.lin(x), edge_index)), edge_index)


def _hyb_batch():
    """A batch of chains at HYB width 1: most edges spill, both spill lists used."""
    g = torch.Generator().manual_seed(0)
    data = []
    for i in range(6):
        n = 3 + i % 4
        src = torch.arange(n - 1)
        ei = torch.cat([torch.stack([src, src + 1]), torch.stack([src + 1, src])], 1)
        data.append(Data(x=torch.randn(n, 4, generator=g), edge_index=ei,
                         y=torch.randn(n, 1, generator=g)))
    loader = FixedSizeLoader(data, Budget.fit(data, 4), layout="hyb", layout_widths=(1, 1))
    return next(iter(loader))


@pytest.mark.parametrize("kind", ["scatter_add", "index_add"])
def test_checker_passes_the_scatter_add_spill_and_reports_index_add(kind, monkeypatch):
    flat = _hyb_batch()
    assert int((flat["in_spill"][0] < flat["edge_index"].size(1)).sum()) > 0  # edges spill
    monkeypatch.setattr(static_layout, "SPILL_ADD", kind)
    torch.manual_seed(0)
    wrapped = ipu_wrap(_Net(), loss_fn=lambda out, b: masked_mse_loss(out, b.y, b.node_mask))
    report = check(wrapped, flat, training=True)
    index_add = [f for f in report.findings if "index_add" in str(f)]
    if kind == "scatter_add":
        assert report.ok, str(report)
        assert not index_add
    else:
        assert index_add, str(report)
