"""Serving throughput and latency: pt2 / ONNX artifacts vs eager PyG, side by side in one run.

    python benchmarks/bench_serve.py [--limit 5000] [--hidden 64] [--layers 4]
                                     [--rounds 5] [--latency 200] [--threads 1]
                                     [--only programs sizes server]

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

``sizes``: requests of 1, 16 and 256 molecules and a mixed-size stream (sizes drawn from
1..256, most small), and "256 ordered", the data's slices of 256 in file order (the
programs part times the same two sets of 256: random draws and ordered slices), each
answered by eager PyG, the one-budget artifacts (fitted for 300 graphs a call) and the
ladder artifacts (``export(..., ladder=True, max_nodes=, max_edges=)`` for the data's
largest molecule), interleaved: molecules/s, p50 and p99 per request.
``server``: ``python -m graph_adapter.serve`` in a process of its own (1 thread), 8 client
threads here posting pre-encoded bodies over keep-alive connections (per-graph JSON lists;
"256 columnar": JSON columns, flat; "256 npz": ``numpy.savez``), each pass next to the same
requests through in-process ``predict`` one after another: molecules/s, their ratio
(median and range over ``--server-repeats`` passes), and CPU seconds per 1000 molecules
of the server's processes (its program's child included) and of ``predict``.
``--server-json``: the server with orjson and/or with the standard library's JSON (orjson
hidden from it); ``--server-program``: its ``--program-in`` (``child``: the program
in a process of its own, the default; ``server``: in the server's process);
``--server-before DIR``: also another checkout's server (e.g. ``git archive`` of an
older commit) with its own defaults, for a before/after in one run. ``--reuse DIR``
keeps the one-budget exports between runs.
"""
import argparse
import os
import random
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
from graph_adapter.exporter import export  # noqa: E402
from graph_adapter.batching import Budget
from graph_adapter.nn import ipu_wrap

KEYS = ("x", "edge_index", "edge_attr")
BEFORE = [None]  # --server-before DIR: a checkout whose server runs as decoder "before"


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


# -- requests of 1, 16, 256 molecules and a mixed stream; the server under 8 clients -----

def _mixed_sizes(rng, count):
    """Request sizes of a stream: most small, some bulk (1: 40%, 2-16: 35%, 17-64: 15%,
    65-256: 10%)."""
    out = []
    for _ in range(count):
        u = rng.random()
        lo, hi = (1, 1) if u < .4 else (2, 16) if u < .75 else (17, 64) if u < .9 else (65, 256)
        out.append(rng.randint(lo, hi))
    return out


def _streams(data, rng):
    """``{name: [request, ...]}``: lists of molecule indices, the same for every variant."""
    n = len(data)

    def reqs(sizes):
        return [[rng.randrange(n) for _ in range(k)] for k in sizes]
    return {"1": reqs([1] * 200), "16": reqs([16] * 60), "256": reqs([256] * 12),
            "mixed": reqs(_mixed_sizes(rng, 60)), "256 ordered": _ordered(data)}


def _ordered(data, size=256):
    """The data's consecutive slices of ``size`` molecules, in file order (a client scoring
    its file in chunks: neighbours in the file are alike, so a slice's size varies more
    than a random draw's and some pass the one budget: two calls)."""
    return [list(range(i, i + size)) for i in range(0, len(data) - size + 1, size)]


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def _export_ladders(wrapped, data, tmp, threads):
    """The ladder artifacts (pt2, and onnx where this version writes one): default rungs
    (calls of about 1, 16 and 256 graphs) plus a top rung for the data's largest molecule."""
    from graph_adapter.batching import FixedSizeLoader

    loader = FixedSizeLoader(data, Budget.fit(data, 300))
    big_n = max(d.num_nodes for d in data)
    big_e = max(d.num_edges for d in data)
    out = {}
    for fmt in ("pt2", "onnx"):
        path = os.path.join(tmp, f"ladder.{fmt}")
        t = time.perf_counter()
        try:
            kw = {"threads": threads} if fmt == "pt2" else {}
            c = export(wrapped, loader, path, format=fmt, ladder=True, max_nodes=big_n,
                       max_edges=big_e, **kw)
        except Exception as e:  # noqa: BLE001 - a format without ladders: said, skipped
            print(f"ladder {fmt}: not written ({type(e).__name__}: {str(e)[:160]})")
            continue
        print(f"ladder {fmt}: rungs {[(r.nodes, r.edges, r.graphs) for r in c.rungs]}, "
              f"{os.path.getsize(path) / 1e6:.2f} MB, export {time.perf_counter() - t:.0f} s")
        out[fmt] = path
    return out


def _sizes(data, model, variants, streams, rounds):
    """Interleaved rounds: every variant answers every stream's requests; per (stream,
    variant) the request latencies and the molecules answered, wall seconds."""
    eager = _eager(model)
    lat = {(s, v): [] for s in streams for v in variants}
    for _ in range(rounds):
        for s, reqs in streams.items():
            for v, (p, kind) in variants.items():
                for r in reqs:
                    graphs = [data[i] for i in r]
                    req = graphs if p is None else _requests(graphs, kind)
                    t = time.perf_counter()
                    (eager if p is None else p.predict)(req)
                    lat[(s, v)].append(time.perf_counter() - t)
    return lat


def _print_sizes(lat, streams, variants):
    print(f"\nrequests by size (load average now {os.getloadavg()}):")
    print(f"{'requests':<9} {'variant':<14} {'mol/s':>9} {'x eager':>8} {'x 1-budget':>10} "
          f"{'p50 ms':>8} {'p99 ms':>8}")
    for s, reqs in streams.items():
        mols = sum(map(len, reqs))
        rate = {v: mols * (len(lat[(s, v)]) // len(reqs)) / sum(lat[(s, v)]) for v in variants}
        for v in variants:
            fmt = v.split()[0]
            one = rate.get(f"{fmt} 1-budget") if fmt in ("pt2", "onnx") else None
            ratio = "" if one is None or v.endswith("1-budget") else f"{rate[v] / one:.2f}x"
            print(f"{s:<9} {v:<14} {rate[v]:>9.0f} {rate[v] / rate['eager PyG']:>7.2f}x "
                  f"{ratio:>10} {_pct(lat[(s, v)], .5) * 1e3:>8.2f} "
                  f"{_pct(lat[(s, v)], .99) * 1e3:>8.2f}")


def _proc_cpu(pid):
    """User + system CPU seconds of process ``pid`` and its live children (the server's
    program process; Linux ``/proc``)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(entry) == pid or int(fields[1]) == pid:  # (fields[1]: its parent)
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


#: the server run with the standard library's JSON: orjson made unimportable in its process
_STDLIB_JSON = ("import sys; sys.modules['orjson'] = None; "
                "from graph_adapter.serve.server import serve_main; "
                "sys.exit(serve_main(sys.argv[1:], prog='python -m graph_adapter.serve'))")


def _start_server(path, threads, delay_ms, decoder="orjson", program="auto"):
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    where = ["--program-in", program]
    if decoder == "before":  # another checkout's server (--server-before DIR), as it was
        root, decoder, where = BEFORE[0], "orjson", []
    head = ["-m", "graph_adapter.serve"] if decoder == "orjson" else ["-c", _STDLIB_JSON]
    proc = subprocess.Popen([sys.executable, *head, path, "--port", "0", *where,
                             "--threads", str(threads), "--max-delay-ms", str(delay_ms)],
                            stdout=subprocess.PIPE, text=True, cwd=root,
                            env=dict(os.environ, PYTHONPATH=root))
    line = proc.stdout.readline()  # "serving ... on http://127.0.0.1:PORT: ..."
    if "http://127.0.0.1:" not in line:  # it did not start (its error is on stderr)
        proc.wait(30)
        raise AssertionError(f"the server did not start ({decoder}): {line!r}")
    port = int(line.split("http://127.0.0.1:")[1].split(":")[0])
    return proc, port


def _clients(port, bodies, clients=8):
    """``clients`` threads posting ``bodies`` (round robin) over keep-alive connections;
    wall seconds, and the answers' counts (all must be 200)."""
    import http.client
    import json
    import threading

    errors = []

    def run(mine):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        for b, n, ctype in mine:
            conn.request("POST", "/predict", b, {"Content-Type": ctype})
            r = conn.getresponse()
            doc = json.loads(r.read())
            if r.status != 200 or len(doc["predictions"]) != n:
                errors.append((r.status, str(doc)[:200]))
        conn.close()
    threads = [threading.Thread(target=run, args=(bodies[c::clients],)) for c in range(clients)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:3]
    return time.perf_counter() - t


def _npz_body(graphs):
    import io

    import numpy as np

    buf = io.BytesIO()
    np.savez(buf, num_nodes=np.array([d.num_nodes for d in graphs]),
             num_edges=np.array([d.num_edges for d in graphs]),
             x=np.concatenate([d.x.numpy() for d in graphs]),
             edge_index=np.concatenate([d.edge_index.numpy() for d in graphs], axis=1),
             edge_attr=np.concatenate([d.edge_attr.numpy() for d in graphs]))
    return buf.getvalue()


def _columnar_body(graphs):
    """The JSON columnar form: each key's rows of every graph concatenated, flat."""
    import json

    import numpy as np

    cols = {"x": np.concatenate([d.x.numpy() for d in graphs]),
            "edge_index": np.concatenate([d.edge_index.numpy() for d in graphs], axis=1),
            "edge_attr": np.concatenate([d.edge_attr.numpy() for d in graphs])}
    return json.dumps({"num_nodes": [d.num_nodes for d in graphs],
                       "num_edges": [d.num_edges for d in graphs],
                       "columns": {k: v.ravel().tolist() for k, v in cols.items()}})


def _body(kind, graphs):
    """(body, graphs, content type) of one request in the form ``kind`` names."""
    import json

    if kind.endswith("npz"):
        return _npz_body(graphs), len(graphs), serve.NPZ_TYPE
    if kind.endswith("columnar"):
        return _columnar_body(graphs), len(graphs), "application/json"
    return (json.dumps({"graphs": [{k: d[k].tolist() for k in KEYS} for d in graphs]}),
            len(graphs), "application/json")


def _server_once(path, threads, delay, decoder, bodies, local, local_reqs, repeats,
                 program="auto"):
    """One server process; ``repeats`` times its 8 clients' pass, then the same requests
    through in-process ``predict``, back to back. Per pass: (server wall, server CPU,
    local wall, local CPU); and the calls per request."""
    import http.client
    import json

    out = []
    proc, port = _start_server(path, threads, delay, decoder, program)
    try:
        _clients(port, bodies[:16])  # warm-up
        local.predict(local_reqs[0])
        for _ in range(repeats):
            cpu0 = _proc_cpu(proc.pid)
            wall = _clients(port, bodies)
            cpu = _proc_cpu(proc.pid) - cpu0
            t, c0 = time.perf_counter(), time.process_time()
            for r in local_reqs:
                local.predict(r)
            out.append((wall, cpu, time.perf_counter() - t, time.process_time() - c0))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/health")
        health = json.loads(conn.getresponse().read())
        conn.close()
    finally:
        proc.terminate()
        proc.wait(30)
    return out, health["calls"] / max(health["requests"], 1)


def _server(data, artifacts, threads, total, rng, only_sizes, decoders=("orjson",),
            delays=(0.0, 2.0), repeats=3, programs=("auto",)):
    """The server (its own process) under 8 clients vs in-process ``predict``, per size."""
    print(f"\nserver under 8 concurrent clients vs in-process predict, 1 thread "
          f"(load average now {os.getloadavg()}); medians of {repeats} passes, each server "
          f"pass next to an in-process pass over the same requests:")
    print(f"{'artifact':<14} {'requests':<14} {'json':<6} {'program':<7} {'delay':>5} "
          f"{'server mol/s':>12} "
          f"{'predict mol/s':>13} {'ratio':>6} {'(min-max)':>11} {'CPU-s/1k mol: server':>10} "
          f"{'predict':>8} {'calls/req':>9}")
    sizes = {"1": [1] * total, "16": [16] * (total // 2), "256": [256] * (total // 16),
             "mixed": _mixed_sizes(rng, total // 4), "256 columnar": [256] * (total // 16),
             "256 npz": [256] * (total // 16)}
    sizes = {k: v for k, v in sizes.items() if k in only_sizes}
    for name, path in artifacts.items():
        local = serve.load(path, threads=threads)
        torch.set_num_threads(threads)
        kind = "torch" if path.endswith(".pt2") else "numpy"
        for s, ks in sizes.items():
            reqs = [[data[rng.randrange(len(data))] for _ in range(k)] for k in ks]
            bodies = [_body(s, r) for r in reqs]
            local_reqs = [_requests(r, kind) for r in reqs]
            mols = sum(ks)
            runs = [(d, w, delay) for d in (decoders if not s.endswith("npz") else
                                            [d for d in decoders if d == "before"] + ["-"])
                    for w in (programs if d != "before" else ["-"]) for delay in delays]
            for decoder, where, delay in runs:
                try:
                    passes, calls = _server_once(
                        path, threads, delay, "orjson" if decoder == "-" else decoder,
                        bodies, local, local_reqs, repeats,
                        "auto" if where == "-" else where)
                except AssertionError as e:  # the artifact failed a request: said
                    print(f"{name:<14} {s:<14} {decoder:<6} {where:<7} {delay:>5.0f} "
                          f"failed: {str(e)[:300]}")
                    continue
                med = [statistics.median(p[i] for p in passes) for i in range(4)]
                ratios = sorted(p[2] / p[0] for p in passes)
                print(f"{name:<14} {s:<14} {decoder:<6} {where:<7} {delay:>5.0f} "
                      f"{mols / med[0]:>12.0f} {mols / med[2]:>13.0f} "
                      f"{statistics.median(ratios):>5.2f}x "
                      f"{f'{ratios[0]:.2f}-{ratios[-1]:.2f}':>11} "
                      f"{med[1] / mols * 1e3:>10.3f} {med[3] / mols * 1e3:>8.3f} "
                      f"{calls:>9.2f}  (load {os.getloadavg()[0]:.1f})", flush=True)


def run_sizes_and_server(args, data, model, wrapped, tmp):
    """The ``sizes`` and ``server`` parts (see the module's docstring)."""
    import random

    threads = args.threads[0]
    torch.set_num_threads(threads)
    one = {}
    budget = Budget.fit(data, 300)
    want = set(args.server_artifacts) if args.only == ["server"] else None
    for fmt in ("pt2", "onnx"):
        path = os.path.join(tmp, f"one.{fmt}")
        if want is not None and f"{fmt} 1-budget" not in want:
            continue
        kw = {"threads": threads} if fmt == "pt2" else {}
        if not (args.reuse and os.path.exists(path)):  # --reuse: a previous run's export
            export(wrapped, budget, path, format=fmt, example=data[:8], **kw)
        one[fmt] = path
    ladders = (_export_ladders(wrapped, data, tmp, threads)
               if want is None or any(a.endswith("ladder") for a in want) else {})
    print(f"one budget: {budget}; exports done (load average {os.getloadavg()})")
    rng = random.Random(0)
    if "sizes" in args.only:
        variants = {"eager PyG": (None, None)}
        for fmt, kind in (("pt2", "torch"), ("onnx", "numpy")):
            variants[f"{fmt} 1-budget"] = (serve.load(one[fmt], threads=threads), kind)
            if fmt in ladders:
                variants[f"{fmt} ladder"] = (serve.load(ladders[fmt], threads=threads), kind)
        torch.set_num_threads(threads)
        streams = _streams(data, rng)
        _sizes(data, model, variants, {k: v[:3] for k, v in streams.items()}, 1)  # warm-up
        lat = _sizes(data, model, variants, streams, max(1, args.rounds // 2))
        _print_sizes(lat, streams, variants)
    if "server" in args.only:
        arts = {f"{fmt} ladder": p for fmt, p in ladders.items()}
        arts.update({f"{fmt} 1-budget": p for fmt, p in one.items()})
        arts = {k: v for k, v in arts.items() if k in args.server_artifacts}
        _server(data, arts, threads, args.server_requests, rng, args.server_sizes,
                args.server_json, args.server_delays, args.server_repeats,
                args.server_program)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--latency", type=int, default=200, help="single-molecule requests")
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--only", nargs="+", default=["programs", "sizes", "server"],
                    choices=["programs", "sizes", "server"])
    ap.add_argument("--server-sizes", nargs="+",
                    default=["1", "16", "256", "mixed", "256 columnar", "256 npz"])
    ap.add_argument("--server-json", nargs="+", default=["orjson", "json"],
                    choices=["orjson", "json", "before"], help="the server's JSON reader: orjson (if "
                    "installed) or the standard library's (orjson hidden from it)")
    ap.add_argument("--server-delays", nargs="+", type=float, default=[0.0, 2.0])
    ap.add_argument("--server-program", nargs="+", default=["auto"],
                    choices=["auto", "child", "server"],
                    help="the server's --program-in: auto (the default: child), child "
                         "(the program in a process of its own), server")
    ap.add_argument("--server-repeats", type=int, default=3,
                    help="passes per server process, each next to an in-process pass")
    ap.add_argument("--server-artifacts", nargs="+",
                    default=["pt2 ladder", "onnx ladder", "pt2 1-budget", "onnx 1-budget"])
    ap.add_argument("--server-requests", type=int, default=400,
                    help="requests per size the 8 clients post in all")
    ap.add_argument("--reuse", default=None, metavar="DIR",
                    help="write the one-budget artifacts to DIR, and reuse those there "
                         "(same --limit/--hidden/--layers/--threads!)")
    ap.add_argument("--server-before", default=None, metavar="DIR",
                    help="also run the server of the checkout (or `git archive` of one) in "
                         "DIR, as json 'before', for a before/after in one run")
    args = ap.parse_args(argv)
    if args.server_before:
        BEFORE[0] = os.path.abspath(args.server_before)
        args.server_json = ["before"] + list(args.server_json)
    print(f"load average at start: {os.getloadavg()}; cpus: {os.cpu_count()}; "
          f"torch {torch.__version__}")
    data, _ = load_nci5k(limit=args.limit)
    for d in data:
        del d.smiles
    torch.manual_seed(0)
    model = build_model("gine", hidden=args.hidden, layers=args.layers).eval()
    wrapped = ipu_wrap(model).eval()
    tmp = args.reuse or tempfile.mkdtemp(prefix="bench_serve_")
    os.makedirs(tmp, exist_ok=True)
    if "sizes" in args.only or "server" in args.only:
        run_sizes_and_server(args, data, model, wrapped, tmp)
    if "programs" not in args.only:
        return
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
        # the sizes part's two sets of 256-molecule requests: random draws (the same
        # molecules) and the data's slices in file order
        sets = {name: [[data[i] for i in r] for r in ids] for name, ids in
                _streams(data, random.Random(0)).items() if name in ("256", "256 ordered")}
        batches = sets["256 ordered"][:8]  # (the programs alone: as before)
        for name, reqset in sets.items():
            reqs = {v: [_requests(b, kind) if kind else b for b in reqset]
                    for v, (_, kind) in variants.items()}
            for v, (fn, _) in variants.items():  # warm-up
                fn(reqs[v][0])
            # same molecules, same order: the artifacts' predictions equal eager PyG's
            ref = eager(reqset[0]).view(-1)
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
            label = "batch " + ("256 random" if name == "256" else name)
            print(f"threads {threads}, {label}: {len(reqset)} requests, "
                  f"{(preds['pt2'][0].calls - calls0) / (args.rounds * len(reqset)):.2f} "
                  f"padded calls per request")
            base = tot["eager PyG"]
            for v, (w, c, n) in tot.items():
                rows.append((label, threads, v, n / w, n / c, (n / w) / (base[2] / base[0]),
                             (n / c) / (base[2] / base[1])))
        # the compiled programs alone: pre-packed calls vs the model on pre-collated batches
        # (what checking, packing and splitting in Python cost is the difference to above)
        reqs = {v: [_requests(b, kind) if kind else b for b in batches]
                for v, (_, kind) in variants.items()}
        packed = {v: [preds[v][0].pack(r) for r in reqs[v]] for v in ("pt2", "onnx")}
        collated = [Batch.from_data_list(b) for b in batches]

        def model_only(bt):
            with torch.no_grad():
                return model(bt.x, bt.edge_index, bt.edge_attr, bt.batch)
        # and graph_adapter.compile(wrapped, "inductor") on the same padded calls: what
        # the exported program is measured against (it should be no slower)
        compiled = ga_compile(wrapped, "inductor", background=False)  # its steady state

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
    print(f"{'what':<20} {'thr':>3} {'variant':<10} {'value':>12} {'per CPU-s':>10} "
          f"{'x eager (wall)':>14} {'x eager (CPU)':>13}")
    for what, thr, v, val, cpu, rw, rc in rows:
        unit = {"model only": "pred/s", "p50 1 molecule": "ms", "load": "ms"}.get(what, "pred/s")
        print(f"{what:<20} {thr:>3} {v:<10} {val:>9.1f} {unit:<2} "
              f"{'' if cpu is None else f'{cpu:.0f}':>10} "
              f"{'' if rw is None else f'{rw:.2f}x':>14} {'' if rc is None else f'{rc:.2f}x':>13}")
    print("p50 rows: 'x eager' is latency / eager PyG's latency (below 1: faster); 'model "
          "only': the compiled programs on pre-packed calls vs the model on pre-collated "
          "batches (no checking, packing, collating or splitting); 'compiled' there is "
          "graph_adapter.compile(wrapped, 'inductor') on the same padded calls")


if __name__ == "__main__":
    main()
