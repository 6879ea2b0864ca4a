"""The eager wrapper's overhead over eager PyG, counted: ATen ops and Python calls per step.

Wall-clock ratios on a shared machine move by 10-20% from one process to the
next; the work a step does does not. This module counts, for one training
step (forward, loss, backward, ``zero_grad`` + Adam) and one ``no_grad``
forward, on the same graphs:

* ``pyg``: the model on PyG's unpadded ``Batch`` (``Batch.from_data_list``),
  the plain ``torch.nn.functional`` loss;
* ``wrapped``: ``ipu_wrap(model, loss_fn=masked_loss(...))`` on the padded flat
  dict of the same graphs (:func:`graph_adapter.collate_padded`).

Two counts, taken in separate runs of the step (one counter must not count
the other):

* **ATen ops**: every op that reaches the Python dispatch key (a
  ``TorchDispatchMode``: after autograd and the ``CompositeImplicit``
  decompositions, i.e. about one op a kernel), by origin. A forward op's
  origin is the innermost frame of the library on the stack
  (``graph_adapter/nn/losses.py`` -> ``loss``, ``norm.py`` -> ``norm``,
  ``spec.py``/``collate.py`` -> ``unflatten``, ``wrap.py``/``format.py`` ->
  ``wrap``, ``static*.py`` -> ``static``), else the step's phase (``model``:
  PyG and torch code of the model; ``loss``: the baseline's loss). A backward
  op takes the origin of the forward call that made its autograd node (a
  ``TorchFunctionMode`` tags each node's ``metadata``), prefixed
  ``backward/``; ``backward/accumulate`` is the parameters' gradient
  accumulation. ``optimizer`` is ``zero_grad`` + ``Adam.step``.
* **Python calls**: ``sys.setprofile`` ``call`` events (Python frames
  entered), by the callee's package (``graph_adapter/<module>``,
  ``torch_geometric``, ``torch``, ``other``).

Counts are deterministic for fixed shapes, so a test can pin them
(``tests/app/test_opcount.py``); timings cannot be. The norm layer's eager fast
path (:func:`graph_adapter.nn.norm.masked_batch_norm`) checks that no dispatch
mode is active; the counter declares itself an observer
(``observes_only = True``), which that check lets through, so the counted
path is the one a user runs.

A third count, optional (``--instructions``, needs valgrind): the
instructions one epoch executes under callgrind (single-threaded), for eager
PyG, the same model called on the padded tensors (``pyg_padded``: the
padding's work without the wrapper's) and ``ipu_wrap``; load-independent, so
it splits the wrapped eager overhead into padding and wrapper on a busy
machine (:func:`instructions`).

Usage: ``python benchmarks/bench_opcount.py [--batch 64] [--hidden 64]
[--layers 4] [--loss l1] [--model gine] [--ops] [--instructions [--limit 256]]``:
prints the tables (the first ``--batch`` molecules of NCI-5k as the one
batch of the op count; ``--instructions`` always runs the demo's GINE).
``main(argv)`` returns the counts.
"""
from __future__ import annotations

import argparse
import collections
import copy
import os
import sys
from typing import Any, Callable, Counter, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import graph_adapter as ga

from . import ROOT

__all__ = ["OpCount", "count_step", "compare", "format_table", "WORK_VARIANTS", "instructions",
           "format_instructions", "main"]

_PKG = os.path.dirname(os.path.abspath(ga.__file__)) + os.sep  # the package measured
_APP = os.path.join(_PKG, "app") + os.sep
_TORCH = os.path.dirname(torch.__file__) + os.sep
_HERE = os.path.abspath(__file__)
try:
    import torch_geometric
    _PYG = os.path.dirname(torch_geometric.__file__) + os.sep
except ImportError:  # pragma: no cover - PyG is a dependency
    _PYG = "\0"

#: library module (file stem) -> origin name; a module not listed is its own origin.
_ORIGIN_OF = {
    "losses": "loss", "norm": "norm",
    "spec": "unflatten", "errors": "unflatten", "_spec_checks": "unflatten",
    "collate": "unflatten", "_view": "unflatten", "pytree": "unflatten",
    "wrap": "wrap", "_inputs": "wrap", "format": "wrap",
    "static": "static", "static_scatter": "static", "static_index": "static",
    "static_geometry": "static", "static_layout": "static", "_gather": "static",
    "_scan": "static", "_layout": "static",
}


def _stem(filename: str) -> str:
    """A library file's module name: its stem, or its folder's for a package's ``__init__``."""
    stem = os.path.splitext(os.path.basename(filename))[0]
    return os.path.basename(os.path.dirname(filename)) if stem == "__init__" else stem


def _library_origin(frame: Any) -> Optional[str]:
    """The origin of the innermost frame outside torch and this module, when it is
    the library's (not ``app/``); None when it is the model's (PyG, ``app/``, user)."""
    while frame is not None:
        fn = frame.f_code.co_filename
        if fn.startswith(_TORCH) or fn == _HERE:
            frame = frame.f_back
            continue
        if fn.startswith(_PKG) and not fn.startswith(_APP):
            stem = _stem(fn)
            return _ORIGIN_OF.get(stem, stem)
        return None
    return None


class _State:
    """What the step is doing (set by the step), and whether its library frames
    are origins (not for the baseline: the stand-ins of ``static`` are
    installed process-wide and pass PyG's calls through outside a wrapped
    forward)."""

    def __init__(self, library: bool = True):
        self.phase = "model"
        self.library = library

    def origin(self, frame: Any) -> str:
        return (_library_origin(frame) if self.library else None) or self.phase


class _Tagger(TorchFunctionMode):
    """Tags the autograd nodes a forward call creates with that call's origin."""

    def __init__(self, state: _State):
        super().__init__()
        self.state = state

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.state.phase in ("optimizer", "backward"):
            return out
        origin = self.state.origin(sys._getframe(1))
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, Tensor) and t.grad_fn is not None:
                _tag(t.grad_fn, origin)
        return out


def _tag(node: Any, origin: str) -> None:
    """Tag ``node`` and the untagged nodes behind it (made inside the same call)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if n is None or "origin" in n.metadata:
            continue
        n.metadata["origin"] = origin
        stack.extend(nxt for nxt, _ in n.next_functions)


class _OpCounter(TorchDispatchMode):
    """Counts the ATen ops reaching the Python dispatch key, by origin."""

    #: graph_adapter.nn.norm's eager fast path runs under a mode that only observes
    observes_only = True

    def __init__(self, state: _State):
        super().__init__()
        self.state = state
        self.counts: Counter[Tuple[str, str]] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        phase = self.state.phase
        if phase == "backward":
            node = torch._C._current_autograd_node()
            if node is None:
                origin = "backward/engine"
            elif type(node).__name__ == "AccumulateGrad":
                origin = "backward/accumulate"
            else:
                origin = "backward/" + node.metadata.get("origin", "?")
        elif phase == "optimizer":
            origin = "optimizer"
        else:
            origin = self.state.origin(sys._getframe(1))
        self.counts[(origin, func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))


def _package_of(filename: str) -> str:
    if filename.startswith(_PKG) and not filename.startswith(_APP):
        stem = _stem(filename)
        return "graph_adapter/" + _ORIGIN_OF.get(stem, stem)
    if filename.startswith(_PYG):
        return "torch_geometric"
    if filename.startswith(_TORCH):
        return "torch"
    return "other"


class OpCount:
    """The counts of one step: ``ops[(origin, aten op)]`` and ``py_calls[package]``."""

    def __init__(self, ops: Counter[Tuple[str, str]], py_calls: Counter[str]):
        self.ops = ops
        self.py_calls = py_calls

    @property
    def total_ops(self) -> int:
        return sum(self.ops.values())

    @property
    def total_py_calls(self) -> int:
        return sum(self.py_calls.values())

    def by_origin(self) -> Dict[str, int]:
        out: Counter[str] = collections.Counter()
        for (origin, _), n in self.ops.items():
            out[origin] += n
        return dict(out)

    def ops_of(self, origin: str) -> Dict[str, int]:
        return {op: n for (o, op), n in self.ops.items() if o == origin}


def count_step(step: Callable[[_State], None], warmup: int = 1, library: bool = True) -> OpCount:
    """Count one call of ``step(state)``; ``step`` sets ``state.phase`` to
    ``"model"``/``"loss"``/``"backward"``/``"optimizer"`` as it goes.

    ``warmup`` uncounted calls first (Adam creates its state on the first
    step). Then one call under the op counter, one under the Python profiler.
    """
    for _ in range(warmup):
        step(_State())
    state = _State(library)
    counter = _OpCounter(state)
    with _Tagger(state), counter:
        step(state)
    calls: Counter[str] = collections.Counter()

    def prof(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            calls[_package_of(frame.f_code.co_filename)] += 1

    state = _State(library)
    sys.setprofile(prof)
    try:
        step(state)
    finally:
        sys.setprofile(None)
    return OpCount(counter.counts, calls)


# --------------------------------------------------------------------------
# The two steps
# --------------------------------------------------------------------------
_PYG_LOSS = {"l1": F.l1_loss, "mse": F.mse_loss}


def pyg_step(model: nn.Module, batch: Any, loss: str = "l1", train: bool = True,
             call: Optional[Callable[[nn.Module, Any], Tensor]] = None) -> Callable[[_State], None]:
    """Eager PyG: ``call(model, batch)`` (default ``model(x, edge_index, edge_attr,
    batch)``), the ``torch.nn.functional`` loss on ``batch.y``, backward, Adam."""
    call = call or _call_named
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train(train)

    def step(state: _State) -> None:
        if not train:
            with torch.no_grad():
                state.phase = "model"
                call(model, batch)
            return
        state.phase = "model"
        out = call(model, batch)
        state.phase = "loss"
        _backward_and_step(state, opt, _PYG_LOSS[loss](out.view(-1), batch.y.view(-1)))
    return step


def _backward_and_step(state: _State, opt: torch.optim.Optimizer, value: Tensor) -> None:
    """zero_grad, backward, Adam step, each counted under its phase."""
    state.phase = "optimizer"
    opt.zero_grad()
    state.phase = "backward"
    value.backward()
    state.phase = "optimizer"
    opt.step()


def _call_named(model: nn.Module, b: Any) -> Tensor:
    return model(b.x, b.edge_index, b.edge_attr, b.batch)


def wrapped_step(model: nn.Module, flat: Mapping[str, Tensor], loss: str = "l1",
                 train: bool = True) -> Callable[[_State], None]:
    """``ipu_wrap(model, loss_fn=masked_loss(loss))`` eager on the padded ``flat``
    (no loss in inference, as eager PyG computes none), backward, Adam."""
    w = ga.ipu_wrap(model, loss_fn=ga.masked_loss(loss) if train else None).train(train)
    opt = torch.optim.Adam(w.parameters(), lr=1e-3)

    def step(state: _State) -> None:
        if not train:
            with torch.no_grad():
                state.phase = "model"
                w(flat)
            return
        state.phase = "model"
        _backward_and_step(state, opt, w(flat)["loss"])
    return step


def compare(model: nn.Module, graphs: Sequence[Any], budget: Optional[Any] = None,
            loss: str = "l1", train: bool = True) -> Dict[str, OpCount]:
    """``{"pyg": ..., "wrapped": ...}`` counts of one step on ``graphs`` (one batch).

    ``budget`` (default: ``Budget.fit(graphs, len(graphs))``) pads them.
    Each side gets its own deep copy of ``model``.
    """
    from torch_geometric.data import Batch

    graphs = list(graphs)
    if budget is None:
        budget = ga.Budget.fit(graphs, len(graphs))
    flat = ga.collate_padded(graphs, budget)
    batch = Batch.from_data_list(graphs)
    return {"pyg": count_step(pyg_step(copy.deepcopy(model), batch, loss, train), library=False),
            "wrapped": count_step(wrapped_step(copy.deepcopy(model), flat, loss, train))}


def format_table(counts: Mapping[str, OpCount], title: str = "") -> str:
    """The counts side by side, by origin, with the difference."""
    a, b = counts["pyg"], counts["wrapped"]
    oa, ob = a.by_origin(), b.by_origin()
    rows = [f"{title}", f"{'ATen ops by origin':32s}{'eager PyG':>10s}{'ipu_wrap':>10s}{'extra':>8s}"]
    for o in sorted(set(oa) | set(ob), key=lambda o: (o.startswith("backward"), o)):
        rows.append(f"  {o:30s}{oa.get(o, 0):10d}{ob.get(o, 0):10d}{ob.get(o, 0) - oa.get(o, 0):+8d}")
    rows.append(f"  {'total':30s}{a.total_ops:10d}{b.total_ops:10d}{b.total_ops - a.total_ops:+8d}")
    rows.append(f"{'Python calls by package':32s}")
    for p in sorted(set(a.py_calls) | set(b.py_calls)):
        x, y = a.py_calls.get(p, 0), b.py_calls.get(p, 0)
        rows.append(f"  {p:30s}{x:10d}{y:10d}{y - x:+8d}")
    rows.append(f"  {'total':30s}{a.total_py_calls:10d}{b.total_py_calls:10d}"
                f"{b.total_py_calls - a.total_py_calls:+8d}")
    return "\n".join(rows)


def _op_diff(counts: Mapping[str, OpCount]) -> List[str]:
    """Per (origin, op) differences, largest first."""
    a, b = counts["pyg"].ops, counts["wrapped"].ops
    keys = set(a) | set(b)
    diff = sorted(((b.get(k, 0) - a.get(k, 0), k) for k in keys), key=lambda t: (-abs(t[0]), t[1]))
    return [f"  {o:24s} {op:28s} {d:+d}" for d, (o, op) in diff if d]


# --------------------------------------------------------------------------
# Instructions per epoch (callgrind): the work, whatever the load
# --------------------------------------------------------------------------
#: the variants of :func:`instructions`, in the order they run
WORK_VARIANTS = ("train/pyg", "train/pyg_padded", "train/ipu_wrap", "train/ipu_wrap_trim",
                 "infer/pyg", "infer/pyg_padded", "infer/ipu_wrap", "infer/ipu_wrap_trim")


def _work_fns(limit: int, batch: int, hidden: int, layers: int) -> Dict[str, Callable[[], None]]:
    """One epoch of each variant over the first ``limit`` molecules (pre-collated batches).

    ``pyg_padded`` is the model called directly (no wrapper, plain BatchNorm,
    ``F.l1_loss``) on the padded tensors of the ``FixedSizeLoader`` batches (NaN
    padding targets replaced by 0): the same rows as ``ipu_wrap``, none of its
    work, so ``pyg_padded - pyg`` is the padding's cost and ``ipu_wrap -
    pyg_padded`` the wrapper's (masks, norm, loss, rebuild, Python).
    ``ipu_wrap_trim`` is ``ipu_wrap(..., trim=True)``: the model on the real
    rows, outputs padded back (the first call of each batch signature takes
    the padded path; the warm-up runs it).
    """
    from torch_geometric.data import Batch

    from graph_adapter.app.datasets import load_nci5k
    from graph_adapter.app.models import build_model
    from .throughput import inferer, trainer

    data, _ = load_nci5k(limit=limit)
    for d in data:
        del d.smiles
        d.y = d.y.view(-1)
    flats = list(ga.FixedSizeLoader(data, ga.Budget.fit(data, batch)))
    pyg = [Batch.from_data_list(data[i:i + batch]) for i in range(0, len(data), batch)]
    padded = [(f, torch.nan_to_num(f["y"])) for f in flats]
    torch.manual_seed(0)
    base = build_model("gine", hidden, layers)
    m = {k: copy.deepcopy(base) for k in ("pyg", "pad", "infer_pyg", "infer_pad")}
    w = ga.ipu_wrap(copy.deepcopy(base), loss_fn=ga.masked_loss("l1")).train()
    we = ga.ipu_wrap(copy.deepcopy(base)).eval()
    wt = ga.ipu_wrap(copy.deepcopy(base), loss_fn=ga.masked_loss("l1"), trim=True).train()
    wte = ga.ipu_wrap(copy.deepcopy(base), trim=True).eval()
    for k in ("infer_pyg", "infer_pad"):
        m[k].eval()

    def on(model: nn.Module, x: Mapping[str, Tensor]) -> Tensor:
        return model(x["x"], x["edge_index"], x["edge_attr"], x["batch"])

    return {
        "train/pyg": trainer(m["pyg"], lambda b: F.l1_loss(
            on(m["pyg"], b).view(-1), b.y), pyg),
        "train/pyg_padded": trainer(m["pad"], lambda fy: F.l1_loss(
            on(m["pad"], fy[0]).view(-1), fy[1]), padded),
        "train/ipu_wrap": trainer(w, lambda f: w(f)["loss"], flats),
        "train/ipu_wrap_trim": trainer(wt, lambda f: wt(f)["loss"], flats),
        "infer/pyg": inferer(lambda b: on(m["infer_pyg"], b), pyg),
        "infer/pyg_padded": inferer(lambda f: on(m["infer_pad"], f), flats),
        "infer/ipu_wrap": inferer(we, flats),
        "infer/ipu_wrap_trim": inferer(wte, flats),
    }


def _child(out_dir: str, limit: int, batch: int, hidden: int, layers: int) -> None:
    """Run under callgrind (collection off): warm up, then dump one stats file per variant."""
    torch.set_num_threads(1)  # no OpenMP spinning in the count
    fns = _work_fns(limit, batch, hidden, layers)
    for fn in fns.values():  # warm-up: allocator, Adam state, caches
        fn()
        fn()
    for fn in fns.values():
        torch._C._valgrind_toggle_and_dump_stats()  # collection on (dumps ~nothing)
        fn()
        torch._C._valgrind_toggle_and_dump_stats()  # off: this dump is the variant's


def instructions(limit: int = 256, batch: int = 64, hidden: int = 64,
                 layers: int = 4) -> Dict[str, int]:
    """Instructions (callgrind's ``Ir``) one epoch of each :data:`WORK_VARIANTS` runs.

    Runs this module under ``valgrind --tool=callgrind`` in a child process
    (about ten minutes for 256 molecules on a 2-core VM); single-threaded. The count
    is the work done, independent of other processes' load; it weighs an
    instruction of the Python interpreter like one of a matmul kernel, so it
    is a proxy for time, not a time.

    Raises:
        RuntimeError: valgrind is not installed (``apt-get install valgrind``).
    """
    import glob
    import shutil
    import subprocess
    import tempfile

    if shutil.which("valgrind") is None:
        raise RuntimeError("instructions() needs valgrind on PATH (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--dump-instr=no",
               f"--callgrind-out-file={out}", sys.executable, "-m",
               "benchmarks.harness.opcount", "--_child", tmp, "--limit", str(limit),
               "--batch", str(batch), "--hidden", str(hidden), "--layers", str(layers)]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
        if proc.returncode != 0:
            raise RuntimeError(f"the callgrind run failed ({proc.returncode}):\n"
                               f"{proc.stderr[-3000:]}")
        dumps = sorted(glob.glob(out + ".*"), key=lambda f: int(f.rsplit(".", 1)[1]))
        totals = []
        for f in dumps:
            with open(f) as fh:
                for line in fh:
                    if line.startswith(("summary:", "totals:")):
                        totals.append(int(line.split()[1]))
                        break
        # dumps alternate: (collection switched on: ~0), (the variant)
        counts = totals[1::2]
        if len(counts) != len(WORK_VARIANTS):
            raise RuntimeError(f"expected {len(WORK_VARIANTS)} variant dumps, got {totals}")
        return dict(zip(WORK_VARIANTS, counts))


def format_instructions(counts: Mapping[str, int]) -> str:
    """The instruction counts with the padding / wrapper split."""
    rows = [f"{'instructions per epoch (callgrind Ir)':40s}{'training':>16s}{'inference':>16s}"]
    for v, label in (("pyg", "eager PyG (DataLoader batches)"),
                     ("pyg_padded", "same model on the padded tensors"),
                     ("ipu_wrap", "ipu_wrap eager (FixedSizeLoader)"),
                     ("ipu_wrap_trim", "ipu_wrap(trim=True) eager")):
        cells = "".join(f"{counts[f'{m}/{v}'] / 1e6:13.1f} M " for m in ("train", "infer"))
        rows.append(f"  {label:38s}{cells}")
    for what, a, b in (("padding (padded / PyG)", "pyg", "pyg_padded"),
                       ("wrapper (ipu_wrap / padded)", "pyg_padded", "ipu_wrap"),
                       ("ipu_wrap / PyG", "pyg", "ipu_wrap"),
                       ("ipu_wrap(trim=True) / PyG", "pyg", "ipu_wrap_trim")):
        cells = "".join(f"{counts[f'{m}/{b}'] / counts[f'{m}/{a}']:15.3f}x"
                        for m in ("train", "infer"))
        rows.append(f"  {what:38s}{cells}")
    return "\n".join(rows)


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Print the training-step and inference tables; return ``{"train": {...}, "infer": {...}}``
    of :class:`OpCount` s."""
    from graph_adapter.app.datasets import load_nci5k
    from graph_adapter.app.models import build_model

    ap = argparse.ArgumentParser(prog="python benchmarks/bench_opcount.py")
    ap.add_argument("--batch", type=int, default=64, help="graphs in the one batch")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--model", default="gine")
    ap.add_argument("--loss", default="l1", choices=sorted(_PYG_LOSS))
    ap.add_argument("--ops", action="store_true", help="also list the per-op differences")
    ap.add_argument("--instructions", action="store_true",
                    help="also count the instructions of one epoch of each variant under "
                         "callgrind (needs valgrind; --limit molecules; ~10 min for 256)")
    ap.add_argument("--limit", type=int, default=256, help="molecules for --instructions")
    ap.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._child is not None:
        _child(args._child, args.limit, args.batch, args.hidden, args.layers)
        return {}
    data, _ = load_nci5k(limit=args.batch)
    for d in data:
        del d.smiles
        d.y = d.y.view(-1)
    torch.manual_seed(0)
    model = build_model(args.model, args.hidden, args.layers)
    res: Dict[str, Any] = {}
    for mode in ("train", "infer"):
        counts = compare(model, data, loss=args.loss, train=mode == "train")
        res[mode] = counts
        title = ("training step (forward, loss, backward, zero_grad + Adam)" if mode == "train"
                 else "inference (forward under no_grad)")
        print(format_table(counts, f"{args.model} {args.layers}x{args.hidden}, {len(data)} "
                                   f"molecules, {title}"))
        if args.ops:
            print("per-op differences (ipu_wrap - PyG):")
            print("\n".join(_op_diff(counts)))
        print()
    if args.instructions:
        res["instructions"] = instructions(args.limit, args.batch, args.hidden, args.layers)
        print(f"{args.limit} molecules, {args.batch} graphs a batch, 1 thread:")
        print(format_instructions(res["instructions"]))
    return res


if __name__ == "__main__":  # pragma: no cover - a script
    main()
