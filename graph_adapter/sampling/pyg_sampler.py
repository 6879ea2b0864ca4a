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

:class:`PygHeteroNeighborSampler` does the same for ``HeteroData``
(``FixedSizeHeteroNeighborLoader(..., sampler="pyg")``): PyG's hetero sampler
(pyg-lib's ``hetero_neighbor_sample`` or torch-sparse's), seeds of one node
type, every edge type's fanouts; ``disjoint=True`` needs pyg-lib (torch-sparse
has no disjoint hetero sampling: a named error up front, not PyG's).
"""
from __future__ import annotations

import importlib
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .csr import Sample

__all__ = ["PygSamplerUnavailableError", "PygNeighborSampler", "PygHeteroNeighborSampler",
           "pyg_sampler_backend", "SAMPLERS"]

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


_INSTALL = ("Install one (`pip install torch-sparse -f "
            "https://data.pyg.org/whl/torch-<version>+cpu.html`, or pyg-lib from the same "
            "index), or use sampler='ours' (the default: torch only)")


class PygNeighborSampler:
    """PyG's ``NeighborSampler`` on ``data``, returning our :class:`Sample`.

    Args:
        data: the homogeneous ``Data``.
        num_neighbors: fanout per hop.
        replace / disjoint / directed: as the loaders' (``directed=False`` is
            PyG's ``subgraph_type="induced"``).
        subgraph_type / time_attr / weight_attr / temporal_strategy: handed to
            PyG's sampler as they are (temporal and weighted sampling there need
            pyg-lib; PyG raises its own error otherwise).
    """

    def __init__(self, data: Any, num_neighbors: Sequence[int], *, replace: bool = False,
                 disjoint: bool = False, directed: bool = True,
                 subgraph_type: Optional[str] = None, time_attr: Optional[str] = None,
                 weight_attr: Optional[str] = None, temporal_strategy: str = "uniform"):
        backend = pyg_sampler_backend()
        if backend is None:
            raise PygSamplerUnavailableError(
                "sampler='pyg' runs PyG's NeighborSampler, which needs pyg-lib or torch-sparse; "
                "neither imports here. " + _INSTALL)
        from torch_geometric.sampler import NeighborSampler

        self.backend = backend
        self.disjoint = disjoint or time_attr is not None
        self._sampler = NeighborSampler(
            data, list(num_neighbors), replace=replace, disjoint=disjoint,
            subgraph_type=subgraph_type or ("directional" if directed else "induced"),
            time_attr=time_attr, weight_attr=weight_attr, temporal_strategy=temporal_strategy)

    def sample(self, seeds: Tensor, seed: int, seed_time: Optional[Tensor] = None) -> Sample:
        """The sample of ``seeds`` [B] (global ids), PyG's draws seeded with ``seed``
        (``seed_time``: their times, temporal sampling)."""
        from torch_geometric.sampler import NodeSamplerInput

        seeds = seeds.long().reshape(-1)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            out = self._sampler.sample_from_nodes(
                NodeSamplerInput(input_id=None, node=seeds, time=seed_time))
        perm = self._sampler.edge_permutation
        edge = out.edge
        e_id = (perm[edge] if perm is not None else edge).long()
        n_id = out.node.long()
        edge_index = torch.stack([out.row.long(), out.col.long()])
        B, n, m = int(seeds.numel()), int(n_id.numel()), int(e_id.numel())
        if out.num_sampled_nodes is not None and out.num_sampled_edges is not None:
            nodes_per_hop = [int(c) for c in out.num_sampled_nodes]
            edges_per_hop = [int(c) for c in out.num_sampled_edges]
        else:  # torch-sparse reports no per-hop counts: seeds, then the rest
            nodes_per_hop, edges_per_hop = [B, n - B], [m]
        return Sample(n_id=n_id, edge_index=edge_index, e_id=e_id, nodes_per_hop=nodes_per_hop,
                      edges_per_hop=edges_per_hop,
                      seed_of=out.batch.long() if self.disjoint and out.batch is not None
                      else None)


EdgeType = Tuple[str, str, str]


class PygHeteroNeighborSampler:
    """PyG's ``NeighborSampler`` on a ``HeteroData``, returning per-type tensors.

    Args:
        data: the ``HeteroData``.
        num_neighbors: ``{edge_type: [k_1, ..., k_H]}`` for every edge type.
        replace / disjoint / directed: as the loaders'.
    """

    def __init__(self, data: Any, num_neighbors: Dict[EdgeType, List[int]], *,
                 replace: bool = False, disjoint: bool = False, directed: bool = True,
                 subgraph_type: Optional[str] = None, time_attr: Optional[str] = None,
                 weight_attr: Optional[str] = None, temporal_strategy: str = "uniform"):
        backend = pyg_sampler_backend()
        if backend is None:
            raise PygSamplerUnavailableError(
                "sampler='pyg' runs PyG's hetero NeighborSampler, which needs pyg-lib or "
                "torch-sparse; neither imports here. " + _INSTALL)
        if disjoint and backend != "pyg-lib":
            raise PygSamplerUnavailableError(
                f"sampler='pyg' with disjoint=True on HeteroData needs pyg-lib ({backend} has "
                f"no disjoint hetero sampling); install pyg-lib, or use sampler='ours' (it has "
                f"disjoint=True)")
        from torch_geometric.sampler import NeighborSampler

        self.backend, self.disjoint = backend, disjoint or time_attr is not None
        self._sampler = NeighborSampler(
            data, {tuple(k): list(v) for k, v in num_neighbors.items()}, replace=replace,
            disjoint=disjoint,
            subgraph_type=subgraph_type or ("directional" if directed else "induced"),
            time_attr=time_attr, weight_attr=weight_attr, temporal_strategy=temporal_strategy)

    def sample(self, seed_type: str, seeds: Tensor, seed: int,
               seed_time: Optional[Tensor] = None
               ) -> Tuple[Dict[str, Tensor], Dict[EdgeType, Tensor], Dict[EdgeType, Tensor],
                          Optional[Dict[str, Tensor]]]:
        """``(n_id, edge_index, e_id, seed_of)`` of ``seeds`` [B] of ``seed_type``:
        per node type the global ids of its rows (seeds first), per edge type
        ``[source row, destination row]`` and input edge ids (``e_id``), per node
        type the tree of each row with ``disjoint`` (else ``None``); PyG's draws
        seeded with ``seed``, the caller's generator untouched."""
        from torch_geometric.sampler import NodeSamplerInput

        seeds = seeds.long().reshape(-1)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            out = self._sampler.sample_from_nodes(
                NodeSamplerInput(input_id=None, node=seeds, input_type=seed_type,
                                 time=seed_time))
        perm = self._sampler.edge_permutation or {}
        n_id = {t: v.long() for t, v in out.node.items()}
        edge_index, e_id = {}, {}
        for et in out.row:
            edge = (out.edge or {}).get(et)
            p = perm.get(et)
            # bidirectional: PyG drops a merged edge type's ids (None), as ours does
            e_id[et] = None if edge is None else (p[edge] if p is not None else edge).long()
            edge_index[et] = torch.stack([out.row[et].long(), out.col[et].long()])
        seed_of = ({t: v.long() for t, v in out.batch.items()}
                   if self.disjoint and out.batch is not None else None)
        return n_id, edge_index, e_id, seed_of
