"""The few array operations the packer needs, for numpy (ONNX path) and torch (pt2 path).

The packer is written once against this small namespace so that the ONNX runtime
imports no torch and the pt2 runtime no numpy.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

__all__ = ["NumpyOps", "TorchOps", "dtype_name"]


def dtype_name(value: Any) -> str:
    """``"float32"``, ``"int64"``, ``"bool"``...: a numpy or torch dtype, by its name."""
    return str(value.dtype).replace("torch.", "")


def _is_torch(value: Any) -> bool:
    return type(value).__module__.startswith("torch")


class NumpyOps:
    """numpy arrays (torch tensors given as inputs are read with ``.numpy()``)."""

    name = "numpy"

    def __init__(self):
        import numpy

        self.np = numpy
        self._dtypes: Dict[str, Any] = {}

    def asarray(self, value: Any) -> Any:
        if _is_torch(value):
            return value.detach().cpu().numpy()
        return self.np.asarray(value)

    def cast(self, a: Any, dtype: str) -> Any:
        return a.astype(dtype, copy=False)

    def from_list(self, values: Sequence[Any], dtype: str) -> Any:
        return self.np.asarray(values, dtype=dtype)

    def cat(self, parts: List[Any], dim: int) -> Any:
        return self.np.concatenate(parts, axis=dim)

    def full(self, shape: Sequence[int], value: Any, dtype: str) -> Any:
        return self.np.full(tuple(shape), value, dtype=dtype)

    def repeat_ids(self, counts: Sequence[int], dtype: str) -> Any:
        return self.np.repeat(self.np.arange(len(counts), dtype=dtype), counts)

    def prefix_mask(self, length: int, real: int) -> Any:
        return self.np.arange(length) < real

    def is_integer(self, a: Any) -> bool:
        return a.dtype.kind in "iu"

    def has_dtype(self, a: Any, dtype: str) -> bool:
        return a.dtype == self.np.dtype(dtype)

    def array_of(self, value: Any, dtype: str) -> Tuple[Any, bool]:
        """``(asarray(value), whether its dtype is dtype)``: one call a feature (a numpy
        array, the usual request, is taken as it is)."""
        a = value if type(value) is self.np.ndarray else self.asarray(value)
        return a, a.dtype == self.dtype(dtype)

    def dtype(self, dtype: str) -> Any:
        """numpy's dtype of the name ``dtype`` (cached)."""
        d = self._dtypes.get(dtype)
        if d is None:
            d = self._dtypes[dtype] = self.np.dtype(dtype)
        return d

    def take(self, values: Sequence[int], ids: Any) -> Any:
        return self.np.asarray(values, dtype=self.np.int64)[ids]

    def first_bad_column(self, index: Any, lo: Any, hi: Any) -> int:
        """The first column ``j`` of ``index`` [R, E] with a value outside ``[lo[j], hi[j])``
        (-1: none)."""
        bad = ((index < lo) | (index >= hi)).any(axis=0)
        hits = self.np.flatnonzero(bad)
        return int(hits[0]) if hits.size else -1

    def first_nonfinite(self, a: Any) -> int:
        """The flat (row-major) position of the first NaN/inf in ``a`` (-1: none)."""
        ok = self.np.isfinite(a)
        if ok.all():
            return -1
        return int(self.np.flatnonzero(~ok.reshape(-1))[0])

    def first_outside(self, a: Any, low: Any, high: Any) -> int:
        """The flat position of the first value of ``a`` below ``low`` or at/above
        ``high`` (``high``: a bound a last-dim column, broadcast; -1: none)."""
        if a.size == 0:
            return -1
        bad = a < low
        if high is not None:
            bad |= a >= high
        if not bad.any():
            return -1
        return int(self.np.flatnonzero(bad.reshape(-1))[0])

    def bounds(self, values: Sequence[int]) -> Any:
        """Per-column upper bounds as an int64 array (broadcast over a feature's rows)."""
        return self.np.asarray(values, dtype=self.np.int64)

    def item(self, a: Any, flat: int) -> Any:
        """``a``'s value at flat position ``flat``, as a Python number."""
        return a.reshape(-1)[flat].item()


class TorchOps:
    """torch tensors (numpy arrays given as inputs are wrapped with ``torch.from_numpy``)."""

    name = "torch"

    def __init__(self):
        import torch

        self.torch = torch
        self._tensor = torch.Tensor
        self._dtypes: Dict[str, Any] = {"bool": torch.bool}

    def dtype(self, dtype: str) -> Any:
        """torch's dtype of the name ``dtype`` (cached: read for every feature of every
        graph)."""
        d = self._dtypes.get(dtype)
        if d is None:
            d = self._dtypes[dtype] = getattr(self.torch, dtype)
        return d

    def asarray(self, value: Any) -> Any:
        t = self.torch
        if isinstance(value, t.Tensor):  # (detach/cpu only where needed: a hot path)
            if value.requires_grad:
                value = value.detach()
            return value if value.device.type == "cpu" else value.cpu()
        if type(value).__module__ == "numpy":
            return t.from_numpy(value) if value.flags.c_contiguous else t.as_tensor(value)
        return t.as_tensor(value)

    def cast(self, a: Any, dtype: str) -> Any:
        return a.to(self.dtype(dtype))

    def from_list(self, values: Sequence[Any], dtype: str) -> Any:
        return self.torch.tensor(values, dtype=self.dtype(dtype))

    def cat(self, parts: List[Any], dim: int) -> Any:
        return self.torch.cat(parts, dim=dim)

    def full(self, shape: Sequence[int], value: Any, dtype: str) -> Any:
        return self.torch.full(tuple(shape), value, dtype=self.dtype(dtype))

    def repeat_ids(self, counts: Sequence[int], dtype: str) -> Any:
        t = self.torch
        return t.repeat_interleave(t.arange(len(counts), dtype=self.dtype(dtype)),
                                   t.as_tensor(counts))

    def prefix_mask(self, length: int, real: int) -> Any:
        return self.torch.arange(length) < real

    def is_integer(self, a: Any) -> bool:
        return not a.dtype.is_floating_point and not a.dtype.is_complex and \
            a.dtype != self.torch.bool

    def has_dtype(self, a: Any, dtype: str) -> bool:
        return a.dtype == self.dtype(dtype)

    def array_of(self, value: Any, dtype: str) -> Tuple[Any, bool]:
        """``(asarray(value), whether its dtype is dtype)``: one call a feature (a CPU
        tensor without grad, the usual request, is taken as it is)."""
        if type(value) is self._tensor and value.is_cpu and not value.requires_grad:
            a = value
        else:
            a = self.asarray(value)
        return a, a.dtype is self.dtype(dtype)

    def take(self, values: Sequence[int], ids: Any) -> Any:
        return self.torch.tensor(list(values), dtype=self.torch.int64)[ids]

    def first_bad_column(self, index: Any, lo: Any, hi: Any) -> int:
        """The first column ``j`` of ``index`` [R, E] with a value outside ``[lo[j], hi[j])``
        (-1: none)."""
        bad = ((index < lo) | (index >= hi)).any(dim=0)
        hits = bad.nonzero()
        return int(hits[0, 0]) if hits.numel() else -1

    def first_nonfinite(self, a: Any) -> int:
        """The flat (row-major) position of the first NaN/inf in ``a`` (-1: none)."""
        ok = self.torch.isfinite(a)
        if bool(ok.all()):
            return -1
        return int((~ok.reshape(-1)).nonzero()[0, 0])

    def first_outside(self, a: Any, low: Any, high: Any) -> int:
        """The flat position of the first value of ``a`` below ``low`` or at/above
        ``high`` (``high``: a bound a last-dim column, broadcast; -1: none)."""
        if a.numel() == 0:
            return -1
        bad = a < low
        if high is not None:
            bad |= a >= high
        if not bool(bad.any()):
            return -1
        return int(bad.reshape(-1).nonzero()[0, 0])

    def bounds(self, values: Sequence[int]) -> Any:
        """Per-column upper bounds as an int64 tensor (broadcast over a feature's rows)."""
        return self.torch.tensor(list(values), dtype=self.torch.int64)

    def item(self, a: Any, flat: int) -> Any:
        """``a``'s value at flat position ``flat``, as a Python number."""
        return a.reshape(-1)[flat].item()
