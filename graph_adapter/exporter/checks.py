"""The artifact against the eager wrapper: check cases (a padded batch, its eager
outputs, the full batch whose masks count the real rows) and the largest difference on
the real rows of every output (``[N, ...]``, ``[E, ...]`` or ``[G, ...]``; padding rows
are left out, their shape is checked), refused beyond the contract's tolerance."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch
from torch import Tensor

from ..contract import MASK_OF_LEVEL
from ..serve import Contract
from .errors import ExportMismatchError
from .trace import Inference

__all__ = ["Case", "check_cases", "max_diff"]


#: one check case: (the padded batch fed, the eager outputs on it, the full batch whose
#: masks give the real rows)
Case = Tuple[Dict[str, Tensor], Dict[str, Tensor], Dict[str, Tensor]]


def check_cases(module: Inference, dropped: List[str], ref: Optional[Dict[str, Tensor]],
                batches: List[Dict[str, Tensor]]) -> List[Case]:
    """The check cases of ``batches`` (the first one's eager outputs are ``ref``): each
    batch without the ``dropped`` keys, the module's eager outputs on it, the batch."""
    out = []
    for i, b in enumerate(batches):
        fed = {k: v for k, v in b.items() if k not in dropped}
        with torch.no_grad():
            out.append((fed, ref if i == 0 and ref is not None else module(fed), b))
    return out


def _real_rows(contract: Contract, flat: Mapping[str, Tensor]) -> Dict[str, int]:
    """Output key -> its real rows in ``flat`` (the mask's count of its level); padding
    rows follow them and are never part of a prediction."""
    out = {}
    for f in contract.outputs:
        m = flat.get(MASK_OF_LEVEL[f.level])
        out[f.key] = int(m.sum()) if isinstance(m, Tensor) else int(f.shape[0])
    return out


def max_diff(got: Mapping[str, Any], ref: Mapping[str, Tensor], contract: Contract,
             flat: Mapping[str, Tensor], where: str = "") -> float:
    """The largest ``|artifact - eager|`` over the real rows of every output; raises
    ``ExportMismatchError`` beyond ``contract.tolerance``.

    Padding rows are left out: they hold what the padding self-loops add up on the
    padding nodes (values of 1e8 and more after a few sum layers), whose rounding
    depends on the order of adds, and no request ever reads them (``serve`` splits the
    real rows only). Their shape is checked. ``where`` (e.g. ``" of batch 2, run 1 at 2
    onnxruntime threads"``) goes into the error."""
    tol, real = contract.tolerance, _real_rows(contract, flat)
    worst = 0.0
    for k, r in ref.items():
        g = torch.as_tensor(got[k]).to(r.dtype)
        if g.shape != r.shape:
            raise ExportMismatchError(f"output {k!r}{where}: shape {tuple(g.shape)} from "
                                      f"the artifact, {tuple(r.shape)} from the eager wrapper")
        g, r = g[:real[k]], r[:real[k]]
        if not r.is_floating_point():
            if not torch.equal(g, r):
                raise ExportMismatchError(f"output {k!r} (integer){where} differs from "
                                          f"eager; not written")
            continue
        d = (g - r).abs()
        worst = max(worst, float(d.max()) if d.numel() else 0.0)
        bad = d > tol["atol"] + tol["rtol"] * r.abs()
        if bool(bad.any()):
            raise ExportMismatchError(
                f"output {k!r}: the artifact differs from the eager wrapper by up to "
                f"{float(d.max()):.3g} on the real rows{where} (tolerance atol={tol['atol']}, "
                f"rtol={tol['rtol']}); not written")
    return worst
