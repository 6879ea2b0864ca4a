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

The HTTP server as users run it (``--only clients memory slow wrk``; the model of
``docs/deploy.md``, GINE 32 x 2, exported as an ``.onnx`` ladder, ``python -m
graph_adapter.serve`` with 1 thread and its defaults, on 127.0.0.1):
``clients``: requests of 1, 16 and 256 molecules (``--http-sizes``) posted by 1, 8 and 64
clients (``--http-clients``; threads here, a keep-alive connection each) for
``--http-seconds``, each pass between two passes of in-process ``predict`` over the same
requests, ``--http-repeats`` times (the pass of median ratio is printed, with the range):
molecules/s, p50 and p99 of both, their ratio, and answers not equal (float32) to
in-process ``predict``'s;
``memory``: the server's peak RSS (its processes summed) under 4 concurrent per-graph JSON
bodies of ``--big-mb`` MB, and the p99 of 8 clients of 16-molecule requests beside them vs
without; ``slow``: those 8 clients alone, beside ``--slow-clients`` connections trickling a
body, and alone again; ``wrk``: Debian's ``wrk`` driven by ``benchmarks/serve_wrk.lua``
(a fixed 16-molecule request, every response checked: status 200 and the body whose
predictions equal in-process ``predict``'s), ``--wrk-seconds`` (at most 20) at 8 and 64
connections; ``ray`` (not among ``clients memory slow wrk``, needs the ray extra): the
same app on Ray Serve (a local Ray of 2 CPUs; 1 and 2 replicas of 1 thread behind Ray's
proxy) beside ``graph-adapter serve``, 8 clients of 16-molecule requests for
``--http-seconds`` each, between in-process passes.
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
from benchmarks.harness.procs import status_kb, tree_pids  # noqa: E402

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


# -- the HTTP server vs in-process predict: clients, memory, slow clients, wrk, ray ------
# (``--only clients memory slow wrk ray``: the model of docs/deploy.md, an .onnx ladder)

HTTP_PARTS = ("clients", "memory", "slow", "wrk", "ray")


def _deploy_model_artifact(data, tmp, reuse):
    """The model of docs/deploy.md (GINE, hidden 32, 2 layers; weights do not change the
    cost) as an ``.onnx`` ladder for its loader's budget (``Budget.fit(data, 32)``), the
    top rung for the data's largest molecule."""
    from graph_adapter.batching import FixedSizeLoader

    path = os.path.join(tmp, "deploy-ladder.onnx")
    if not (reuse and os.path.exists(path)):
        torch.manual_seed(0)
        model = build_model("gine", hidden=32, layers=2, y_mean=80.0, y_std=40.0).eval()
        loader = FixedSizeLoader(data, Budget.fit(data, 32))
        t = time.perf_counter()
        c = export(ipu_wrap(model), loader, path, format="onnx", ladder=True, threads=1,
                   max_nodes=max(d.num_nodes for d in data),
                   max_edges=max(d.num_edges for d in data))
        print(f"docs/deploy.md's model as an .onnx ladder: rungs "
              f"{[(r.nodes, r.edges, r.graphs) for r in c.rungs]}, "
              f"export {time.perf_counter() - t:.0f} s", flush=True)
    return path


class _RssSampler:
    """The server's processes' summed RSS, sampled every 20 ms in a thread: its peak."""

    def __init__(self, pid):
        import threading

        self.pid, self.peak, self.stop = pid, 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.wait(0.02):
            self.peak = max(self.peak, sum(status_kb(p, "VmRSS") for p in tree_pids(self.pid)))

    def now(self):
        return sum(status_kb(p, "VmRSS") for p in tree_pids(self.pid))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def _http_server(path, extra=()):
    """``python -m graph_adapter.serve`` of this checkout, 1 thread, on a free port of
    127.0.0.1: (process, port)."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen([sys.executable, "-m", "graph_adapter.serve", path, "--port", "0",
                             "--threads", "1", *extra], stdout=subprocess.PIPE, text=True,
                            cwd=root, env=dict(os.environ, PYTHONPATH=root))
    line = proc.stdout.readline()
    if "http://127.0.0.1:" not in line:
        proc.wait(30)
        raise AssertionError(f"the server did not start: {line!r}")
    return proc, int(line.split("http://127.0.0.1:")[1].split(":")[0])


def _stop(proc):
    proc.terminate()
    try:
        proc.wait(60)
    except Exception:  # noqa: BLE001 - a server that does not stop: killed, said
        print("the server did not stop within 60 s of SIGTERM: killed")
        proc.kill()
        proc.wait(30)


def _post_all(port, bodies, clients, until=None):
    """``clients`` threads, each over one keep-alive connection, posting ``bodies``
    round robin (or, with ``until``, over and over until that time): (wall seconds,
    latencies, answers by body index, statuses that were not 200)."""
    import http.client
    import json
    import threading

    lat, answers, bad = [], {}, []
    lock = threading.Lock()

    def run(c):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        i = c
        while (i < len(bodies)) if until is None else (time.perf_counter() < until):
            body = bodies[i % len(bodies)]
            t = time.perf_counter()
            try:
                conn.request("POST", "/predict", body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                raw = r.read()
            except OSError as e:
                with lock:
                    bad.append(f"{type(e).__name__}")
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
                i += clients
                continue
            dt = time.perf_counter() - t
            with lock:
                lat.append(dt)
                if r.status != 200:
                    bad.append(r.status)
                elif i % len(bodies) not in answers:
                    answers[i % len(bodies)] = json.loads(raw)["predictions"]
            i += clients
        conn.close()
    threads = [threading.Thread(target=run, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - t0, lat, answers, bad


def _counts(statuses):
    """``{status or error: count}`` of the answers that were not 200."""
    out = {}
    for st in statuses:
        out[st] = out.get(st, 0) + 1
    return out or 0


def _graphs_body(graphs):
    import json

    return json.dumps({"graphs": [{k: d[k].tolist() for k in KEYS} for d in graphs]}).encode()


def _local_pass(local, reqs):
    """In-process ``predict`` of ``reqs`` one after another: (wall, latencies, answers,
    CPU seconds of this process)."""
    lat, answers = [], []
    t0, c0 = time.perf_counter(), time.process_time()
    for r in reqs:
        t = time.perf_counter()
        answers.append(local.predict(r))
        lat.append(time.perf_counter() - t)
    return time.perf_counter() - t0, lat, answers, time.process_time() - c0


def _mismatches(http_answers, local_answers):
    """Answers over HTTP that are not exactly (float32) in-process predict's, and the
    largest difference."""
    import numpy as np

    bad, worst = 0, 0.0
    for i, got in http_answers.items():
        want = np.stack([np.asarray(p) for p in local_answers[i]])
        g = np.asarray(got, dtype=np.float32).reshape(want.shape)
        if not np.array_equal(g, want):
            bad += 1
            worst = max(worst, float(np.abs(g - want).max()))
    return bad, worst


def _part_clients(data, path, local, rng, args):
    """HTTP at 1, 8, 64 clients vs in-process predict, for 1, 16, 256 molecules a request."""
    print(f"\nHTTP (python -m graph_adapter.serve, 1 thread, its program in a child process) "
          f"vs in-process predict (one caller), docs/deploy.md's model as an .onnx ladder; "
          f"load average now {os.getloadavg()}")
    print("(HTTP/in-proc: the throughputs' ratio; on a machine shared with other work the "
          "server's two processes take more of it than the one in-process caller, so the "
          "CPU columns, milliseconds of CPU a 1000 molecules, compare the work done)")
    print(f"{'mol/req':>7} {'clients':>7} {'requests':>8} {'HTTP mol/s':>10} {'p50 ms':>8} "
          f"{'p99 ms':>8} {'in-proc mol/s':>13} {'p50 ms':>8} {'p99 ms':>8} {'HTTP/in-proc':>12} "
          f"{'CPU HTTP':>8} {'in-proc':>7} {'wrong':>5} {'non-200':>7}")
    proc, port = _http_server(path)
    try:
        for size in args.http_sizes:
            n_req = {1: 600, 16: 240, 256: 40}.get(size, 100)
            reqs_ids = [[rng.randrange(len(data)) for _ in range(size)]
                        for _ in range(max(n_req, 2 * max(args.http_clients)))]
            graphs = [[data[i] for i in r] for r in reqs_ids]
            bodies = [_graphs_body(g) for g in graphs]
            local_reqs = [_requests(g, "numpy") for g in graphs]
            _post_all(port, bodies[:8], 4)  # warm-up
            _local_pass(local, local_reqs[:8])  # (its answers: compared below)
            for clients in args.http_clients:
                # side by side: in-process, HTTP, in-process again (the ratio to their
                # mean), each pass --http-seconds long, --http-repeats times (median)
                rows = []
                for _ in range(args.http_repeats):
                    rows.append(_clients_pass(proc, port, local, bodies, local_reqs, size,
                                              clients, args.http_seconds))
                ratios = sorted(r["ratio"] for r in rows)
                r = sorted(rows, key=lambda r: r["ratio"])[len(rows) // 2]
                spread = f" [{ratios[0]:.2f}-{ratios[-1]:.2f}]" if len(rows) > 1 else ""
                print(f"{size:>7} {clients:>7} {r['requests']:>8} {r['http']:>10.0f} "
                      f"{r['p50'] * 1e3:>8.2f} {r['p99'] * 1e3:>8.2f} "
                      f"{r['local']:>13.0f} {r['lp50'] * 1e3:>8.2f} {r['lp99'] * 1e3:>8.2f} "
                      f"{r['ratio']:>11.2f}x {r['cpu']:>8.0f} {r['lcpu']:>7.0f} "
                      f"{sum(x['wrong'] for x in rows):>5} {sum(x['bad'] for x in rows):>7}"
                      f"  (median of {len(rows)}{spread}; load {os.getloadavg()[0]:.1f})",
                      flush=True)
    finally:
        _stop(proc)


def _clients_pass(proc, port, local, bodies, local_reqs, size, clients, seconds):
    """In-process ``predict`` over ``local_reqs``, ``clients`` posting ``bodies`` over HTTP
    for ``seconds``, in-process again: the figures of one row (see ``_part_clients``)."""
    w0, llat, lans, c0 = _local_pass(local, local_reqs)
    cpu = _proc_cpu(proc.pid)
    wall, lat, answers, bad = _post_all(port, bodies, clients,
                                        until=time.perf_counter() + seconds)
    cpu = _proc_cpu(proc.pid) - cpu
    w1, llat1, _, c1 = _local_pass(local, local_reqs)
    mols, local_mols = size * len(lat), size * len(local_reqs)
    local_rate = local_mols / ((w0 + w1) / 2)
    return {"requests": len(lat), "http": mols / wall, "p50": _pct(lat, .5),
            "p99": _pct(lat, .99), "local": local_rate, "lp50": _pct(llat + llat1, .5),
            "lp99": _pct(llat + llat1, .99), "ratio": mols / wall / local_rate,
            "cpu": cpu / mols * 1e6, "lcpu": (c0 + c1) / 2 / local_mols * 1e6,
            "wrong": _mismatches(answers, lans)[0], "bad": len(bad)}


def _big_body(data, mb):
    """A per-graph JSON body of at least ``mb`` MB (the data's molecules, repeated)."""
    import json

    parts, size, i = [], 0, 0
    while size < mb * 1e6:
        d = data[i % len(data)]
        s = json.dumps({k: d[k].tolist() for k in KEYS})
        parts.append(s)
        size += len(s) + 1
        i += 1
    return ('{"graphs": [' + ",".join(parts) + "]}").encode(), i


def _part_memory(data, path, rng, args):
    """Peak RSS of the server (its program's child included) under 4 concurrent bodies
    of ``--big-mb`` MB, and 8 normal clients' p99 beside them vs without."""
    import threading

    body, n = _big_body(data, args.big_mb)
    small = [_graphs_body([data[rng.randrange(len(data))] for _ in range(16)])
             for _ in range(64)]
    proc, port = _http_server(path)
    try:
        _post_all(port, small[:8], 4)  # warm-up
        with _RssSampler(proc.pid) as rss:
            idle = rss.now()
            wall0, lat0, _, bad0 = _post_all(port, small, 8, until=time.perf_counter() + 6)
            before = rss.peak
            out = {}

            def big(k):
                out[k] = _post_all(port, [body], 1)
            bigs = [threading.Thread(target=big, args=(k,)) for k in range(4)]
            t0 = time.perf_counter()
            for th in bigs:
                th.start()
            wall1, lat1, _, bad1 = _post_all(port, small, 8, until=time.perf_counter() + 6)
            for th in bigs:
                th.join()
            big_wall = time.perf_counter() - t0
            peak = rss.peak
        hwm = {p: status_kb(p, "VmHWM") for p in tree_pids(proc.pid)}
    finally:
        _stop(proc)
    statuses = sorted({str(s) for v in out.values() for s in (v[3] or [200])})
    print(f"\nmemory: 4 concurrent bodies of {len(body) / 1e6:.1f} MB ({n} molecules each, "
          f"per-graph JSON) beside 8 clients of 16-molecule requests (load average "
          f"{os.getloadavg()})")
    print(f"  server RSS (its processes summed): idle {idle / 1024:.0f} MB, peak under the 8 "
          f"clients {before / 1024:.0f} MB, peak with the 4 big bodies {peak / 1024:.0f} MB; "
          f"VmHWM per process (MB): {[round(v / 1024) for v in hwm.values()]}")
    print(f"  the 4 big bodies: answered {statuses} in {big_wall:.1f} s (each "
          f"{[round(v[0], 1) for v in out.values()]} s)")
    print(f"  the 8 clients: p50 {_pct(lat0, .5) * 1e3:.1f} -> {_pct(lat1, .5) * 1e3:.1f} ms, "
          f"p99 {_pct(lat0, .99) * 1e3:.1f} -> {_pct(lat1, .99) * 1e3:.1f} ms "
          f"({_pct(lat1, .99) / _pct(lat0, .99):.2f}x), {len(lat0) / wall0:.0f} -> "
          f"{len(lat1) / wall1:.0f} req/s, non-200 {_counts(bad0)} / {_counts(bad1)}",
          flush=True)


def _slow_clients(port, count, stop, report):
    """``count`` connections that send a request's headers, then trickle its body, a
    byte a connection every 0.5 s, until ``stop``; ``report``: how each ended."""
    import socket

    socks = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                  b"application/json\r\nContent-Length: 100000\r\n\r\n{")
        s.setblocking(False)
        socks.append(s)
    open_ = set(range(count))
    while open_ and not stop.wait(0.5):
        for k in list(open_):
            try:
                socks[k].send(b" ")
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:  # closed by the server
                open_.discard(k)
                report["closed by the server"] = report.get("closed by the server", 0) + 1
            try:
                if socks[k].recv(4096, socket.MSG_PEEK) == b"":
                    open_.discard(k)
                    report["closed by the server"] = report.get("closed by the server", 0) + 1
                else:
                    head = socks[k].recv(4096)
                    report[head.split(b"\r\n", 1)[0].decode(errors="replace")] = \
                        report.get(head.split(b"\r\n", 1)[0].decode(errors="replace"), 0) + 1
                    open_.discard(k)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                open_.discard(k)
                report["reset"] = report.get("reset", 0) + 1
    report["still trickling at the end"] = len(open_)
    for s in socks:
        s.close()


def _part_slow(data, path, rng, args):
    """8 normal clients' latency without, then beside, 100 slow clients."""
    import threading

    small = [_graphs_body([data[rng.randrange(len(data))] for _ in range(16)])
             for _ in range(64)]
    proc, port = _http_server(path)
    try:
        _post_all(port, small[:8], 4)  # warm-up
        res = []
        for slow in (0, args.slow_clients, 0):
            stop, report = threading.Event(), {}
            th = threading.Thread(target=_slow_clients, args=(port, slow, stop, report))
            if slow:
                th.start()
                time.sleep(1.0)  # all connected and trickling
            wall, lat, _, bad = _post_all(port, small, 8,
                                          until=time.perf_counter() + args.slow_seconds)
            stop.set()
            if slow:
                th.join()
            res.append((slow, wall, lat, bad, report))
    finally:
        _stop(proc)
    print(f"\nslow clients: 8 clients of 16-molecule requests for {args.slow_seconds:g} s, "
          f"alone, beside {args.slow_clients} connections trickling a body (a byte each "
          f"0.5 s; the server's default body timeout), alone again (load average "
          f"{os.getloadavg()})")
    base = statistics.mean([_pct(r[2], .99) for r in res if r[0] == 0])
    for slow, wall, lat, bad, report in res:
        print(f"  slow {slow:>3}: {len(lat) / wall:6.0f} req/s, p50 {_pct(lat, .5) * 1e3:6.1f} ms,"
              f" p99 {_pct(lat, .99) * 1e3:6.1f} ms ({_pct(lat, .99) / base:.2f}x the runs "
              f"without), non-200 {_counts(bad)}"
              f"{'; the slow ones: ' + str(report) if slow else ''}",
              flush=True)


def _part_wrk(data, path, local, rng, args):
    """wrk (Debian's) with benchmarks/serve_wrk.lua: a fixed 16-molecule request at 8 and
    64 connections, every response checked (200, the body in-process predict gives)."""
    import json
    import shutil
    import subprocess

    import numpy as np

    wrk = shutil.which("wrk")
    if wrk is None:
        print("\nwrk: not installed (apt-get install wrk): skipped")
        return
    lua = os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve_wrk.lua")
    graphs = [data[rng.randrange(len(data))] for _ in range(16)]
    tmp = tempfile.mkdtemp(prefix="bench_wrk_")
    body_path, expect_path = os.path.join(tmp, "request.json"), os.path.join(tmp, "answer.json")
    with open(body_path, "wb") as f:
        f.write(_graphs_body(graphs))
    want = np.stack([np.asarray(p) for p in local.predict(_requests(graphs, "numpy"))])
    proc, port = _http_server(path)
    try:
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/predict", open(body_path, "rb").read(),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        raw = r.read()
        conn.close()
        got = np.asarray(json.loads(raw)["predictions"], dtype=np.float32).reshape(want.shape)
        assert r.status == 200 and np.array_equal(got, want), (r.status, raw[:300])
        with open(expect_path, "wb") as f:  # the body every response must equal
            f.write(raw)
        version = subprocess.run([wrk, "--version"], capture_output=True, text=True).stdout
        print(f"\n{version.splitlines()[0].split(' Copyright')[0]}"
              f" with benchmarks/serve_wrk.lua: one 16-molecule request, its answer "
              f"checked against in-process predict first; {args.wrk_seconds} s a run, "
              f"127.0.0.1 (load average {os.getloadavg()})")
        local_wall, _, _, local_cpu = _local_pass(local, [_requests(graphs, "numpy")] * 200)
        local_rate = 16 * 200 / local_wall
        for conns in (8, 64):
            env = dict(os.environ, GA_WRK_BODY=body_path, GA_WRK_EXPECT=expect_path,
                       GA_WRK_BAD=os.path.join(tmp, "bad"))
            cpu = _proc_cpu(proc.pid)
            run = subprocess.run([wrk, "-t2", f"-c{conns}", f"-d{args.wrk_seconds}s",
                                  "--timeout", "10s", "--latency", "-s", lua,
                                  f"http://127.0.0.1:{port}/predict"], capture_output=True,
                                 text=True, timeout=args.wrk_seconds + 30, env=env)
            out = run.stdout
            check = [ln for ln in out.splitlines() if ln.startswith("wrk-check:")]
            rps = [ln for ln in out.splitlines() if ln.startswith("Requests/sec:")]
            pct = {ln.split()[0]: ln.split()[1] for ln in out.splitlines()
                   if ln.strip().split(" ")[0] in ("50%", "99%")}
            errs = [ln.strip() for ln in out.splitlines() if "Socket errors" in ln
                    or "Non-2xx" in ln]
            cpu = _proc_cpu(proc.pid) - cpu
            rate = float(rps[0].split()[1]) * 16 if rps else float("nan")
            answered = int(check[0].split("responses=")[1].split()[0]) * 16 if check else 0
            print(f"  {conns:>2} connections: {check[0] if check else run.stderr[-300:]}; "
                  f"{rate:.0f} mol/s ({rate / local_rate:.2f}x in-process predict's "
                  f"{local_rate:.0f}), p50 {pct.get('50%')}, p99 {pct.get('99%')}; CPU ms "
                  f"a 1000 molecules: server {cpu / max(answered, 1) * 1e6:.0f}, in-process "
                  f"{local_cpu / 3200 * 1e6:.0f}{'; ' + '; '.join(errs) if errs else ''}",
                  flush=True)
        bad = [f for f in os.listdir(tmp) if f.startswith("bad")]
        if bad:
            print(f"  responses that failed the check are in {tmp}: {bad[:4]}")
    finally:
        _stop(proc)


def _part_ray(data, path, local, rng, args):
    """The same app on Ray Serve (1 and 2 replicas, 1 thread each, behind Ray's HTTP
    proxy on 127.0.0.1) beside ``python -m graph_adapter.serve``, each pass between two
    in-process passes: 16-molecule requests at 8 clients."""
    import socket

    try:
        import ray
        from ray import serve as ray_serve
    except ImportError:
        print("\nray: ray[serve] is not installed (the ray extra): skipped")
        return
    from graph_adapter.serve.engines.ray_serve import deployment

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    graphs = [[data[rng.randrange(len(data))] for _ in range(16)] for _ in range(240)]
    bodies = [_graphs_body(g) for g in graphs]
    local_reqs = [_requests(g, "numpy") for g in graphs]
    print(f"\nRay Serve (the same ASGI app; replicas of 1 thread, Ray's proxy) vs "
          f"graph-adapter serve, 8 clients of 16-molecule requests, each pass "
          f"{args.http_seconds:.0f} s between two in-process passes")
    rows = []

    def measure(name, port):
        _post_all(port, bodies[:8], 4)  # warm-up
        w0, _, lans, _ = _local_pass(local, local_reqs)
        wall, lat, answers, bad = _post_all(port, bodies, 8,
                                            until=time.perf_counter() + args.http_seconds)
        w1, _, _, _ = _local_pass(local, local_reqs)
        rate = 16 * len(lat) / wall
        local_rate = 16 * len(local_reqs) / ((w0 + w1) / 2)
        rows.append(f"  {name:<26} {rate:>8.0f} mol/s  p50 {_pct(lat, .5) * 1e3:6.1f} ms  "
                    f"p99 {_pct(lat, .99) * 1e3:6.1f} ms  {rate / local_rate:5.2f}x "
                    f"in-process  wrong {_mismatches(answers, lans)[0]}  non-200 {len(bad)}")
        print(rows[-1], flush=True)

    proc, port = _http_server(path)
    try:
        measure("graph-adapter serve", port)
    finally:
        _stop(proc)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": root}})
    try:
        ray_serve.start(http_options={"host": "127.0.0.1", "port": port})
        for replicas in (1, 2):
            ray_serve.run(deployment(path, replicas=replicas, threads=1), route_prefix="/")
            measure(f"Ray Serve, {replicas} replica{'s' * (replicas > 1)}", port)
    finally:
        ray_serve.shutdown()
        ray.shutdown()


def run_http(args, data, tmp):
    """The HTTP parts (see the module's docstring)."""
    import random

    torch.set_num_threads(1)
    path = _deploy_model_artifact(data, tmp, args.reuse)
    local = serve.load(path, threads=1)
    rng = random.Random(0)
    if "clients" in args.only:
        _part_clients(data, path, local, rng, args)
    if "memory" in args.only:
        _part_memory(data, path, rng, args)
    if "slow" in args.only:
        _part_slow(data, path, rng, args)
    if "wrk" in args.only:
        _part_wrk(data, path, local, rng, args)
    if "ray" in args.only:
        _part_ray(data, path, local, rng, args)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--latency", type=int, default=200, help="single-molecule requests")
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--only", nargs="+", default=["programs", "sizes", "server"],
                    choices=["programs", "sizes", "server", *HTTP_PARTS])
    ap.add_argument("--http-sizes", nargs="+", type=int, default=[1, 16, 256],
                    help="clients: molecules a request")
    ap.add_argument("--http-clients", nargs="+", type=int, default=[1, 8, 64],
                    help="clients: concurrent clients (a keep-alive connection each)")
    ap.add_argument("--http-seconds", type=float, default=3.0,
                    help="clients: seconds of each HTTP pass")
    ap.add_argument("--http-repeats", type=int, default=3,
                    help="clients: passes a row (its median ratio is printed)")
    ap.add_argument("--big-mb", type=float, default=50.0,
                    help="memory: the size of each of the 4 concurrent bodies")
    ap.add_argument("--slow-clients", type=int, default=100)
    ap.add_argument("--slow-seconds", type=float, default=8.0)
    ap.add_argument("--wrk-seconds", type=int, default=10, help="wrk: seconds a run (<= 20)")
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
    if set(HTTP_PARTS) & set(args.only):
        assert args.wrk_seconds <= 20, "--wrk-seconds: at most 20"
        run_http(args, data, tmp)
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
