"""An ONNX ladder (one model, an ``If`` branch a rung) against one-budget ONNX artifacts,
side by side in one run.

    python benchmarks/bench_onnx_ladder.py [--limit 3000] [--hidden 64] [--layers 4]
                                           [--threads 1] [--rounds 7]

The demo's model (GINE with atom/bond embeddings, BatchNorm, add pooling; random
weights, ``eval()``) on rdkit's NCI-5k molecules. Written with ``graph_adapter.export``
(``format="onnx"``): the ladder (``ladder=True``: rungs fitted for calls of 1, 16 and 256
molecules) and one one-budget artifact per rung budget (the same padded calls). Printed:

* load: ``serve.load`` seconds and file size of each;
* call: the program alone on one padded call (``run_padded``): the ladder's rung (in the
  session ``serve`` makes for it) vs the one-budget artifact of that rung's budget, and
  the ladder in one plain onnxruntime session (every rung's ``If`` run a call: the
  design not taken);
* predict: ``serve.load(path).predict(request)`` (checking, packing, splitting
  included) on requests of 1 and of 256 molecules: the ladder vs the one-budget artifact
  fitted for 256 (what a server without a ladder runs) and vs the 1-molecule one.

Each figure is the median of ``--rounds`` interleaved rounds; the machine's load is
printed beside them (the ratios are from one process, measured side by side).

    python benchmarks/bench_onnx_ladder.py --ab BEFORE.onnx AFTER.onnx [--rounds 9]

instead compares two artifacts of the same model and budget (e.g. written by two
checkouts of ``export``, ``bench_serve``'s ``Budget.fit(data, 300)`` with
``example=data[:8]``: ``--write-one PATH [--checkout DIR]`` writes that artifact with this
checkout's ``export``, or DIR's, e.g. ``git archive`` of an older commit) on the same requests of 256 molecules in interleaved rounds, next to
eager PyG: ``predict`` wall and CPU time, on two request sets, the data's slices in file
order and random draws (``bench_serve``'s two sets), and the programs alone on each
set's first padded call. The artifacts must be exported from the model this script
builds (``--hidden``/``--layers``, ``torch.manual_seed(0)``): their predictions are
checked against eager PyG's.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout

import numpy as np  # noqa: E402
import torch  # noqa: E402

from graph_adapter import serve  # noqa: E402
from graph_adapter.app.datasets import load_nci5k  # noqa: E402
from graph_adapter.app.models import build_model  # noqa: E402
from graph_adapter.exporter import export  # noqa: E402
from graph_adapter.batching import Budget, FixedSizeLoader  # noqa: E402
from graph_adapter.nn import ipu_wrap  # noqa: E402
from graph_adapter.serve.pack import pack_call, plan_calls  # noqa: E402

KEYS = ("x", "edge_index", "edge_attr")


def _load_avg():
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def _timed(fn, reps):
    """(wall, CPU) seconds a call: CPU time (this process's, one onnxruntime thread)
    moves less than wall time when other work shares the cores."""
    t, c = time.perf_counter(), time.process_time()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps, (time.process_time() - c) / reps


def _median_rounds(variants, rounds):
    """name -> (wall, CPU) median seconds a call over ``rounds`` rounds, variants
    interleaved."""
    got = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (fn, reps) in variants.items():
            got[name].append(_timed(fn, reps))
    return {name: tuple(statistics.median(x[k] for x in v) for k in (0, 1))
            for name, v in got.items()}


def _plain_session(path, threads):
    """The ladder in one onnxruntime session, no overrides: every rung's ``If`` runs a
    call (the design ``serve`` does not use: measured beside it)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


#: ``--write-one``: bench_serve's one-budget ONNX artifact, exported by the checkout in
#: argv[1] (its own ``graph_adapter``), the model built as this script builds it
_WRITE_ONE = """
import sys
sys.path.insert(0, sys.argv[1])
import torch
from graph_adapter.app.datasets import load_nci5k
from graph_adapter.app.models import build_model
from graph_adapter.exporter import export
from graph_adapter.batching import Budget
from graph_adapter.nn import ipu_wrap
torch.set_num_threads(1)
data, _ = load_nci5k()
torch.manual_seed(0)
model = build_model("gine", hidden=int(sys.argv[3]), layers=int(sys.argv[4])).eval()
export(ipu_wrap(model).eval(), Budget.fit(data, 300), sys.argv[2], format="onnx",
       example=data[:8])
"""


def _write_one(args):
    """``--write-one PATH [--checkout DIR]``: the artifact, in a process of its own."""
    import subprocess

    root = os.path.abspath(args.checkout or os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    subprocess.run([sys.executable, "-c", _WRITE_ONE, root, os.path.abspath(args.write_one),
                    str(args.hidden), str(args.layers)], check=True, cwd=root)
    print(f"wrote {args.write_one} with the export of {root}")


def _ab(args, data, model):
    """``--ab BEFORE AFTER``: the two artifacts and eager PyG on the same requests."""
    import random

    from torch_geometric.data import Batch

    before, after = (serve.load(p, threads=args.threads) for p in args.ab)
    for d in data:  # (as bench_serve: eager PyG's Batch carries no SMILES strings)
        if "smiles" in d:
            del d.smiles
    # bench_serve's two sets of 256-molecule requests, the same molecules on the same data
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_serve import _streams

    ids = _streams(data, random.Random(0))
    sets = {name: [[data[i] for i in r] for r in ids[key]]
            for name, key in (("ordered slices", "256 ordered"), ("random draws", "256"))}

    def eager(graphs):
        b = Batch.from_data_list(graphs)
        with torch.no_grad():
            return model(b.x, b.edge_index, b.edge_attr, b.batch)
    for name, reqs in sets.items():
        feeds = [[{k: d[k].numpy() for k in KEYS} for d in r] for r in reqs]
        ref = eager(reqs[0]).numpy().reshape(-1)
        for p in (before, after):
            np.testing.assert_allclose(np.stack(p.predict(feeds[0])).reshape(-1), ref,
                                       rtol=1e-4, atol=1e-3)
        calls = [len(before.plan(before.check(f))) for f in feeds]
        m = _median_rounds({"eager PyG": (lambda: [eager(r) for r in reqs], 1),
                            "before": (lambda: [before.predict(f) for f in feeds], 1),
                            "after": (lambda: [after.predict(f) for f in feeds], 1)},
                           args.rounds)
        flat_b, flat_a = before.pack(feeds[0])[0], after.pack(feeds[0])[0]
        core = _median_rounds({"before": (lambda: before.run_padded(flat_b), 10),
                               "after": (lambda: after.run_padded(flat_a), 10)}, args.rounds)
        ew, ec = m["eager PyG"]
        print(f"\n{name}: {len(reqs)} requests of 256, {np.mean(calls):.3f} calls a request "
              f"(median of {args.rounds} rounds; {_load_avg()})")
        for k in ("before", "after"):
            w, c = m[k]
            print(f"  predict {k:6s} {w / len(reqs) * 1e3:7.3f} ms wall / {c / len(reqs) * 1e3:7.3f}"
                  f" ms CPU a request: {ew / w:.2f}x / {ec / c:.2f}x eager PyG; program alone "
                  f"{core[k][0] * 1e3:6.3f} / {core[k][1] * 1e3:6.3f} ms a call")
        print(f"  after / before: predict {m['after'][0] / m['before'][0]:.3f}x wall, "
              f"{m['after'][1] / m['before'][1]:.3f}x CPU; program "
              f"{core['after'][0] / core['before'][0]:.3f}x wall, "
              f"{core['after'][1] / core['before'][1]:.3f}x CPU")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--ab", nargs=2, metavar=("BEFORE", "AFTER"), default=None,
                    help="two .onnx artifacts of this model and one budget: predict A/B")
    ap.add_argument("--write-one", default=None, metavar="PATH",
                    help="write bench_serve's one-budget .onnx (Budget.fit(data, 300), "
                         "example=data[:8]) to PATH and stop")
    ap.add_argument("--checkout", default=None, metavar="DIR",
                    help="with --write-one: export with DIR's graph_adapter (a checkout)")
    ap.add_argument("--limit", type=int, default=3000)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    if args.write_one:
        return _write_one(args)
    torch.set_num_threads(args.threads)
    data, _ = load_nci5k(limit=args.limit)
    torch.manual_seed(0)
    model = build_model("gine", hidden=args.hidden, layers=args.layers).eval()
    if args.ab:
        return _ab(args, data, model)
    wrapped = ipu_wrap(model)
    tmp = tempfile.mkdtemp(prefix="bench_onnx_ladder_")
    print(f"{len(data)} molecules, GINE {args.layers} x {args.hidden}, {args.threads} "
          f"onnxruntime thread(s); {_load_avg()}")

    t = time.perf_counter()
    ladder_path = os.path.join(tmp, "ladder.onnx")
    contract = export(wrapped, FixedSizeLoader(data, Budget.fit(data, 256)), ladder_path,
                      format="onnx", ladder=True, threads=args.threads)
    print(f"ladder export {time.perf_counter() - t:.1f} s: rungs " + "; ".join(
        f"{r.program} nodes={r.nodes} edges={r.edges} graphs={r.graphs}" for r in contract.rungs))
    one_paths = []
    for r in contract.rungs:
        b = Budget(nodes=r.nodes, edges=r.edges, graphs=r.graphs)
        path = os.path.join(tmp, f"one_{r.program}.onnx")
        export(wrapped, FixedSizeLoader(data, b), path, format="onnx", threads=args.threads)
        one_paths.append(path)

    # ---- load
    loads = {}
    for name, path in [("ladder", ladder_path)] + [(f"one {r.program}", p) for r, p in
                                                   zip(contract.rungs, one_paths)]:
        times = []
        for _ in range(5):
            t = time.perf_counter()
            serve.load(path, threads=args.threads)
            times.append(time.perf_counter() - t)
        loads[name] = (statistics.median(times), os.path.getsize(path) / 1e6)
    times = []
    for _ in range(5):
        t = time.perf_counter()
        _plain_session(ladder_path, args.threads)
        times.append(time.perf_counter() - t)
    loads["ladder, one plain session"] = (statistics.median(times), loads["ladder"][1])
    print(f"\nload (median of 5; {_load_avg()}); the ladder: one session a rung plus the "
          f"one that reads the contract")
    for name, (s, mb) in loads.items():
        print(f"  {name:26s} {s * 1e3:8.1f} ms  {mb:6.2f} MB")

    ladder = serve.load(ladder_path, threads=args.threads)
    ones = [serve.load(p, threads=args.threads) for p in one_paths]
    requests = {1: [{k: data[i][k].numpy() for k in KEYS} for i in range(1)],
                256: [{k: d[k].numpy() for k in KEYS} for d in data[:256]]}

    # ---- one padded call: the ladder's rung vs the one-budget artifact of its budget
    plain = _plain_session(ladder_path, args.threads)
    print(f"\nprogram alone, one padded call, wall / CPU (median of {args.rounds} rounds; "
          f"{_load_avg()})")
    for i, (r, one) in enumerate(zip(contract.rungs, ones)):
        req = requests[256][:max(1, min(r.graphs - 1, 255))]
        flat_o = one.pack(req)[0]
        # the same graphs packed for the rung (its budget is the one-budget artifact's;
        # its spill capacity may differ: the ladder's is fitted on the data, the
        # one-budget artifact's on its check batches)
        checked = ladder.check(req)
        first = [checked[j] for j in plan_calls(ladder.rungs[i], checked)[0]]
        flat_l = pack_call(ladder.rungs[i], ladder.ops, first)
        c = ladder.contract
        feed = {n: flat_l[f.key] for n, f in zip(c.onnx_input_names, c.inputs) if n}
        feed[c.onnx_rung_input] = np.zeros(i + 1, dtype=np.int64)
        outs = list(c.onnx_output_names)
        k = min(len(first), len(one.plan(one.check(req))[0][1]))  # (request order: the
        # first k graphs are the same in both calls)
        np.testing.assert_allclose(plain.run(outs, feed)[0][:k],
                                   one.run_padded(flat_o)["output"][:k], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ladder.run_padded(flat_l, i)["output"][:k],
                                   one.run_padded(flat_o)["output"][:k], rtol=1e-5, atol=1e-5)
        reps = 400 if r.graphs <= 20 else 30
        m = _median_rounds({"one": (lambda: one.run_padded(flat_o), reps),
                            "ladder": (lambda: ladder.run_padded(flat_l, i), reps),
                            "plain": (lambda: plain.run(outs, feed), reps)},
                           args.rounds)
        (ow, oc), (lw, lc), (pw, pc) = m["one"], m["ladder"], m["plain"]
        print(f"  {r.program} (graphs={r.graphs:3d}): one-budget {ow * 1e3:7.3f} / "
              f"{oc * 1e3:7.3f} ms; ladder (rung session) {lw * 1e3:7.3f} / {lc * 1e3:7.3f} ms "
              f"({lw / ow:.3f}x / {lc / oc:.3f}x, CPU {(lc - oc) * 1e6:+.0f} us); one plain "
              f"session {pw * 1e3:7.3f} / {pc * 1e3:7.3f} ms ({pw / ow:.3f}x / {pc / oc:.3f}x, "
              f"CPU {(pc - oc) * 1e6:+.0f} us)")

    # ---- predict: the ladder vs one-budget artifacts
    big = max(range(len(contract.rungs)), key=lambda i: contract.rungs[i].graphs)
    small = min(range(len(contract.rungs)), key=lambda i: contract.rungs[i].graphs)
    print(f"\npredict(request) (median of {args.rounds} rounds; {_load_avg()})")
    for size, reps in ((1, 400), (256, 20)):
        req = requests[size]
        variants = {"ladder": (lambda: ladder.predict(req), reps),
                    f"one-budget {contract.rungs[big].graphs - 1}": (
                        lambda: ones[big].predict(req), reps),
                    f"one-budget {contract.rungs[small].graphs - 1}": (
                        lambda: ones[small].predict(req), max(reps // (size // 2 or 1), 3))}
        m = _median_rounds(variants, args.rounds)
        (bw, bc) = m["ladder"]
        row = ", ".join(f"{k} {w * 1e3:.3f} ms wall / {c * 1e3:.3f} ms CPU ({w / bw:.2f}x / "
                        f"{c / bc:.2f}x the ladder's)" for k, (w, c) in m.items())
        print(f"  {size:3d} molecule(s): {row}; ladder calls/request "
              f"{len(ladder.plan(ladder.check(req)))}")
    print(f"\n{_load_avg()}")


if __name__ == "__main__":
    main()
