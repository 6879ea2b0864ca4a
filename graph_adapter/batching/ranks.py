"""Which share of an epoch a loader yields: its rank and world size.

Every loader of the package (``FixedSizeLoader`` and the samplers' loaders)
cuts an epoch into ``world_size`` disjoint shares. Rank and world size are
either given to the loader or, left at ``None``, read from
``torch.distributed`` **each time an epoch is planned** (``__len__``,
``__iter__``), not when the loader is built: Lightning and most launch
scripts build the loader before the process group exists (``Trainer.fit``
starts it), and a loader that read the group once would hand every rank the
whole dataset.

Given explicitly, the values stand. A loader told ``rank=0, world_size=1``
(or any world size) while ``torch.distributed`` runs another number of ranks
warns once: every rank then trains on the share the user named, which is the
whole dataset for ``world_size=1`` (twice the compute, another global batch).

When an epoch starts with more than one rank, the ranks exchange a few
numbers that must agree (dataset size, total nodes and edges, budget, seed,
shuffle): one ``all_gather`` of a short integer tensor at a loader's first
epoch. Ranks built on different data would otherwise train on overlapping or
missing graphs with no error; now every rank raises the same error.
"""
from __future__ import annotations

import hashlib
import operator
import warnings
from typing import Callable, Dict, Optional, Tuple, Union

import torch

__all__ = ["Ranks", "Sharded", "distributed_ranks", "fingerprint", "RankMismatchError"]


class RankMismatchError(ValueError):
    """The ranks of one job built a loader on different data or settings."""


def distributed_ranks() -> Optional[Tuple[int, int]]:
    """``(rank, world_size)`` of the running ``torch.distributed`` group, or
    ``None`` when none is initialised (or torch has no distributed support)."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return int(dist.get_rank()), int(dist.get_world_size())


def _check_int(name: str, value: Optional[int], owner: str) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"{owner}({name}={value!r}): give an int, or None")
    try:
        return operator.index(value)  # ints and numpy ints, not floats or strings
    except TypeError:
        raise TypeError(f"{owner}({name}={value!r}): give an int, or None to read it from "
                        f"torch.distributed when an epoch starts") from None


class Ranks:
    """A loader's rank and world size: given, or resolved from ``torch.distributed``
    whenever :meth:`resolve` is called (at each epoch's planning).

    Args:
        rank: this process's rank, or ``None`` (from the process group; 0 without one).
        world_size: the number of ranks, or ``None`` (from the process group; 1
            without one).
        owner: the loader's name, for messages.

    Raises:
        ValueError: given values with ``rank`` not in ``[0, world_size)``.
    """

    def __init__(self, rank: Optional[int], world_size: Optional[int], owner: str):
        self.owner = owner
        self.given = (_check_int("rank", rank, owner), _check_int("world_size", world_size, owner))
        r, w = self.given
        if w is not None and w < 1:
            raise ValueError(f"{owner}(world_size={w}): give at least 1 rank")
        if r is not None and r < 0:
            raise ValueError(f"{owner}(rank={r}): a rank is >= 0")
        if r is not None and w is not None and r >= w:
            raise ValueError(f"{owner}(rank={r}, world_size={w}): need 0 <= rank < world_size; "
                             f"ranks are numbered 0 to world_size - 1")
        self._warned = False
        self._checked: Optional[Tuple[int, int]] = None

    @property
    def explicit(self) -> bool:
        """Whether rank or world size was given (not read from the process group)."""
        return self.given != (None, None)

    def resolve(self) -> Tuple[int, int]:
        """``(rank, world_size)`` now: the given values, the rest from the running
        process group (``(0, 1)`` without one). Warns once when given values
        disagree with a running group."""
        running = distributed_ranks()
        r, w = self.given
        if r is None:
            r = running[0] if running is not None else 0
        if w is None:
            w = running[1] if running is not None else 1
        if not 0 <= r < w:
            raise ValueError(
                f"{self.owner}: rank {r} is not in [0, {w}) (rank given as {self.given[0]}, "
                f"world_size as {self.given[1]}, torch.distributed: "
                f"{'not initialised' if running is None else f'rank {running[0]} of {running[1]}'})"
                f"; give both or neither")
        if running is not None and self.explicit and (r, w) != running and not self._warned:
            self._warned = True
            warnings.warn(
                f"{self.owner} was given rank={self.given[0]}, world_size={self.given[1]}, but "
                f"torch.distributed runs {running[1]} ranks (this is rank {running[0]}): this "
                f"rank yields share {r} of {w}"
                + (", the whole dataset, on every rank" if w == 1 else "")
                + ". Leave rank and world_size unset (they are read from torch.distributed when "
                  "each epoch starts) or pass rank=dist.get_rank(), "
                  "world_size=dist.get_world_size().", stacklevel=3)
        return r, w

    def check_same(self, facts: Callable[[], Dict[str, int]]) -> None:
        """Raise :class:`RankMismatchError` on every rank if the ranks of the running
        group disagree on ``facts()`` (name -> int: dataset size, budget, seed, ...;
        called only when there is something to check).

        Runs one ``all_gather`` the first time it is called for a (rank, world
        size) of a running group with more than one rank, and nothing after; a
        collective, so every rank must call it (each does, at its first epoch).
        """
        running = distributed_ranks()
        if running is None or running[1] < 2 or self._checked == running:
            return
        if self.resolve() != running:
            return  # the user named another share: the group is not this loader's
        self._checked = running
        dist = torch.distributed
        device = torch.device("cpu")
        if "nccl" in str(dist.get_backend()).lower() and torch.cuda.is_available():
            device = torch.device("cuda", torch.cuda.current_device())
        facts_now = facts()
        names = sorted(facts_now)
        mine = torch.tensor([int(facts_now[k]) for k in names], dtype=torch.int64, device=device)
        gathered = [torch.empty_like(mine) for _ in range(running[1])]
        dist.all_gather(gathered, mine)
        rows = [g.cpu().tolist() for g in gathered]
        bad = [(k, [row[i] for row in rows]) for i, k in enumerate(names)
               if len({row[i] for row in rows}) > 1]
        if bad:
            said = "; ".join(f"{k}: " + ", ".join(f"rank {r} has {v}" for r, v in enumerate(vals))
                             for k, vals in bad)
            raise RankMismatchError(
                f"{self.owner}: the {running[1]} ranks built this loader on different data or "
                f"settings ({said}). Every rank must build it on the same dataset, in the same "
                f"order, with the same budget, seed and shuffle; the loader cuts the shares.")


class Sharded:
    """What a loader that cuts epochs into shares shows of them: ``rank`` and
    ``world_size`` as properties, resolved at each read from ``self._ranks``
    (a :class:`Ranks` the loader's ``__init__`` sets)."""

    _ranks: Ranks

    @property
    def rank(self) -> int:
        """This process's share of each epoch: given, or ``torch.distributed``'s rank now."""
        return self._ranks.resolve()[0]

    @property
    def world_size(self) -> int:
        """The number of shares: given, or ``torch.distributed``'s world size now."""
        return self._ranks.resolve()[1]


def fingerprint(data: Union[str, bytes]) -> int:
    """A 56-bit integer digest of ``data`` (a budget's JSON, a partition's bytes), for
    :meth:`Ranks.check_same` (fits an int64 tensor)."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    return int.from_bytes(hashlib.sha256(raw).digest()[:7], "little")
