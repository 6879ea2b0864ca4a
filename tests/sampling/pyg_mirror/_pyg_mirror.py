"""Helpers shared by the tests that mirror PyG's own loader tests (tests/sampling/pyg_mirror)."""
from __future__ import annotations

import warnings
from typing import Any, Dict, List

import numpy as np
import torch
from torch import Tensor

#: PyG's SubgraphType values, and the loader arguments that ask for each here.
SUBGRAPH_TYPES = ["directional", "induced", "bidirectional"]


def subgraph_kw(subgraph_type: str) -> Dict[str, Any]:
    """Our arguments for PyG's ``subgraph_type``: ``directed`` where it is the same thing,
    else PyG's own argument (``bidirectional``)."""
    if subgraph_type == "directional":
        return {"directed": True}
    if subgraph_type == "induced":
        return {"directed": False}
    return {"subgraph_type": subgraph_type}


def random_edges(num_src: int, num_dst: int, num_edges: int, gen: torch.Generator,
                 dtype: torch.dtype = torch.long) -> Tensor:
    """``[2, num_edges]`` random (source, destination) pairs (duplicates possible)."""
    row = torch.randint(0, num_src, (num_edges,), generator=gen)
    col = torch.randint(0, num_dst, (num_edges,), generator=gen)
    return torch.stack([row, col]).to(dtype)


def edge_pairs(edge_index: Tensor) -> set:
    """The distinct (source, destination) pairs of ``edge_index``."""
    return set(map(tuple, edge_index.t().tolist()))


def edges_are_input_edges(sub: Tensor, whole: Tensor, src_ids: Tensor, dst_ids: Tensor) -> bool:
    """Whether every edge of ``sub`` (local rows), read through ``src_ids`` / ``dst_ids``,
    is an edge of ``whole`` (global ids)."""
    n = int(max(int(whole.max()) if whole.numel() else 0,
                int(src_ids.max()) if src_ids.numel() else 0,
                int(dst_ids.max()) if dst_ids.numel() else 0)) + 1
    have = (whole[0].long() * n + whole[1].long()).numpy()
    got = (src_ids[sub[0].long()].long() * n + dst_ids[sub[1].long()].long()).numpy()
    return bool(np.isin(got, have).all())


def pyg_batches(loader: Any) -> List[Any]:
    """Every batch of an epoch of ``loader`` as the PyG object PyG's loader yields."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # budget trims are counted in loader.stats
        return [loader.to_pyg(flat) for flat in loader]
