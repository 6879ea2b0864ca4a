"""How fast the node demo's inference could be: the adapter against hand-written kernels.

``bench_node_inference.py`` times the adapter's inference pass as the demo runs it.
This script asks what a better aggregation would buy: on the same padded test
batches and weights it times, side by side in one process (interleaved rounds,
``--passes`` passes of a row back to back, the round's time their median, as the
demo times them):

* ``eager PyG``: the plain GraphSAGE on the unpadded subgraphs;
* ``adapter``: the demo's inference model (``inference_model``: no loss) on the demo's
  test batches, which carry each in-edge prefix row's sources
  (``FixedSizeNeighborLoader(layout="sources")``): the gather below, routed inside the
  unmodified model, the last layer projected before its gather;
* ``adapter, scatter``: the same batches without the table, PyG's scatter path,
  compiled with that path's ``INFER_OPTIONS`` (generated loops on one thread);
* ``adapter, HYB tables``: the same model on batches with HYB tables (edge ids over
  all rows) as wide as the largest fanout, compiled at ``cpp.threads=2``;
* ``by hand, scatter``: the scatter path's math written out (mean by ``index_add``,
  layer 2 projected before its aggregation, one product for its two linears),
  compiled as the scatter path is: what it would cost without the wrapper, the guards
  and PyG's layer code;
* ``by hand, ELL``: the same math with the mean as a gather over a table of
  in-edge sources (``[P, fanout]``, ``P`` = seeds x (1 + first fanout): in a
  sampled batch every in-edge targets one of the first ``P`` rows), summed slot
  by slot, compiled at ``cpp.threads=2``: parallel over nodes, no atomics;
* ``by hand, ELL of edge ids``: the table holds edge ids, read through
  ``edge_index[0]`` (the library's tables hold edge ids), over the same ``P`` rows;
* ``by hand, ELL of edge ids, all rows``: the same table over all ``N`` rows (the
  library's tables' shape).

The tables are built on the host before the timing (as the loader would), and
every row's outputs are checked against the plain model on each batch's real rows.
Each row prints microseconds a batch (median round), the ratio to eager PyG and
the median minor page faults of a pass (an eager pass that faults thousands of
times runs ~2x slower: compare rows of processes without faults).

    python benchmarks/bench_node_ceiling.py [--threads 2] [--rounds 15] [--passes 3]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from typing import Callable, Dict, List, Tuple

import torch
from torch import Tensor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def _in_edges(flat: Dict[str, Tensor], rows: int) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(edge ids, their targets, slot of each in its target's list, degree)`` of the
    real edges of ``flat``, ordered by target (stable: PyG's order within a node);
    ``degree``: ``[rows]``."""
    ei, em = flat["edge_index"], flat["edge_mask"]
    ids = torch.nonzero(em).flatten()
    dst = ei[1][ids]
    if int(dst.max()) >= rows:
        raise ValueError(f"an in-edge targets row {int(dst.max())}, past the {rows}-row prefix")
    order = torch.argsort(dst, stable=True)
    ids, dst = ids[order], dst[order]
    deg = torch.bincount(dst, minlength=rows)
    slot = torch.arange(ids.numel()) - (torch.cumsum(deg, 0) - deg)[dst]
    return ids, dst, slot, deg


def ell_tables(flat: Dict[str, Tensor], rows: int, width: int, edge_ids: bool
               ) -> Tuple[Tensor, Tensor]:
    """``(table [rows, width], 1 / max(degree, 1) [rows, 1])``: each row's in-edge
    sources (``edge_ids=False``; padding: ``N``, a zero row) or edge ids (padding:
    ``E``)."""
    N, E = flat["x"].shape[0], flat["edge_index"].shape[1]
    ids, dst, slot, deg = _in_edges(flat, rows)
    table = torch.full((rows, width), E if edge_ids else N, dtype=torch.long)
    table[dst, slot] = ids if edge_ids else flat["edge_index"][0][ids]
    return table, 1.0 / deg.clamp(min=1).to(flat["x"].dtype).unsqueeze(1)


def _slot_sum(v: Tensor, table: Tensor) -> Tensor:
    """``sum_k v[table[:, k]]`` with the id ``len(v)`` a zero row (slot by slot: inductor
    fuses the adds into one loop over rows, vectorised over channels)."""
    n = v.size(0)
    out = None
    for k in range(table.size(1)):
        ids = table[:, k]
        got = torch.where((ids < n).unsqueeze(1), v[ids.clamp(max=n - 1)], 0.0)
        out = got if out is None else out + got
    return out


def _pad_rows(a: Tensor, n: int) -> Tensor:
    return a if a.size(0) == n else torch.cat([a, a.new_zeros(n - a.size(0), a.size(1))])


def scatter_sage(x, ei, l1, b1, r1, l2, b2, r2):
    """Two SAGEConv (mean) layers as the adapter computes them, scatter path."""
    n, c = x.shape[0], l2.shape[0]
    src, dst = ei[0], ei[1]
    deg = torch.zeros(n, 1).index_add_(0, dst, torch.ones(src.numel(), 1)).clamp(min=1)
    h = torch.relu(torch.zeros(n, x.shape[1]).index_add_(0, dst, x[src]) / deg @ l1.t()
                   + b1 + x @ r1.t())
    p = h @ torch.cat([l2, r2]).t()  # layer 2 projects first: one product, 2c wide
    return torch.zeros(n, c).index_add_(0, dst, p[:, :c][src]) / deg + b2 + p[:, c:]


def ell_sage(x, table, inv_deg, l1, b1, r1, l2, b2, r2):
    """The same with each mean a gather over a table of sources (rows past it: zero)."""
    n, c = x.shape[0], l2.shape[0]
    h = torch.relu(_pad_rows(_slot_sum(x, table) * inv_deg, n) @ l1.t() + b1 + x @ r1.t())
    p = h @ torch.cat([l2, r2]).t()
    return _pad_rows(_slot_sum(p[:, :c], table) * inv_deg, n) + b2 + p[:, c:]


def ell_edge_sage(x, src, table, inv_deg, l1, b1, r1, l2, b2, r2):
    """The same with a table of edge ids, read through ``src`` (``edge_index[0]``)."""
    n, c = x.shape[0], l2.shape[0]
    e = src.numel()
    # an edge id past the edges reads source n: a zero row of _slot_sum
    through = torch.where(table < e, src[table.clamp(max=e - 1)], n)
    h = torch.relu(_pad_rows(_slot_sum(x, through) * inv_deg, n) @ l1.t() + b1 + x @ r1.t())
    p = h @ torch.cat([l2, r2]).t()
    return _pad_rows(_slot_sum(p[:, :c], through) * inv_deg, n) + b2 + p[:, c:]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--passes", type=int, default=3)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    import graph_adapter as ga
    from graph_adapter.app.demo.node import (INFER_OPTIONS, NodeDemoConfig, eager_batches,
                                             make_graph, make_model, middle, minor_faults,
                                             inference_model, pyg_sampler_available)
    from graph_adapter.backends.select import drop_layout_tables
    from graph_adapter.sampling import FixedSizeNeighborLoader

    warnings.simplefilter("ignore")  # trims and PyG's sampler notes: not what is timed
    cfg = NodeDemoConfig(progress=False)
    load0 = os.getloadavg()[0]
    g = make_graph(cfg)
    plain = make_model(cfg).eval()
    c1, c2 = plain.convs
    W = {k: t.detach() for k, t in dict(
        l1=c1.lin_l.weight, b1=c1.lin_l.bias, r1=c1.lin_r.weight,
        l2=c2.lin_l.weight, b2=c2.lin_l.bias, r2=c2.lin_r.weight).items()}
    batches = list(g.test_loader)
    N = batches[0]["x"].shape[0]
    P = cfg.batch_size * (1 + cfg.num_neighbors[0])
    width = max(cfg.num_neighbors)
    src_tab = [ell_tables(f, P, width, edge_ids=False) for f in batches]
    eid_tab = [ell_tables(f, P, width, edge_ids=True) for f in batches]
    eid_all = [ell_tables(f, N, width, edge_ids=True) for f in batches]
    eager = list(eager_batches(g.data, g.test, cfg, False, 0, pyg_sampler_available()))
    tl = FixedSizeNeighborLoader(g.data, list(cfg.num_neighbors), cfg.batch_size,
                                 input_nodes=g.test, seed=cfg.seed, budget=g.loader.budget,
                                 layout="hyb", layout_widths=(width, width))
    tabled = list(tl)
    bare = [drop_layout_tables(f) for f in batches]

    wrapped = ga.ipu_wrap(make_model(cfg).eval())
    wrapped.model.load_state_dict(plain.state_dict())
    adapter = inference_model(wrapped, "inductor", None, g.test_loader.layout)
    adapter_scatter = inference_model(wrapped, "inductor", None, None)
    adapter_tables = ga.compile(ga.ipu_wrap(wrapped.model), "inductor",
                                options={"cpp.threads": 2}, background=False)
    one = dict(fullgraph=True, dynamic=False)
    hand_scatter = torch.compile(scatter_sage, options=dict(INFER_OPTIONS[None]), **one)
    hand_ell = torch.compile(ell_sage, **one)
    hand_edge = torch.compile(ell_edge_sage, **one)
    hand_edge_all = torch.compile(ell_edge_sage, **one)

    calls: Dict[str, List[Callable[[], Tensor]]] = {
        "eager PyG": [lambda x=x, ei=ei: plain(x, ei) for x, ei, _, _ in eager],
        "adapter": [lambda f=f: adapter(f)["output"] for f in batches],
        "adapter, scatter": [lambda f=f: adapter_scatter(f)["output"] for f in bare],
        "adapter, HYB tables": [lambda f=f: adapter_tables(f)["output"] for f in tabled],
        "by hand, scatter": [lambda f=f: hand_scatter(f["x"], f["edge_index"], **W)
                             for f in batches],
        "by hand, ELL": [lambda f=f, t=t: hand_ell(f["x"], *t, **W)
                         for f, t in zip(batches, src_tab)],
        "by hand, ELL of edge ids": [
            lambda f=f, t=t: hand_edge(f["x"], f["edge_index"][0], *t, **W)
            for f, t in zip(batches, eid_tab)],
        "by hand, ELL of edge ids, all rows": [
            lambda f=f, t=t: hand_edge_all(f["x"], f["edge_index"][0], *t, **W)
            for f, t in zip(batches, eid_all)],
    }
    worst: Dict[str, float] = {}
    with torch.no_grad():
        for name, fns in calls.items():  # the compiles, and the outputs checked
            if name == "eager PyG":
                continue
            worst[name] = 0.0
            own = {"adapter, HYB tables": tabled, "adapter, scatter": bare}
            for f, fn in zip(own.get(name, batches), fns):
                nm, em = f["node_mask"], f["edge_mask"]
                ref = plain(f["x"][nm], f["edge_index"][:, em])
                worst[name] = max(worst[name], float((fn()[nm] - ref).abs().max()))

    def one_pass(fns: List[Callable[[], Tensor]]) -> float:
        t = time.perf_counter()
        with torch.no_grad():
            for fn in fns:
                fn()
        return time.perf_counter() - t

    times: Dict[str, List[float]] = {k: [] for k in calls}
    faults: Dict[str, List[float]] = {k: [] for k in calls}
    for _ in range(max(1, args.rounds)):
        for name, fns in calls.items():
            f0 = minor_faults()
            times[name].append(middle([one_pass(fns) for _ in range(max(1, args.passes))]))
            if f0 is not None:
                faults[name].append((minor_faults() - f0) / max(1, args.passes))

    print(f"node demo inference, ceilings: {len(batches)} batches of {N} rows / "
          f"{batches[0]['edge_index'].shape[1]} edge slots, in-edge prefix {P} rows, "
          f"table width {width}; {torch.get_num_threads()} thread(s), {args.rounds} rounds "
          f"x {args.passes} passes; load {load0:.1f} -> {os.getloadavg()[0]:.1f}")
    base = middle(times["eager PyG"])
    print(f"{'row':36s} {'us a batch':>10s} {'vs eager PyG':>13s} {'faults':>7s} {'max |diff|':>10s}")
    for name in calls:
        med = middle(times[name])
        fl = f"{middle(faults[name]):.0f}" if faults[name] else "-"
        diff = f"{worst[name]:.1e}" if name in worst else "-"
        print(f"{name:36s} {med * 1e6 / len(batches):10.0f} {base / med:12.2f}x {fl:>7s} "
              f"{diff:>10s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
