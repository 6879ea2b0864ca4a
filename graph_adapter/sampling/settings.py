"""The settings every loader of the sampling stage shares, as one checked object.

The neighbour, link, cluster and hetero loaders take the same keyword
arguments for the epoch's order, the sampler, sharding and the workers
(:class:`SamplingSettings`' fields). Each loader's ``__init__`` keeps them in
its signature (they are documented there, and a user's editor shows them) and
hands them on as one object, :meth:`SamplingSettings.of` its arguments, which
:meth:`SamplingSettings.check` validates once for all four loaders.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional

from .csr import TEMPORAL_STRATEGIES, TemporalSamplingError, resolve_subgraph_type
from .pyg_sampler import SAMPLERS

__all__ = ["SamplingSettings", "OVERSIZE_POLICIES"]

#: What a loader does with a sample over its budget: trim the farthest hop, or raise.
OVERSIZE_POLICIES = ("trim", "error")


@dataclass(frozen=True)
class SamplingSettings:
    """Shared loader settings (see :class:`~graph_adapter.sampling.FixedSizeNeighborLoader`'s
    arguments of the same names).

    Made consistent on construction: ``subgraph_type`` resolved with the older
    ``directed`` (``directed=False`` is ``"induced"``; ``directed`` then says whether
    it is not induced), and ``disjoint`` forced True with a ``time_attr`` (temporal
    sampling grows one tree per seed, as PyG's ``NeighborSampler`` forces).

    Raises:
        SubgraphTypeError: an unknown ``subgraph_type`` or ``directed=False`` with
            ``"directional"`` / ``"bidirectional"``.
    """

    shuffle: bool = False
    seed: int = 0
    replace: bool = False
    disjoint: bool = False
    directed: bool = True
    subgraph_type: Optional[str] = None
    temporal_strategy: str = "uniform"
    time_attr: Optional[str] = None
    weight_attr: Optional[str] = None
    oversize: str = "trim"
    micro_batches: int = 1
    rank: Optional[int] = None
    world_size: Optional[int] = None
    pad_id: int = -1
    num_workers: int = 0
    sampler_threads: Optional[int] = 1
    sampler: str = "ours"
    prefetch: int = 0

    def __post_init__(self) -> None:
        sub = resolve_subgraph_type(self.subgraph_type, bool(self.directed), "the loader")
        object.__setattr__(self, "subgraph_type", sub)
        object.__setattr__(self, "directed", sub != "induced")
        if self.time_attr is not None:
            object.__setattr__(self, "disjoint", True)

    @classmethod
    def of(cls, args: Mapping[str, Any]) -> "SamplingSettings":
        """The settings among a loader's ``__init__`` arguments (its ``locals()``), by name;
        a field the loader does not take keeps its default."""
        return cls(**{f.name: args[f.name] for f in fields(cls) if f.name in args})

    def check(self, owner: str) -> None:
        """Raise a named error for a setting no loader accepts (``owner``: the loader's name)."""
        if self.temporal_strategy not in TEMPORAL_STRATEGIES:
            raise TemporalSamplingError(f"{owner}(temporal_strategy={self.temporal_strategy!r}): "
                                        f"choose one of {TEMPORAL_STRATEGIES}")
        if self.time_attr is not None and not self.directed:
            raise TemporalSamplingError(
                f"{owner}(time_attr={self.time_attr!r}, subgraph_type='induced'): temporal "
                f"sampling grows one tree per seed (disjoint, as PyG's) and an induced subgraph "
                f"per tree is not built; use subgraph_type='directional' or 'bidirectional'")
        for name in ("time_attr", "weight_attr"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, str):
                raise TemporalSamplingError(f"{owner}({name}={v!r}): give the attribute's name "
                                            f"(a str)")
        if not self.directed and self.disjoint:
            raise NotImplementedError(f"{owner}(directed=False, disjoint=True): an induced "
                                      "subgraph per seed tree is not built; use one of them")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler={self.sampler!r}; choose one of {SAMPLERS}")
        if self.oversize not in OVERSIZE_POLICIES:
            raise ValueError(f"oversize={self.oversize!r}; choose one of {OVERSIZE_POLICIES}")
        if isinstance(self.micro_batches, bool) or not isinstance(self.micro_batches, int) \
                or self.micro_batches < 1:
            raise ValueError(f"micro_batches={self.micro_batches!r}; give F >= 1")
        if isinstance(self.num_workers, bool) or not isinstance(self.num_workers, int) \
                or self.num_workers < 0:
            raise ValueError(f"num_workers={self.num_workers!r}; give an int >= 0")
        p = self.prefetch
        if isinstance(p, bool) or not isinstance(p, int) or p < 0:
            raise ValueError(f"prefetch={p!r}; give the number of batches a background "
                             f"thread prepares ahead (0: none)")
        if p and self.num_workers:
            raise ValueError(f"prefetch={p} with num_workers={self.num_workers}: the worker "
                             f"processes already prepare batches ahead; use one of them")
