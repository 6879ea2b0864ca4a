"""``graph-adapter demo --task node``: node classification on one large graph, side by side.

What :func:`run_node_demo` does, in order:

1. generates a stochastic block model graph here (:func:`sbm_graph`, no
   download: ``nodes`` nodes in ``classes`` blocks, class-correlated features,
   so accuracy is meaningful) and splits the nodes 50% train / 25% test (seeded);
2. builds :class:`~graph_adapter.sampling.neighbor.FixedSizeNeighborLoader` for the
   training seeds (budget fitted from the sampler's own output) and one for the
   test seeds sharing its budget (one shape for both);
3. wraps PyG's ``GraphSAGE`` with ``ipu_wrap`` (masked cross-entropy over the
   seed rows) and compiles it with ``graph_adapter.compile`` (``backend``); its
   inference runs through a second compile of the same module wrapped without
   the loss (:func:`inference_model`), on test batches that carry each row's
   in-edge sources (:data:`INFER_LAYOUT`), so its aggregations gather node rows
   in parallel instead of PyG's serial scatter;
4. trains an identical copy (same initial weights, optimizer, fanouts, batch
   size) in plain eager PyG: on PyG's ``NeighborLoader`` batches where its
   sampler can run (pyg-lib or torch-sparse installed), else on our sampler's
   unpadded subgraphs (the report says which);
5. reports padding fill, cuts, training seeds/s (each run's own epochs, the
   first step, the compile, left out and shown apart), inference seeds/s over
   the test seeds (interleaved rounds after both have trained: each round runs
   each run :data:`INFER_PASSES` passes in a row, in turn, so the ratio shares the
   machine's state and each pass is one in steady state), each run's page faults
   a pass, and test accuracy.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
import warnings
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["NodeDemoConfig", "NodeDemoResult", "NodeRun", "run_node_demo", "sbm_graph",
           "pyg_sampler_available", "inference_model", "inference_options", "infer_layout",
           "INFER_OPTIONS", "INFER_LAYOUT", "DemoGraph", "make_graph", "make_model",
           "eager_batches", "middle", "minor_faults"]


def sbm_graph(n: int, classes: int = 10, out_degree: float = 10.0, p_in: float = 0.8,
              signal: float = 0.35, dim: int = 32, seed: int = 0) -> Any:
    """A stochastic block model ``Data`` with class-correlated features.

    ``n`` nodes with labels ``y`` uniform over ``classes`` blocks; each node draws
    Poisson(``out_degree``) edges, a share ``p_in`` inside its block (the others to a
    uniformly random block), then the graph is made undirected (average degree about
    ``2 * out_degree``); ``x`` [n, dim] = the class mean (scale ``signal``) + unit noise.
    """
    from torch_geometric.data import Data
    from torch_geometric.utils import to_undirected

    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    order = torch.argsort(y)
    counts = torch.bincount(y, minlength=classes)
    start = torch.cumsum(counts, 0) - counts
    deg = torch.poisson(torch.full((n,), float(out_degree)), generator=g).long()
    src = torch.repeat_interleave(torch.arange(n), deg)
    same = torch.rand(src.numel(), generator=g) < p_in
    cls = torch.where(same, y[src], torch.randint(0, classes, (src.numel(),), generator=g))
    cls = torch.where(counts[cls] > 0, cls, y[src])  # a class no node drew: stay in one's own
    pick = (torch.rand(src.numel(), generator=g) * counts[cls]).long()
    dst = order[start[cls] + pick]
    ei = to_undirected(torch.stack([src, dst]), num_nodes=n)
    mu = torch.randn(classes, dim, generator=g) * signal
    x = mu[y] + torch.randn(n, dim, generator=g)
    return Data(x=x, edge_index=ei, y=y)


def pyg_sampler_available() -> bool:
    """Whether PyG's ``NeighborLoader`` can sample here (it needs pyg-lib or torch-sparse)."""
    for m in ("pyg_lib", "torch_sparse"):
        try:
            __import__(m)  # import, not find_spec: torch_sparse fails without scipy
            return True
        except Exception:  # noqa: BLE001 (a broken install counts as absent)
            continue
    return False


@dataclasses.dataclass
class NodeDemoConfig:
    """Settings of :func:`run_node_demo` (small defaults: about a minute on 2 cores)."""

    nodes: int = 6000
    classes: int = 8
    out_degree: float = 5.0
    dim: int = 32
    signal: float = 0.2  # class means this far apart: accuracy well below 100%
    num_neighbors: Tuple[int, ...] = (10, 5)
    batch_size: int = 256
    hidden: int = 64
    layers: int = 2
    lr: float = 1e-2
    epochs: int = 2
    seed: int = 0
    backend: str = "auto"
    eager_baseline: bool = True
    infer_rounds: int = 15  # a pass takes 5-30 ms: 15 rounds cost well under a second
    #: seeds a batch at inference, both sides (``None``: ``batch_size``, the training
    #: budget's shape); another size fits the test loader a budget of its own
    infer_batch_size: Optional[int] = None
    threads: Optional[int] = None
    progress: bool = True


@dataclasses.dataclass
class NodeRun:
    """One run's figures (rates in seeds per second)."""

    name: str
    train_seeds_per_s: float = 0.0
    infer_seeds_per_s: float = 0.0
    #: minor page faults of an inference pass (median; ``None``: not counted here). glibc
    #: hands freed buffers of 1-2 MB back to the OS in some processes and not in others:
    #: a run whose pass faults thousands of times runs about 2x slower
    infer_page_faults: Optional[float] = None
    test_accuracy: float = 0.0
    first_step_s: float = 0.0
    final_loss: float = float("nan")
    compiles: Optional[int] = None


@dataclasses.dataclass
class NodeDemoResult:
    """What :func:`run_node_demo` measured; :meth:`report` formats it."""

    config: NodeDemoConfig
    backend: str
    num_nodes: int
    num_edges: int
    num_train: int
    num_test: int
    budget: Dict[str, int]
    node_efficiency: float
    edge_efficiency: float
    trimmed_batches: int
    batches: int
    eager_source: str
    runs: List[NodeRun]
    threads: int
    seconds: float
    load_average: Tuple[float, float] = (float("nan"), float("nan"))  # 1-min, start / end
    #: the inductor options of the inference graphs ({}: the training model's own)
    infer_options: Dict[str, Any] = dataclasses.field(default_factory=dict)
    #: inference through a wrapper without the loss (:func:`inference_model`)
    infer_without_loss: bool = False
    #: the test loader's layout (:data:`INFER_LAYOUT`; None: PyG's scatter path)
    infer_layout: Optional[str] = None

    def as_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def report(self) -> str:
        c, b = self.config, self.budget
        lines = [
            f"graph_adapter demo --task node: GraphSAGE, {c.layers} layers x {c.hidden}",
            f"data: stochastic block model generated here: {self.num_nodes} nodes, "
            f"{self.num_edges} directed edges, {c.classes} classes, {c.dim} features",
            f"split: {self.num_train} train / {self.num_test} test seeds (seed {c.seed}); "
            f"{c.epochs} epochs, Adam lr {c.lr:g}, cross-entropy on the seed rows",
            f"sampling: num_neighbors={list(c.num_neighbors)}, batch_size={c.batch_size}; "
            f"budget fitted from the sampler: nodes={b['nodes']}, edges={b['edges']}, "
            f"graphs={b['graphs']} (every batch has these shapes)" + (
                f"; inference batches of {c.infer_batch_size} seeds, a budget of their own"
                if c.infer_batch_size and c.infer_batch_size != c.batch_size else ""),
            f"eager PyG batches: {self.eager_source}",
            f"graph_adapter backend: {self.backend}" + (
                "; inference wrapped without the loss" if self.infer_without_loss else "") + (
                ", on test batches with each row's in-edge sources (layout='sources': its "
                "mean aggregations gather rows)" if self.infer_layout == "sources" else "") + (
                f", compiled with {self.infer_options} (generated kernels on one thread, "
                f"torch's own ops on {self.threads})" if self.infer_options else ""),
            f"torch {torch.__version__}, {self.threads} thread(s), {os.cpu_count() or '?'} CPUs, "
            f"{self.seconds:.0f} s in all; load average {self.load_average[0]:.1f} at the "
            f"start, {self.load_average[1]:.1f} at the end",
            "",
        ]
        base = next((r for r in self.runs if r.name == "eager PyG"), None)

        def ratio(v: float, ref: Optional[float]) -> str:
            return f" ({v / ref:.2f}x)" if ref else ""

        rows = [("",) + tuple(r.name for r in self.runs)]
        pct = "{:.1%}".format
        rows.append(("padding fill nodes/edges",) + tuple(
            f"{pct(self.node_efficiency)}/{pct(self.edge_efficiency)}" if r.name != "eager PyG"
            else "no padding" for r in self.runs))
        rows.append(("subgraphs trimmed (counted)",) + tuple(
            f"{self.trimmed_batches} of {self.batches}" if r.name != "eager PyG" else "-"
            for r in self.runs))
        rows.append(("training seeds/s [1]",) + tuple(
            f"{r.train_seeds_per_s:,.0f}" + ratio(r.train_seeds_per_s,
                                                  base and base.train_seeds_per_s)
            for r in self.runs))
        rows.append(("inference seeds/s [2]",) + tuple(
            f"{r.infer_seeds_per_s:,.0f}" + ratio(r.infer_seeds_per_s,
                                                  base and base.infer_seeds_per_s)
            for r in self.runs))
        if any(r.infer_page_faults is not None for r in self.runs):
            rows.append(("page faults an inference pass [3]",) + tuple(
                "-" if r.infer_page_faults is None else f"{r.infer_page_faults:,.0f}"
                for r in self.runs))
        rows.append(("test accuracy",) + tuple(f"{r.test_accuracy:.3f}" for r in self.runs))
        rows.append(("final training loss",) + tuple(f"{r.final_loss:.4f}" for r in self.runs))
        rows.append(("first step (compile) s",) + tuple(f"{r.first_step_s:.1f}" for r in self.runs))
        rows.append(("compiles",) + tuple("-" if r.compiles is None else str(r.compiles)
                                          for r in self.runs))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        lines += [
            "",
            "[1] each run's own epochs, one run after the other, the first step left out;",
            "    ratios to eager PyG in brackets (one run on this machine: noisy on a loaded box)",
            f"[2] the test seeds ({c.infer_batch_size or c.batch_size} a batch, both runs), the "
            f"median of {c.infer_rounds} interleaved rounds (each round runs",
            f"    each run {INFER_PASSES} passes in a row, in turn, and takes their median), "
            "after a warm-up pass (the compile)",
        ]
        if any(r.infer_page_faults is not None for r in self.runs):
            lines += [
                "[3] minor page faults of this process during a pass (median): where glibc hands "
                "freed buffers",
                "    back to the OS a run faults thousands of times a pass and runs about 2x "
                "slower; this",
                "    varies from process to process (the adapter's fixed-size buffers are "
                "reused)",
            ]
        return "\n".join(lines)


def _log(msg: str, enabled: bool) -> None:
    if enabled:
        print(msg, flush=True)


def _split(n: int, seed: int) -> Tuple[Tensor, Tensor]:
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed + 1))
    return perm[: n // 2], perm[n // 2: n // 2 + n // 4]


def eager_batches(data: Any, seeds: Tensor, cfg: NodeDemoConfig, shuffle: bool, epoch: int,
                   use_pyg: bool, batch_size: Optional[int] = None,
                   ) -> Iterable[Tuple[Tensor, Tensor, Tensor, int]]:
    """``(x, edge_index, y, seeds in batch)`` of eager PyG: PyG's NeighborLoader, or our
    sampler's unpadded subgraphs (the same seeds, fanouts and batch size: ``batch_size``,
    else ``cfg.batch_size``)."""
    bs = batch_size or cfg.batch_size
    if use_pyg:
        from torch_geometric.loader import NeighborLoader

        torch.manual_seed(cfg.seed * 1000 + epoch)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "NeighborSampler without pyg-lib is deprecated"
            for bt in NeighborLoader(data, num_neighbors=list(cfg.num_neighbors),
                                     batch_size=bs, input_nodes=seeds,
                                     shuffle=shuffle):
                yield bt.x, bt.edge_index, bt.y, int(bt.batch_size)
        return
    from graph_adapter.sampling import FixedSizeNeighborLoader

    from graph_adapter.batching import Budget

    big = Budget(nodes=10 ** 9, edges=10 ** 9 + 1, graphs=2)  # never padded here: no cut
    L = FixedSizeNeighborLoader(data, list(cfg.num_neighbors), bs,
                                input_nodes=seeds, shuffle=shuffle, seed=cfg.seed + 7,
                                budget=big)
    for chunk in range(len(L)):
        s_ids = L.chunk_seeds(epoch, chunk)
        if s_ids.numel() == 0:
            continue
        s = L.sample(s_ids, epoch, chunk)
        yield data.x[s.n_id], s.edge_index, data.y[s.n_id], int(s_ids.numel())


def make_model(cfg: NodeDemoConfig) -> nn.Module:
    """PyG's ``GraphSAGE`` of ``cfg`` (dims, layers, classes), seeded by ``cfg.seed``."""
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(cfg.seed)
    return GraphSAGE(cfg.dim, cfg.hidden, num_layers=cfg.layers, out_channels=cfg.classes)


def _timed_epochs(steps: Callable[[int], Iterable[int]], epochs: int) -> Tuple[float, float]:
    """``(seeds/s after the first step, first step's seconds)`` over ``epochs`` epochs of
    ``steps(epoch)`` (a generator yielding each step's seed count after running it)."""
    first = None
    seeds = 0
    t = time.perf_counter()
    for epoch in range(epochs):
        for n in steps(epoch):
            now = time.perf_counter()
            if first is None:
                first, t = now - t, now
                continue
            seeds += n
    total = time.perf_counter() - t
    return (seeds / total if total > 0 and seeds else 0.0), float(first or 0.0)


#: one run's inference over the test seeds: () -> (right, total, seconds)
Infer = Callable[[], Tuple[int, int, float]]


@dataclasses.dataclass
class DemoGraph:
    """The generated graph, its seeded train / test seeds and the adapter's loaders over
    them (the test loader shares the training one's budget: one compiled shape)."""

    data: Any
    train: Tensor
    test: Tensor
    loader: Any
    test_loader: Any


def make_graph(cfg: NodeDemoConfig, layout: Optional[str] = "demo") -> DemoGraph:
    """The stochastic-block-model graph of ``cfg`` and FixedSizeNeighborLoaders over it."""
    from graph_adapter.sampling import FixedSizeNeighborLoader

    data = sbm_graph(cfg.nodes, cfg.classes, cfg.out_degree, signal=cfg.signal, dim=cfg.dim,
                     seed=cfg.seed)
    train, test = _split(cfg.nodes, cfg.seed)
    fan = list(cfg.num_neighbors)
    loader = FixedSizeNeighborLoader(data, fan, cfg.batch_size, input_nodes=train,
                                     shuffle=True, seed=cfg.seed)
    bs = cfg.infer_batch_size or cfg.batch_size
    test_loader = FixedSizeNeighborLoader(data, fan, bs, input_nodes=test, seed=cfg.seed,
                                          budget=loader.budget if bs == cfg.batch_size else None,
                                          layout=INFER_LAYOUT if layout == "demo" else layout)
    return DemoGraph(data, train, test, loader, test_loader)


def _adapter_run(cfg: NodeDemoConfig, g: DemoGraph, plain: nn.Module, backend: str,
                 fill: Dict[str, float]) -> Tuple[NodeRun, Infer, Any]:
    """Train a copy of ``plain`` through ipu_wrap + compile on ``g.loader``'s padded
    batches; returns its figures, its inference and its compiled models ``(training,
    inference)`` (:func:`inference_model`). ``fill`` gets the loader's padding figures."""
    import graph_adapter as ga
    from graph_adapter.nn import masked_cross_entropy

    loader = g.loader
    mine = make_model(cfg)
    mine.load_state_dict(plain.state_dict())
    wrapped = ga.ipu_wrap(mine, loss_fn=lambda out, b: masked_cross_entropy(
        out, b["y"], b["seed_mask"]))
    opt = torch.optim.Adam(wrapped.parameters(), lr=cfg.lr)
    # inference batches of their own budget: one more shape (its eval compile is the one
    # the inference needs anyway)
    own = bool(cfg.infer_batch_size) and cfg.infer_batch_size != cfg.batch_size
    # in the foreground: the node demo times its first step as the compile
    compiled = ga.compile(wrapped, backend, optimizer=opt, **(
        {"allow_new_shapes": True} if own else {}), background=False)
    run = NodeRun(name="graph_adapter")
    _log(f"graph_adapter [{backend}]: training {cfg.epochs} epochs of {len(loader)} batches "
         f"(the first step compiles) ...", cfg.progress)

    def ours_steps(epoch: int) -> Iterable[int]:
        loader.set_epoch(epoch)
        compiled.train()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # trims: counted in loader.stats, reported
            for flat in loader:
                loss = compiled(flat)["loss"]
                if not compiled.steps_optimizer:
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                run.final_loss = float(loss.detach().float().mean())
                yield int(flat["seed_mask"].sum())
        fill.update(nodes=loader.stats.node_efficiency, edges=loader.stats.edge_efficiency,
                    trimmed=loader.stats.trimmed_batches, batches=loader.stats.batches)

    run.train_seeds_per_s, run.first_step_s = _timed_epochs(ours_steps, cfg.epochs)
    # (batch, its seed count) sampled beforehand, as eager PyG's batches are: the seed rows
    # are the first rows, so both runs count accuracy on their first rows alike
    test_batches = [(flat, g.test_loader.seeds_in(flat)) for flat in g.test_loader]
    infer = inference_model(wrapped, backend, compiled, g.test_loader.layout)

    def ours_infer() -> Tuple[int, int, float]:
        infer.eval()
        right = total = 0
        t = time.perf_counter()
        with torch.no_grad():
            for flat, b in test_batches:
                out = infer(flat)["output"]
                right += int((out[:b].argmax(-1) == flat["y"][:b]).sum())
                total += b
        return right, total, time.perf_counter() - t

    return run, ours_infer, (compiled, infer)


#: The test loader's aggregation tables (``FixedSizeNeighborLoader(layout=...)``; ``None``:
#: PyG's scatter path). ``"sources"``: each in-edge prefix row's sources, so the mean
#: aggregations of GraphSAGE gather node rows, in parallel over nodes and without
#: atomics, and the last layer projects before its gather (an inference graph without a
#: scatter). Measured side by side (``benchmarks/bench_node_ceiling.py``, 2 threads,
#: quiet): 520-590 us a batch against 680-730 on PyG's scatter path. The inference model
#: is a compile of its own, so only the test batches carry the table; the IPU backends,
#: whose one compiled model also serves inference, get none.
INFER_LAYOUT: Optional[str] = "sources"

#: The inductor settings of the inference compile on the CPU, by the test loader's
#: layout. On PyG's scatter path (``None``, ``"hyb"``) the generated kernels run on one
#: thread (torch's own, the matmuls, keep torch's thread count): on more, inductor hands
#: the scatter-add of PyG's mean to ATen's sorted scatter (no atomic adds) and runs every
#: loop as an OpenMP region; on one it fuses the gather, the scatter-add and the divide
#: into one loop. With ``"sources"`` the graph has no scatter: inductor's defaults.
INFER_OPTIONS: Dict[Optional[str], Dict[str, Any]] = {
    None: {"cpp.threads": 1}, "hyb": {"cpp.threads": 1}, "sources": {}}


def inference_model(wrapped: nn.Module, backend: str, compiled: Any,
                    layout: Optional[str] = "demo") -> Any:
    """The compiled model of the demo's inference.

    For the in-process backends: a second :func:`graph_adapter.compile` of the same
    PyG module wrapped again without the loss (inference reads ``"output"`` only, as
    eager PyG computes no loss; the outputs are the same, and so are the parameters
    and the mode, which live on the module), with the :data:`INFER_OPTIONS` of the
    test batches' ``layout`` (``"demo"``: :data:`INFER_LAYOUT`) for inductor
    (``"inductor"``, ``"inductor_eval"``) on the CPU; its one compile is the eval
    graph that ``compiled`` would have compiled. For the IPU backends: ``compiled``.
    """
    import graph_adapter as ga
    from graph_adapter.ipu import IPU_BACKENDS

    if backend in IPU_BACKENDS:
        return compiled
    return ga.compile(ga.ipu_wrap(wrapped.model), backend,
                      options=inference_options(wrapped, backend, layout) or None,
                      background=False)


def inference_options(wrapped: nn.Module, backend: str,
                      layout: Optional[str] = "demo") -> Dict[str, Any]:
    """:data:`INFER_OPTIONS` of ``layout`` (``"demo"``: :data:`INFER_LAYOUT`) for inductor
    (``"inductor"``, ``"inductor_eval"``) with the model on the CPU, else ``{}`` (what
    :func:`inference_model` compiles with)."""
    on_cpu = all(p.device.type == "cpu" for p in wrapped.parameters())
    if backend not in ("inductor", "inductor_eval") or not on_cpu:
        return {}
    return dict(INFER_OPTIONS[INFER_LAYOUT if layout == "demo" else layout])


def infer_layout(backend: str) -> Optional[str]:
    """The test loader's layout for ``backend``: :data:`INFER_LAYOUT`, none for the IPU
    backends (their training model serves inference: one set of keys)."""
    from graph_adapter.ipu import IPU_BACKENDS

    return None if backend in IPU_BACKENDS else INFER_LAYOUT


def _eager_source(use_pyg: bool) -> str:
    """Where eager PyG's batches come from, in words (the report's line)."""
    return ("PyG's NeighborLoader (same fanouts, batch size, seeds)" if use_pyg else
            "our sampler's unpadded subgraphs: PyG's NeighborLoader needs pyg-lib or "
            "torch-sparse, neither is installed")


def _eager_run(cfg: NodeDemoConfig, g: DemoGraph, plain: nn.Module,
               use_pyg: bool) -> Tuple[NodeRun, Infer]:
    """Train ``plain`` in eager PyG on unpadded sampled subgraphs; returns its figures and
    its inference."""
    base = NodeRun(name="eager PyG")
    popt = torch.optim.Adam(plain.parameters(), lr=cfg.lr)
    _log(f"eager PyG: training {cfg.epochs} epochs ...", cfg.progress)

    def pyg_steps(epoch: int) -> Iterable[int]:
        plain.train()
        for x, ei, y, b in eager_batches(g.data, g.train, cfg, True, epoch, use_pyg):
            popt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(plain(x, ei)[:b], y[:b])
            loss.backward()
            popt.step()
            base.final_loss = float(loss.detach())
            yield b

    base.train_seeds_per_s, base.first_step_s = _timed_epochs(pyg_steps, cfg.epochs)
    eager_test = list(eager_batches(g.data, g.test, cfg, False, 0, use_pyg,
                                     cfg.infer_batch_size))

    def pyg_infer() -> Tuple[int, int, float]:
        plain.eval()
        right = total = 0
        t = time.perf_counter()
        with torch.no_grad():
            for x, ei, y, b in eager_test:
                right += int((plain(x, ei)[:b].argmax(-1) == y[:b]).sum())
                total += b
        return right, total, time.perf_counter() - t

    return base, pyg_infer


#: passes of one run in a row within a round of :func:`_time_inference`: a round's time is
#: their median, a pass in steady state. One pass right after the other run's (or after
#: any pause) is slower: on a quiet 2-core VM the adapter's pass took 15-55% longer
#: right after eager PyG's, and ~30% longer after a 10 ms sleep, than back to back.
INFER_PASSES = 3


def _time_inference(runs: List[Tuple[NodeRun, Infer]], rounds: int, num_test: int,
                    progress: bool, passes: int = INFER_PASSES) -> None:
    """A warm-up pass of every run's inference (the inference compile; its accuracy), then
    ``rounds`` interleaved rounds, each running every run ``passes`` times in a row (its
    round time: their median); each run's rate is its median round's."""
    _log("inference over the test seeds (a warm-up pass, then interleaved rounds) ...",
         progress)
    times: Dict[str, List[float]] = {r.name: [] for r, _ in runs}
    for r, infer in runs:
        right, total, _ = infer()  # warm-up: the inference compile
        r.test_accuracy = right / max(total, 1)
    faults: Dict[str, List[float]] = {r.name: [] for r, _ in runs}
    for _ in range(max(1, rounds)):
        for r, infer in runs:
            f0 = minor_faults()
            times[r.name].append(middle([infer()[2] for _ in range(max(1, passes))]))
            if f0 is not None:
                faults[r.name].append((minor_faults() - f0) / max(1, passes))
    for r, _ in runs:
        med = middle(times[r.name])
        r.infer_seeds_per_s = num_test / med if med > 0 else 0.0
        if faults[r.name]:
            r.infer_page_faults = middle(faults[r.name])


def middle(xs: List[float]) -> float:
    """The median of ``xs``, the upper of the two middle values for an even count."""
    return sorted(xs)[len(xs) // 2]


def minor_faults() -> Optional[int]:
    """This process's minor page faults so far (``None`` where the OS does not count them)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _load_average(default: float) -> float:
    """The 1-minute load average (``default`` where the OS has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else default


def run_node_demo(cfg: Optional[NodeDemoConfig] = None, **overrides: Any) -> NodeDemoResult:
    """Run the node-level demo (module doc) and return its figures."""
    from graph_adapter.backends import resolve_backend

    cfg = dataclasses.replace(cfg or NodeDemoConfig(), **overrides)
    t0 = time.perf_counter()
    load0 = _load_average(float("nan"))
    threads_before = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        backend = resolve_backend(cfg.backend)[0]
        g = make_graph(cfg, infer_layout(backend))
        plain = make_model(cfg)
        fill: Dict[str, float] = {}
        run, infer, compiled = _adapter_run(cfg, g, plain, backend, fill)
        runs: List[Tuple[NodeRun, Infer]] = [(run, infer)]
        use_pyg = pyg_sampler_available()
        if cfg.eager_baseline:
            runs.append(_eager_run(cfg, g, plain, use_pyg))
        _time_inference(runs, cfg.infer_rounds, len(g.test), cfg.progress)
        if backend != "eager":
            trained, infer_model = compiled
            run.compiles = int(getattr(trained, "compile_count", 0)) + (
                0 if infer_model is trained else int(getattr(infer_model, "compile_count", 0)))
        return NodeDemoResult(
            config=cfg, backend=backend, num_nodes=int(g.data.num_nodes),
            num_edges=int(g.data.num_edges), num_train=int(g.train.numel()),
            num_test=int(g.test.numel()), budget=g.loader.budget.to_dict(),
            node_efficiency=fill.get("nodes", 0.0), edge_efficiency=fill.get("edges", 0.0),
            trimmed_batches=int(fill.get("trimmed", 0)), batches=int(fill.get("batches", 0)),
            eager_source=_eager_source(use_pyg), runs=[r for r, _ in runs],
            infer_options=(inference_options(compiled[1].wrapped, backend,
                                             g.test_loader.layout)
                           if compiled[1] is not compiled[0] else {}),
            infer_without_loss=compiled[1] is not compiled[0],
            infer_layout=g.test_loader.layout,
            threads=torch.get_num_threads(), seconds=time.perf_counter() - t0,
            load_average=(load0, _load_average(load0)))
    finally:
        torch.set_num_threads(threads_before)


def node_config_from_args(args: Any) -> NodeDemoConfig:
    """The :class:`NodeDemoConfig` of ``graph-adapter demo --task node``'s flags.

    ``--seed``, ``--backend``, ``--threads``, ``--quiet``, ``--no-eager`` and
    ``--nodes`` apply as given; ``--epochs``, ``--hidden``, ``--layers``, ``--lr`` and
    ``--infer-rounds`` share the molecule demo's flags, whose defaults are that demo's:
    they apply where they differ from those defaults, else the node demo's own defaults
    hold.
    """
    from .config import DemoConfig

    mol, node = DemoConfig(), NodeDemoConfig()
    kw: Dict[str, Any] = dict(seed=args.seed, backend=args.backend, threads=args.threads,
                              progress=not args.quiet, eager_baseline=not args.no_eager)
    if getattr(args, "nodes", None):
        kw["nodes"] = int(args.nodes)
    for name in ("epochs", "hidden", "layers", "lr", "infer_rounds"):
        given = getattr(args, name)
        kw[name] = given if given != getattr(mol, name) else getattr(node, name)
    return dataclasses.replace(node, **kw)


def run_node_cli(args: Any) -> int:
    """``graph-adapter demo --task node``: run, print the report (``--json``: also the
    figures); returns the exit code."""
    import json

    from ..usage import EXIT_USAGE

    cfg = node_config_from_args(args)
    if cfg.nodes < 2 * cfg.batch_size or cfg.epochs < 1:
        print(f"graph-adapter demo: --task node needs --nodes >= {2 * cfg.batch_size} (a "
              f"batch of training seeds) and --epochs >= 1", file=sys.stderr, flush=True)
        return EXIT_USAGE
    try:
        result = run_node_demo(cfg)
    except ImportError as e:  # a backend's module missing: the message says what to install
        print(f"graph-adapter demo: {e}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    print(result.report())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result.as_dict(), f, indent=2, default=str)
    return 0
