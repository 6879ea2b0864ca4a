"""Training a temporal heterogeneous link predictor: compiled through ``ipu_wrap``
vs eager PyG on the same batches unpadded.

A synthetic user-item graph generated here (no download, :func:`temporal_graph`):
users and items carry latent factors; over time each user buys items with a
probability that grows with the dot product of their factors; the node features
are the factors seen through noise, so the purchase history carries signal the
features alone do not. The task is PyG's temporal link prediction: the
purchases before the split time train, the later ones are evaluated, each
supervision edge sampled at its own time minus one (no neighbour later than
the link, and the link itself not among its own messages), with binary
negatives 1:1 (``FixedSizeLinkNeighborLoader(hetero_data, ..., time_attr="time",
edge_label_time=..., neg_sampling="binary")``).

The model (:class:`LinkModel`) is two ``HeteroConv`` layers of ``SAGEConv`` and
a dot-product decoder. Per seed, two copies from the same initial weights:

* ours: ``ipu_wrap(model, loss_fn=...)`` compiled with ``graph_adapter.compile``
  (``--backend``, inductor by default, compiling in this process), trained on
  the padded batches: one compile in train mode and one in eval mode
  (``compile_count`` read after each; the eval loader has a budget of its own,
  its later links having more history, so ``allow_new_shapes=True``);
* eager PyG: the same model unwrapped, eager, trained on ``loader.to_pyg(batch)``
  of the same batches (what PyG's ``LinkNeighborLoader`` yields for that
  sample; PyG's own temporal link loader needs pyg-lib, which does not
  install here).

Both sample each epoch's batches once (one loader, so the same subgraphs and
negatives), then the training steps (forward, masked BCE, backward, Adam) are
timed over the materialised batches, so the per-epoch train times compare the
models alone; sampling and ``to_pyg`` are printed apart. The first compiled
epoch holds the compile; it is reported on its own and the train time per
epoch is the median of the later epochs. Eval AUC (computed with torch) is
over the later purchases and their negatives, the same for both.

Run: ``TORCHINDUCTOR_CACHE_DIR=.cache/inductor python benchmarks/bench_temporal_link_train.py``
(``--backend aot_eager --epochs 2`` for a quick look).
"""
from __future__ import annotations

import argparse
import copy
import math
import os
import platform
import statistics
import sys
import time
import warnings
from typing import Any, Callable, Dict, List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import HeteroData
from torch_geometric.nn import HeteroConv, SAGEConv

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout

import graph_adapter as ga  # noqa: E402
from graph_adapter import FixedSizeLinkNeighborLoader  # noqa: E402
from graph_adapter.nn.link_losses import masked_link_bce  # noqa: E402
from graph_adapter.sampling import fit_hetero_budget  # noqa: E402

BUYS = ("user", "buys", "item")
REV = ("item", "rev_buys", "user")


def temporal_graph(users: int = 300, items: int = 400, purchases: int = 8000, dim: int = 16,
                   noise: float = 1.0, horizon: int = 1000, seed: int = 0) -> HeteroData:
    """A user-item purchase graph over time with learnable signal.

    Args:
        users, items: node counts of the two types.
        purchases: edges; each picks a random user, then an item drawn with
            probability ``softmax(2 * z_user . z_item / sqrt(dim))``.
        dim: latent and feature width.
        noise: std of the noise added to the latent factors to make the features.
        horizon: edge times are integers in ``[0, horizon)``, sorted.
        seed: the generator's seed.

    Returns:
        A ``HeteroData`` with ``user``/``item`` ``x`` and both edge types
        (``buys`` and its reverse ``rev_buys``) carrying an edge-level ``time``.
    """
    g = torch.Generator().manual_seed(seed)
    zu, zi = torch.randn(users, dim, generator=g), torch.randn(items, dim, generator=g)
    src = torch.randint(0, users, (purchases,), generator=g)
    prob = torch.softmax(2.0 * zu[src] @ zi.T / dim ** 0.5, -1)
    dst = torch.multinomial(prob, 1, generator=g).squeeze(1)
    t = torch.sort(torch.randint(0, horizon, (purchases,), generator=g)).values
    data = HeteroData()
    data["user"].x = zu + noise * torch.randn(users, dim, generator=g)
    data["item"].x = zi + noise * torch.randn(items, dim, generator=g)
    data[BUYS].edge_index, data[BUYS].time = torch.stack([src, dst]), t
    data[REV].edge_index, data[REV].time = torch.stack([dst, src]), t.clone()
    return data


def link_loaders(data: HeteroData, split: float = 0.8, fanouts: Tuple[int, ...] = (8, 4),
                 batch_size: int = 256, seed: int = 0, headroom: float = 1.05,
                 **kw: Any) -> Tuple[Any, Any]:
    """The temporal link loaders of the task, binary negatives 1:1.

    Args:
        data: a :func:`temporal_graph`.
        split: the fraction of the time range whose purchases train.
        fanouts: ``num_neighbors`` per hop.
        batch_size: positives a batch.
        seed: the loaders' sampling seed.
        headroom: each budget is fitted to the sampled sizes times this (the
            fitting samples do not bound an epoch's: a batch over the budget is
            trimmed, with a warning and ``loader.stats``).
        kw: more ``FixedSizeLinkNeighborLoader`` arguments.

    Returns:
        The train loader (purchases before the split time, shuffled) and the eval
        loader (the later ones, in order), each on a budget of its own; each link
        sampled at its time minus one (strictly before it: the link is not its own
        message).
    """
    t = data[BUYS].time
    cut = int(t.min() + split * (t.max() - t.min()))
    parts = ((t < cut, True), (t >= cut, False))

    def make(part, shuffle, budget=None):
        return FixedSizeLinkNeighborLoader(
            data, list(fanouts), edge_label_index=(BUYS, data[BUYS].edge_index[:, part]),
            edge_label_time=t[part] - 1, time_attr="time", batch_size=batch_size,
            neg_sampling="binary", shuffle=shuffle, seed=seed, budget=budget, **kw)

    # a budget each: the later links have more history, so larger subgraphs; eval runs
    # in a mode of its own, compiled once anyway (compile(..., allow_new_shapes=True))
    out = []
    for part, shuffle in parts:
        loader = make(part, shuffle)
        if headroom != 1:
            sizes = [({k: math.ceil(v * headroom) for k, v in nodes.items()},
                      {k: math.ceil(v * headroom) for k, v in edges.items()})
                     for nodes, edges in loader.fit_sizes]
            loader = make(part, shuffle, fit_hetero_budget(
                sizes, None, batch_size, minima=loader.min_seeds, avoid=(loader.slots,)))
        out.append(loader)
    return out[0], out[1]


class LinkModel(torch.nn.Module):
    """Two ``HeteroConv(SAGEConv)`` layers over both edge types and a dot-product
    decoder of the ``user buys item`` label edges; ``forward(data)`` takes a PyG
    ``HeteroData`` (eager) or the batch ``ipu_wrap`` rebuilds (compiled)."""

    def __init__(self, dim: int = 16, hidden: int = 32):
        super().__init__()
        self.conv1 = HeteroConv({BUYS: SAGEConv((dim, dim), hidden),
                                 REV: SAGEConv((dim, dim), hidden)})
        self.conv2 = HeteroConv({BUYS: SAGEConv((hidden, hidden), hidden),
                                 REV: SAGEConv((hidden, hidden), hidden)})

    def forward(self, data: HeteroData) -> Tensor:
        h = self.conv1(data.x_dict, data.edge_index_dict)
        h = {k: F.relu(v) for k, v in h.items()}
        h = self.conv2(h, data.edge_index_dict)
        eli = data[BUYS].edge_label_index
        return (h["user"][eli[0]] * h["item"][eli[1]]).sum(-1)


def wrapped_loss(output: Tensor, batch: HeteroData) -> Tensor:
    """The ``ipu_wrap`` loss: BCE over the real supervision slots (``link_mask``)."""
    store = batch[BUYS]
    return masked_link_bce(output, store.edge_label, store.link_mask)


def eager_loss(output: Tensor, batch: HeteroData) -> Tensor:
    """Eager PyG's loss on the unpadded batch: plain BCE over every label."""
    return F.binary_cross_entropy_with_logits(output, batch[BUYS].edge_label)


def auc(scores: Tensor, labels: Tensor) -> float:
    """ROC AUC with torch (Mann-Whitney U, ties counted half)."""
    scores, labels = scores.double(), labels.bool()
    pos, neg = scores[labels], scores[~labels]
    if pos.numel() == 0 or neg.numel() == 0:
        return float("nan")
    ranks = torch.empty_like(scores)
    order = torch.argsort(scores)
    ranks[order] = torch.arange(1, scores.numel() + 1, dtype=torch.double)
    # average ranks over ties
    uniq, inv = torch.unique(scores, return_inverse=True)
    mean_rank = torch.zeros(uniq.numel(), dtype=torch.double).scatter_reduce_(
        0, inv, ranks, "mean", include_self=False)
    ranks = mean_rank[inv]
    u = ranks[labels].sum() - pos.numel() * (pos.numel() + 1) / 2
    return float(u / (pos.numel() * neg.numel()))


def _epoch(loader) -> Tuple[List[Dict[str, Tensor]], List[HeteroData], float, float]:
    """One epoch's padded batches and their ``to_pyg``; sampling and conversion seconds."""
    t0 = time.perf_counter()
    flats = list(loader)
    t1 = time.perf_counter()
    pygs = [loader.to_pyg(f) for f in flats]
    return flats, pygs, t1 - t0, time.perf_counter() - t1


def _train_steps(step: Callable[[object], None], batches: list) -> float:
    t0 = time.perf_counter()
    for b in batches:
        step(b)
    return time.perf_counter() - t0


def run_seed(data: HeteroData, seed: int, args) -> Dict[str, object]:
    """Train both copies for ``args.epochs`` epochs from the same weights; their eval
    AUCs, per-epoch times and compile counts."""
    train_loader, eval_loader = link_loaders(data, fanouts=tuple(args.fanouts),
                                             batch_size=args.batch, seed=seed)
    torch.manual_seed(seed)
    plain = LinkModel(data["user"].x.size(1), args.hidden)
    ours = copy.deepcopy(plain)
    torch._dynamo.reset()
    # background=False: the first call compiles in this process (the tuning wing's
    # default compiles in a child while calls run eagerly); its time is the first epoch's
    # allow_new_shapes: eval batches have a budget of their own (compiled once, in eval mode)
    compiled = ga.compile(ga.ipu_wrap(ours, loss_fn=wrapped_loss), backend=args.backend,
                          allow_new_shapes=True,
                          **({"background": False} if args.backend == "inductor" else {}))
    opt_c = torch.optim.Adam(ours.parameters(), lr=args.lr)
    opt_e = torch.optim.Adam(plain.parameters(), lr=args.lr)

    def step_c(flat):
        opt_c.zero_grad()
        compiled(flat)["loss"].backward()
        opt_c.step()

    def step_e(batch):
        opt_e.zero_grad()
        eager_loss(plain(batch), batch).backward()
        opt_e.step()

    res: Dict[str, object] = {"ours": [], "pyg": [], "sample": [], "to_pyg": []}
    ours.train(), plain.train()
    for _ in range(args.epochs):
        flats, pygs, ts, tp = _epoch(train_loader)
        res["sample"].append(ts)
        res["to_pyg"].append(tp)
        res["ours"].append(_train_steps(step_c, flats))
        res["pyg"].append(_train_steps(step_e, pygs))
    res["compiles_train"] = compiled.compile_count
    res["trimmed"] = train_loader.stats.trimmed_batches
    res["fill"] = train_loader.stats.node_efficiency
    # eval: the same batches (negatives are fixed per (seed, epoch, batch)) for both
    flats, pygs, _, _ = _epoch(eval_loader)
    ours.eval(), plain.eval()
    sc, lc, se, le = [], [], [], []
    with torch.no_grad():
        for flat, batch in zip(flats, pygs):
            mask = flat[f"{'__'.join(BUYS)}/link_mask"]
            sc.append(compiled(flat)["output"][mask])
            lc.append(flat[f"{'__'.join(BUYS)}/edge_label"][mask])
            se.append(plain(batch))
            le.append(batch[BUYS].edge_label)
    res["compiles_eval"] = compiled.compile_count - res["compiles_train"]
    res["trimmed"] += eval_loader.stats.trimmed_batches
    res["auc_ours"] = auc(torch.cat(sc), torch.cat(lc))
    res["auc_pyg"] = auc(torch.cat(se), torch.cat(le))
    res["budget"] = train_loader.budget
    res["batches"] = len(flats)
    return res


def _ms(xs: List[float]) -> str:
    return f"{statistics.mean(xs):.3f} +- {statistics.pstdev(xs):.3f}"


def main(argv=None) -> None:
    """Parse the arguments, run every seed and print the side-by-side summary."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="inductor")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--fanouts", type=int, nargs="+", default=[8, 4])
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--users", type=int, default=300)
    p.add_argument("--items", type=int, default=400)
    p.add_argument("--purchases", type=int, default=8000)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    data = temporal_graph(args.users, args.items, args.purchases)
    print(f"{platform.machine()} {os.cpu_count()} cores, torch {torch.__version__} at "
          f"{args.threads} thread(s), backend {args.backend}; {args.users} users, "
          f"{args.items} items, {args.purchases} purchases; batch {args.batch}, "
          f"num_neighbors={args.fanouts}, {args.epochs} epochs")
    rows = []
    for seed in args.seeds:
        r = run_seed(data, seed, args)
        later_o, later_p = r["ours"][1:] or r["ours"], r["pyg"][1:] or r["pyg"]
        r["epoch_ours"], r["epoch_pyg"] = statistics.median(later_o), statistics.median(later_p)
        rows.append(r)
        print(f"seed {seed}: eval AUC ours {r['auc_ours']:.4f} / eager PyG {r['auc_pyg']:.4f}; "
              f"train s/epoch ours {r['epoch_ours']:.3f} (first epoch with compile "
              f"{r['ours'][0]:.2f}) / eager PyG {r['epoch_pyg']:.3f} -> "
              f"{r['epoch_pyg'] / r['epoch_ours']:.2f}x; compiles train {r['compiles_train']}, "
              f"eval {r['compiles_eval']}; sampling {statistics.median(r['sample']):.3f} s/epoch, "
              f"to_pyg {statistics.median(r['to_pyg']):.3f} s/epoch", flush=True)
    print(f"train budget {rows[0]['budget']}; node slots filled (last train epoch) "
          f"{_ms([r['fill'] for r in rows])}; batches trimmed (last epochs) "
          f"{[r['trimmed'] for r in rows]}")
    print(f"eval AUC      ours {_ms([r['auc_ours'] for r in rows])} | eager PyG "
          f"{_ms([r['auc_pyg'] for r in rows])} | diff "
          f"{_ms([r['auc_ours'] - r['auc_pyg'] for r in rows])}")
    eo, ep = [r["epoch_ours"] for r in rows], [r["epoch_pyg"] for r in rows]
    print(f"train s/epoch ours {_ms(eo)} | eager PyG {_ms(ep)} | eager/ours "
          f"{statistics.mean(ep) / statistics.mean(eo):.2f}x")
    print(f"first epoch (with compile) ours {_ms([r['ours'][0] for r in rows])} | eager PyG "
          f"{_ms([r['pyg'][0] for r in rows])}")
    print(f"compiles per seed: train {[r['compiles_train'] for r in rows]}, eval "
          f"{[r['compiles_eval'] for r in rows]}")
    print(f"sampling s/epoch {_ms([statistics.median(r['sample']) for r in rows])} (shared); "
          f"to_pyg s/epoch {_ms([statistics.median(r['to_pyg']) for r in rows])} (eager only)")
    # the epoch end to end on this loader: sampling + steps (+ to_pyg for eager PyG);
    # PyG's own temporal loader (pyg-lib) would replace sampling + to_pyg there
    so = [statistics.median(r["sample"]) + r["epoch_ours"] for r in rows]
    sp = [statistics.median(r["sample"]) + statistics.median(r["to_pyg"]) + r["epoch_pyg"]
          for r in rows]
    print(f"epoch with sampling s: ours {_ms(so)} | eager PyG {_ms(sp)} | eager/ours "
          f"{statistics.mean(sp) / statistics.mean(so):.2f}x")


if __name__ == "__main__":
    main()
