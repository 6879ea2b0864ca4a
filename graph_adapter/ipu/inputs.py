"""What the IPU backends do to a host batch's inputs: name, narrow, split.

poptorch takes any nest of tuples, lists and dicts of tensors. These helpers
walk such nests with ``torch.utils._pytree`` (objects that are not a tuple, a
list or a dict, a PyG ``Data`` included, are left whole: poptorch hands those
to its custom arg parsers) and do what poptorch does on the way in:

* names: ``batch[x]``, ``batch[0][y]``, the names poptorch's error messages use;
* narrowing: int64 -> int32 (with a range check), float64 -> float32;
* the micro-batch split: dim 0 of every tensor is ``F`` micro-batches
  (``F = options.micro_batches``), micro-batch ``i`` being rows
  ``[i * n / F, (i + 1) * n / F)``.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Iterator, Tuple

import torch
from ..format import host_micro_batch
from ..format.torch_internals import pytree
from torch import Tensor

__all__ = ["map_tensors", "named_tensors", "narrow", "host_micro_batch"]

_INT32 = torch.iinfo(torch.int32)


def _is_leaf(obj: Any) -> bool:
    # Only the containers poptorch itself walks; anything else (a PyG Data,
    # registered as a pytree node by graph_adapter.format.pytree) stays whole.
    return not isinstance(obj, (tuple, list, dict))


def map_tensors(obj: Any, fn: Callable[[Tensor], Any]) -> Any:
    """``obj`` with ``fn`` applied to every tensor of its tuples/lists/dicts (structure kept)."""
    return pytree.tree_map(lambda v: fn(v) if isinstance(v, Tensor) else v, obj, is_leaf=_is_leaf)


def _path_name(name: str, path: Tuple[Any, ...]) -> str:
    for entry in path:
        if isinstance(entry, pytree.MappingKey):
            name += f"[{entry.key}]"
        elif isinstance(entry, pytree.SequenceKey):
            name += f"[{entry.idx}]"
        else:  # a namedtuple field
            name += str(entry)
    return name


def named_tensors(obj: Any, name: str = "batch") -> Iterator[Tuple[str, Tensor]]:
    """``(name, tensor)`` for every tensor in ``obj``, named as poptorch does (``batch[x]``)."""
    leaves, _ = pytree.tree_flatten_with_path(obj, is_leaf=_is_leaf)
    for path, value in leaves:
        if isinstance(value, Tensor):
            yield _path_name(name, path), value


def narrow(t: Tensor, name: str = "input", ints: bool = True) -> Tensor:
    """What poptorch does to an input's dtype: int64 -> int32, float64 -> float32.

    Warns when int64 values do not fit in int32 (the IPU would wrap them).
    With ``ints=False`` int64 values are range-checked but kept int64.
    """
    if t.dtype == torch.int64:
        _check_int32(t, name)
        return t.to(torch.int32) if ints else t
    if t.dtype == torch.float64:
        return t.to(torch.float32)
    return t


def _check_int32(t: Tensor, name: str) -> None:
    if t.numel() and (int(t.min()) < _INT32.min or int(t.max()) > _INT32.max):
        warnings.warn(
            f"{name}: int64 values outside the int32 range are narrowed to int32 "
            f"(as poptorch does) and wrap around",
            RuntimeWarning,
            stacklevel=4,
        )
