"""The "models" table: compiled training and inference vs eager PyG, model by model.

Six molecular GNNs built from stock PyG classes (the ones the zoo's rows
build, ``torch_geometric.nn.models`` / ``conv``) and the demo's model
(:func:`graph_adapter.app.models.build_model` at the demo's defaults), on
rdkit's NCI-5k molecules, 64 graphs a batch:

* ``gine``: GINEConv 4 x 64 + BatchNorm, float atom and bond features;
* ``gin``: ``models.GIN`` 4 x 128 + BatchNorm;
* ``gcn``: ``models.GCN`` 3 x 64;
* ``gatv2``: ``models.GAT(v2=True)`` 3 x 64, 4 heads, edge features;
* ``ogb``: OGB-style atom/bond embedding sums + GINEConv 4 x 64 + BatchNorm;
* ``demo``: the demo's model (embeddings + GINE 4 x 64 + BatchNorm, its HYB layout).

Each is measured side by side in one process: eager PyG (``Batch``es of 64
consecutive molecules, the model unmodified) against ``FixedSizeLoader`` +
``ipu_wrap`` + ``graph_adapter.compile(backend="inductor")`` at its defaults,
on pre-collated batches (step time only, one Adam step a batch for training,
``no_grad`` forwards for inference). The variants of a mode run in turn in
each of ``rounds`` rounds and the best round counts, so load from other
processes hits both alike; each figure is this process's CPU time (one thread:
the same work as wall time, without the other processes' slices). The first
compiled call of each mode is timed
apart (compile included: what a user waits for at the first step).

``python benchmarks/bench_models.py [--only gcn gin] [--limit 1000] [--rounds 5]``
prints the table with the geomean; ``python benchmarks/bench_all.py --only models`` shows it.
"""
from __future__ import annotations

import argparse
import copy
import math
import os
import platform
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import graph_adapter as ga

from graph_adapter.app.datasets import load_nci5k
from .throughput import inferer, set_inductor_env, timed_interleaved, trainer

__all__ = ["MODELS", "build", "measure_model", "geomean", "table", "main"]

SCALE = 100.0  # TPSA / 100 as the regression target


class _Float(nn.Module):
    """``gnn`` on the float cast of the categorical features, add/mean pooled, linear head.

    ``forward(data)``: what PyG users write; ``ipu_wrap`` passes the rebuilt batch."""

    def __init__(self, gnn: nn.Module, hidden: int, edges: bool, pool: str = "add",
                 embed: Optional[Tuple[nn.Module, nn.Module]] = None):
        super().__init__()
        self.gnn, self.edges, self.pool = gnn, edges, pool
        self.atom = embed[0] if embed else nn.Linear(9, hidden)
        self.bond = (embed[1] if embed else nn.Linear(3, hidden)) if edges else None
        self.embedded = embed is not None
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, data) -> Tensor:
        from torch_geometric.nn import global_add_pool, global_mean_pool

        x = data.x if self.embedded else data.x.float()
        h = self.atom(x)
        if self.edges:
            ea = data.edge_attr if self.embedded else data.edge_attr.float()
            h = self.gnn(h, data.edge_index, edge_attr=self.bond(ea))
        else:
            h = self.gnn(h, data.edge_index)
        pool = global_add_pool if self.pool == "add" else global_mean_pool
        return self.head(pool(h, data.batch))


class _GINEStack(nn.Module):
    """GINEConv x ``layers`` (2-layer MLPs), BatchNorm and ReLU after each."""

    def __init__(self, hidden: int, layers: int):
        super().__init__()
        from torch_geometric.nn import GINEConv
        from torch_geometric.nn.models import MLP

        self.convs = nn.ModuleList(GINEConv(MLP([hidden, hidden, hidden], norm=None),
                                            edge_dim=hidden) for _ in range(layers))
        self.norms = nn.ModuleList(nn.BatchNorm1d(hidden) for _ in range(layers))

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor) -> Tensor:
        for conv, norm in zip(self.convs, self.norms):
            x = torch.relu(norm(conv(x, edge_index, edge_attr)))
        return x


class _Demo(nn.Module):
    """The demo's model (``forward(x, edge_index, edge_attr, batch)``) behind ``forward(data)``."""

    def __init__(self):
        super().__init__()
        from graph_adapter.app.models import build_model
        from graph_adapter.app.demo.config import DemoConfig

        cfg = DemoConfig()
        self.inner = build_model(cfg.model, cfg.hidden, cfg.layers)

    def forward(self, data) -> Tensor:
        return self.inner(data.x, data.edge_index, data.edge_attr, data.batch)


def _gine() -> nn.Module:
    return _Float(_GINEStack(64, 4), 64, edges=True)


def _gin() -> nn.Module:
    from torch_geometric.nn.models import GIN
    return _Float(GIN(128, 128, 4, norm="batch_norm"), 128, edges=False)


def _gcn() -> nn.Module:
    from torch_geometric.nn.models import GCN
    return _Float(GCN(64, 64, 3), 64, edges=False)


def _gatv2() -> nn.Module:
    from torch_geometric.nn.models import GAT
    return _Float(GAT(64, 64, 3, v2=True, heads=4, edge_dim=64), 64, edges=True, pool="mean")


def _ogb() -> nn.Module:
    from torch_geometric.utils.smiles import e_map, x_map

    from graph_adapter.app.models import AtomBondEncoder
    embed = (AtomBondEncoder([len(v) for v in x_map.values()], 64),
             AtomBondEncoder([len(v) for v in e_map.values()], 64))
    return _Float(_GINEStack(64, 4), 64, edges=True, embed=embed)


def _demo_layout() -> Optional[str]:
    """The demo's default layout as FixedSizeLoader takes it (``None``: PyG's scatter)."""
    from graph_adapter.app.demo.config import DemoConfig, loader_layout
    return loader_layout(DemoConfig().layout)


#: name -> (description, builder, FixedSizeLoader layout: None, "hyb", or a callable of none)
MODELS: Dict[str, Tuple[str, Callable[[], nn.Module], Any]] = {
    "gine": ("GINE 4x64 + BatchNorm, float features", _gine, None),
    "gin": ("GIN 4x128 + BatchNorm", _gin, None),
    "gcn": ("GCN 3x64", _gcn, None),
    "gatv2": ("GATv2 3x64, 4 heads, edge features", _gatv2, None),
    "ogb": ("OGB-style atom/bond embedding sums + GINE 4x64", _ogb, None),
    "demo": ("the demo's model (embeddings + GINE 4x64 + BN, its layout)", _Demo, _demo_layout),
}


def build(name: str, seed: int = 0) -> nn.Module:
    """A fresh model of :data:`MODELS` (``KeyError`` with the choices for an unknown name)."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; choose from {sorted(MODELS)}")
    torch.manual_seed(seed)
    return MODELS[name][1]()


def _pyg_loss(model: nn.Module) -> Callable[[Any], Tensor]:
    return lambda b: F.mse_loss(model(b).view(-1), b.y.view(-1) / SCALE)


def _wrapped_loss(out: Tensor, batch) -> Tensor:
    return ga.losses.masked_mse_loss(out, batch.y / SCALE, batch.graph_mask)


def geomean(values: Sequence[float]) -> float:
    """The geometric mean (``nan`` for none)."""
    vals = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else float("nan")


def _timed(fns: Dict[str, Callable[[], None]], rounds: int) -> Dict[str, float]:
    """Best of ``rounds`` interleaved rounds of process CPU time, after one untimed pass
    of each function (first-call work such as the optimizer's state is not a step)."""
    for fn in fns.values():
        fn()
    # process CPU time, not wall time: at one thread the same work, and steadier on a
    # machine shared with other processes (wall time counts their slices too)
    return timed_interleaved(fns, rounds, clock=time.process_time)


def measure_model(name: str, data: List[Any], budget: Any, batch: int = 64, rounds: int = 5,
                  backend: str = "inductor", layout: Any = "model",
                  options: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """One row: graphs/s of eager PyG and of the compiled wrapped model, per mode.

    ``data``: PyG ``Data`` molecules (no string attributes); ``budget``: the
    ``Budget`` of the padded batches. ``layout="model"`` takes the model's own
    (:data:`MODELS`), else ``None`` / ``"ell"`` / ``"hyb"``. Returns
    ``{"train": ratio, "infer": ratio, "first_train_s", "first_infer_s",
    "compiles", ...graphs/s...}``.
    """
    from torch_geometric.data import Batch

    if layout == "model":
        layout = MODELS[name][2]() if callable(MODELS[name][2]) else MODELS[name][2]
    base = build(name)
    n = len(data)
    pyg = [Batch.from_data_list(data[i:i + batch]) for i in range(0, n, batch)]
    flats = list(ga.FixedSizeLoader(data, budget, shuffle=False, layout=layout))
    res: Dict[str, Any] = {"layout": layout}

    m_inf = copy.deepcopy(base).eval()
    # background=False: the steady state is measured, and the first call is the compile
    c_inf = ga.compile(ga.ipu_wrap(copy.deepcopy(base)).eval(), backend, options=options,
                       background=False)
    t = time.perf_counter()
    with torch.no_grad():
        c_inf(flats[0])
    res["first_infer_s"] = time.perf_counter() - t
    t_inf = _timed({"pyg": inferer(m_inf, pyg), "ours": inferer(c_inf, flats)}, rounds)

    m_tr = copy.deepcopy(base).train()
    w_tr = ga.ipu_wrap(copy.deepcopy(base), loss_fn=_wrapped_loss).train()
    c_tr = ga.compile(w_tr, backend, options=options, background=False)
    t = time.perf_counter()
    c_tr(flats[0])["loss"].backward()
    res["first_train_s"] = time.perf_counter() - t
    for p in w_tr.parameters():
        p.grad = None
    t_tr = _timed({"pyg": trainer(m_tr, _pyg_loss(m_tr), pyg),
                   "ours": trainer(w_tr, lambda f: c_tr(f)["loss"], flats)}, rounds)
    res.update(infer_pyg=n / t_inf["pyg"], infer_ours=n / t_inf["ours"],
               train_pyg=n / t_tr["pyg"], train_ours=n / t_tr["ours"],
               compiles=c_inf.compile_count + c_tr.compile_count)
    res["infer"] = res["infer_ours"] / res["infer_pyg"]
    res["train"] = res["train_ours"] / res["train_pyg"]
    return res


def table(results: Dict[str, Dict[str, Any]]) -> str:
    """The markdown table of :func:`measure_model` rows, with the geomean."""
    lines = ["| model | layout | training | inference | first training step (s) "
             "| first inference call (s) |", "|---|---|---:|---:|---:|---:|"]
    for name, r in results.items():
        lines.append(f"| {MODELS[name][0]} | {r['layout'] or 'scatter'} | {r['train']:.2f}x "
                     f"| {r['infer']:.2f}x | {r['first_train_s']:.1f} | {r['first_infer_s']:.1f} |")
    lines.append(f"| geomean | | {geomean([r['train'] for r in results.values()]):.2f}x "
                 f"| {geomean([r['infer'] for r in results.values()]):.2f}x | | |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Dict[str, Any]]:
    """``python benchmarks/bench_models.py [options]``: print the table, return the rows."""
    set_inductor_env()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, choices=sorted(MODELS))
    ap.add_argument("--limit", type=int, default=1000, help="molecules (default 1000)")
    ap.add_argument("--offset", type=int, default=0,
                    help="molecules of NCI-5k skipped first: another slice than the one the "
                         "settings were tuned on (the first 1000)")
    ap.add_argument("--min-nodes", type=int, default=0,
                    help="keep only molecules of at least this many atoms (another size "
                         "distribution: drug-like molecules are larger than most of NCI-5k's)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--layout", default="model", choices=("model", "none", "ell", "hyb"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    data, _ = load_nci5k(limit=None if args.min_nodes else args.offset + args.limit)
    data = [d for d in data if d.num_nodes >= args.min_nodes][args.offset:args.offset + args.limit]
    for d in data:
        del d.smiles
    budget = ga.Budget.fit(data, args.batch)
    load0 = os.getloadavg()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); {len(data)} NCI-5k "
          f"molecules from #{args.offset} of those with >= {args.min_nodes} atoms, {args.batch} a batch, budget {budget}; "
          f"best of {args.rounds} interleaved "
          f"rounds; cache {os.environ.get('TORCHINDUCTOR_CACHE_DIR')}")
    layout = {"none": None}.get(args.layout, args.layout)
    results = {}
    for name in args.only or list(MODELS):
        results[name] = measure_model(name, data, budget, args.batch, args.rounds, layout=layout)
        r = results[name]
        print(f"  {name}: train {r['train']:.2f}x infer {r['infer']:.2f}x "
              f"(first steps {r['first_train_s']:.1f} s / {r['first_infer_s']:.1f} s)", flush=True)
    print()
    print(table(results))
    print(f"\nload average (1 min) at start {load0[0]:.2f}, at end {os.getloadavg()[0]:.2f} "
          f"({os.cpu_count()} cores)")
    return results
