"""HYB spill add: ``scatter_add`` (poptorch-safe) vs ``index_add``, under inductor.

The demo's model on its HYB layout, rdkit's NCI-5k molecules, 64 a batch, one
thread: compiled training steps and inference of the two spill adds
(:data:`graph_adapter.nn.static_layout.SPILL_ADD`), in interleaved rounds in
one process, each compiled once with its setting (the setting is read at trace
time, and each compiled model runs with the global set to its own value, so
Dynamo's guard on it passes). Prints graphs/s of both and the ratio, with the
load average.

Usage: ``python benchmarks/bench_spill.py [--limit 1000] [--rounds 5] [--threads 1]``
"""
import argparse
import copy
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from benchmarks.harness.throughput import set_inductor_env  # noqa: E402

set_inductor_env()

import torch  # noqa: E402

from benchmarks.harness import model_table as M  # noqa: E402
from graph_adapter.app.datasets import load_nci5k  # noqa: E402
from graph_adapter.backends import compile  # noqa: E402
from graph_adapter.batching import Budget
from graph_adapter.batching import FixedSizeLoader
from graph_adapter.nn import static_layout  # noqa: E402
from graph_adapter.nn import ipu_wrap


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data, _ = load_nci5k(limit=args.limit)
    for d in data:
        del d.smiles
    budget = Budget.fit(data, 64)
    flats = list(FixedSizeLoader(data, budget, shuffle=False, layout="hyb"))
    base = M.build("demo")
    kinds = ("index_add", "scatter_add")
    models = {}
    for kind in kinds:
        static_layout.SPILL_ADD = kind
        w = ipu_wrap(copy.deepcopy(base), loss_fn=M._wrapped_loss).train()
        c = compile(w, "inductor", background=False)
        t = time.perf_counter()
        c(flats[0])["loss"].backward()
        first_train = time.perf_counter() - t
        c.eval()
        t = time.perf_counter()
        with torch.no_grad():
            c(flats[0])
        models[kind] = (w, c, torch.optim.Adam(w.parameters(), 1e-3), first_train,
                        time.perf_counter() - t)
    best = {(k, m): float("inf") for k in kinds for m in ("train", "infer")}
    load0 = os.getloadavg()[0]
    for _ in range(args.rounds):
        for kind in kinds:
            static_layout.SPILL_ADD = kind
            w, c, opt, *_ = models[kind]
            c.train()
            t = time.process_time()
            for f in flats:
                loss = c(f)["loss"]
                opt.zero_grad()
                loss.backward()
                opt.step()
            best[kind, "train"] = min(best[kind, "train"], time.process_time() - t)
            c.eval()
            t = time.process_time()
            with torch.no_grad():
                for f in flats:
                    c(f)
            best[kind, "infer"] = min(best[kind, "infer"], time.process_time() - t)
    n = len(data)
    print(f"{n} molecules, {len(flats)} batches, budget {budget}, {args.threads} thread(s), "
          f"best of {args.rounds} interleaved rounds (process CPU time)")
    for kind in kinds:
        print(f"  {kind:12s} train {n / best[kind, 'train']:8.0f} graphs/s  infer "
              f"{n / best[kind, 'infer']:8.0f} graphs/s  (first steps {models[kind][3]:.1f} s / "
              f"{models[kind][4]:.1f} s)")
    for m in ("train", "infer"):
        print(f"  {m}: scatter_add / index_add = "
              f"{best['index_add', m] / best['scatter_add', m]:.2f}x")
    print(f"load average (1 min) {load0:.2f} -> {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
