"""The batching stage: datasets of small graphs into padded batches of one budget.

One module a job, in the order a batch is made:

* :mod:`~graph_adapter.batching.budget`: :class:`Budget` (nodes, edges and
  graphs a batch holds) and :meth:`Budget.fit` from a dataset;
* :mod:`~graph_adapter.batching.packing`: graph sizes and packing plans (which
  graphs share a batch), JSON-serializable;
* :mod:`~graph_adapter.batching.collate`: :class:`Collator` and
  :func:`collate_padded` (graphs -> one padded flat dict), with the private
  scan of a dataset's keys (``_scan``), graph views (``_view``), in-memory
  datasets read column-wise (``_stored``), the gathers (``_gather``) and the
  static aggregation tables (``_layout``);
* :mod:`~graph_adapter.batching.loader`: :class:`FixedSizeLoader`;
* :mod:`~graph_adapter.batching.ranks`: which share of an epoch a loader
  yields (rank and world size, read from ``torch.distributed`` at each epoch),
  shared with the sampling stage's loaders.

It may import :mod:`graph_adapter.format`, torch, numpy and PyG; never a later
stage (``sampling``, ``nn``, ...).
"""
from .budget import RESERVED_NODES, Budget
from .packing import (PACKERS, GraphSizes, find_oversize, graph_sizes, oversize_reasons,
                      pack_greedy, pack_histogram, plan_efficiency, plan_epoch, slot_dims)
from .collate import Collator, collate_padded
from ._layout import (HYB_COVER, LAYOUTS, DegreeWidthError, cover_width, fit_layout_widths,
                      hyb_tables)
from .loader import FixedSizeLoader, LoaderStats
from .ranks import RankMismatchError, Ranks, Sharded, distributed_ranks, fingerprint

__all__ = ["Budget", "RESERVED_NODES", "GraphSizes", "graph_sizes", "pack_greedy",
           "pack_histogram", "plan_epoch", "plan_efficiency", "find_oversize",
           "oversize_reasons", "slot_dims", "PACKERS", "Collator", "collate_padded", "LAYOUTS",
           "DegreeWidthError", "HYB_COVER",
           "cover_width", "fit_layout_widths", "hyb_tables",
           "FixedSizeLoader", "LoaderStats", "Ranks", "Sharded", "RankMismatchError",
           "distributed_ranks", "fingerprint"]
