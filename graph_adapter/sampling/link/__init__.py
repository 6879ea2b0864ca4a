"""The link loaders: link prediction on one large graph, in fixed shapes.

* :mod:`~graph_adapter.sampling.link.loader`: :class:`FixedSizeLinkNeighborLoader`
  (PyG's ``LinkNeighborLoader``: supervision edges, PyG's ``NegativeSampling``,
  ``disjoint``, temporal links) and the supervision slots both loaders share;
* :mod:`~graph_adapter.sampling.link.hetero`: :class:`FixedSizeHeteroLinkNeighborLoader`
  (``HeteroData``: supervision edges of one edge type, seeds of both endpoint
  types), which ``FixedSizeLinkNeighborLoader(HeteroData, ...)`` builds.
"""
from .loader import (DST_NEG_INDEX, DST_POS_INDEX, EDGE_LABEL, EDGE_LABEL_INDEX,
                     EDGE_LABEL_TIME, HETERO_LINK_LOADER, INPUT_ID, LINK_MASK, NEG_SAMPLING,
                     SEED_TIME, SRC_INDEX, TEMPORAL_STRATEGIES, FixedSizeLinkNeighborLoader,
                     LinkLabelError, LinkLoaderStats, LinkRows, LinkSupervision, NegSpec,
                     check_time_args, check_times, check_weight, draw_nodes, link_labels,
                     link_rows, link_seeds, neg_spec, negatives_by_positive,
                     sample_negatives, temporal_negatives)
from .hetero import FixedSizeHeteroLinkNeighborLoader

__all__ = ["FixedSizeLinkNeighborLoader", "FixedSizeHeteroLinkNeighborLoader", "LinkLoaderStats",
           "LinkLabelError", "NEG_SAMPLING", "EDGE_LABEL_INDEX", "EDGE_LABEL", "INPUT_ID",
           "LINK_MASK", "SRC_INDEX", "DST_POS_INDEX", "DST_NEG_INDEX", "EDGE_LABEL_TIME",
           "SEED_TIME", "TEMPORAL_STRATEGIES", "HETERO_LINK_LOADER", "sample_negatives",
           "link_seeds", "NegSpec", "neg_spec", "check_weight", "draw_nodes", "link_rows",
           "LinkRows", "LinkSupervision", "link_labels", "negatives_by_positive",
           "temporal_negatives", "check_time_args", "check_times"]
