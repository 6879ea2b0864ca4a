"""Per-hop budgets and PyG's ``trim_to_layer``: a 3-layer GraphSAGE, trimmed or not,
compiled through ``ipu_wrap`` vs eager PyG on the same subgraphs unpadded.

One run, side by side, on a stochastic block model generated here (no download,
``graph_adapter.app.demo.node.sbm_graph``): ``FixedSizeNeighborLoader(...,
per_hop_budget=True)`` samples ``--batches`` subgraphs (3 hops, ``--fanouts``,
``--batch`` seeds); eager PyG runs on each one's ``unpad_batch`` (PyG's layout,
the real per-hop counts: what PyG's ``NeighborLoader`` would hand it), ours on
the padded batch. Four methods, each a training step (forward, masked loss on
the seeds, backward, Adam) and an inference pass:

* eager PyG, untrimmed / trimmed (``num_sampled_nodes_per_hop=``);
* ``ipu_wrap`` + inductor (``graph_adapter.compile``), untrimmed / trimmed: one
  compile each (the per-hop shapes are static), reported apart.

Methods are interleaved (``--rounds`` rounds, order rotated) and the median
per-batch time printed with its ratio to eager PyG untrimmed, and each method's
trimmed / untrimmed ratio. Also printed: the per-hop budget against the plain
budget fitted to the same samples (the per-hop layout pads every hop).

Run: ``TORCHINDUCTOR_CACHE_DIR=.cache/inductor python benchmarks/bench_trim_to_layer.py
--threads 1``
(``--nodes 5000 --batches 8 --rounds 2`` for a quick look).
"""
from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch_geometric.nn import GraphSAGE

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout

import graph_adapter  # noqa: E402
from graph_adapter import FixedSizeNeighborLoader, ipu_wrap  # noqa: E402
from graph_adapter.app.demo.node import sbm_graph  # noqa: E402
from graph_adapter.format import SEED_MASK, unpad_batch  # noqa: E402
from graph_adapter.nn import masked_cross_entropy  # noqa: E402


class SeedSAGE(torch.nn.Module):
    """GraphSAGE on a sampled batch, the seeds' rows out (PyG's ``[:batch_size]``)."""

    def __init__(self, sage: torch.nn.Module, trim: bool):
        super().__init__()
        self.sage, self.trim = sage, trim

    def forward(self, data):
        if self.trim:
            out = self.sage(data.x, data.edge_index,
                            num_sampled_nodes_per_hop=data.num_sampled_nodes,
                            num_sampled_edges_per_hop=data.num_sampled_edges)
        else:
            out = self.sage(data.x, data.edge_index)
        return out[:data.num_sampled_nodes[0]]


def _ours_loss(out, batch):
    b = batch.num_sampled_nodes[0]
    return masked_cross_entropy(out, batch.y[:b], batch.seed_mask[:b])


def _eager(base, trim, unpadded):
    """``(train pass, infer pass)`` of eager PyG over the unpadded subgraphs."""
    model = SeedSAGE(copy.deepcopy(base), trim)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def train():
        model.train()
        for d, s in unpadded:
            opt.zero_grad()
            F.cross_entropy(model(d)[:s], d.y[:s]).backward()
            opt.step()

    def infer():
        model.eval()
        with torch.no_grad():
            for d, s in unpadded:
                model(d)

    return train, infer, 0.0


def _ours(base, trim, flats):
    """``(train pass, infer pass, first-call seconds)`` of the compiled wrapper."""
    model = SeedSAGE(copy.deepcopy(base), trim)
    w = ipu_wrap(model, inputs="data", loss_fn=_ours_loss)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    step = graph_adapter.compile(w, "inductor", background=False)
    ev = graph_adapter.compile(w, "inductor_eval")
    t = time.perf_counter()
    w.train()
    step(flats[0])["loss"].backward()  # the compiles, before any timed pass
    opt.zero_grad(set_to_none=True)
    w.eval()
    with torch.no_grad():
        ev(flats[0])
    first = time.perf_counter() - t

    def train():
        w.train()
        for f in flats:
            opt.zero_grad()
            step(f)["loss"].backward()
            opt.step()

    def infer():
        w.eval()
        with torch.no_grad():
            for f in flats:
                ev(f)

    return train, infer, first


def _compiled_graphs() -> int:
    """Graphs Dynamo has compiled in this process so far (every recompile adds one)."""
    from torch._dynamo.utils import counters
    return int(counters["stats"]["unique_graphs"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=20000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--fanouts", type=int, nargs=3, default=[10, 5, 3])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"# {platform.platform()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    data = sbm_graph(args.nodes, classes=10, dim=args.dim)
    print(f"graph: {data.num_nodes} nodes, {data.num_edges} edges; GraphSAGE 3 x {args.hidden}, "
          f"fanouts {args.fanouts}, batch {args.batch}, {args.batches} batches a pass")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # cuts are counted in loader.stats, printed below
        loader = FixedSizeNeighborLoader(data, args.fanouts, args.batch, shuffle=True,
                                         per_hop_budget=True)
        plain = FixedSizeNeighborLoader(data, args.fanouts, args.batch, shuffle=True)
        flats = []
        for f in loader:
            flats.append(f)
            if len(flats) == args.batches:
                break
    hb = loader.hop_budget
    print(f"per-hop budget: nodes {list(hb.nodes)} = {sum(hb.nodes)}, edges {list(hb.edges)} = "
          f"{sum(hb.edges)}; plain budget: nodes {plain.budget.nodes}, edges "
          f"{plain.budget.edges} (per-hop / plain rows "
          f"{sum(hb.nodes) / plain.budget.nodes:.2f}, edges "
          f"{sum(hb.edges) / plain.budget.edges:.2f})")
    unpadded = [(unpad_batch(f)[0], int(f[SEED_MASK].sum())) for f in flats]
    real = [d.num_sampled_nodes for d, _ in unpadded[:1]]
    print(f"first batch's real nodes per hop: {real[0]}")
    torch.manual_seed(0)
    base = GraphSAGE(args.dim, args.hidden, num_layers=3, out_channels=10)
    methods = {}
    for name, make, trim, arg in [("eager PyG", _eager, False, unpadded),
                                  ("eager PyG, trimmed", _eager, True, unpadded),
                                  ("ours compiled", _ours, False, flats),
                                  ("ours compiled, trimmed", _ours, True, flats)]:
        train, infer, first = make(base, trim, arg)
        methods[name] = (train, infer)
        if first:
            print(f"{name}: first calls (compile, train + eval) {first:.1f} s")
    graphs_before = _compiled_graphs()
    times = {n: {"train": [], "infer": []} for n in methods}
    names = list(methods)
    for r in range(args.rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            for mode, fn in zip(("train", "infer"), methods[n]):
                t = time.perf_counter()
                fn()
                times[n][mode].append((time.perf_counter() - t) / len(flats) * 1e3)
    ref = {m: statistics.median(times["eager PyG"][m]) for m in ("train", "infer")}
    print(f"\n{'method':<24} {'train ms/batch':>15} {'x eager PyG':>12} {'infer ms/batch':>15} "
          f"{'x eager PyG':>12}")
    for n in names:
        tr, inf = (statistics.median(times[n][m]) for m in ("train", "infer"))
        print(f"{n:<24} {tr:>15.1f} {ref['train'] / tr:>11.2f}x {inf:>15.1f} "
              f"{ref['infer'] / inf:>11.2f}x")
    print("\ntrimmed / untrimmed time (below 1: trimming saves):")
    for a, b in [("eager PyG, trimmed", "eager PyG"), ("ours compiled, trimmed", "ours compiled")]:
        ratios = [statistics.median(times[a][m]) / statistics.median(times[b][m])
                  for m in ("train", "infer")]
        print(f"  {b:<16} train {ratios[0]:.2f}  infer {ratios[1]:.2f}")
    print(f"\ngraphs Dynamo compiled during the timed passes (the per-hop shapes are static: "
          f"0 expected): {_compiled_graphs() - graphs_before}")
    print(f"loader cuts while sampling the batches: {loader.stats.trimmed_batches} batches "
          f"({loader.stats.trimmed_nodes} nodes, {loader.stats.trimmed_edges} edges)")


if __name__ == "__main__":
    main()
