"""The PyG zoo table (graph_adapter/app/zoo/table.py -> docs/zoo.md)."""
import os
import re

import pytest

from graph_adapter.app.zoo import table as zoo, why as zoo_why

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "zoo.md")


def _parse(doc):
    body = doc.split(zoo.BEGIN, 1)[1].split(zoo.END, 1)[0]
    out = {}
    for line in body.splitlines():
        m = re.match(r"\| (\w+) \| `(\w+)` \|(.*)\|\s*$", line)
        if m:
            out[(m.group(1), m.group(2))] = [c.strip() for c in m.group(3).split("|")]
    return out


def _table_rows():
    with open(DOC) as f:
        return _parse(f.read())


@pytest.mark.parametrize("name", ["GCNConv", "SumAggregation", "global_mean_pool", "MessageNorm",
                                  "RGCNConv"])
def test_rows_run_green(name):
    entry = {n: (f, e) for f, n, e in zoo.rows()}[name]
    res = zoo.run_row(entry[0], name, entry[1])
    assert [res[k] for k in ("eager", "compile", "export", "check")] == ["ok"] * 4, res


def test_a_broken_row_says_why():
    res = zoo.run_row("conv", "Broken", lambda: 1 / 0)
    assert res["note"].startswith("not built: ZeroDivisionError")


def _every_row_green_or_says_why(table):
    for key, cells in table.items():
        results, note = cells[:4], cells[4]
        if note.startswith("not built"):
            continue
        for c in results:
            assert c == "✅" or (c.startswith("❌") and len(c) > 3), (key, cells)
        if any(c != "✅" for c in results):
            assert note.startswith("why: ") and "Instead: " in note, (key, note)


def test_the_table_covers_every_layer_pyg_ships():
    """docs/zoo.md has a row for every entry of PyG's __all__ lists, every cell
    of a built row is green or says what failed, and a row with a red cell says
    why (rerun the script when this fails:
    python -m graph_adapter.app.zoo --write docs/zoo.md)."""
    table = _table_rows()
    missing = [(f, n) for f, n, _ in zoo.rows() if (f, n) not in table]
    assert not missing, f"rows missing from docs/zoo.md: {missing}"
    _every_row_green_or_says_why(table)


def test_the_alternatives_the_notes_name_are_green():
    table = _table_rows()
    for name in ("MemPooling", "SortAggregation"):
        assert name in zoo_why._POOL_FIX
        key = next(k for k in table if k[1] == name)
        assert table[key][:4] == ["✅"] * 4, (key, table[key])


def _entry(name):
    return {n: (f, e) for f, n, e in zoo.rows()}[name]


@pytest.mark.extended  # ~8 s quiet each: CI's second step, with the zoo's sweep
def test_a_width_dependent_aggregation_says_why_and_its_workaround_runs():
    """LCMAggregation: red as PyG ships it (the dense width is the batch's largest
    graph); the probe measures that, and the workaround (a fixed
    max_num_elements) is run and green."""
    family, entry = _entry("LCMAggregation")
    res = zoo.run_row(family, "LCMAggregation", entry)
    assert res["eager"].startswith("differs by"), res
    assert res["note"].startswith("why: each graph's result depends on the dense batch's "
                                  "width"), res["note"]
    assert res["note"].endswith("-> all four green"), res["note"]


def test_a_data_dependent_pool_says_why():
    family, entry = _entry("TopKPooling")
    res = zoo.run_row(family, "TopKPooling", entry)
    assert res["note"].startswith("why: returns a pooled graph whose node count comes from "
                                  "the data"), res["note"]


@pytest.mark.extended  # ~8 s quiet each: CI's second step, with the zoo's sweep
def test_a_cause_the_probe_does_not_reproduce_is_reported(monkeypatch):
    """A stated cause is never printed unmeasured: a probe that finds nothing
    (here: the RNN probe on a row whose compile is green) makes the row
    'unexplained', which the table test rejects."""
    family, entry = _entry("LCMAggregation")
    monkeypatch.setitem(zoo.WHY_NOT, "LCMAggregation", zoo.WhyNot((zoo_why._rnn,), "x"))
    res = zoo.run_row(family, "LCMAggregation", entry)
    assert res["note"].startswith("unexplained: the probe _rnn did not reproduce"), res["note"]
    monkeypatch.delitem(zoo.WHY_NOT, "LCMAggregation")
    res = zoo.run_row(family, "LCMAggregation", entry)
    assert res["note"].startswith("unexplained: no cause recorded"), res["note"]


@pytest.mark.slow
@pytest.mark.sweep  # ~4 min: not in the main suite; .ci/run runs it as its own step
def test_full_run_writes_the_table(tmp_path):
    path = tmp_path / "zoo.md"
    path.write_text(f"x\n{zoo.BEGIN}\n{zoo.END}\ny\n")
    assert zoo.main(["--write", str(path)]) == 0
    assert len(path.read_text().splitlines()) > len(zoo.rows())
    table = _parse(path.read_text())
    assert len(table) == len(zoo.rows())
    _every_row_green_or_says_why(table)


def test_only_does_not_write_a_partial_table(tmp_path, capsys):
    path = tmp_path / "zoo.md"
    path.write_text(f"x\n{zoo.BEGIN}\n{zoo.END}\n")
    with pytest.raises(SystemExit):
        zoo.main(["--only", "GCNConv", "--write", str(path)])
    assert "--write rewrites the whole table" in capsys.readouterr().err
    assert path.read_text() == f"x\n{zoo.BEGIN}\n{zoo.END}\n"
