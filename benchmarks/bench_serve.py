"""Serving throughput and latency: pt2 / ONNX artifacts vs eager PyG, side by side in one run.

    python benchmarks/bench_serve.py [--limit 5000] [--hidden 64] [--layers 4]
                                     [--rounds 5] [--latency 200] [--threads 1]

The demo's model (GINE with atom/bond embeddings, BatchNorm, add pooling; random weights,
``eval()``: weights do not change the cost) on rdkit's NCI-5k molecules. Two budgets, each
exported twice (``graph_adapter.export``, ``format="pt2"`` and ``"onnx"``):
``Budget.fit(data, 300)`` for request batches of 256 molecules (most fit one call), ``Budget.fit(data, 1)``
for one molecule a request. Every variant answers the same requests in the same round
(interleaved, ``--rounds`` rounds of 8 batches): eager PyG is ``Batch.from_data_list`` +
the model under ``no_grad``; the artifacts are ``serve.load(path).predict(requests)`` on
plain dicts (torch tensors for pt2, numpy arrays for ONNX): checking, packing and
splitting per graph included. The programs alone are also measured next to
``graph_adapter.compile(wrapped, "inductor")`` on the same padded calls. Prints predictions/s (wall clock and per CPU-second of the
process) and the ratio to eager PyG, p50 latency of one molecule, artifact size and load
time. Ratios are from one process, measured side by side; the machine's load is printed.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR",
                      os.path.join(tempfile.gettempdir(), "graph_adapter_bench_inductor"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout

import torch  # noqa: E402
from torch_geometric.data import Batch  # noqa: E402

from graph_adapter import serve  # noqa: E402
from graph_adapter.app.datasets import load_nci5k  # noqa: E402
from graph_adapter.app.models import build_model  # noqa: E402
from graph_adapter.backends import compile as ga_compile
from graph_adapter.backends.export import export  # noqa: E402
from graph_adapter.batching import Budget
from graph_adapter.nn import ipu_wrap

KEYS = ("x", "edge_index", "edge_attr")


def _clock():
    return time.perf_counter(), time.process_time()


def _since(start):
    w, c = _clock()
    return w - start[0], c - start[1]


def _eager(model):
    def run(graphs):
        b = Batch.from_data_list(graphs)
        with torch.no_grad():
            return model(b.x, b.edge_index, b.edge_attr, b.batch)
    return run


def _requests(graphs, kind):
    if kind == "torch":
        return [{k: d[k] for k in KEYS} for d in graphs]
    return [{k: d[k].numpy() for k in KEYS} for d in graphs]


def _export_all(wrapped, data, graphs_per_call, tmp, threads):
    """Both formats for one budget; the pt2 once per thread count (``export(threads=)``:
    inductor compiles its loops for one thread count)."""
    budget = Budget.fit(data, graphs_per_call)
    out = {}
    for fmt, thr in [("onnx", None)] + [("pt2", t) for t in threads]:
        path = os.path.join(tmp, f"b{graphs_per_call}{'' if thr is None else f'-t{thr}'}.{fmt}")
        t = time.perf_counter()
        kw = {} if thr is None else {"threads": thr}
        export(wrapped, budget, path, format=fmt, example=data[:min(graphs_per_call, 8)], **kw)
        out[fmt if thr is None else (fmt, thr)] = (path, time.perf_counter() - t)
    return budget, out


def _load(path, threads):
    loads = []
    for _ in range(3):
        t = time.perf_counter()
        p = serve.load(path, threads=threads)
        loads.append(time.perf_counter() - t)
    return p, statistics.median(loads)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--latency", type=int, default=200, help="single-molecule requests")
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    args = ap.parse_args(argv)
    print(f"load average at start: {os.getloadavg()}; cpus: {os.cpu_count()}; "
          f"torch {torch.__version__}")
    data, _ = load_nci5k(limit=args.limit)
    for d in data:
        del d.smiles
    torch.manual_seed(0)
    model = build_model("gine", hidden=args.hidden, layers=args.layers).eval()
    wrapped = ipu_wrap(model).eval()
    tmp = tempfile.mkdtemp(prefix="bench_serve_")
    # a budget sized for 300 graphs a batch on average: most 256-molecule requests fit
    # one padded call (the calls per request are printed)
    big_budget, big = _export_all(wrapped, data, 300, tmp, args.threads)
    one_budget, one = _export_all(wrapped, data, 1, tmp, args.threads)
    print(f"budgets: Budget.fit(data, 300) -> {big_budget}, batch 1 -> {one_budget}")
    for name, arts in (("300", big), ("1", one)):
        for fmt, (path, secs) in arts.items():
            print(f"artifact {fmt} for batch {name}: {os.path.getsize(path) / 1e6:.2f} MB, "
                  f"export {secs:.1f} s")
    eager = _eager(model)
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        preds = {"pt2": _load(big[("pt2", threads)][0], threads),
                 "onnx": _load(big["onnx"][0], threads)}
        torch.set_num_threads(threads)  # serve.load(pt2, threads) sets it too: keep it
        variants = {"eager PyG": (eager, None), "pt2": (preds["pt2"][0].predict, "torch"),
                    "onnx": (preds["onnx"][0].predict, "numpy")}
        batches = [data[i:i + 256] for i in range(0, min(len(data), 8 * 256), 256)]
        reqs = {v: [_requests(b, kind) if kind else b for b in batches]
                for v, (_, kind) in variants.items()}
        for v, (fn, _) in variants.items():  # warm-up
            fn(reqs[v][0])
        # same molecules, same order: the artifacts' predictions equal eager PyG's
        ref = eager(batches[0]).view(-1)
        for v in ("pt2", "onnx"):
            got = torch.stack([torch.as_tensor(p).view(-1) for p in
                               variants[v][0](reqs[v][0])]).view(-1)
            assert torch.allclose(got, ref, atol=1e-3, rtol=1e-4), (v, (got - ref).abs().max())
        calls0 = preds["pt2"][0].calls
        tot = {v: [0.0, 0.0, 0] for v in variants}
        for _ in range(args.rounds):
            for v, (fn, _) in variants.items():
                for r in reqs[v]:
                    s = _clock()
                    fn(r)
                    w, c = _since(s)
                    tot[v][0] += w
                    tot[v][1] += c
                    tot[v][2] += len(r)
        print(f"threads {threads}: {(preds['pt2'][0].calls - calls0) / (args.rounds * len(batches)):.2f} "
              f"padded calls per 256-molecule request")
        base = tot["eager PyG"]
        for v, (w, c, n) in tot.items():
            rows.append(("batch 256", threads, v, n / w, n / c, (n / w) / (base[2] / base[0]),
                         (n / c) / (base[2] / base[1])))
        # the compiled programs alone: pre-packed calls vs the model on pre-collated batches
        # (what checking, packing and splitting in Python cost is the difference to above)
        packed = {v: [preds[v][0].pack(r) for r in reqs[v]] for v in ("pt2", "onnx")}
        collated = [Batch.from_data_list(b) for b in batches]

        def model_only(bt):
            with torch.no_grad():
                return model(bt.x, bt.edge_index, bt.edge_attr, bt.batch)
        # and graph_adapter.compile(wrapped, "inductor") on the same padded calls: what
        # the exported program is measured against (it should be no slower)
        compiled = ga_compile(wrapped, "inductor")

        def compiled_calls(fl):
            with torch.no_grad():
                return [compiled(f) for f in fl]
        compiled_calls(packed["pt2"][0])  # compiles (not timed)
        core = {"eager PyG": (model_only, collated),
                "compiled": (compiled_calls, packed["pt2"]),
                "pt2": (lambda fl: [preds["pt2"][0].run_padded(f) for f in fl], packed["pt2"]),
                "onnx": (lambda fl: [preds["onnx"][0].run_padded(f) for f in fl],
                         packed["onnx"])}
        ctot = {v: [0.0, 0.0] for v in core}
        for _ in range(args.rounds):
            for v, (fn, items) in core.items():
                for it in items:
                    s = _clock()
                    fn(it)
                    w, c = _since(s)
                    ctot[v][0] += w
                    ctot[v][1] += c
        n = args.rounds * sum(len(b) for b in batches)
        for v, (w, c) in ctot.items():
            rows.append(("model only", threads, v, n / w, n / c,
                         ctot["eager PyG"][0] / w, ctot["eager PyG"][1] / c))
        # one molecule a request: the batch-1 artifacts
        lat_preds = {"pt2": serve.load(one[("pt2", threads)][0], threads=threads).predict,
                     "onnx": serve.load(one["onnx"][0], threads=threads).predict}
        torch.set_num_threads(threads)
        singles = data[:args.latency]
        fns = {"eager PyG": (eager, None), "pt2": (lat_preds["pt2"], "torch"),
               "onnx": (lat_preds["onnx"], "numpy")}
        sreqs = {v: [(_requests([d], kind) if kind else [d]) for d in singles]
                 for v, (_, kind) in fns.items()}
        lat = {v: [] for v in fns}
        for v, (fn, _) in fns.items():
            fn(sreqs[v][0])
        for i in range(len(singles)):
            for v, (fn, _) in fns.items():
                s = time.perf_counter()
                fn(sreqs[v][i])
                lat[v].append(time.perf_counter() - s)
        p50 = {v: statistics.median(x) for v, x in lat.items()}
        for v in fns:
            rows.append(("p50 1 molecule", threads, v, p50[v] * 1e3, None,
                         p50[v] / p50["eager PyG"], None))
        for fmt in ("pt2", "onnx"):
            rows.append(("load", threads, fmt, preds[fmt][1] * 1e3, None, None, None))
    print(f"\nload average at end: {os.getloadavg()}")
    print(f"{'what':<15} {'thr':>3} {'variant':<10} {'value':>12} {'per CPU-s':>10} "
          f"{'x eager (wall)':>14} {'x eager (CPU)':>13}")
    for what, thr, v, val, cpu, rw, rc in rows:
        unit = {"batch 256": "pred/s", "model only": "pred/s", "p50 1 molecule": "ms",
                "load": "ms"}[what]
        print(f"{what:<15} {thr:>3} {v:<10} {val:>9.1f} {unit:<2} "
              f"{'' if cpu is None else f'{cpu:.0f}':>10} "
              f"{'' if rw is None else f'{rw:.2f}x':>14} {'' if rc is None else f'{rc:.2f}x':>13}")
    print("p50 rows: 'x eager' is latency / eager PyG's latency (below 1: faster); 'model "
          "only': the compiled programs on pre-packed calls vs the model on pre-collated "
          "batches (no checking, packing, collating or splitting); 'compiled' there is "
          "graph_adapter.compile(wrapped, 'inductor') on the same padded calls")


if __name__ == "__main__":
    main()
