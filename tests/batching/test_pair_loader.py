"""FixedSizeLoader on graphs with several node sets in one store (PyG's PairData):
refused by name, listing the sets, before any key is misread."""
import warnings

import pytest
import torch
from torch_geometric.data import Data

from graph_adapter.batching import Budget, Collator


class PairData(Data):
    def __inc__(self, key, value, *args, **kwargs):
        if key == "edge_index_s":
            return self.x_s.size(0)
        if key == "edge_index_t":
            return self.x_t.size(0)
        return super().__inc__(key, value, *args, **kwargs)


def _pd():
    return PairData(x_s=torch.randn(5, 16), edge_index_s=torch.tensor([[0, 0, 0, 0], [1, 2, 3, 4]]),
                    x_t=torch.randn(4, 16), edge_index_t=torch.tensor([[0, 0, 0], [1, 2, 3]]))


def test_pair_data_refused_naming_its_node_sets():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(ValueError, match=r"make 2 node sets .*\['x_s', 'x_t'\].*exclude=") as e:
            Collator([_pd(), _pd()], Budget(nodes=20, edges=17, graphs=3))
    assert "graph 0 makes it node-level" not in str(e.value)


def test_plain_data_with_suffixed_keys_unaffected():
    # PyG's own __inc__: one node set, whatever the key names
    d = Data(x=torch.randn(4, 2), edge_index=torch.tensor([[0, 1], [1, 2]]),
             node_index_2=torch.tensor([3, 0, 1, 2]), x_2=torch.randn(4, 1))
    c = Collator([d, d], Budget(nodes=12, edges=7, graphs=3), warn=False)
    assert c.levels["x_2"] == "node" and c.levels["node_index_2"] == "node"
