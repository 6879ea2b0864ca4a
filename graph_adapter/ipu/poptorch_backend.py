"""The ``"poptorch"`` backend: ``poptorch.trainingModel`` / ``inferenceModel`` on the dispatcher.

poptorch is imported lazily (:func:`import_poptorch`): importing this module
never imports it, and when it is missing the ``ImportError`` says where it
comes from and chains the original one. The models are built on the
dispatcher, never with ``Jit.traceModel(True)`` (it raises since SDK 3.1).

:class:`PoptorchRunner` is what ``compile(wrapped, "poptorch")`` returns: one
object for training and inference (``.train()`` / ``.eval()``), each poptorch
model built on first use, host batches narrowed before the call.
"""
from __future__ import annotations

import warnings
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch
from ..format.torch_internals import pytree
from torch import Tensor, nn

from ..contract import Signature
from ..format import BoundsPlan, bounds_plan, check_before_call
from ..format import LOSS_KEY, loss_of
from ..nn import HostModel
from .inputs import map_tensors, narrow
from .options import IPUOptions
from .sdk import import_poptorch

__all__ = [
    "import_poptorch", "make_pyg_arg_parser", "register_pyg_arg_parser",
    "build_poptorch", "PoptorchRunner",
]


# --------------------------------------------------------------------------
# PyG objects as poptorch inputs
# --------------------------------------------------------------------------
def make_pyg_arg_parser(poptorch: Any) -> Any:
    """A ``poptorch.ICustomArgParser`` for PyG ``Data``/``Batch``, built on the core round trip.

    ``yieldTensors`` gives ``flatten(obj)``'s tensors in key order;
    ``reconstruct`` rebuilds the same class with the original's full spec
    (``unflatten(..., spec)``): non-tensor attributes (a ``name`` string, a
    ``smiles`` list) and a batch's ``num_graphs`` / ``to_data_list()``
    metadata are kept, not dropped.
    """
    from ..format import flatten, unflatten

    class PyGArgParser(poptorch.ICustomArgParser):  # type: ignore[misc,name-defined]
        def yieldTensors(self, struct):  # noqa: N802 (poptorch's name)
            flat, _ = flatten(struct)
            yield from flat.values()

        def reconstruct(self, original, tensor_iterator):
            flat, spec = flatten(original)
            new = {k: next(tensor_iterator) for k in flat}
            return unflatten(new, spec, validate=False)

    return PyGArgParser()


# id(poptorch module) -> (the module, classes we registered with it). The module is
# kept alive so that its id is never reused by another object (a second fake in tests).
_OURS: Dict[int, Tuple[Any, set]] = {}


def _registered_parsers(pt: Any) -> Mapping[type, Any]:
    """poptorch's table of custom arg parsers (``poptorch._utils.custom_arg_parsers``)."""
    return getattr(getattr(pt, "_utils", None), "custom_arg_parsers", None) or {}


def register_pyg_arg_parser(poptorch: Any = None) -> bool:
    """Opt in: let a PyG ``Data``/``Batch`` be passed straight to a poptorch model.

    Registers :func:`make_pyg_arg_parser`'s parser for ``Data``,
    ``HeteroData`` and their batch classes, but only for a class that has no
    parser yet: poptorch registers poptorch_geometric's own parsers (for
    ``BaseData``, ``DataBatch``, ``HeteroDataBatch``) when poptorch_geometric
    is installed, and those are never replaced. Nothing calls this for you
    (``compile(..., pyg_arg_parser=True)`` does).

    Returns:
        True when a class was registered now; False when every one already
        had a parser (poptorch_geometric's, or ours from an earlier call).
    """
    pt = poptorch if poptorch is not None else import_poptorch()
    theirs = tuple(_registered_parsers(pt))
    _, ours = _OURS.setdefault(id(pt), (pt, set()))
    parser = None
    registered = []
    for cls in _pyg_classes():
        # A parser for the class or a base of it (poptorch_geometric's is for BaseData) wins:
        # poptorch looks up the exact type first, so registering ours would shadow it.
        if cls in ours or any(issubclass(cls, t) for t in theirs):
            continue
        parser = parser or make_pyg_arg_parser(pt)
        pt.registerCustomArgParser(cls, parser)
        registered.append(cls)
    ours.update(registered)
    return bool(registered)


def _pyg_classes() -> List[type]:
    from torch_geometric.data import Batch, Data, HeteroData

    # Not ``Batch`` itself: no instance has that exact type (batches are DataBatch /
    # HeteroDataBatch, which poptorch matches first), so a parser for it only adds
    # an isinstance() fallback that could shadow another one.
    classes: List[type] = [Data, HeteroData]
    for c in (Data, HeteroData):
        classes.append(type(Batch(_base_cls=c)))  # DataBatch, HeteroDataBatch
    return classes


# --------------------------------------------------------------------------
# The backend
# --------------------------------------------------------------------------
class _MarkLoss(nn.Module):
    """Marks the loss output with ``poptorch.identity_loss`` (poptorch needs one loss)."""

    def __init__(self, model: nn.Module, poptorch: Any, loss_key: str = LOSS_KEY) -> None:
        super().__init__()
        self.model = model
        self._poptorch = poptorch
        self.loss_key = loss_key

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        out = self.model(*args, **kwargs)
        marked = self._poptorch.identity_loss(loss_of(out, self.loss_key), reduction="none")
        if isinstance(out, Tensor):
            return marked
        return {**out, self.loss_key: marked}


def build_poptorch(
    wrapped: nn.Module,
    options: "IPUOptions",
    optimizer: Optional[torch.optim.Optimizer],
    training: bool,
    poptorch: Any = None,
    poptorch_options: Any = None,
    pyg_arg_parser: bool = False,
    allow_new_shapes: bool = False,
    check_bounds: Optional[bool] = None,
    **kwargs: Any,
) -> "PoptorchRunner":
    """A :class:`PoptorchRunner` in mode ``training`` (its poptorch model built now).

    ``poptorch``: a module to use instead of importing it (tests pass a
    stand-in); ``poptorch_options``: a ``poptorch.Options`` to fill in;
    ``pyg_arg_parser``: opt in to :func:`register_pyg_arg_parser`;
    ``check_bounds=False`` skips the runner's host check of index bounds; the
    other ``kwargs`` go to ``poptorch.trainingModel`` / ``inferenceModel``.
    """
    pt = poptorch if poptorch is not None else import_poptorch()
    if pyg_arg_parser:
        register_pyg_arg_parser(pt)
    opts = options.to_poptorch(pt, base=poptorch_options)

    def build(train: bool, opt: Optional[torch.optim.Optimizer]) -> Any:
        if train:
            return pt.trainingModel(_MarkLoss(wrapped, pt), options=opts, optimizer=opt, **kwargs)
        if options.gradient_accumulation != 1:
            raise ValueError(
                "gradient_accumulation > 1 is for training; poptorch's inferenceModel needs 1"
            )
        return pt.inferenceModel(wrapped, options=opts, **kwargs)

    return PoptorchRunner(wrapped, build, training, optimizer, allow_new_shapes,
                          half_inputs=options.half_inputs, check_bounds=check_bounds is not False)


def _signature(inputs: Any) -> Tuple[Any, Signature]:
    """The structure of ``inputs`` and the contract's signature of its tensors, by leaf
    position (a change of either recompiles)."""
    leaves, spec = pytree.tree_flatten(inputs)
    return spec, Signature.of({str(i): t for i, t in enumerate(leaves) if isinstance(t, Tensor)})


class PoptorchRunner(HostModel):
    """poptorch's training and inference models behind one compiled-model interface.

    Called with a host batch: int64 inputs (PyG's index tensors) are fed as
    int32 and float64 as float32, which is what poptorch would do on the
    device anyway; doing it here checks the int32 range and halves the
    host-to-IPU traffic; with ``half_inputs`` floating inputs are cast to
    float16 too. ``.train()`` / ``.eval()`` pick the poptorch model
    (``trainingModel`` with the optimizer, or ``inferenceModel``), each built
    on first use over the same module. In training a call runs forward,
    backward and the optimizer step on the device (``steps_optimizer``).
    Every other attribute (``destroy``, ``compile``, ``setOptimizer``, ...)
    is the current poptorch model's.
    """

    #: A training call steps the optimizer itself (the caller must not).
    steps_optimizer = True

    def __init__(self, wrapped: nn.Module, build: Any, training: bool,
                 optimizer: Optional[torch.optim.Optimizer] = None,
                 allow_new_shapes: bool = False, half_inputs: bool = False,
                 check_bounds: bool = True) -> None:
        self.wrapped = wrapped
        self.check_bounds = check_bounds
        self.half_inputs = half_inputs
        self.training = bool(training)
        self.optimizer = optimizer
        self.allow_new_shapes = allow_new_shapes
        self.compile_count = 0  # signatures compiled, over both modes
        self._build = build
        self._models: Dict[bool, Any] = {}
        self._signatures: Dict[bool, Any] = {}
        self._bounds: Dict[Any, BoundsPlan] = {}  # per host-batch shape
        self._model()  # build the first mode's model now: wiring errors surface at compile()

    @property
    def poptorch_model(self) -> Any:
        """The poptorch model of the current mode."""
        return self._model()

    def _model(self) -> Any:
        model = self._models.get(self.training)
        if model is None:
            model = self._models[self.training] = self._build(self.training, self.optimizer)
        return model

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        values = self._check_host_batch(args, kwargs)
        args, kwargs = map_tensors((tuple(args), dict(kwargs)), narrow)
        if self.half_inputs:  # IPUOptions.half_inputs: floating inputs travel as float16
            args, kwargs = map_tensors((args, kwargs), lambda t: t.half() if t.is_floating_point() else t)
        sig = _signature((args, kwargs))
        model = self._model()
        known = self._signatures.get(self.training)
        new = known is None or (sig != known and self.allow_new_shapes)
        if known is not None and new:
            # poptorch's own advice for new inputs: destroy() and call again (recompiles).
            model.destroy()
        with warnings.catch_warnings():
            if values:  # checked on the host: the forward's "nothing was checked" is moot
                warnings.filterwarnings("ignore", message=r"ipu_wrap\(check_inputs='values'\)")
            out = model(*args, **kwargs)
        if new:
            self._signatures[self.training] = sig
            self.compile_count += 1
        return out

    def _check_host_batch(self, args: Tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
        """Check a flat-dict batch on the host, where its values can still be read:
        the index bounds (what the IPU does with an index out of range is not
        known; a named error here makes that moot), or every value rule when
        the wrapped model has ``check_inputs="values"`` (returns True then).
        Other inputs (not one flat dict) are not checked."""
        if kwargs or len(args) != 1 or not isinstance(args[0], Mapping) or \
                not all(isinstance(v, Tensor) for v in args[0].values()):
            return False
        flat = args[0]
        values = getattr(self.wrapped, "check_inputs", None) == "values"
        shapes = tuple((k, v.shape, v.dtype) for k, v in flat.items())
        plan = self._bounds.get(shapes)
        if plan is None:
            plan = self._bounds[shapes] = bounds_plan(flat) if self.check_bounds else ()
        check_before_call(flat, values, plan)
        return values

    # ---- the compiled-model interface ------------------------------------
    @property
    def host_module(self) -> nn.Module:
        return self.wrapped

    def _set_mode(self, mode: bool) -> None:
        self.training = mode
        self.wrapped.train(mode)

    def set_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Push the optimizer's state (e.g. a scheduler's new learning rate) to the device."""
        self.optimizer = optimizer
        if True in self._models:
            self._models[True].setOptimizer(optimizer)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._model(), name)
