"""Values the scan cannot collate are named: a key that is a tensor in graph 0 and a
``str`` in a later graph names both graphs (both ``columnar`` settings); a nested tensor
is left out with its reason (as sparse ones are), and a non-tensor value of graph 0 names
graph 0."""
import warnings

import pytest
import torch
from torch_geometric.data import Data

from graph_adapter.batching import Budget, FixedSizeLoader


def _graphs(n=6, **attrs):
    return [Data(x=torch.randn(4, 3), edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]), **attrs)
            for _ in range(n)]


@pytest.mark.parametrize("columnar", [True, False])
def test_a_tensor_in_graph_0_and_a_str_in_graph_4_names_both(columnar):
    graphs = _graphs(name=torch.tensor([1.0]))
    graphs[4].name = "a"
    with pytest.raises(ValueError, match=r"'name'.*dataset index 4.*str.*graph 0.*tensor"):
        list(FixedSizeLoader(graphs, Budget.tight(graphs, 3), columnar=columnar))


def test_a_nested_tensor_is_left_out_with_its_reason():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graphs = [Data(x=torch.randn(3, 2), edge_index=torch.tensor([[0, 1], [1, 2]]),
                       nest=torch.nested.nested_tensor([torch.randn(2), torch.randn(3)]))
                  for _ in range(3)]
    with pytest.warns(UserWarning, match="nest"):
        loader = FixedSizeLoader(graphs, Budget(nodes=10, edges=9, graphs=4))
    assert "nested tensor" in loader.excluded_keys["nest"]
    assert all("nest" not in k for k in next(iter(loader)))


def test_a_str_in_graph_0_names_graph_0():
    graphs = _graphs(name="a")
    with pytest.warns(UserWarning, match="name"):
        loader = FixedSizeLoader(graphs, Budget.tight(graphs, 3))
    assert "dataset index 0" in loader.excluded_keys["name"], loader.excluded_keys
