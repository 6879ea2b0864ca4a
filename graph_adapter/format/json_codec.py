"""The exact JSON form of the format's non-tensor values (never pickle).

A spec keeps every non-tensor attribute (and a batch's metadata) as JSON
text: :func:`encode` / :func:`decode` round-trip tuples, dicts with non-str
keys, non-finite floats and small tensors exactly; :func:`dumps` is
``json.dumps`` of :func:`encode`, with sorted keys.
"""
from __future__ import annotations

import json
import math
from typing import Any

import torch
from torch import Tensor

from .torch_internals import real_tensors as unset_fake_temporarily
from .errors import SpecFormatError, UnsupportedAttributeError

__all__ = ["encode", "decode", "dumps"]

_JSON_SCALARS = (str, int, float, bool, type(None))


def encode(value: Any, where: str) -> Any:
    """Encode ``value`` as plain JSON, keeping tuples, tensors and non-str dict keys exact."""
    if isinstance(value, _JSON_SCALARS):
        if isinstance(value, float) and not math.isfinite(value):
            return {"__float__": repr(value)}
        return value
    if isinstance(value, Tensor):
        if value.layout != torch.strided:
            raise UnsupportedAttributeError(f"{where}: sparse tensors are not supported; use .to_dense().")
        if str(value.dtype).replace("torch.", "") not in _TENSOR_DTYPES:
            raise UnsupportedAttributeError(
                f"{where} is a tensor of dtype {value.dtype} inside a non-tensor value, which has "
                f"no exact JSON form; cast it (e.g. .to(torch.float32)) or make it an attribute "
                f"of its own.")
        return {
            "__tensor__": str(value.dtype).replace("torch.", ""),
            "shape": list(value.shape),
            "data": value.detach().cpu().reshape(-1).tolist(),
        }
    if isinstance(value, list):
        return [encode(v, where) for v in value]
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v, where) for v in value]}
    if isinstance(value, dict):
        return {"__dict__": [[encode(k, where), encode(v, where)] for k, v in value.items()]}
    raise UnsupportedAttributeError(
        f"{where} has type {type(value).__module__}.{type(value).__qualname__}, which has no exact "
        f"JSON form: only dense tensors, str, int, float, bool, None and lists/tuples/dicts of them "
        f"can be flattened. Convert it to a tensor (e.g. torch.as_tensor) or delete the attribute "
        f"before flattening."
    )


def decode(value: Any) -> Any:
    """Inverse of :func:`encode`; raises :class:`SpecFormatError` for anything it did not make."""
    try:
        return _decode(value)
    except SpecFormatError:
        raise
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as e:
        raise SpecFormatError(f"not a graph_adapter JSON value ({type(e).__name__}: {e}): "
                              f"{str(value)[:120]}") from None


_TENSOR_DTYPES = {"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
                  "float32", "float64"}


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) != 1 and "__tensor__" not in value:
        raise ValueError("an encoded value is a dict with exactly one tag")
    if "__float__" in value:
        out = float(value["__float__"])
        if math.isfinite(out):
            raise ValueError("__float__ holds only inf, -inf and nan")
        return out
    if "__tuple__" in value:
        return tuple(_decode(v) for v in value["__tuple__"])
    if "__dict__" in value:
        return {_decode(k): _decode(v) for k, v in value["__dict__"]}
    if "__tensor__" in value:
        # Only the named dtypes: getattr(torch, <any name>) would take any attribute.
        if value["__tensor__"] not in _TENSOR_DTYPES or set(value) != {"__tensor__", "shape", "data"}:
            raise ValueError(f"unknown tensor encoding {sorted(value)} / dtype {value['__tensor__']!r}")
        dtype = getattr(torch, value["__tensor__"])
        return torch.tensor(value["data"], dtype=dtype).reshape(value["shape"])
    raise ValueError(f"unknown tag {sorted(value)}")


def dumps(value: Any, where: str) -> str:
    # Non-strict torch.export flattens inputs inside its fake mode, where
    # reading a real tensor's values would give symbolic ints: step out of it.
    with unset_fake_temporarily():
        return json.dumps(encode(value, where), sort_keys=True, separators=(",", ":"))
