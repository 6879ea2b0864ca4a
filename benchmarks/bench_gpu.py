"""GPU: CUDA graphs (``backend="inductor_cudagraphs"``) vs eager PyG on the same GPU.

The demo's model and GIN 4 x 128 + BatchNorm (:mod:`benchmarks.harness.model_table`),
rdkit's NCI-5k molecules, 64 and 256 graphs a batch; pre-collated batches on
the device for both sides (step time only): eager PyG on ``Batch``es moved to
the GPU, against ``FixedSizeLoader(..., device=...)`` + ``ipu_wrap`` +
``graph_adapter.compile(backend="inductor_cudagraphs")`` (one recorded graph per
budget and mode, replayed every step). Training (one Adam step a batch) and
inference (``no_grad``), interleaved rounds, the best round; GPU time is
taken with ``torch.cuda.synchronize()`` around each round. The first call of
each mode (compile and graph recording) is timed apart.

Usage::

    python benchmarks/bench_gpu.py --device cuda [--models demo gin] [--batches 64 256]
        [--limit 5000] [--rounds 5]

Without a CUDA device it prints why and exits 0 (nothing measured).
``--device cpu`` runs the same code with ``backend="inductor"`` (a smoke test
of the script, not a GPU figure). No figure of this script has been measured
yet: docs/benchmarks.md says so until one is.
"""
import argparse
import copy
import os
import platform
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from benchmarks.harness.throughput import set_inductor_env  # noqa: E402

set_inductor_env()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.harness import model_table as M  # noqa: E402
from graph_adapter.app.datasets import load_nci5k  # noqa: E402
from graph_adapter.backends import compile  # noqa: E402
from graph_adapter.batching import Budget
from graph_adapter.batching import FixedSizeLoader
from graph_adapter.nn import ipu_wrap


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _rounds(fns, rounds, device):
    best = {k: float("inf") for k in fns}
    for fn in fns.values():  # one untimed pass each: first-call work (optimizer state,
        fn()                 # lazy inits, allocator growth) is not a step
    for _ in range(rounds):
        for k, fn in fns.items():
            _sync(device)
            t = time.perf_counter()
            fn()
            _sync(device)
            best[k] = min(best[k], time.perf_counter() - t)
    return best


def measure(name, data, batch, device, backend, rounds):
    """``{"train": ratio, "infer": ratio, ...}`` for one model and batch size."""
    from torch_geometric.data import Batch

    layout = M.MODELS[name][2]() if callable(M.MODELS[name][2]) else M.MODELS[name][2]
    budget = Budget.fit(data, batch)
    pyg = [Batch.from_data_list(data[i:i + batch]).to(device) for i in range(0, len(data), batch)]
    flats = list(FixedSizeLoader(data, budget, shuffle=False, layout=layout, device=device))
    base = M.build(name).to(device)
    out = {"budget": str(budget)}

    m_inf = copy.deepcopy(base).eval()
    c_inf = compile(ipu_wrap(copy.deepcopy(base)).eval(), backend)
    _sync(device)
    t = time.perf_counter()
    with torch.no_grad():
        c_inf(flats[0])
    _sync(device)
    out["first_infer_s"] = time.perf_counter() - t

    def infer(fn, batches):
        def run():
            with torch.no_grad():
                for b in batches:
                    fn(b)
        return run

    t_inf = _rounds({"pyg": infer(m_inf, pyg), "ours": infer(c_inf, flats)}, rounds, device)

    m_tr = copy.deepcopy(base).train()
    w_tr = ipu_wrap(copy.deepcopy(base), loss_fn=M._wrapped_loss).train()
    c_tr = compile(w_tr, backend)
    _sync(device)
    t = time.perf_counter()
    c_tr(flats[0])["loss"].backward()
    _sync(device)
    out["first_train_s"] = time.perf_counter() - t
    for p in w_tr.parameters():
        p.grad = None

    def train(model, loss_of, batches):
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)

        def run():
            for b in batches:
                loss = loss_of(b)
                opt.zero_grad()
                loss.backward()
                opt.step()
        return run

    pyg_loss = lambda b: F.mse_loss(m_tr(b).view(-1), b.y.view(-1) / M.SCALE)  # noqa: E731
    t_tr = _rounds({"pyg": train(m_tr, pyg_loss, pyg),
                    "ours": train(w_tr, lambda f: c_tr(f)["loss"], flats)}, rounds, device)
    n = len(data)
    out.update(infer_pyg=n / t_inf["pyg"], infer_ours=n / t_inf["ours"],
               train_pyg=n / t_tr["pyg"], train_ours=n / t_tr["ours"])
    out["infer"] = out["infer_ours"] / out["infer_pyg"]
    out["train"] = out["train_ours"] / out["train_pyg"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", nargs="*", default=["demo", "gin"], choices=sorted(M.MODELS))
    ap.add_argument("--batches", nargs="*", type=int, default=[64, 256])
    ap.add_argument("--limit", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("bench_gpu: skipped: no CUDA device here (torch.cuda.is_available() is False); "
              "nothing measured")
        return 0
    backend = "inductor_cudagraphs" if device.type == "cuda" else "inductor"
    data, _ = load_nci5k(limit=args.limit)
    for d in data:
        del d.smiles
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "none (CPU smoke run)"
    print(f"device {device} ({gpu}), backend {backend}, torch {torch.__version__}, "
          f"{platform.processor() or platform.machine()} host, {len(data)} NCI-5k molecules, "
          f"best of {args.rounds} interleaved rounds")
    print("| model | batch | budget | training | inference | first training step (s) "
          "| first inference call (s) |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for name in args.models:
        for batch in args.batches:
            r = measure(name, data, batch, device, backend, args.rounds)
            print(f"| {name} | {batch} | {r['budget']} | {r['train']:.2f}x | {r['infer']:.2f}x "
                  f"| {r['first_train_s']:.1f} | {r['first_infer_s']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
