"""The PyG zoo table (graph_adapter/app/zoo.py -> docs/zoo.md)."""
import os
import re

import pytest

from graph_adapter.app import zoo

DOC = os.path.join(os.path.dirname(__file__), "..", "docs", "zoo.md")


def _table_rows():
    with open(DOC) as f:
        doc = f.read()
    body = doc.split(zoo.BEGIN, 1)[1].split(zoo.END, 1)[0]
    out = {}
    for line in body.splitlines():
        m = re.match(r"\| (\w+) \| `(\w+)` \|(.*)\|\s*$", line)
        if m:
            out[(m.group(1), m.group(2))] = [c.strip() for c in m.group(3).split("|")]
    return out


@pytest.mark.parametrize("name", ["GCNConv", "SumAggregation", "global_mean_pool"])
def test_rows_run_green(name):
    entry = {n: (f, e) for f, n, e in zoo.rows()}[name]
    res = zoo.run_row(entry[0], name, entry[1])
    assert [res[k] for k in ("eager", "compile", "export", "check")] == ["ok"] * 4, res


def test_a_broken_row_says_why():
    res = zoo.run_row("conv", "Broken", lambda: 1 / 0)
    assert res["note"].startswith("not built: ZeroDivisionError")


def test_the_table_covers_every_layer_pyg_ships():
    """docs/zoo.md has a row for every entry of PyG's __all__ lists, and every
    cell of a built row is green or says why (rerun the script when this fails:
    python -m graph_adapter.app.zoo --write docs/zoo.md)."""
    table = _table_rows()
    missing = [(f, n) for f, n, _ in zoo.rows() if (f, n) not in table]
    assert not missing, f"rows missing from docs/zoo.md: {missing}"
    for key, cells in table.items():
        results, note = cells[:4], cells[4]
        if note.startswith("not built"):
            continue
        for c in results:
            assert c == "✅" or (c.startswith("❌") and len(c) > 3), (key, cells)


@pytest.mark.slow
def test_full_run_writes_the_table(tmp_path):
    path = tmp_path / "zoo.md"
    path.write_text(f"x\n{zoo.BEGIN}\n{zoo.END}\ny\n")
    assert zoo.main(["--write", str(path)]) == 0
    assert len(path.read_text().splitlines()) > len(zoo.rows())
