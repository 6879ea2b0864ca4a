"""``FixedSizeClusterLoader``: Cluster-GCN batches of one large graph, at one shape.

Cluster-GCN (PyG's ``ClusterData`` + ``ClusterLoader``): the nodes are split
into ``num_parts`` clusters once (METIS), each batch is the induced subgraph of
``batch_size`` clusters (every input edge between their nodes, edges between
two chosen clusters included), every cluster once an epoch. Here each batch is
padded to one :class:`~graph_adapter.batching.budget.Budget` with the node
loader's layout (:mod:`graph_adapter.sampling.neighbor`: ``n_id``, ``e_id``,
``seed_mask``, one real graph slot and one padding slot), so ``ipu_wrap`` sees
one signature:

* rows: the chosen clusters' nodes, cluster by cluster in the epoch's
  (shuffled) cluster order, each cluster's nodes by node id; ``seed_mask`` is
  True on every row of the clusters (the loss is over the whole batch, as
  Cluster-GCN's; mask it further with e.g. ``train_mask``);
* edges: PyG's order (``ClusterData``'s ``sparse_format``): ``"csr"``
  (default) by source row, then by the destination's place in the
  partition's node order (``ClusterData``'s permuted ids: cluster, then node
  id), input order among duplicates; ``"csc"`` the same with source and
  destination swapped;
* ``keep_inter_cluster_edges=True`` (``ClusterData``'s): every edge out of the
  clusters' nodes (``"csc"``: into them) is kept, its outer end a row of its
  own after the clusters' rows (``seed_mask`` False there, features
  gathered), outer rows in partition order. ``loader.to_pyg(batch)`` gives
  ``ClusterData[i]``'s layout: the clusters' node attributes, the outer end of
  each edge in the permuted numbering. PyG's ``ClusterLoader`` ignores the
  flag (its batches keep the edges between the chosen clusters); here it holds
  for any ``batch_size``.

Budget: the node count holds the ``batch_size`` largest clusters together
(exact: no node of a cluster is ever cut, every node is a real row once an
epoch; with ``keep_inter_cluster_edges`` the outer rows are fitted as the edges
are, and trimmed first); the edge count is the ``success_ratio`` quantile of ``fit_batches`` sampled batches: a
batch with more edges loses its last ones under ``oversize="trim"`` (counted in
``loader.stats``, warned) or raises under ``"error"``.

Partition: ``partition=`` a ``[N]`` part id per node from any partitioner (no
compiled extension needed), or ``num_parts=`` to run METIS
(:func:`metis_partition`) through the first backend present of:
torch-sparse's ``partition`` op (where built with METIS), pyg-lib's ``metis``
(PyG ``ClusterData``'s two), or pymetis (``pip install pymetis``: real METIS
5, manylinux wheels, the easy install; the ``metis`` extra). Which one ran is
``loader.partitioner`` (and ``loader.stats.partitioner``; ``"given"`` for
``partition=``). METIS is fed the symmetric, self-loop-free, duplicate-free
CSR of the graph (:func:`metis_csr`; ``ClusterData`` passes the input CSR as it
is, which METIS only accepts for an undirected graph without self-loops).
Where no backend has METIS, :class:`MetisUnavailableError` says what to
install (the torch-sparse wheel in ``../shared/wheels`` is built without
METIS: "Not compiled with METIS support").
"""
from __future__ import annotations

import importlib
import os
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from ..batching import Budget, fingerprint
from .csr import Sample
from .settings import SamplingSettings
from .inputs.source import input_edge_index
from .neighbor import FixedSizeNeighborLoader, NeighborLoaderStats

__all__ = ["FixedSizeClusterLoader", "ClusterLoaderStats", "MetisUnavailableError",
           "PartitionError", "METIS_BACKENDS", "SPARSE_FORMATS", "metis_partition", "metis_available",
           "metis_csr", "edge_cut"]

#: METIS backends in the order :func:`metis_partition` tries them.
METIS_BACKENDS = ("torch-sparse", "pyg-lib", "pymetis")


class MetisUnavailableError(ImportError):
    """METIS is needed (``num_parts=`` without ``partition=``) and no backend of
    :data:`METIS_BACKENDS` has it here."""


class PartitionError(ValueError):
    """A ``partition`` that is not one part id in ``[0, P)`` per node, or an empty part."""


#: ``ClusterData``'s ``sparse_format`` values: edges by source (``"csr"``) or by destination.
SPARSE_FORMATS = ("csr", "csc")


@dataclass
class ClusterLoaderStats(NeighborLoaderStats):
    """:class:`NeighborLoaderStats` plus the partition: ``partitioner`` (the METIS
    backend that ran, or ``"given"``), ``num_parts``, ``edge_cut`` (undirected
    edges of :func:`metis_csr` between two parts; ``None`` for ``partition=``)."""

    partitioner: str = "given"
    num_parts: int = 0
    edge_cut: Optional[int] = None  # None for partition= (not computed)


def _probe_torch_sparse() -> Optional[str]:
    """``None`` where torch-sparse's ``partition`` op runs METIS, else why not."""
    try:
        importlib.import_module("torch_sparse")  # registers torch.ops.torch_sparse
    except ImportError:
        return "torch-sparse is not installed"
    except Exception as e:  # noqa: BLE001 (a broken install, e.g. no scipy, counts as absent)
        return f"torch-sparse does not import ({type(e).__name__}: {str(e).splitlines()[0]})"
    try:
        ptr, col = torch.tensor([0, 1, 2]), torch.tensor([1, 0])
        torch.ops.torch_sparse.partition(ptr, col, None, 2, False)
        return None
    except (AttributeError, RuntimeError, TypeError) as e:  # "Not compiled with METIS support"
        return f"torch-sparse is installed without METIS ({str(e).splitlines()[0]})"


def _probe_pyg_lib() -> Optional[str]:
    """``None`` where pyg-lib has its METIS ``partition`` module, else why not."""
    try:
        import pyg_lib
    except ImportError:
        return "pyg-lib is not installed"
    except Exception as e:  # noqa: BLE001
        return f"pyg-lib does not import ({type(e).__name__})"
    return None if hasattr(pyg_lib, "partition") else "pyg-lib has no partition module"


def _probe_pymetis() -> Optional[str]:
    """``None`` where pymetis imports (its wheels bundle METIS), else why not."""
    try:
        import pymetis  # noqa: F401
    except ImportError:
        return "pymetis is not installed"
    except Exception as e:  # noqa: BLE001
        return f"pymetis does not import ({type(e).__name__}: {str(e).splitlines()[0]})"
    return None


_PROBES = {"torch-sparse": _probe_torch_sparse, "pyg-lib": _probe_pyg_lib,
           "pymetis": _probe_pymetis}


def metis_available(backend: Optional[str] = None) -> Tuple[bool, str]:
    """``(True, backend)`` for the first of :data:`METIS_BACKENDS` (or just ``backend``)
    that runs METIS here, else ``(False, why)`` with every backend's reason."""
    if backend is not None and backend not in METIS_BACKENDS:
        raise ValueError(f"METIS backend {backend!r}; choose one of {METIS_BACKENDS}")
    why = []
    for name in (backend,) if backend else METIS_BACKENDS:
        reason = _PROBES[name]()
        if reason is None:
            return True, name
        why.append(reason)
    return False, "; ".join(why)


def metis_csr(edge_index: Tensor, num_nodes: int) -> Tuple[Tensor, Tensor]:
    """The CSR METIS needs: ``(indptr [N + 1], col [2M])`` int64 of the undirected
    simple graph of ``edge_index`` (every edge in both directions once, self-loops
    and duplicates removed), neighbours by id within a node. Temporaries: a few
    ``[2E]`` int64 arrays (the keys and their sort)."""
    ei = edge_index.long()
    ei = ei[:, ei[0] != ei[1]]  # METIS rejects (or mis-weighs) self-loops
    key = torch.unique(torch.cat([ei[0] * num_nodes + ei[1], ei[1] * num_nodes + ei[0]]))
    row, col = key // num_nodes, key % num_nodes  # unique sorts: by row, then col
    indptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    torch.cumsum(torch.bincount(row, minlength=num_nodes), 0, out=indptr[1:])
    return indptr, col


def edge_cut(edge_index: Tensor, num_nodes: int, partition: Tensor) -> int:
    """Undirected edges of :func:`metis_csr` whose two ends are in different parts
    (METIS's objective; each cut edge counted once)."""
    indptr, col = metis_csr(edge_index, num_nodes)
    return _csr_cut(indptr, col, torch.as_tensor(partition).long())


def _csr_cut(indptr: Tensor, col: Tensor, part: Tensor) -> int:
    """:func:`edge_cut` on a symmetric CSR (each undirected edge is two entries)."""
    row = torch.repeat_interleave(torch.arange(indptr.numel() - 1), indptr[1:] - indptr[:-1])
    return int((part[row] != part[col]).sum()) // 2


def _run_metis(backend: str, indptr: Tensor, col: Tensor, num_parts: int, recursive: bool,
               seed: int) -> Tensor:
    """One backend's ``[N]`` part ids (torch-sparse / pyg-lib take no seed: METIS's
    default seed there, deterministic)."""
    if backend == "torch-sparse":
        return torch.ops.torch_sparse.partition(indptr, col, None, num_parts, recursive).long()
    if backend == "pyg-lib":
        import pyg_lib

        return pyg_lib.partition.metis(indptr, col, num_parts, recursive=recursive).long()
    if threading.active_count() > 1:
        return _pymetis_isolated(indptr, col, num_parts, recursive, seed)
    return _pymetis(indptr.numpy(), col.numpy(), num_parts, recursive, seed)


def _pymetis(xadj: np.ndarray, adjncy: np.ndarray, num_parts: int, recursive: bool,
             seed: int) -> Tensor:
    """pymetis in this process (see :func:`_pymetis_isolated` for when not)."""
    import pymetis

    # METIS's seed is a C int; pymetis >= 2025.2 takes a CSRAdjacency (xadj= warns)
    opts = pymetis.Options(seed=int(seed) % (2 ** 31))
    if hasattr(pymetis, "CSRAdjacency"):
        out = pymetis.part_graph(num_parts, pymetis.CSRAdjacency(xadj, adjncy),
                                 recursive=recursive, options=opts)
    else:  # pragma: no cover (older pymetis)
        out = pymetis.part_graph(num_parts, xadj=xadj, adjncy=adjncy, recursive=recursive,
                                 options=opts)
    return torch.from_numpy(np.asarray(out.vertex_part, dtype=np.int64))


# Run by _pymetis_isolated in a fresh interpreter that imports only numpy and pymetis
# (not torch: ~0.3 s instead of ~2 s); the same call as _pymetis, files in, file out.
_ISOLATED = """
import sys
import numpy as np
import pymetis
d = sys.argv[1]
n, rec, seed = (int(v) for v in open(d + "/args").read().split())
x, a = np.load(d + "/xadj.npy"), np.load(d + "/adjncy.npy")
opts = pymetis.Options(seed=seed)
if hasattr(pymetis, "CSRAdjacency"):
    out = pymetis.part_graph(n, pymetis.CSRAdjacency(x, a), recursive=bool(rec), options=opts)
else:
    out = pymetis.part_graph(n, xadj=x, adjncy=a, recursive=bool(rec), options=opts)
np.save(d + "/part.npy", np.asarray(out.vertex_part, dtype=np.int64))
"""


def _pymetis_isolated(indptr: Tensor, col: Tensor, num_parts: int, recursive: bool,
                      seed: int) -> Tensor:
    """pymetis in a child process of its own, where the seed alone decides.

    The pymetis wheels' METIS draws from the C library's ``rand()``, one state
    for the whole process, and releases the GIL while it runs: another thread
    drawing from ``rand()`` meanwhile changes the partition (seen: three
    partitions in five calls of one seed with a thread calling ``rand()``). With
    other threads alive the partition runs in a fresh interpreter (~0.3 s more),
    so a seed gives the same partition in every call and every process, and
    ranks that partition the same graph get the same clusters.
    """
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="graph_adapter_metis_") as d:
        np.save(os.path.join(d, "xadj.npy"), indptr.numpy())
        np.save(os.path.join(d, "adjncy.npy"), col.numpy())
        with open(os.path.join(d, "args"), "w") as f:
            f.write(f"{num_parts} {int(bool(recursive))} {int(seed) % (2 ** 31)}")
        done = subprocess.run([sys.executable, "-I", "-c", _ISOLATED, d],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            raise PartitionError(f"METIS (pymetis, in a child process so that other threads "
                                 f"cannot change its random draws) failed: "
                                 f"{done.stdout.decode(errors='replace')[-2000:]}")
        return torch.from_numpy(np.load(os.path.join(d, "part.npy")))


def metis_partition(edge_index: Tensor, num_nodes: int, num_parts: int,
                    recursive: bool = False, *, seed: int = 0,
                    backend: Optional[str] = None) -> Tensor:
    """A ``[N]`` part id in ``[0, num_parts)`` per node from METIS on :func:`metis_csr`.

    ``backend``: one of :data:`METIS_BACKENDS`, or ``None`` for the first present.
    ``seed``: METIS's random seed with pymetis: the same seed gives the same
    partition in every call and every process (with other threads alive, METIS
    runs in a child process: it draws from the C library's process-wide
    ``rand()``; seeds 0 and 1 gave the same one with pymetis 2025.2.2);
    torch-sparse and pyg-lib take none (METIS's default seed: deterministic, not
    seedable). METIS may leave a part empty (more parts than it can fill well):
    :class:`FixedSizeClusterLoader` renumbers the others and warns.

    Raises :class:`MetisUnavailableError` naming what to install where METIS is absent.
    """
    return _metis(edge_index, num_nodes, num_parts, recursive, seed, backend)[0]


def _metis(edge_index: Tensor, num_nodes: int, num_parts: int, recursive: bool, seed: int,
           backend: Optional[str]) -> Tuple[Tensor, str, Tensor, Tensor]:
    """:func:`metis_partition` plus what ran and its CSR: ``(part, backend, indptr, col)``."""
    if isinstance(num_parts, bool) or not isinstance(num_parts, int) or num_parts < 1:
        raise PartitionError(f"num_parts={num_parts!r}: give the number of clusters for METIS "
                             f"(an int >= 1), or partition= (a part id per node)")
    if num_parts > num_nodes:
        raise PartitionError(f"num_parts={num_parts} > the graph's {num_nodes} nodes: every "
                             f"cluster needs a node, give num_parts <= {num_nodes}")
    ok, found = metis_available(backend)
    if not ok:
        raise MetisUnavailableError(
            f"METIS is not available here ({found}). The easy install: `pip install pymetis` "
            f"(real METIS, manylinux wheels; graph_adapter's `metis` extra); or a torch-sparse "
            f"built with METIS (`pip install torch-sparse -f https://data.pyg.org/whl/"
            f"torch-<version>+cpu.html`) or pyg-lib (same index); or pass partition= (a [N] "
            f"part id per node from any partitioner)")
    indptr, col = metis_csr(edge_index, num_nodes)
    if num_parts == 1:  # nothing to split (and METIS ignores the index base for nparts=1)
        return torch.zeros(num_nodes, dtype=torch.long), found, indptr, col
    return _run_metis(found, indptr, col, num_parts, recursive, seed), found, indptr, col


def _compact(part: Tensor, asked: int, backend: str) -> Tensor:
    """METIS's part ids with empty parts removed (the rest renumbered in order), warned."""
    counts = torch.bincount(part, minlength=asked)
    empty = int((counts == 0).sum())
    if not empty:
        return part
    warnings.warn(f"METIS ({backend}) left {empty} of num_parts={asked} parts empty; the "
                  f"loader has {asked - empty} clusters (the others renumbered in order). "
                  f"Fewer num_parts avoids it", stacklevel=3)
    new_id = torch.cumsum(counts > 0, 0) - 1
    return new_id[part]


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
    """Yields padded flat dicts of one signature, each the subgraph of ``batch_size`` clusters.

    Each batch is the induced subgraph of its clusters (see the module docstring).

    Args:
        data: a homogeneous ``torch_geometric.data.Data``.
        num_parts: clusters to make with METIS (ignored when ``partition`` is given).
        batch_size: clusters per batch.
        partition: ``[N]`` part ids ``0..P-1`` (every part non-empty), or ``None``
            (METIS with ``num_parts``; :class:`MetisUnavailableError` without it).
        recursive: METIS's recursive bisection (as ``ClusterData``).
        metis_backend: one of :data:`METIS_BACKENDS`, or ``None`` (the first
            present); which one ran is ``loader.partitioner``.
        budget: a ``graphs=2`` :class:`Budget` whose real nodes hold the
            ``batch_size`` largest clusters, its dict/JSON, or ``None`` (fitted).
        seed: as :class:`FixedSizeNeighborLoader`'s, and METIS's seed with
            pymetis (:func:`metis_partition`).
        keep_inter_cluster_edges: keep every edge out of (``"csc"``: into) the
            clusters' nodes, their outer ends as extra rows (module doc).
        sparse_format: ``"csr"`` (default: edges by source, as ``ClusterData``)
            or ``"csc"`` (by destination).
        The rest: as :class:`FixedSizeNeighborLoader` (``shuffle``,
            ``oversize``, ``success_ratio``, ``fit_batches``, ``round_to``,
            ``micro_batches``, ``rank``, ``world_size``, ``pad_id``, ``num_workers``,
            ``sampler_threads``, ``prefetch``: a background thread builds up to
            ``prefetch`` batches ahead, the same batches, order, stats and errors as
            without it, :func:`~graph_adapter.sampling.neighbor.prefetched`; not with
            ``num_workers``). Every cluster is in exactly one batch an epoch,
            across ranks.

    Attributes: ``partitioner`` (``"given"`` or the METIS backend),
    ``partition_seconds`` (METIS's wall time, CSR included; 0 for ``partition=``),
    ``edge_cut`` (METIS: undirected edges between parts, :func:`edge_cut`;
    ``None`` for ``partition=``: not computed), ``num_parts``, ``partptr`` /
    ``node_perm`` (part ``p``'s nodes: ``node_perm[partptr[p]:partptr[p + 1]]``).

    Yields:
        One flat dict a batch, all of ``loader.budget``'s shapes: the induced
        subgraph of ``batch_size`` clusters, with the masks and ``n_id`` / ``e_id``
        of :class:`FixedSizeNeighborLoader`'s batches.

    Raises:
        PartitionError: a ``partition`` that is not one id in ``[0, P)`` a node, an
            empty part, or a ``num_parts`` that is not in ``[1, num_nodes]``.
        MetisUnavailableError: ``num_parts`` without ``partition`` and no METIS.
        ValueError: an unknown ``metis_backend`` or ``sparse_format``, or another
            bad argument.

    Example:
        ```python
        import torch
        from torch_geometric.datasets import FakeDataset

        from graph_adapter import FixedSizeClusterLoader

        data = FakeDataset(avg_num_nodes=200, avg_degree=4)[0]
        parts = torch.arange(data.num_nodes) % 8  # a partition (num_parts=8: METIS's)
        loader = FixedSizeClusterLoader(data, batch_size=2, partition=parts)
        assert len(loader) == 4  # every cluster in one batch an epoch, 2 a batch
        ```
    """

    def __init__(self, data: Any, num_parts: Optional[int] = None, batch_size: int = 1, *,
                 partition: Any = None, recursive: bool = False,
                 metis_backend: Optional[str] = None, shuffle: bool = False,
                 budget: Union[Budget, dict, str, None] = None, seed: int = 0,
                 oversize: str = "trim", success_ratio: float = 0.99, fit_batches: int = 32,
                 round_to: int = 1, micro_batches: int = 1, rank: Optional[int] = None,
                 world_size: Optional[int] = None,
                 pad_id: int = -1, num_workers: int = 0, sampler_threads: Optional[int] = 1,
                 prefetch: int = 0, keep_inter_cluster_edges: bool = False,
                 sparse_format: str = "csr"):
        if sparse_format not in SPARSE_FORMATS:
            raise ValueError(f"sparse_format={sparse_format!r}; choose one of {SPARSE_FORMATS} "
                             f"(ClusterData's: edges ordered by source, or by destination)")
        self.keep_inter_cluster_edges = bool(keep_inter_cluster_edges)
        self.sparse_format = sparse_format
        # batches are built per chunk by the neighbour loader's iteration (_batch_now
        # below), so its prefetching thread serves them as it serves sampled ones; a batch
        # only reads the partition's arrays, so the caller's own batch() can run beside it
        self._setup(data, [-1], batch_size, SamplingSettings.of(
            dict(locals(), replace=False, disjoint=False, directed=False)))
        self.num_neighbors = None  # no hops: a batch is whole clusters
        self.partitioner, self.partition_seconds, self.edge_cut = "given", 0.0, None
        # the graph's edges whatever holds them (edge_index, adj / adj_t, a graph store)
        edges = input_edge_index(data, type(self).__name__)
        if partition is None:
            t = time.perf_counter()
            part, self.partitioner, indptr, col = _metis(edges, self.num_nodes,
                                                         num_parts, recursive, seed,
                                                         metis_backend)
            self.partition_seconds = time.perf_counter() - t
            self.edge_cut = _csr_cut(indptr, col, part)
            partition = _compact(part, num_parts, self.partitioner)
        self.partptr, self.node_perm = _parts(partition, self.num_nodes)
        self.num_parts = int(self.partptr.numel()) - 1
        self._adj = _partition_adjacency(edges, self.node_perm, sparse_format)
        self.seeds = torch.arange(self.num_parts)  # the loader's "seeds" are the clusters
        sizes = (self.partptr[1:] - self.partptr[:-1]).sort(descending=True).values
        #: real nodes of the largest batch (its batch_size largest clusters): never cut
        self.max_nodes = int(sizes[:batch_size].sum())
        self.stats = self._new_stats(0)
        self.budget = self._resolve_budget(budget, success_ratio, fit_batches, round_to,
                                           self.max_nodes,
                                           f"the {self.max_nodes} nodes of the {batch_size} "
                                           f"largest clusters")

    def _new_stats(self, epoch: int) -> ClusterLoaderStats:
        st = ClusterLoaderStats(**super()._new_stats(epoch).as_dict())
        st.total_seeds = self.num_nodes  # every node is a real row once an epoch
        # set in __init__ before the first stats (an early call sees the defaults)
        st.partitioner = getattr(self, "partitioner", "given")
        st.num_parts = getattr(self, "num_parts", 0)
        st.edge_cut = getattr(self, "edge_cut", None)
        return st

    def cluster_nodes(self, clusters: Tensor) -> Tensor:
        """The nodes of ``clusters`` (global ids), cluster by cluster, by node id within one."""
        start = self.partptr[clusters]
        cnt = self.partptr[clusters + 1] - start
        seg = torch.repeat_interleave(torch.arange(cnt.numel()), cnt)
        off = torch.arange(seg.numel()) - (torch.cumsum(cnt, 0) - cnt)[seg]
        return self.node_perm[start[seg] + off]

    def sample(self, seeds: Tensor, epoch: int, chunk: int, stream: int = 0) -> Sample:
        """The subgraph of clusters ``seeds`` (deterministic: no randomness): their
        nodes, the edges between them (``keep_inter_cluster_edges``: every edge out of
        them, and its outer ends as rows after theirs), in PyG's order (module doc)."""
        clusters = seeds.long()
        start, end = self.partptr[clusters], self.partptr[clusters + 1]
        perm_ids = _ranges(start, end - start)  # the rows' places in the partition order
        n = int(perm_ids.numel())
        ptr, other, eid = self._adj
        pos = _ranges(ptr[perm_ids], ptr[perm_ids + 1] - ptr[perm_ids])
        row = torch.repeat_interleave(torch.arange(n), ptr[perm_ids + 1] - ptr[perm_ids],
                                      output_size=int(pos.numel()))
        far = other[pos]  # the other end's place in the partition order
        # its cluster, and that cluster's place in this batch (-1: not in it)
        part = torch.searchsorted(self.partptr, far, right=True) - 1
        slot = torch.full((self.num_parts,), -1, dtype=torch.long)
        slot[clusters] = torch.arange(clusters.numel())
        offset = torch.cumsum(end - start, 0) - (end - start)
        where = slot[part]
        inside = where >= 0
        col = torch.empty_like(far)
        col[inside] = offset[where[inside]] + far[inside] - self.partptr[part[inside]]
        halo = far.new_empty(0)
        if self.keep_inter_cluster_edges:
            halo, inv = torch.unique(far[~inside], return_inverse=True)  # partition order
            col[~inside] = n + inv
        else:
            row, col, pos = row[inside], col[inside], pos[inside]
        n_id = self.node_perm[torch.cat([perm_ids, halo])]
        edge_index = torch.stack([row, col] if self.sparse_format == "csr" else [col, row])
        return Sample(n_id=n_id, edge_index=edge_index, e_id=eid[pos],
                      nodes_per_hop=[n, int(halo.numel())], edges_per_hop=[int(pos.numel())])

    def _rank_facts(self) -> Dict[str, int]:
        """The neighbour loader's facts and the partition: ranks that partitioned the
        graph differently would train on clusters that overlap and miss nodes."""
        facts = super()._rank_facts()
        facts["partition fingerprint"] = fingerprint(
            self.partptr.numpy().tobytes() + self.node_perm.numpy().tobytes())
        return facts

    def _fit_budget(self, success_ratio: float, fit_batches: int, round_to: int) -> Budget:
        return super()._fit_budget(success_ratio, fit_batches, round_to,
                                   per_batch=self.max_nodes)

    def _batch_now(self, epoch: int, chunk: int) -> Tuple[Dict[str, Tensor], int, int]:
        clusters = self.chunk_seeds(epoch, chunk)
        s = self.sample(clusters, epoch, chunk)
        return self._fit_and_pad(s, s.nodes_per_hop[0],  # every cluster row is a "seed" row
                                 f"epoch {epoch}, chunk {chunk} (clusters "
                                 f"{clusters[:4].tolist()}...)")



def _ranges(start: Tensor, length: Tensor) -> Tensor:
    """``cat([arange(s, s + l) for s, l in zip(start, length)])``, without a Python loop."""
    total = int(length.sum())
    seg = torch.repeat_interleave(torch.arange(length.numel()), length, output_size=total)
    first = torch.cumsum(length, 0) - length
    return start[seg] + torch.arange(total) - first[seg]


def _partition_adjacency(edge_index: Tensor, node_perm: Tensor, sparse_format: str
                         ) -> Tuple[Tensor, Tensor, Tensor]:
    """``(ptr [N + 1], other [E], e_id [E])``: each node's edges (out-edges for ``"csr"``,
    in-edges for ``"csc"``) by the node's place in the partition order, then the other
    end's place, then input order: ``ClusterData``'s permuted sparse matrix, whose
    rows a batch slices in PyG's edge order."""
    num_nodes = int(node_perm.numel())
    rank = torch.empty_like(node_perm)
    rank[node_perm] = torch.arange(num_nodes)
    ei = edge_index.long()
    mine, other = (rank[ei[0]], rank[ei[1]]) if sparse_format == "csr" else \
        (rank[ei[1]], rank[ei[0]])
    order = torch.sort(other, stable=True).indices  # two stable passes: (mine, other, input)
    order = order[torch.sort(mine[order], stable=True).indices]
    ptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    torch.cumsum(torch.bincount(mine, minlength=num_nodes), 0, out=ptr[1:])
    return ptr, other[order], order
