"""Static aggregation layout: scatter (``index_add``) vs ELL / HYB tables, under inductor.

The demo's model (``build_model("gine")``: atom/bond embeddings, 4 stock
``GINEConv`` + BatchNorm, add pooling) on rdkit's NCI-5k molecules, side by
side in one process, training step (forward, backward, Adam) and inference
on pre-collated batches:

* ``pyg``: eager PyG on unpadded ``Batch``es (``DataLoader``'s batching);
* ``wrap_eager``: ``ipu_wrap(model)`` eager on padded batches;
* ``wrap_eager_trim``: ``ipu_wrap(model, trim=True)`` eager on the same
  padded batches: the model runs on their real rows only, outputs padded back;
* ``wrap_inductor``: ``graph_adapter.compile(..., "inductor")``, default
  layout (PyG's gather + ``index_add`` scatter; with 2 threads the gather's
  gradient runs ATen's ``index_add`` kernel, ``index_add_fallback``);
* ``wrap_inductor_atomic``: the same with ``index_add_fallback=False``
  (inductor's own generated scatter, atomic adds);
* ``wrap_inductor_ell``: batches from ``FixedSizeLoader(..., layout="ell")``:
  PyG's gather and sum aggregation are routed through
  :mod:`graph_adapter.nn.static_layout` (gathers both ways), tables as wide as
  the dataset's largest degree;
* ``wrap_inductor_hyb``: ``layout="hyb"``: tables as wide as the 99.5th
  percentile of the degrees, the edges past a node's width summed from a
  short spill list (``--hyb-widths D`` adds ``wrap_inductor_hyb<D>`` with
  width ``D``).

* ``wrap_inductor_hyb_plain``: the same HYB batches compiled without the
  embedding-table projection (``_fx_rewrites``) and, in inference, without
  the C++ wrapper (``options=PLAIN_OPTIONS``): what those two settings add.

* ``wrap_inductor_cudagraphs`` (``--device cuda`` only): ``"inductor_cudagraphs"``,
  the default layout with CUDA graphs (one replay a step).

With ``--device cuda`` every model and pre-collated batch is moved to the
GPU first and each timed pass ends with ``torch.cuda.synchronize()``; the
host-to-device copy is not timed (the loader's ``device=`` overlaps it).

The HYB routing applies in inference too (its narrow slot sums run in
parallel over nodes; the scatter forward is ATen's serial kernel at more than
one thread); ELL's wide tables do not (inference keeps the scatter there).
Inference wraps the model without the loss (eager PyG's computes none).

The ELL widths are the dataset's largest in-/out-degree (printed): every
node pays for that many slots, so one hub atom in the whole set slows every
batch (``--limit`` changes the set, and so the widths).

Rounds are interleaved (each round runs every variant once, in turn); the
median of the rounds is reported as graphs/s and as a ratio to eager PyG,
with the range of the per-round ratios (a round's variants share its load).
The 1-minute load average is printed at the start and the end.

``--select``: after the table, what ``graph_adapter.compile(..., "inductor",
select="measure")`` picks on the HYB batches, per mode (a fresh copy of the
model each; the trial's steps are real training steps), with the medians it
measured (ms a step, call to call: the Adam step included in training) and
each candidate's speed relative to the eager candidate of the same trial. The
medians are of ``--select-steps`` steps each, so they are noisier than the
table's passes and are not compared with them.

Usage: ``python benchmarks/bench_layout.py [--threads 2] [--limit N]
[--rounds 5] [--batch 64] [--hidden 64] [--variants a,b] [--hyb-widths 3]
[--clock wall|cpu] [--select] [--select-steps 3]``.
``main(argv)`` returns the figures.
"""
from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch_geometric.data import Batch

import graph_adapter as ga

from graph_adapter.backends import Measure
from graph_adapter.app.datasets import load_nci5k
from graph_adapter.app.models import build_model
from .throughput import inferer, set_inductor_env, timed_interleaved, trainer

__all__ = ["VARIANTS", "main", "selection"]

#: Variant names, in the printed order (``--hyb-widths D`` appends ``wrap_inductor_hyb<D>``).
VARIANTS = ("pyg", "wrap_eager", "wrap_eager_trim", "wrap_inductor", "wrap_inductor_atomic", "wrap_inductor_ell",
            "wrap_inductor_hyb", "wrap_inductor_hyb_plain")
#: ``wrap_inductor_hyb_plain``: HYB without the two newest inductor settings (the
#: embedding-table projection and, for inference, the C++ wrapper), to measure them.
PLAIN_OPTIONS = {"pre_grad_custom_pass": None, "cpp_wrapper": False}
#: Variants that need a CUDA device (``--device cuda``).
CUDA_VARIANTS = ("wrap_inductor_cudagraphs",)


def _pyg_call(model: torch.nn.Module) -> Callable[[Batch], torch.Tensor]:
    return lambda b: model(b.x, b.edge_index, b.edge_attr, b.batch)


def _synced(fn: Callable[[], None], device: torch.device) -> Callable[[], None]:
    def run() -> None:
        fn()
        torch.cuda.synchronize(device)
    return run


def _parser() -> argparse.ArgumentParser:
    """The script's flags."""
    ap = argparse.ArgumentParser(prog="python benchmarks/bench_layout.py")
    ap.add_argument("--limit", type=int, default=None, help="molecules (default: all)")
    ap.add_argument("--batch", type=int, default=64, help="graphs per batch")
    ap.add_argument("--hidden", type=int, default=64, help="the demo's default")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--variants", default=None,
                    help=f"comma-separated subset of {','.join(VARIANTS[1:])} (pyg always runs)")
    ap.add_argument("--hyb-widths", type=int, action="append", default=[], metavar="D",
                    help="also time layout='hyb' with widths (D, D) (repeatable)")
    ap.add_argument("--device", default="cpu",
                    help="cpu, or cuda (adds wrap_inductor_cudagraphs; docs/benchmarks.md, "
                         "'On a GPU')")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: this process's CPU time (steadier under load; with 1 thread "
                         "it is the work done, with more it includes OpenMP's spinning)")
    ap.add_argument("--select", action="store_true",
                    help="also run compile(select='measure') on the HYB batches, per mode")
    ap.add_argument("--select-steps", type=int, default=3, help="timed steps per candidate")
    return ap


def _variants(args: argparse.Namespace, cuda: bool) -> List[str]:
    """The variants to time: every one (``--hyb-widths``' too, and the CUDA ones on a GPU),
    or ``--variants``' subset ("pyg", the baseline, always first)."""
    variants = (list(VARIANTS) + [f"wrap_inductor_hyb{d}" for d in args.hyb_widths]
                + (list(CUDA_VARIANTS) if cuda else []))
    if args.variants:
        keep = set(args.variants.split(","))
        unknown = keep - set(variants)
        if unknown & set(CUDA_VARIANTS):
            raise SystemExit(f"--variants {sorted(unknown & set(CUDA_VARIANTS))} need "
                             f"--device cuda")
        if unknown:
            raise SystemExit(f"unknown --variants {sorted(unknown)}; choose from {variants[1:]}")
        variants = ["pyg"] + [v for v in variants[1:] if v in keep]
    return variants


def _batches(data: List[Any], budget: Any, args: argparse.Namespace, variants: List[str],
             device: torch.device) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, Any],
                                            Dict[Any, Any]]:
    """Each variant's batches (collated once, on ``device``), the layouts' widths and
    spill capacities: ``(batches, widths, spills, collated)`` (``collated``: (layout,
    widths) -> (batches, widths, spills), the variants of one layout sharing them)."""
    layouts: Dict[str, Any] = {"wrap_inductor_ell": ("ell", None),
                               "wrap_inductor_hyb": ("hyb", None),
                               "wrap_inductor_hyb_plain": ("hyb", None)}
    layouts.update({f"wrap_inductor_hyb{d}": ("hyb", (d, d)) for d in args.hyb_widths})
    plain = list(ga.FixedSizeLoader(data, budget))
    batches: Dict[str, Any] = {"wrap_eager": plain, "wrap_eager_trim": plain,
                               "wrap_inductor": plain,
                               "wrap_inductor_atomic": plain, "wrap_inductor_cudagraphs": plain}
    widths: Dict[str, Any] = {}
    spills: Dict[str, Any] = {}
    collated: Dict[Any, Any] = {}  # variants of one layout share its batches
    for k, (lay, w) in layouts.items():
        if k in variants or (args.select and k == "wrap_inductor_hyb"):
            if (lay, w) not in collated:
                loader = ga.FixedSizeLoader(data, budget, layout=lay, layout_widths=w)
                collated[lay, w] = (list(loader), loader.collator.layout_widths,
                                    loader.collator.layout_spills)
            batches[k], widths[k], spills[k] = collated[lay, w]
    pyg = [Batch.from_data_list(data[i:i + args.batch]) for i in range(0, len(data), args.batch)]
    batches["pyg"] = pyg
    if device.type != "cpu":  # the batches live on the device; the copies are not timed
        moved: Dict[int, Any] = {}  # variants sharing one list share its copy
        for k, bs in batches.items():
            if id(bs) not in moved:
                moved[id(bs)] = [b.to(device) if k == "pyg" else ga.format.to_device(b, device)
                                 for b in bs]
            batches[k] = moved[id(bs)]
    return batches, widths, spills, collated


def _print_setup(data: List[Any], budget: Any, args: argparse.Namespace, device: torch.device,
                 widths: Dict[str, Any], spills: Dict[str, Any]) -> None:
    """The machine, the data and the layouts' widths, before the table."""
    cuda = device.type == "cuda"
    n = len(data)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}, threads {torch.get_num_threads()}"
          + (f", {torch.cuda.get_device_name(device)}" if cuda else ", CPU only"))
    print(f"data: {n} molecules (NCI-5k), {args.batch} graphs a batch, budget {budget}")
    for k in widths:
        print(f"  {k}: widths (Din, Dout) = {widths[k]}"
              + (f", spill capacity (Kin, Kout) = {spills[k]}" if spills[k] else ""))


def _compiled(k: str, m: torch.nn.Module) -> Any:
    """Variant ``k``'s wrapped model ``m``, compiled as that variant compiles it."""
    if k in ("wrap_eager", "wrap_eager_trim"):
        return m
    if k == "wrap_inductor_cudagraphs":
        return ga.compile(m, "inductor_cudagraphs")
    return ga.compile(m, "inductor", background=False,  # the steady state is timed
                      index_add_fallback=False if k == "wrap_inductor_atomic" else None,
                      options=PLAIN_OPTIONS if k == "wrap_inductor_hyb_plain" else None)


def _time_mode(mode: str, variants: List[str], base: torch.nn.Module, loss_fn: Any,
               batches: Dict[str, Any], args: argparse.Namespace, device: torch.device,
               n: int, res: Dict[str, Any]) -> None:
    """Time every variant in ``mode`` ("train" or "infer") in interleaved rounds, after a
    warm-up pass; fills ``res[mode]`` (graphs/s), ``res["ratios"]``, ``res["spread"]`` and
    ``res[mode + "_warmup_s"]``."""
    cuda = device.type == "cuda"
    pyg = batches["pyg"]
    names = list(variants)
    train = mode == "train"
    pyg_model = copy.deepcopy(base).train(train)
    # inference: no loss inside the wrapper (eager PyG's inference computes none)
    ms = {k: ga.ipu_wrap(copy.deepcopy(base), loss_fn=loss_fn if train else None,
                         trim=k == "wrap_eager_trim").train(train)
          for k in names[1:]}
    calls = {"pyg": _pyg_call(pyg_model), **{k: _compiled(k, ms[k]) for k in names[1:]}}
    if train:
        fns = {"pyg": trainer(pyg_model, lambda b: F.l1_loss(
                   calls["pyg"](b).view(-1), b.y), pyg)}
        for k in names[1:]:
            fns[k] = trainer(ms[k], lambda f, c=calls[k]: c(f)["loss"], batches[k])
    else:
        fns = {k: inferer(calls[k], batches[k]) for k in names}
    if cuda:  # a pass ends when the GPU has done its work
        fns = {k: _synced(fn, device) for k, fn in fns.items()}
    t0 = time.perf_counter()
    for fn in fns.values():  # warm-up: compiles, allocator, Adam state
        fn()
    res[f"{mode}_warmup_s"] = time.perf_counter() - t0
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    times = timed_interleaved(fns, args.rounds, lambda v: v, clock)  # every round's time
    res[mode] = {k: n / statistics.median(times[k]) for k in names}
    for k in names:
        per_round = [p / t for p, t in zip(times["pyg"], times[k])]
        res["ratios"].setdefault(k, {})[mode] = res[mode][k] / res[mode]["pyg"]
        res["spread"].setdefault(k, {})[mode] = (min(per_round), max(per_round))


def _print_table(res: Dict[str, Any], variants: List[str], args: argparse.Namespace) -> None:
    """The side-by-side table of :func:`main`'s figures."""
    print()
    print(f"{'graphs/s (ratio to eager PyG; range over rounds)':48s}"
          f"{'training':>28s}{'inference':>28s}")
    labels = {"pyg": "eager PyG (DataLoader batches)", "wrap_eager": "ipu_wrap eager",
              "wrap_eager_trim": "ipu_wrap eager, trim=True",
              "wrap_inductor": "ipu_wrap + inductor (scatter)",
              "wrap_inductor_atomic": "  same, inductor's atomic scatter",
              "wrap_inductor_ell": "ipu_wrap + inductor (ELL)",
              "wrap_inductor_hyb": "ipu_wrap + inductor (HYB)",
              "wrap_inductor_hyb_plain": "  same, no table projection / C++ wrapper",
              "wrap_inductor_cudagraphs": "ipu_wrap + inductor + CUDA graphs"}
    for k in variants:
        label = labels.get(k, f"ipu_wrap + inductor (HYB, width {k[len('wrap_inductor_hyb'):]})")
        cells = []
        for m in ("train", "infer"):
            lo, hi = res["spread"][k][m]
            cells.append(f"{res[m][k]:9.0f} ({res['ratios'][k][m]:4.2f}x; {lo:4.2f}-{hi:4.2f})")
        print(f"{label:48s}" + "".join(cells))
    print(f"{args.clock} clock, median of {args.rounds} interleaved rounds; warm-up (compiles) "
          f"train {res['train_warmup_s']:.0f} s, inference {res['infer_warmup_s']:.0f} s")
    if args.select:
        print(f"compile(select='measure') on the HYB batches (median of {args.select_steps} "
              f"steps per candidate, in rotation; ratio: the eager candidate's median over "
              f"each one's, same trial):")
        for m, c in res["select"].items():
            eager = c["medians"].get("eager")
            cells = ", ".join(f"{k} {1e3 * v:.1f} ms" + (f" ({eager / v:.2f}x)" if eager else "")
                              for k, v in c["medians"].items())
            print(f"  {m}: picks {c['winner']}; {cells}; trial {c['trial_s']:.0f} s")
    print(f"load average (1 min) at start {res['loadavg'][0]:.2f}, at end {res['loadavg'][1]:.2f} "
          f"({os.cpu_count()} cores)")


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Print the side-by-side table; return ``{"train": {variant: graphs/s},
    "infer": {...}, "ratios": {variant: {mode: median ratio}}, "spread":
    {variant: {mode: (min, max) per-round ratio}}, "loadavg": ..., "widths":
    {layout: (Din, Dout)}, "spills": (Kin, Kout)}``."""
    set_inductor_env()
    args = _parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    load_start = os.getloadavg()[0]
    device = torch.device(args.device)
    variants = _variants(args, device.type == "cuda")
    data, _ = load_nci5k(limit=args.limit)
    for d in data:  # strings cannot live in a tensor dict
        del d.smiles
        d.y = d.y.view(-1)
    budget = ga.Budget.fit(data, args.batch)
    batches, widths, spills, collated = _batches(data, budget, args, variants, device)
    _print_setup(data, budget, args, device, widths, spills)
    torch.manual_seed(0)
    base = build_model("gine", args.hidden, args.layers).to(device)
    loss_fn = ga.masked_loss("l1")
    res: Dict[str, Any] = {"device": str(device), "widths": widths, "spills": spills,
                           "ratios": {}, "spread": {},
                           "clock": args.clock, "threads": args.threads}
    for mode in ("train", "infer"):
        _time_mode(mode, variants, base, loss_fn, batches, args, device, len(data), res)
    if args.select:
        res["select"] = selection(base, loss_fn, collated["hyb", None][0], args.select_steps)
    res["loadavg"] = (load_start, os.getloadavg()[0])
    _print_table(res, variants, args)
    return res


def selection(base: torch.nn.Module, loss_fn: Any, batches: Sequence[Any],
              steps: int = 3, backend: str = "inductor") -> Dict[str, Any]:
    """``{"train"|"infer": Choice.as_dict() + {"trial_s": seconds}}``: what
    ``compile(wrapped, backend, select=Measure(steps=steps))`` picks on ``batches``,
    training (Adam steps) and inference, each on a fresh copy of ``base``; ``trial_s``
    is the wall time until the choice, compiles included."""
    out: Dict[str, Any] = {}
    for mode, train in (("train", True), ("infer", False)):
        w = ga.ipu_wrap(copy.deepcopy(base), loss_fn=loss_fn if train else None).train(train)
        sel = ga.compile(w, backend, select=Measure(steps=steps))
        opt = torch.optim.Adam(w.parameters(), lr=1e-3)
        key = "training" if train else "inference"
        t0, i = time.perf_counter(), 0
        while key not in sel.choices:
            flat = batches[i % len(batches)]
            i += 1
            if train:
                loss = sel(flat)["loss"]
                opt.zero_grad()
                loss.backward()
                opt.step()
            else:
                with torch.no_grad():
                    sel(flat)
        out[mode] = {**sel.choices[key].as_dict(), "trial_s": time.perf_counter() - t0}
    return out


if __name__ == "__main__":  # pragma: no cover - a script
    main()
