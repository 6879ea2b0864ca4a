"""Several node sets in one store (PyG's advanced mini-batching ``PairData``) and
batches of batches: flatten / unflatten keep PyG's levels, sets and counts."""
import warnings

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch_geometric.data import Batch, Data

from graph_adapter.format import Spec, flatten, unflatten


class PairData(Data):
    """PyG's recipe: two node sets, each edge_index incremented by its own set's size."""

    def __inc__(self, key, value, *args, **kwargs):
        if key == "edge_index_s":
            return self.x_s.size(0)
        if key == "edge_index_t":
            return self.x_t.size(0)
        return super().__inc__(key, value, *args, **kwargs)


def _pair(ns: int, nt: int, es: int, et: int, seed: int) -> PairData:
    g = torch.Generator().manual_seed(seed)
    return PairData(x_s=torch.randn(ns, 3, generator=g),
                    edge_index_s=torch.randint(0, ns, (2, es), generator=g),
                    x_t=torch.randn(nt, 2, generator=g),
                    edge_index_t=torch.randint(0, nt, (2, et), generator=g))


_graph = st.builds(_pair, st.integers(1, 6), st.integers(1, 6), st.integers(0, 7),
                   st.integers(0, 7), st.integers(0, 2**16))


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():  # PyG cannot guess num_nodes of a PairData
        warnings.simplefilter("ignore", UserWarning)
        yield


def _sets(spec):
    return {f.key: (f.level, f.nodes, f.edges) for f in spec.fields}


PAIR_SETS = {"x_s": ("node", "x_s", ""), "x_t": ("node", "x_t", ""),
             "edge_index_s": ("edge", "x_s", "edge_index_s"),
             "edge_index_t": ("edge", "x_t", "edge_index_t")}


@settings(max_examples=25, deadline=None)
@given(st.lists(_graph, min_size=1, max_size=4), st.booleans())
def test_pair_batch_round_trip(graphs, follow):
    b = Batch.from_data_list(graphs, follow_batch=["x_s", "x_t"] if follow else None)
    flat, spec = flatten(b)
    want = dict(PAIR_SETS)
    if follow:
        want.update({"x_s_batch": ("node", "x_s", ""), "x_t_batch": ("node", "x_t", ""),
                     "x_s_ptr": ("other", "", ""), "x_t_ptr": ("other", "", "")})
    assert _sets(spec) == want
    assert Spec.from_json(spec.to_json()) == spec
    for s in (spec, Spec.from_json(spec.static().to_json())):
        out = unflatten(flat, s)
        assert type(out) is type(b) and out.num_graphs == len(graphs)
        for k in flat:
            assert torch.equal(out[k], b[k]), k
    back = unflatten(flat, spec).to_data_list()
    for a, g in zip(back, graphs):
        for k in ("x_s", "x_t", "edge_index_s", "edge_index_t"):
            assert torch.equal(a[k], g[k]), k


@settings(max_examples=10, deadline=None)
@given(_graph)
def test_pair_data_levels(g):
    flat, spec = flatten(g)
    assert _sets(spec) == PAIR_SETS
    out = unflatten(flat, spec)
    assert type(out) is PairData and all(torch.equal(out[k], g[k]) for k in flat)


def test_pair_static_num_graphs_without_follow_batch():
    b = Batch.from_data_list([_pair(3, 2, 2, 1, 0), _pair(1, 4, 0, 3, 1)])
    flat, spec = flatten(b)
    assert unflatten(flat, spec.static()).num_graphs == 2


def test_batching_of_batches_keeps_pyg_counts():
    # PyG's test_batching_of_batches
    data = Data(x=torch.randn(2, 16))
    inner = Batch.from_data_list([data, data])
    b = Batch.from_data_list([inner, inner])
    assert b.num_graphs == 2
    flat, spec = flatten(b)
    assert spec.field("x").level == "node"
    for s in (spec, spec.static(), Spec.from_json(spec.static().to_json())):
        out = unflatten(flat, s)
        assert out.num_graphs == 2
        assert out.batch.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [len(d.x) for d in unflatten(flat, spec).to_data_list()] == [4, 4]


def test_batching_of_batches_node_edge_tie():
    # as many edges as nodes in every graph: x is still node-level (PyG's tie rule)
    d1 = Data(x=torch.randn(2, 1), edge_index=torch.tensor([[0, 1], [1, 0]]))
    d2 = Data(x=torch.randn(3, 1), edge_index=torch.tensor([[0, 1, 2], [1, 2, 0]]))
    inner = Batch.from_data_list([d1, d2])
    _, spec = flatten(Batch.from_data_list([inner, inner]))
    assert spec.field("x").level == "node" and spec.field("edge_index").level == "edge"
