"""The torch internals every stage shares, one named import each.

torch has no public home yet for its pytree utilities (``torch.utils._pytree``,
which PyG, Dynamo and ``torch.export`` all use) nor for fake tensors
(``torch._subclasses.fake_tensor``, what poptorch's dispatcher stand-in runs
forward under), nor for Python dispatch modes. The package uses them through
this module only, so a torch release that moves one breaks one import. The
compiler-specific internals (inductor's, the dispatcher's) stay with the
modules whose job they are (``docs/dev/ARCHITECTURE.md``, "Internals").
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Optional

import torch.nn.modules.batchnorm
import torch.utils._pytree as pytree
from torch import Tensor
from torch._subclasses.fake_tensor import (DataDependentOutputException,
                                           DynamicOutputShapeException, FakeTensorMode,
                                           is_fake, unset_fake_temporarily)
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

__all__ = ["pytree", "FakeTensorMode", "DataDependentOutputException",
           "DynamicOutputShapeException", "is_fake", "real_tensors", "TorchDispatchMode",
           "current_dispatch_mode", "BatchNormBase", "view_base"]

#: The base class of torch's BatchNorm1d/2d/3d (and SyncBatchNorm's parent):
#: ``forward`` and the running-statistics buffers every batch norm shares.
BatchNormBase = torch.nn.modules.batchnorm._BatchNorm


def real_tensors() -> AbstractContextManager[Any]:
    """A context in which tensors are real again inside a fake-tensor forward (the
    code it runs computes on data, as host code does under poptorch)."""
    return unset_fake_temporarily()


def current_dispatch_mode() -> Any:
    """The innermost active ``TorchDispatchMode`` (fake-tensor mode included), or ``None``."""
    return _get_current_dispatch_mode()


def view_base(t: Tensor) -> Optional[Tensor]:
    """The tensor ``t`` is a view of (``None`` if it is not a view). Identity of the
    base is traceable by Dynamo, where ``storage_offset()`` is not."""
    return t._base
