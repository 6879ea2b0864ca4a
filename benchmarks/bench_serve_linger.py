"""Large bodies refused before they are read: what each client receives, and the server's
peak RSS, for this checkout's server and (``--before DIR``) another's, side by side.

    python benchmarks/bench_serve_linger.py [--before DIR] [--big-mb 50] [--clients 4]
                                            [--max-inflight-mb 128] [--repeats 2]
                                            [--max-body-mb MB]

``python -m graph_adapter.serve``'s ``serve_main`` in a process of its own, with a stand-in
predictor (the sum of ``x`` a graph; no artifact, no torch: what is measured is the HTTP
layer) and its default limits but ``--max-inflight-mb``. ``--clients`` threads post, at
once, one per-graph JSON body of ``--big-mb`` MB each with ``http.client`` (which sends the
whole body before it reads the answer, as ``requests`` and most proxies do): the
bodies past ``--max-inflight-mb`` are refused 503 before they are read. Printed per
server: what each client got (a status, or the error its socket raised), seconds to its
answer, the server's peak RSS (sampled every 10 ms, and its ``VmHWM``) and its idle RSS.
``--max-body-mb``: the server's (e.g. 10: every body refused 413, its bytes dropped
unread, and the peak RSS is the HTTP layer's alone). ``--before DIR``: a checkout (e.g. ``git archive`` of an older commit) whose server runs
first, in the same run. The machine's load average is printed.
"""
import argparse
import http.client
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # this checkout
from benchmarks.harness.procs import status_kb  # noqa: E402

_SERVER = textwrap.dedent("""
    import sys

    class Blocker:  # the HTTP layer needs neither torch nor PyG (and starts in a second)
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "torch_geometric"):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked)")

    sys.meta_path.insert(0, Blocker())
    import numpy as np
    from graph_adapter.serve import Contract, InputField, OutputField, server
    from graph_adapter.serve.columns import Columns

    CONTRACT = Contract("onnx", 64, 64, 9, (InputField("x", "feature", "node", "float32",
                                                       (None, 2)),),
                        (OutputField("y", "graph", "float32", (None,)),))

    class Summer:  # the sum of x a graph
        contract = CONTRACT
        calls = 0
        ignored_keys = set()

        def predict(self, graphs):
            self.calls += 1
            if isinstance(graphs, Columns):  # (checked columns: one array, summed a graph)
                rows = np.asarray(graphs.features["x"], np.float32).sum(1)
                starts = np.cumsum([0, *graphs.nodes[:-1]])
                return [np.asarray([v], np.float32) for v in np.add.reduceat(rows, starts)]
            return [np.asarray([np.asarray(g["x"], np.float32).sum()], np.float32)
                    for g in graphs]

    server._load_predictor = lambda *a: Summer()
    sys.exit(server.serve_main(["stand-in.onnx", *sys.argv[1:]], prog="bench"))
""")


def _body(mb):
    """A per-graph JSON body of about ``mb`` MB: graphs of 64 nodes."""
    graph = json.dumps({"x": [[1.25, -2.5]] * 64})
    n = max(1, int(mb * 1e6) // (len(graph) + 2))
    return f'{{"graphs": [{", ".join([graph] * n)}]}}'.encode(), n


def _run(root, body, clients, flags):
    """One server of checkout ``root``: what each client got, and its RSS (kB)."""
    proc = subprocess.Popen([sys.executable, "-c", _SERVER, "--port", "0", "--max-delay-ms",
                             "0", *flags], cwd=root,
                            stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=root))
    try:
        line = proc.stdout.readline()
        assert "http://127.0.0.1:" in line, line
        port = int(line.split("http://127.0.0.1:")[1].split(":")[0])
        time.sleep(0.3)
        idle = status_kb(proc.pid)
        peak = [idle]
        done = threading.Event()

        def sample():
            while not done.wait(0.01):
                peak[0] = max(peak[0], status_kb(proc.pid))

        got = [None] * clients

        def client(k):
            t0 = time.perf_counter()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
            try:
                conn.request("POST", "/predict", body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                doc = json.loads(r.read())
                what = f"{r.status}" + (f" {doc['error']}" if r.status != 200 else "")
            except OSError as e:
                what = type(e).__name__
            finally:
                conn.close()
            got[k] = (what, time.perf_counter() - t0)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        sampler.join()
        return got, idle, peak[0], status_kb(proc.pid, "VmHWM")
    finally:
        proc.terminate()
        proc.wait(60)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", default=None, metavar="DIR",
                    help="another checkout whose server runs too, first")
    ap.add_argument("--big-mb", type=float, default=50.0)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--max-inflight-mb", type=float, default=128.0)
    ap.add_argument("--repeats", type=int, default=2, help="runs of each server")
    ap.add_argument("--max-body-mb", type=float, default=None,
                    help="the server's (default: its own)")
    args = ap.parse_args(argv)
    flags = ["--max-inflight-mb", str(args.max_inflight_mb)]
    if args.max_body_mb is not None:
        flags += ["--max-body-mb", str(args.max_body_mb)]
    body, n = _body(args.big_mb)
    print(f"load average at start: {os.getloadavg()}; cpus: {os.cpu_count()}")
    print(f"{args.clients} concurrent bodies of {len(body) / 1e6:.1f} MB ({n} graphs each, "
          f"per-graph JSON, http.client), server flags {' '.join(flags)}")
    servers = ([("before", os.path.abspath(args.before))] if args.before else []) + \
        [("this checkout", ROOT)]
    rows = {}
    for r in range(args.repeats):
        for name, root in servers:
            got, idle, peak, hwm = _run(root, body, args.clients, flags)
            rows.setdefault(name, []).append((got, idle, peak, hwm))
            answers = ", ".join(f"{w} ({t:.1f} s)" for w, t in sorted(got))
            print(f"  {name:>13} run {r + 1}: {answers}; RSS idle {idle / 1024:.0f} MB, "
                  f"peak {peak / 1024:.0f} MB (VmHWM {hwm / 1024:.0f} MB)", flush=True)
    if len(rows) == 2:
        (_, a), (_, b) = rows.items()
        pa = max(x[2] for x in a)
        pb = max(x[2] for x in b)
        resets = [sum(not w[0].isdigit() for w, _ in x[0]) for x in a], \
            [sum(not w[0].isdigit() for w, _ in x[0]) for x in b]
        print(f"side by side: clients without an HTTP answer (per run) {resets[0]} -> "
              f"{resets[1]}; peak RSS {pa / 1024:.0f} -> {pb / 1024:.0f} MB "
              f"({pb / pa:.2f}x)")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
