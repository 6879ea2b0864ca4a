"""Issue 27 item 7 (collation): a graph tensor that requires grad or is not on the CPU is
named (graph index, key, what to do), not numpy's own error; a dataset mixing Data and
HeteroData is named."""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch_geometric.data import Data, HeteroData

import graph_adapter as ga
from graph_adapter.batching._view import check_graph_item  # noqa: the data stage's own helper


def _graph(n=4):
    return Data(x=torch.randn(n, 3), edge_index=torch.tensor([[0, 1], [1, 2]]),
                edge_attr=torch.randn(2, 2), y=torch.randn(1))


def _hetero():
    d = HeteroData()
    d["a"].x = torch.randn(3, 3)
    d["a", "r", "a"].edge_index = torch.tensor([[0], [1]])
    return d


BUDGET = ga.Budget(nodes=40, edges=20, graphs=7)


@given(n=st.integers(1, 5), j=st.data(), key=st.sampled_from(["x", "edge_attr", "y"]),
       how=st.sampled_from(["grad", "meta"]))
def test_a_tensor_collation_cannot_copy_is_named(n, j, key, how):
    graphs = [_graph() for _ in range(n)]
    i = j.draw(st.integers(0, n - 1))
    v = graphs[i][key]
    graphs[i][key] = v.clone().requires_grad_(True) if how == "grad" else v.to("meta")
    with pytest.raises(ValueError) as e:
        ga.collate_padded(graphs, BUDGET)
    msg = str(e.value)
    assert f"index {i}" in msg and f"key {key!r}" in msg, msg
    assert ("detach()" in msg) if how == "grad" else ("meta" in msg and "data.cpu()" in msg)


def test_the_loader_names_it_too():
    graphs = [_graph() for _ in range(4)]
    graphs[2].x = graphs[2].x.requires_grad_(True)
    with pytest.raises(ValueError, match=r"index 2: key 'x' requires grad"):
        ga.FixedSizeLoader(graphs, BUDGET)


def test_detached_graphs_collate():
    graphs = [_graph() for _ in range(3)]
    graphs[1].x = (graphs[1].x.requires_grad_(True) * 2).detach()
    out = ga.collate_padded(graphs, BUDGET)
    assert not out["x"].requires_grad


@pytest.mark.parametrize("order", ["data_first", "hetero_first"])
def test_mixed_data_and_hetero_data_is_named(order):
    items = [_graph(), _hetero()] if order == "data_first" else [_hetero(), _graph()]
    budget = BUDGET if order == "data_first" else ga.Budget(
        nodes={"a": 10}, edges={"a__r__a": 4}, graphs=3)
    with pytest.raises(TypeError, match=r"index 1 is (not )?HeteroData, graph 0 is"):
        ga.FixedSizeLoader(items, budget)
    with pytest.raises(TypeError, match=r"index 1 is a (HeteroData|Data), item 0 is a .*all Data "
                                        r"or all HeteroData"):
        check_graph_item(items[1], 1, items[0])
    check_graph_item(items[0], 0, items[0])


@pytest.mark.parametrize("first_hetero", [False, True])
def test_a_budget_of_mixed_data_and_heterodata_names_the_graph(first_hetero):
    """Budget.fit / Budget.tight scan sizes first: a dataset mixing Data and HeteroData
    is refused there, naming the graph, not with PyG's own AttributeError."""
    from torch_geometric.data import Data, HeteroData

    import graph_adapter as ga

    d = Data(x=torch.zeros(3, 2), edge_index=torch.tensor([[0, 1], [1, 2]]))
    h = HeteroData()
    h["a"].x = torch.zeros(2, 2)
    h["a", "to", "a"].edge_index = torch.tensor([[0], [1]])
    graphs = [h, d, h] if first_hetero else [d, h, d]
    for fit in (ga.Budget.tight, ga.Budget.fit):
        with pytest.raises(TypeError, match="index 1"):
            fit(graphs, 2)
