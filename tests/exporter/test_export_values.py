"""What ``export`` records of each feature's valid values: the rows of the embedding table
each code column indexes (read from the traced program: ``embedding``, ``index_select``,
``index``, ``one_hot``, through casts, column selects and slices, ``unbind``), whether an
integer feature may be negative and a float one NaN/inf (from the data); and the largest
graph served of a ladder, one of ``max_nodes`` / ``max_edges`` derived from the other."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch_geometric.data import Data

from graph_adapter.exporter.ladder import ladder_of, served_size
from graph_adapter.exporter.values import index_tables, with_value_rules
from graph_adapter.serve import InputField


def _fields(width=3):
    return {"x": InputField("x", "feature", "node", "int64", (None, width)),
            "pos": InputField("pos", "feature", "node", "float32", (None, 2)),
            "c": InputField("c", "feature", "node", "int64", (None,))}


def _tables(module, width=3, n=6):
    flat = {"x": torch.zeros(n, width, dtype=torch.long), "pos": torch.zeros(n, 2),
            "c": torch.zeros(n, dtype=torch.long)}
    ep = torch.export.export(module, (flat,))
    return index_tables(ep, list(flat), _fields(width))


class PerColumn(nn.Module):
    """An atom encoder: column ``i`` through table ``i``; ``c`` through one table."""

    def __init__(self, rows):
        super().__init__()
        self.t = nn.ModuleList(nn.Embedding(r, 4) for r in rows)
        self.c = nn.Embedding(11, 4)

    def forward(self, flat):
        x = flat["x"]
        h = sum(t(x[:, i]) for i, t in enumerate(self.t))
        return h + self.c(flat["c"]) + flat["pos"].sum()


@settings(max_examples=10, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=1, max_size=4))
def test_each_column_gets_its_own_table_s_rows(rows):
    got = _tables(PerColumn(rows), width=len(rows))
    assert got == {"x": tuple(rows), "c": (11,)}


class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.whole = nn.Embedding(9, 4)
        self.w = nn.Parameter(torch.randn(7, 4))

    def forward(self, flat):
        x = flat["x"]
        a, b, c = x.long().unbind(1)  # column 0 via unbind, column 1 twice (smallest wins)
        h = torch.index_select(self.w, 0, a) + self.w[b] + self.whole(x[:, 1:])[:, 0]
        h = h + nn.functional.one_hot(b, 5).float().sum() + c.float().sum()  # 2: no table
        return h + self.whole(flat["c"] * 2).sum()  # computed codes: not the input's


def test_casts_unbind_slices_and_every_lookup_kind_are_followed():
    got = _tables(Mixed())
    # column 0: index_select of 7 rows; 1: w[b] (7), whole (9), one_hot (5): the fewest;
    # column 2: a slice of the whole table (9) only; c: multiplied first, not followed
    assert got == {"x": (7, 5, 9)}


class NoTable(nn.Module):
    def forward(self, flat):
        return flat["x"].float().sum() + flat["pos"].sum() + flat["c"].float().sum()


class FloatCodes(nn.Module):
    def __init__(self):
        super().__init__()
        self.t = nn.Embedding(6, 4)

    def forward(self, flat):
        return self.t(flat["pos"][:, 1].long()) + flat["x"].sum() + flat["c"].sum()


def test_a_float_feature_cast_to_codes_gets_its_table_too():
    assert _tables(FloatCodes()) == {"pos": (None, 6)}


def test_integer_features_read_as_numbers_index_no_table():
    assert _tables(NoTable()) == {}


def test_data_decides_negative_codes_and_nan_allowed():
    fields = tuple(_fields().values())
    clean = [Data(x=torch.zeros(3, 3, dtype=torch.long), pos=torch.zeros(3, 2),
                  c=torch.zeros(3, dtype=torch.long))]
    dirty = [Data(x=-torch.ones(3, 3, dtype=torch.long), pos=torch.full((3, 2), math.nan),
                  c=torch.zeros(3, dtype=torch.long))]
    got = {f.key: f for f in with_value_rules(fields, {"c": (11,)}, clean)}
    assert (got["x"].low, got["x"].codes, got["pos"].finite) == (0, None, True)
    assert (got["c"].low, got["c"].codes) == (0, (11,))
    got = {f.key: f for f in with_value_rules(fields, {"c": (11,)}, dirty)}
    assert (got["x"].low, got["pos"].finite) == (None, False)
    assert got["c"].low == 0  # a table's codes are never negative, whatever the data


def _ring(n):
    i = torch.arange(n)
    return Data(x=torch.zeros(n, 1), edge_index=torch.stack([i, (i + 1) % n]))


@given(st.integers(1, 500), st.lists(st.integers(2, 12), min_size=1, max_size=6))
def test_either_served_count_derives_the_other_from_the_densest_graph(nodes, sizes):
    data = [_ring(n) for n in sizes]
    extra = Data(x=torch.zeros(4, 1), edge_index=torch.zeros(2, 10, dtype=torch.long))  # 2.5/node
    assert served_size(data, nodes, None) == (nodes, nodes)  # rings: 1 edge a node
    assert served_size(data + [extra], nodes, None) == (nodes, math.ceil(nodes * 2.5))
    assert served_size(data, None, nodes) == (nodes, nodes)
    assert served_size(data, nodes, 7) == (nodes, 7)


def test_a_ladder_records_its_largest_graph_and_refuses_bad_sizes():
    data = [_ring(n) for n in (3, 5, 8)]
    lad = ladder_of(None, data, True, 30, None)
    assert lad.served == (30, 30) and lad.top in lad
    assert ladder_of(None, data, True, None, None).served is None
    with pytest.raises(ValueError, match="max_nodes=0"):
        ladder_of(None, data, True, 0, None)
    with pytest.raises(ValueError, match="pass ladder=True"):
        ladder_of(None, data, None, 30, None)
