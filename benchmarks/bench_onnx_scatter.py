"""Formulations of the ONNX row scatter-adds, side by side in one run: speed at one
thread and sameness at 1, 2 and 4 threads.

    python benchmarks/bench_onnx_scatter.py [--limit 3000] [--hidden 64] [--layers 4]
                                            [--rounds 7] [--reps 20] [--only-exported]

The demo's model (GINE with atom/bond embeddings, BatchNorm, add pooling; random
weights, ``eval()``) on rdkit's NCI-5k molecules, one padded call of about 255 molecules
(``Budget.fit(data, 256)``). The program is exported once (``torch.onnx.export`` of the
exported program after the embedding projection, as ``export`` does) and its row
scatter-adds (``ScatterElements(axis=0, add)`` on an expanded row index) are then
written several ways:

* ``elements``: as exported (one element at a time, one thread; deterministic);
* ``scatter_nd``: one ``ScatterND(add)`` (parallel, races at 2+ threads);
* ``sorted_f64``: sorted segments inside the graph (TopK, float64 CumSum, Gather, the
  ``If`` for non-finite totals): what ``export`` wrote before;
* ``sorted_f32``: the same in float32, no ``If`` (exactness to be seen);
* ``host_sorted_f64``: the edges fed sorted by target and each target's segment ends
  fed as an input (no TopK, no Gather of the rows), float64 CumSum + ``If``;
* ``slots``: a ``[rows, S]`` table of update-row ids per target (``S``: the most rows
  a target has; the id ``E`` reads a zero row), fed as an input: ``Gather`` to
  ``[rows, S, D]`` then ``ReduceSum`` over ``S``;
* ``slots+onehot``: ``slots`` for the edge sums, the pooling into graphs as a one-hot
  ``MatMul`` (``[G, N] x [N, D]``);
* ``...+lookups``: ``sorted_f64`` / ``slots`` with the summed embedding lookups as
  lookups of combined tables (``onnx_rewrites.combine_table_lookups``, which
  ``export`` runs too).

* ``as exported``: what ``export`` writes (below); ``exported, zero Concat``: the same
  with the padding slots' zero row appended to the edge rows by a ``Concat`` a layer
  (what ``export`` wrote before the zero row was computed with the edge rows' lookups).

``export`` writes ``slots`` for the sums into target nodes (the packer builds the
tables, ``in_slots`` / ``in_spill``: ``table_row_scatters``; the bench's tables have
no spill), summed with a ``MatMul`` of ones over the transposed table rather than a
``ReduceSum`` (``slots+lookups`` beside it keeps the ``ReduceSum``), ``sorted_f64`` without the sort for the pool over ``batch`` (its nodes are in graph
order), and the combined lookups.

Eager PyG (``Batch.from_data_list`` + the model) on the same molecules is timed in the
same rounds. Figures: the median over ``--rounds`` interleaved rounds of ``--reps``
calls, wall time, with the load average printed beside them.
"""
import argparse
import copy
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout

import numpy as np  # noqa: E402
import torch  # noqa: E402

from graph_adapter.app.datasets import load_nci5k  # noqa: E402
from graph_adapter.app.models import build_model  # noqa: E402
from graph_adapter.exporter import onnx_rewrites as R  # noqa: E402
from graph_adapter.exporter.onnx_rewrites import _graph as G  # noqa: E402
from graph_adapter.exporter.onnx_rewrites import sorted_scatters as S  # noqa: E402
from graph_adapter.exporter.onnx import _onnx_program, onnx_session  # noqa: E402
from graph_adapter.exporter.trace import drop_unread, rewritten_program, trace  # noqa
from graph_adapter.batching import Budget, FixedSizeLoader  # noqa: E402
from graph_adapter.nn import ipu_wrap  # noqa: E402
from graph_adapter.serve.pack import in_tables  # noqa: E402


def _load_avg():
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def _raw_proto(wrapped, flat):
    """The ONNX model of the inference program on ``flat`` (scatters as exported) and the
    feed (ONNX input name -> numpy)."""
    wrapped.eval()
    wrapped.loss_fn = None
    module, dropped, _ = drop_unread(wrapped, flat)
    fed = {k: v for k, v in flat.items() if k not in dropped}
    ep = trace(module, fed)
    ep, _ = rewritten_program(ep, fed)
    proto = _onnx_program(ep).model_proto
    names = {i.name for i in proto.graph.input}
    feed = {n: fed[k].numpy() for n, k in zip(ep.graph_signature.user_inputs, fed) if n in names}
    return proto, feed


def _row_scatters(proto):
    """(node, row index name) of every row-wise ScatterElements add."""
    g = proto.graph
    producers = {o: n for n in g.node for o in n.output}
    out = []
    for n in g.node:
        if n.op_type == "ScatterElements" and G.node_attrs(n).get("reduction") == b"add":
            row = G.row_index(g, producers, n.input[1])
            if row is not None:
                out.append((n, row))
    return out


def _values(proto, names, feed):
    """The values of the named tensors of ``proto`` on ``feed``."""
    from onnx import helper

    m = copy.deepcopy(proto)
    for nm in names:
        m.graph.output.append(helper.make_value_info(nm, helper.TypeProto()))
    sess = onnx_session(m.SerializeToString(), 1)
    return dict(zip(names, sess.run(list(names), feed)))


def _replace(proto, build):
    """``proto`` (in place) with each row scatter replaced by ``build(node, row, k)``'s
    nodes."""
    m = proto
    rows = {n.output[0]: row for n, row in _row_scatters(m)}
    order = {r: k for k, r in enumerate(dict.fromkeys(rows.values()))}
    nodes = []
    for n in m.graph.node:
        if n.output[0] in rows:
            nodes.extend(build(n, rows[n.output[0]], order[rows[n.output[0]]]))
        else:
            nodes.append(n)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    R.drop_dead_nodes(m.graph)
    return m


def _const(m, name, value):
    from onnx import numpy_helper

    if not any(i.name == name for i in m.graph.initializer):
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
    return name


def _slots_model(proto, tables, onehot_rows=()):
    """Row scatters as Gather(Concat(updates, zero row), slots) + ReduceSum(axis=1);
    those on a row in ``onehot_rows`` (name -> G) as a one-hot MatMul."""
    from onnx import TensorProto, helper

    m = copy.deepcopy(proto)

    def build(n, row, k):
        data, upd, out = n.input[0], n.input[2], n.output[0]
        p = out + "__s"
        if row in onehot_rows:
            G = onehot_rows[row]
            ar = _const(m, f"ga_arange_{G}", np.arange(G, dtype=np.int64).reshape(G, 1))
            return [helper.make_node("Unsqueeze", [row, _const(m, "ga_ax0", np.array([0]))],
                                     [p + "r"]),
                    helper.make_node("Equal", [ar, p + "r"], [p + "eq"]),
                    helper.make_node("Cast", [p + "eq"], [p + "oh"], to=TensorProto.FLOAT),
                    helper.make_node("MatMul", [p + "oh", upd], [p + "mm"]),
                    helper.make_node("Add", [data, p + "mm"], [out])]
        slots = f"ga_slots_{k}"
        zrow = _const(m, f"ga_zero_row_{k}", np.zeros((1, tables[slots][1]), np.float32))
        return [helper.make_node("Concat", [upd, zrow], [p + "c"], axis=0),
                helper.make_node("Gather", [p + "c", slots], [p + "g"], axis=0),
                helper.make_node("ReduceSum", [p + "g", _const(m, "ga_ax1", np.array([1]))],
                                 [p + "sum"], keepdims=0),
                helper.make_node("Add", [data, p + "sum"], [out])]
    m = _replace(m, build)
    for name, (table, _) in tables.items():
        if any(name in n.input for n in m.graph.node):
            m.graph.input.append(helper.make_tensor_value_info(name, TensorProto.INT64,
                                                               list(table.shape)))
    return m


def _slot_tables(proto, feed, real):
    """name -> ([rows, S] int64 slot table, D) of each row index, from its values; only
    the real update rows are in the tables (``real``: update rows -> real rows; padding
    rows come last and touch padding targets only, whose rows nobody reads)."""
    rows = dict.fromkeys(r for _, r in _row_scatters(proto))
    shapes = {n.output[0]: (n.input[0], n.input[2]) for n, _ in _row_scatters(proto)}
    data_of = {r: shapes[o] for o, r in ((n.output[0], r) for n, r in _row_scatters(proto))}
    vals = _values(proto, list(rows) + [x for pair in data_of.values() for x in pair], feed)
    out = {}
    for k, r in enumerate(rows):
        data, upd = vals[data_of[r][0]], vals[data_of[r][1]]
        e = vals[r].reshape(-1).shape[0]
        idx = vals[r].reshape(-1)[:real[e]]
        n = data.shape[0]
        order = np.argsort(idx, kind="stable")
        counts = np.bincount(idx, minlength=n)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rank = np.arange(len(idx)) - starts[idx[order]]
        table = np.full((n, counts.max()), e, np.int64)
        table[idx[order], rank] = order
        out[f"ga_slots_{k}"] = (table, upd.shape[1])
    return out, list(rows), vals


def _f32_sorted(proto):
    """The in-graph sorted segments summed in float32, no If."""
    m = copy.deepcopy(proto)

    class F32(S._Deterministic):
        def sum_rows(self, node_name, out, data, row, updates, elem, rank):
            from onnx import helper

            emit = G.Emit(out)
            seg, _ = self.segment_sums(emit, data, row, updates, elem)
            emit.nodes.append(helper.make_node("Add", [data, seg], [out], name=f"{out}__add"))
            return emit.nodes

    rewrite = F32(m)
    nodes = []
    for node in m.graph.node:
        rep = rewrite.replace(node)
        nodes.extend(rep if rep is not None else [node])
    from onnx import numpy_helper

    m.graph.initializer.extend(numpy_helper.from_array(np.array(v, dtype=np.int64), k)
                               for k, v in G.CONSTANTS.items())
    m.graph.initializer.extend(rewrite.initializers)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    R.drop_dead_nodes(m.graph)
    return m


def _timed(fn, reps):
    """(wall, CPU) seconds a call: CPU time moves less when other work shares the cores."""
    t, c = time.perf_counter(), time.process_time()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps, (time.process_time() - c) / reps


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=3000)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--only-exported", action="store_true",
                    help="time eager PyG and the two exported forms only (more rounds, less noise)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    data, _ = load_nci5k(limit=args.limit)
    torch.manual_seed(0)
    model = build_model("gine", hidden=args.hidden, layers=args.layers).eval()
    wrapped = ipu_wrap(model)
    loader = FixedSizeLoader(data, Budget.fit(data, 256))
    ids = loader.plan(0)[0]
    flat = loader.collator.collate_indices(ids)
    b = loader.collator.budget
    print(f"GINE {args.layers} x {args.hidden}, one call of {len(ids)} molecules (budget "
          f"nodes={b.nodes}, edges={b.edges}, graphs={b.graphs}), 1 thread; {_load_avg()}")
    proto, feed = _raw_proto(wrapped, flat)
    with torch.no_grad():
        ref = wrapped(flat)["output"].numpy()[:len(ids)]
    real = {b.nodes: sum(data[i].num_nodes for i in ids),
            b.edges: sum(data[i].edge_index.shape[1] for i in ids)}
    tables, rows, vals = _slot_tables(proto, feed, real)
    print("row scatters: " + ", ".join(f"{r}: {len(vals[r].reshape(-1))} rows -> S="
                                       f"{tables[f'ga_slots_{k}'][0].shape[1]}"
                                       for k, r in enumerate(rows)))

    variants = {"elements": (proto, feed)}
    nd = copy.deepcopy(proto)
    R.scatter_rows_as_scatter_nd(nd)
    variants["scatter_nd"] = (nd, feed)
    det = copy.deepcopy(proto)
    R.deterministic_row_scatters(det)
    variants["sorted_f64"] = (det, feed)
    variants["sorted_f32"] = (_f32_sorted(proto), feed)
    sfeed = {**feed, **{k: t for k, (t, _) in tables.items()}}
    variants["slots"] = (_slots_model(proto, tables), sfeed)
    pool = [r for r in rows if len(vals[r].reshape(-1)) == b.nodes]
    variants["slots+onehot"] = (_slots_model(proto, tables, {r: b.graphs for r in pool}),
                                {k: v for k, v in sfeed.items()
                                 if k != f"ga_slots_{rows.index(pool[0])}"} if pool else sfeed)
    # with the export's other ONNX rewrite: summed embedding lookups as one lookup
    for base in ("sorted_f64", "slots"):
        m = copy.deepcopy(variants[base][0])
        R.combine_table_lookups(m)
        variants[f"{base}+lookups"] = (m, variants[base][1])
    # what export writes: the lookups combined, the sums into target nodes over the
    # packer's tables (width 4, spill 78: as fitted for this budget), the pool as
    # segments without a sort
    edge = next(n for n in feed if n.endswith("edge_index"))
    batch = [n for n in feed if n.endswith("batch")]
    slots, spill = in_tables(feed[edge][1], real[b.edges], b.nodes, 4, 78)
    for name, zero_rows in (("exported, zero Concat", False), ("as exported", True)):
        # the padding slots' zero row: a Concat of the edge rows a layer (before), or
        # computed with the edge rows' lookups (R.computed_zero_rows, what export runs)
        ex = copy.deepcopy(proto)
        R.combine_table_lookups(ex)
        R.table_row_scatters(ex, edge, "ga_in_slots", "ga_in_spill", b.nodes, 4, 78)
        if zero_rows:
            R.computed_zero_rows(ex)
        R.deterministic_row_scatters(ex, batch)
        variants[name] = (ex, {**feed, "ga_in_slots": slots, "ga_in_spill": spill})
    sessions = {}
    for name, (m, f) in variants.items():
        bytes_ = m.SerializeToString()
        names = {i.name for i in m.graph.input}
        f = {k: v for k, v in f.items() if k in names}
        outs = [o.name for o in m.graph.output]
        base = None
        worst, same = 0.0, True
        for t in (1, 2, 4):
            s = onnx_session(bytes_, t)
            for _ in range(3):
                got = s.run(outs, f)[0][:len(ids)]
                base = got if base is None else base
                same &= bool(np.array_equal(got, base))
                worst = max(worst, float(np.abs(got - ref).max() / (np.abs(ref).max())))
        sessions[name] = (onnx_session(bytes_, 1), outs, f)
        print(f"  {name:20s} same bits at 1/2/4 threads x3: {same}; max |onnx - eager| / "
              f"max |eager| {worst:.2e}")

    from torch_geometric.data import Batch

    graphs = [data[i] for i in ids]

    def eager():
        bt = Batch.from_data_list(graphs)
        with torch.no_grad():
            model(bt.x, bt.edge_index, bt.edge_attr, bt.batch)

    fns = {"eager PyG": eager}
    for name, (s, outs, f) in sessions.items():
        fns[name] = (lambda s=s, outs=outs, f=f: s.run(outs, f))
    if args.only_exported:  # the A/B of the export's last change alone
        fns = {k: v for k, v in fns.items() if k in ("eager PyG", "exported, zero Concat",
                                                     "as exported")}
    got = {k: [] for k in fns}
    for _ in range(args.rounds):
        for k, fn in fns.items():
            got[k].append(_timed(fn, args.reps))
    med = {k: tuple(statistics.median(x[i] for x in v) for i in (0, 1)) for k, v in got.items()}
    print(f"\nms per call, wall / CPU (median of {args.rounds} rounds x {args.reps}; "
          f"{_load_avg()})")
    for k, (w, c) in med.items():
        print(f"  {k:22s} {w * 1e3:7.3f} / {c * 1e3:7.3f} ms  {med['eager PyG'][0] / w:5.2f}x "
              f"eager PyG (wall)")


if __name__ == "__main__":
    main()
