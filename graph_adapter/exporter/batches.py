"""The padded batches ``export`` traces and checks on: one ``Dict[str, Tensor]`` each in
the budget's fixed shapes (``[N, ...]`` node rows, ``[E, ...]`` edge rows, ``[G, ...]``
graph rows, padding after the real rows), from a ``FixedSizeLoader``'s plan or from a
``Budget`` and example graphs."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from torch import Tensor

from ..batching import Budget, Collator, FixedSizeLoader
from ..format import has_micro_batch_dim, micro_batch

__all__ = ["collator_and_example", "check_batches", "data_of"]


def collator_and_example(source: Any, example: Optional[Sequence[Any]]
                         ) -> Tuple[Collator, Dict[str, Tensor]]:
    """The schema's collator and one padded batch with real graphs in it."""
    if isinstance(source, FixedSizeLoader):
        col = source.collator
        first = source.plan(0)[0]
        if col.columnar:
            return col, col.collate_indices(first)
        flat = next(iter(source))
        return col, micro_batch(flat, 0) if has_micro_batch_dim(flat) else flat
    if isinstance(source, (Budget, Mapping, str)):
        budget = source if isinstance(source, Budget) else (
            Budget.from_json(source) if isinstance(source, str) else Budget.from_dict(source))
        if not example:
            raise TypeError("export(wrapped, budget, path) needs example=[graphs] (a few PyG "
                            "Data the model takes: they give the feature schema); or pass "
                            "the FixedSizeLoader instead of its budget")
        col = Collator(list(example), budget, warn=False)
        return col, col.collate_indices(range(len(example)))
    raise TypeError(f"loader_or_budget must be a FixedSizeLoader or a Budget, got "
                    f"{type(source).__name__}")


def check_batches(source: Any, example: Optional[Sequence[Any]], col: Collator,
                  first: Dict[str, Tensor], count: int = 3) -> List[Dict[str, Tensor]]:
    """``first`` and up to ``count - 1`` more padded batches for the artifact's check:
    the loader's next batches of its plan, or the example graphs packed in other orders
    and subsets (other rows share a target, other padding)."""
    out = [first]
    if isinstance(source, FixedSizeLoader):
        # from the plan, not by iterating (which would move the loader's epoch)
        for b in source.plan(0)[1:count]:
            out.append(col.collate_indices(b) if col.columnar else
                       col.collate([source.dataset[i] for i in b], ids=b))
        return out
    n = len(example or ())
    for order in (list(range(n))[::-1], list(range(0, n, 2))):
        if order and len(out) < count:
            out.append(col.collate_indices(order))
    return out


def data_of(source: Any, example: Optional[Sequence[Any]]) -> Sequence[Any]:
    """The graphs the rungs of a ladder are fitted and checked on: the loader's dataset,
    or the example graphs."""
    return source.dataset if isinstance(source, FixedSizeLoader) else list(example or ())
