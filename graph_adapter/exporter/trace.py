"""The inference module of a wrapped model, its ``torch.export`` trace on one padded
batch (a dict of tensors with the budget's fixed shapes: ``[N, ...]`` node rows,
``[E, ...]`` edge rows, ``[G, ...]`` graph rows), the compile path's graph rewrite on the
exported program, and the inputs the traced program never reads.

The compile path's rewrites come from :mod:`graph_adapter.tuning`
(``rewrite_exported``), imported if it is there: a package without the tuning stage
exports the same function, unrewritten (slower, the same results within tolerance).
"""
from __future__ import annotations

import copy
import logging
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from ..contract import LOSS_KEY, RESERVED_KEYS
from ..nn import IPUWrapped


try:  # the tuning stage is optional: without it, exported programs are written as traced
    from ..tuning import rewrite_exported
except ModuleNotFoundError as missing:
    if missing.name != "graph_adapter.tuning":  # a module the stage needs: a real error
        raise
    #: (no tuning stage here: nothing rewrites the exported program)
    rewrite_exported: Optional[Callable[[torch.fx.GraphModule], Dict[str, int]]] = None

LOG = logging.getLogger("graph_adapter.export")

__all__ = ["Inference", "trace", "rewritten_program", "drop_unread"]


class Inference(nn.Module):
    """The wrapper's outputs without the loss (the artifact is the inference graph).

    ``fill``: key -> ``(shape, dtype)`` of the inputs the program never reads: made as
    zeros inside forward (a forward that names them still gets them), so that they
    are no input of the program and no request carries them."""

    def __init__(self, wrapped: IPUWrapped,
                 fill: Optional[Dict[str, Tuple[Tuple[int, ...], torch.dtype]]] = None):
        super().__init__()
        self.wrapped = wrapped
        self.fill = dict(fill or {})

    def forward(self, flat: Dict[str, Tensor]) -> Dict[str, Tensor]:
        """The outputs of ``flat`` (the never-read inputs made as zeros) without the
        loss."""
        if self.fill:
            flat = {**flat, **{k: torch.zeros(shape, dtype=dtype)
                               for k, (shape, dtype) in self.fill.items()}}
        out = self.wrapped(flat)
        return {k: v for k, v in out.items() if k != LOSS_KEY}


def trace(module: nn.Module, flat: Dict[str, Tensor]) -> Any:
    """``torch.export.export(module, (flat,))`` without autograd: the inference program
    of one padded batch ``flat`` (fixed shapes: ``[N, ...]``, ``[E, ...]``, ``[G, ...]``
    rows)."""
    with torch.no_grad():
        return torch.export.export(module, (flat,))


def rewritten_program(ep: Any, flat: Dict[str, Tensor]) -> Tuple[Any, int]:
    """``(program, rewritten)``: ``ep`` with the compile path's graph rewrites for
    exported programs applied (``graph_adapter.tuning.rewrite_exported``: a linear of a
    sum of embedding lookups projects the tables instead), traced again on ``flat`` so
    that every node has its metadata; ``rewritten`` counts what fired (logged by name
    on the ``graph_adapter.export`` logger; ``0``: ``ep`` itself, untouched, as
    without the tuning stage; else ``ep``'s own graph is rewritten too: pass a program
    you no longer need).

    ``graph_adapter.compile(..., "inductor")`` runs these rewrites as inductor's
    pre-grad pass on Dynamo's torch-level graph; an exported program is ATen, so they
    are run here, before AOTInductor or the ONNX exporter see the graph
    (``docs/deploy.md``, Speed; ``docs/dev/RESULTS.md`` has the measurements).
    """
    fired = {} if rewrite_exported is None else rewrite_exported(ep.graph_module)
    rewritten = sum(fired.values())
    if not rewritten:
        return ep, 0
    LOG.info("rewrites of the exported program: %s",
             ", ".join(f"{k} x{v}" for k, v in fired.items() if v))
    # the lookup sums the linears read are dead now; fx keeps the ops that write an input
    # (is_impure: a mutable schema, e.g. max_norm's embedding_renorm_), and buffer
    # updates of an exported program are outputs, so nothing else is dropped
    ep.graph_module.graph.eliminate_dead_code()
    ep.graph_module.recompile()
    return trace(ep.module(), flat), rewritten


def _unused_inputs(ep: Any, keys: List[str]) -> List[str]:
    """Input keys whose placeholder has no user in the exported graph (same order)."""
    names = list(ep.graph_signature.user_inputs)
    nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    return [k for k, name in zip(keys, names) if not nodes[name].users]


def drop_unread(wrapped: IPUWrapped, flat: Dict[str, Tensor], traced: Optional[List[Any]] = None
                ) -> Tuple[Inference, List[str], Dict[str, Tensor]]:
    """``(module, dropped, ref)``: the inference module without the inputs the traced
    program never reads (features and labels: ``y``, an ``edge_attr`` the forward names
    but ignores; reserved keys stay, the packer makes them), which it makes as zeros
    itself, and its eager outputs on ``flat`` without them. They must equal the
    wrapper's on the whole ``flat`` (a key read outside the graph, by Python, keeps
    its place in the contract). ``traced``: a list the program traced on the whole
    ``flat`` is appended to (what the contract's value rules are read from)."""
    module = Inference(wrapped)
    ep = trace(copy.deepcopy(module), flat)
    if traced is not None:
        traced.append(ep)
    unused = _unused_inputs(ep, list(flat))
    dropped = [k for k in unused if k not in RESERVED_KEYS]
    with torch.no_grad():
        ref = module(flat)
        if not dropped:
            return module, [], ref
        fill = {k: (tuple(flat[k].shape), flat[k].dtype) for k in dropped}
        reduced = Inference(wrapped, fill)
        try:
            got = reduced({k: v for k, v in flat.items() if k not in dropped})
        except Exception:  # noqa: BLE001 - the whole dict's outputs stand
            return module, [], ref
    same = got.keys() == ref.keys() and all(
        torch.equal(got[k], ref[k]) or (ref[k].is_floating_point() and torch.allclose(
            got[k], ref[k], equal_nan=True)) for k in ref)
    return (reduced, dropped, got) if same else (module, [], ref)
