"""Small real datasets that ship inside installed packages (nothing is downloaded).

:func:`load_nci5k` reads the 5000 molecules of the NCI set that rdkit's wheel
carries (``rdkit/Data/NCI/first_5k.tpsa.csv``: one ``SMILES,TPSA`` row per
molecule) and turns each into a PyG ``Data`` with
``torch_geometric.utils.from_smiles``; the target ``y`` is the molecule's
topological polar surface area (TPSA, a regression target).

rdkit is an optional dependency (the ``chem`` extra)::

    pip install -e ".[chem]"
"""
from __future__ import annotations

import csv
import os
from typing import TYPE_CHECKING, List, Optional, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from torch_geometric.data import Data

__all__ = ["MissingExtraError", "require_rdkit", "nci5k_path", "load_nci5k", "parse_nci5k_rows"]

#: The file, relative to ``rdkit.RDConfig.RDDataDir``.
NCI5K_RELPATH = os.path.join("NCI", "first_5k.tpsa.csv")


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


def require_rdkit():
    """``rdkit.RDConfig``, or a :class:`MissingExtraError` naming the 'chem' extra."""
    try:
        import rdkit  # noqa: F401
        import rdkit.RDConfig
    except ImportError as e:
        raise MissingExtraError(
            "rdkit is not installed; the NCI-5k molecules come with it. Install the 'chem' "
            "extra: pip install -e \".[chem]\" (or pip install rdkit)"
        ) from e
    return rdkit.RDConfig


def nci5k_path() -> str:
    """Path of ``first_5k.tpsa.csv`` inside the installed rdkit (needs rdkit)."""
    return os.path.join(require_rdkit().RDDataDir, NCI5K_RELPATH)


def parse_nci5k_rows(lines, limit: Optional[int] = None) -> Tuple[List["Data"], int, List[str]]:
    """Parse ``SMILES,TPSA`` rows (an iterable of text lines) into ``Data`` objects.

    Comment lines (``#``) and blank lines are ignored. A row whose SMILES
    rdkit cannot parse, that gives a molecule with no atoms, or whose target
    is not a number is skipped and counted.

    Returns:
        ``(graphs, n_bad, bad_rows)``: ``bad_rows`` holds the offending rows
        as text (``n_bad == len(bad_rows)``).
    """
    import torch
    from rdkit import RDLogger
    from torch_geometric.utils import from_smiles

    RDLogger.DisableLog("rdApp.*")
    try:
        out: List[Data] = []
        n_bad = 0
        bad_rows: List[str] = []

        def bad(row):
            nonlocal n_bad
            n_bad += 1
            bad_rows.append(",".join(row))

        for row in csv.reader(lines):
            if not row or not row[0].strip() or row[0].lstrip().startswith("#"):
                continue
            if limit is not None and len(out) >= limit:
                break
            if len(row) < 2:
                bad(row)
                continue
            smiles = row[0].strip()
            try:
                tpsa = float(row[1])
            except ValueError:
                bad(row)
                continue
            try:
                d = from_smiles(smiles)
            except Exception:  # from_smiles raises on SMILES rdkit rejects
                bad(row)
                continue
            if d.num_nodes is None or d.num_nodes == 0:
                bad(row)
                continue
            d.y = torch.tensor([[tpsa]], dtype=torch.float32)
            out.append(d)
        return out, n_bad, bad_rows
    finally:
        RDLogger.EnableLog("rdApp.*")


def load_nci5k(limit: Optional[int] = None, path: Optional[str] = None) -> Tuple[List["Data"], int]:
    """Load rdkit's NCI first-5k molecules as PyG graphs with their TPSA.

    Each graph comes from ``torch_geometric.utils.from_smiles``: ``x`` int64
    ``[n, 9]`` (categorical atom features), ``edge_index`` ``[2, e]``,
    ``edge_attr`` int64 ``[e, 3]``, ``smiles`` (str), plus ``y`` = TPSA as
    float32 ``[1, 1]``. File order is kept (no shuffling).

    Args:
        limit: stop after this many good molecules (``None``: all).
        path: a CSV of ``SMILES,TPSA`` rows to read instead of rdkit's file.

    Returns:
        ``(graphs, n_bad)``: the parsed graphs and the number of rows skipped
        because rdkit could not parse the SMILES (or the row was malformed).
        Bad rows are never fatal.

    Raises:
        MissingExtraError: rdkit is not installed (``pip install -e ".[chem]"``).
        FileNotFoundError: the file does not exist (the message says where it
            was looked for).
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    require_rdkit()
    if path is None:
        path = nci5k_path()
        hint = (" This file ships inside rdkit's wheel; your rdkit build does not have it. "
                "Reinstall rdkit from PyPI (pip install --force-reinstall rdkit) or pass path=.")
    else:
        hint = ""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"NCI-5k molecule file not found: {path}.{hint}")
    with open(path, newline="") as f:
        graphs, n_bad, _ = parse_nci5k_rows(f, limit=limit)
    return graphs, n_bad
