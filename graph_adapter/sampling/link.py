"""``FixedSizeLinkNeighborLoader``: link-level training on one large graph, at one shape.

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
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from ..batching import Budget
from ..format import (DST_NEG_INDEX, DST_POS_INDEX, EDGE_LABEL, EDGE_LABEL_INDEX, INPUT_ID,
                      LINK_KEYS, LINK_MASK, SRC_INDEX)
from .csr import Sample
from ..contract import padding_node
from .settings import SamplingSettings
from .neighbor import FixedSizeNeighborLoader, NeighborLoaderStats, chunk_seed

__all__ = ["FixedSizeLinkNeighborLoader", "LinkLoaderStats", "LinkLabelError",
           "NEG_SAMPLING", "EDGE_LABEL_INDEX", "EDGE_LABEL", "INPUT_ID", "LINK_MASK",
           "SRC_INDEX", "DST_POS_INDEX", "DST_NEG_INDEX", "sample_negatives", "link_seeds"]

NEG_SAMPLING = ("binary", "triplet", None)
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


def sample_negatives(num_pos: int, num_nodes: int, mode: str, ratio: float,
                     generator: torch.Generator) -> Tensor:
    """PyG's ``NegativeSampling`` draws, uniform over the nodes, no rejection.

    binary: ``[2, ceil(num_pos * ratio)]`` (source row 0, destination row 1);
    triplet: ``[num_pos, ratio]`` destinations (``ratio`` an int).
    """
    if mode == "binary":
        k = math.ceil(num_pos * ratio)
        return torch.randint(0, num_nodes, (2, k), generator=generator)
    return torch.randint(0, num_nodes, (num_pos, int(ratio)), generator=generator)


def link_seeds(endpoints: Tensor) -> Tuple[Tensor, Tensor]:
    """``(seeds, local)``: the distinct global ids of ``endpoints`` (sorted, as PyG's
    ``unique``) and each endpoint's row among them (same shape as ``endpoints``)."""
    seeds, inv = torch.unique(endpoints.reshape(-1), return_inverse=True)
    return seeds, inv.view(endpoints.shape)


def _label_index(data: Any, edge_label_index: Optional[Tensor], num_nodes: int) -> Tensor:
    if isinstance(edge_label_index, tuple):
        raise LinkLabelError("edge_label_index is a tuple ((edge_type, index)): that is for "
                             "HeteroData; this graph is homogeneous: pass the [2, L] index")
    eli = data.edge_index if edge_label_index is None else torch.as_tensor(edge_label_index)
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


def _labels(edge_label: Any, num_links: int, neg: Optional[str]) -> Optional[Tensor]:
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


class FixedSizeLinkNeighborLoader(FixedSizeNeighborLoader):
    """Yields padded flat dicts of one signature for link prediction (see the module doc).

    Args:
        data: a homogeneous ``torch_geometric.data.Data`` (one large graph).
        num_neighbors: fanout per hop from the endpoints (``-1`` = all).
        edge_label_index: ``[2, L]`` supervision edges (global ids); default
            ``data.edge_index``.
        edge_label: ``[L, ...]`` labels of those edges (binary / ``None`` only).
        neg_sampling: ``"binary"``, ``"triplet"`` or ``None`` (no negatives).
        neg_sampling_ratio: negatives per positive (an int for triplet).
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
            rows. Not with ``directed=False``.

    Yields:
        One flat dict a batch, all of ``loader.budget``'s shapes: the sampled
        subgraph (as :class:`FixedSizeNeighborLoader`'s) plus the batch's supervision
        edges in its own node ids, ``edge_label_index`` ``[2, L]`` and
        ``edge_label`` (binary; triplet: ``src_index`` / ``dst_pos_index`` /
        ``dst_neg_index``), ``link_mask`` (the real ones) and ``input_id``.

    Raises:
        LinkLabelError: a bad ``edge_label_index`` / ``edge_label`` (shape, dtype, an
            id out of range) or ``neg_sampling`` / ``neg_sampling_ratio``.
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

    def __init__(self, data: Any, num_neighbors: Sequence[int],
                 edge_label_index: Optional[Tensor] = None, edge_label: Optional[Tensor] = None,
                 *, neg_sampling: Optional[str] = "binary", neg_sampling_ratio: float = 1.0,
                 batch_size: int = 1, shuffle: bool = False,
                 budget: Union[Budget, dict, str, None] = None, seed: int = 0,
                 replace: bool = False, disjoint: bool = False, directed: bool = True,
                 oversize: str = "trim",
                 success_ratio: float = 0.99, fit_batches: int = 32, round_to: int = 1,
                 micro_batches: int = 1, rank: Optional[int] = None,
                 world_size: Optional[int] = None,
                 pad_id: int = -1, num_workers: int = 0, sampler_threads: Optional[int] = 1,
                 sampler: str = "ours", prefetch: int = 0):
        if neg_sampling not in NEG_SAMPLING:
            raise LinkLabelError(f"neg_sampling={neg_sampling!r}; choose one of {NEG_SAMPLING}")
        if neg_sampling is not None:
            r = neg_sampling_ratio
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not r > 0:
                raise LinkLabelError(f"neg_sampling_ratio={r!r}; give a positive number "
                                     f"(negatives per positive)")
            if neg_sampling == "triplet" and r != int(r):
                raise LinkLabelError(f"neg_sampling_ratio={r} with neg_sampling='triplet': give "
                                     f"an int (negative destinations per positive), as PyG")
        self._setup(data, num_neighbors, batch_size, SamplingSettings.of(locals()))
        for k in LINK_KEYS:  # RandomLinkSplit leaves them on the graph: never gathered
            if k in self.node_attrs or k in self.edge_attrs or k in self.excluded_keys:
                self.node_attrs.pop(k, None)
                self.edge_attrs.pop(k, None)
                self.excluded_keys[k] = ("a supervision key of the link batches: pass it as "
                                         "edge_label_index= / edge_label=")
        self.neg_sampling = neg_sampling
        self.neg_sampling_ratio = neg_sampling_ratio if neg_sampling is not None else 0
        self.edge_label_index = _label_index(data, edge_label_index, self.num_nodes)
        self.edge_label = _labels(edge_label, self.edge_label_index.size(1), neg_sampling)
        # the loader's "seeds" are the columns of edge_label_index: chunks, shuffling and
        # rank sharding come from FixedSizeNeighborLoader unchanged
        self.seeds = torch.arange(self.edge_label_index.size(1))
        self.stats = self._new_stats(0)
        B = batch_size
        if neg_sampling == "triplet":
            per_link = 2 + int(neg_sampling_ratio)
            self.slots_needed = B
        else:
            neg = math.ceil(B * neg_sampling_ratio) if neg_sampling else 0
            per_link = 2
            self.slots_needed = B + neg
        endpoints = (B * per_link if neg_sampling == "triplet" else 2 * self.slots_needed)
        #: the most endpoint rows (seeds) a batch can have: they always fit (disjoint: one
        #: row per endpoint, repeats included; else the distinct nodes)
        self.max_seeds = endpoints if disjoint else min(endpoints, self.num_nodes)
        self.budget = self._resolve_budget(budget, success_ratio, fit_batches, round_to,
                                           self.max_seeds,
                                           f"the {self.max_seeds} endpoints a batch can have")
        #: the fixed supervision slot count (L binary, B triplet), apart from N, E, G
        self.slots = self._slot_count(self.budget)

    # -- slots and budget ----------------------------------------------------
    def _slot_count(self, budget: Budget) -> int:
        taken = (int(budget.nodes), int(budget.edges), int(budget.graphs))
        s = self.slots_needed
        while s in taken:
            s += 1  # a padding slot more: FORMAT's no-tie rule (a link key is no level)
        return s

    def _new_stats(self, epoch: int) -> LinkLoaderStats:
        return LinkLoaderStats(epoch=epoch, rank=self.rank, world_size=self.world_size,
                               total_seeds=0, total_links=int(self.seeds.numel()),
                               excluded_keys=dict(self.excluded_keys))

    def _count(self, st: NeighborLoaderStats, flat: Dict[str, Tensor]) -> None:
        real = flat[LINK_MASK]
        pos = flat[INPUT_ID] >= 0
        st.links += int(pos.sum())
        if self.neg_sampling == "triplet":
            k = int(self.neg_sampling_ratio)
            st.negatives += int(real.sum()) * k
        else:
            st.negatives += int((real & ~pos).sum())

    def _fit_budget(self, success_ratio: float, fit_batches: int, round_to: int) -> Budget:
        return super()._fit_budget(success_ratio, fit_batches, round_to,
                                   per_batch=self.max_seeds, avoid=(self.slots_needed,))

    def _fit_sample(self, chunk: int) -> Sample:
        # stream 2 (+ its own negatives): not the training samples
        return self._sample_chunk(0, chunk, stream=2)[0]

    # -- sampling ------------------------------------------------------------
    def supervision(self, epoch: int, chunk: int, stream: int = 0) -> Dict[str, Tensor]:
        """The chunk's supervision edges in global ids, unpadded (PyG's order).

        binary / ``None``: ``{"edge_label_index": [2, b + nb], "input_id": [b],
        "edge_label": [b + nb]`` (when labels exist)``}``; triplet:
        ``{"src": [b], "dst_pos": [b], "dst_neg": [b, k], "input_id": [b]}``.
        """
        cols = self.chunk_seeds(epoch, chunk)
        pos = self.edge_label_index[:, cols]
        b = int(cols.numel())
        g = torch.Generator().manual_seed(chunk_seed(self.seed, epoch, chunk, _NEG_STREAM + stream))
        out: Dict[str, Tensor] = {INPUT_ID: cols}
        if self.neg_sampling == "triplet":
            out.update(src=pos[0], dst_pos=pos[1],
                       dst_neg=sample_negatives(b, self.num_nodes, "triplet",
                                                self.neg_sampling_ratio, g))
            return out
        lab = None if self.edge_label is None else self.edge_label[cols]
        if self.neg_sampling == "binary":
            neg = sample_negatives(b, self.num_nodes, "binary", self.neg_sampling_ratio, g)
            pos = torch.cat([pos, neg], 1)
            if lab is None:
                lab = torch.ones(b)
            lab = torch.cat([lab, lab.new_zeros((neg.size(1),) + tuple(lab.shape[1:]))])
        out[EDGE_LABEL_INDEX] = pos
        if lab is not None:
            out[EDGE_LABEL] = lab
        return out

    def _endpoints(self, sup: Dict[str, Tensor]) -> Tensor:
        if self.neg_sampling == "triplet":
            return torch.cat([sup["src"], sup["dst_pos"], sup["dst_neg"].reshape(-1)])
        return sup[EDGE_LABEL_INDEX].reshape(-1)

    def _seeds(self, sup: Dict[str, Tensor]) -> Tuple[Tensor, Tensor]:
        """``(seeds, local)``: the distinct endpoints (sorted) and each endpoint's row; with
        ``disjoint=True`` every endpoint is a seed row of its own, in endpoint order."""
        ends = self._endpoints(sup)
        if not self.disjoint:
            return link_seeds(ends)
        return ends, torch.arange(ends.numel())

    def _link_of_tree(self, sup: Dict[str, Tensor]) -> Tensor:
        """``disjoint=True``: the supervision slot each endpoint's tree serves (PyG puts a
        link's endpoints, and a triplet's negatives, in one subgraph)."""
        b = int(sup[INPUT_ID].numel())
        if self.neg_sampling == "triplet":
            k = int(self.neg_sampling_ratio)
            return torch.cat([torch.arange(b), torch.arange(b),
                              torch.arange(b).repeat_interleave(k)])
        m = int(sup[EDGE_LABEL_INDEX].size(1))
        return torch.arange(m).repeat(2)

    def _sample_chunk(self, epoch: int, chunk: int, stream: int = 0):
        """``(sample, supervision)`` of a chunk: the subgraph around the endpoints."""
        sup = self.supervision(epoch, chunk, stream)
        seeds, _ = self._seeds(sup)
        return self.sample(seeds, epoch, chunk, stream), sup

    def _batch_now(self, epoch: int, chunk: int) -> Tuple[Dict[str, Tensor], int, int]:
        sup = self.supervision(epoch, chunk)
        seeds, local = self._seeds(sup)
        s = self.sample(seeds, epoch, chunk)
        if self.disjoint:  # seed_of: the supervision slot of the row's tree
            s.seed_of = self._link_of_tree(sup)[s.seed_of]
        flat, cut_n, cut_e = self._fit_and_pad(  # seeds (first rows) are never cut
            s, int(seeds.numel()),
            f"epoch {epoch}, chunk {chunk} (supervision columns {sup[INPUT_ID][:4].tolist()}...)")
        flat.update(self._pad_links(sup, local))
        return {k: flat[k] for k in sorted(flat)}, cut_n, cut_e

    def _pad_links(self, sup: Dict[str, Tensor], local: Tensor) -> Dict[str, Tensor]:
        """The supervision keys, ``self.slots`` slots: real ones first, padding at ``N - 1``."""
        S, P = self.slots, padding_node(int(self.budget.nodes))
        b = int(sup[INPUT_ID].numel())
        out: Dict[str, Tensor] = {}
        iid = torch.full((S,), self.pad_id, dtype=torch.long)
        iid[:b] = sup[INPUT_ID]
        out[INPUT_ID] = iid
        mask = torch.zeros(S, dtype=torch.bool)
        if self.neg_sampling == "triplet":
            k = int(self.neg_sampling_ratio)
            src, dpos, dneg = local[:b], local[b:2 * b], local[2 * b:].view(b, k)
            for key, v in ((SRC_INDEX, src), (DST_POS_INDEX, dpos)):
                t = torch.full((S,), P, dtype=torch.long)
                t[:b] = v
                out[key] = t
            t = torch.full((S, k), P, dtype=torch.long)
            t[:b] = dneg
            out[DST_NEG_INDEX] = t.squeeze(-1)  # PyG: [B] for one negative, else [B, k]
            mask[:b] = True
        else:
            m = int(sup[EDGE_LABEL_INDEX].size(1))
            eli = torch.full((2, S), P, dtype=torch.long)
            eli[:, :m] = local.view(2, m)
            out[EDGE_LABEL_INDEX] = eli
            if EDGE_LABEL in sup:
                lab = sup[EDGE_LABEL]
                t = lab.new_zeros((S,) + tuple(lab.shape[1:]))
                t[:m] = lab
                out[EDGE_LABEL] = t
            mask[:m] = True
        out[LINK_MASK] = mask
        return out

    def links_in(self, flat: Dict[str, Tensor]) -> int:
        """The number of real supervision slots of a batch (its first slots)."""
        return int(flat[LINK_MASK].sum())
