"""A compiled program's input signature, and saved exports.

The *signature* of a batch is its keys, dtypes and shapes (without a
micro-batch dim, :func:`signature_of`): a
:class:`~graph_adapter.backends.compiled.Compiled` admits one (or, with
``allow_new_shapes``, one per budget), and a batch that differs raises
:class:`ShapeChangedError` naming the first key that differs. It and a
:class:`LoadedProgram` both run a batch with a leading micro-batch dim one
micro-batch at a time (:func:`per_micro_batch`).

:func:`save_program` (what :meth:`Compiled.save` writes) keeps an exported
program with its signature as JSON (``torch.export.save`` + an extra file,
``graph_adapter.json``); :func:`load` returns a :class:`LoadedProgram`, which
checks its batches as the compiled model did.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Tuple

import torch
from torch import Tensor, nn

from ..contract import ShapeChangedError, Signature
from ..format import per_micro_batch
from ..nn import HostModel

__all__ = ["Signature", "ShapeChangedError", "signature_of", "CompiledHost",
           "per_micro_batch", "save_program", "LoadedProgram", "load"]


def signature_of(flat: Mapping[str, Tensor]) -> Signature:
    """The signature a compiled program is specialised to: keys, dtypes and shapes of
    one micro-batch (:meth:`graph_adapter.contract.Signature.of`)."""
    return Signature.of(flat, strip_micro=True)


class CompiledHost(HostModel):
    """The host side of the compiled-model interface, shared by
    :class:`~graph_adapter.backends.compiled.Compiled` and
    :class:`~graph_adapter.backends.select.Selected`: the mode and the
    parameters are the wrapped module's, the caller steps its own optimizer,
    and every batch has the first batch's signature unless ``allow_new_shapes``
    (:class:`ShapeChangedError` otherwise). A subclass sets ``wrapped``,
    ``backend``, ``allow_new_shapes`` and ``signatures``."""

    wrapped: nn.Module
    backend: str
    allow_new_shapes: bool
    signatures: List[Signature]
    #: what follows the backend in the error's ``graph_adapter.compile(...)``
    compile_call_extra: str = ""

    @property
    def host_module(self) -> nn.Module:
        return self.wrapped

    @property
    def training(self) -> bool:
        return self.wrapped.training

    def _admit(self, sig: Signature) -> None:
        if sig in self.signatures:
            return
        if self.signatures and not self.allow_new_shapes:
            raise ShapeChangedError(
                f"graph_adapter.compile({self.backend!r}{self.compile_call_extra}): this batch "
                f"does not fit the compiled program: {self.signatures[0].difference(sig)}. "
                f"Every batch must come from one budget (FixedSizeLoader pads to it); to compile "
                f"once more for a new budget pass allow_new_shapes=True."
            )
        self.signatures.append(sig)

def save_program(ep: Any, path: str, sig: Signature, training: bool) -> None:
    meta = {
        "format": "graph_adapter.export/1",
        "signature": sig.to_json(),
        "training": training,
    }
    # torch.export.save pickles example_inputs: drop them (they hold a batch
    # of the user's data and are not needed to run the program).
    saved = getattr(ep, "_example_inputs", None)
    try:
        ep._example_inputs = None
        torch.export.save(ep, path, extra_files={"graph_adapter.json": json.dumps(meta)})
    finally:
        ep._example_inputs = saved


class LoadedProgram(HostModel):
    """A saved export: call it with flat dicts of the saved signature.

    Its mode is the one it was exported in: ``.train(mode)`` for the other
    mode raises ``ValueError``.
    """

    backend = "export"
    compile_count = 0
    steps_optimizer = False

    def __init__(self, ep: Any, meta: Dict[str, Any]):
        self.program = ep
        self.signature = Signature.from_json(meta["signature"])
        self.training = bool(meta["training"])
        self._module = ep.module()

    def __call__(self, flat: Mapping[str, Tensor]) -> Dict[str, Tensor]:
        sig = signature_of(flat).named()
        if sig != self.signature:
            raise ShapeChangedError(
                f"loaded program: {self.signature.difference(sig)}; it was exported for "
                f"one budget only."
            )
        return per_micro_batch(self._module, flat)

    @property
    def host_module(self) -> nn.Module:
        return self._module

    def _set_mode(self, mode: bool) -> None:
        if mode != self.training:
            raise ValueError(f"this program was exported in {'train' if self.training else 'eval'} "
                             f"mode; export it again in the other mode")


def load(path: str) -> LoadedProgram:
    """Load a program saved by :meth:`Compiled.save`."""
    extra = {"graph_adapter.json": ""}
    ep = torch.export.load(path, extra_files=extra)
    if not extra["graph_adapter.json"]:
        raise ValueError(f"{path} was not saved by graph_adapter (no graph_adapter.json inside)")
    meta = json.loads(extra["graph_adapter.json"])
    if meta.get("format") != "graph_adapter.export/1":
        raise ValueError(f"{path}: unknown format {meta.get('format')!r}")
    return LoadedProgram(ep, meta)
