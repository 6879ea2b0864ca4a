"""FixedSizeLoader: packed, padded batches whose shapes never change.

Wraps :class:`torch.utils.data.DataLoader`: a batch sampler yields the packed
batches of an epoch (lists of dataset indices, planned up front so that
``len(loader)`` is known), and the collate function is the padded collate of
:mod:`graph_adapter.batching.collate`.  ``num_workers``, ``pin_memory`` and the other
DataLoader arguments pass through.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, asdict
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from ._scan import TRIM_FROM, release_freed_memory
from ._view import as_graphs
from .budget import RESERVED_NODES, Budget
from .ranks import Ranks, Sharded, fingerprint
from .collate import Collator
from ..format import stack_micro_batches, to_device
from ..format import Field
from .packing import (PACKERS, FlatPlan, plan_epoch_flat, find_oversize, oversize_reasons,
                      plan_efficiency)

__all__ = ["FixedSizeLoader", "LoaderStats"]


@dataclass
class LoaderStats:
    """Padding efficiency of one epoch (of this rank).

    Efficiencies are real slots / budget slots over every batch the loader
    yields (fully padded fill batches included; budget slots include the
    reserved padding nodes and graph slot).
    """

    epoch: int
    batches: int  # fixed-size batches of this rank (micro-batches counted singly)
    items: int  # yielded items (= len(loader); batches / micro_batches)
    padded_batches: int  # fully padded fill batches (distributed / micro-batch tail)
    graphs: int  # real graphs of this rank this epoch
    total_graphs: int  # graphs of the dataset
    skipped_graphs: int
    skipped_indices: List[int]
    node_efficiency: float
    edge_efficiency: float
    graph_efficiency: float
    mean_graphs_per_batch: float
    excluded_keys: Dict[str, str]
    rank: int = 0
    world_size: int = 1

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)


class _Fetch(Dataset):
    """DataLoader dataset: maps one micro-batch (a list of dataset indices)
    to what the collate function needs."""

    def __init__(self, dataset, columnar: bool):
        self.dataset = None if columnar else dataset
        self.n = len(dataset)

    def __len__(self):
        return self.n

    def __getitem__(self, micro: List[int]):
        """Columnar: the indices; else ``(indices, graphs)`` (the indices name
        the graphs in error messages)."""
        if self.dataset is None or len(micro) == 0:
            return list(micro)
        return list(micro), [self.dataset[i] for i in micro]


class _Collate:
    def __init__(self, collator: Collator, micro_batches: int):
        self.collator = collator
        self.micro_batches = micro_batches

    def _one(self, group):
        if isinstance(group, tuple):  # (dataset indices, graphs)
            return self.collator.collate(group[1], ids=group[0])
        return self.collator.collate_group(group)

    def __call__(self, groups):
        if self.micro_batches == 1:
            return self._one(groups[0])
        return stack_micro_batches([self._one(g) for g in groups])


class _PlanSampler(Sampler):
    """Yields the items of the epoch being iterated: lists of ``F`` micro-batches,
    each a list of dataset indices (made one item at a time from the loader's
    arrays, so no epoch's worth of Python ints is ever resident)."""

    def __init__(self, loader: "FixedSizeLoader"):
        self.loader = loader

    def __len__(self):
        return len(self.loader.epoch_items())

    def __iter__(self):
        plan, items = self.loader.plan_items(self.loader.epoch)
        return _item_lists(plan, items)


def _item_lists(plan: FlatPlan, items: np.ndarray) -> Iterator[List[List[int]]]:
    for row in items:
        yield [plan.batch(j) if j >= 0 else [] for j in row.tolist()]


class FixedSizeLoader(Sharded):
    """Yields padded flat dicts of fixed shapes, every graph exactly once per epoch.

    Args:
        dataset: a PyG dataset or a list of ``Data``.
        budget: the :class:`~graph_adapter.batching.budget.Budget` (or its dict/JSON).
        shuffle: shuffle the graphs (greedy packer) or the batches (histogram
            packer) every epoch.
        seed: base seed; the plan of epoch ``e`` is a function of
            ``(seed, e)`` only, so every rank computes the same one.
        micro_batches: ``F`` stacks F fixed-size batches on a new leading dim
            (poptorch splits dim 0 by deviceIterations x replicationFactor x
            gradientAccumulation); every tensor gets it.  See ``tail``.
        tail: how an epoch reaches a multiple of ``world_size x F`` batches.
            ``"split"`` (default): split the fullest batches in two, so no
            micro-batch lacks a real graph; it adds up to ``W x F - 1``
            batches an epoch, so the mean graph count falls below what
            ``Budget.fit(graphs_per_batch=k)`` sized for (1600 graphs, k=16,
            W=4, F=3: 100 batches -> 108, 14.8 graphs a micro-batch).
            ``"pad"``: split only to a multiple of ``world_size`` (every rank
            the same number of real batches, as ``DistributedSampler`` pads
            to equal shares) and complete each rank's last item with fully
            padded micro-batches (``stats.padded_batches``): k graphs a
            micro-batch, and a short last step, as ``DataLoader`` with
            gradient accumulation has.
        oversize: ``"error"`` (default) raises naming the dataset index and
            sizes of each graph that fits no batch; ``"skip"`` leaves them
            out, warns and reports them in ``stats``.
        packer: ``"greedy"`` (streaming, shuffled order) or ``"histogram"``
            (offline, highest fill); see :mod:`graph_adapter.batching.packing`.
        open_batches: batches the greedy packer keeps open.
        index_dtype: ``torch.int64`` or ``torch.int32`` for index tensors
            (``edge_index``, ``batch``, ``ptr``) on the host.
        columnar: build a columnar copy of the dataset once (fastest
            collate); ``False`` collates ``Data`` objects fetched per batch
            (in the workers with ``num_workers > 0``).
        rank: this process's rank for distributed sharding; default
            ``None``: read from ``torch.distributed`` each time an epoch is
            planned (``len``, ``iter``), so a loader built before the process
            group (as under Lightning) shards once it exists; 0 without one.
            Every rank gets the same number of batches (fully padded fill
            batches where needed), the same shapes, and disjoint graphs.  All
            ranks must use the same dataset, budget, seed and packer: the
            first epoch of a group checks it (:mod:`~graph_adapter.batching.ranks`).
        world_size: the number of ranks; default ``None``: from
            ``torch.distributed`` as ``rank``, 1 without a group.  Given
            values that disagree with a running group warn once.
        transform: a function from a dataset item to a ``Data`` /
            ``HeteroData`` (graphium's items are dicts: ``lambda item:
            item["features"]``); applied on the host, never changing the
            dataset.
        float_dtype: cast every floating tensor of every graph to this dtype
            on the host (e.g. ``torch.float32`` for float16 features); default:
            keep the dataset's dtypes.
        exclude: attribute keys to leave out of the batches on purpose
            (non-tensor attributes such as ``smiles`` are left out anyway;
            naming them here silences the warning).
        validate: check the index keys of every graph (``edge_index``: integer,
            ``[2, E]``, ``0 <= index < num_nodes`` of its graph) when the
            dataset is scanned; ``False`` skips the range check.
        layout: ``"ell"`` adds the ELL neighbour tables ``in_slots`` /
            ``out_slots`` to every batch (widths fitted from the dataset's
            largest in-/out-degree, or ``layout_widths=(Din, Dout)``); inside
            ``ipu_wrap`` PyG's sum/mean message passing then runs as gathers
            both ways (faster compiled training; ``docs/benchmarks.md``).
            ``"hyb"``: tables as wide as the 99.5th percentile of the
            degrees plus short spill lists (``in_spill`` / ``out_spill``).
            Homogeneous datasets only.
        layout_spills: ``"hyb"``, with ``layout_widths``: the spill
            capacities instead of fitting them. Pass a loader's fitted
            ``collator.layout_widths`` / ``collator.layout_spills`` to another
            (train and test loaders of one compiled model: one shape).
        device: move every yielded batch there (``non_blocking`` copies;
            with ``pin_memory=True`` they overlap with GPU work:
            :func:`graph_adapter.format.keys.to_device`); default: leave batches
            on the host.
        **dataloader_kwargs: passed to ``torch.utils.data.DataLoader``
            (``num_workers``, ``pin_memory``, ``persistent_workers``,
            ``prefetch_factor``, ...).

    ``len(loader)`` is the number of items the next iteration yields (planned
    up front from the per-graph sizes), with or without :meth:`set_epoch`.
    Call :meth:`set_epoch` to pick the epoch, as with ``DistributedSampler``;
    without it each new iteration advances the epoch by one.

    Fill batches: every rank must yield the same number of items of ``F``
    micro-batches, so an epoch needs a multiple of ``world_size x F``
    batches.  The loader reaches it by splitting the fullest batches of the
    plan in two (a part of a batch that fits, fits), so no micro-batch is
    without a real graph unless the epoch has too few graphs to spread (fewer
    than ``world_size x F`` per item); only then is the tail filled with
    fully padded batches (``stats.padded_batches``), on which a masked
    BatchNorm updates nothing.  ``tail="pad"`` fills with padded batches
    instead of splitting (k graphs a micro-batch; see ``tail``).

    Yields:
        One flat dict ``{key: tensor}`` a batch (``[F, ...]`` with ``micro_batches=F``
        > 1), every one of the budget's shapes: ``docs/dev/FORMAT.md`` has the keys.

    Raises:
        TypeError: a ``budget`` that is not a ``Budget`` (or its dict / JSON), or a
            ``DataLoader`` argument the loader sets itself.
        ValueError: a bad ``oversize`` / ``tail`` / ``packer`` / ``micro_batches``, or a
            graph larger than the budget with ``oversize="error"`` (named).

    Example:
        ```python
        from torch_geometric.datasets import FakeDataset

        from graph_adapter import Budget, FixedSizeLoader

        graphs = FakeDataset(num_graphs=20, avg_num_nodes=10)
        loader = FixedSizeLoader(graphs, Budget.tight(graphs, 4), shuffle=True)
        for batch in loader:  # flat dicts of tensors, all of the budget's shapes
            assert batch["x"].shape[0] == loader.budget.nodes
        ```
    """

    # Over 80 lines for its docstring: the user-facing reference of every argument.
    def __init__(self, dataset: Sequence[Any], budget: Union[Budget, dict, str], *, shuffle: bool = False,
                 seed: int = 0, micro_batches: int = 1, oversize: str = "error",
                 packer: str = "greedy", open_batches: int = 8,
                 index_dtype: torch.dtype = torch.int64, columnar: bool = True,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 tail: str = "split",
                 transform: Optional[Callable[[Any], Any]] = None,
                 float_dtype: Optional[torch.dtype] = None, exclude: Sequence[str] = (),
                 validate: bool = True, layout: Optional[str] = None,
                 layout_widths: Optional[Tuple[int, int]] = None,
                 layout_spills: Optional[Tuple[int, int]] = None,
                 device: Optional[Union[str, torch.device]] = None, **dataloader_kwargs: Any):
        if isinstance(budget, str):
            budget = Budget.from_json(budget)
        elif isinstance(budget, dict):
            budget = Budget.from_dict(budget)
        if not isinstance(budget, Budget):
            raise TypeError(f"budget must be a Budget, got {type(budget).__name__}")
        if oversize not in ("error", "skip"):
            raise ValueError(f"oversize must be 'error' or 'skip', got {oversize!r}")
        if tail not in ("split", "pad"):
            raise ValueError(f"tail must be 'split' or 'pad', got {tail!r}")
        if packer not in PACKERS:
            raise ValueError(f"packer must be one of {PACKERS}, got {packer!r}")
        if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) \
                or micro_batches < 1:
            raise ValueError(f"micro_batches must be a positive int, got {micro_batches!r}")
        for k in ("batch_size", "shuffle", "sampler", "batch_sampler", "collate_fn",
                  "drop_last"):
            if k in dataloader_kwargs:
                raise TypeError(f"FixedSizeLoader sets {k!r} itself; it cannot be passed")
        follow_batch = dataloader_kwargs.pop("follow_batch", None)  # PyG's DataLoader's
        ranks = Ranks(rank, world_size, "FixedSizeLoader")
        dataset = as_graphs(dataset, transform, float_dtype)
        self.dataset = dataset
        self.budget = budget
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.micro_batches = micro_batches
        self.tail = tail
        self.oversize = oversize
        self.packer = packer
        self.open_batches = int(open_batches)
        self._ranks = ranks
        self.collator = Collator(dataset, budget, columnar=columnar, index_dtype=index_dtype,
                                 exclude=exclude, validate=validate, layout=layout,
                                 layout_widths=layout_widths, layout_spills=layout_spills)
        self.sizes = self.collator.sizes
        if follow_batch is not None:
            _check_follow_batch(follow_batch, self.collator.node_sets)
        bad = find_oversize(self.sizes, budget)
        self.skipped_indices: List[int] = [int(i) for i in bad]
        if len(bad):
            msg = self._oversize_message(bad)
            if oversize == "error":
                raise ValueError(msg + " Pass oversize='skip' to leave them out, or use a "
                                       "larger budget (Budget.tight / Budget.fit).")
            warnings.warn(msg + " They are skipped (oversize='skip'); see loader.stats.",
                          stacklevel=2)
        # the graphs to plan (None: all of them; no index array to keep then)
        self._keep: Optional[np.ndarray] = None
        if len(bad):
            keep = np.ones(self.sizes.num_graphs, dtype=bool)
            keep[bad] = False
            self._keep = np.nonzero(keep)[0]
        self._epoch = 0
        self._epoch_set = False
        self._started = False
        # plans are kept as arrays (packing.FlatPlan), items as an int array of
        # batch ids [items, F] (-1: a fully padded fill batch): 8 bytes a graph
        self._cache: Optional[Tuple[Tuple[int, int, int], FlatPlan, np.ndarray]] = None
        self._raw: Optional[Tuple[int, FlatPlan]] = None
        self.device = None if device is None else torch.device(device)
        self._dl = DataLoader(_Fetch(dataset, self.collator.columnar),
                              batch_sampler=_PlanSampler(self),
                              collate_fn=_Collate(self.collator, micro_batches),
                              **dataloader_kwargs)

    # ------------------------------------------------------------ messages
    def _oversize_message(self, bad) -> str:
        """Names the first oversize graphs, their sizes per node/edge type and the budget."""
        b = self.budget
        why = oversize_reasons(self.sizes, b)
        parts = [f"dataset index {int(i)} has {self._describe_sizes(i)}"
                 + ("" if why[i] != "empty padding slot" else
                    f" (alone in a batch it would leave a padding graph slot without a "
                    f"padding node: n - 1 > nodes - graphs = {b.nodes - b.graphs}; "
                    f"docs/dev/FORMAT.md promises no empty padding graph slot; give "
                    f"nodes >= graphs + n - 1 or fewer graph slots)")
                 for i in bad[:5]]
        more = f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""
        if b.is_hetero:
            holds = ("at most " + ", ".join(f"{n} {t} nodes" for t, n in
                                            b.max_real_nodes.items())
                     + f" ({RESERVED_NODES} padding nodes per type reserved) and "
                     + ", ".join(f"{e} {t} edges" for t, e in b.edges.items()))
        else:
            holds = (f"at most {b.max_real_nodes} real nodes ({RESERVED_NODES} padding nodes "
                     f"reserved) and "
                     f"{b.edges} edges")
        return (f"{len(bad)} graph(s) do not fit the budget {b!r}, which holds {holds}: "
                + "; ".join(parts) + more + ".")

    def _describe_sizes(self, i: int) -> str:
        row = [int(x) for x in self.sizes.matrix[i]]
        if self.sizes.node_types is None:
            return f"{row[0]} nodes and {row[1]} edges"
        k = self.sizes.num_node_dims
        nodes = ", ".join(f"{t}: {n}" for t, n in zip(self.sizes.node_types, row[:k]))
        edges = ", ".join(f"{t}: {e}" for t, e in zip(self.sizes.edge_types, row[k:]))
        return f"nodes {{{nodes}}} and edges {{{edges}}}"

    # ------------------------------------------------------------ planning
    def _rank_facts(self) -> Dict[str, int]:
        """What every rank's loader must agree on (exchanged at the first epoch)."""
        b = self.budget
        facts = {"graphs in the dataset": self.sizes.num_graphs,
                 "skipped graphs": len(self.skipped_indices),
                 "seed": self.seed, "shuffle": int(self.shuffle),
                 "micro_batches": self.micro_batches}
        totals = self.sizes.matrix.sum(axis=0)
        for i, t in enumerate(totals.tolist()):
            facts[f"size total {i} (nodes, then edges)"] = int(t)
        facts["budget fingerprint"] = fingerprint(b.to_json())
        return facts

    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        self._epoch = int(epoch)
        self._epoch_set = True

    def _next_epoch(self) -> int:
        """The epoch the next iteration will yield (``__iter__`` advances it
        by one after a first iteration unless :meth:`set_epoch` was called)."""
        return self._epoch + 1 if self._started and not self._epoch_set else self._epoch

    def plan(self, epoch: Optional[int] = None) -> List[List[int]]:
        """The global packing plan of an epoch (all ranks; default: the epoch
        the next iteration yields): a JSON-serialisable list of batches of
        dataset indices, rank ``r`` taking batches ``r, r + world_size, ...``."""
        return self.plan_items(self._next_epoch() if epoch is None else int(epoch))[0].to_lists()

    def _packed(self, e: int) -> FlatPlan:
        """The packer's plan of epoch ``e``, before balancing."""
        if self._raw is not None and self._raw[0] == e:
            return self._raw[1]
        raw = plan_epoch_flat(self.sizes, self.budget, packer=self.packer,
                               shuffle=self.shuffle, seed=self.seed, epoch=e,
                               indices=self._keep, open_batches=self.open_batches)
        self._raw = (e, raw)
        return raw

    def plan_items(self, e: int) -> Tuple[FlatPlan, np.ndarray]:
        """The balanced plan of epoch ``e`` and this rank's items (cached): the
        items are batch ids of the plan, ``[items, F]``, ``-1`` for a fully
        padded fill batch.  Rank ``r`` takes batches ``r, r + W, ...``, fills
        up to every rank's count, then to a multiple of ``F``."""
        rank, W = self._ranks.resolve()
        if self._cache is not None and self._cache[0] == (e, rank, W):
            return self._cache[1], self._cache[2]
        F = self.micro_batches
        plan = _split_to_multiple(self._packed(e), W * F if self.tail == "split" else W)
        nb = plan.num_batches
        per_rank = -(-nb // W)
        mine = np.arange(rank, nb, W, dtype=np.int64)
        n_items = -(-per_rank // F)
        ids = np.full(n_items * F, -1, dtype=np.int64)
        ids[:mine.size] = mine
        items = ids.reshape(n_items, F)
        self._cache = ((e, rank, W), plan, items)
        if self.sizes.num_graphs >= TRIM_FROM:
            release_freed_memory()  # the packer's whole-dataset temporaries
        return plan, items

    def epoch_items(self) -> np.ndarray:
        """This rank's items of the current epoch (the one being iterated), as
        batch ids ``[items, F]`` (see :meth:`plan_items`)."""
        return self.plan_items(self._epoch)[1]

    def __len__(self) -> int:
        return int(self.plan_items(self._next_epoch())[1].shape[0])

    def __iter__(self) -> Iterator[Dict[str, torch.Tensor]]:
        if self._started and not self._epoch_set:
            self._epoch += 1
        self._started = True
        self._epoch_set = False
        self._ranks.check_same(self._rank_facts)
        if self.device is None:
            return iter(self._dl)
        return (to_device(b, self.device) for b in self._dl)

    # ---------------------------------------------------------------- info
    @property
    def keys(self) -> List[str]:
        return list(self.collator.keys)

    @property
    def schema(self) -> List[Field]:
        return list(self.collator.schema)

    @property
    def excluded_keys(self) -> Dict[str, str]:
        return dict(self.collator.excluded_keys)

    def shapes(self) -> Dict[str, Tuple[Tuple[int, ...], torch.dtype]]:
        """Shape and dtype of every key of every yielded item."""
        s = self.collator.shapes()
        if self.micro_batches > 1:
            s = {k: ((self.micro_batches,) + sh, dt) for k, (sh, dt) in s.items()}
        return s

    def empty_batch(self) -> Dict[str, torch.Tensor]:
        """A fully padded item (handy to compile or trace ahead of time), on ``device``."""
        if self.micro_batches > 1:
            item = self.collator.collate_micro([[]] * self.micro_batches)
        else:
            item = self.collator.empty()
        return item if self.device is None else to_device(item, self.device)

    @property
    def stats(self) -> LoaderStats:
        plan, items = self.plan_items(self._epoch)
        ids = items.reshape(-1)
        real = ids[ids >= 0]
        batches = int(ids.size)
        mine = np.zeros(plan.num_batches, dtype=bool)
        mine[real] = True
        counts = plan.counts()
        eff = plan_efficiency(FlatPlan(plan.flat[mine.repeat(counts)],
                                        np.concatenate([[0], np.cumsum(counts[mine])])),
                              self.sizes, self.budget, extra_batches=batches - real.size)
        return LoaderStats(
            epoch=self._epoch, batches=batches, items=int(items.shape[0]),
            padded_batches=batches - int(real.size), graphs=eff["graphs"],
            total_graphs=self.sizes.num_graphs, skipped_graphs=len(self.skipped_indices),
            skipped_indices=list(self.skipped_indices),
            node_efficiency=eff["node_efficiency"], edge_efficiency=eff["edge_efficiency"],
            graph_efficiency=eff["graph_efficiency"],
            mean_graphs_per_batch=eff["graphs"] / max(1, batches),
            excluded_keys=self.excluded_keys, rank=self.rank, world_size=self.world_size)

    def __repr__(self) -> str:
        b = self.budget
        return (f"FixedSizeLoader(graphs={self.sizes.num_graphs}, budget=Budget(nodes={b.nodes}, "
                f"edges={b.edges}, graphs={b.graphs}), packer={self.packer!r}, "
                f"micro_batches={self.micro_batches}, rank={self.rank}/{self.world_size})")


def _check_follow_batch(names: Any, sets: List[str]) -> None:
    """PyG's ``follow_batch``: what the padded batches already carry (``<set>_batch``
    and ``<set>_ptr`` of every node set of its own, PyG's ``PairData``), else named."""
    names = [names] if isinstance(names, str) else list(names)
    other = [n for n in names if n not in sets]
    if other:
        raise ValueError(
            f"FixedSizeLoader(follow_batch={names!r}): {other} are no node sets of their own "
            f"of these graphs ({sets or 'they have none'}). The padded batches carry "
            f"'<set>_batch' and '<set>_ptr' for every such set (PyG's PairData: x_s_batch, "
            f"x_s_ptr) without being asked, and 'batch' / 'ptr' for the store's own nodes; "
            f"pool with those, or drop follow_batch.")


def _split_to_multiple(plan: FlatPlan, unit: int) -> FlatPlan:
    """``plan`` with batches split in two until its length is a multiple of
    ``unit`` (ranks x micro-batches), so that no rank gets a fill batch without
    a real graph; stops early when every batch holds a single graph.

    The fullest batch (most graphs; the first on ties) is split into its two
    halves (the first holding ``len // 2``), in place, so the order of graphs
    is kept: only batch boundaries are added.  A pure function of the plan:
    every rank computes the same one.
    """
    need = (-plan.num_batches) % unit
    if not need:
        return plan
    bounds = plan.bounds
    for _ in range(need):
        counts = np.diff(bounds)
        if counts.size == 0:
            break
        j = int(np.argmax(counts))  # the first of the fullest
        if counts[j] < 2:
            break
        bounds = np.insert(bounds, j + 1, bounds[j] + counts[j] // 2)
    return FlatPlan(plan.flat, bounds)
