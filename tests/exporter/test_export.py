"""``graph_adapter.export``: what it refuses, by name, what the artifact records, and the
rewrites it applies to the exported program and the ONNX model (issue 26).

Fast: the ONNX format (no AOTInductor compile); the pt2 path is in tests/serve/test_pt2.py.
"""
import copy
import os

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch import nn

pytest.importorskip("onnxruntime", reason="the serve extra (onnx, onnxscript, onnxruntime)")

import graph_adapter.exporter as E  # noqa: E402
from graph_adapter import serve  # noqa: E402
from graph_adapter.app.models import build_model  # noqa: E402
from graph_adapter.exporter import (ExportMismatchError, UnsupportedExportError,  # noqa: E402
                                           export)
from graph_adapter.batching import Budget
from graph_adapter.batching import FixedSizeLoader
from graph_adapter.nn import ipu_wrap
from strategies import PairData  # PyG's recipe, shared

from _padding import molecule_like_graphs  # noqa: E402


@pytest.fixture
def setup():
    graphs = molecule_like_graphs(24, seed=2)
    budget = Budget.fit(graphs, 8)
    model = build_model("gin", hidden=8, layers=1)
    return graphs, budget, ipu_wrap(model).eval()


def test_refuses_what_it_cannot_export_by_name(setup, tmp_path):
    graphs, budget, wrapped = setup
    out = str(tmp_path / "m.onnx")
    with pytest.raises(TypeError, match="ipu_wrap-ped model"):
        export(wrapped.model, budget, out, format="onnx", example=graphs[:4])
    with pytest.raises(ValueError, match="format='tflite'"):
        export(wrapped, budget, str(tmp_path / "m.tflite"), format="tflite")
    with pytest.raises(ValueError, match=r"must end in \.pt2"):
        export(wrapped, budget, out)
    with pytest.raises(TypeError, match="needs example="):
        export(wrapped, budget, out, format="onnx")
    with pytest.raises(ValueError, match="threads=0: give the server's thread count"):
        export(wrapped, budget, str(tmp_path / "m.pt2"), example=graphs[:4], threads=0)
    with pytest.raises(UnsupportedExportError, match="layout='ell'"):
        export(wrapped, FixedSizeLoader(graphs, budget, layout="ell"), out, format="onnx")
    assert not os.path.exists(out)


class _Scalar(nn.Module):
    def forward(self, x, edge_index):
        return x.float().sum()


def test_an_output_without_node_edge_or_graph_rows_is_refused(setup, tmp_path):
    graphs, budget, _ = setup
    with pytest.raises(UnsupportedExportError, match="output 'output' .* cannot be split"):
        export(ipu_wrap(_Scalar(), inputs="tensors"), budget, str(tmp_path / "s.onnx"), format="onnx",
               example=graphs[:4])


def test_budget_with_example_graphs_writes_a_loadable_contract(setup, tmp_path, caplog):
    graphs, budget, wrapped = setup
    path = str(tmp_path / "m.onnx")
    with caplog.at_level("INFO", logger="graph_adapter.export"):
        c = export(wrapped, budget, path, format="onnx", example=graphs[:4])
    # the ONNX rewrites that fired, by their registry names (GIN: edge sums, the pool)
    fired = " ".join(r.getMessage() for r in caplog.records if "ONNX rewrites" in r.getMessage())
    assert "table_sums x" in fired and "sorted_scatters x" in fired
    assert (c.nodes, c.edges, c.graphs) == (budget.nodes, budget.edges, budget.graphs)
    assert [f.key for f in c.features] == ["edge_attr", "edge_index", "x"] and c.dropped_inputs == ("y",)
    assert c.tolerance == E.TOLERANCE["onnx"] and c.verified_max_abs_diff <= 1e-4
    assert c.versions["torch"] == torch.__version__
    assert serve.read_contract(path) == c
    assert serve.Contract.from_json(c.to_json()) == c
    import onnx

    ops = {n.op_type for n in onnx.load(path).graph.node}  # GIN's sum aggregation
    # over the neighbour tables, the pool as segments of the nodes in graph order
    assert {"ReduceSum", "CumSum", "If"} <= ops and not {"ScatterND", "TopK"} & ops
    assert {f.key for f in c.inputs if f.kind == "reserved"} >= {"in_slots", "in_spill"}
    plain = str(tmp_path / "plain.onnx")
    export(wrapped, budget, plain, format="onnx", example=graphs[:4], rewrite=False)
    ops = {n.op_type for n in onnx.load(plain).graph.node}
    assert "ScatterElements" in ops and not {"ScatterND", "TopK", "CumSum"} & ops


def test_an_artifact_that_disagrees_with_eager_is_not_written(setup, tmp_path, monkeypatch):
    graphs, budget, wrapped = setup
    monkeypatch.setitem(E.TOLERANCE, "onnx", {"atol": -1.0, "rtol": 0.0})  # nothing passes
    path = str(tmp_path / "m.onnx")
    with pytest.raises(ExportMismatchError, match="not written"):
        export(wrapped, budget, path, format="onnx", example=graphs[:4])
    assert not os.path.exists(path)


def test_files_that_are_not_artifacts_are_named(tmp_path):
    bad = tmp_path / "x.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(Exception, match="x.onnx|INVALID|protobuf"):
        serve.load(str(bad))
    with pytest.raises(FileNotFoundError, match="no artifact"):
        serve.load(str(tmp_path / "missing.pt2"))
    with pytest.raises(serve.ArtifactError, match="contract version 99"):
        serve.Contract.from_json('{"contract_version": 99}')


# ---------------------------------------------------------------- the rewrites of export
class _EncodeProject(nn.Module):
    """A sum of embedding lookups (one per column of ``codes``), projected by ``linears``."""

    def __init__(self, vocab, d_in, d_out, bias=True, linears=1, **embedding_kwargs):
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(n, d_in, **embedding_kwargs) for n in vocab)
        self.lins = nn.ModuleList(nn.Linear(d_in, d_out, bias=bias) for _ in range(linears))

    def forward(self, codes):
        h = self.embeddings[0](codes[:, 0])
        for i in range(1, len(self.embeddings)):
            h = h + self.embeddings[i](codes[:, i])
        return sum(lin(h).relu() for lin in self.lins)


def _lookup_sum_linears(ep):
    """Linears of the exported graph that read a sum of lookups ([rows, D] products)."""
    aten = torch.ops.aten
    return [n for n in ep.graph.nodes if n.target is aten.linear.default
            and n.args[0].target in (aten.add.Tensor, aten.embedding.default)]


@given(vocab=st.lists(st.integers(1, 8), min_size=1, max_size=4), d_in=st.integers(1, 6),
       d_out=st.integers(1, 5), bias=st.booleans(), linears=st.integers(1, 2),
       extra_rows=st.integers(0, 30), seed=st.integers(0, 2**16),
       form=st.sampled_from(["plain", "plain", "padding_idx", "max_norm", "big_tables"]))
# found by this test: max_norm's renorm writes the table through detach(table)
@example(vocab=[1], d_in=1, d_out=1, bias=False, linears=1, extra_rows=0, seed=0,
         form="max_norm")
# each example traces two programs (~0.25 s on 2 cores): fewer than the profile's 40
@settings(max_examples=12)
def test_exported_programs_get_the_table_projection_and_keep_outputs(
        vocab, d_in, d_out, bias, linears, extra_rows, seed, form):
    """The ATen form of the compile path's rewrite (``_fx_rewrites``): each linear of a
    lookup sum is rewritten where it pays and the tables are plain (float64 outputs
    equal); a padding row, ``max_norm`` (a table written in place) or tables with more
    rows than half the lookups are left as they are."""
    torch.manual_seed(seed)
    kwargs = {"padding_idx": {"padding_idx": 0}, "max_norm": {"max_norm": 1.0}}.get(form, {})
    model = _EncodeProject(vocab, d_in, d_out, bias, linears, **kwargs).double().eval()
    rows = 2 * sum(vocab) + extra_rows if form != "big_tables" else max(1, sum(vocab) // 2)
    g = torch.Generator().manual_seed(seed)
    codes = torch.stack([torch.randint(0, n, (rows,), generator=g) for n in vocab], dim=1)
    with torch.no_grad():
        ref = copy.deepcopy(model)(codes)  # max_norm renormalises the tables it reads
        ep = torch.export.export(copy.deepcopy(model), (codes,))
        before = len(_lookup_sum_linears(ep))
        ep2, rewritten = E.rewritten_program(ep, codes)
        out = ep2.module()(codes)
    want = linears if form == "plain" and _tuned() else 0  # (no tuning stage: no rewrite)
    assert (before, rewritten, len(_lookup_sum_linears(ep2))) == (linears, want, linears - want)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


def _tuned():
    """Whether the tuning stage rewrites exported programs here (installed and on)."""
    import sys

    tuning = sys.modules.get("graph_adapter.tuning")
    return E.trace.rewrite_exported is not None and getattr(tuning, "ON", True)


def _onnx_scatter(shape, rows, form):
    """``ScatterElements(data [shape], Expand(Reshape(i [rows], [-1, 1, ..])), updates)``,
    the form the exporter gives PyG's ``scatter_add_`` of rows, or one ``form`` off it."""
    from onnx import TensorProto, helper, numpy_helper

    up = [rows] + list(shape[1:])
    attrs = {"axis": 1 if form == "axis=1" else 0}
    if form != "opset 15":  # (reduction needs opset 16)
        attrs["reduction"] = "mul" if form == "reduction=mul" else "add"
    index = "i_full" if form == "index given whole" else "iexp"
    nodes = [helper.make_node("Reshape", ["i", "ishape"], ["i2"]),
             helper.make_node("Expand", ["i2", "eshape"], ["iexp"]),
             helper.make_node("ScatterElements", ["data", index, "up"], ["out"], **attrs)]
    inits = [numpy_helper.from_array(np.array([-1] + [1] * (len(shape) - 1), np.int64), "ishape"),
             numpy_helper.from_array(np.array(up, dtype=np.int64), "eshape")]
    inputs = [helper.make_tensor_value_info("data", TensorProto.FLOAT, list(shape)),
              helper.make_tensor_value_info("i", TensorProto.INT64, [rows]),
              helper.make_tensor_value_info("i_full", TensorProto.INT64, up),
              helper.make_tensor_value_info("up", TensorProto.FLOAT, up)]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(
        "out", TensorProto.FLOAT, list(shape))], inits)
    opset = 15 if form == "opset 15" else 20
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run_onnx(model, feed):
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(["out"], feed)[0]


@given(n=st.integers(1, 6), rows=st.integers(1, 12),
       trailing=st.lists(st.integers(1, 4), min_size=1, max_size=2), seed=st.integers(0, 2**16),
       form=st.sampled_from(["rows", "rows", "reduction=mul", "axis=1", "index given whole",
                             "opset 15"]))
def test_onnx_row_scatters_become_scatter_nd_with_equal_outputs(n, rows, trailing, seed, form):
    """``ScatterElements(axis=0, add)`` of whole rows becomes ``ScatterND(add)`` (outputs
    equal: both add each row in order) and the ``Expand`` it read is dropped; any other
    form (another reduction or axis, an index not one per row, opset < 16) is kept."""
    import onnx

    from graph_adapter.exporter.onnx_rewrites import scatter_rows_as_scatter_nd

    rng = np.random.default_rng(seed)
    shape = [n] + trailing
    if form == "axis=1":
        shape = [rows] + trailing  # dim 1 indexed: every other dim as the update's
    model = _onnx_scatter(shape, rows, form)
    onnx.checker.check_model(model)
    up = [rows] + shape[1:]
    high = shape[1] if form == "axis=1" else n
    feed = {"data": rng.standard_normal(shape).astype(np.float32),
            "i": rng.integers(0, n, rows), "i_full": rng.integers(0, high, up),
            "up": rng.standard_normal(up).astype(np.float32)}
    if form == "axis=1":
        feed["i"] = rng.integers(0, high, rows)  # indexes dim 1 there
    ref = _run_onnx(model, feed)
    rewritten = scatter_rows_as_scatter_nd(model)
    ops = [node.op_type for node in model.graph.node]
    assert rewritten == (1 if form == "rows" else 0)
    assert ("ScatterND" in ops, "Expand" in ops) == ((True, False) if form == "rows"
                                                     else (False, True))
    np.testing.assert_allclose(_run_onnx(model, feed), ref, rtol=1e-6, atol=1e-6)


def test_the_export_check_reads_real_rows_and_names_a_difference_there():
    """Padding rows (sums of the padding self-loops: 1e8 and more, rounded by the order of
    adds) are no prediction: only the real rows are held to the tolerance."""
    c = serve.Contract(format="onnx", nodes=5, edges=4, graphs=3, inputs=(),
                       outputs=(serve.OutputField("output", "graph", "float32", (3, 1)),
                                serve.OutputField("h", "node", "float32", (5, 2))),
                       tolerance={"atol": 1e-4, "rtol": 1e-4})
    flat = {"node_mask": torch.tensor([True, True, True, False, False]),
            "graph_mask": torch.tensor([True, True, False])}
    ref = {"output": torch.tensor([[1.0], [2.0], [3e9]]), "h": torch.arange(10.0).view(5, 2)}
    got = {"output": torch.tensor([[1.0], [2.00001], [-3e9]]),
           "h": torch.cat([torch.arange(6.0), torch.full((4,), 1e12)]).view(5, 2)}
    assert E.checks.max_diff(got, ref, c, flat) == pytest.approx(1e-5, rel=0.1)
    got["h"][2, 1] += 0.1  # the third node is real
    with pytest.raises(ExportMismatchError, match="'h'.* up to 0.1 on the real rows"):
        E.checks.max_diff(got, ref, c, flat)


# ------------------------------------------- the same predictions at any thread count
def _onnx_scatter_nd(shape, rows, reduction, dtype):
    """``ScatterND(data [shape], Unsqueeze(i [rows]), updates, reduction)``: a row index."""
    from onnx import helper, numpy_helper

    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    up = [rows] + list(shape[1:])
    nodes = [helper.make_node("Unsqueeze", ["i", "axis1"], ["i2"]),
             helper.make_node("ScatterND", ["data", "i2", "up"], ["out"], reduction=reduction)]
    inputs = [helper.make_tensor_value_info("data", elem, list(shape)),
              helper.make_tensor_value_info("i", onnx_int64(), [rows]),
              helper.make_tensor_value_info("up", elem, up)]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(
        "out", elem, list(shape))], [numpy_helper.from_array(np.array([1], np.int64), "axis1")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def onnx_int64():
    from onnx import TensorProto

    return TensorProto.INT64


def _run_at(model, feed, threads):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return sess.run(["out"], feed)[0]


@given(n=st.integers(1, 40), rows=st.integers(1, 300),
       trailing=st.lists(st.integers(1, 9), min_size=1, max_size=2), seed=st.integers(0, 2**16),
       form=st.sampled_from(["elements add", "elements add", "nd add", "nd max", "nd mul"]),
       dtype=st.sampled_from(["float32", "float32", "int64"]),
       poison=st.sampled_from([None, None, "nan", "inf", "-inf and inf"]))
# negative indices: ScatterElements counts them from the end, the sort must too
@example(n=3, rows=4, trailing=[2], seed=1, form="elements add", dtype="float32", poison=None)
@settings(max_examples=25, deadline=None)
def test_row_scatters_are_the_same_at_any_thread_count(n, rows, trailing, seed, form, dtype,
                                                       poison):
    """Every row-wise scatter add (the exporter's ScatterElements, a reducing ScatterND)
    is rewritten so that onnxruntime gives the same bits at 1, 2 and 4 threads, equal
    (float32 rounding) to the scatter as written; a NaN or an infinity in the rows stays
    in its own target row (the original scatter runs then), as eagerly."""
    from graph_adapter.exporter.onnx_rewrites import deterministic_row_scatters

    rng = np.random.default_rng(seed)
    shape = [n] + trailing
    up = [rows] + trailing
    if form == "elements add":
        model = _onnx_scatter(shape, rows, "rows")
        if dtype != "float32":
            for v in (*model.graph.input, *model.graph.output):
                if v.name != "i":
                    v.type.tensor_type.elem_type = onnx_int64()
    else:
        model = _onnx_scatter_nd(shape, rows, form.split()[1], dtype)
    values = (lambda s: rng.standard_normal(s).astype(np.float32)) if dtype == "float32" else \
        (lambda s: rng.integers(-2**40, 2**40, s))
    index = rng.integers(-n, n, rows) if form == "elements add" else rng.integers(0, n, rows)
    feed = {"data": values(shape), "i": index, "up": values(up),
            "i_full": rng.integers(0, n, up)}
    if poison and dtype == "float32":
        feed["up"][0] = np.nan if poison == "nan" else np.inf
        if poison == "-inf and inf":
            feed["up"][rows // 2] = -np.inf
    feed = {i.name: feed[i.name] for i in model.graph.input}
    ref = _run_at(model, feed, 1)
    assert deterministic_row_scatters(model) == 1
    ops = {node.op_type for node in model.graph.node}
    assert "ScatterND" not in ops
    outs = [_run_at(model, feed, t) for t in (1, 2, 4, 2)]
    for o in outs:
        np.testing.assert_array_equal(o, outs[0])
    if dtype == "int64" or form in ("nd max", "nd mul"):
        np.testing.assert_array_equal(outs[0], ref)
    else:
        np.testing.assert_allclose(outs[0], ref, rtol=1e-5, atol=1e-5)


def test_a_wide_scatter_add_is_the_same_at_1_2_and_4_threads():
    """The case that raced: 4000 rows of 128 floats into 2000 rows, targets in random
    order (``ScatterND`` add lost updates in most calls at 2 threads here)."""
    from graph_adapter.exporter.onnx_rewrites import deterministic_row_scatters

    rng = np.random.default_rng(0)
    model = _onnx_scatter([2000, 128], 4000, "rows")
    feed = {"data": np.zeros((2000, 128), np.float32), "i": rng.integers(0, 2000, 4000),
            "up": rng.standard_normal((4000, 128)).astype(np.float32),
            "i_full": np.zeros((4000, 128), np.int64)}  # (an input of the form, unread)
    ref = np.zeros((2000, 128))
    np.add.at(ref, feed["i"], feed["up"].astype(np.float64))
    deterministic_row_scatters(model)
    feed = {i.name: feed[i.name] for i in model.graph.input}
    for threads in (1, 2, 4):
        for _ in range(5):
            np.testing.assert_allclose(_run_at(model, feed, threads), ref, rtol=0, atol=1e-5)


class _Unread(nn.Module):
    """Names ``edge_attr`` and never reads it."""

    def __init__(self):
        super().__init__()
        from torch_geometric.nn import GCNConv

        self.conv = GCNConv(9, 8)

    def forward(self, x, edge_index, edge_attr, batch):
        from torch_geometric.nn import global_add_pool

        return global_add_pool(self.conv(x.float(), edge_index), batch)


def _unread_round_trip(fmt, tmp_path):
    graphs = molecule_like_graphs(40, seed=4)
    loader = FixedSizeLoader(graphs, Budget.fit(graphs, 8))
    torch.manual_seed(0)
    model = _Unread().eval()
    path = str(tmp_path / f"unread.{fmt}")
    contract = export(ipu_wrap(model).eval(), loader, path, format=fmt)
    assert contract.dropped_inputs == ("edge_attr", "y")
    assert {f.key for f in contract.features} == {"x", "edge_index"}
    assert not {"edge_attr", "y"} & set(contract.input_keys())
    requests = [{"x": d.x.numpy(), "edge_index": d.edge_index.numpy()} for d in graphs]
    preds = serve.load(path, threads=1).predict(requests)  # no edge_attr, no y
    with torch.no_grad():
        for d, p in zip(graphs, preds):
            ref = model(d.x, d.edge_index, d.edge_attr, torch.zeros(d.num_nodes, dtype=torch.long))
            torch.testing.assert_close(torch.as_tensor(p), ref[0], atol=1e-4, rtol=1e-4)


def test_inputs_a_forward_names_but_never_reads_are_not_in_the_onnx_contract(tmp_path):
    _unread_round_trip("onnx", tmp_path)


@pytest.mark.slow
@pytest.mark.extended  # an AOTInductor compile, ~15 s: CI's second step (the onnx case is in the main suite)
def test_inputs_a_forward_names_but_never_reads_are_not_in_the_pt2_contract(tmp_path):
    _unread_round_trip("pt2", tmp_path)


def test_the_onnx_check_runs_batches_twice_at_each_thread_count_and_names_a_race(
        setup, tmp_path, monkeypatch):
    """Three batches (the example, reversed, every other graph), each run twice at the
    server's threads and at each of CHECK_THREADS; an artifact that is off at 2 threads
    only is refused naming the output, the batch, the run and the threads."""
    graphs, budget, wrapped = setup
    real = E.onnx.onnx_session
    runs = []

    class Racy:
        def __init__(self, model, threads):
            self.sess, self.threads = real(model, threads), threads

        def run(self, names, feed):
            runs.append(self.threads)
            out = self.sess.run(names, feed)
            if self.threads == 2 and runs.count(2) == 4:  # the second batch's second run
                out[0] = out[0] + 0.5
            return out

    monkeypatch.setattr(E.onnx, "onnx_session", Racy)
    path = str(tmp_path / "m.onnx")
    with pytest.raises(ExportMismatchError, match=r"output 'output': .* up to 0\.5 on the real "
                       r"rows of check batch 1, run 2 at 2 onnxruntime threads .*not written"):
        export(wrapped, budget, path, format="onnx", example=graphs[:6], threads=1)
    assert not os.path.exists(path)
    assert runs[:6] == [1] * 6  # the server's count first: 3 batches x 2 runs
    runs.clear()
    monkeypatch.setattr(E.onnx, "onnx_session", real)
    export(wrapped, budget, path, format="onnx", example=graphs[:6])
    assert os.path.exists(path)


class _CumMax(nn.Module):
    def forward(self, x):
        return torch.cummax(x, 0)[0]


class _WithCumMax(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(9, 4)
        self.running = _CumMax()

    def forward(self, x, edge_index):
        return self.running(self.lin(x.float()))


def test_a_layer_onnx_cannot_express_is_refused_by_name(setup, tmp_path):
    graphs, budget, _ = setup
    path = str(tmp_path / "c.onnx")
    with pytest.raises(UnsupportedExportError, match=r"layer 'running' \(_CumMax\) cannot be "
                       r"exported to ONNX: aten\.cummax.* format='pt2'"):
        export(ipu_wrap(_WithCumMax()), budget, path, format="onnx", example=graphs[:4])
    assert not os.path.exists(path)


def test_an_onnxruntime_error_is_named_by_the_layer_of_its_node(setup, tmp_path):
    """onnxruntime names a node it cannot run; the refusal names its layer and class."""
    import onnx

    graphs, budget, wrapped = setup
    path = str(tmp_path / "m.onnx")
    export(wrapped, budget, path, format="onnx", example=graphs[:4])
    proto = onnx.load(path)
    gemm = next(n for n in proto.graph.node if n.op_type == "Gemm")
    message = f"NOT_IMPLEMENTED : Could not find an implementation for Gemm(13) node with " \
              f"name '{gemm.name}'"
    named = E.onnx.onnx_node_layer(proto, message)
    import re

    assert re.fullmatch(r" in layer 'gnn\.[\w.]+' \(\w+, ONNX Gemm\)", named), named
    assert E.onnx.onnx_node_layer(proto, "no node named") == ""


class _PairModel(nn.Module):
    def forward(self, x_s, x_t):
        return x_s.sum() + x_t.sum()


def test_several_node_sets_in_one_store_are_refused_by_name(tmp_path):
    g = torch.Generator().manual_seed(0)
    pairs = [PairData(x_s=torch.randn(3, 2, generator=g), x_t=torch.randn(4, 2, generator=g),
                       edge_index_s=torch.tensor([[0, 1], [1, 2]]),
                       edge_index_t=torch.tensor([[0, 1, 2], [1, 2, 3]])) for _ in range(6)]
    loader = FixedSizeLoader(pairs, Budget.fit(pairs, 2))
    out = str(tmp_path / "m.onnx")
    with pytest.raises(UnsupportedExportError, match=r"several node sets in one store \(\['x_s', "
                                                     r"'x_t'\]"):
        export(ipu_wrap(_PairModel()).eval(), loader, out, format="onnx")
    assert not os.path.exists(out)
