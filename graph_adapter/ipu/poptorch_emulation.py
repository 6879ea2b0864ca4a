"""``emulate_poptorch()``: an emulated ``poptorch`` module, on CPU, for code written against poptorch.

Nothing here runs on an IPU. ``emulate_poptorch()`` puts a module named
``poptorch`` in ``sys.modules`` (with a module spec, so
``importlib.util.find_spec("poptorch")`` and lightning-utilities'
``package_available("poptorch")`` find it) and restores what was there when
used as a context manager::

    with graph_adapter.ipu.emulate_poptorch() as poptorch:
        model = poptorch.trainingModel(net, options=opts, optimizer=opt)
        out = model(host_batch)

It covers what lightning-graphcore 0.1.0 and ordinary poptorch scripts use
(read in their sources): ``Options`` (``deviceIterations``,
``replicationFactor``, ``Training.gradientAccumulation``,
``Training.accumulationAndReplicationReductionType``, ``outputMode``,
``randomSeed``, ``toDict``, ...), ``trainingModel`` / ``inferenceModel``
returning a :class:`PoplarExecutor` (``__call__``, ``compile``,
``isCompiled``, ``copyWeightsToHost``, ``setOptimizer``,
``attachToDevice``, ``detachFromDevice``, ``destroy``, ...),
``identity_loss``, ``isRunningOnIpu``, ``DataLoader`` (``batch_size x F``
samples a host batch, as poptorch's combines them), ``ipuHardwareIsAvailable``
(True: the emulated IPUs are "available"), ``ICustomArgParser`` /
``registerCustomArgParser``, the enums, ``optim`` (torch's optimizers) and
``Error``.

An executor runs on :class:`~graph_adapter.ipu.IPUEmulator` (input checks,
the split into ``F`` micro-batches, accumulation, output modes) and runs each
forward under :func:`graph_adapter.checker.dispatcher_rules`: ``.cpu()``,
``.item()``, data-dependent shapes, ops poptorch has no handler for and
reassigned buffers raise :class:`~graph_adapter.ipu.EmulatorError` with
poptorch's message. A training model needs a loss marked with
``identity_loss`` or made by a ``torch.nn`` loss ("Couldn't find a loss in
graph!" otherwise). What is emulated and what is not: ``docs/ipu.md``.
"""
from __future__ import annotations

import abc
import copy
import enum
import importlib.machinery
import sys
import threading
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from .dispatcher import dispatcher_rules
from .emulator import EmulatorError, IPUEmulator
from .options import IPUOptions

__all__ = ["emulate_poptorch", "PoplarExecutor"]

#: The ``torch.nn.functional`` losses poptorch recognises as a loss without ``identity_loss``.
_BUILTIN_LOSSES = {
    "l1_loss", "mse_loss", "cross_entropy", "nll_loss", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "smooth_l1_loss", "huber_loss", "kl_div",
    "soft_margin_loss", "multilabel_soft_margin_loss", "cosine_embedding_loss",
    "margin_ranking_loss", "hinge_embedding_loss", "poisson_nll_loss", "gaussian_nll_loss",
    "triplet_margin_loss", "ctc_loss",
}


# --------------------------------------------------------------------------
# Enums (values as in poptorch's python/enums.py)
# --------------------------------------------------------------------------
class OutputMode(enum.IntEnum):
    Final = 0
    EveryN = 1
    All = 2
    Sum = 3
    Default = 4  # All for inference, Final for training


class ReductionType(enum.IntEnum):
    Sum = 0
    Mean = 1
    NoReduction = 2


class DataLoaderMode(enum.IntEnum):
    Sync = 0
    Async = 1
    AsyncRebatched = 2


_MODE_NAMES = {OutputMode.All: "all", OutputMode.Final: "final", OutputMode.Sum: "sum",
               OutputMode.EveryN: "every_n"}


# --------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------
def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"poptorch.Options.{name} must be a positive int, got {value!r}")
    return value


class _Recorded:
    """Setters poptorch has that change nothing on CPU: the value is recorded in ``toDict()``."""

    _RECORDED: Tuple[str, ...] = ()

    def __init__(self) -> None:
        self._values: Dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        if name in type(self)._RECORDED:
            def setter(*args: Any, **kwargs: Any) -> "_Recorded":
                self._values[name] = args[0] if len(args) == 1 and not kwargs else (args, kwargs)
                return self
            return setter
        raise AttributeError(
            f"{type(self).__name__}.{name} is not emulated by graph_adapter's poptorch emulation "
            f"(docs/ipu.md lists what is)")


class _Training(_Recorded):
    _RECORDED = ("setAutomaticLossScaling", "setMeanAccumulationAndReplicationReductionStrategy")

    def __init__(self) -> None:
        super().__init__()
        self.gradient_accumulation = 1
        self.reduction_type = ReductionType.Mean

    def gradientAccumulation(self, n: int) -> "_Training":  # noqa: N802 (poptorch's names)
        self.gradient_accumulation = _positive("Training.gradientAccumulation", n)
        return self

    def accumulationAndReplicationReductionType(self, reduction: ReductionType) -> "_Training":  # noqa: N802
        self.reduction_type = ReductionType(reduction)
        return self


class _Jit:
    def traceModel(self, trace: bool) -> None:  # noqa: N802
        if trace:  # removed in Poplar SDK 3.1: the dispatcher is the only compiler
            raise EmulatorError("Options.Jit.traceModel(True) is not supported since Poplar SDK 3.1: "
                                "models are compiled by the dispatcher")


class _Precision(_Recorded):
    _RECORDED = ("setPartialsType", "enableStochasticRounding", "enableFloatingPointExceptions",
                 "halfFloatCasting", "runningStatisticsAlwaysFloat")


class _Distributed:
    numProcesses = 1  # noqa: N815
    processId = 0  # noqa: N815


class Options(_Recorded):
    """poptorch.Options: what the emulation reads, plus setters recorded without effect."""

    _RECORDED = ("useIpuModel", "enableExecutableCaching", "logDir", "connectionType",
                 "setExecutionStrategy", "setAvailableMemoryProportion", "enableSyntheticData",
                 "useIpuId", "ipuId", "autoRoundNumIPUs", "logCycleCount", "enableProfiling")

    def __init__(self) -> None:
        super().__init__()
        self.device_iterations = 1
        self.replication_factor = 1
        self.input_group_size = 1
        self.output_mode = OutputMode.Default
        self.output_return_period = 1
        self.random_seed: Optional[int] = None
        self.Training = _Training()
        self.Jit = _Jit()
        self.Precision = _Precision()
        self.Distributed = _Distributed()

    def deviceIterations(self, n: int) -> "Options":  # noqa: N802
        self.device_iterations = _positive("deviceIterations", n)
        return self

    def replicationFactor(self, n: int) -> "Options":  # noqa: N802
        self.replication_factor = _positive("replicationFactor", n)
        return self

    def outputMode(self, mode: OutputMode, output_return_period: Optional[int] = None) -> "Options":  # noqa: N802
        self.output_mode = OutputMode(mode)
        self.output_return_period = output_return_period or 1
        return self

    def randomSeed(self, seed: int) -> "Options":  # noqa: N802
        self.random_seed = int(seed)
        return self

    def exists(self, name: str) -> bool:
        return name == "random_seed" and self.random_seed is not None

    def _freeze(self) -> None:
        """poptorch freezes options handed to a DataLoader; nothing to do here."""

    def toDict(self) -> Dict[str, Any]:  # noqa: N802
        return {"device_iterations": self.device_iterations,
                "replication_factor": self.replication_factor,
                "gradient_accumulation": self.Training.gradient_accumulation,
                "output_mode": self.output_mode, "output_return_period": self.output_return_period,
                "random_seed": self.random_seed, **self._values}

    def ipu_options(self, training: bool) -> IPUOptions:
        """The :class:`IPUOptions` the emulator runs (``Default`` resolved as poptorch does)."""
        if self.Training.reduction_type != ReductionType.Mean:
            raise EmulatorError("the emulation implements accumulationAndReplicationReductionType"
                                "(Mean) only (poptorch's default)")
        mode = self.output_mode
        if mode == OutputMode.Default:
            mode = OutputMode.Final if training else OutputMode.All
        return IPUOptions(self.device_iterations, self.replication_factor,
                          self.Training.gradient_accumulation if training else 1,
                          output_mode=_MODE_NAMES[mode],
                          output_return_period=self.output_return_period if mode == OutputMode.EveryN else 1)

    def __repr__(self) -> str:
        return f"poptorch.Options(emulated, {self.toDict()})"


# --------------------------------------------------------------------------
# Losses and the "running on the IPU" state
# --------------------------------------------------------------------------
class _Trace:
    """What one emulated forward marked: losses, built-in loss calls."""

    def __init__(self) -> None:
        self.marked: List[Tensor] = []
        self.builtin_losses: List[Tensor] = []


_STATE = threading.local()


def _current() -> Optional[_Trace]:
    return getattr(_STATE, "trace", None)


def isRunningOnIpu() -> bool:  # noqa: N802
    """True inside an emulated poptorch model's forward (poptorch: on the IPU)."""
    return _current() is not None


def identity_loss(x: Tensor, reduction: str) -> Tensor:
    """Mark ``x`` as the loss (``"sum"``, ``"mean"`` or ``"none"``), as poptorch.identity_loss."""
    if reduction == "sum":
        out = x.sum()
    elif reduction == "mean":
        out = x.mean()
    else:
        assert reduction == "none", "Unsupported reduction type!"  # poptorch's assertion
        out = x
    trace = _current()
    if trace is not None:
        trace.marked.append(out)
    return out


class _LossWatch(TorchFunctionMode):
    """Notes calls of ``torch.nn.functional`` losses (poptorch finds those without identity_loss)."""

    def __init__(self, trace: _Trace) -> None:
        super().__init__()
        self.trace = trace

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if getattr(func, "__name__", "") in _BUILTIN_LOSSES and isinstance(out, Tensor):
            self.trace.builtin_losses.append(out)
        return out


# --------------------------------------------------------------------------
# Custom arg parsers
# --------------------------------------------------------------------------
class ICustomArgParser(abc.ABC):
    """poptorch.ICustomArgParser: how a custom input type gives up and takes back its tensors."""

    @abc.abstractmethod
    def yieldTensors(self, struct: Any) -> Any:  # noqa: N802
        """Yield every tensor of ``struct`` in a fixed order."""

    @abc.abstractmethod
    def reconstruct(self, original_structure: Any, tensor_iterator: Any) -> Any:
        """A new structure like ``original_structure`` with tensors from ``tensor_iterator``."""


_utils = types.SimpleNamespace(custom_arg_parsers={})  # as poptorch._utils.custom_arg_parsers


def registerCustomArgParser(arg_data_type: type, arg_parser: Optional[ICustomArgParser]) -> None:  # noqa: N802
    """Register (or, with None, remove) the parser for a type, as poptorch does."""
    if arg_parser is None:
        _utils.custom_arg_parsers.pop(arg_data_type, None)
    elif not isinstance(arg_parser, ICustomArgParser):
        raise EmulatorError("arg_parser must inherit from ICustomArgParser")
    else:
        _utils.custom_arg_parsers[arg_data_type] = arg_parser


def _parser_for(obj: Any) -> Optional[ICustomArgParser]:
    parsers = _utils.custom_arg_parsers
    found = parsers.get(type(obj))
    if found is None:
        found = next((p for t, p in parsers.items() if isinstance(obj, t)), None)
    return found


def _encode(obj: Any) -> Tuple[Any, Callable[[Any], Any]]:
    """``obj`` with custom-parsed objects replaced by tuples of their tensors, and the inverse."""
    parser = None if isinstance(obj, (Tensor, tuple, list, dict)) else _parser_for(obj)
    if parser is not None:
        return tuple(parser.yieldTensors(obj)), lambda e: parser.reconstruct(obj, iter(e))
    if isinstance(obj, (tuple, list)):
        pairs = [_encode(v) for v in obj]
        return (type(obj)(p[0] for p in pairs),
                lambda e: type(obj)(dec(v) for (_, dec), v in zip(pairs, e)))
    if isinstance(obj, dict):
        pairs = {k: _encode(v) for k, v in obj.items()}
        return {k: p[0] for k, p in pairs.items()}, lambda e: {k: pairs[k][1](e[k]) for k in pairs}
    return obj, lambda e: e


# --------------------------------------------------------------------------
# The models
# --------------------------------------------------------------------------
class _Engine(IPUEmulator):
    """The emulator, with poptorch's rules on each forward and its loss detection."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.decode: Callable[[Any], Any] = lambda e: e
        self._trace = _Trace()

    def _call_model(self, mb: Any) -> Any:
        args, kwargs = self.decode(mb)
        self._trace = _Trace()
        _STATE.trace = self._trace
        try:
            with dispatcher_rules(self.model, error=EmulatorError), _LossWatch(self._trace):
                return self.model(*args, **kwargs)
        finally:
            _STATE.trace = None

    def _micro_loss(self, out: Any) -> Tensor:
        """The marked loss (the last ``identity_loss``), else the last built-in loss's output."""
        if self._trace.marked:
            loss = self._trace.marked[-1]
        elif self._trace.builtin_losses:
            loss = self._trace.builtin_losses[-1]
        else:  # poptorch/source/RemoveSurplusIdentityLosses.cpp
            raise EmulatorError("Couldn't find a loss in graph!")
        return super()._micro_loss(loss)


class _Executable:
    """Stands for poptorch's compiled executable (lightning-graphcore tests ``_executable``)."""


class PoplarExecutor:
    """An emulated poptorch model: what ``trainingModel`` / ``inferenceModel`` return."""

    def __init__(self, model: nn.Module, options: Optional[Options], training: bool,
                 optimizer: Optional[torch.optim.Optimizer] = None) -> None:
        self._user_model = model
        self._options = options if options is not None else Options()
        self._training = training
        self._engine = _Engine(model, self._options.ipu_options(training), optimizer=optimizer,
                               training=training)
        self._attached = False

    # ---- running ------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        (args, kwargs), self._engine.decode = _encode((tuple(args), dict(kwargs)))
        out = self._engine(*args, **kwargs)
        self._attached = True
        return out

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """Compile for these inputs without running them (no weight or buffer changes)."""
        state = {k: v.detach().clone() for k, v in self._user_model.state_dict().items()}
        engine = self._engine
        opt_state = copy.deepcopy(engine.optimizer.state_dict()) if engine.optimizer else None
        steps = engine.steps
        try:
            self(*args, **kwargs)
        finally:
            self._user_model.load_state_dict(state)
            if opt_state is not None:
                engine.optimizer.load_state_dict(opt_state)
            engine.steps = steps

    # ---- poptorch's executor API ----------------------------------------------
    @property
    def model(self) -> nn.Module:
        return self._user_model

    @property
    def options(self) -> Options:
        return self._options

    @property
    def _executable(self) -> Optional[_Executable]:
        return _Executable() if self.isCompiled() else None

    @property
    def emulator(self) -> IPUEmulator:
        """The :class:`IPUEmulator` underneath (steps taken, compiles, ...)."""
        return self._engine

    def isCompiled(self) -> bool:  # noqa: N802
        return self._engine.isCompiled()

    def isAttachedToDevice(self) -> bool:  # noqa: N802
        return self.isCompiled() and self._attached

    def attachToDevice(self) -> None:  # noqa: N802
        if not self.isCompiled():
            raise EmulatorError("Model has not been compiled or has been destroyed.")
        self._attached = True

    def detachFromDevice(self) -> None:  # noqa: N802
        if not self.isAttachedToDevice():
            raise EmulatorError("Device is not attached")
        self._attached = False

    def destroy(self) -> None:
        self._engine.destroy()
        self._attached = False

    def setOptimizer(self, optimizer: torch.optim.Optimizer) -> None:  # noqa: N802
        self._engine.set_optimizer(optimizer)

    def copyWeightsToHost(self) -> None:  # noqa: N802
        """Weights live on the host already (one copy, shared with the model)."""

    def copyWeightsToDevice(self) -> None:  # noqa: N802
        """Weights live on the host already (one copy, shared with the model)."""

    def copyWeightsToHostIfNeeded(self) -> bool:  # noqa: N802
        return False

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._user_model, name)  # poptorch forwards to the model too

    def __repr__(self) -> str:
        kind = "trainingModel" if self._training else "inferenceModel"
        return f"poptorch.{kind}(emulated, {self._user_model!r})"


def trainingModel(model: nn.Module, options: Optional[Options] = None,  # noqa: N802
                  optimizer: Optional[torch.optim.Optimizer] = None) -> PoplarExecutor:
    """An emulated training model (default optimizer: SGD lr=0.01, as poptorch's)."""
    return PoplarExecutor(model, options, True, optimizer)


def inferenceModel(model: nn.Module, options: Optional[Options] = None) -> PoplarExecutor:  # noqa: N802
    """An emulated inference model."""
    return PoplarExecutor(model, options, False)


def ipuHardwareIsAvailable(num_ipus: int = 1) -> bool:  # noqa: N802
    """True: the emulated IPUs stand in for hardware (lightning-graphcore checks this)."""
    return True


class DataLoader(torch.utils.data.DataLoader):
    """poptorch.DataLoader: ``batch_size * F`` samples a host batch (``F = D * R * A``)."""

    def __init__(self, options: Options, dataset: Any, batch_size: Optional[int] = 1,
                 shuffle: Optional[bool] = None, num_workers: int = 0, drop_last: bool = True,
                 persistent_workers: Optional[bool] = None, auto_distributed_partitioning: bool = True,
                 mode: DataLoaderMode = DataLoaderMode.Sync, async_options: Any = None,
                 rebatched_worker_size: Optional[int] = None, **kwargs: Any) -> None:
        if not isinstance(options, Options):
            raise TypeError(f"options must be a poptorch.Options, got {type(options).__name__}")
        self._options = options
        self._num_batches_to_combine = (options.device_iterations * options.replication_factor
                                        * options.Training.gradient_accumulation)
        self._combined_batch_size = (None if batch_size is None
                                     else batch_size * self._num_batches_to_combine)
        super().__init__(dataset, batch_size=self._combined_batch_size, shuffle=bool(shuffle),
                         num_workers=num_workers, drop_last=drop_last,
                         persistent_workers=bool(persistent_workers) if num_workers else False,
                         **kwargs)

    @property
    def combinedBatchSize(self) -> Optional[int]:  # noqa: N802
        return self._combined_batch_size

    @property
    def options(self) -> Options:
        return self._options


# --------------------------------------------------------------------------
# The module and its installation
# --------------------------------------------------------------------------
_MODULE: Optional[types.ModuleType] = None


def _module() -> types.ModuleType:
    """The emulated ``poptorch`` module (one per process, so imports of it stay valid)."""
    global _MODULE
    if _MODULE is None:
        mod = types.ModuleType("poptorch", "graph_adapter's CPU emulation of poptorch (no IPU).")
        mod.__spec__ = importlib.machinery.ModuleSpec("poptorch", None, origin="graph_adapter")
        for name in ("Options", "OutputMode", "ReductionType", "DataLoaderMode", "DataLoader",
                     "PoplarExecutor", "trainingModel", "inferenceModel", "identity_loss",
                     "isRunningOnIpu", "ipuHardwareIsAvailable", "ICustomArgParser",
                     "registerCustomArgParser", "_utils"):
            setattr(mod, name, globals()[name])
        mod.Error = EmulatorError
        mod.optim = types.SimpleNamespace(SGD=torch.optim.SGD, Adam=torch.optim.Adam,
                                          AdamW=torch.optim.AdamW, RMSprop=torch.optim.RMSprop)
        mod.__version__ = "3.4.0+graph_adapter.emulated"
        mod.emulated = True
        _MODULE = mod
    return _MODULE


#: Modules that read ``package_available("poptorch")`` once, at import, into a
#: module constant (lightning-graphcore 0.1.0, ``accelerator.py`` / ``strategy.py``):
#: imported before the emulation, they keep "no poptorch" for good.
_READ_AT_IMPORT = ("lightning_graphcore.accelerator", "lightning_graphcore.strategy")


def _refuse_stale_lookups() -> None:
    """Raise when a module that reads poptorch at import already decided it is missing."""
    for name in _READ_AT_IMPORT:
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "_POPTORCH_AVAILABLE", None) is False:
            raise EmulatorError(
                f"{name} was imported before emulate_poptorch() and has recorded that poptorch is "
                f"missing: call graph_adapter.ipu.emulate_poptorch() before importing "
                f"lightning_graphcore (or anything that imports it)")


def _forget_poptorch_lookups() -> None:
    """Clear lightning-utilities' memoised ``package_available`` / ``module_available``.

    Lightning imports them and calls ``package_available("poptorch")`` at
    import (an ``lru_cache``): anything that imported Lightning first (graphium
    does) would make every later lookup, lightning-graphcore's included, see
    no poptorch. Cleared, the next lookup finds the emulation (its module has a
    ``__spec__``).
    """
    mod = sys.modules.get("lightning_utilities.core.imports")
    if mod is None:
        return
    for name in ("package_available", "module_available"):
        clear = getattr(getattr(mod, name, None), "cache_clear", None)
        if clear is not None:
            clear()


class emulate_poptorch:  # noqa: N801 - used as a function: emulate_poptorch()
    """Put the emulated ``poptorch`` in ``sys.modules`` now; as a context manager, restore on exit.

    ``emulate_poptorch()`` installs at once (``import poptorch`` then gets the
    emulation) and returns this object; ``with emulate_poptorch() as poptorch:``
    restores the previous ``sys.modules["poptorch"]`` (or its absence) on
    exit, as does :meth:`restore`. Modules that imported poptorch meanwhile
    (lightning-graphcore binds it at import) keep the emulated module.

    Import order: Lightning may be imported first (graphium imports it): the
    emulation clears lightning-utilities' memoised ``package_available`` so
    later lookups find it. lightning-graphcore itself must be imported after
    it (it records poptorch's absence in module constants at import); if it
    was imported first, this raises :class:`EmulatorError` saying so.
    """

    def __init__(self) -> None:
        _refuse_stale_lookups()
        self._missing = object()
        self._previous = sys.modules.get("poptorch", self._missing)
        self.module = _module()
        sys.modules["poptorch"] = self.module
        _forget_poptorch_lookups()

    def restore(self) -> None:
        if self._previous is self._missing:
            sys.modules.pop("poptorch", None)
        else:
            sys.modules["poptorch"] = self._previous
        _forget_poptorch_lookups()  # a later lookup sees what is there now

    def __enter__(self) -> types.ModuleType:
        return self.module

    def __exit__(self, *exc: Any) -> None:
        self.restore()
