"""``FixedSizeClusterLoader``: Cluster-GCN batches of one large graph, at one shape.

Cluster-GCN (PyG's ``ClusterData`` + ``ClusterLoader``): the nodes are split
into ``num_parts`` clusters once (METIS), each batch is the induced subgraph of
``batch_size`` clusters (every input edge between their nodes, edges between
two chosen clusters included), every cluster once an epoch. Here each batch is
padded to one :class:`~graph_adapter.data.budget.Budget` with the node
loader's layout (:mod:`graph_adapter.data.neighbor`: ``n_id``, ``e_id``,
``seed_mask``, one real graph slot and one padding slot), so ``ipu_wrap`` sees
one signature:

* rows: the chosen clusters' nodes, cluster by cluster in the epoch's
  (shuffled) cluster order, each cluster's nodes by node id; ``seed_mask`` is
  True on every real row (the loss is over the whole batch, as Cluster-GCN's;
  mask it further with e.g. ``train_mask``);
* edges: ordered by destination row, input order within one
  (:func:`graph_adapter.data.csr.induced_edges`).

Budget: the node count holds the ``batch_size`` largest clusters together
(exact: no node is ever cut, every node is a real row once an epoch); the edge
count is the ``success_ratio`` quantile of ``fit_batches`` sampled batches: a
batch with more edges loses its last ones under ``oversize="trim"`` (counted in
``loader.stats``, warned) or raises under ``"error"``.

Partition: ``partition=`` a ``[N]`` part id per node from any partitioner (no
compiled extension needed), or ``num_parts=`` to run METIS as PyG's
``ClusterData`` does, through torch-sparse's ``partition`` op or pyg-lib's
``metis``; where neither has METIS, :class:`MetisUnavailableError` says what
to install (the torch-sparse wheel in ``../shared/wheels`` is built without
METIS: "Not compiled with METIS support").
"""
from __future__ import annotations

import importlib
from typing import Any, Dict, Optional, Tuple, Union

import torch
from torch import Tensor

from .budget import Budget
from .csr import Sample, induced_edges
from .neighbor import FixedSizeNeighborLoader

__all__ = ["FixedSizeClusterLoader", "MetisUnavailableError", "PartitionError",
           "metis_partition", "metis_available"]


class MetisUnavailableError(ImportError):
    """METIS is needed (``num_parts=`` without ``partition=``) and neither torch-sparse
    nor pyg-lib here has it."""


class PartitionError(ValueError):
    """A ``partition`` that is not one part id in ``[0, P)`` per node, or an empty part."""


def metis_available() -> Tuple[bool, str]:
    """``(True, backend)`` where METIS can run here, else ``(False, why)``."""
    why = []
    try:
        importlib.import_module("torch_sparse")  # registers torch.ops.torch_sparse

        ptr, col = torch.tensor([0, 1, 2]), torch.tensor([1, 0])
        torch.ops.torch_sparse.partition(ptr, col, None, 2, False)
        return True, "torch-sparse"
    except ImportError:
        why.append("torch-sparse is not installed")
    except (AttributeError, RuntimeError) as e:  # "Not compiled with METIS support"
        why.append(f"torch-sparse is installed without METIS ({str(e).splitlines()[0]})")
    try:
        import pyg_lib

        if hasattr(pyg_lib, "partition"):
            return True, "pyg-lib"
        why.append("pyg-lib has no partition module")
    except ImportError:
        why.append("pyg-lib is not installed")
    return False, "; ".join(why)


def metis_partition(edge_index: Tensor, num_nodes: int, num_parts: int,
                    recursive: bool = False) -> Tensor:
    """A ``[N]`` part id per node from METIS on the graph's CSR (PyG ``ClusterData``'s call).

    Raises :class:`MetisUnavailableError` naming what to install where METIS is absent.
    """
    ok, backend = metis_available()
    if not ok:
        raise MetisUnavailableError(
            f"METIS is not available here ({backend}). Cluster-GCN's partition needs a torch-sparse "
            f"built with METIS (`pip install torch-sparse -f https://data.pyg.org/whl/"
            f"torch-<version>+cpu.html`) or pyg-lib (same index); or pass partition= (a [N] part "
            f"id per node from any partitioner, e.g. pymetis)")
    order = torch.argsort(edge_index[0].long() * num_nodes + edge_index[1].long())
    row, col = edge_index[0].long()[order], edge_index[1].long()[order]
    indptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    torch.cumsum(torch.bincount(row, minlength=num_nodes), 0, out=indptr[1:])
    if backend == "torch-sparse":
        return torch.ops.torch_sparse.partition(indptr, col, None, num_parts, recursive).long()
    import pyg_lib

    return pyg_lib.partition.metis(indptr, col, num_parts, recursive=recursive).long()


def _parts(partition: Any, num_nodes: int) -> Tuple[Tensor, Tensor]:
    """``(partptr [P + 1], node_perm [N])``: part ``p``'s nodes are
    ``node_perm[partptr[p]:partptr[p + 1]]``, by node id."""
    part = torch.as_tensor(partition)
    if part.is_floating_point() or part.dtype == torch.bool or part.dim() != 1:
        raise PartitionError(f"partition has dtype {part.dtype} and shape {tuple(part.shape)}; "
                             f"give one integer part id per node, shape [{num_nodes}]")
    if part.numel() != num_nodes:
        raise PartitionError(f"partition has {part.numel()} entries; the graph has {num_nodes} "
                             f"nodes: give one part id per node")
    part = part.long()
    if num_nodes and int(part.min()) < 0:
        i = int((part < 0).nonzero()[0])
        raise PartitionError(f"partition[{i}] = {int(part[i])}: part ids are ints >= 0")
    P = int(part.max()) + 1 if num_nodes else 0
    counts = torch.bincount(part, minlength=P)
    if bool((counts == 0).any()):
        p = int((counts == 0).nonzero()[0])
        raise PartitionError(f"partition has no node in part {p} (ids 0..{P - 1}): number the "
                             f"parts 0..P-1 without gaps")
    node_perm = torch.sort(part, stable=True).indices
    partptr = torch.zeros(P + 1, dtype=torch.long)
    torch.cumsum(counts, 0, out=partptr[1:])
    return partptr, node_perm


class FixedSizeClusterLoader(FixedSizeNeighborLoader):
    """Yields padded flat dicts of one signature, each the induced subgraph of
    ``batch_size`` clusters (see the module docstring).

    Args:
        data: a homogeneous ``torch_geometric.data.Data``.
        num_parts: clusters to make with METIS (ignored when ``partition`` is given).
        batch_size: clusters per batch.
        partition: ``[N]`` part ids ``0..P-1`` (every part non-empty), or ``None``
            (METIS with ``num_parts``; :class:`MetisUnavailableError` without it).
        recursive: METIS's recursive bisection (as ``ClusterData``).
        budget: a ``graphs=2`` :class:`Budget` whose real nodes hold the
            ``batch_size`` largest clusters, its dict/JSON, or ``None`` (fitted).
        The rest: as :class:`FixedSizeNeighborLoader` (``shuffle``, ``seed``,
        ``oversize``, ``success_ratio``, ``fit_batches``, ``round_to``,
        ``micro_batches``, ``rank``, ``world_size``, ``pad_id``, ``num_workers``,
        ``sampler_threads``). Every cluster is in exactly one batch an epoch,
        across ranks.
    """

    def __init__(self, data: Any, num_parts: Optional[int] = None, batch_size: int = 1, *,
                 partition: Any = None, recursive: bool = False, shuffle: bool = False,
                 budget: Union[Budget, dict, str, None] = None, seed: int = 0,
                 oversize: str = "trim", success_ratio: float = 0.99, fit_batches: int = 32,
                 round_to: int = 1, micro_batches: int = 1, rank: int = 0, world_size: int = 1,
                 pad_id: int = -1, num_workers: int = 0, sampler_threads: Optional[int] = 1):
        self._setup(data, [-1], batch_size, shuffle=shuffle, seed=seed, replace=False,
                    disjoint=False, directed=False, oversize=oversize,
                    micro_batches=micro_batches, rank=rank, world_size=world_size,
                    pad_id=pad_id, num_workers=num_workers, sampler_threads=sampler_threads)
        self.num_neighbors = None  # no hops: a batch is whole clusters
        if partition is None:
            if isinstance(num_parts, bool) or not isinstance(num_parts, int) or num_parts < 1:
                raise PartitionError(f"num_parts={num_parts!r}: give the number of clusters "
                                     f"for METIS, or partition= (a part id per node)")
            partition = metis_partition(data.edge_index, self.num_nodes, num_parts, recursive)
        self.partptr, self.node_perm = _parts(partition, self.num_nodes)
        self.num_parts = int(self.partptr.numel()) - 1
        self.seeds = torch.arange(self.num_parts)  # the loader's "seeds" are the clusters
        sizes = (self.partptr[1:] - self.partptr[:-1]).sort(descending=True).values
        #: real nodes of the largest batch (its batch_size largest clusters): never cut
        self.max_nodes = int(sizes[:batch_size].sum())
        self.stats = self._new_stats(0)
        self.budget = self._resolve_budget(budget, success_ratio, fit_batches, round_to,
                                           self.max_nodes,
                                           f"the {self.max_nodes} nodes of the {batch_size} "
                                           f"largest clusters")

    def _new_stats(self, epoch: int):
        st = super()._new_stats(epoch)
        st.total_seeds = self.num_nodes  # every node is a real row once an epoch
        return st

    def cluster_nodes(self, clusters: Tensor) -> Tensor:
        """The nodes of ``clusters`` (global ids), cluster by cluster, by node id within one."""
        start = self.partptr[clusters]
        cnt = self.partptr[clusters + 1] - start
        seg = torch.repeat_interleave(torch.arange(cnt.numel()), cnt)
        off = torch.arange(seg.numel()) - (torch.cumsum(cnt, 0) - cnt)[seg]
        return self.node_perm[start[seg] + off]

    def sample(self, seeds: Tensor, epoch: int, chunk: int, stream: int = 0) -> Sample:
        """The induced subgraph of clusters ``seeds`` (deterministic: no randomness)."""
        n_id = self.cluster_nodes(seeds.long())
        edge_index, e_id, _ = induced_edges(self.csc, n_id, self.csc.scratch())
        return Sample(n_id=n_id, edge_index=edge_index, e_id=e_id,
                      nodes_per_hop=[int(n_id.numel())], edges_per_hop=[int(e_id.numel())])

    def _fit_budget(self, success_ratio: float, fit_batches: int, round_to: int) -> Budget:
        return super()._fit_budget(success_ratio, fit_batches, round_to,
                                   per_batch=self.max_nodes)

    def _batch_now(self, epoch: int, chunk: int) -> Tuple[Dict[str, Tensor], int, int]:
        clusters = self.chunk_seeds(epoch, chunk)
        s = self.sample(clusters, epoch, chunk)
        return self._fit_and_pad(s, s.num_nodes,  # every real row is a "seed" row
                                 f"epoch {epoch}, chunk {chunk} (clusters "
                                 f"{clusters[:4].tolist()}...)")

