"""graph_adapter.app.datasets: rdkit's NCI-5k molecules as PyG graphs."""
import os
import sys

import pytest
import torch

pytest.importorskip("rdkit")

from graph_adapter.app.datasets import MissingExtraError, load_nci5k, nci5k_path  # noqa: E402


def test_rdkit_ships_the_file():
    path = nci5k_path()
    assert os.path.isfile(path)
    with open(path) as f:
        rows = [line for line in f if line.strip() and not line.startswith("#")]
    assert len(rows) == 4999


def test_load_limit_and_fields():
    graphs, n_bad = load_nci5k(limit=25)
    assert len(graphs) == 25 and n_bad == 0
    for d in graphs:
        assert d.x.dtype == torch.int64 and d.x.shape == (d.num_nodes, 9)
        assert d.edge_index.shape == (2, d.num_edges)
        assert d.edge_attr.dtype == torch.int64 and d.edge_attr.shape == (d.num_edges, 3)
        assert d.y.dtype == torch.float32 and d.y.shape == (1, 1)
        assert isinstance(d.smiles, str)
    # first row of the file: CC1=CC(=O)C=CC1=O,34.14
    assert graphs[0].smiles == "CC1=CC(=O)C=CC1=O"
    assert graphs[0].y.item() == pytest.approx(34.14)
    assert load_nci5k(limit=0) == ([], 0)


def test_bad_rows_are_counted_and_skipped(tmp_path):
    csv = tmp_path / "mols.csv"
    csv.write_text(
        "# a comment\n"
        "CCO,20.23\n"
        "not_a_smiles((,1.0\n"      # rdkit cannot parse it
        "C1CC,3.0\n"                # unclosed ring
        "CC,abc\n"                  # target is not a number
        "\n"
        "c1ccccc1O,20.23\n"
        "lonely\n"                  # no target column
    )
    graphs, n_bad = load_nci5k(path=str(csv))
    assert [g.smiles for g in graphs] == ["CCO", "c1ccccc1O"]
    assert n_bad == 4
    graphs, n_bad = load_nci5k(path=str(csv), limit=1)
    assert len(graphs) == 1 and n_bad == 0


def test_missing_file_is_a_clear_error(tmp_path):
    missing = tmp_path / "nope.csv"
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        load_nci5k(path=str(missing))


def test_without_rdkit_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "rdkit", None)
    monkeypatch.setitem(sys.modules, "rdkit.RDConfig", None)
    with pytest.raises(MissingExtraError, match=r"\.\[chem\]"):
        load_nci5k(limit=1)
    assert issubclass(MissingExtraError, ImportError)
