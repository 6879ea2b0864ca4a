"""The first run's training wall time, compile included, against eager PyG's.

What a user waits for the first time they train: each variant runs in a fresh
child process on a fresh (cold) inductor cache, the demo's model and molecules
(``graph-adapter demo`` defaults: GINE 4 x 64 + BatchNorm, HYB layout,
``Budget.fit`` at 64 graphs a batch, L1 loss, Adam), and reports its training
wall time after each epoch (data loading included, the process's start and the
molecules' loading not):

* ``pyg``: eager PyG (``DataLoader`` batches, the plain model);
* ``compiled``: ``FixedSizeLoader`` + ``ipu_wrap(trim=True)`` +
  ``compile("inductor", background=False)``: the first step compiles;
* ``background``: the same with ``background=True`` and the run's length said
  (``expect_calls(epochs x batches)``, as the demo does): eager steps while a child
  process compiles, then the compiled program; a cold compile that cannot pay back
  within the run starts after it;
* ``background_open``: ``background=True`` without the run's length: the child
  starts at the first call;
* ``background_give_up``, ``background_open_give_up``: the two above with this process
  giving the child a thread from its start (``GRAPH_ADAPTER_BACKGROUND_GIVE_UP_AFTER=0``;
  by default the child runs on idle CPU time only for its first 20 s, this process on
  all its threads);
* ``eager``: the adapter without a compiler (``compile("eager")``), trimmed.

Then the same variants once more on the caches the first round left (warm).
The variants run in turn, round after round (``--rounds``), so that a busy
machine slows them alike; the table gives each epoch count's median ratio to
eager PyG of the same round.

``--model gin`` (or ``gine``, ``gcn``, ``gatv2``, ``ogb``) trains a model of
``bench_models.py``'s table instead (its own layout, the same L1 loss).

    python benchmarks/bench_first_run.py [--epochs 10] [--rounds 1] [--threads 2]
        [--limit N] [--model demo]
        [--variants pyg,compiled,background,background_open,background_give_up,
                    background_open_give_up,eager]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = textwrap.dedent(r"""
    import json, os, time
    import torch
    torch.set_num_threads(int(os.environ["BENCH_THREADS"]))
    import torch.nn.functional as F
    import graph_adapter as ga
    from graph_adapter.app.datasets import load_nci5k
    from graph_adapter.app.models import build_model
    from torch_geometric.loader import DataLoader

    variant, epochs = os.environ["BENCH_VARIANT"], int(os.environ["BENCH_EPOCHS"])
    graphs, _ = load_nci5k(limit=int(os.environ["BENCH_LIMIT"]) or None)
    for d in graphs:
        del d.smiles
    name = os.environ["BENCH_MODEL"]
    if name == "demo":
        torch.manual_seed(0)
        model = build_model("gine", 64, 4, 0.0, 1.0)
        pyg_out = lambda b: model(b.x, b.edge_index, b.edge_attr, b.batch)
        loss_fn, layout_name = ga.masked_loss("l1"), "hyb"
    else:  # a model of the models table (forward(data)), its own layout
        from benchmarks.harness import model_table
        model = model_table.build(name)
        pyg_out = model
        loss_fn, layout_name = ga.masked_loss("l1"), model_table.MODELS[name][2]
        layout_name = layout_name() if callable(layout_name) else layout_name
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    ends, stats = [], None
    if variant == "pyg":
        loader = DataLoader(graphs, batch_size=64, shuffle=True,
                            generator=torch.Generator().manual_seed(0))
        t0 = time.perf_counter()
        for epoch in range(epochs):
            for b in loader:
                loss = F.l1_loss(pyg_out(b).view(-1), b.y.view(-1))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            ends.append(time.perf_counter() - t0)
    else:
        budget = ga.Budget.fit(graphs, 64, seed=0)
        # (one loader over every molecule fits the layout's tables on all of them)
        loader = ga.FixedSizeLoader(graphs, budget, shuffle=True, seed=0,
                                    layout=layout_name or None)
        wrapped = ga.ipu_wrap(model, loss_fn=loss_fn, trim=True)
        backend = "eager" if variant == "eager" else "inductor"
        kwargs = {} if variant == "eager" else {"background": variant.startswith("background")}
        compiled = ga.compile(wrapped, backend, **kwargs)
        if variant in ("background", "background_give_up"):  # as the demo: the run's length
            compiled.expect_calls(epochs * len(loader))
        t0 = time.perf_counter()
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            for flat in loader:
                loss = compiled(flat)["loss"]
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            ends.append(time.perf_counter() - t0)
        background = getattr(getattr(compiled, "stats", None), "background", None)
        if background is not None:
            stats = background.summary()
    print("RESULT " + json.dumps({"epoch_ends_s": ends, "background": stats}), flush=True)
""")


def run_child(variant: str, cache_dir: str, epochs: int, threads: int, limit: int,
              model: str = "demo") -> dict:
    """One fresh process; its epoch ends, plus how long it took to exit (a background
    compile still running is waited for at the exit: the time after training)."""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache_dir, BENCH_VARIANT=variant,
               BENCH_EPOCHS=str(epochs), BENCH_THREADS=str(threads), BENCH_LIMIT=str(limit),
               BENCH_MODEL=model)
    if variant.endswith("_give_up"):
        env["GRAPH_ADAPTER_BACKGROUND_GIVE_UP_AFTER"] = "0"
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                         text=True, cwd=_ROOT)  # (the checkout: benchmarks.harness imports)
    wall = time.perf_counter() - t0
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(f"{variant}: exit {out.returncode}\n{out.stderr[-3000:]}")
    doc = json.loads(line[len("RESULT "):])
    doc["process_s"] = wall
    return doc


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--limit", type=int, default=0, help="molecules (0: all)")
    p.add_argument("--variants", default="pyg,compiled,background,eager")
    p.add_argument("--model", default="demo",
                   help="demo, or a model of bench_models.py's table (gine, gin, gcn, gatv2, ogb)")
    args = p.parse_args(argv)
    variants = args.variants.split(",")
    with open("/proc/loadavg") as fh:
        load0 = fh.read().split()[0]
    print(f"model {args.model}, threads {args.threads}, {os.cpu_count()} CPUs, load {load0} "
          f"at the start; {args.epochs} epochs", flush=True)
    ratios = {}  # (cache, variant) -> [[ratio per epoch] per round]
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as root:
            for cache in ("cold", "warm"):
                res = {}
                for v in variants:
                    d = os.path.join(root, v)  # each variant's own cache: cold, then warm
                    res[v] = run_child(v, d, args.epochs, args.threads, args.limit, args.model)
                    ends = res[v]["epoch_ends_s"]
                    print(f"round {r + 1} {cache:4s} {v:10s} epoch 1 {ends[0]:6.1f} s, "
                          f"epoch {args.epochs} {ends[-1]:6.1f} s, process {res[v]['process_s']:6.1f} s"
                          + (f"; {res[v]['background']}" if res[v]["background"] else ""),
                          flush=True)
                base = res.get("pyg")
                for v in variants:
                    if base is not None and v != "pyg":
                        ratios.setdefault((cache, v), []).append(
                            [a / b for a, b in zip(res[v]["epoch_ends_s"], base["epoch_ends_s"])])
    with open("/proc/loadavg") as fh:
        load1 = fh.read().split()[0]
    print(f"\ntraining wall time / eager PyG's (median of {args.rounds} round(s)), by epochs "
          f"trained; load {load1} at the end")
    shown = sorted({1, 2, 3, 5, args.epochs} & set(range(1, args.epochs + 1)))
    print(f"{'cache':6s} {'variant':11s} " + " ".join(f"{e:>6d}" for e in shown))
    for (cache, v), rows in ratios.items():
        med = [statistics.median(row[e - 1] for row in rows) for e in shown]
        print(f"{cache:6s} {v:11s} " + " ".join(f"{m:6.2f}" for m in med))
    return 0


if __name__ == "__main__":
    sys.exit(main())
