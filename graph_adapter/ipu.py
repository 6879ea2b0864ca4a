"""The IPU path: one description of a run, the poptorch backend, a CPU emulator.

* :class:`IPUOptions` describes a run once for every IPU backend: device
  iterations ``D``, replication ``R``, gradient accumulation ``A`` and the
  output mode. ``options.micro_batches`` (``F = D * R * A``) is what
  ``FixedSizeLoader(micro_batches=F)`` must stack; ``options.to_poptorch()``
  builds the matching ``poptorch.Options``.
* ``compile_ipu(wrapped, "poptorch", ...)`` builds ``poptorch.trainingModel``
  (with an optimizer) or ``poptorch.inferenceModel`` on the dispatcher (never
  ``Jit.traceModel(True)``). poptorch is imported lazily: importing this module
  never imports it, and when it is missing the ``ImportError`` says so and
  chains the original one.
* ``compile_ipu(wrapped, "ipu-emulator", ...)`` returns an :class:`IPUEmulator`:
  a callable that does on CPU what poptorch does with inputs and outputs
  (input checks with poptorch's messages, dim-0 split into ``F``
  micro-batches, int64/float64 narrowing, gradient accumulation with Mean
  reduction and one optimizer step per accumulated step, outputs stacked per
  output mode). It lets IPU training code be tested without hardware.

What was verified in poptorch's sources, and what is assumed, is written down
in ``docs/ipu.md``.
"""
from __future__ import annotations

import dataclasses
import inspect
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

__all__ = [
    "OUTPUT_MODES",
    "IPUOptions",
    "IPUEmulator",
    "EmulatorError",
    "compile_ipu",
    "import_poptorch",
    "narrow",
    "collect_outputs",
    "PoptorchRunner",
    "register_pyg_arg_parser",
    "make_pyg_arg_parser",
]

#: The output modes, with the poptorch ``OutputMode`` member each maps to.
OUTPUT_MODES = {"all": "All", "final": "Final", "sum": "Sum", "every_n": "EveryN"}

_INT32 = torch.iinfo(torch.int32)

# poptorch's ArgsParser closes every input-mismatch error with this sentence.
_RECOMPILE_HINT = (
    "\nThis error occurred because the inputs passed at runtime don't match the inputs used "
    "to compile the model.\nTo recompile the model for the new inputs create a new "
    "inferenceModel / trainingModel wrapper or call destroy() on the current one and try again."
)


class EmulatorError(RuntimeError):
    """What poptorch would raise (``poptorch.Error``) for the same call."""


# --------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------
def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class IPUOptions:
    """How a model runs on IPUs, for every IPU backend (poptorch and the emulator).

    Args:
        device_iterations: ``D``, steps run on the device per host call.
        replication_factor: ``R``, data-parallel replicas.
        gradient_accumulation: ``A``, micro-batches whose gradients are
            reduced (Mean, poptorch's default) before one optimizer step.
        output_mode: ``"all"`` (every micro-batch), ``"final"`` (the last
            one of each replica), ``"sum"`` (summed per replica) or
            ``"every_n"`` (every ``output_return_period``-th device iteration).
        output_return_period: ``N`` for ``"every_n"``; must divide ``D``.

    ``micro_batches`` (``F = D * R * A``) is the leading dim every host-batch
    tensor must carry: build the loader with ``FixedSizeLoader(...,
    micro_batches=options.micro_batches)``.

    Note: poptorch's own default output mode is ``Final`` for training and
    ``All`` for inference; :meth:`to_poptorch` always sets the mode named
    here, so the backends agree.
    """

    device_iterations: int = 1
    replication_factor: int = 1
    gradient_accumulation: int = 1
    output_mode: str = "all"
    output_return_period: int = 1

    def __post_init__(self) -> None:
        _positive_int("device_iterations", self.device_iterations)
        _positive_int("replication_factor", self.replication_factor)
        _positive_int("gradient_accumulation", self.gradient_accumulation)
        _positive_int("output_return_period", self.output_return_period)
        if self.output_mode not in OUTPUT_MODES:
            raise ValueError(
                f"output_mode={self.output_mode!r}; choose one of {sorted(OUTPUT_MODES)}"
            )
        if self.output_mode == "every_n":
            if self.device_iterations % self.output_return_period:
                raise ValueError(
                    f"output_mode='every_n' returns every N-th device iteration: "
                    f"output_return_period={self.output_return_period} must divide "
                    f"device_iterations={self.device_iterations}"
                )
        elif self.output_return_period != 1:
            raise ValueError(
                f"output_return_period={self.output_return_period} is only meaningful with "
                f"output_mode='every_n' (got {self.output_mode!r})"
            )

    @property
    def micro_batches(self) -> int:
        """``F = device_iterations * replication_factor * gradient_accumulation``."""
        return self.device_iterations * self.replication_factor * self.gradient_accumulation

    @property
    def replicas_times_accumulation(self) -> int:
        """Micro-batches whose gradients one optimizer step averages (``R * A``)."""
        return self.replication_factor * self.gradient_accumulation

    def to_poptorch(self, poptorch: Any = None, base: Any = None) -> Any:
        """The matching ``poptorch.Options``.

        Args:
            poptorch: the poptorch module to use (default: import it; tests
                pass a stand-in).
            base: an existing ``poptorch.Options`` to fill in instead of a new one.

        Sets ``deviceIterations``, ``replicationFactor``,
        ``Training.gradientAccumulation``, ``outputMode`` and, explicitly,
        ``Training.accumulationAndReplicationReductionType(Mean)``. Never
        touches ``Jit.traceModel`` (it raises since SDK 3.1).
        """
        pt = poptorch if poptorch is not None else import_poptorch()
        opts = base if base is not None else pt.Options()
        opts.deviceIterations(self.device_iterations)
        opts.replicationFactor(self.replication_factor)
        opts.Training.gradientAccumulation(self.gradient_accumulation)
        opts.Training.accumulationAndReplicationReductionType(pt.ReductionType.Mean)
        mode = getattr(pt.OutputMode, OUTPUT_MODES[self.output_mode])
        if self.output_mode == "every_n":
            opts.outputMode(mode, self.output_return_period)
        else:
            opts.outputMode(mode)
        return opts

    def check_batch(self, flat: Any) -> List[str]:
        """Problems poptorch would have splitting ``flat``'s tensors by ``F`` (empty if none)."""
        problems = []
        for name, t in _named_tensors(flat, "batch"):
            problems.extend(_split_problems(name, t, self))
        return problems


# --------------------------------------------------------------------------
# poptorch, lazily
# --------------------------------------------------------------------------
def import_poptorch() -> Any:
    """``import poptorch``, or an ``ImportError`` that says where it comes from.

    The original error is chained (``__cause__``) and quoted.
    """
    try:
        import poptorch  # noqa: F401  (ships with the Graphcore Poplar SDK)
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise ImportError(
            "graph_adapter's 'poptorch' backend needs poptorch, which ships with Graphcore's "
            "Poplar SDK and is not on PyPI: install the SDK and its poptorch wheel, then "
            "`source enable.sh`. To test IPU code without hardware use "
            f"backend='ipu-emulator'. (Original error: {exc!r})"
        ) from exc
    return poptorch


_REGISTERED_WITH: set = set()  # id() of the poptorch modules registered with


def make_pyg_arg_parser(poptorch: Any) -> Any:
    """A ``poptorch.ICustomArgParser`` for PyG ``Data``/``Batch``, built on the core round trip.

    ``yieldTensors`` gives ``flatten(obj)``'s tensors in key order;
    ``reconstruct`` rebuilds the same class from the original's static spec
    (``unflatten(..., spec.static())``, the traceable path).
    """
    from .spec import flatten, unflatten

    class PyGArgParser(poptorch.ICustomArgParser):  # type: ignore[misc,name-defined]
        def yieldTensors(self, struct):  # noqa: N802 (poptorch's name)
            flat, _ = flatten(struct)
            yield from flat.values()

        def reconstruct(self, original, tensor_iterator):
            flat, spec = flatten(original)
            new = {k: next(tensor_iterator) for k in flat}
            return unflatten(new, spec.static(), validate=False)

    return PyGArgParser()


def register_pyg_arg_parser(poptorch: Any = None) -> bool:
    """Let a PyG ``Data``/``Batch`` be passed straight to a poptorch model.

    Registers :func:`make_pyg_arg_parser`'s parser for ``Data``,
    ``HeteroData`` and their batch classes (what graphium and
    poptorch_geometric relied on). Idempotent; returns True when registered
    now, False when it already was.
    """
    pt = poptorch if poptorch is not None else import_poptorch()
    if id(pt) in _REGISTERED_WITH:
        return False
    parser = make_pyg_arg_parser(pt)
    for cls in _pyg_classes():
        pt.registerCustomArgParser(cls, parser)
    _REGISTERED_WITH.add(id(pt))
    return True


def _pyg_classes() -> List[type]:
    from torch_geometric.data import Batch, Data, HeteroData

    classes = [Data, HeteroData, Batch]
    for c in (Data, HeteroData):
        classes.append(type(Batch(_base_cls=c)))  # DataBatch, HeteroDataBatch
    return classes


def _build_poptorch(
    wrapped: nn.Module,
    options: IPUOptions,
    optimizer: Optional[torch.optim.Optimizer],
    training: bool,
    poptorch: Any = None,
    poptorch_options: Any = None,
    pyg_arg_parser: bool = True,
    allow_new_shapes: bool = False,
    **kwargs: Any,
) -> Any:
    pt = poptorch if poptorch is not None else import_poptorch()
    if pyg_arg_parser:
        register_pyg_arg_parser(pt)
    opts = options.to_poptorch(pt, base=poptorch_options)
    if training:
        model = _MarkLoss(wrapped, pt)
        return PoptorchRunner(pt.trainingModel(model, options=opts, optimizer=optimizer, **kwargs),
                              allow_new_shapes)
    if options.gradient_accumulation != 1:
        raise ValueError(
            "gradient_accumulation > 1 is for training; poptorch's inferenceModel needs 1"
        )
    return PoptorchRunner(pt.inferenceModel(wrapped, options=opts, **kwargs), allow_new_shapes)


class _MarkLoss(nn.Module):
    """Marks the ``"loss"`` output with ``poptorch.identity_loss`` (poptorch needs one loss)."""

    def __init__(self, model: nn.Module, poptorch: Any, loss_key: str = "loss") -> None:
        super().__init__()
        self.model = model
        self._poptorch = poptorch
        self.loss_key = loss_key

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        out = self.model(*args, **kwargs)
        if isinstance(out, Tensor):
            return self._poptorch.identity_loss(out, reduction="none")
        if isinstance(out, Mapping) and self.loss_key in out:
            out = dict(out)
            out[self.loss_key] = self._poptorch.identity_loss(out[self.loss_key], reduction="none")
            return out
        raise TypeError(
            f"a training model must return its loss: a tensor, or a dict with key "
            f"{self.loss_key!r} (ipu_wrap(model, loss_fn=...) does that); got {type(out).__name__}"
        )


class PoptorchRunner:
    """The poptorch model, called with host batches narrowed on the host first.

    int64 inputs (PyG's index tensors) are fed as int32 and float64 as
    float32, which is what poptorch would do on the device anyway; doing it
    here checks the int32 range and halves the host-to-IPU traffic. Every
    other attribute (``destroy``, ``compile``, ``setOptimizer``, ...) is the
    poptorch model's.
    """

    def __init__(self, poptorch_model: Any, allow_new_shapes: bool = False) -> None:
        self.poptorch_model = poptorch_model
        self.allow_new_shapes = allow_new_shapes
        self._signature: Optional[_Sig] = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = _map_tensors((tuple(args), dict(kwargs)), narrow)
        sig = _signature((args, kwargs))
        if self.allow_new_shapes and self._signature is not None and sig != self._signature:
            # poptorch's own advice for new inputs: destroy() and call again (recompiles).
            self.poptorch_model.destroy()
        self._signature = sig
        return self.poptorch_model(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["poptorch_model"], name)


# --------------------------------------------------------------------------
# Inputs: naming, narrowing, splitting, signature checks
# --------------------------------------------------------------------------
def _named_tensors(obj: Any, name: str):
    """``(name, tensor)`` for every tensor in a nest of tuples/lists/dicts, poptorch-style names."""
    if isinstance(obj, Tensor):
        yield name, obj
    elif isinstance(obj, (tuple, list)):
        for i, v in enumerate(obj):
            yield from _named_tensors(v, f"{name}[{i}]")
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            yield from _named_tensors(v, f"{name}[{k}]")


def _map_tensors(obj: Any, fn: Callable[[Tensor], Any]) -> Any:
    if isinstance(obj, Tensor):
        return fn(obj)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_map_tensors(v, fn) for v in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(_map_tensors(v, fn) for v in obj)
    if isinstance(obj, Mapping):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    return obj


def narrow(t: Tensor, name: str = "input", ints: bool = True) -> Tensor:
    """What poptorch does to an input's dtype: int64 -> int32, float64 -> float32.

    Warns when int64 values do not fit in int32 (the IPU would wrap them).
    With ``ints=False`` int64 values are range-checked but kept int64.
    """
    if t.dtype == torch.int64:
        if not ints:
            return _check_int32(t, name)
        return _check_int32(t, name).to(torch.int32)
    if t.dtype == torch.float64:
        return t.to(torch.float32)
    return t


def _check_int32(t: Tensor, name: str) -> Tensor:
    if t.numel() and (int(t.min()) < _INT32.min or int(t.max()) > _INT32.max):
        warnings.warn(
            f"{name}: int64 values outside the int32 range are narrowed to int32 "
            f"(as poptorch does) and wrap around",
            RuntimeWarning,
            stacklevel=4,
        )
    return t


def _split_problems(name: str, t: Tensor, options: IPUOptions) -> List[str]:
    F = options.micro_batches
    if F == 1:
        return []
    how = (
        f"deviceIterations ({options.device_iterations}) * replicationFactor "
        f"({options.replication_factor}) * gradientAccumulation "
        f"({options.gradient_accumulation}) = {F}"
    )
    if t.dim() == 0:
        return [f"{name}: a 0-d tensor cannot be split into {F} micro-batches ({how})"]
    if t.size(0) % F:
        return [
            f"{name}: dim 0 has size {t.size(0)}, which is not a multiple of {how}; build the "
            f"loader with FixedSizeLoader(..., micro_batches={F})"
        ]
    return []


@dataclasses.dataclass(frozen=True)
class _Sig:
    """What poptorch keeps from the first call to validate later ones."""

    kind: str  # "tensor", "tuple", "list", "dict", "value"
    dtype: Optional[torch.dtype] = None
    shape: Optional[torch.Size] = None
    children: Tuple[Tuple[Any, "_Sig"], ...] = ()
    value: Any = None


def _signature(obj: Any) -> _Sig:
    if isinstance(obj, Tensor):
        return _Sig("tensor", obj.dtype, obj.shape)
    if isinstance(obj, (tuple, list)):
        return _Sig(type(obj).__name__, children=tuple((i, _signature(v)) for i, v in enumerate(obj)))
    if isinstance(obj, Mapping):
        return _Sig("dict", children=tuple((k, _signature(v)) for k, v in obj.items()))
    return _Sig("value", value=obj)


def _validate(sig: _Sig, obj: Any, name: str) -> None:
    def fail(msg: str) -> None:
        raise EmulatorError(msg + _RECOMPILE_HINT)

    got = (
        "tensor" if isinstance(obj, Tensor)
        else "dict" if isinstance(obj, Mapping)
        else type(obj).__name__ if isinstance(obj, (tuple, list)) else "value"
    )
    if got != sig.kind:
        fail(f"Type mismatch for {name}: expected {sig.kind} but got {type(obj).__name__}.")
    if sig.kind == "tensor":
        if obj.dtype != sig.dtype:
            fail(f"Data type mismatch for {name}: expected {sig.dtype} but got {obj.dtype}.")
        if obj.shape != sig.shape:
            fail(f"Shape mismatch for {name}: expected {sig.shape} but got {obj.shape}.")
    elif sig.kind == "dict":
        expected = {k for k, _ in sig.children}
        provided = set(obj.keys())
        if expected != provided:
            details = []
            extra = provided - expected
            if extra:
                details.append("Unexpected arguments: " + ", ".join(sorted(map(str, extra))))
            missing = expected - provided
            if missing:
                details.append("Missing arguments: " + ", ".join(sorted(map(str, missing))))
            fail(f"Keys mismatch for {name}: {'. '.join(details)}.")
        for k, child in sig.children:
            _validate(child, obj[k], f"{name}[{k}]")
    elif sig.kind in ("tuple", "list"):
        if len(obj) != len(sig.children):
            fail(f"Length mismatch for {name}: expected {len(sig.children)} elements but got {len(obj)}.")
        for i, child in sig.children:
            _validate(child, obj[i], f"{name}[{i}]")
    elif sig.value is not obj:
        try:
            same = bool(sig.value == obj)
        except Exception:  # noqa: BLE001 - anything incomparable differs
            same = False
        if not same:
            fail(f"Value mismatch for {name}: expected {sig.value!r} but got {obj!r}.")


# --------------------------------------------------------------------------
# The emulator
# --------------------------------------------------------------------------
class IPUEmulator:
    """A CPU stand-in for a poptorch ``trainingModel`` / ``inferenceModel``.

    Call it with one host batch (the forward's arguments, every tensor with
    dim 0 a multiple of ``F``), as you would call the poptorch model. Per call:

    1. the first call records every argument's structure, keys, dtypes and
       shapes; later calls must match (``Missing arguments: ...``,
       ``Unexpected arguments: ...``, dtype and shape mismatches; poptorch's
       messages, as :class:`EmulatorError`);
    2. every tensor's dim 0 must divide by ``F`` (0-d tensors fail for F > 1);
    3. float64 inputs become float32, as poptorch narrows them; int64 inputs
       are checked to fit int32 (a ``RuntimeWarning`` if not) but stay int64
       on CPU unless ``narrow_ints=True``: some CPU kernels need int64 indices
       (``scatter_add_`` with an expanded index raised "expected scalar type
       Long but found Int" for a [56, 16] source here; the IPU takes int32);
    4. dim 0 is split into ``F`` micro-batches, in poptorch's order
       (``[D, A, R]``, device iteration outermost); a host batch from
       ``FixedSizeLoader(micro_batches=F)`` gives the model a leading dim 1;
    5. training: for each of the ``D`` device iterations, the ``R * A``
       micro-batches' gradients are averaged (Mean, poptorch's default
       ``accumulationAndReplicationReductionType``), then one optimizer step;
    6. outputs come back stacked per output mode (see ``docs/ipu.md``).

    Replicas share one set of weights and run one after the other; buffers
    (BatchNorm statistics) are updated by every micro-batch in that order,
    while on IPUs each replica keeps its own copy.
    """

    def __init__(
        self,
        model: nn.Module,
        options: Optional[IPUOptions] = None,
        optimizer: Optional[torch.optim.Optimizer] = None,
        training: Optional[bool] = None,
        loss_key: str = "loss",
        narrow_inputs: bool = True,
        narrow_ints: bool = False,
        allow_new_shapes: bool = False,
    ) -> None:
        self.model = model
        self.allow_new_shapes = allow_new_shapes
        self.compiles = 0  # signatures recorded (poptorch: compilations)
        self.options = options if options is not None else IPUOptions()
        self.training = (optimizer is not None) if training is None else bool(training)
        if self.training and optimizer is None:
            # poptorch.trainingModel's default optimizer.
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        if not self.training and self.options.gradient_accumulation != 1:
            raise ValueError(
                "gradient_accumulation > 1 is for training; poptorch's inferenceModel needs 1"
            )
        self.optimizer = optimizer
        self.loss_key = loss_key
        self.narrow_inputs = narrow_inputs
        self.narrow_ints = narrow_ints
        self._sig: Optional[Tuple[Tuple[str, ...], Dict[str, _Sig]]] = None
        try:
            self._forward_sig = inspect.signature(model.forward)
        except (TypeError, ValueError):
            self._forward_sig = None
        self.steps = 0  # optimizer steps taken

    # ---- poptorch's model API ------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        named = self._bind(args, kwargs)
        self._check_signature(named)
        problems = []
        for name, value in named.items():
            for tname, t in _named_tensors(value, name):
                problems.extend(_split_problems(tname, t, self.options))
        if problems:
            raise EmulatorError("Invalid batch dimension: " + "; ".join(problems))
        inputs = (tuple(args), dict(kwargs))
        if self.narrow_inputs:
            inputs = _map_tensors(inputs, lambda t: narrow(t, ints=self.narrow_ints))
        micro = self._split(inputs)
        outs = self._train(micro) if self.training else self._infer(micro)
        return collect_outputs(outs, self.options)

    def isCompiled(self) -> bool:  # noqa: N802 (poptorch's name)
        return self._sig is not None

    def destroy(self) -> None:
        """Forget the compiled signature (as poptorch's ``destroy()`` would)."""
        self._sig = None

    # ---- steps ------------------------------------------------------------
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

    def _check_signature(self, named: Dict[str, Any]) -> None:
        if self._sig is None:
            self._sig = (tuple(named), {n: _signature(v) for n, v in named.items()})
            self.compiles += 1
            return
        if self.allow_new_shapes:
            try:
                self._validate_all(named)
            except EmulatorError:
                # What poptorch's message advises: destroy() and run again (recompiles).
                self._sig = None
                self._check_signature(named)
            return
        self._validate_all(named)

    def _validate_all(self, named: Dict[str, Any]) -> None:
        names, sigs = self._sig
        if tuple(named) != names:
            extra = [n for n in named if n not in sigs]
            missing = [n for n in names if n not in named]
            details = []
            if extra:
                details.append("Unexpected arguments: " + ", ".join(sorted(extra)))
            if missing:
                details.append("Missing arguments: " + ", ".join(sorted(missing)))
            if not details:
                details.append(f"expected {list(names)}, got {list(named)}")
            raise EmulatorError(f"Keys mismatch for named arguments: {'. '.join(details)}." + _RECOMPILE_HINT)
        for n in names:
            _validate(sigs[n], named[n], n)

    def _split(self, inputs: Any) -> List[Any]:
        F = self.options.micro_batches
        if F == 1:
            return [inputs]
        return [
            _map_tensors(inputs, lambda t, i=i: t.reshape(F, -1, *t.shape[1:])[i])
            for i in range(F)
        ]

    def _call_model(self, mb: Any) -> Any:
        args, kwargs = mb
        return self.model(*args, **kwargs)

    def _loss_of(self, out: Any) -> Tensor:
        if isinstance(out, Tensor):
            return out
        if isinstance(out, Mapping) and self.loss_key in out:
            return out[self.loss_key]
        raise TypeError(
            f"a training model must return its loss: a tensor, or a dict with key "
            f"{self.loss_key!r} (ipu_wrap(model, loss_fn=...) does that); got {type(out).__name__}"
        )

    def _train(self, micro: List[Dict[str, Any]]) -> List[Any]:
        o = self.options
        per_step = o.replicas_times_accumulation
        self.model.train()
        outs = []
        for d in range(o.device_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            for j in range(per_step):
                out = self._call_model(micro[d * per_step + j])
                loss = self._loss_of(out)
                if loss.dim() != 0:
                    raise ValueError(
                        f"the loss must be a scalar (0-d) tensor, got shape {tuple(loss.shape)}"
                    )
                (loss / per_step).backward()
                outs.append(_map_tensors(out, lambda t: t.detach()))
            self.optimizer.step()
            self.steps += 1
        return outs

    def _infer(self, micro: List[Dict[str, Any]]) -> List[Any]:
        with torch.no_grad():
            return [self._call_model(mb) for mb in micro]


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

    def combine(path_values: List[Any]) -> Any:
        first = path_values[0]
        if not isinstance(first, Tensor):
            return first
        picked = []
        for group in rows:
            ts = [path_values[i] for i in group]
            picked.append(ts[0] if len(ts) == 1 else torch.stack(ts).sum(0))
        if len(picked) == 1:
            return picked[0]
        if first.dim() == 0:
            return torch.stack(picked)
        return torch.cat(picked, dim=0)

    return _zip_map(outs, combine)


def _zip_map(items: List[Any], fn: Callable[[List[Any]], Any]) -> Any:
    first = items[0]
    if isinstance(first, Mapping):
        return {k: _zip_map([it[k] for it in items], fn) for k in first}
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(_zip_map([it[i] for it in items], fn) for i in range(len(first))))
    if isinstance(first, (tuple, list)):
        return type(first)(_zip_map([it[i] for it in items], fn) for i in range(len(first)))
    return fn(items)


# --------------------------------------------------------------------------
# Entry point (graph_adapter.compile dispatches "poptorch"/"ipu-emulator" here)
# --------------------------------------------------------------------------
BACKENDS = ("poptorch", "ipu-emulator")


def compile_ipu(
    wrapped: nn.Module,
    backend: str,
    options: Optional[IPUOptions] = None,
    optimizer: Optional[torch.optim.Optimizer] = None,
    **kwargs: Any,
) -> Any:
    """Compile ``wrapped`` (a module taking a flat dict) for the IPU or its CPU emulation.

    Args:
        wrapped: e.g. ``ipu_wrap(model, loss_fn)``; its forward takes a flat
            dict and returns a dict (``"loss"`` when training).
        backend: ``"poptorch"`` or ``"ipu-emulator"``.
        options: an :class:`IPUOptions` or a dict of its fields (default: all
            ones, output mode all).
        optimizer: a ``torch.optim`` optimizer (or a ``poptorch.optim`` one for
            the poptorch backend); training when given.
        kwargs: ``training`` forces training (poptorch's default SGD
            lr=0.01) or inference. For ``"poptorch"``: ``poptorch`` (a module to use instead of
            importing it), ``poptorch_options`` (a ``poptorch.Options`` to fill
            in), ``pyg_arg_parser`` (register the PyG arg parser, default
            True), ``allow_new_shapes`` (on a new input signature, ``destroy()``
            and recompile, as poptorch's error message advises); the rest go to ``poptorch.trainingModel`` /
            ``inferenceModel``. For ``"ipu-emulator"``: ``loss_key``,
            ``narrow_inputs``, ``narrow_ints``, ``allow_new_shapes`` (re-record the signature).

    Returns:
        the poptorch model, or an :class:`IPUEmulator`. Both are called with
        one host batch whose tensors carry a leading dim ``options.micro_batches``.
    """
    if options is None:
        options = IPUOptions()
    elif isinstance(options, Mapping):
        options = IPUOptions(**options)
    if not isinstance(options, IPUOptions):
        raise TypeError(f"options must be a graph_adapter.IPUOptions, got {type(options).__name__}")
    training = kwargs.pop("training", None)
    training = (optimizer is not None) if training is None else bool(training)
    if backend == "ipu-emulator":
        return IPUEmulator(wrapped, options, optimizer=optimizer, training=training, **kwargs)
    if backend == "poptorch":
        return _build_poptorch(wrapped, options, optimizer, training, **kwargs)
    raise ValueError(f"backend={backend!r}; the IPU backends are {BACKENDS}")
