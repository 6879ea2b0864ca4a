"""The 5000 molecules that ship with rdkit (``rdkit/Data/NCI/first_5k.tpsa.csv``)
as PyG graphs, with their TPSA as a graph-level regression target.

A thin shim over :mod:`graph_adapter.datasets` (the source of truth), kept for
the benchmark scripts: ``load_nci5k(limit)`` returns the list of graphs,
warns about skipped rows and keeps them in ``load_nci5k.bad_smiles``.
"""
from __future__ import annotations

import warnings
from typing import List, Optional

from graph_adapter.datasets import nci5k_path, parse_nci5k_rows

__all__ = ["nci5k_path", "load_nci5k"]


def load_nci5k(limit: Optional[int] = None) -> List["Data"]:
    """Parse rdkit's NCI first-5k TPSA file into ``Data`` objects (see
    :func:`graph_adapter.datasets.load_nci5k`). Rows rdkit cannot parse are
    skipped, counted and reported with a warning (never silently)."""
    with open(nci5k_path(), newline="") as f:
        out, n_bad, bad_rows = parse_nci5k_rows(f, limit=limit)
    bad = [row.split(",")[0] for row in bad_rows]
    if bad:
        warnings.warn(f"load_nci5k: skipped {len(bad)} SMILES that rdkit could not parse "
                      f"(first: {bad[0]!r})")
    load_nci5k.bad_smiles = bad
    return out
