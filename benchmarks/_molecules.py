"""The 5000 molecules that ship with rdkit (``rdkit/Data/NCI/first_5k.tpsa.csv``)
as PyG graphs, with their TPSA as a graph-level regression target."""
from __future__ import annotations

import csv
import os
import warnings
from typing import List, Optional


def nci5k_path() -> str:
    import rdkit.RDConfig

    return os.path.join(rdkit.RDConfig.RDDataDir, "NCI", "first_5k.tpsa.csv")


def load_nci5k(limit: Optional[int] = None) -> List["Data"]:
    """Parse rdkit's NCI first-5k TPSA file into ``Data`` objects.

    Each graph comes from ``torch_geometric.utils.from_smiles`` (x: int64
    [n, 9], edge_index [2, e], edge_attr int64 [e, 3], smiles: str) with
    ``y`` = TPSA as float32 [1, 1].  Rows whose SMILES rdkit cannot parse are
    skipped, counted and reported with a warning (never silently).
    """
    import torch
    from rdkit import RDLogger
    from torch_geometric.utils import from_smiles

    RDLogger.DisableLog("rdApp.*")
    out = []
    bad = []
    with open(nci5k_path(), newline="") as f:
        for row in csv.reader(f):
            if not row or row[0].startswith("#"):
                continue
            if limit is not None and len(out) >= limit:
                break
            smiles, tpsa = row[0].strip(), float(row[1])
            try:
                d = from_smiles(smiles)
            except Exception:
                bad.append(smiles)
                continue
            if d.num_nodes == 0:
                bad.append(smiles)
                continue
            d.y = torch.tensor([[tpsa]], dtype=torch.float32)
            out.append(d)
    if bad:
        warnings.warn(f"load_nci5k: skipped {len(bad)} SMILES that rdkit could not parse "
                      f"(first: {bad[0]!r})")
    load_nci5k.bad_smiles = bad
    return out
