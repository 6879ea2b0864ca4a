"""The numpy gather engine of the padded collate (no padding rules here).

A :class:`Gather` copies the rows of some graphs out of a *columnar* copy of
one attribute (the rows of every graph of the dataset, cat dim first) into a
freshly allocated output of a fixed shape, adds index offsets where asked and
fills the tail with a given padding value.  Which rows, which offsets and
which padding value is decided by :mod:`graph_adapter.batching.collate`.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Optional, Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = ["Gather", "to_np", "storage_dtype"]

# The columnar gather runs in numpy: on arrays of a few thousand rows a numpy
# ``take`` costs about half of an ``index_select`` and the index arithmetic
# about a fifth of the torch ops.  Every copy is a bit copy (rows are gathered
# as opaque byte records), so the output is bit-identical to the torch path.

_NP_NATIVE = {
    torch.bool: np.bool_, torch.uint8: np.uint8, torch.int8: np.int8,
    torch.int16: np.int16, torch.int32: np.int32, torch.int64: np.int64,
    torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64,
    torch.complex64: np.complex64, torch.complex128: np.complex128,
}
_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def storage_dtype(dt: torch.dtype) -> torch.dtype:
    """A numpy-representable dtype of the same item size (bfloat16 -> int16)."""
    if dt in _NP_NATIVE:
        return dt
    size = torch.empty((), dtype=dt).element_size()
    if size not in _INT_OF_SIZE:
        raise TypeError(f"dtype {dt} has no numpy counterpart of item size {size}")
    return _INT_OF_SIZE[size]


def to_np(t: Tensor) -> np.ndarray:
    """Bit-compatible numpy view of a contiguous CPU tensor (no copy)."""
    sd = storage_dtype(t.dtype)
    return (t if sd == t.dtype else t.view(sd)).numpy()


@functools.lru_cache(maxsize=None)
def _nan_bits(dtype: torch.dtype) -> Any:
    """NaN of ``dtype`` as its numpy storage value (bfloat16's as an int16)."""
    return to_np(torch.full((1,), float("nan"), dtype=dtype))[0]


class Gather:
    """How one key is gathered from its columnar copy into a padded output.

    ``col`` holds the rows of every graph, cat dim first.  Plain keys are
    gathered as byte records straight into the output; incremented keys
    (``edge_index``) are gathered, offset and written in one numpy ``add``.
    """

    __slots__ = ("col", "rec", "shape", "np_dtype", "torch_dtype",
                 "view_dtype", "fill", "cat", "kind", "row_items", "perm", "axis")

    def __init__(self, col: Tensor, out_shape: Sequence[int], cat: int, dtype: torch.dtype,
                 fill: Any, kind: str):
        """``col``: the column, cat dim first; ``out_shape``: the padded output's
        shape, cat dim ``cat``; ``dtype``: the output's; ``fill``: the padding
        value (``None``/0, NaN, an int, or an array per trailing row); ``kind``:
        ``"plain"``, ``"inc"`` (offsets added in numpy) or ``"torch_inc"``
        (offsets added with torch ops, for custom increments)."""
        sd = storage_dtype(dtype)
        self.torch_dtype = dtype
        self.view_dtype = None if sd == dtype else dtype
        if kind == "torch_inc" and col.dtype != dtype:
            # the gathered block keeps the column's dtype; torch casts it into the output
            if storage_dtype(col.dtype) != col.dtype:
                raise TypeError(f"cannot offset a column of dtype {col.dtype} into {dtype}")
            self.view_dtype = None
        self.np_dtype = np.dtype(_NP_NATIVE[sd])
        a = to_np(col)
        self.col = a
        self.axis = 0  # the axis of ``self.col`` that holds the rows
        if not a.flags.c_contiguous and cat and np.moveaxis(a, 0, cat).flags.c_contiguous:
            # a cat-first view of a dataset's own storage (an InMemoryDataset's
            # edge_index [2, E]): gather along the storage's cat dim, since
            # numpy's take would copy a non-contiguous column whole on every call
            self.col, self.axis = np.moveaxis(a, 0, cat), cat
        self.rec = None
        trail = a.shape[1:]
        rowbytes = math.prod(trail) * a.itemsize
        if kind == "plain" and cat == 0 and len(trail) and rowbytes > 0:
            # rows as opaque records: one memcpy per row
            self.rec = np.dtype((np.void, rowbytes))
            self.col = a.reshape(a.shape[0], rowbytes // a.itemsize).view(
                self.rec).reshape(a.shape[0])
            self.row_items = rowbytes // a.itemsize
        self.shape = tuple(out_shape)
        self.cat = cat
        nd = len(self.shape)
        # output axes, cat dim first (a view of the output in the column's layout)
        self.perm = (cat,) + tuple(j for j in range(nd) if j != cat) if nd else ()
        self.kind = kind  # "plain" | "inc" (numpy add) | "torch_inc"
        if isinstance(fill, np.ndarray):
            self.fill = fill  # per trailing row (hetero edge_index: src, dst)
        elif fill is None or fill == 0:
            self.fill = None  # zeros
        elif isinstance(fill, float) and fill != fill:  # NaN, as the storage bits
            self.fill = _nan_bits(dtype)
        else:
            self.fill = fill  # int or array broadcast over the trailing dims

    def _rows(self, gi: np.ndarray) -> np.ndarray:
        """Rows ``gi`` of the column, cat dim first."""
        if self.axis == 0:
            return self.col.take(gi, axis=0, mode="clip")
        return np.moveaxis(self.col.take(gi, axis=self.axis, mode="clip"), self.axis, 0)

    def run(self, gi: np.ndarray, off: Optional[np.ndarray] = None) -> Tensor:
        """Gather rows ``gi`` (and add ``off``) into a new padded output.

        The output is allocated uninitialised and only its padding tail is
        filled, so every byte is written once (cold caches make the second
        write of a zero-filled buffer cost as much as the gather).
        """
        m = gi.shape[0]
        fill = 0 if self.fill is None else self.fill
        if self.rec is not None:  # plain, cat dim 0, whole rows as records
            buf = np.empty(self.shape[0], self.rec)
            self.col.take(gi, out=buf[:m], mode="clip")
            out = buf.view(self.np_dtype).reshape(self.shape)
            out[m:] = fill
        else:
            out = np.empty(self.shape, self.np_dtype)
            ov = out if self.cat == 0 else out.transpose(self.perm)
            if self.kind == "plain":
                if ov.ndim == 1:
                    self.col.take(gi, out=ov[:m], mode="clip")
                else:
                    ov[:m] = self.col[gi] if self.axis == 0 else self._rows(gi)
            else:
                blk = self._rows(gi)
                if self.kind == "inc":
                    np.add(blk, off, out=ov[:m], casting="unsafe")
                else:  # exactly the torch ops of the list path (custom increments)
                    tb = torch.from_numpy(blk)
                    if self.view_dtype is not None:
                        tb = tb.view(self.view_dtype)
                    tb += torch.from_numpy(off)
                    to = torch.from_numpy(ov)
                    if self.view_dtype is not None:
                        to = to.view(self.view_dtype)
                    to[:m].copy_(tb)
            ov[m:] = fill
        t = torch.from_numpy(out)
        return t if self.view_dtype is None else t.view(self.view_dtype)
