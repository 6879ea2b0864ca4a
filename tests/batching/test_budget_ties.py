"""A budget's row counts never tie (docs/dev/FORMAT.md, "The level of a key").

Inside ``ipu_wrap`` a masked layer (the masked BatchNorm) finds the mask of a
tensor by its row count alone (``format.mask_of_rows``): with as many node as
edge slots (``N == E``) an edge-level BatchNorm would get the node mask and
compute its statistics over the wrong rows, silently.  So ``Budget(...)`` (and
its JSON) refuses any two equal counts, naming both and the fix, and
``Budget.fit`` / ``Budget.tight`` never produce one.
"""
import copy
import json
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch_geometric.data import Batch, Data, HeteroData
from torch_geometric.nn import global_add_pool
from torch_geometric.utils import scatter

from graph_adapter.batching import Budget
from graph_adapter.batching import Collator
from graph_adapter.batching import FixedSizeLoader
from graph_adapter.batching import GraphSizes
from graph_adapter.nn import ipu_wrap

SETTINGS = settings(deadline=None)
DOCS = "docs/dev/FORMAT.md#the-level-of-a-key"


def _suggested(msg: str) -> Budget:
    """The ``Budget(nodes=..., edges=..., graphs=...)`` an error message suggests."""
    m = re.search(r"Budget\(nodes=(.+?), edges=(.+?), graphs=(\d+)\)", msg)
    assert m, msg
    nodes, edges = (json.loads(g.replace("'", '"')) for g in m.groups()[:2])
    return Budget(nodes=nodes, edges=edges, graphs=int(m.group(3)))


# ------------------------------------------------------------------ the error
@pytest.mark.parametrize("nodes, edges, graphs, first, second, value, fix, loser, winner", [
    (30, 30, 5, "nodes", "edges", 30, "edges=31", "an edge", "node"),
    (6, 10, 6, "nodes", "graphs", 6, "nodes=7", "a graph", "node"),
    (12, 10, 10, "edges", "graphs", 10, "edges=11", "an edge", "graph"),
])
def test_a_homogeneous_tie_names_both_levels_why_and_the_fix(nodes, edges, graphs, first,
                                                            second, value, fix, loser,
                                                            winner):
    with pytest.raises(ValueError) as ei:
        Budget(nodes=nodes, edges=edges, graphs=graphs)
    msg = str(ei.value)
    assert f"{first} and {second} are both {value}" in msg
    assert "row count" in msg and DOCS in msg  # why, and where it is written down
    assert f"{loser}-level BatchNorm" in msg and f"the {winner} mask" in msg
    assert f"e.g. {fix} " in msg  # the fix: one row more
    fixed = _suggested(msg)
    assert len({fixed.nodes, fixed.edges, fixed.graphs}) == 3
    assert fixed.graphs == graphs  # graphs is the packer's cap: never moved


def test_a_three_way_tie_gets_one_fix_for_all():
    with pytest.raises(ValueError, match="nodes and edges are both 5") as ei:
        Budget(nodes=5, edges=5, graphs=5)
    assert _suggested(str(ei.value)) == Budget(nodes=6, edges=7, graphs=5)


@pytest.mark.parametrize("nodes, edges, graphs, named", [
    ({"a": 10, "b": 12}, {"a__r__b": 12}, 5, "nodes['b'] and edges['a__r__b'] are both 12"),
    ({"a": 10, "b": 5}, {"a__r__b": 12}, 5, "nodes['b'] and graphs are both 5"),
    ({"a": 10, "b": 11}, {"a__r__b": 7, "b__s__a": 7}, 5,
     "edges['a__r__b'] and edges['b__s__a'] are both 7"),
    ({"a": 10, "b": 10}, {"a__r__b": 7}, 5, "nodes['a'] and nodes['b'] are both 10"),
])
def test_a_hetero_tie_between_any_two_counts_is_refused(nodes, edges, graphs, named):
    """Hetero: every per-type count and the graph count. Across levels as in the
    homogeneous case; within a level too, because mask_of_rows takes the first
    mask of a level whose length matches (two node types with as many rows:
    one type's BatchNorm gets the other type's mask)."""
    with pytest.raises(ValueError) as ei:
        Budget(nodes=nodes, edges=edges, graphs=graphs)
    msg = str(ei.value)
    assert named in msg and DOCS in msg
    fixed = _suggested(msg)
    counts = [*fixed.nodes.values(), *fixed.edges.values(), fixed.graphs]
    assert len(set(counts)) == len(counts) and fixed.graphs == graphs


def test_json_and_dict_budgets_get_the_same_check():
    s = '{"nodes": 30, "edges": 30, "graphs": 5}'
    for load in (Budget.from_json, lambda s: Budget.from_dict(json.loads(s))):
        with pytest.raises(ValueError, match=r"nodes and edges are both 30.*edges=31"):
            load(s)
    graphs = [Data(x=torch.zeros(3, 1), edge_index=torch.zeros(2, 2, dtype=torch.long))]
    for budget in (s, json.loads(s)):  # a loader given the JSON or its dict
        with pytest.raises(ValueError, match="nodes and edges are both 30"):
            FixedSizeLoader(graphs, budget)
    h = '{"nodes": {"a": 4, "b": 5}, "edges": {"a__r__b": 4}, "graphs": 3}'
    with pytest.raises(ValueError, match=r"nodes\['a'\] and edges\['a__r__b'\] are both 4"):
        Budget.from_json(h)
    ok = Budget(nodes=30, edges=31, graphs=5)
    assert Budget.from_json(ok.to_json()) == ok


def test_other_errors_come_first():
    """A bad count is named as such, not as a tie."""
    with pytest.raises(ValueError, match="graphs must be >= 2"):
        Budget(nodes=10, edges=10, graphs=1)
    with pytest.raises(ValueError, match="nodes must be >= 2"):
        Budget(nodes=1, edges=1, graphs=2)


# ------------------------------------------------- fit and tight never tie
def _distinct(b: Budget) -> bool:
    counts = ([*b.nodes.values(), *b.edges.values()] if b.is_hetero
              else [b.nodes, b.edges]) + [b.graphs]
    return len(set(counts)) == len(counts)


@SETTINGS
@given(pairs=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), min_size=1,
                      max_size=12),
       k=st.integers(1, 6), round_to=st.sampled_from([1, 2, 4]), as_data=st.booleans())
def test_fit_and_tight_never_tie_on_tiny_datasets(pairs, k, round_to, as_data):
    """Tiny graphs (0-3 nodes, 0-4 edges) and small batches: N, E and G are all a
    handful of rows, where ties are likely before the nudge."""
    m = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    data = m
    if as_data:  # real Data objects, as a user passes them
        data = [Data(x=torch.zeros(n, 1), edge_index=torch.zeros(2, e, dtype=torch.long),
                     num_nodes=n) for n, e in pairs]
    for b in (Budget.fit(data, k, num_samples=30, round_to=round_to),
              Budget.tight(data, k)):
        assert _distinct(b), b
        cap, _ = b.capacity()
        assert np.all(m <= cap[None, :])  # the nudge only adds rows: every graph fits
        assert Budget.from_json(b.to_json()) == b


@SETTINGS
@given(rows=st.lists(st.tuples(*[st.integers(0, 3)] * 4), min_size=1, max_size=12),
       k=st.integers(1, 5))
def test_hetero_fit_and_tight_never_tie(rows, k):
    sizes = GraphSizes(np.asarray(rows, dtype=np.int64).reshape(-1, 4), ("a", "b"),
                       ("a__r__b", "b__s__a"))
    for b in (Budget.fit(sizes, k, num_samples=30), Budget.tight(sizes, k)):
        assert _distinct(b), b


def test_hetero_fit_on_graphs_with_reverse_edges():
    """ToUndirected-style reverse edge types have equal counts in every graph: their
    budgets would tie; fit / tight give one of them a row more."""
    graphs = []
    for i in range(20):
        h = HeteroData()
        h["a"].x = torch.zeros(2 + i % 3, 1)
        h["b"].x = torch.zeros(2 + i % 3, 1)
        ei = torch.zeros(2, 3 + i % 4, dtype=torch.long)
        h["a", "r", "b"].edge_index = ei
        h["b", "rev_r", "a"].edge_index = ei.clone()
        graphs.append(h)
    for b in (Budget.fit(graphs, 4), Budget.tight(graphs, 4)):
        assert _distinct(b), b


# ------------------------------------- what the rule protects: edge-level BatchNorm
class EdgeNorm(torch.nn.Module):
    """A BatchNorm1d on edge features (an edge-level norm), scattered to nodes and
    pooled per graph: forward(data)."""

    def __init__(self, f=3, hidden=4):
        super().__init__()
        self.lin = torch.nn.Linear(f, hidden)
        self.norm = torch.nn.BatchNorm1d(hidden)
        self.head = torch.nn.Linear(hidden, 1)

    def forward(self, data):
        h = self.norm(self.lin(data.edge_attr))  # [E, hidden]: edge-level statistics
        node = scatter(h, data.edge_index[1], dim=0, dim_size=data.x.size(0), reduce="sum")
        return self.head(global_add_pool(node, data.batch)).squeeze(-1)


def _edge_graphs():
    g = torch.Generator().manual_seed(0)
    out = []
    for n in (3, 4, 5):  # 12 nodes, 24 edges: the node and edge masks differ
        e = 2 * n
        out.append(Data(x=torch.randn(n, 2, generator=g, dtype=torch.float64),
                        edge_index=torch.randint(0, n, (2, e), generator=g),
                        edge_attr=torch.randn(e, 3, generator=g, dtype=torch.float64)))
    return out


@pytest.mark.parametrize("extra_edges", [0, 1])  # 0: N == E, the tie
def test_edge_level_batch_norm_equals_unpadded_or_the_budget_refuses(extra_edges):
    """Every budget that can be built gives an edge-level BatchNorm the edge mask:
    outputs, gradients and running statistics equal the unpadded model's in
    float64. The tie ``N == E`` cannot be built; without the check it would be
    (mutation: drop ``_check_no_tie``), and then the norm takes the node mask
    (12 rows, not the 24 real edges) and the comparison below fails."""
    graphs = _edge_graphs()
    ref_batch = Batch.from_data_list(graphs)
    n, e = ref_batch.num_nodes, ref_batch.num_edges
    assert n != e
    N = max(n + 2, e) + 1
    try:
        budget = Budget(nodes=N, edges=N + extra_edges, graphs=len(graphs) + 1)
    except ValueError as err:
        assert extra_edges == 0, err
        assert f"nodes and edges are both {N}" in str(err) and f"edges={N + 1}" in str(err)
        return
    flat = Collator(graphs, budget).collate_indices(range(len(graphs)))
    assert flat["edge_index"].size(1) == budget.edges  # the padded edge rows are there

    torch.manual_seed(0)
    ref = EdgeNorm().double().train()
    model = copy.deepcopy(ref)
    want = ref(ref_batch)
    w = torch.linspace(-1, 1, want.numel(), dtype=want.dtype)
    (want * w).sum().backward()
    out = ipu_wrap(model).train()(flat)["output"]
    got = out[flat["graph_mask"]]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    (got * w).sum().backward()
    for (name, p), (_, q) in zip(ref.named_parameters(), model.named_parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=1e-12, msg=name)
    for key in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(model.norm, key), getattr(ref.norm, key),
                                   rtol=0, atol=1e-12, msg=key)
