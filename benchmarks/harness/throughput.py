"""Throughput of a GIN on rdkit's NCI-5k molecules: PyG eager vs ipu_wrap eager/compiled.

Measured side by side in one run (same model, data, loss, optimizer):

* inference and training step, on pre-collated batches: eager PyG on
  unpadded ``Batch``es vs ``ipu_wrap(model)`` eager and ``graph_adapter.compile``
  (inductor) on padded flat dicts from ``FixedSizeLoader``: graphs/s;
* compile time (first call, train and eval);
* end-to-end training epoch including data loading: PyG ``DataLoader`` +
  eager vs ``FixedSizeLoader`` + the compiled wrapped model (and + eager);
  and one epoch of data loading alone for each loader.

Each figure is the best of ``--repeats`` rounds; the variants of a table row
group run in turn within each round, so load from other processes hits them
alike. The 1-minute load average is printed at the start and the end.

Usage: ``python benchmarks/bench_throughput.py [--limit 5000] [--batch 64]
[--threads N] [--repeats 3]``. Prints a table and the ratios; figures for this
machine are in ``docs/wrapping.md``. ``main(argv)`` returns every figure as a
dict (what ``python benchmarks/bench_all.py`` shows).
"""
from __future__ import annotations

import argparse
import copy
import os
import platform
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch_geometric.data import Batch
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GIN, global_add_pool

import graph_adapter as ga

from graph_adapter.app.datasets import load_nci5k

__all__ = ["MolNet", "timed_interleaved", "set_inductor_env", "main"]

SCALE = 100.0  # TPSA / 100 as the regression target


class MolNet(torch.nn.Module):
    """A stock PyG GIN on the 9 atom features of ``from_smiles`` (as floats), add-pooled."""

    def __init__(self, hidden: int = 128, layers: int = 4):
        super().__init__()
        self.emb = torch.nn.Linear(9, hidden)
        self.gin = GIN(hidden, hidden, layers, hidden, norm="batch_norm")
        self.head = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                                        torch.nn.Linear(hidden, 1))

    def forward(self, data):
        h = self.gin(self.emb(data.x.float()), data.edge_index)
        return self.head(global_add_pool(h, data.batch))


def pyg_loss(out, batch):
    # out is [B, 1], y [B]: without the view mse_loss broadcasts to [B, B]
    return F.mse_loss(out.view(-1), batch.y.view(-1) / SCALE)


def wrapped_loss(out, batch):
    return ga.losses.masked_mse_loss(out, batch.y / SCALE, batch.graph_mask)


def timed_interleaved(fns: Dict[str, Callable[[], None]], repeats: int,
                      reduce: Callable[[List[float]], float] = min,
                      clock: Callable[[], float] = time.perf_counter) -> Dict[str, float]:
    """``reduce`` (default: the best) of each function's times over ``repeats`` rounds;
    every round runs each once, in turn, so a burst of load from other processes
    hits every variant alike. ``clock``: ``time.process_time`` counts this
    process's CPU time instead of wall time (steadier on a shared machine)."""
    times: Dict[str, List[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t = clock()
            fn()
            times[k].append(clock() - t)
    return {k: reduce(v) for k, v in times.items()}


def trainer(model: torch.nn.Module, loss_of: Callable[[Any], torch.Tensor],
            batches: Sequence[Any]) -> Callable[[], None]:
    """A function that runs one Adam step per batch (``loss_of(batch)`` is the loss)."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def run() -> None:
        for b in batches:
            loss = loss_of(b)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return run


def inferer(call: Callable[[Any], Any], batches: Sequence[Any]) -> Callable[[], None]:
    """A function that runs ``call`` on every batch without gradients."""
    def run() -> None:
        with torch.no_grad():
            for b in batches:
                call(b)
    return run


def set_inductor_env() -> None:
    """Default inductor settings of this benchmark: one compile thread, a cache of its own.

    Call before ``import torch`` for ``TORCHINDUCTOR_COMPILE_THREADS`` to take
    effect (``benchmarks/bench_throughput.py`` sets both first); the cache
    directory is read when inductor compiles.
    """
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR",
                          os.path.join(tempfile.gettempdir(), "graph_adapter_bench_inductor"))


def _parser() -> argparse.ArgumentParser:
    """The script's flags."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=128)
    return ap


def _inference(base: torch.nn.Module, pyg_batches: List[Batch], flats: List[Dict[str, Any]],
               n_graphs: int, repeats: int, res: Dict[str, Any]) -> Any:
    """Inference of eager PyG, ipu_wrap eager and ipu_wrap + inductor, interleaved; fills
    ``res`` (``compile_eval_s``, ``inf_*`` graphs/s) and returns the compiled model."""
    m_pyg = copy.deepcopy(base).eval()
    # no loss inside the wrapper: eager PyG's inference computes none either
    w_eager = ga.ipu_wrap(copy.deepcopy(base)).eval()
    w_comp = ga.ipu_wrap(copy.deepcopy(base)).eval()
    c_inf = ga.compile(w_comp, "inductor", background=False)  # the steady state is timed

    def inf_pyg():
        with torch.no_grad():
            for b in pyg_batches:
                m_pyg(b)

    def inf_wrapped(fn):
        def run():
            with torch.no_grad():
                for f in flats:
                    fn(f)
        return run

    t = time.perf_counter()
    with torch.no_grad():
        c_inf(flats[0])
    res["compile_eval_s"] = time.perf_counter() - t
    t_inf = timed_interleaved({"inf_pyg": inf_pyg, "inf_wrapped_eager": inf_wrapped(w_eager),
                               "inf_compiled": inf_wrapped(c_inf)}, repeats)
    res.update({k: n_graphs / v for k, v in t_inf.items()})

    return c_inf


def _training(base: torch.nn.Module, pyg_batches: List[Batch], flats: List[Dict[str, Any]],
              n_graphs: int, repeats: int, res: Dict[str, Any]) -> Tuple[Any, Any, Any]:
    """One training pass of each, interleaved; fills ``res`` (``compile_train_s``,
    ``train_*`` graphs/s) and returns ``(eager PyG model, ipu_wrap eager, compiled)``
    (their training state, for the epochs)."""
    m_pyg_t = copy.deepcopy(base).train()
    w_eager_t = ga.ipu_wrap(copy.deepcopy(base), loss_fn=wrapped_loss).train()
    w_comp_t = ga.ipu_wrap(copy.deepcopy(base), loss_fn=wrapped_loss).train()
    c_train = ga.compile(w_comp_t, "inductor", background=False)
    t = time.perf_counter()
    c_train(flats[0])["loss"].backward()
    res["compile_train_s"] = time.perf_counter() - t
    for p in w_comp_t.parameters():
        p.grad = None
    t_train = timed_interleaved({
        "train_pyg": trainer(m_pyg_t, lambda b: pyg_loss(m_pyg_t(b), b), pyg_batches),
        "train_wrapped_eager": trainer(w_eager_t, lambda f: w_eager_t(f)["loss"], flats),
        "train_compiled": trainer(w_comp_t, lambda f: c_train(f)["loss"], flats)}, repeats)
    res.update({k: n_graphs / v for k, v in t_train.items()})

    return m_pyg_t, (w_eager_t, w_comp_t), c_train


def _epochs(data: List[Any], budget: Any, batch: int, models: Tuple[Any, Any, Any],
            repeats: int, res: Dict[str, Any]) -> None:
    """Whole epochs with data loading (PyG's DataLoader + eager, FixedSizeLoader + ipu_wrap
    eager / compiled) and the loaders alone, interleaved; fills ``res`` (``epoch_*_s``,
    ``load_*_s``)."""
    m_pyg_t, (w_eager_t, w_comp_t), c_train = models
    def epoch_pyg():
        dl = DataLoader(data, batch_size=batch, shuffle=True)
        trainer(m_pyg_t, lambda b: pyg_loss(m_pyg_t(b), b), dl)()

    fsl = ga.FixedSizeLoader(data, budget, shuffle=True)

    def epoch_fsl(model, call):
        def run():
            trainer(model, call, fsl)()
        return run

    def loading_only(loader_fn):
        def run():
            for _ in loader_fn():
                pass
        return run

    res.update(timed_interleaved({
        "epoch_pyg_s": epoch_pyg,
        "epoch_fsl_eager_s": epoch_fsl(w_eager_t, lambda f: w_eager_t(f)["loss"]),
        "epoch_fsl_compiled_s": epoch_fsl(w_comp_t, lambda f: c_train(f)["loss"]),
        "load_pyg_s": loading_only(lambda: DataLoader(data, batch_size=batch, shuffle=True)),
        "load_fsl_s": loading_only(lambda: fsl)}, repeats))


def _report(res: Dict[str, Any]) -> None:
    """The tables and the ratios of :func:`main`'s figures."""
    print()
    print(f"{'':34s}{'graphs/s':>12s}")
    for k, label in [("inf_pyg", "inference  PyG eager (unpadded)"),
                     ("inf_wrapped_eager", "inference  ipu_wrap eager"),
                     ("inf_compiled", "inference  ipu_wrap inductor"),
                     ("train_pyg", "train step PyG eager (unpadded)"),
                     ("train_wrapped_eager", "train step ipu_wrap eager"),
                     ("train_compiled", "train step ipu_wrap inductor")]:
        print(f"{label:34s}{res[k]:12.0f}")
    print(f"compile time: eval {res['compile_eval_s']:.1f} s, train {res['compile_train_s']:.1f} s; "
          f"compiles in total: {res['compiles']}")
    print(f"epoch incl. loading: PyG DataLoader + eager {res['epoch_pyg_s']:.2f} s, "
          f"FixedSizeLoader + ipu_wrap eager {res['epoch_fsl_eager_s']:.2f} s, "
          f"FixedSizeLoader + inductor {res['epoch_fsl_compiled_s']:.2f} s")
    print(f"data loading alone (one epoch, no model): PyG DataLoader {res['load_pyg_s']:.3f} s, "
          f"FixedSizeLoader {res['load_fsl_s']:.3f} s")
    print(f"load average at start {res['loadavg_start'][0]:.2f}, at end {res['loadavg_end'][0]:.2f} "
          f"(1 min; {os.cpu_count()} cores)")
    print()
    print(f"ratio inference compiled / PyG eager: {res['inf_compiled'] / res['inf_pyg']:.2f}x (goal >= 1.5x)")
    print(f"ratio train step compiled / PyG eager: {res['train_compiled'] / res['train_pyg']:.2f}x")
    print(f"ratio epoch PyG+eager / FixedSizeLoader+compiled: "
          f"{res['epoch_pyg_s'] / res['epoch_fsl_compiled_s']:.2f}x (goal >= 1.2x)")
    print(f"ratio epoch PyG+eager / FixedSizeLoader+ipu_wrap eager: "
          f"{res['epoch_pyg_s'] / res['epoch_fsl_eager_s']:.2f}x")


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """``python benchmarks/bench_throughput.py [options]``: print the tables and return
    every figure (graphs/s, seconds, compile count) as a dict."""
    set_inductor_env()
    args = _parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    res = {"loadavg_start": os.getloadavg()}

    data, bad = load_nci5k(limit=args.limit)
    for d in data:  # strings cannot live in a tensor dict; drop for both sides
        del d.smiles
    n_graphs = len(data)
    budget = ga.Budget.fit(data, args.batch)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}, threads {torch.get_num_threads()}, no GPU")
    print(f"data: {n_graphs} molecules (NCI-5k), batch {args.batch} graphs; budget {budget}")

    torch.manual_seed(0)
    base = MolNet(args.hidden)
    # pre-collated batches
    pyg_batches = [Batch.from_data_list(data[i:i + args.batch]) for i in range(0, n_graphs, args.batch)]
    loader = ga.FixedSizeLoader(data, budget, shuffle=False)
    flats = list(loader)
    real = sum(int(f["graph_mask"].sum()) for f in flats)
    print(f"padded batches: {len(flats)} (PyG: {len(pyg_batches)}), real graphs {real}, "
          f"node fill {sum(int(f['node_mask'].sum()) for f in flats) / sum(f['node_mask'].numel() for f in flats):.2f}")

    c_inf = _inference(base, pyg_batches, flats, n_graphs, args.repeats, res)
    models = _training(base, pyg_batches, flats, n_graphs, args.repeats, res)
    _epochs(data, budget, args.batch, models, args.repeats, res)
    res["compiles"] = c_inf.compile_count + models[2].compile_count
    res["loadavg_end"] = os.getloadavg()
    _report(res)
    return res
