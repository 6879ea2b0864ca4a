"""poptorch's dispatcher rules, enforced on CPU while a forward runs.

The dispatcher runs the Python forward once on tensors that hold no data
(``docs/ipu.md``, ``../shared/FACTS.md``): it rejects host reads of values,
data-dependent output shapes, moves to the CPU, ops it has no handler for,
and buffers reassigned in forward. This module turns each rule into a watch:

* :class:`FunctionWatch` (a ``TorchFunctionMode``): value reads
  (``.item()``, ``bool(t)``, ...) and host transfers (``.cpu()``, ...);
* :class:`DispatchWatch` (a ``TorchDispatchMode``): data-dependent shapes,
  ops with no poptorch handler (:data:`graph_adapter.ipu._poptorch_ops.NO_HANDLER`)
  or no fake kernel, float64 computed in forward;
* :func:`dispatcher_rules`: both, raising at the first violation (what
  :func:`~graph_adapter.ipu.emulate_poptorch` runs forward under).

Every violation is a :class:`Finding` that names the op and the user's
``file:line``; :func:`graph_adapter.checker.check` collects them all instead
of raising.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import traceback
import weakref
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils._python_dispatch import TorchDispatchMode

from ._poptorch_ops import NO_HANDLER
from .state import reassigned_state, state_addresses

__all__ = ["KINDS", "POPTORCH_MESSAGES", "ADVICE", "NO_FAKE_KERNEL", "Finding", "FunctionWatch",
           "DispatchWatch", "HostTensors", "NoFakeKernel", "dispatcher_rules", "where", "with_via"]


#: Every kind of finding, with what it means.
KINDS: Dict[str, str] = {
    "data-dependent-shape": "an output shape depends on tensor values; the dispatcher infers "
    "shapes without data",
    "data-dependent-value": "a tensor value is read on the host (.item(), int(), bool(), float()); "
    "the dispatcher's tensors hold no data",
    "host-transfer": "a tensor is moved to the CPU in forward (poptorch: 'Illegal move to CPU')",
    "unsupported-op": "poptorch has no handler for this op",
    "narrowed-dtype": "poptorch narrows float64 to float32 and int64 to int32",
    "batch-split": "an input's dim 0 does not split into the F micro-batches",
    "reassigned-state": "a buffer or parameter is reassigned (or removed) in forward (poptorch: "
    "'Buffer ... is reassigned within the model')",
    "bad-value": "an input value breaks a rule of the padded format (docs/dev/FORMAT.md): an "
    "index out of range, an unsorted batch, an edge touching a padding node; some fail, "
    "some give wrong results silently",
    "error": "forward (or backward) raised",
}

_DYNAMIC_SHAPE_OPS = {
    "nonzero", "argwhere", "_unique", "_unique2", "unique_dim", "unique_consecutive",
    "unique_dim_consecutive", "masked_select", "repeat_interleave",
}
_VALUE_FUNCS = {"item", "__bool__", "__int__", "__float__", "__index__", "__complex__"}
_HOST_FUNCS = {"cpu", "numpy", "tolist"}
# Op namespaces PyTorch's own meta/fake kernels cover; an op elsewhere (a C++
# extension such as torch_scatter) needs a registered Meta kernel or fake impl.
_CORE_NAMESPACES = {"aten", "prims", "prim", "_c10d_functional", "c10d_functional", "poptorch"}

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
# graph_adapter itself (its wrappers: wrap, static, the emulation) is not user code
_THIS_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


# --------------------------------------------------------------------------
# A finding
# --------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Finding:
    """One problem.

    Attributes:
        kind: one of :data:`KINDS`.
        op: the op, e.g. ``torch.Tensor.item``, ``torch.nonzero (aten.nonzero)``.
        location: the user's ``file:line`` (``"<input>"`` for input checks).
        message: what is wrong and what to do.
        severity: ``"error"`` (poptorch would fail) or ``"warning"``
            (poptorch runs it, differently from CPU).
    """

    kind: str
    op: str
    location: str
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        return f"{self.kind}  {self.op}  {self.location}  {self.message}"


# --------------------------------------------------------------------------
# Where: the user's frame
# --------------------------------------------------------------------------
def _is_torch(filename: str) -> bool:
    return filename.startswith(_TORCH_DIR) or "<frozen" in filename


def _is_pyg(filename: str) -> bool:
    return "torch_geometric" in filename


def _is_internal(filename: str) -> bool:
    return (
        _is_torch(filename)
        or _is_pyg(filename)
        or os.path.abspath(filename).startswith(_THIS_PACKAGE)
        or filename.endswith(os.sep + "contextlib.py")
    )


def where(frames: Sequence[traceback.FrameSummary]) -> Tuple[str, str]:
    """``(location, via)`` from frames, outermost first.

    ``location`` is the innermost frame outside torch, PyG and graph_adapter; ``via`` names the innermost PyG function when the op ran in PyG.
    """
    location, via = "<unknown>", ""
    for fr in reversed(frames):
        if _is_pyg(fr.filename) and not via and not _is_torch(fr.filename):
            via = f"{fr.name} ({_short(fr.filename)}:{fr.lineno})"
        if not _is_internal(fr.filename):
            location = f"{fr.filename}:{fr.lineno}"
            break
    return location, via


def _short(filename: str) -> str:
    i = filename.rfind("torch_geometric")
    return filename[i:] if i >= 0 else os.path.basename(filename)


def with_via(message: str, via: str) -> str:
    return f"{message} (inside PyG's {via})" if via else message


def _fn_name(func: Callable) -> str:
    name = None
    try:
        name = resolve_name(func)
    except Exception:  # noqa: BLE001
        name = None
    if name:
        return name
    qual = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    if qual.startswith("TensorBase."):
        qual = "Tensor." + qual[len("TensorBase."):]
    mod = "torch." if not qual.startswith("torch.") else ""
    return mod + qual


def _short_fn(name: str) -> str:
    return name.rsplit(".", 1)[-1]


#: poptorch's own error text per kind, where its sources have one
#: (``poptorch/source/dispatch_tracer/RegisterAtenOverloads.cpp``,
#: ``RegisterMetaOps.cpp.inc``, ``python/_impl.py``).
POPTORCH_MESSAGES = {
    "host-transfer": 'Illegal move to CPU (via `.to("cpu")`) when using the dispatcher. '
    "Instead, return this output as an IPU tensor.",
    "data-dependent-value": "aten::item is only supported in eager mode, but was intercepted in "
    "a static graph. This means an IPU to CPU copy was triggered before the end of the graph, "
    "for example by calling tensor.item(). Please ensure that any such copies are removed.",
    "bincount": "Bincount `minlength` must be specified and must be a constant. On the IPU MK2 "
    "platform the minimum length is also the maximum length",
    "unsupported-op": "Unsupported ops found in compiled model",
}

ADVICE = {
    "data-dependent-shape": "pad to a fixed size and use masks (e.g. torch.where(mask, a, b), "
    "masked sums) instead of selecting rows; pass static sizes (size=, dim_size=, num_nodes=)",
    "data-dependent-value": "keep it a tensor (no Python number); take sizes from shapes "
    "(x.size(0), ptr.numel() - 1), not from values",
    "host-transfer": "keep the computation on tensors in forward; move results to the CPU "
    "after the poptorch call",
}


# --------------------------------------------------------------------------
# Where a tensor lives: the device, or the host
# --------------------------------------------------------------------------
_INPLACE_DUNDERS = {"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__",
                    "__ifloordiv__", "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__",
                    "__ilshift__", "__irshift__", "__imatmul__"}


def _tensor_leaves(obj: Any) -> List[Tensor]:
    return [t for t in torch.utils._pytree.tree_leaves(obj) if isinstance(t, Tensor)]


def _mutates(short: str) -> bool:
    """Whether a Tensor method of this name writes into its first argument."""
    return (short.endswith("_") and not short.endswith("__")) or short in _INPLACE_DUNDERS


class HostTensors:
    """Which tensors of a forward live on the host, as under poptorch's dispatcher.

    poptorch intercepts ops on IPU tensors only (``RegisterAtenOverloads.cpp``:
    ``TORCH_LIBRARY_IMPL(_, IPU, m)`` registers the fallback for the IPU
    dispatch key; ``emptyBase`` allocates a tensor with no IPU device with
    ``at::native::empty_cpu``; ``copyInplace`` turns a CPU tensor copied onto
    the IPU into a constant). So a tensor created in forward from Python
    values without a device read off a tensor (``torch.as_tensor(h.shape[:-1])``,
    ``torch.tensor(3)``, ``torch.zeros(4)``) is a CPU tensor: reading it runs on
    the host, eagerly. What is computed from host tensors only stays on the
    host; one device tensor among the arguments makes the result a device
    tensor. Inputs, parameters, buffers and every tensor this class was not
    told about count as device tensors (the conservative default).

    Tensors are kept by weak reference (an ``id()`` is reused once a tensor dies).
    """

    def __init__(self) -> None:
        self._host: Dict[int, Any] = {}

    def is_host(self, t: Tensor) -> bool:
        ref = self._host.get(id(t))
        return ref is not None and ref() is t

    def is_host_call(self, args: Sequence[Any], kwargs: Mapping[str, Any],
                     tensor_devices: Sequence[torch.device] = ()) -> bool:
        """Whether a call runs on the host: its tensor arguments are all host tensors,
        or it has none and names no device read off a tensor (``device=x.device``)."""
        from_tensors = {id(d) for d in tensor_devices}
        leaves = torch.utils._pytree.tree_leaves((tuple(args), dict(kwargs)))
        if any(isinstance(a, torch.device) and id(a) in from_tensors for a in leaves):
            return False
        return all(self.is_host(t) for t in leaves if isinstance(t, Tensor))

    def mark(self, t: Tensor) -> None:
        key = id(t)

        def forget(ref: Any, key: int = key) -> None:
            if self._host.get(key) is ref:
                del self._host[key]

        self._host[key] = weakref.ref(t, forget)

    def unmark(self, t: Tensor) -> None:
        if self.is_host(t):
            del self._host[id(t)]

    def record(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any], out: Any,
               host: bool) -> None:
        """After a top-level call: its tensor outputs live where the call ran; a host
        tensor written with device values (in place, or as ``out=``) becomes a device one."""
        if host:
            for t in _tensor_leaves(out):
                self.mark(t)
            return
        written = _tensor_leaves(out) + _tensor_leaves(kwargs.get("out"))
        if args and isinstance(args[0], Tensor) and _mutates(_short_fn(name)):
            written.append(args[0])
        for t in written:
            self.unmark(t)


# --------------------------------------------------------------------------
# The passes
# --------------------------------------------------------------------------
class FunctionWatch(TorchFunctionMode):
    """Records host transfers and value reads; keeps the torch-function stack for names."""

    def __init__(self, findings: Optional[List[Finding]] = None, fake: bool = False) -> None:
        super().__init__()
        self.findings = findings
        self.fake = fake  # under FakeTensorMode: stand in for poptorch's meta kernels
        self.stack: List[str] = []
        self.failed: Optional[str] = None
        # Devices read off tensors (t.device): on the IPU they are the IPU, so a
        # .to() onto one is no host transfer. Kept alive so their id()s stay unique.
        self.tensor_devices: List[torch.device] = []
        self.origins = HostTensors()
        # True while a top-level call runs on host tensors only (DispatchWatch
        # then records nothing: poptorch runs such ops on the CPU, eagerly).
        self.on_host = False
        # Errors of the watch's own code (never findings about the model).
        self.internal_errors: List[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _fn_name(func)
        top = not self.stack
        host = False
        if top:
            host = self._guard(lambda: self.origins.is_host_call(args, kwargs, self.tensor_devices),
                               name, False)
            if self.findings is not None and not host:
                finding = self._guard(lambda: self._inspect(func, name, args, kwargs), name, None)
                if finding is not None:
                    self.findings.append(finding)  # may raise: dispatcher_rules' first error
        if self.fake and top and not host:
            replaced = _fake_standin(func, name, args, kwargs)
            if replaced is not None:
                return replaced
        self.stack.append(name)
        previous, self.on_host = self.on_host, self.on_host or host
        try:
            if host and self.fake:
                # A host tensor holds data under poptorch too: compute it for real.
                from torch._subclasses.fake_tensor import unset_fake_temporarily
                with unset_fake_temporarily():
                    out = func(*args, **kwargs)
            else:
                out = func(*args, **kwargs)
        except Exception:
            if self.failed is None:
                self.failed = name
            raise
        finally:
            self.stack.pop()
            self.on_host = previous
        if isinstance(out, torch.device) and getattr(func, "__self__", None) is Tensor.device:
            self.tensor_devices.append(out)
        if top:
            # After a (reported) move to the CPU the result is a host tensor: what is
            # computed from it is the same problem, reported once, at the move.
            moved = not host and self._guard(
                lambda: _moves_to_host(name, args, kwargs, self.tensor_devices), name, False)
            self._guard(lambda: self.origins.record(name, args, kwargs, out, host or moved),
                        name, None)
        return out

    def _guard(self, step: Callable[[], Any], name: str, default: Any) -> Any:
        """Run one of the watch's own steps; an error in it is the watch's, never the model's."""
        try:
            return step()
        except Exception as exc:  # noqa: BLE001 - kept apart from the model's findings
            self.internal_errors.append(f"{name}: {type(exc).__name__}: {exc}")
            return default

    def _inspect(self, func, name: str, args, kwargs) -> Optional[Finding]:
        short = _short_fn(name)
        kind, message = None, ""
        if short in _HOST_FUNCS and name.startswith("torch.Tensor"):
            kind = "host-transfer"
        elif (short == "to" and name.startswith("torch.Tensor")
              and _targets_cpu(args[1:], kwargs, self.tensor_devices)):
            kind = "host-transfer"
        elif short in _VALUE_FUNCS and name.startswith("torch.Tensor"):
            kind = "data-dependent-value"
        elif _is_extension_op(func) and not _has_fake_kernel(func):
            kind, message = "unsupported-op", NO_FAKE_KERNEL
        if kind is None:
            return None
        location, via = where(traceback.extract_stack()[:-2])
        return Finding(kind, name, location, with_via(message or ADVICE[kind], via))


NO_FAKE_KERNEL = (
    "a C++ extension op with no fake (meta) kernel: poptorch's dispatcher cannot infer its "
    "output shape and has no handler for it; use a pure-torch equivalent (for torch_scatter's "
    "scatter_max: torch_geometric.utils.scatter(..., reduce='max', dim_size=...)) or give it a "
    "fake kernel and a poptorch custom op"
)


def _is_extension_op(func: Any) -> bool:
    """A ``torch.ops.<namespace>`` op outside PyTorch's own namespaces (e.g. torch_scatter)."""
    if not isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return False
    # An OpOverload has ``namespace``; only an OpOverloadPacket has ``_qualified_op_name``.
    namespace = getattr(func, "namespace", None) or func._qualified_op_name.split("::")[0]
    return namespace not in _CORE_NAMESPACES


def _has_fake_kernel(func: Any) -> bool:
    """Whether an op has a Meta kernel or a registered fake impl (a composite one does not count:
    C++ extensions register composite kernels that read raw data)."""
    from torch._library.simple_registry import singleton

    overloads = ([getattr(func, o) for o in func.overloads()]
                 if isinstance(func, torch._ops.OpOverloadPacket) else [func])
    for op in overloads:
        qualname = op.name()
        if torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "Meta"):
            return True
        if singleton.find(qualname).fake_impl.kernel is not None:
            return True
    return False


class NoFakeKernel(RuntimeError):
    """An extension op without a fake kernel was called under fake tensors."""


def _fake_standin(func: Any, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """What poptorch's meta kernels give where PyTorch's fake ones differ (None: no stand-in).

    * ``bincount(x, weights, minlength=K)``: poptorch's meta kernel returns
      ``[K]`` (``RegisterMetaOps.cpp.inc``; K is also the maximum length);
      PyTorch's fake one raises (data-dependent shape). Without ``minlength``
      the fake kernel's error stands, as poptorch's does.
    * an extension op without a fake kernel raises :class:`NoFakeKernel`
      (otherwise its composite kernel fails reading data fake tensors lack).
    """
    if _is_extension_op(func) and not _has_fake_kernel(func):
        raise NoFakeKernel(name)
    if _short_fn(name) != "bincount":
        return None
    weights = args[1] if len(args) > 1 else kwargs.get("weights")
    minlength = args[2] if len(args) > 2 else kwargs.get("minlength", 0)
    if not isinstance(minlength, int) or minlength <= 0:
        return None
    dtype = weights.dtype if isinstance(weights, Tensor) else torch.int64
    return torch.zeros(minlength, dtype=dtype, device=args[0].device)


def _moves_to_host(name: str, args: Sequence[Any], kwargs: Mapping[str, Any],
                   tensor_devices: Sequence[torch.device] = ()) -> bool:
    """Whether a call is a Tensor method that moves its tensor to the CPU (``.cpu()``, ``.to("cpu")``)."""
    if not name.startswith("torch.Tensor"):
        return False
    short = _short_fn(name)
    return short == "cpu" or (short == "to" and _targets_cpu(args[1:], kwargs, tensor_devices))


def _targets_cpu(args: Sequence[Any], kwargs: Mapping[str, Any],
                 tensor_devices: Sequence[torch.device] = ()) -> bool:
    """Whether ``.to(*args, **kwargs)`` names the CPU (a device read off a tensor does not)."""
    from_tensors = {id(d) for d in tensor_devices}
    for a in list(args) + [kwargs.get("device")]:
        if isinstance(a, str) and a.split(":")[0] == "cpu":
            return True
        if isinstance(a, torch.device) and a.type == "cpu" and id(a) not in from_tensors:
            return True
    return False


class DispatchWatch(TorchDispatchMode):
    """Records aten ops with data-dependent shapes, ops without a poptorch handler, float64."""

    def __init__(self, findings: List[Finding], fwatch: FunctionWatch) -> None:
        super().__init__()
        self.findings = findings
        self.fwatch = fwatch

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.fwatch.on_host:  # poptorch runs it on the CPU, eagerly: no rule applies
            return out
        packet = func._overloadpacket.__name__
        aten = f"aten.{func._overloadpacket.__name__}"
        caller = self.fwatch.stack[0] if self.fwatch.stack else ""
        op = f"{caller} ({aten})" if caller else aten
        kind, message, severity = None, "", "error"
        if packet in _DYNAMIC_SHAPE_OPS and not (
            packet == "repeat_interleave" and func.__name__ != "repeat_interleave.Tensor"
            and not _has_tensor(args[1:], kwargs)
        ):
            kind, message = "data-dependent-shape", ADVICE["data-dependent-shape"]
        elif packet in ("index", "index_put", "index_put_") and _bool_index(args):
            kind, message = "data-dependent-shape", (
                "boolean-mask indexing; " + ADVICE["data-dependent-shape"])
            if packet != "index":
                kind = None  # masked writes keep static shapes (poptorch: masked_fill)
        elif packet in NO_HANDLER or packet.rstrip("_") in NO_HANDLER:  # in-place variants too
            row = NO_HANDLER.get(packet) or NO_HANDLER[packet.rstrip("_")]
            kind, message = "unsupported-op", f"poptorch has no handler for {aten}; use {row.instead}"
        elif packet == "bincount" and _bincount_minlength(args, kwargs) <= 0:
            kind, message = "data-dependent-shape", (
                f"poptorch: '{POPTORCH_MESSAGES['bincount']}'; pass minlength=K")
        elif _makes_float64(args, kwargs, out):
            kind, severity = "narrowed-dtype", "warning"
            message = "float64 computed in forward: poptorch computes it in float32"
        if kind is not None:
            location, via = where(traceback.extract_stack()[:-2])
            self.findings.append(Finding(kind, op, location, with_via(message, via), severity))
        return out


def _bincount_minlength(args, kwargs) -> int:
    value = args[2] if len(args) > 2 else kwargs.get("minlength", 0)
    return value if isinstance(value, int) else 0


def _has_tensor(args, kwargs) -> bool:
    return any(isinstance(a, Tensor) for a in list(args) + list(kwargs.values()))


def _bool_index(args) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, Tensor) and i.dtype in (torch.bool, torch.uint8) for i in (indices or ()))


def _makes_float64(args, kwargs, out) -> bool:
    outs = [o for o in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(o, Tensor)]
    if not any(o.dtype == torch.float64 for o in outs):
        return False
    ins = [a for a in list(args) + list(kwargs.values()) if isinstance(a, Tensor)]
    return not any(a.dtype == torch.float64 for a in ins)


# --------------------------------------------------------------------------
# The rules enforced while a forward runs (the emulated poptorch uses this)
# --------------------------------------------------------------------------
class _RaiseFirst(list):
    """A findings list that raises at the first error, with poptorch's message where it has one."""

    def __init__(self, error: Callable[[str], BaseException]) -> None:
        super().__init__()
        self.error = error

    def append(self, f: Finding) -> None:  # type: ignore[override]
        if f.severity != "error":
            return
        if f.kind == "unsupported-op":
            text = f"{POPTORCH_MESSAGES['unsupported-op']}: [{f.op}]. {f.message}"
        else:
            text = POPTORCH_MESSAGES.get(f.kind, f"{f.op}: {KINDS[f.kind]}; {f.message}")
        raise self.error(f"{text}\n[graph_adapter: {f.kind} {f.op} at {f.location}]")


@contextlib.contextmanager
def dispatcher_rules(model: Optional[nn.Module] = None,
                     error: Callable[[str], BaseException] = RuntimeError) -> Iterator[None]:
    """Run a forward under poptorch's dispatcher rules: the first violation raises ``error(msg)``.

    Violations are the errors :func:`check`'s real pass records (host
    transfers, value reads, data-dependent shapes, ops with no poptorch
    handler or no fake kernel) and, given ``model``, buffers or parameters
    reassigned by the forward. ``msg`` starts with poptorch's own text where
    its sources have one (:data:`POPTORCH_MESSAGES`), then names the op and
    the user's ``file:line``.
    """
    findings = _RaiseFirst(error)
    fwatch = FunctionWatch(findings)
    before = state_addresses(model) if model is not None else None
    with fwatch, DispatchWatch(findings, fwatch):
        yield
    if before is not None:
        for _, message in reassigned_state(before, state_addresses(model)):
            raise error(message)
