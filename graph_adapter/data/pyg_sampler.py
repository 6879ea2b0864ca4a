"""PyG's own ``NeighborSampler`` behind the fixed-size loaders (``sampler="pyg"``).

Where pyg-lib or torch-sparse is installed, ``FixedSizeNeighborLoader(...,
sampler="pyg")`` (and the link loader) samples with
``torch_geometric.sampler.NeighborSampler`` and pads its output exactly as it
pads ours: the same keys, rows (seeds first, PyG's order), ``n_id`` / ``e_id``
in input ids. What differs from ``sampler="ours"``:

* the draws are PyG's: seeded per batch from ``(seed, epoch, chunk)`` through
  torch's global generator inside ``torch.random.fork_rng`` (the caller's
  generator state is left as it was); pyg-lib and torch-sparse draw from it,
  so a batch repeats for a seed (a test checks it where torch-sparse is here);
* PyG's sampler keeps its own CSC (``colptr``, ``row``, ``perm``, int64: about
  ``12 E`` bytes more than ours, docs/large_graphs.md);
* torch-sparse does not report per-hop counts: a trimmed sample then has its
  per-hop counts as "seeds, then the rest" (the cut itself is the same: the
  last rows and edges); ``disjoint=True`` needs pyg-lib (PyG's own
  ``ValueError`` otherwise).

Where neither is installed, :class:`PygSamplerUnavailableError` says what to
install; ``sampler="ours"`` (the default) needs neither.
"""
from __future__ import annotations

import importlib
from typing import Any, Optional, Sequence

import torch
from torch import Tensor

from .csr import Sample

__all__ = ["PygSamplerUnavailableError", "PygNeighborSampler", "pyg_sampler_backend",
           "SAMPLERS"]

SAMPLERS = ("ours", "pyg")


class PygSamplerUnavailableError(ImportError):
    """``sampler="pyg"`` where neither pyg-lib nor torch-sparse can be imported."""


def pyg_sampler_backend() -> Optional[str]:
    """``"pyg-lib"`` or ``"torch-sparse"``: what PyG's ``NeighborSampler`` would use here
    (pyg-lib first, as PyG picks), else ``None``."""
    for mod, name in (("pyg_lib", "pyg-lib"), ("torch_sparse", "torch-sparse")):
        try:
            importlib.import_module(mod)
            return name
        except Exception:  # noqa: BLE001 (a broken install, e.g. no scipy, counts as absent)
            continue
    return None


class PygNeighborSampler:
    """PyG's ``NeighborSampler`` on ``data``, returning our :class:`Sample`.

    Args:
        data: the homogeneous ``Data``.
        num_neighbors: fanout per hop.
        replace / disjoint / directed: as the loaders' (``directed=False`` is
            PyG's ``subgraph_type="induced"``).
    """

    def __init__(self, data: Any, num_neighbors: Sequence[int], *, replace: bool = False,
                 disjoint: bool = False, directed: bool = True):
        backend = pyg_sampler_backend()
        if backend is None:
            raise PygSamplerUnavailableError(
                "sampler='pyg' runs PyG's NeighborSampler, which needs pyg-lib or torch-sparse; "
                "neither imports here. Install one (`pip install torch-sparse -f "
                "https://data.pyg.org/whl/torch-<version>+cpu.html`, or pyg-lib from the same "
                "index), or use sampler='ours' (the default: torch only)")
        from torch_geometric.sampler import NeighborSampler

        self.backend = backend
        self.disjoint = disjoint
        self._sampler = NeighborSampler(
            data, list(num_neighbors), replace=replace, disjoint=disjoint,
            subgraph_type="directional" if directed else "induced")

    def sample(self, seeds: Tensor, seed: int) -> Sample:
        """The sample of ``seeds`` [B] (global ids), PyG's draws seeded with ``seed``."""
        from torch_geometric.sampler import NodeSamplerInput

        seeds = seeds.long().reshape(-1)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            out = self._sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=seeds))
        perm = self._sampler.edge_permutation
        edge = out.edge
        e_id = (perm[edge] if perm is not None else edge).long()
        n_id = out.node.long()
        edge_index = torch.stack([out.row.long(), out.col.long()])
        B, n, m = int(seeds.numel()), int(n_id.numel()), int(e_id.numel())
        if out.num_sampled_nodes is not None:
            nodes_per_hop = [int(c) for c in out.num_sampled_nodes]
            edges_per_hop = [int(c) for c in out.num_sampled_edges]
        else:  # torch-sparse reports no per-hop counts: seeds, then the rest
            nodes_per_hop, edges_per_hop = [B, n - B], [m]
        return Sample(n_id=n_id, edge_index=edge_index, e_id=e_id, nodes_per_hop=nodes_per_hop,
                      edges_per_hop=edges_per_hop,
                      seed_of=out.batch.long() if self.disjoint and out.batch is not None
                      else None)
