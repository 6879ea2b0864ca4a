"""``FixedSizeLinkNeighborLoader``: link-level training on one large graph, at one shape.

(Module ``graph_adapter.sampling.link.loader``; ``graph_adapter.sampling.link``
exports its names.)

PyG ``LinkNeighborLoader`` semantics (homogeneous; ``disjoint`` below): every
batch takes ``batch_size`` supervision edges (columns of ``edge_label_index``,
default the graph's ``edge_index``), samples negatives on the host, and grows
the subgraph of :mod:`graph_adapter.sampling.neighbor` around the distinct
endpoints of all of them (the *seeds*: sorted by node id, as PyG's
``unique``), then pads it to one :class:`~graph_adapter.batching.budget.Budget`.
The node and edge keys are :class:`~graph_adapter.sampling.neighbor.FixedSizeNeighborLoader`'s
(``n_id``, ``e_id``, ``seed_mask`` on the endpoint rows, ``x`` ... gathered by
``n_id``); the supervision keys have a fixed slot count of their own:

* ``neg_sampling="binary"`` (or ``None``): ``L`` slots; ``edge_label_index``
  ``[2, L]`` (local rows of the endpoints: ``n_id[edge_label_index]`` are the
  global ids), ``edge_label`` ``[L]`` (given labels, or 1; negatives 0; PyG
  adds 1 to given labels whose minimum is 0 so that 0 means "negative";
  absent with ``neg_sampling=None`` and no ``edge_label``), ``input_id`` ``[L]``
  (the column of ``edge_label_index`` each positive came from; ``-1`` on
  negatives and padding), ``link_mask`` ``[L]`` (True on real slots). Real
  slots come first, positives then negatives (PyG's order), then padding
  slots pointing at the last padding node ``(N - 1, N - 1)`` with label 0.
  ``L = batch_size + ceil(batch_size * neg_sampling_ratio)``.
* ``neg_sampling="triplet"``: ``B`` slots; ``src_index`` ``[B]``,
  ``dst_pos_index`` ``[B]``, ``dst_neg_index`` ``[B]`` (ratio 1) or
  ``[B, k]`` (ratio ``k``), ``input_id`` ``[B]``, ``link_mask`` ``[B]``;
  padding slots point at ``N - 1``. ``edge_label`` must be ``None`` (PyG).

The slot count is a row count of its own: FORMAT's "no two row counts equal"
holds for it too (it is nudged up by one, a padding slot more, where it would
equal ``N``, ``E`` or ``G``; a fitted budget avoids it), so no module mistakes
a link key for a node-, edge- or graph-level one. Masked link loss:
:func:`graph_adapter.nn.link_losses.masked_link_bce` (BCE with logits over
``link_mask``).

Negatives, as PyG's ``NegativeSampling`` draws them: binary, ``ceil(b * ratio)``
(source, destination) pairs of uniformly random nodes; triplet, ``k``
uniformly random destinations per positive. Like PyG (its sampler's own
"TODO: Do not sample false negatives"), a negative may be an edge of the graph
or a positive of the batch: nothing is rejected. The draws are a function of
``(seed, epoch, batch)`` (a stream apart from the neighbour sampling's).

Every supervision edge is a positive exactly once per epoch, across ranks too:
the epoch's (shuffled) order of the columns of ``edge_label_index`` is cut
into chunks of ``batch_size``, chunk ``b * world_size + rank`` on rank
``rank``, as the node loader cuts its seeds (``loader.chunk_seeds`` gives the
columns of a chunk). Budgets are fitted from the sampler's own output as the
node loader's are, holding at least every endpoint a batch can have
(``min(2 L, num_nodes)``): seeds are never trimmed.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from ...batching import Budget
from ...format import (DST_NEG_INDEX, DST_POS_INDEX, EDGE_LABEL, EDGE_LABEL_INDEX, INPUT_ID,
                      LINK_KEYS, LINK_MASK, SRC_INDEX)
from ..csr import TEMPORAL_STRATEGIES, Sample, take
from ...contract import EDGE_LABEL_TIME, SEED_TIME, padding_node
from ..settings import SamplingSettings
from ..neighbor import FixedSizeNeighborLoader, NeighborLoaderStats, chunk_seed
from ..inputs.source import input_edge_index, is_hetero_store_pair

__all__ = ["FixedSizeLinkNeighborLoader", "LinkLoaderStats", "LinkLabelError",
           "NEG_SAMPLING", "EDGE_LABEL_INDEX", "EDGE_LABEL", "INPUT_ID", "LINK_MASK",
           "SRC_INDEX", "DST_POS_INDEX", "DST_NEG_INDEX", "EDGE_LABEL_TIME", "SEED_TIME",
           "sample_negatives", "link_seeds", "NegSpec", "neg_spec", "check_weight", "draw_nodes",
           "link_rows", "LinkRows", "LinkSupervision", "link_labels", "TEMPORAL_STRATEGIES",
           "HETERO_LINK_LOADER", "negatives_by_positive", "temporal_negatives",
           "check_time_args", "check_times"]

NEG_SAMPLING = ("binary", "triplet", None)
#: The loader a ``HeteroData`` goes to (:mod:`graph_adapter.sampling.link.hetero` puts
#: its class here when imported; this package's ``__init__`` imports it).
HETERO_LINK_LOADER: List[type] = []
_NEG_STREAM = 3  # negatives' random stream (0: neighbours, 1: order, 2: budget fit)


class LinkLabelError(ValueError):
    """A bad ``edge_label_index`` / ``edge_label`` / negative-sampling setting."""


@dataclass
class LinkLoaderStats(NeighborLoaderStats):
    """:class:`NeighborLoaderStats` plus the supervision slots of the epoch of this rank:
    ``links`` positives, ``negatives``, ``total_links`` (all ranks: the columns of
    ``edge_label_index``). ``seeds`` counts endpoint rows."""

    links: int = 0
    negatives: int = 0
    total_links: int = 0


@dataclass(frozen=True)
class NegSpec:
    """One negative-sampling setting, whatever form it was given in (PyG's
    ``NegativeSampling``, its dict, a mode string with ``neg_sampling_ratio``).

    ``mode``: ``"binary"`` or ``"triplet"``; ``amount``: negatives per positive
    (an int for triplet); ``src_weight`` / ``dst_weight``: ``None`` (uniform) or
    a float64 node-level weight vector the negatives are drawn proportional to.
    """

    mode: str
    amount: float = 1
    src_weight: Optional[Tensor] = None
    dst_weight: Optional[Tensor] = None


def neg_spec(neg_sampling: Any, neg_sampling_ratio: Optional[float]) -> Optional[NegSpec]:
    """``neg_sampling`` (``None``, ``"binary"`` / ``"triplet"``, a dict of PyG's
    ``NegativeSampling`` fields, or a ``NegativeSampling``) as a :class:`NegSpec`.

    Raises:
        LinkLabelError: an unknown mode, a non-positive amount, a fractional
            triplet amount, or an amount given twice (``neg_sampling_ratio`` with
            a ``NegativeSampling`` / dict that has its own).
    """
    if neg_sampling is None:
        return None
    if isinstance(neg_sampling, NegSpec):
        return neg_sampling
    if isinstance(neg_sampling, str):
        mode, amount, sw, dw = neg_sampling, (1 if neg_sampling_ratio is None
                                              else neg_sampling_ratio), None, None
    else:
        if isinstance(neg_sampling, dict):
            extra = set(neg_sampling) - {"mode", "amount", "src_weight", "dst_weight"}
            if extra or "mode" not in neg_sampling:
                raise LinkLabelError(f"neg_sampling dict has keys {sorted(neg_sampling)}; give "
                                     f"PyG's NegativeSampling fields: mode (required), amount, "
                                     f"src_weight, dst_weight")
            get = neg_sampling.get
        elif hasattr(neg_sampling, "mode") and hasattr(neg_sampling, "amount"):
            get = lambda k, d=None: getattr(neg_sampling, k, d)  # noqa: E731
        else:
            raise LinkLabelError(f"neg_sampling={neg_sampling!r:.80}; give None, 'binary', "
                                 f"'triplet', a dict or torch_geometric.sampler.NegativeSampling")
        mode = get("mode")
        mode = getattr(mode, "value", mode)  # PyG's NegativeSamplingMode enum
        amount, sw, dw = get("amount", 1), get("src_weight"), get("dst_weight")
        if neg_sampling_ratio is not None:
            raise LinkLabelError(f"neg_sampling_ratio={neg_sampling_ratio} with a "
                                 f"NegativeSampling / dict neg_sampling (amount={amount}): give "
                                 f"the amount once, in neg_sampling")
    # the amount's name as the user gave it
    what = "neg_sampling_ratio=" if isinstance(neg_sampling, str) else "NegativeSampling amount="
    if mode not in ("binary", "triplet"):
        raise LinkLabelError(f"neg_sampling={mode!r}; choose one of {NEG_SAMPLING}")
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not amount > 0:
        raise LinkLabelError(f"{what}{amount!r}; give a positive number (negatives per "
                             f"positive)")
    if mode == "triplet" and amount != int(amount):
        raise LinkLabelError(f"{what}{amount} with neg_sampling='triplet': give an int "
                             f"(negative destinations per positive), as PyG")
    if mode == "triplet":
        amount = int(amount)
    if mode == "triplet" and sw is not None:
        # PyG takes it and draws no source: said, not dropped silently
        warnings.warn("NegativeSampling(src_weight=...) with mode 'triplet' is not used: "
                      "triplet negatives are destinations only (dst_weight), as in PyG",
                      stacklevel=3)
        sw = None
    return NegSpec(mode, amount, sw, dw)


def check_weight(w: Any, num_nodes: int, name: str) -> Optional[Tensor]:
    """A negative-sampling weight as a float64 ``[num_nodes]`` vector (``None`` stays).

    Raises:
        LinkLabelError: a weight of another length, a negative / non-finite entry,
            or all zero (no node to draw).
    """
    if w is None:
        return None
    t = torch.as_tensor(w)
    if t.dim() != 1 or t.numel() != num_nodes:
        raise LinkLabelError(f"NegativeSampling {name} has shape {tuple(t.shape)}; give one "
                             f"weight per node ({num_nodes} nodes)")
    t = t.double()
    if not bool(torch.isfinite(t).all()) or bool((t < 0).any()):
        raise LinkLabelError(f"NegativeSampling {name} has a negative or non-finite entry; "
                             f"give weights >= 0 (they need not sum to one)")
    if not float(t.sum()) > 0:
        raise LinkLabelError(f"NegativeSampling {name} is all zero: no node can be drawn; give "
                             f"some positive weight")
    return t


def draw_nodes(n: int, num_nodes: int, cdf: Optional[Tensor],
               generator: torch.Generator) -> Tensor:
    """``n`` node ids: uniform, or drawn with replacement proportional to the weights
    whose cumulative sum is ``cdf`` (as PyG's ``torch.multinomial``; a node of weight
    0 is never drawn; no category limit)."""
    if cdf is None:
        return torch.randint(0, num_nodes, (n,), generator=generator)
    u = torch.rand(n, generator=generator, dtype=torch.float64) * cdf[-1]
    return torch.searchsorted(cdf, u, right=True).clamp_(max=num_nodes - 1)


def sample_negatives(num_pos: int, num_nodes: int, mode: str, ratio: float,
                     generator: torch.Generator, *, src_cdf: Optional[Tensor] = None,
                     dst_cdf: Optional[Tensor] = None,
                     num_dst_nodes: Optional[int] = None) -> Tensor:
    """PyG's ``NegativeSampling`` draws (no rejection: a negative may be an edge).

    binary: ``[2, ceil(num_pos * ratio)]`` (source row 0 over ``num_nodes``,
    destination row 1 over ``num_dst_nodes``, default the same); triplet: the
    ``num_pos * ratio`` destinations as PyG draws them, one flat vector
    (``ratio`` an int; PyG reads it ``[num_pos, ratio]`` row-major, or with
    ``disjoint=True`` in blocks of ``num_pos``: negative ``j`` of positive ``i`` at
    ``j * num_pos + i``). ``src_cdf`` / ``dst_cdf``: cumulative weights (``None``:
    uniform).
    """
    nd = num_nodes if num_dst_nodes is None else num_dst_nodes
    if mode == "binary":
        k = math.ceil(num_pos * ratio)
        return torch.stack([draw_nodes(k, num_nodes, src_cdf, generator),
                            draw_nodes(k, nd, dst_cdf, generator)])
    return draw_nodes(num_pos * int(ratio), nd, dst_cdf, generator)


def link_seeds(endpoints: Tensor) -> Tuple[Tensor, Tensor]:
    """``(seeds, local)``: the distinct global ids of ``endpoints`` (sorted, as PyG's
    ``unique``) and each endpoint's row among them (same shape as ``endpoints``)."""
    seeds, inv = torch.unique(endpoints.reshape(-1), return_inverse=True)
    return seeds, inv.view(endpoints.shape)


def negatives_by_positive(flat: Tensor, b: int, k: int, disjoint: bool) -> Tensor:
    """The ``[b, k]`` triplet negatives of PyG's flat draw: row-major (PyG's reading
    without ``disjoint``) or in blocks of ``b`` (with it: negative ``j`` of positive
    ``i`` is draw ``j * b + i``, the seed row ``2 b + j b + i`` of PyG's layout)."""
    return flat.view(k, b).t() if disjoint else flat.view(b, k)


def temporal_negatives(drawn: Tensor, seed_time: Tensor, node_time: Tensor,
                       redraw: Any) -> Tensor:
    """PyG's temporal negatives: a drawn node later than its link's time is drawn again
    (5 rounds), what is still later becomes the earliest node (``node_time.argmin()``).

    Args:
        drawn: [n] drawn node ids; ``seed_time`` [n] the time each must not pass.
        node_time: the node type's times.
        redraw: ``redraw(count)`` -> ``count`` fresh draws.
    """
    out = drawn.clone()
    bad = take(node_time, out) > seed_time
    for _ in range(5):
        c = int(bad.sum())
        if c == 0:
            return out
        at = bad.nonzero().view(-1)
        fresh = redraw(c)
        out[at] = fresh
        bad[at] = take(node_time, fresh) > seed_time[at]
    out[bad] = int(node_time.argmin())
    return out


@dataclass
class LinkRows:
    """Where a batch's supervision endpoints live among the seed rows.

    ``groups``: the seed rows of each endpoint node type, in row order (one group
    on a homogeneous graph or a one-type edge type; source then destination
    type otherwise); ``times``: each group's seed times (temporal) or ``None``;
    ``index``: PyG's batch keys in local rows (``edge_label_index`` ``[2, m]``;
    triplet ``src_index`` ``[b]``, ``dst_pos_index`` ``[b]``,
    ``dst_neg_index`` ``[b, k]``).
    """

    groups: List[Tensor]
    times: List[Optional[Tensor]]
    index: Dict[str, Tensor]


def link_rows(sup: Dict[str, Tensor], mode: Optional[str], k: int, disjoint: bool,
              two_types: bool) -> LinkRows:
    """The seed rows of a chunk's supervision (:meth:`FixedSizeLinkNeighborLoader.supervision`)
    as PyG's ``edge_sample`` lays them out: ``disjoint=False``, the distinct
    endpoints of a node type sorted by id; ``disjoint=True``, one row per endpoint,
    sources then destinations (triplet: positive destinations, then the
    negatives in blocks of ``b``)."""
    t = sup.get("time")
    if mode == "triplet":
        b = int(sup["src"].numel())
        src_sup, src_rows, src_t = sup["src"], sup["src"], t
        dneg = negatives_by_positive(sup["dst_neg"], b, k, disjoint)  # [b, k]
        dst_sup = torch.cat([sup["dst_pos"], dneg.reshape(-1)])
        dst_rows = torch.cat([sup["dst_pos"], dneg.t().reshape(-1)])
        # sup position -> row position among the destination rows (disjoint)
        blk = b + torch.arange(k).view(1, k) * b + torch.arange(b).view(b, 1)
        dst_pos_of = torch.cat([torch.arange(b), blk.reshape(-1)])
        dst_t = None if t is None else t.repeat(1 + k)
    else:
        eli = sup[EDGE_LABEL_INDEX]
        src_sup = src_rows = eli[0]
        dst_sup = dst_rows = eli[1]
        dst_pos_of = torch.arange(eli.size(1))
        src_t = dst_t = t
    if not two_types:  # one node type: sources then destinations, one group
        ends = torch.cat([src_rows, dst_rows])
        times = None if t is None else torch.cat([src_t, dst_t])
        if disjoint:
            groups, loc = [ends], torch.cat([torch.arange(src_rows.numel()),
                                             src_rows.numel() + dst_pos_of])
        else:
            seeds, loc = link_seeds(torch.cat([src_sup, dst_sup]))
            groups = [seeds]
        lsrc, ldst = loc[:src_sup.numel()], loc[src_sup.numel():]
        gtimes = [times]
    else:
        if disjoint:
            groups, lsrc, ldst = [src_rows, dst_rows], torch.arange(src_rows.numel()), dst_pos_of
        else:
            s_seeds, lsrc = link_seeds(src_sup)
            d_seeds, ldst = link_seeds(dst_sup)
            groups = [s_seeds, d_seeds]
        gtimes = [src_t, dst_t]
    if mode == "triplet":
        b = int(src_sup.numel())
        index = {SRC_INDEX: lsrc, DST_POS_INDEX: ldst[:b], DST_NEG_INDEX: ldst[b:].view(b, k)}
    else:
        index = {EDGE_LABEL_INDEX: torch.stack([lsrc, ldst])}
    return LinkRows(groups, gtimes, index)


def check_time_args(owner: str, time_attr: Optional[str], edge_label_time: Any,
                    temporal_strategy: str, sampler: str) -> bool:
    """PyG's rules for temporal link sampling; True when it is on.

    Raises:
        LinkLabelError: ``time_attr`` without ``edge_label_time`` or the reverse
            (PyG: both or neither), an unknown ``temporal_strategy``.
        NotImplementedError: ``sampler="pyg"`` (PyG's temporal sampling needs
            pyg-lib).
    """
    if temporal_strategy not in TEMPORAL_STRATEGIES:
        raise LinkLabelError(f"temporal_strategy={temporal_strategy!r}; choose one of "
                             f"{TEMPORAL_STRATEGIES}")
    if (time_attr is None) != (edge_label_time is None):
        given, missing = (("time_attr", "edge_label_time") if time_attr is not None
                          else ("edge_label_time", "time_attr"))
        raise LinkLabelError(f"{owner}: {given} is set but {missing} is not; temporal link "
                             f"sampling needs both (as PyG's LinkNeighborLoader): the graph's "
                             f"time attribute and each supervision edge's time")
    if time_attr is None:
        return False
    if sampler == "pyg":
        raise NotImplementedError(f"{owner}(sampler='pyg', time_attr=...): PyG's temporal "
                                  f"sampling needs pyg-lib; use sampler='ours'")
    return True


def check_times(t: Any, n: int, what: str, where: str) -> Tensor:
    """A time vector of ``n`` entries (1-d, numeric, no NaN) as a tensor.

    Raises:
        LinkLabelError: naming ``what`` and ``where`` otherwise.
    """
    t = torch.as_tensor(t)
    if t.dim() != 1 or t.numel() != n:
        raise LinkLabelError(f"{what} has shape {tuple(t.shape)}; {where} has {n}: give one "
                             f"time each")
    if t.dtype == torch.bool or t.is_complex():
        raise LinkLabelError(f"{what} has dtype {t.dtype}; give numeric times")
    if t.is_floating_point() and bool(torch.isnan(t).any()):
        raise LinkLabelError(f"{what} has a NaN: every time must compare")
    return t


def _label_index(data: Any, edge_label_index: Optional[Tensor], num_nodes: int) -> Tensor:
    if isinstance(edge_label_index, tuple):
        raise LinkLabelError("edge_label_index is a tuple ((edge_type, index)): that is for "
                             "HeteroData; this graph is homogeneous: pass the [2, L] index")
    # default supervision: the graph's own edges, wherever they are (edge_index, adj /
    # adj_t, a graph store's stored edges)
    eli = input_edge_index(data, "FixedSizeLinkNeighborLoader") if edge_label_index is None \
        else torch.as_tensor(edge_label_index)
    if eli.dim() != 2 or eli.size(0) != 2:
        raise LinkLabelError(f"edge_label_index has shape {tuple(eli.shape)}; give [2, L] "
                             f"(row 0 source, row 1 destination node ids)")
    if eli.is_floating_point() or eli.dtype == torch.bool:
        raise LinkLabelError(f"edge_label_index has dtype {eli.dtype}; give integer node ids")
    eli = eli.long()
    if eli.size(1) == 0:
        raise LinkLabelError("edge_label_index has no column: give at least one supervision edge")
    bad = (eli < 0) | (eli >= num_nodes)
    if bool(bad.any()):
        c = int(bad.any(0).nonzero()[0])
        raise LinkLabelError(f"edge_label_index column {c} = {eli[:, c].tolist()} is out of "
                             f"range: the graph has {num_nodes} nodes (ids 0..{num_nodes - 1})")
    return eli


def link_labels(edge_label: Any, num_links: int, neg: Optional[str]) -> Optional[Tensor]:
    """``edge_label`` checked against ``num_links`` columns, PyG's binary shift applied
    (labels whose minimum is 0 get 1 added: 0 means "negative").

    Raises:
        LinkLabelError: labels with a triplet loader, or of another length.
    """
    if edge_label is None:
        return None
    if neg == "triplet":
        raise LinkLabelError("edge_label is given with neg_sampling='triplet' (PyG refuses it "
                             "too): a triplet batch tells positives from negatives by "
                             "src_index / dst_pos_index / dst_neg_index; pass edge_label=None")
    lab = torch.as_tensor(edge_label)
    if lab.dim() == 0 or lab.size(0) != num_links:
        raise LinkLabelError(f"edge_label has shape {tuple(lab.shape)}; edge_label_index has "
                             f"{num_links} columns: give one label per column")
    if neg == "binary" and bool((lab.min() == 0)):
        lab = lab + 1  # PyG: "zero" now denotes "negative"
    return lab


class LinkSupervision:
    """The supervision slots of the link loaders (homogeneous and hetero): the chunk's
    positives and negatives (:meth:`supervision`), their padded keys
    (:meth:`_pad_links`) and PyG's unpadded form (:meth:`unpad_links`). A loader
    sets ``neg_sampling``, ``neg_sampling_ratio``, ``_src_cdf`` / ``_dst_cdf``,
    ``edge_label_index``, ``edge_label``, ``edge_label_time`` and overrides the
    hooks ``_link_key``, ``_num_src_dst`` and ``_node_times`` where its graph is
    heterogeneous."""

    def _setup_supervision(self, neg: Optional[NegSpec], edge_label: Any, edge_label_time: Any,
                           time_attr: Optional[str], temporal_strategy: str) -> None:
        """Keep the negative sampling (weights checked against the endpoint types'
        nodes), the labels and the link times (``self.edge_label_index`` set)."""
        self.neg = neg
        self.neg_sampling = None if neg is None else neg.mode
        self.neg_sampling_ratio = 0 if neg is None else neg.amount
        ns, nd = self._num_src_dst()
        self._src_cdf = self._dst_cdf = None
        if neg is not None:
            w = check_weight(neg.src_weight, ns, "src_weight")
            self._src_cdf = None if w is None else w.cumsum(0)
            w = check_weight(neg.dst_weight, nd, "dst_weight")
            self._dst_cdf = None if w is None else w.cumsum(0)
        L = int(self.edge_label_index.size(1))
        self.edge_label = link_labels(edge_label, L, self.neg_sampling)
        self.time_attr, self.temporal_strategy = time_attr, temporal_strategy
        self.edge_label_time = None
        if self.temporal:
            self.edge_label_time = check_times(edge_label_time, L, "edge_label_time",
                                               "edge_label_index's columns")

    def _init_slots(self, B: int) -> None:
        """``slots_needed`` (supervision slots a full batch has) and ``endpoints`` (its
        endpoint count, repeats included)."""
        if self.neg_sampling == "triplet":
            self.slots_needed = B
            self.endpoints = B * (2 + int(self.neg_sampling_ratio))
        else:
            neg = math.ceil(B * self.neg_sampling_ratio) if self.neg_sampling else 0
            self.slots_needed = B + neg
            self.endpoints = 2 * self.slots_needed
        #: the most endpoint rows (seeds) a batch can have: they always fit (disjoint: one
        #: row per endpoint, repeats included; else the distinct nodes)
        self.max_seeds = (self.endpoints if self.disjoint
                          else min(self.endpoints, self.num_nodes))

    def _slot_count(self, budget: Budget) -> int:
        taken = (set(int(v) for v in budget.nodes.values()) if budget.is_hetero
                 else {int(budget.nodes)})
        taken |= (set(int(v) for v in budget.edges.values()) if budget.is_hetero
                  else {int(budget.edges)})
        taken.add(int(budget.graphs))
        s = self.slots_needed
        while s in taken:
            s += 1  # a padding slot more: FORMAT's no-tie rule (a link key is no level)
        return s

    def _new_stats(self, epoch: int) -> LinkLoaderStats:
        return LinkLoaderStats(epoch=epoch, rank=self.rank, world_size=self.world_size,
                               total_seeds=0, total_links=int(self.seeds.numel()),
                               excluded_keys=dict(self.excluded_keys))

    def _count(self, st: NeighborLoaderStats, flat: Dict[str, Tensor]) -> None:
        real = flat[self._link_key(LINK_MASK)]
        pos = flat[self._link_key(INPUT_ID)] >= 0
        st.links += int(pos.sum())
        if self.neg_sampling == "triplet":
            k = int(self.neg_sampling_ratio)
            st.negatives += int(real.sum()) * k
        else:
            st.negatives += int((real & ~pos).sum())

    def _link_key(self, key: str) -> str:
        """The flat key of a supervision key (the hetero loader prefixes its store)."""
        return key

    def _num_src_dst(self) -> Tuple[int, int]:
        return self.num_nodes, self.num_nodes

    def _node_times(self) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        """The node times negatives are held to (sources, destinations), or None."""
        return self.node_time, self.node_time

    def supervision(self, epoch: int, chunk: int, stream: int = 0) -> Dict[str, Tensor]:
        """The chunk's supervision edges in global ids, unpadded (PyG's order).

        binary / ``None``: ``{"edge_label_index": [2, b + nb], "input_id": [b],
        "edge_label": [b + nb]`` (when labels exist)``}``; triplet:
        ``{"src": [b], "dst_pos": [b], "dst_neg": [b * k] (PyG's flat draw: see
        negatives_by_positive), "input_id": [b]}``; temporal: ``"time"`` (binary:
        ``[b + nb]``, each slot's; triplet ``[b]``).
        """
        cols = self.chunk_seeds(epoch, chunk)
        pos = self.edge_label_index[:, cols]
        b = int(cols.numel())
        g = torch.Generator().manual_seed(chunk_seed(self.seed, epoch, chunk, _NEG_STREAM + stream))
        out: Dict[str, Tensor] = {INPUT_ID: cols}
        t = None if self.edge_label_time is None else self.edge_label_time[cols]
        if t is not None:
            out["time"] = t
        ns, nd = self._num_src_dst()
        if self.neg_sampling == "triplet":
            neg = sample_negatives(b, ns, "triplet", self.neg_sampling_ratio, g,
                                   dst_cdf=self._dst_cdf, num_dst_nodes=nd)
            neg = self._in_time(neg, t, 1, nd, self._dst_cdf, g)
            out.update(src=pos[0], dst_pos=pos[1], dst_neg=neg)
            return out
        lab = None if self.edge_label is None else self.edge_label[cols]
        if self.neg_sampling == "binary":
            neg = sample_negatives(b, ns, "binary", self.neg_sampling_ratio, g,
                                   src_cdf=self._src_cdf, dst_cdf=self._dst_cdf,
                                   num_dst_nodes=nd)
            neg = torch.stack([self._in_time(neg[0], t, 0, ns, self._src_cdf, g),
                               self._in_time(neg[1], t, 1, nd, self._dst_cdf, g)])
            pos = torch.cat([pos, neg], 1)
            if lab is None:
                lab = torch.ones(b)
            lab = torch.cat([lab, lab.new_zeros((neg.size(1),) + tuple(lab.shape[1:]))])
            if t is not None:  # PyG: a negative takes the time of positive (j mod b)
                out["time"] = t.repeat(1 + math.ceil(self.neg_sampling_ratio))[:pos.size(1)]
        out[EDGE_LABEL_INDEX] = pos
        if lab is not None:
            out[EDGE_LABEL] = lab
        return out

    def _in_time(self, drawn: Tensor, t: Optional[Tensor], side: int, n: int,
                 cdf: Optional[Tensor], g: torch.Generator) -> Tensor:
        """Temporal negatives (node times only, as PyG): each no later than its link."""
        node_time = self._node_times()[side]
        if t is None or node_time is None or drawn.numel() == 0:
            return drawn
        b = t.numel()
        limit = take(t, torch.arange(drawn.numel()) % b)  # draw f is held to positive f mod b
        return temporal_negatives(drawn, limit, node_time,
                                  lambda c: draw_nodes(c, n, cdf, g))

    def _pad_links(self, sup: Dict[str, Tensor], rows: LinkRows,
                   pad: Optional[Dict[str, int]] = None) -> Dict[str, Tensor]:
        """The supervision keys, ``self.slots`` slots: real ones first, padding at the
        last padding node (``pad``: per key, that node's row; default ``N - 1``)."""
        S = self.slots
        P = padding_node(int(self.budget.nodes)) if pad is None else None
        b = int(sup[INPUT_ID].numel())
        out: Dict[str, Tensor] = {}
        iid = torch.full((S,), self.pad_id, dtype=torch.long)
        iid[:b] = sup[INPUT_ID]
        out[INPUT_ID] = iid
        mask = torch.zeros(S, dtype=torch.bool)
        for key, v in rows.index.items():
            if key == EDGE_LABEL_INDEX and pad is not None:  # two rows, two node types
                p = torch.tensor([pad[SRC_INDEX], pad[DST_POS_INDEX]]).view(2, 1)
            else:
                p = P if pad is None else pad[key]
            t = torch.full((2, S) if key == EDGE_LABEL_INDEX else (S,) + tuple(v.shape[1:]),
                           0, dtype=torch.long)
            t[...] = p
            if key == EDGE_LABEL_INDEX:
                t[:, :v.size(1)] = v
            else:
                t[:v.size(0)] = v
            if key == DST_NEG_INDEX:
                t = t.squeeze(-1)  # PyG: [B] for one negative, else [B, k]
            out[key] = t
        m = b if self.neg_sampling == "triplet" else int(sup[EDGE_LABEL_INDEX].size(1))
        if EDGE_LABEL in sup:
            lab = sup[EDGE_LABEL]
            t = lab.new_zeros((S,) + tuple(lab.shape[1:]))
            t[:m] = lab
            out[EDGE_LABEL] = t
        if "time" in sup:
            tm = sup["time"]
            t = tm.new_zeros(S)
            t[:tm.numel()] = tm
            out[SEED_TIME if self.neg_sampling == "triplet" else EDGE_LABEL_TIME] = t
        mask[:m] = True
        out[LINK_MASK] = mask
        return out

    def links_in(self, flat: Dict[str, Tensor]) -> int:
        """The number of real supervision slots of a batch (its first slots)."""
        return int(flat[self._link_key(LINK_MASK)].sum())

    def unpad_links(self, flat: Dict[str, Tensor]) -> Dict[str, Tensor]:
        """A batch's supervision keys as PyG's ``LinkNeighborLoader`` gives them: the real
        slots only, ``input_id`` ``[b]`` (positives), binary ``edge_label_index``
        ``[2, m]``, ``edge_label`` ``[m]``, ``edge_label_time`` ``[m]``; triplet
        ``src_index`` ``[b]``, ``dst_pos_index`` ``[b]``, ``dst_neg_index`` ``[b]`` or
        ``[b, k]``, ``seed_time`` ``[b]`` (keys absent here are absent there; a
        hetero batch's keys keep their store prefix)."""
        r = self.links_in(flat)
        iid = flat[self._link_key(INPUT_ID)]
        out = {self._link_key(INPUT_ID): iid[:int((iid >= 0).sum())]}
        for key in (EDGE_LABEL, EDGE_LABEL_TIME, SRC_INDEX, DST_POS_INDEX, DST_NEG_INDEX,
                    SEED_TIME):
            fk = self._link_key(key)
            if fk in flat:
                out[fk] = flat[fk][:r]
        fk = self._link_key(EDGE_LABEL_INDEX)
        if fk in flat:
            out[fk] = flat[fk][:, :r]
        return out


class FixedSizeLinkNeighborLoader(LinkSupervision, FixedSizeNeighborLoader):
    """Yields padded flat dicts of one signature for link prediction (see the module doc).

    Args:
        data: a homogeneous ``torch_geometric.data.Data`` (one large graph; its
            edges ``edge_index``, ``adj`` or ``adj_t``) or PyG's ``(FeatureStore,
            GraphStore)`` pair; a ``HeteroData`` makes a
            :class:`~graph_adapter.sampling.link.FixedSizeHeteroLinkNeighborLoader`.
        num_neighbors: fanout per hop from the endpoints (``-1`` = all).
        edge_label_index: ``[2, L]`` supervision edges (global ids); default
            ``data.edge_index``.
        edge_label: ``[L, ...]`` labels of those edges (binary / ``None`` only).
        neg_sampling: ``"binary"`` (default), ``"triplet"``, ``None`` (no
            negatives), PyG's ``NegativeSampling(mode, amount, src_weight=,
            dst_weight=)`` or its dict: negatives drawn proportional to the
            weights (uniform without them).
        neg_sampling_ratio: negatives per positive with a mode string (default
            1; an int for triplet); a ``NegativeSampling`` carries its own amount.
        batch_size: supervision edges (positives) per batch.
        budget: a ``graphs=2`` :class:`Budget` holding every endpoint of a
            batch (``min(2 L, num_nodes)`` real nodes), its dict/JSON, or
            ``None`` (fitted from the sampler's output).
        The rest: as :class:`FixedSizeNeighborLoader` (``shuffle``, ``seed``,
            ``replace``, ``oversize``, ``success_ratio``, ``fit_batches``,
            ``round_to``, ``micro_batches``, ``rank``, ``world_size``, ``pad_id``,
            ``num_workers``, ``prefetch``, ``sampler_threads``, ``directed``, ``sampler``).
        disjoint: PyG's ``disjoint=True``: every endpoint is a seed row of its own
            (repeats included) growing its own tree; ``seed_of`` gives each row's
            supervision slot (a link's two endpoints, and a triplet's negatives,
            share one); ``edge_label_index`` / ``src_index`` ... point at those
            rows. Not with ``directed=False``. ``seed_of`` is PyG's ``batch``: the
            row's tree modulo the batch's positives.
        time_attr: temporal sampling (PyG's): the graph's node- or edge-level
            time attribute; with ``edge_label_time`` (one time per column of
            ``edge_label_index``) no sampled neighbour (or edge) is later than
            its link's time, and with node times no negative is either.
            Turns ``disjoint`` on, as PyG.
        edge_label_time: see ``time_attr`` (both or neither).
        temporal_strategy: ``"uniform"`` (any neighbour in time) or ``"last"``
            (the most recent ones), as PyG.
        subgraph_type / weight_attr: as :class:`FixedSizeNeighborLoader`
            (``"bidirectional"`` / ``"induced"``; weighted neighbour draws).
    Yields:
        One flat dict a batch, all of ``loader.budget``'s shapes: the sampled
        subgraph (as :class:`FixedSizeNeighborLoader`'s) plus the batch's supervision
        edges in its own node ids, ``edge_label_index`` ``[2, L]`` and
        ``edge_label`` (binary; triplet: ``src_index`` / ``dst_pos_index`` /
        ``dst_neg_index``), ``link_mask`` (the real ones) and ``input_id``.

    Raises:
        LinkLabelError: a bad ``edge_label_index`` / ``edge_label`` (shape, dtype, an
            id out of range), ``neg_sampling`` / ``neg_sampling_ratio`` / weights,
            or ``time_attr`` / ``edge_label_time`` / ``temporal_strategy``.
        FanoutError, ValueError: as :class:`FixedSizeNeighborLoader`.

    Example:
        ```python
        from torch_geometric.datasets import FakeDataset

        from graph_adapter import FixedSizeLinkNeighborLoader

        data = FakeDataset(avg_num_nodes=200, avg_degree=4)[0]
        loader = FixedSizeLinkNeighborLoader(data, num_neighbors=[4, 4], batch_size=16)
        batch = next(iter(loader))  # 16 edges of data.edge_index, 16 negatives
        assert batch["edge_label"].shape == (32,)
        ```
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        data = args[0] if args else kwargs.get("data")
        if cls is FixedSizeLinkNeighborLoader and _is_hetero(data) and HETERO_LINK_LOADER:
            # one entry point, as PyG's LinkNeighborLoader: HeteroData goes to the hetero
            # loader (registered by its module, which imports this one)
            return HETERO_LINK_LOADER[0](*args, **kwargs)
        return super().__new__(cls)

    #: RandomLinkSplit leaves edge_label_index / edge_label on the graph: this loader's
    #: own inputs, left out of the batches without the excluded-key warning
    quiet_keys = LINK_KEYS

    def __init__(self, data: Any, num_neighbors: Sequence[int],
                 edge_label_index: Optional[Tensor] = None, edge_label: Optional[Tensor] = None,
                 *, neg_sampling: Any = "binary", neg_sampling_ratio: Optional[float] = None,
                 batch_size: int = 1, shuffle: bool = False,
                 budget: Union[Budget, dict, str, None] = None, seed: int = 0,
                 replace: bool = False, disjoint: bool = False, directed: bool = True,
                 time_attr: Optional[str] = None, edge_label_time: Optional[Tensor] = None,
                 temporal_strategy: str = "uniform", subgraph_type: Optional[str] = None,
                 weight_attr: Optional[str] = None, oversize: str = "trim",
                 success_ratio: float = 0.99, fit_batches: int = 32, round_to: int = 1,
                 micro_batches: int = 1, rank: Optional[int] = None,
                 world_size: Optional[int] = None,
                 pad_id: int = -1, num_workers: int = 0, sampler_threads: Optional[int] = 1,
                 sampler: str = "ours", prefetch: int = 0):
        neg = neg_spec(neg_sampling, neg_sampling_ratio)
        self.temporal = check_time_args(type(self).__name__, time_attr, edge_label_time,
                                        temporal_strategy, sampler)
        if self.temporal:
            disjoint = True  # PyG: temporal sampling is disjoint (one tree per endpoint)
        self._setup(data, num_neighbors, batch_size, SamplingSettings.of(locals()))
        for k in LINK_KEYS:  # RandomLinkSplit leaves them on the graph: never gathered
            if k in self.node_attrs or k in self.edge_attrs or k in self.excluded_keys:
                self.node_attrs.pop(k, None)
                self.edge_attrs.pop(k, None)
                self.excluded_keys[k] = ("a supervision key of the link batches: pass it as "
                                         "edge_label_index= / edge_label= / edge_label_time=")
        self.edge_label_index = _label_index(data, edge_label_index, self.num_nodes)
        self._setup_supervision(neg, edge_label, edge_label_time, time_attr, temporal_strategy)
        L = self.edge_label_index.size(1)
        # the loader's "seeds" are the columns of edge_label_index: chunks, shuffling and
        # rank sharding come from FixedSizeNeighborLoader unchanged
        self.seeds = torch.arange(L)
        self.stats = self._new_stats(0)
        self._init_slots(batch_size)
        self.budget = self._resolve_budget(budget, success_ratio, fit_batches, round_to,
                                           self.max_seeds,
                                           f"the {self.max_seeds} endpoints a batch can have")
        #: the fixed supervision slot count (L binary, B triplet), apart from N, E, G
        self.slots = self._slot_count(self.budget)

    def _fit_budget(self, success_ratio: float, fit_batches: int, round_to: int) -> Budget:
        return super()._fit_budget(success_ratio, fit_batches, round_to,
                                   per_batch=self.max_seeds, avoid=(self.slots_needed,))

    def _fit_sample(self, chunk: int) -> Sample:
        # stream 2 (+ its own negatives): not the training samples
        return self._sample_chunk(0, chunk, stream=2)[0]

    def _rows(self, sup: Dict[str, Tensor]) -> LinkRows:
        return link_rows(sup, self.neg_sampling, int(self.neg_sampling_ratio or 0),
                         self.disjoint, two_types=False)

    def _sample_links(self, rows: LinkRows, epoch: int, chunk: int, stream: int = 0) -> Sample:
        """The subgraph around the seed rows (temporal: no neighbour later than its row's
        seed time)."""
        return self.sample(rows.groups[0], epoch, chunk, stream, seed_time=rows.times[0])

    def _sample_chunk(self, epoch: int, chunk: int, stream: int = 0):
        """``(sample, supervision)`` of a chunk: the subgraph around the endpoints."""
        sup = self.supervision(epoch, chunk, stream)
        return self._sample_links(self._rows(sup), epoch, chunk, stream), sup

    def _batch_now(self, epoch: int, chunk: int) -> Tuple[Dict[str, Tensor], int, int]:
        sup = self.supervision(epoch, chunk)
        rows = self._rows(sup)
        s = self._sample_links(rows, epoch, chunk)
        b = int(sup[INPUT_ID].numel())
        if self.disjoint and b:  # PyG's batch: the row's tree modulo the positives
            s.seed_of = s.seed_of % b
        flat, cut_n, cut_e = self._fit_and_pad(  # seeds (first rows) are never cut
            s, int(rows.groups[0].numel()),
            f"epoch {epoch}, chunk {chunk} (supervision columns {sup[INPUT_ID][:4].tolist()}...)")
        flat.update(self._pad_links(sup, rows))
        return {k: flat[k] for k in sorted(flat)}, cut_n, cut_e


def _is_hetero(data: Any) -> bool:
    return (hasattr(data, "node_types") and hasattr(data, "edge_types")) or \
        is_hetero_store_pair(data)
