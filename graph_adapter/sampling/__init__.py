"""The sampling stage: fixed-size batches of subgraphs sampled from one large graph.

One module a job:

* :mod:`~graph_adapter.sampling.csr`: the compressed adjacency (:class:`CSC`)
  and neighbour sampling on it (PyG ``NeighborLoader`` semantics);
* :mod:`~graph_adapter.sampling.pyg_sampler`: PyG's own sampler behind the
  same interface (``sampler="pyg"``);
* :mod:`~graph_adapter.sampling.sampled`: one sample padded to a budget, and
  the budget fitted to samples;
* :mod:`~graph_adapter.sampling.hops`: per-hop budgets, one block of rows and
  edges per hop (``per_hop_budget=``: PyG's ``trim_to_layer`` at static shapes);
* :mod:`~graph_adapter.sampling.hetero_sample`: the same for heterogeneous graphs;
* :mod:`~graph_adapter.sampling.inputs` (a subpackage): where a batch's rows come
  from (``inputs.source``: tensors, numpy arrays and memmaps, PyG ``FeatureStore``
  columns) and what a loader samples from (``edge_index``, ``adj`` / ``adj_t``, a
  ``(FeatureStore, GraphStore)`` pair); ``inputs.stores``: :class:`MemmapFeatureStore`,
  features on disk behind PyG's ``FeatureStore`` protocol;
* :mod:`~graph_adapter.sampling.settings`: the settings the loaders share,
  one checked object (:class:`SamplingSettings`);
* :mod:`~graph_adapter.sampling.to_pyg`: a padded batch back to the object PyG's
  loader yields (``loader.to_pyg(batch)``);
* :mod:`~graph_adapter.sampling.neighbor` (the loaders' base), :mod:`~graph_adapter.sampling.link`,
  :mod:`~graph_adapter.sampling.cluster`,
  :mod:`~graph_adapter.sampling.hetero_neighbor`: the loaders (the link loaders, homogeneous
  and hetero, in the :mod:`~graph_adapter.sampling.link` subpackage).

It may import :mod:`graph_adapter.format`, :mod:`graph_adapter.batching`, torch,
numpy and PyG; never a later stage.
"""
from .csr import (CSC, SUBGRAPH_TYPES, TEMPORAL_STRATEGIES, ArrayRows, FanoutError,
                  FanoutLengthError, Sample, SubgraphTypeError, TemporalSamplingError,
                  check_fanouts, sample_neighbors)
from .pyg_sampler import (SAMPLERS, PygHeteroNeighborSampler, PygNeighborSampler,
                          PygSamplerUnavailableError, pyg_sampler_backend)
from .inputs.source import (ExcludedAttributeWarning, FeatureStoreError, GraphStructureError,
                     ReservedAttributeError, RowSource, gather_rows)
from .inputs.stores import MemmapFeatureStore, MemmapStoreError
from .sampled import fit_neighbor_budget, pad_sample, trim_sample
from .settings import SamplingSettings
from .hops import HopBudget, HopBudgetError, fit_hop_budget, fit_to_hops, pad_per_hop
from .neighbor import (OVERSIZE_POLICIES, FixedSizeNeighborLoader, InputNodesError,
                       NeighborLoaderStats, SubgraphOversizeError)
from .link import (NEG_SAMPLING, FixedSizeHeteroLinkNeighborLoader, FixedSizeLinkNeighborLoader,
                   LinkLabelError, LinkLoaderStats)
from .hetero_sample import HeteroSample, fit_hetero_budget, sample_hetero_neighbors, trim_hetero
from .hetero_neighbor import FixedSizeHeteroNeighborLoader
from .to_pyg import ForeignBatchError, sampled_per_hop, to_pyg
from .cluster import (METIS_BACKENDS, SPARSE_FORMATS, ClusterLoaderStats, FixedSizeClusterLoader,
                      MetisUnavailableError, PartitionError, edge_cut, metis_available,
                      metis_partition)

__all__ = ["CSC", "ArrayRows", "FanoutError", "Sample", "check_fanouts", "sample_neighbors",
           "FanoutLengthError", "SubgraphTypeError", "TemporalSamplingError", "SUBGRAPH_TYPES",
           "TEMPORAL_STRATEGIES",
           "SAMPLERS", "PygHeteroNeighborSampler", "PygNeighborSampler",
           "PygSamplerUnavailableError", "pyg_sampler_backend", "fit_neighbor_budget",
           "pad_sample", "trim_sample", "OVERSIZE_POLICIES", "FixedSizeNeighborLoader",
           "InputNodesError", "NeighborLoaderStats", "SubgraphOversizeError", "NEG_SAMPLING",
           "FixedSizeLinkNeighborLoader", "LinkLabelError", "LinkLoaderStats",
           "FixedSizeHeteroNeighborLoader", "FixedSizeHeteroLinkNeighborLoader", "HeteroSample",
           "fit_hetero_budget",
           "sample_hetero_neighbors", "trim_hetero", "METIS_BACKENDS", "ClusterLoaderStats",
           "FixedSizeClusterLoader", "MetisUnavailableError", "PartitionError", "edge_cut",
           "metis_available", "metis_partition", "SPARSE_FORMATS", "ForeignBatchError",
           "sampled_per_hop", "to_pyg", "SamplingSettings", "HopBudget", "HopBudgetError",
           "fit_hop_budget", "fit_to_hops", "pad_per_hop",
           "ExcludedAttributeWarning", "FeatureStoreError", "GraphStructureError",
           "ReservedAttributeError", "RowSource", "gather_rows", "MemmapFeatureStore",
           "MemmapStoreError"]
