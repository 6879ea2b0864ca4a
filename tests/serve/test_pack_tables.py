"""The packer's neighbour tables (``in_slots`` / ``in_spill``) of ONNX artifacts.

An ONNX artifact sums edge rows into their target nodes over tables the packer builds
(a gather and a sum over each node's slots: the same bits at any thread count, no sort
in the graph). The tables must be the layout ``FixedSizeLoader(layout="hyb")`` builds
(``docs/dev/FORMAT.md``), a call must never hold more edges past the width than the
spill capacity, and a graph that cannot fit one call gets a named error. A contract
with tables says version 3 (a runtime before it refuses it by its version); one
without keeps version 1 or 2 (older runtimes read it).
"""
import json
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from graph_adapter.batching._layout import hyb_tables
from graph_adapter.serve import Contract, GraphTooLargeError, InputField, Rung
from graph_adapter.serve.ops import NumpyOps, TorchOps
from graph_adapter.serve.pack import (in_tables, pack_call, plan_calls, plan_ladder,
                                      spill_counts)


@st.composite
def target_rows(draw):
    n = draw(st.integers(2, 12))
    e = draw(st.integers(0, 30))
    real = draw(st.integers(0, e))
    row = draw(st.lists(st.integers(0, n - 2), min_size=real, max_size=real))
    return np.array(row + [n - 1] * (e - real), dtype=np.int64), real, n


@settings(max_examples=60, deadline=None)
@given(target_rows(), st.integers(1, 4))
def test_tables_are_the_hyb_layout_and_hold_every_real_edge_once(case, width):
    row, real, n = case
    deg = np.bincount(row[:real], minlength=n)
    spill = int(np.maximum(deg - width, 0).sum())
    slots, lst = in_tables(row, real, n, width, spill + 2)
    edge_index = np.stack([np.zeros_like(row), row])
    ref_slots, _, ref_spill, _ = hyb_tables(edge_index, real, n, (width, 1), (spill + 2, 64))
    np.testing.assert_array_equal(slots, ref_slots)
    np.testing.assert_array_equal(lst, ref_spill)
    E = len(row)
    held = sorted([int(s) for s in slots.reshape(-1) if s != E] +
                  [int(s) for s in lst[0] if s != E])
    assert held == list(range(real))  # every real edge once, no padding edge
    for node in range(n):
        ids = [int(s) for s in slots[node] if s != E]
        assert ids == sorted(ids) and all(row[i] == node for i in ids)
    assert all(row[i] == v for i, v in zip(lst[0], lst[1]) if i != E)
    with pytest.raises(ValueError, match="spill capacity") if spill else _nothing():
        in_tables(row, real, n, width, spill - 1 if spill else 0)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _contract(N=40, E=60, G=6, width=2, spill=3):
    inputs = (InputField("x", "feature", "node", "float32", (None, 1)),
              InputField("edge_index", "feature", "edge", "int64", (2, None), "nodes"),
              InputField("batch", "reserved", "node", "int64", (N,)),
              InputField("in_slots", "reserved", "node", "int64", (N, width)),
              InputField("in_spill", "reserved", "other", "int64", (2, spill)))
    return Contract("onnx", N, E, G, inputs, ())


def _star(leaves, hub_in=True):
    """A star: ``leaves`` edges into node 0 (in-degree ``leaves``)."""
    src = np.arange(1, leaves + 1)
    ei = np.stack([src, np.zeros_like(src)]) if hub_in else np.stack([np.zeros_like(src), src])
    return {"x": np.ones((leaves + 1, 1), np.float32), "edge_index": ei.astype(np.int64)}


def _read(contract, graphs, ops):
    from graph_adapter.serve.pack import read_graph

    return [read_graph(contract, ops, g, i) for i, g in enumerate(graphs)]


@pytest.mark.parametrize("ops", [NumpyOps(), TorchOps()], ids=["numpy", "torch"])
def test_calls_never_spill_past_the_capacity_and_tables_match(ops):
    c = _contract()
    graphs = _read(c, [_star(4), _star(2), _star(3), _star(4, hub_in=False), _star(3)], ops)
    assert spill_counts(graphs, 2) == [2, 0, 1, 0, 1]
    calls = plan_calls(c, graphs)
    assert [i for call in calls for i in call] == list(range(5))
    for call in calls:
        assert sum(spill_counts([graphs[i] for i in call], 2)) <= 3
        flat = pack_call(c, ops, [graphs[i] for i in call])
        assert list(flat) == c.input_keys()
        ei = np.asarray(flat["edge_index"])
        e = sum(graphs[i].edges for i in call)
        ref, _, ref_spill, _ = hyb_tables(ei, e, c.nodes, (2, 1), (3, 64))
        np.testing.assert_array_equal(np.asarray(flat["in_slots"]), ref)
        np.testing.assert_array_equal(np.asarray(flat["in_spill"]), ref_spill)
    assert len(calls) == 2  # 2 + 0 + 1 fill the capacity of 3: the fourth spill closes it


def test_a_graph_spilling_past_the_capacity_is_named():
    c = _contract()
    graphs = _read(c, [_star(2), _star(6)], NumpyOps())  # 4 past the width 2, capacity 3
    with pytest.raises(GraphTooLargeError, match=r"graph 1 has 4 in-edges past the 2.*in_spill"
                       r".*example=.*FixedSizeLoader.*format='pt2'"):
        plan_calls(c, graphs)


def test_a_ladder_sends_a_hub_to_a_rung_whose_spill_holds_it():
    small, big = _contract(N=12, E=20, G=2, spill=1), _contract(spill=6)
    graphs = _read(big, [_star(2), _star(6), _star(1)], NumpyOps())
    plan = plan_ladder([small, big], graphs)
    assert sorted(i for _, call in plan for i in call) == [0, 1, 2]
    assert all(r == 1 for r, call in plan if 1 in call)
    with pytest.raises(GraphTooLargeError, match="in-edges past"):
        plan_ladder([small, _contract(spill=3)], _read(big, [_star(9)], NumpyOps()))


def test_a_contract_with_tables_says_version_3_and_others_keep_theirs():
    tabled = _contract()
    assert json.loads(tabled.to_json())["contract_version"] == 3
    assert Contract.from_json(tabled.to_json()) == tabled
    plain = dataclasses.replace(tabled, inputs=tabled.inputs[:3])
    assert json.loads(plain.to_json())["contract_version"] == 1
    ladder = dataclasses.replace(plain, rungs=(Rung(40, 60, 6, "rung0"),),
                                 onnx_rung_input="graph_adapter_rung")
    assert json.loads(ladder.to_json())["contract_version"] == 2


def test_each_rung_of_a_ladder_packs_its_own_table_sizes():
    from graph_adapter.serve.runtime import rung_contract

    c = dataclasses.replace(
        _contract(N=40, spill=5), rungs=(Rung(12, 20, 2, "rung0"), Rung(40, 60, 6, "rung1")),
        onnx_rung_input="graph_adapter_rung",
        onnx_input_names=("x", "ei", "batch", "graph_adapter_in_slots", "graph_adapter_in_spill"),
        onnx_rung_dims={"graph_adapter_in_slots_dim0": (12, 40),
                        "graph_adapter_in_spill_dim1": (2, 5)})
    r0 = rung_contract(c, 0)
    assert (r0.nodes, r0.edges, r0.graphs) == (12, 20, 2)
    assert {f.key: f.shape for f in r0.inputs}["in_slots"] == (12, 2)
    assert {f.key: f.shape for f in r0.inputs}["in_spill"] == (2, 2)
    flat = pack_call(r0, NumpyOps(), _read(r0, [_star(3)], NumpyOps()))
    assert flat["in_slots"].shape == (12, 2) and flat["in_spill"].shape == (2, 2)
