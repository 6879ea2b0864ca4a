"""The figures the README and docs publish as exact come out of the benchmark
code now: the padding rows and the shapes row of `python benchmarks/bench_all.py`
(docs/benchmarks.md), and the 98.8% of node slots the README, concepts and
migrating pages quote.  (Throughput rows are measurements that move between
runs; they are not checked here.  The "2 compiles (train + eval) with
inductor" row: tests/backends/test_inductor_training.py.)
"""
import os
import re
import warnings

import pytest

import graph_adapter as ga
from benchmarks.harness import efficiency
from graph_adapter.app.datasets import load_nci5k

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EPOCHS = 3  # what `python benchmarks/bench_all.py` (not --quick) averages over


def _read(page):
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return f.read()


def _table_row(page, measure, baseline_is):
    """The cells of the docs table row with ``measure`` and ``baseline is``."""
    for line in _read(page).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 5 and cells[1] == measure and cells[4] == baseline_is:
            return cells
    raise AssertionError(f"{page}: no row {measure!r} / {baseline_is!r}")


@pytest.fixture(scope="module")
def molecules():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds, _ = load_nci5k()
    sizes = ga.graph_sizes(ds)
    return ds, sizes, ga.Budget.fit(sizes, 64)


@pytest.mark.filterwarnings("ignore")
def test_padding_rows_of_the_benchmark_table(molecules):
    ds, sizes, budget = molecules
    ours, _ = efficiency.ours(sizes, budget, "greedy", EPOCHS)
    ptm, _, _ = efficiency.fixed_count(sizes, 64, EPOCHS)
    node, edge = ours["node_efficiency"], ours["edge_efficiency"]
    page = "docs/benchmarks.md"
    row = _table_row(page, "node slots holding real nodes (64 graphs a batch)", "pad-to-max, 64 graphs")
    assert row[2:4] + [row[5]] == [f"{node:.1%}", f"{ptm['node_efficiency']:.1%}",
                                   f"{node / ptm['node_efficiency']:.1f}x"]
    row = _table_row(page, "edge slots holding real edges", "pad-to-max, 64 graphs")
    assert row[2:4] + [row[5]] == [f"{edge:.1%}", f"{ptm['edge_efficiency']:.1%}",
                                   f"{edge / ptm['edge_efficiency']:.1f}x"]
    dyn, dyn_shapes = efficiency.dynamic_sampler(ds, sizes, budget.max_real_nodes, EPOCHS)
    row = _table_row(page, "node slots holding real nodes", "PyG DynamicBatchSampler")
    assert row[2:4] == [f"{node:.1%}", f"{dyn['node_efficiency']:.1%}"]
    row = _table_row(page, "distinct batch shapes per epoch (= compiles)", "PyG DynamicBatchSampler")
    assert row[2:4] == ["1", f"{dyn_shapes:.0f}"]
    assert f"`Budget.fit(data, 64)` = {budget.nodes} / {budget.edges} / {budget.graphs}" in \
        " ".join(_read(page).split())


@pytest.mark.filterwarnings("ignore")
def test_node_slot_figure_quoted_in_readme_and_docs(molecules):
    _, sizes, budget = molecules
    ours, _ = efficiency.ours(sizes, budget, "greedy", EPOCHS)
    figure = f"{ours['node_efficiency']:.1%}"
    for page in ("README.md", "docs/concepts.md", "docs/migrating.md"):
        quoted = re.findall(r"(\d+\.\d%) of node slots", " ".join(_read(page).split()))
        assert quoted and set(quoted) == {figure}, (page, quoted, figure)
