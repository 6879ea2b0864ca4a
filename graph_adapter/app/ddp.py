"""Data-parallel training on several processes: ``torchrun`` + DDP + fixed-size batches.

Run it with two processes on a CPU (gloo)::

    torchrun --nproc_per_node 2 -m graph_adapter.app.ddp --graphs 2000 --epochs 2

Every rank builds the same ``Budget`` from the whole dataset, and
``FixedSizeLoader`` (which reads rank and world size from
``torch.distributed``) gives each rank disjoint graphs, the same number of
batches and the same shapes: one compile per rank, and every rank takes part
in every gradient all-reduce. A rank that runs out of real graphs at the end
of an epoch gets a fully padded fill batch.

Why the loss is rescaled: DDP averages gradients over ranks, but ranks hold
different numbers of real graphs in a step (a fill batch holds none). Each
rank's masked mean is multiplied by :func:`graph_adapter.global_mean_scale`
(``world_size * n_rank / n_all``, ``n``: the loss's real elements, summed over
ranks with one all-reduce of a scalar), so the averaged gradient is exactly
that of the mean loss over every real graph of the step, as on one process
with one big batch. ``--backend inductor`` compiles the module inside DDP
(``graph_adapter.compile`` of a DDP module).

The script prints one JSON line per rank at the end (steps, losses, a
checksum of the parameters): all ranks must report the same checksum.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

import torch
import torch.distributed as dist
from torch import Tensor, nn

import graph_adapter as ga

__all__ = ["synthetic_graphs", "RegressionGIN", "train", "main"]


def synthetic_graphs(n: int, seed: int = 0) -> List[Any]:
    """``n`` random graphs of 4-24 nodes; the target is the mean of the first feature."""
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        nodes = int(torch.randint(4, 25, (1,), generator=g))
        edges = int(torch.randint(nodes, 3 * nodes, (1,), generator=g))
        x = torch.randn(nodes, 8, generator=g)
        out.append(Data(x=x, edge_index=torch.randint(0, nodes, (2, edges), generator=g),
                        y=x[:, :1].mean(0, keepdim=True)))
    return out


class RegressionGIN(nn.Module):
    """A stock PyG ``GIN`` with BatchNorm, mean pooling and a linear head: ``[N, 8] -> [G, 1]``."""

    def __init__(self, hidden: int = 64, layers: int = 3):
        super().__init__()
        from torch_geometric.nn import global_mean_pool
        from torch_geometric.nn.models import GIN

        self.gnn = GIN(8, hidden, layers, norm="batch_norm")
        self.pool = global_mean_pool
        self.head = nn.Linear(hidden, 1)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor) -> Tensor:
        return self.head(self.pool(self.gnn(x, edge_index), batch))


def _checksum(model: nn.Module) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def train(graphs: Sequence[Any], *, epochs: int, graphs_per_batch: int, backend: str,
          lr: float = 1e-2, seed: int = 0) -> Dict[str, Any]:
    """Train :class:`RegressionGIN` on this rank's share of ``graphs``; returns a report dict."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    torch.manual_seed(seed)  # same initial weights everywhere (DDP also broadcasts them)
    budget = ga.Budget.fit(graphs, graphs_per_batch=graphs_per_batch)
    loader = ga.FixedSizeLoader(graphs, budget, shuffle=True, seed=seed)
    loss_fn = ga.masked_loss("mse")
    wrapped = ga.ipu_wrap(RegressionGIN(), loss_fn=loss_fn)
    model = nn.parallel.DistributedDataParallel(wrapped) if world > 1 else wrapped
    step = ga.compile(model, backend=backend)  # DDP: compiles the module inside it
    opt = torch.optim.Adam(wrapped.parameters(), lr=lr)
    losses, shapes, steps, seconds, trained = [], set(), 0, [], []
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        total, n = 0.0, 0
        start = time.perf_counter()
        for flat in loader:
            shapes.add(tuple((k, tuple(v.shape)) for k, v in flat.items()))
            real = int(flat["graph_mask"].sum())
            loss = step(flat)["loss"]
            opt.zero_grad()
            (loss * ga.global_mean_scale(loss_fn.count(flat))).backward()
            opt.step()
            steps += 1
            if real:
                total, n = total + float(loss.detach()) * real, n + real
        seconds.append(time.perf_counter() - start)
        trained.append(n)
        losses.append(total / max(n, 1))
    return {"rank": rank, "world_size": world, "steps": steps, "batches_per_epoch": len(loader),
            "epoch_s": seconds, "epoch_graphs": trained,
            "distinct_shapes": len(shapes), "epoch_loss": losses,
            "compiles": step.compile_count, "param_checksum": _checksum(wrapped)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line: ``torchrun --nproc_per_node K -m graph_adapter.app.ddp [options]``."""
    p = argparse.ArgumentParser(prog="python -m graph_adapter.app.ddp",
                                description="DDP training on fixed-size batches (launch with torchrun).")
    p.add_argument("--graphs", type=int, default=2000, help="synthetic graphs in the dataset")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--graphs-per-batch", type=int, default=64)
    p.add_argument("--backend", default="eager", choices=ga.backends.backend_names(),
                   help="graph_adapter.compile backend (default: eager)")
    p.add_argument("--out", default=None, help="write this rank's JSON report to OUT/rank<k>.json")
    args = p.parse_args(argv)
    if "RANK" in os.environ and not dist.is_initialized():
        dist.init_process_group("gloo")
    try:
        report = train(synthetic_graphs(args.graphs), epochs=args.epochs,
                       graphs_per_batch=args.graphs_per_batch, backend=args.backend)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    line = json.dumps(report)
    print(line, flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"rank{report['rank']}.json"), "w") as f:
            f.write(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
