"""Static aggregation layout: scatter (``index_add``) vs ELL tables, under inductor.

The demo's model (``build_model("gine")``: atom/bond embeddings, 4 stock
``GINEConv`` + BatchNorm, add pooling) on rdkit's NCI-5k molecules, side by
side in one process, training step (forward, backward, Adam) and inference
on pre-collated batches:

* ``pyg``: eager PyG on unpadded ``Batch``es (``DataLoader``'s batching);
* ``wrap_eager``: ``ipu_wrap(model)`` eager on padded batches;
* ``wrap_inductor``: ``graph_adapter.compile(..., "inductor")``, default
  layout (PyG's gather + ``index_add`` scatter; with 2 threads the gather's
  gradient runs ATen's ``index_add`` kernel, ``index_add_fallback``);
* ``wrap_inductor_ell``: the same on batches from
  ``FixedSizeLoader(..., layout="ell")``: PyG's gather and sum aggregation
  are routed through :mod:`graph_adapter.static_layout` (gathers both ways).

The ELL widths are the dataset's largest in-/out-degree (printed): every
node pays for that many slots, so one hub atom in the whole set slows every
batch (``--limit`` changes the set, and so the widths).

Rounds are interleaved (each round runs every variant once, in turn) and the
median of the rounds is reported, as graphs/s and as a ratio to eager PyG.
The 1-minute load average is printed at the start and the end.

Usage: ``python benchmarks/bench_layout.py [--threads 2] [--limit N]
[--rounds 5] [--batch 64] [--hidden 64]``. ``main(argv)`` returns the figures.
"""
from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import time
from typing import Any, Callable, Dict, Optional, Sequence

import torch
import torch.nn.functional as F
from torch_geometric.data import Batch

import graph_adapter as ga

from ..datasets import load_nci5k
from ..models import build_model
from .throughput import inferer, set_inductor_env, timed_interleaved, trainer

__all__ = ["VARIANTS", "main"]

#: Variant names, in the printed order.
VARIANTS = ("pyg", "wrap_eager", "wrap_inductor", "wrap_inductor_ell")


def _pyg_call(model: torch.nn.Module) -> Callable[[Batch], torch.Tensor]:
    return lambda b: model(b.x, b.edge_index, b.edge_attr, b.batch)


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Print the side-by-side table; return ``{"train": {variant: graphs/s},
    "infer": {...}, "ratios": ..., "loadavg": ..., "widths": (Din, Dout)}``."""
    set_inductor_env()
    ap = argparse.ArgumentParser(prog="python -m graph_adapter.app.bench.layout")
    ap.add_argument("--limit", type=int, default=None, help="molecules (default: all)")
    ap.add_argument("--batch", type=int, default=64, help="graphs per batch")
    ap.add_argument("--hidden", type=int, default=64, help="the demo's default")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_start = os.getloadavg()[0]

    data, _ = load_nci5k(limit=args.limit)
    for d in data:  # strings cannot live in a tensor dict
        del d.smiles
        d.y = d.y.view(-1)
    budget = ga.Budget.fit(data, args.batch)
    plain = list(ga.FixedSizeLoader(data, budget))
    ell_loader = ga.FixedSizeLoader(data, budget, layout="ell")
    ell = list(ell_loader)
    pyg = [Batch.from_data_list(data[i:i + args.batch]) for i in range(0, len(data), args.batch)]
    n = len(data)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"data: {n} molecules (NCI-5k), {args.batch} graphs a batch, budget {budget}, "
          f"ELL widths (Din, Dout) = {ell_loader.collator.layout_widths}")

    torch.manual_seed(0)
    base = build_model("gine", args.hidden, args.layers)
    loss_fn = ga.masked_loss("l1")

    def models(train: bool) -> Dict[str, Any]:
        m = copy.deepcopy(base).train(train)
        w = {k: ga.ipu_wrap(copy.deepcopy(base), loss_fn=loss_fn).train(train)
             for k in VARIANTS[1:]}
        return {"pyg": m, **w}

    res: Dict[str, Any] = {"widths": ell_loader.collator.layout_widths}
    for mode in ("train", "infer"):
        ms = models(mode == "train")
        calls = {"pyg": _pyg_call(ms["pyg"]), "wrap_eager": ms["wrap_eager"],
                 "wrap_inductor": ga.compile(ms["wrap_inductor"], "inductor"),
                 "wrap_inductor_ell": ga.compile(ms["wrap_inductor_ell"], "inductor")}
        batches = {"pyg": pyg, "wrap_eager": plain, "wrap_inductor": plain,
                   "wrap_inductor_ell": ell}
        if mode == "train":
            fns = {"pyg": trainer(ms["pyg"], lambda b: F.l1_loss(
                       _pyg_call(ms["pyg"])(b).view(-1), b.y), pyg)}
            for k in VARIANTS[1:]:
                fns[k] = trainer(ms[k], lambda f, c=calls[k]: c(f)["loss"], batches[k])
        else:
            fns = {k: inferer(calls[k], batches[k]) for k in VARIANTS}
        t0 = time.perf_counter()
        for fn in fns.values():  # warm-up: compiles, allocator, Adam state
            fn()
        res[f"{mode}_warmup_s"] = time.perf_counter() - t0
        secs = timed_interleaved(fns, args.rounds, statistics.median)
        res[mode] = {k: n / secs[k] for k in VARIANTS}
    res["loadavg"] = (load_start, os.getloadavg()[0])

    print()
    print(f"{'graphs/s (ratio to eager PyG)':34s}{'training':>20s}{'inference':>20s}")
    labels = {"pyg": "eager PyG (DataLoader batches)", "wrap_eager": "ipu_wrap eager",
              "wrap_inductor": "ipu_wrap + inductor (scatter)",
              "wrap_inductor_ell": "ipu_wrap + inductor (ELL)"}
    res["ratios"] = {}
    for k in VARIANTS:
        r = {m: res[m][k] / res[m]["pyg"] for m in ("train", "infer")}
        res["ratios"][k] = r
        print(f"{labels[k]:34s}" + "".join(f"{res[m][k]:11.0f} ({r[m]:4.2f}x)"
                                           for m in ("train", "infer")))
    print(f"median of {args.rounds} interleaved rounds; warm-up (compiles) train "
          f"{res['train_warmup_s']:.0f} s, inference {res['infer_warmup_s']:.0f} s")
    print(f"load average (1 min) at start {res['loadavg'][0]:.2f}, at end {res['loadavg'][1]:.2f} "
          f"({os.cpu_count()} cores)")
    return res


if __name__ == "__main__":  # pragma: no cover - a script
    main()
