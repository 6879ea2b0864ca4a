"""Cost of ``ipu_wrap(..., check_inputs="values")`` against the default, side by side.

    python benchmarks/bench_value_check.py [--limit 1000] [--graphs 64]
        [--rounds 15] [--threads 1] [--batches 12]
    (or python benchmarks/bench_value_check.py ...)

Prints the per-call cost of ``graph_adapter.checker.value_problems`` on the
demo's loader batches (NCI molecules, ``Budget.fit(graphs, --graphs)``) and the
eager training step / inference call of the demo's GINE model (hidden 64, 4
layers, masked L1 loss) with ``check_inputs=True`` (default) and ``"values"``,
interleaved round by round, CPU time, medians. Needs rdkit (the dataset).
"""
import argparse
import copy
import os
import statistics
import time
import warnings
from typing import Optional, Sequence

__all__ = ["main"]


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="python benchmarks/bench_value_check.py",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=1000, help="molecules (default 1000)")
    ap.add_argument("--graphs", type=int, default=64, help="graphs a batch (default 64)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batches", type=int, default=12, help="batches a round (default 12)")
    args = ap.parse_args(argv)

    import torch

    import graph_adapter as ga
    from graph_adapter.checker import value_problems
    from graph_adapter.app.datasets import load_nci5k
    from graph_adapter.app.models import build_model

    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)
    graphs, _ = load_nci5k(limit=args.limit)
    for d in graphs:
        if hasattr(d, "smiles"):
            del d.smiles
    budget = ga.Budget.fit(graphs, args.graphs, seed=0)
    flats = list(ga.FixedSizeLoader(graphs, budget, shuffle=False))[:args.batches]
    print(f"{budget}, {len(flats)} batches, {args.threads} thread(s), CPU time, "
          f"load average {os.getloadavg()[0]:.1f}")

    assert all(value_problems(f) == [] for f in flats)
    ts = []
    for _ in range(args.rounds):
        t0 = time.process_time()
        for f in flats:
            value_problems(f)
        ts.append((time.process_time() - t0) / len(flats) * 1e6)
    check_us = statistics.median(ts)
    print(f"value_problems: {check_us:.0f} us a call (median of {args.rounds} rounds)")

    torch.manual_seed(0)
    model = build_model("gine", 64, 4)
    variants = {}
    for name, ci in (("default", True), ("values", "values")):
        w = ga.ipu_wrap(copy.deepcopy(model), loss_fn=ga.masked_loss("l1"), check_inputs=ci)
        variants[name] = (w, torch.optim.Adam(w.parameters(), 1e-3))

    def train(w, opt, f):
        opt.zero_grad()
        w(f)["loss"].backward()
        opt.step()

    def infer(w, opt, f):
        with torch.no_grad():
            w(f)

    for kind, fn in (("training step", train), ("inference call", infer)):
        res = {k: [] for k in variants}
        for w, opt in variants.values():
            w.train(fn is train)
            for f in flats:
                fn(w, opt, f)  # warm-up
        for _ in range(args.rounds):
            for k, (w, opt) in variants.items():
                t0 = time.process_time()
                for f in flats:
                    fn(w, opt, f)
                res[k].append((time.process_time() - t0) / len(flats) * 1e6)
        med = {k: statistics.median(v) for k, v in res.items()}
        print(f"{kind}: default {med['default']:.0f} us, values {med['values']:.0f} us, "
              f"values/default {med['values'] / med['default']:.3f}; the check alone is "
              f"{100 * check_us / med['default']:.1f}% of it")


if __name__ == "__main__":  # pragma: no cover - a script
    main()
