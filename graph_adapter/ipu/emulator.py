"""``"ipu-emulator"``: on CPU, what poptorch does with a model's inputs and outputs.

:class:`IPUEmulator` lets IPU training code be tested without hardware: input
checks with poptorch's messages, dim-0 split into ``F`` micro-batches,
int64/float64 narrowing, gradient accumulation with Mean reduction and one
optimizer step per accumulated step, outputs stacked per output mode
(:func:`collect_outputs`). What was verified in poptorch's sources, and what
is assumed, is written down in ``docs/ipu.md``.
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from ..format.torch_internals import pytree
from torch import Tensor, nn

from ..format import GRAPH_MASK, LOSS_KEY, loss_of
from ..nn import HostModel
from .dispatcher import dispatcher_rules
from .inputs import host_micro_batch, map_tensors, named_tensors, narrow
from .options import IPUOptions

__all__ = ["EmulatorError", "BatchDimensionError", "IPUEmulator", "batch_dimension_error",
           "collect_outputs"]

# poptorch's ArgsParser closes every input-mismatch error with this sentence
# (python/_args_parser.py, validateInputs; "curent" is poptorch's spelling).
_RECOMPILE_HINT = (
    "\nThis error occurred because the inputs passed at runtime don't match the inputs used "
    "to compile the model.\nTo recompile the model for the new inputs create a new "
    "inferenceModel / trainingModel wrapper or call destroy() on the curent one and try again."
)


class EmulatorError(RuntimeError):
    """What poptorch would raise (``poptorch.Error``) for the same call.

    Raised by the emulator (``compile_ipu(..., "ipu-emulator")``) and the emulated
    ``poptorch`` module (:func:`emulate_poptorch`) where poptorch would raise on an
    IPU: an input signature other than the compiled one, a dim 0 that does not
    divide by ``F``, no loss in a training model, a destroyed model.

    Args:
        message: poptorch's message for the same call where it has one (with its
            advice, e.g. to recompile), else what the emulator checked.

    Example:
        ```python
        from torch_geometric.datasets import FakeDataset
        from torch_geometric.nn import GCN

        from graph_adapter import (Budget, EmulatorError, FixedSizeLoader, IPUOptions,
                                   compile_ipu, ipu_wrap)

        graphs = FakeDataset(num_graphs=32, avg_num_nodes=10, num_channels=8)
        runner = compile_ipu(ipu_wrap(GCN(8, 16, 2)), "ipu-emulator", IPUOptions())
        runner(next(iter(FixedSizeLoader(graphs, Budget.tight(graphs, 4)))))
        try:  # a batch of other shapes: poptorch compiled for the first one
            runner(next(iter(FixedSizeLoader(graphs, Budget.tight(graphs, 8)))))
        except EmulatorError as e:
            print(e)  # Shape mismatch for flat[batch]: ... call destroy() ...
        ```
    """


class BatchDimensionError(EmulatorError, AssertionError):
    """poptorch's dim-0 rule, broken on a first (compiling) call.

    poptorch raises it as an ``AssertionError`` (``_poplar_executor.py``,
    ``_narrow_tensor``) before it compiles; it is also an :class:`EmulatorError`.
    """


def batch_dimension_error(name: str, t: Tensor, options: IPUOptions) -> Optional[str]:
    """poptorch's message when ``t``'s dim 0 does not split into ``F`` micro-batches, else None.

    The text is poptorch's (``_poplar_executor.py``, ``_narrow_tensor``; a 0-d
    tensor counts as dim 0 of size 1), followed by the input's name and what to do.
    """
    F = options.micro_batches
    b = t.size(0) if t.dim() else 1
    if b % F == 0:
        return None
    return (
        f"Invalid batch dimension: In the input {t.shape}, the batch dimension ({b}) must be a "
        f"multiple of Options.deviceIterations({options.device_iterations}) * "
        f"(Options.replicationFactor({options.replication_factor}) / "
        f"Options.inputReplicaGrouping.input_group_size(1)) * "
        f"Options.Training.gradientAccumulation({options.gradient_accumulation}) = {F} because "
        f"it is used to calculate the batch size which will be executed on the device in any "
        f"given iteration. For a full explanation see the batching semantics page of the "
        f"documentation. [graph_adapter: input {name}"
        + ("; a 0-d tensor cannot be split" if not t.dim() else "")
        + f"; build the loader with FixedSizeLoader(..., micro_batches={F})]"
    )


# --------------------------------------------------------------------------
# Input signatures, checked as poptorch's ArgsParser does
# --------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Sig:
    """What poptorch keeps from the first call to validate later ones."""

    kind: str  # "tensor", "tuple", "list", "dict", "value"
    pytype: type = object  # type(obj): poptorch compares types first
    dtype: Optional[torch.dtype] = None
    shape: Optional[torch.Size] = None
    children: Tuple[Tuple[Any, "_Sig"], ...] = ()
    value: Any = None


def _signature(obj: Any) -> _Sig:
    if isinstance(obj, Tensor):
        return _Sig("tensor", type(obj), obj.dtype, obj.shape)
    if isinstance(obj, (tuple, list)):
        return _Sig(type(obj).__name__, type(obj),
                    children=tuple((i, _signature(v)) for i, v in enumerate(obj)))
    if isinstance(obj, Mapping):
        return _Sig("dict", type(obj), children=tuple((k, _signature(v)) for k, v in obj.items()))
    return _Sig("value", type(obj), value=obj)


def _fail(msg: str) -> None:
    raise EmulatorError(msg + _RECOMPILE_HINT)


def _key_details(expected: Sequence[Any], provided: Sequence[Any]) -> str:
    details = []
    extra = [k for k in provided if k not in expected]
    if extra:
        details.append("Unexpected arguments: " + ", ".join(sorted(map(str, extra))))
    missing = [k for k in expected if k not in provided]
    if missing:
        details.append("Missing arguments: " + ", ".join(sorted(map(str, missing))))
    return ". ".join(details)


def _validate(sig: _Sig, obj: Any, name: str) -> None:
    if type(obj) is not sig.pytype:
        # As poptorch prints it: the two types' reprs, e.g. <class 'torch.Tensor'>.
        _fail(f"Type mismatch for {name}: expected {sig.pytype} but got {type(obj)}.")
    if sig.kind == "tensor":
        if obj.dtype != sig.dtype:
            _fail(f"Data type mismatch for {name}: expected {sig.dtype} but got {obj.dtype}.")
        if obj.shape != sig.shape:
            _fail(f"Shape mismatch for {name}: expected {sig.shape} but got {obj.shape}.")
    elif sig.kind == "dict":
        expected = [k for k, _ in sig.children]
        if set(expected) != set(obj.keys()):
            _fail(f"Keys mismatch for {name}: {_key_details(expected, list(obj.keys()))}.")
        for k, child in sig.children:
            _validate(child, obj[k], f"{name}[{k}]")
    elif sig.kind in ("tuple", "list"):
        if len(obj) != len(sig.children):
            _fail(f"Length mismatch for {name}: expected {len(sig.children)} elements but got {len(obj)}.")
        for i, child in sig.children:
            _validate(child, obj[i], f"{name}[{i}]")
    elif sig.value is not obj:
        try:
            same = bool(sig.value == obj)
        except Exception:  # noqa: BLE001 - anything incomparable differs
            same = False
        if not same:
            _fail(f"Value mismatch for {name}: expected {sig.value!r} but got {obj!r}.")


# --------------------------------------------------------------------------
# The emulator
# --------------------------------------------------------------------------
class IPUEmulator(HostModel):
    """A CPU stand-in for a poptorch ``trainingModel`` / ``inferenceModel``.

    Call it with one host batch (the forward's arguments, every tensor with
    dim 0 a multiple of ``F``), as you would call the poptorch model. Per call:

    1. the first call (per mode) checks that every tensor's dim 0 divides by
       ``F`` (poptorch's ``AssertionError`` text, as :class:`BatchDimensionError`;
       0-d tensors fail for F > 1), then records every argument's structure,
       keys, types, dtypes and shapes; later calls must match (``Missing
       arguments: ...``, ``Unexpected arguments: ...``, type, dtype and shape
       mismatches, so a wrong dim 0 later is a "Shape mismatch"; poptorch's
       messages, as :class:`EmulatorError`). A first call that fails, for any
       reason, records nothing: poptorch raises before it compiles;
    2. float64 inputs become float32, as poptorch narrows them; int64 inputs
       are checked to fit int32 (a ``RuntimeWarning`` if not) but stay int64
       on CPU unless ``narrow_ints=True``: some CPU kernels need int64 indices
       (``scatter_add_`` with an expanded index raised "expected scalar type
       Long but found Int" for a [56, 16] source here; the IPU takes int32);
       with ``options.half_inputs`` floating inputs are then cast to float16;
    3. dim 0 is split into ``F`` micro-batches, in poptorch's order
       (``[D, A, R]``, device iteration outermost); a host batch from
       ``FixedSizeLoader(micro_batches=F)`` gives the model a leading dim 1;
    4. training: for each of the ``D`` device iterations, the ``R * A``
       micro-batches' gradients are averaged (Mean, poptorch's default
       ``accumulationAndReplicationReductionType``), then one optimizer step;
       a micro-batch with no real graph (its ``graph_mask`` all False) adds no
       gradient and leaves buffers (BatchNorm statistics) as they were, and a
       step made only of such micro-batches takes no optimizer step. That is
       the emulator's choice, not poptorch's (the IPU runs every micro-batch):
       it keeps a loader's padding micro-batches from moving the weights;
    5. outputs come back stacked per output mode (see ``docs/ipu.md``) and
       narrowed as poptorch returns them: int64 -> int32, float64 -> float32.

    It never calls ``train()`` / ``eval()`` on the model (poptorch does not);
    its own ``.train()`` / ``.eval()`` switch between the two poptorch models
    it stands for and set the model's mode, as ``PoptorchRunner`` does. A
    training call runs forward, backward and the optimizer step
    (``steps_optimizer``). Replicas share one set of weights and run one after
    the other; buffers are updated by every micro-batch in that order, while
    on IPUs each replica keeps its own copy.
    """

    #: A training call steps the optimizer itself (the caller must not).
    steps_optimizer = True

    def __init__(
        self,
        model: nn.Module,
        options: Optional[IPUOptions] = None,
        optimizer: Optional[torch.optim.Optimizer] = None,
        training: Optional[bool] = None,
        loss_key: str = LOSS_KEY,
        narrow_inputs: bool = True,
        narrow_ints: bool = False,
        allow_new_shapes: bool = False,
    ) -> None:
        self.model = model
        self.allow_new_shapes = allow_new_shapes
        self.compiles = 0  # signatures recorded (poptorch: compilations)
        self.options = options if options is not None else IPUOptions()
        self.training = (optimizer is not None) if training is None else bool(training)
        self.optimizer = optimizer
        self.loss_key = loss_key
        self.narrow_inputs = narrow_inputs
        self.narrow_ints = narrow_ints
        self.steps = 0  # optimizer steps taken
        self.skipped_micro_batches = 0  # micro-batches with no real graph (rule 4)
        self._sigs: Dict[bool, Tuple[Tuple[str, ...], Dict[str, _Sig]]] = {}  # per mode
        try:
            self._forward_sig = inspect.signature(model.forward)
        except (TypeError, ValueError):
            self._forward_sig = None
        self._check_mode()

    # ---- the compiled-model interface ------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._check_mode()
        named = self._bind(args, kwargs)
        first = self.training not in self._sigs
        if first:
            self._check_batch_dims(named)
        self._check_signature(named)
        try:
            return self._run(args, kwargs)
        except BaseException:
            if first:  # poptorch raises before it compiles: nothing is kept
                self.destroy()
                self.compiles -= 1
            raise

    def _run(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        inputs = (tuple(args), dict(kwargs))
        if self.narrow_inputs:
            inputs = map_tensors(inputs, lambda t: narrow(t, ints=self.narrow_ints))
        if self.options.half_inputs:
            inputs = map_tensors(inputs, _to_half)
        F = self.options.micro_batches
        micro = [host_micro_batch(inputs, F, i) for i in range(F)]
        outs = self._train(micro) if self.training else self._infer(micro)
        return map_tensors(collect_outputs(outs, self.options), _narrow_output)

    @property
    def compile_count(self) -> int:
        """Signatures recorded, over both modes (poptorch: compilations)."""
        return self.compiles

    @property
    def host_module(self) -> nn.Module:
        return self.model

    def _set_mode(self, mode: bool) -> None:
        self.training = mode
        self.model.train(mode)
        if self.training:
            self._check_mode()  # poptorch's default optimizer when none was given

    def set_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Use ``optimizer`` from the next training call (poptorch: ``setOptimizer``)."""
        self.optimizer = optimizer

    # ---- poptorch's model API ------------------------------------------
    def isCompiled(self) -> bool:  # noqa: N802 (poptorch's name)
        return self.training in self._sigs

    def destroy(self) -> None:
        """Forget the compiled signature (as poptorch's ``destroy()`` would)."""
        self._sigs.pop(self.training, None)

    # ---- steps ------------------------------------------------------------
    def _check_mode(self) -> None:
        if self.training and self.optimizer is None:
            # poptorch.trainingModel's default optimizer.
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        if not self.training and self.options.gradient_accumulation != 1:
            raise ValueError(
                "gradient_accumulation > 1 is for training; poptorch's inferenceModel needs 1"
            )

    def _bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Dict[str, Any]:
        if self._forward_sig is None:
            named = {f"args[{i}]": a for i, a in enumerate(args)}
            named.update(kwargs)
            return named
        bound = self._forward_sig.bind(*args, **kwargs)
        named: Dict[str, Any] = {}
        for pname, value in bound.arguments.items():
            kind = self._forward_sig.parameters[pname].kind
            if kind == inspect.Parameter.VAR_POSITIONAL:
                for i, v in enumerate(value):
                    named[f"*{pname}[{i}]"] = v
            elif kind == inspect.Parameter.VAR_KEYWORD:
                named.update(value)
            else:
                named[pname] = value
        return named

    def _check_batch_dims(self, named: Dict[str, Any]) -> None:
        if self.options.micro_batches == 1:
            return
        for name, value in named.items():
            for tname, t in named_tensors(value, name):
                message = batch_dimension_error(tname, t, self.options)
                if message is not None:
                    raise BatchDimensionError(message)

    def _check_signature(self, named: Dict[str, Any]) -> None:
        if self.training not in self._sigs:
            self._sigs[self.training] = (tuple(named), {n: _signature(v) for n, v in named.items()})
            self.compiles += 1
            return
        try:
            self._validate_all(named)
        except EmulatorError:
            if not self.allow_new_shapes:
                raise
            # What poptorch's message advises: destroy() and run again (recompiles).
            self.destroy()
            self._check_batch_dims(named)
            self._check_signature(named)

    def _validate_all(self, named: Dict[str, Any]) -> None:
        names, sigs = self._sigs[self.training]
        if tuple(named) != names:
            details = _key_details(names, list(named)) or f"expected {list(names)}, got {list(named)}"
            raise EmulatorError(f"Keys mismatch for named arguments: {details}." + _RECOMPILE_HINT)
        for n in names:
            _validate(sigs[n], named[n], n)

    def _call_model(self, mb: Any) -> Any:
        """Run the model on one micro-batch ``(args, kwargs)`` under poptorch's dispatcher
        rules (:func:`~graph_adapter.ipu.dispatcher.dispatcher_rules`, the same rules as
        ``emulate_poptorch()`` and ``check()``): the first violation raises :class:`EmulatorError`."""
        args, kwargs = mb
        with dispatcher_rules(self.model, error=EmulatorError):
            return self.model(*args, **kwargs)

    def _micro_loss(self, out: Any) -> Tensor:
        """The loss to differentiate in one micro-batch's output."""
        loss = loss_of(out, self.loss_key)
        if loss.dim() != 0:
            raise ValueError(f"the loss must be a scalar (0-d) tensor, got shape {tuple(loss.shape)}")
        return loss

    def _train(self, micro: List[Any]) -> List[Any]:
        o = self.options
        per_step = o.replicas_times_accumulation
        outs = []
        for d in range(o.device_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            real = 0
            for j in range(per_step):
                mb = micro[d * per_step + j]
                empty = _has_no_graph(mb)
                saved = _buffers(self.model) if empty else None
                out = self._call_model(mb)
                loss = self._micro_loss(out)
                if empty:  # rule 4: no gradient, buffers as they were
                    _restore(self.model, saved)
                    self.skipped_micro_batches += 1
                else:
                    (loss / per_step).backward()
                    real += 1
                outs.append(map_tensors(out, lambda t: t.detach()))
            if real:
                self.optimizer.step()
                self.steps += 1
        return outs

    def _infer(self, micro: List[Any]) -> List[Any]:
        with torch.no_grad():
            return [self._call_model(mb) for mb in micro]


def _to_half(t: Tensor) -> Tensor:
    return t.to(torch.float16) if t.is_floating_point() else t


def _narrow_output(t: Tensor) -> Tensor:
    """poptorch returns int64 outputs as int32 and float64 as float32."""
    if t.dtype == torch.int64:
        return t.to(torch.int32)
    if t.dtype == torch.float64:
        return t.to(torch.float32)
    return t


def _has_no_graph(mb: Any) -> bool:
    """True when a micro-batch carries a ``graph_mask`` and every entry of it is False."""
    masks = [t for name, t in named_tensors(mb, "mb") if name.endswith(f"[{GRAPH_MASK}]")]
    return bool(masks) and not any(bool(m.any()) for m in masks)


def _buffers(model: nn.Module) -> Dict[str, Tensor]:
    return {n: b.detach().clone() for n, b in model.named_buffers()}


def _restore(model: nn.Module, saved: Dict[str, Tensor]) -> None:
    with torch.no_grad():
        for n, b in model.named_buffers():
            b.copy_(saved[n])


# --------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------
def _selection(options: IPUOptions) -> List[List[int]]:
    """Micro-batch indices per returned row, in return order (poptorch/PopART layout [D, A, R])."""
    D, A, R = options.device_iterations, options.gradient_accumulation, options.replication_factor

    def idx(d: int, a: int, r: int) -> int:
        return (d * A + a) * R + r

    mode = options.output_mode
    if mode == "all":
        return [[i] for i in range(D * A * R)]
    if mode == "every_n":
        N = options.output_return_period
        return [[idx(d, a, r)] for d in range(N - 1, D, N) for a in range(A) for r in range(R)]
    if mode == "final":
        return [[idx(D - 1, A - 1, r)] for r in range(R)]
    # sum: one row per replica, summed over every device iteration and accumulation step
    return [[idx(d, a, r) for d in range(D) for a in range(A)] for r in range(R)]


def collect_outputs(outs: List[Any], options: IPUOptions) -> Any:
    """Stack per-micro-batch outputs as poptorch returns them for ``options.output_mode``.

    ``k`` rows are returned (``F`` for all, ``(D / N) * A * R`` for every_n,
    ``R`` for final and sum). With ``k == 1`` each output keeps its
    per-micro-batch shape; otherwise a 0-d output becomes ``[k]`` and an
    output of shape ``[s0, ...]`` becomes ``[k * s0, ...]`` (concatenated on
    dim 0).
    """
    rows = _selection(options)

    def combine(values: List[Any]) -> Any:
        first = values[0]
        if not isinstance(first, Tensor):
            return first
        picked = []
        for group in rows:
            ts = [values[i] for i in group]
            picked.append(ts[0] if len(ts) == 1 else torch.stack(ts).sum(0))
        if len(picked) == 1:
            return picked[0]
        if first.dim() == 0:
            return torch.stack(picked)
        return torch.cat(picked, dim=0)

    return _zip_map(outs, combine)


def _zip_map(items: List[Any], fn: Callable[[List[Any]], Any]) -> Any:
    """One output of the structure of ``items[0]``: ``fn`` of each leaf's values across ``items``."""
    # Only tuples, lists and dicts are walked, as on the way in (inputs.map_tensors).
    flats = [pytree.tree_flatten(it, is_leaf=lambda v: not isinstance(v, (tuple, list, dict)))
             for it in items]
    spec = flats[0][1]
    columns = zip(*(leaves for leaves, _ in flats))
    return pytree.tree_unflatten([fn(list(col)) for col in columns], spec)
