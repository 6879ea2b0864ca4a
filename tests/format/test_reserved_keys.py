"""Every key the format or a loader adds is reserved in one place and listed in FORMAT.md."""
import os
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data

import graph_adapter as ga
from graph_adapter import format as F

FORMAT_MD = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "dev", "FORMAT.md")


def _table_keys():
    text = open(FORMAT_MD).read()
    section = text.split("## Reserved keys", 1)[1].split("\n## ", 1)[0]
    keys = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            keys.update(re.findall(r"`(\w+)`", line.split("|")[1]))
    return keys


def test_format_md_lists_every_reserved_key():
    assert set(F.ALL_RESERVED_KEYS) == _table_keys()


def test_the_groups_make_up_the_whole_and_do_not_overlap():
    groups = [F.RESERVED_KEYS, F.LAYOUT_KEYS, F.SAMPLED_KEYS, F.LINK_KEYS, F.HOP_KEYS]
    assert sum(map(len, groups)) == len(set(F.ALL_RESERVED_KEYS)) == len(F.ALL_RESERVED_KEYS)
    assert not {F.OUTPUT_KEY, F.LOSS_KEY} & set(F.ALL_RESERVED_KEYS)


def _graph(n, m, seed):
    g = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(n, 3, generator=g), edge_index=torch.randint(0, n, (2, m), generator=g))


@settings(max_examples=10, deadline=None)
@given(n=st.integers(4, 30), m=st.integers(1, 80), seed=st.integers(0, 99),
       disjoint=st.booleans())
def test_a_neighbor_batch_adds_only_reserved_keys(n, m, seed, disjoint):
    d = _graph(n, m, seed)
    flat = next(iter(ga.FixedSizeNeighborLoader(d, [2, 2], batch_size=2, disjoint=disjoint)))
    added = {k for k in flat if k not in d.keys()}
    assert added <= set(F.ALL_RESERVED_KEYS), added - set(F.ALL_RESERVED_KEYS)
    assert set(F.SAMPLED_KEYS) - {F.SEED_OF} <= added


@pytest.mark.parametrize("neg", ["binary", "triplet"])
def test_a_link_batch_adds_only_reserved_keys(neg):
    d = _graph(20, 60, 0)
    flat = next(iter(ga.FixedSizeLinkNeighborLoader(d, [2], batch_size=4, neg_sampling=neg)))
    added = {k for k in flat if k not in d.keys()}
    assert added <= set(F.ALL_RESERVED_KEYS), added - set(F.ALL_RESERVED_KEYS)
    assert set(F.LINK_KEYS) & added


def test_a_dataset_attribute_may_not_use_a_samplers_key():
    d = _graph(10, 20, 0)
    d.seed_mask = torch.ones(10, dtype=torch.bool)
    with pytest.raises(ValueError, match="seed_mask"):
        next(iter(ga.FixedSizeNeighborLoader(d, [2], batch_size=2)))
    # n_id / e_id: PyG's loaders keep a graph's own (one integer a row; any other form is
    # refused by name): tests/sampling/test_numpy_features.py
    d = _graph(10, 20, 0)
    d.n_id = torch.randn(10)
    with pytest.raises(ValueError, match="n_id"):
        next(iter(ga.FixedSizeNeighborLoader(d, [2], batch_size=2)))
