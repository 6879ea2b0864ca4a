"""What poptorch's dispatcher would reject, found on CPU.

``check(wrapped, flat, training=...)`` runs two passes over one micro-batch
and returns a :class:`CheckReport`:

1. **fake pass**: forward (and, for training, backward) under
   ``FakeTensorMode()`` with no shape environment, on fake copies of the
   parameters, buffers and inputs. Like the dispatcher, fake tensors hold no
   data, so data-dependent output shapes (``nonzero``, one-argument
   ``where``, boolean-mask reads, ``unique``, ``repeat_interleave`` with tensor
   repeats, ``masked_select``) and host reads of values (``.item()``,
   ``int(t)``, ``bool(t)``, ``float(t)``) raise there. The first one stops
   this pass; it becomes a finding.
2. **real pass**: forward on the real CPU tensors (a deep copy of the model),
   watched by a ``TorchFunctionMode`` and a ``TorchDispatchMode``. It records
   every occurrence of the above (not just the first) and what fake mode
   misses: ``.cpu()`` / ``.numpy()`` / ``.tolist()`` / ``.to("cpu")`` in
   forward (poptorch: "Illegal move to CPU"), ops poptorch has no handler for
   (:data:`graph_adapter.ipu._poptorch_ops.NO_HANDLER`; the rules live in
   :mod:`graph_adapter.ipu.dispatcher`), float64 computed in
   forward.

Plus static checks of the inputs and parameters: float64 that will be
narrowed to float32, int64 values that do not fit int32, and (given
``options``) inputs whose dim 0 does not split into ``F`` micro-batches.

Every finding names the op and the user's source ``file:line`` (the innermost
frame outside torch, PyG and graph_adapter itself); when the op ran inside PyG, the
message names the PyG function too.

CLI: ``graph-adapter check package.module:factory`` (the application's
:mod:`graph_adapter.app.check_cli`).
"""
from __future__ import annotations

import copy
import dataclasses
import traceback
import warnings
from typing import Any, Dict, Iterable, List, Mapping, Optional

import torch
from torch import Tensor, nn

from ..format import GRAPH_MASK, LOSS_KEY, loss_of
from ..format import micro_batches_of, value_problems
from ..ipu import (ADVICE, KINDS, NO_FAKE_KERNEL, DispatchWatch, Finding, FunctionWatch,
                   NoFakeKernel, where, with_via)
from ..ipu import host_micro_batch, map_tensors, named_tensors
from ..ipu import IPUOptions
from ..ipu import reassigned_state, state_addresses
from ..nn import IPUWrapped

__all__ = ["CheckReport", "check"]


# --------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------
@dataclasses.dataclass
class CheckReport:
    """``ok`` is True when no finding is an error. ``str(report)``: one line a finding."""

    ok: bool
    findings: List[Finding]
    #: Errors of the checker's own code while it watched the model (never findings
    #: about the model; each is also warned about: please report them).
    internal_errors: List[str] = dataclasses.field(default_factory=list)

    @classmethod
    def of(cls, findings: Iterable[Finding], internal_errors: Iterable[str] = ()) -> "CheckReport":
        seen, unique = set(), []
        for f in findings:
            key = (f.kind, f.op.split(" (")[0], f.location)
            if key not in seen:
                seen.add(key)
                unique.append(f)
        return cls(ok=not any(f.severity == "error" for f in unique), findings=unique,
                   internal_errors=list(dict.fromkeys(internal_errors)))

    @property
    def errors(self) -> List[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> List[Finding]:
        return [f for f in self.findings if f.severity != "error"]

    @property
    def kinds(self) -> List[str]:
        return sorted({f.kind for f in self.findings})

    def by_kind(self, kind: str) -> List[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def __str__(self) -> str:
        head = "ok: nothing poptorch's dispatcher would reject" if self.ok else (
            f"NOT OK: {len(self.errors)} error(s)")
        if self.warnings:
            head += f", {len(self.warnings)} warning(s)"
        lines = [head] + [
            ("" if f.severity == "error" else "warning: ") + str(f) for f in self.findings
        ]
        lines += [f"checker internal error (not about the model): {e}" for e in self.internal_errors]
        return "\n".join(lines)



# --------------------------------------------------------------------------
# The passes
# --------------------------------------------------------------------------
def _fake_pass(model: nn.Module, sample: Any, training: bool, loss_key: str,
               internal: Optional[List[str]] = None) -> List[Finding]:
    from ..format.torch_internals import (
        DataDependentOutputException,
        DynamicOutputShapeException,
        FakeTensorMode,
    )
    from torch.func import functional_call

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    state = {}
    for n, p in model.named_parameters():
        state[n] = mode.from_tensor(p.detach()).requires_grad_(p.requires_grad)
    for n, b in model.named_buffers():
        state[n] = mode.from_tensor(b)
    fake = map_tensors(sample, mode.from_tensor)
    watch = FunctionWatch(fake=True)
    if internal is not None:
        watch.internal_errors = internal  # the checker's own errors go there, not into findings
    try:
        with mode, watch:
            out = functional_call(model, state, (fake,))
            if training:
                loss = loss_of(out, loss_key, required=False)
                if loss is None:
                    return [Finding("error", "forward", "<output>",
                                    f"training needs the loss: a tensor or a dict with key {loss_key!r}")]
                params = [t for t in state.values() if isinstance(t, Tensor) and t.requires_grad]
                if params and loss.requires_grad:
                    torch.autograd.grad(loss, params, allow_unused=True)
    except (DynamicOutputShapeException, DataDependentOutputException) as exc:
        location, via = where(traceback.extract_tb(exc.__traceback__))
        aten = str(getattr(exc, "func", "") or "")
        name = watch.failed or aten
        op = f"{name} ({aten})" if aten and aten not in name else name
        kind = ("data-dependent-shape" if isinstance(exc, DynamicOutputShapeException)
                else "data-dependent-value")
        return [Finding(kind, op, location, with_via(ADVICE[kind], via))]
    except NoFakeKernel as exc:
        location, via = where(traceback.extract_tb(exc.__traceback__))
        return [Finding("unsupported-op", str(exc), location, with_via(NO_FAKE_KERNEL, via))]
    except Exception as exc:  # noqa: BLE001 - every other failure is a finding too
        location, via = where(traceback.extract_tb(exc.__traceback__))
        text = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        return [Finding("error", watch.failed or "forward", location,
                        with_via(f"under fake tensors (as on the dispatcher): {text}", via))]
    return []


def _real_pass(model: nn.Module, sample: Any, internal: Optional[List[str]] = None) -> List[Finding]:
    findings: List[Finding] = []
    fwatch = FunctionWatch(findings)
    if internal is not None:
        fwatch.internal_errors = internal
    dwatch = DispatchWatch(findings, fwatch)
    before = state_addresses(model)
    try:
        with torch.no_grad(), fwatch, dwatch:
            model(sample)
    except Exception as exc:  # noqa: BLE001
        location, via = where(traceback.extract_tb(exc.__traceback__))
        text = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        findings.append(Finding("error", fwatch.failed or "forward", location,
                                with_via(f"on CPU: {text}", via)))
    for name, message in reassigned_state(before, state_addresses(model)):
        findings.append(Finding("reassigned-state", name, "<forward>", message))
    return findings


def _input_findings(flat: Any, model: nn.Module, options: Optional[IPUOptions]) -> List[Finding]:
    findings = []
    for name, t in named_tensors(flat, "batch"):
        if options is not None:
            for problem in options.split_problems(name, t):
                findings.append(Finding("batch-split", name, "<input>", problem))
        if t.dtype == torch.float64:
            findings.append(Finding("narrowed-dtype", name, "<input>",
                                    "float64 input: poptorch feeds it as float32", "warning"))
        elif t.dtype == torch.int64 and t.numel():
            lo, hi = int(t.min()), int(t.max())
            if lo < torch.iinfo(torch.int32).min or hi > torch.iinfo(torch.int32).max:
                findings.append(Finding("narrowed-dtype", name, "<input>",
                                        f"int64 values in [{lo}, {hi}] do not fit int32, which "
                                        f"poptorch narrows them to"))
    findings += _value_findings(flat)
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if t.dtype == torch.float64:
            findings.append(Finding("narrowed-dtype", name, "<parameters>",
                                    "float64 parameter/buffer: the IPU computes in float32",
                                    "warning"))
    return findings


def _value_findings(flat: Any) -> List[Finding]:
    """The padded format's value rules (:func:`graph_adapter.format.values.value_problems`),
    per micro-batch; nothing for an input that is not a flat dict of tensors."""
    if not isinstance(flat, Mapping) or GRAPH_MASK not in flat \
            or not all(isinstance(v, Tensor) for v in flat.values()):
        return []
    parts = micro_batches_of(flat)  # [] for leading dims that do not split: batch-split says so
    findings = []
    for i, part in enumerate(parts):
        where = "<input>" if len(parts) == 1 else f"<input, micro-batch {i}>"
        try:
            problems = value_problems(part)
        except Exception as exc:  # noqa: BLE001 - a dict too odd to check: say so
            findings.append(Finding("bad-value", "value check", where,
                                    f"the values could not be checked: {exc}", "warning"))
            continue
        findings += [Finding("bad-value", p.key, where, p.message) for p in problems]
    return findings


def check(
    wrapped: nn.Module,
    flat: Any,
    training: bool = False,
    options: Optional[IPUOptions] = None,
    loss_key: str = LOSS_KEY,
) -> CheckReport:
    """What poptorch's dispatcher would reject in ``wrapped(flat)``, found on CPU.

    Args:
        wrapped: a module whose forward takes ``flat`` (e.g. ``ipu_wrap(model, loss_fn)``).
        flat: one batch as the model gets it; with ``options`` (F > 1), a host
            batch with the leading micro-batch dim, of which micro-batch 0 is run.
        training: also run backward in the fake pass (needs a loss).
        options: an :class:`~graph_adapter.ipu.IPUOptions`: check that every
            input's dim 0 divides by ``F``.
        loss_key: where the loss is in a dict output.

    Returns:
        a :class:`CheckReport` (``ok``, the ``findings``: each what, where and how
        to fix it); the model itself is not modified (a copy runs). A fault of the
        model is a finding, never an exception; an error of the checker's own code
        is warned about (``RuntimeWarning``) and listed in ``internal_errors``.

    Raises:
        TypeError: a model that ``copy.deepcopy`` cannot copy.

    Example:
        ```python
        from torch_geometric.datasets import FakeDataset
        from torch_geometric.nn import GCN

        from graph_adapter import Budget, FixedSizeLoader, check, ipu_wrap

        graphs = FakeDataset(num_graphs=8, avg_num_nodes=10, num_channels=8)
        batch = next(iter(FixedSizeLoader(graphs, Budget.tight(graphs, 4))))
        report = check(ipu_wrap(GCN(8, 16, 2)), batch)  # fake tensors: no IPU needed
        assert report.ok, report  # str(report): one line a finding
        ```
    """
    findings = _input_findings(flat, wrapped, options)
    # What the model sees on the device: micro-batch 0 (a leading dim 1 for F > 1).
    sample = flat if options is None else host_micro_batch(flat, options.micro_batches, 0)
    model = _copy_model(wrapped)
    for m in model.modules():
        if isinstance(m, IPUWrapped):
            m.trim = False  # poptorch runs the padded path: check that one
    model.train(training)
    internal: List[str] = []
    findings += _fake_pass(model, sample, training, loss_key, internal)
    findings += _real_pass(model, sample, internal)
    order = {k: i for i, k in enumerate(KINDS)}
    findings.sort(key=lambda f: (f.severity != "error", order.get(f.kind, 99)))
    report = CheckReport.of(findings, internal)
    for e in report.internal_errors:
        warnings.warn(f"graph_adapter.check: an internal error of the checker, not a finding "
                      f"about the model (please report it): {e}", RuntimeWarning, stacklevel=2)
    return report


def _copy_model(model: nn.Module) -> nn.Module:
    """A deep copy, also of a model holding non-leaf tensors as attributes.

    ``copy.deepcopy`` refuses non-leaf tensors (e.g. ``SuperGATConv`` keeps
    ``att_x``/``att_y`` from its last training forward); they are copied
    detached, which is all a forward reads of them.
    """
    memo: Dict[int, Any] = {}
    for module in model.modules():
        for value in vars(module).values():
            for t in (value if isinstance(value, (list, tuple)) else (value,)):
                if isinstance(t, Tensor) and not t.is_leaf:
                    memo[id(t)] = t.detach().clone()
    return copy.deepcopy(model, memo)
