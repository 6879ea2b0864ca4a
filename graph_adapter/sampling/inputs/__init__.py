"""What the loaders read: a graph's edges and rows wherever they live.

* :mod:`~graph_adapter.sampling.inputs.source`: where a batch's rows come from
  (tensors, numpy arrays and memmaps, PyG ``FeatureStore`` columns) and what a
  loader samples from (``edge_index``, ``adj`` / ``adj_t``, a ``(FeatureStore,
  GraphStore)`` pair);
* :mod:`~graph_adapter.sampling.inputs.stores`: :class:`MemmapFeatureStore`,
  features on disk behind PyG's ``FeatureStore`` protocol.
"""
from .source import (ExcludedAttributeWarning, FeatureStoreError, GraphInput,
                     GraphStructureError, NumpyRows, ReservedAttributeError, RowSource,
                     StoreRows, gather_rows, graph_input, hetero_store_view, input_edge_index,
                     is_hetero_store_pair, is_store_pair, rows_of, warn_excluded, whole_rows)
from .stores import METADATA_FILE, MemmapFeatureStore, MemmapStoreError

__all__ = ["ExcludedAttributeWarning", "FeatureStoreError", "GraphInput", "GraphStructureError",
           "NumpyRows", "ReservedAttributeError", "RowSource", "StoreRows", "gather_rows",
           "graph_input", "hetero_store_view", "input_edge_index", "is_hetero_store_pair",
           "is_store_pair", "rows_of", "warn_excluded", "whole_rows", "METADATA_FILE",
           "MemmapFeatureStore", "MemmapStoreError"]
