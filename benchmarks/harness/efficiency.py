"""Padding efficiency on rdkit's NCI molecules: our budgets and packers against
pad-to-max with a fixed graph count and PyG's DynamicBatchSampler.

    python benchmarks/bench_efficiency.py [--graphs 64 32] [--epochs 3]

Efficiency = real slots / budget slots over one shuffled epoch (mean over
``--epochs`` epochs); budget slots include the reserved padding node and graph
slot.  "shapes" counts the distinct batch shapes an epoch gives a compiler.
Prints a markdown table (copied into docs/batching.md). :func:`ours`,
:func:`fixed_count` and :func:`dynamic_sampler` give the figures
``python benchmarks/bench_all.py`` shows.
"""
from __future__ import annotations

import argparse
import os
import platform
import warnings
from typing import Optional, Sequence

import numpy as np
import torch

import graph_adapter as ga
from graph_adapter.format import RESERVED_NODES

from graph_adapter.app.datasets import load_nci5k

__all__ = ["ours", "probe_budget", "fixed_count", "dynamic_sampler", "main"]


def ours(sizes, budget, packer: str, epochs: int, open_batches: int = 8):
    """Mean :func:`~graph_adapter.plan_efficiency` of ``epochs`` shuffled epochs packed by
    ``plan_epoch`` into ``budget``; returns ``(efficiencies dict, distinct shapes = 1)``."""
    effs = [ga.plan_efficiency(ga.plan_epoch(sizes, budget, packer=packer, shuffle=True, seed=0,
                                       epoch=e, open_batches=open_batches), sizes, budget)
            for e in range(epochs)]
    return {k: float(np.mean([e[k] for e in effs])) for k in effs[0]}, 1


def probe_budget(nodes: int, edges: int, graphs: int) -> ga.Budget:
    """A :class:`~graph_adapter.Budget` whose counts may tie, for packing probes only (never
    a model's input): the baselines' sizes (pad-to-max, jraph's rounding) are what they
    are, and ``Budget(...)`` refuses ties, which only matter to masked layers. Nudging them
    would move the baseline. The library has no public constructor for such a budget (it
    builds them privately for ``Budget.fit``), so this builds the frozen dataclass without
    its ``__post_init__`` check; the other checks (the reserved padding node and graph
    slots) are kept by hand here."""
    if graphs < 2 or nodes < RESERVED_NODES or edges < 0:
        raise ValueError(f"probe_budget: nodes {nodes}, edges {edges}, graphs {graphs}")
    b = object.__new__(ga.Budget)
    for name, v in (("nodes", int(nodes)), ("edges", int(edges)), ("graphs", int(graphs)),
                    ("report", None)):
        object.__setattr__(b, name, v)
    return b


def fixed_count(sizes, k: int, epochs: int):
    """pad-to-max, k real graphs a batch (graphium / poptorch_geometric default:
    max size x (B - 1) + 1 with B = k + 1 slots)."""
    m = sizes.matrix
    # a packing probe, never a model's input: its counts may tie (probe_budget)
    budget = probe_budget(nodes=int(m[:, 0].max()) * k + 1, edges=int(m[:, 1].max()) * k,
                          graphs=k + 1)
    effs = []
    for e in range(epochs):
        perm = np.random.default_rng([0, e]).permutation(sizes.num_graphs).tolist()
        plan = [perm[i:i + k] for i in range(0, len(perm), k)]
        effs.append(ga.plan_efficiency(plan, sizes, budget))
    return {kk: float(np.mean([e[kk] for e in effs])) for kk in effs[0]}, budget, 1


def dynamic_sampler(ds, sizes, max_num: int, epochs: int):
    """PyG's DynamicBatchSampler (mode='node'): fills a node cap; every batch
    has its own shape (no padding: the cap is the 'budget')."""
    from torch_geometric.loader import DynamicBatchSampler

    m = sizes.matrix
    effs, shapes = [], []
    for e in range(epochs):
        torch.manual_seed(e)
        s = DynamicBatchSampler(ds, max_num=max_num, mode="node", shuffle=True)
        batches = [b for b in iter(s)]
        nodes = sum(int(m[b, 0].sum()) for b in batches)
        edges = sum(int(m[b, 1].sum()) for b in batches)
        effs.append({"node_efficiency": nodes / (len(batches) * max_num),
                     "batches": len(batches),
                     "mean_graphs_per_batch": sum(map(len, batches)) / len(batches),
                     "edges": edges})
        shapes.append(len({(int(m[b, 0].sum()), int(m[b, 1].sum()), len(b)) for b in batches}))
    return {k: float(np.mean([e[k] for e in effs])) for k in effs[0]}, float(np.mean(shapes))


def main(argv: Optional[Sequence[str]] = None) -> None:
    """``python benchmarks/bench_efficiency.py [options]``: print the tables (see the module doc)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--graphs", type=int, nargs="+", default=[64, 32])
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds, n_bad = load_nci5k()
    sizes = ga.graph_sizes(ds)
    m = sizes.matrix
    print(f"# {len(ds)} NCI molecules (rdkit first_5k.tpsa.csv; "
          f"{n_bad} SMILES rdkit cannot parse are left out), "
          f"nodes mean {m[:, 0].mean():.1f} max {m[:, 0].max()}, edges mean "
          f"{m[:, 1].mean():.1f} max {m[:, 1].max()}; {args.epochs} shuffled epochs; "
          f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}")
    for k in args.graphs:
        print(f"\n## about {k} graphs a batch\n")
        print("| method | budget (nodes / edges / graph slots) | node eff. | edge eff. | "
              "graph eff. | batches | graphs/batch | shapes |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        fit = ga.Budget.fit(sizes, k)
        half = ga.Budget.fit(sizes, k, success_ratio=0.5)
        for b, r in ((fit, "0.99"), (half, "0.5")):
            bstr = f"{b.nodes} / {b.edges} / {b.graphs}"
            for packer, ob, name in (("greedy", 8, "greedy"), ("greedy", 1, "next-fit"),
                                     ("histogram", 8, "histogram")):
                label = f"FixedSizeLoader, Budget.fit(success_ratio={r}), {name}"
                e, shapes = ours(sizes, b, packer, args.epochs, ob)
                print(f"| {label} | {bstr} | {e['node_efficiency']:.1%} | "
                      f"{e['edge_efficiency']:.1%} | {e['graph_efficiency']:.1%} | "
                      f"{e['batches']:.1f} | {e['mean_graphs_per_batch']:.1f} | {shapes} |")
        # jraph / flax ogbg recipe: mean x B rounded up to 64, next-fit
        mean = m.mean(axis=0)
        jb = probe_budget(nodes=int(np.ceil(mean[0] * k / 64) * 64) + 1,
                          edges=int(np.ceil(mean[1] * k / 64) * 64), graphs=k + 1)
        e, shapes = ours(sizes, jb, "greedy", args.epochs, open_batches=1)
        print(f"| jraph-style next-fit, budget mean x {k} rounded to 64 | {jb.nodes} / "
              f"{jb.edges} / {jb.graphs} | {e['node_efficiency']:.1%} | "
              f"{e['edge_efficiency']:.1%} | {e['graph_efficiency']:.1%} | "
              f"{e['batches']:.0f} | {e['mean_graphs_per_batch']:.1f} | {shapes} |")
        tight = ga.Budget.tight(sizes, k)
        e = ga.plan_efficiency([list(range(i, min(i + k, len(ds)))) for i in
                             range(0, len(ds), k)], sizes, tight)
        print(f"| fixed {k} graphs, Budget.tight (sum of the {k} largest) | {tight.nodes} / "
              f"{tight.edges} / {tight.graphs} | {e['node_efficiency']:.1%} | "
              f"{e['edge_efficiency']:.1%} | {e['graph_efficiency']:.1%} | {e['batches']} | "
              f"{e['mean_graphs_per_batch']:.1f} | 1 |")
        e, fb, shapes = fixed_count(sizes, k, args.epochs)
        print(f"| pad-to-max, fixed {k} graphs (graphium / poptorch_geometric default) | "
              f"{fb.nodes} / {fb.edges} / {fb.graphs} | {e['node_efficiency']:.1%} | "
              f"{e['edge_efficiency']:.1%} | {e['graph_efficiency']:.1%} | "
              f"{e['batches']:.0f} | {e['mean_graphs_per_batch']:.1f} | {shapes} |")
        e, shapes = dynamic_sampler(ds, sizes, fit.max_real_nodes, args.epochs)
        print(f"| PyG DynamicBatchSampler(max_num={fit.max_real_nodes}, mode='node') | "
              f"{fit.max_real_nodes} / no cap / no cap | {e['node_efficiency']:.1%} | n/a | n/a | "
              f"{e['batches']:.0f} | {e['mean_graphs_per_batch']:.1f} | {shapes:.0f} |")
