"""What poptorch requires of a model's buffers and parameters in forward: they keep their storage.

poptorch records every buffer's and parameter's address before a forward and
compares after it (``python/_impl.py``, ``errorOnBufferOrParameterAddressChanges``):
``self.b = self.b + 1`` is refused, ``self.b.copy_(...)`` is fine, and BatchNorm
modules' buffers are exempt (``BUFFERS_CAN_CHANGE``). The checker reports it;
the emulated poptorch raises it.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import torch
from torch import nn

__all__ = ["state_addresses", "reassigned_state"]

# poptorch skips these modules' buffers when it checks for reassignment.
_BUFFERS_CAN_CHANGE = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


def state_addresses(model: nn.Module) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``(buffers, parameters)``: name -> (device, data_ptr), as poptorch records them.

    BatchNorm modules' buffers are left out, as poptorch leaves them out
    (``BUFFERS_CAN_CHANGE``).
    """
    buffers: Dict[str, Any] = {}
    for prefix, module in model.named_modules():
        if isinstance(module, _BUFFERS_CAN_CHANGE):
            continue
        for name, b in module.named_buffers(prefix=prefix, recurse=False):
            buffers[name] = _address(b)
    params = {n: _address(p) for n, p in model.named_parameters()}
    return buffers, params


def _address(t: torch.Tensor) -> Tuple[Any, ...]:
    """(device, identity) of a tensor's storage as poptorch would compare it.

    A real tensor's ``data_ptr()`` (what poptorch records). Tensors without
    storage (fake or meta, e.g. a forward traced under a fake mode) have no
    address to read (torch warns that reading one will become an error), so
    the tensor object stands in: a reassignment makes a new one.
    """
    from ..format.torch_internals import is_fake

    if is_fake(t) or t.is_meta:
        return (t.device, "object", id(t))
    return (t.device, "data_ptr", t.data_ptr())


def reassigned_state(before: Tuple[Dict[str, Any], Dict[str, Any]],
                     after: Tuple[Dict[str, Any], Dict[str, Any]]) -> List[Tuple[str, str]]:
    """``(name, poptorch's message)`` for each buffer/parameter removed or reassigned by forward.

    The messages are poptorch's (``errorOnBufferOrParameterAddressChanges``).
    """
    problems = []
    for kind, old, new in (("Buffer", before[0], after[0]), ("Parameter", before[1], after[1])):
        for name, address in old.items():
            if name not in new:
                problems.append((name, f"{kind} {name} is removed from the model when calling "
                                       f"the forward method."))
            elif address != new[name]:
                problems.append((name, f"{kind} {name} is reassigned within the model when "
                                       f"calling the forward method. This is not supported. "
                                       f"Consider using self.{name}.copy_(src) to copy data from "
                                       f"a source tensor, where src is the name of the source "
                                       f"tensor."))
    return problems
