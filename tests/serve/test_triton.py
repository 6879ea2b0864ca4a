"""The Triton model of an ``.onnx`` artifact (``graph_adapter.serve.engines.triton``).

No Triton server runs here. ``config_for``'s text is parsed with protobuf's text format
against the fields of Triton's ``model_config.proto`` that it writes (their names, types
and enum values as the proto declares them: an unknown field, a wrong type or an enum
name Triton does not have fails the parse), and each field is checked against the
contract it came from (hypothesis: any contract). ``TritonPythonModel`` runs on a
stand-in of ``triton_python_backend_utils`` (the calls the Python backend's model makes)
on a real artifact: each request's answer equals ``Predictor.predict``'s, a refused
request gets its own error and the others of its batch are answered.
"""
import sys
import types

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from graph_adapter.serve import ArtifactError, Contract, InputField, OutputField
from graph_adapter.serve.engines.triton import (TRITON_DTYPES, TritonPythonModel, config_for,
                                                ptr_input_name)

text_format = pytest.importorskip("google.protobuf.text_format",
                                  reason="protobuf (installed with onnx, the serve extra)")


def _model_config_class():
    """A message class with the ``ModelConfig`` fields ``config_for`` writes, named and
    typed as in Triton's ``model_config.proto`` (triton-inference-server/common)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fp = descriptor_pb2.FileDescriptorProto(name="ga_triton_subset.proto", package="inference",
                                            syntax="proto3")
    dt = fp.enum_type.add(name="DataType")
    for i, n in enumerate(["TYPE_INVALID", "TYPE_BOOL", "TYPE_UINT8", "TYPE_UINT16",
                           "TYPE_UINT32", "TYPE_UINT64", "TYPE_INT8", "TYPE_INT16",
                           "TYPE_INT32", "TYPE_INT64", "TYPE_FP16", "TYPE_FP32", "TYPE_FP64",
                           "TYPE_STRING", "TYPE_BF16"]):
        dt.value.add(name=n, number=i)

    def msg(name, fields, parent=fp):
        m = (parent.message_type if parent is fp else parent.nested_type).add(name=name)
        for num, (fname, ftype, label, tname) in enumerate(fields, 1):
            f = m.field.add(name=fname, number=num, type=ftype, label=label)
            if tname:
                f.type_name = tname
        return m

    OPT, REP = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    msg("ModelInput", [("name", F.TYPE_STRING, OPT, None),
                       ("data_type", F.TYPE_ENUM, OPT, ".inference.DataType"),
                       ("dims", F.TYPE_INT64, REP, None),
                       ("allow_ragged_batch", F.TYPE_BOOL, OPT, None)])
    msg("ModelOutput", [("name", F.TYPE_STRING, OPT, None),
                        ("data_type", F.TYPE_ENUM, OPT, ".inference.DataType"),
                        ("dims", F.TYPE_INT64, REP, None)])
    bi = msg("BatchInput", [("kind", F.TYPE_ENUM, OPT, ".inference.BatchInput.Kind"),
                            ("target_name", F.TYPE_STRING, REP, None),
                            ("data_type", F.TYPE_ENUM, OPT, ".inference.DataType"),
                            ("source_input", F.TYPE_STRING, REP, None)])
    kind = bi.enum_type.add(name="Kind")
    for i, n in enumerate(["BATCH_ELEMENT_COUNT", "BATCH_ACCUMULATED_ELEMENT_COUNT",
                           "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO",
                           "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE", "BATCH_ITEM_SHAPE",
                           "BATCH_ITEM_SHAPE_FLATTEN"]):
        kind.value.add(name=n, number=i)
    msg("ModelDynamicBatching", [("preferred_batch_size", F.TYPE_INT32, REP, None),
                                 ("max_queue_delay_microseconds", F.TYPE_UINT64, OPT, None)])
    ig = msg("ModelInstanceGroup", [("name", F.TYPE_STRING, OPT, None),
                                    ("count", F.TYPE_INT32, OPT, None),
                                    ("kind", F.TYPE_ENUM, OPT,
                                     ".inference.ModelInstanceGroup.Kind")])
    ik = ig.enum_type.add(name="Kind")
    for i, n in enumerate(["KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL"]):
        ik.value.add(name=n, number=i)
    msg("ModelParameter", [("string_value", F.TYPE_STRING, OPT, None)])
    mc = msg("ModelConfig", [("name", F.TYPE_STRING, OPT, None),
                             ("backend", F.TYPE_STRING, OPT, None),
                             ("max_batch_size", F.TYPE_INT32, OPT, None),
                             ("input", F.TYPE_MESSAGE, REP, ".inference.ModelInput"),
                             ("output", F.TYPE_MESSAGE, REP, ".inference.ModelOutput"),
                             ("batch_input", F.TYPE_MESSAGE, REP, ".inference.BatchInput"),
                             ("dynamic_batching", F.TYPE_MESSAGE, OPT,
                              ".inference.ModelDynamicBatching"),
                             ("instance_group", F.TYPE_MESSAGE, REP,
                              ".inference.ModelInstanceGroup"),
                             ("parameters", F.TYPE_MESSAGE, REP,
                              ".inference.ModelConfig.ParametersEntry")])
    entry = msg("ParametersEntry", [("key", F.TYPE_STRING, OPT, None),
                                    ("value", F.TYPE_MESSAGE, OPT, ".inference.ModelParameter")],
                parent=mc)
    entry.options.map_entry = True  # map<string, ModelParameter> parameters
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("inference.ModelConfig"))


ModelConfig = _model_config_class()


def _parse(text):
    from google.protobuf.json_format import MessageToDict

    msg = text_format.Parse(text, ModelConfig())
    return msg, MessageToDict(msg, preserving_proto_field_name=True)


@st.composite
def contracts(draw):
    """Contracts of any features (levels, dtypes, widths) and outputs."""
    G = draw(st.integers(2, 300))
    dtypes = st.sampled_from(sorted(TRITON_DTYPES))
    names = draw(st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), min_size=2,
                          max_size=6, unique=True))
    nf = draw(st.integers(1, len(names) - 1))
    inputs = []
    for k in names[:nf]:
        level = draw(st.sampled_from(["node", "edge", "graph"]))
        width = tuple(draw(st.lists(st.integers(1, 16), max_size=2)))
        shape = ((2, None) if draw(st.booleans()) and level == "edge" else (None, *width)) \
            if level != "graph" else (1, *width)
        inputs.append(InputField(k, "feature", level, draw(dtypes), shape))
    outputs = [OutputField(k, draw(st.sampled_from(["node", "edge", "graph"])), draw(dtypes),
                           (G, *draw(st.lists(st.integers(1, 8), max_size=2))))
               for k in names[nf:]]
    return Contract("onnx", 10 * G, 20 * G, G, tuple(inputs), tuple(outputs))


@given(contracts(), st.integers(1, 64), st.integers(0, 10 ** 6))
def test_the_config_parses_as_triton_reads_it_and_says_what_the_contract_says(c, inst, delay):
    text = config_for(c, name="mol", instances=inst, max_queue_delay_us=delay)
    msg, d = _parse(text)
    assert d["name"] == "mol" and d["backend"] == "python"
    assert msg.max_batch_size == c.graphs - 1
    feats = c.features
    assert [i["name"] for i in d["input"]] == [f.key for f in feats]
    for i, f in zip(msg.input, feats):
        assert ModelConfig.DESCRIPTOR.file.pool.FindEnumTypeByName(
            "inference.DataType").values_by_number[i.data_type].name == TRITON_DTYPES[f.dtype]
        assert list(i.dims) == [-1 if s is None else s for s in f.shape]
        assert i.allow_ragged_batch
    # one offsets input a level that has a feature of its own: source = its first feature
    levels = {f.level: f.key for f in reversed(feats) if f.level in ("node", "edge")}
    got = {b.target_name[0]: list(b.source_input) for b in msg.batch_input}
    assert got == {ptr_input_name(lv): [k] for lv, k in levels.items()}
    assert all(b.kind == 2 and b.data_type == 8 for b in msg.batch_input)  # WITH_ZERO, INT32
    assert [o.name for o in msg.output] == [o.key for o in c.outputs]
    for o, f in zip(msg.output, c.outputs):
        rest = list(f.shape[1:])
        assert list(o.dims) == ([-1, *rest] if f.level != "graph" else rest)
    assert msg.dynamic_batching.max_queue_delay_microseconds == delay
    assert [(g.kind, g.count) for g in msg.instance_group] == [(2, inst)]  # KIND_CPU
    assert msg.parameters["artifact"].string_value == "model.onnx"


def test_config_for_refuses_a_pt2_contract_and_a_dtype_triton_lacks_by_name():
    c = Contract("onnx", 8, 8, 3, (InputField("x", "feature", "node", "complex64", (None, 2)),),
                 (OutputField("y", "graph", "float32", (3, 1)),))
    with pytest.raises(ArtifactError, match=r"'x' has dtype complex64.*Triton"):
        config_for(c)
    with pytest.raises(ArtifactError, match="pt2 artifact.*format='onnx'"):
        config_for(Contract("pt2", 8, 8, 3, c.inputs[:0], c.outputs))


# ------------------------------------------------ the Python backend's model, stand-in

class _Tensor:
    def __init__(self, name, array):
        self.name, self.array = name, np.asarray(array)

    def as_numpy(self):
        return self.array


class _Response:
    def __init__(self, output_tensors, error=None):
        self.output_tensors, self.error = output_tensors, error


class _Request:
    def __init__(self, tensors):
        self.tensors = {t.name: t for t in tensors}


def _pb_utils():
    """The calls of ``triton_python_backend_utils`` the model makes, as the Python
    backend documents them."""
    pb = types.ModuleType("triton_python_backend_utils")
    pb.Tensor = _Tensor
    pb.InferenceResponse = _Response
    pb.TritonError = type("TritonError", (Exception,), {})
    pb.get_input_tensor_by_name = lambda r, name: r.tensors.get(name)
    return pb


@pytest.fixture(scope="module")
def triton_model(tmp_path_factory):
    pytest.importorskip("onnxruntime", reason="the serve extra (onnx, onnxscript, onnxruntime)")
    import torch

    from _padding import molecule_like_graphs
    from graph_adapter.app.models import build_model
    from graph_adapter.batching import Budget, FixedSizeLoader
    from graph_adapter.exporter import export
    from graph_adapter.nn import ipu_wrap

    graphs = molecule_like_graphs(60, seed=5)
    torch.manual_seed(0)
    model = build_model("gine", hidden=8, layers=1, y_mean=1.0, y_std=2.0).eval()
    repo = tmp_path_factory.mktemp("triton")
    (repo / "mol" / "1").mkdir(parents=True)
    contract = export(ipu_wrap(model), FixedSizeLoader(graphs, Budget.fit(graphs, 4)),
                      str(repo / "mol" / "1" / "model.onnx"), format="onnx", threads=1)
    text = config_for(contract, name="mol")
    (repo / "mol" / "config.pbtxt").write_text(text)
    from google.protobuf.json_format import MessageToJson

    m = TritonPythonModel()
    m.initialize({"model_config": MessageToJson(_parse(text)[0], preserving_proto_field_name=True),
                  "model_repository": str(repo / "mol"), "model_version": "1"})
    sys.modules["triton_python_backend_utils"] = _pb_utils()
    yield m, graphs
    del sys.modules["triton_python_backend_utils"]


def _request(graphs, offsets=None):
    keys = ("x", "edge_index", "edge_attr")
    ts = [_Tensor(k, np.stack([g[k].numpy() for g in graphs])) for k in keys if k in graphs[0]]
    return _Request(ts + [_Tensor(n, v) for n, v in (offsets or {}).items()])


@given(st.lists(st.lists(st.integers(0, 59), min_size=1, max_size=3), min_size=1, max_size=12),
       st.data())
def test_a_dynamic_batch_answers_each_request_as_predict_does(triton_model, reqs, data):
    m, graphs = triton_model
    # broken requests: a feature missing (refused when read) or an edge to a node the
    # graph lacks (refused when packed, so the batch's call fails and is run request by
    # request): each gets its own error
    bad = data.draw(st.dictionaries(st.integers(0, len(reqs) - 1),
                                    st.sampled_from(["edge_attr", "edge_index"]), max_size=2))
    batch = []
    for i, r in enumerate(reqs):
        gs = [graphs[j] for j in r[:1]]  # one graph a request (ragged: any sizes)
        req = _request(gs)
        if bad.get(i) == "edge_attr":
            del req.tensors["edge_attr"]
        elif bad.get(i) == "edge_index":
            ei = req.tensors["edge_index"].array.copy()
            ei[0, 0, 0] = gs[0].num_nodes
            req.tensors["edge_index"] = _Tensor("edge_index", ei)
        batch.append(req)
    out = m.execute(batch)
    assert len(out) == len(batch)
    for i, (r, resp) in enumerate(zip(reqs, out)):
        if i in bad:
            assert resp.error is not None and bad[i] in str(resp.error), resp.error
            continue
        assert resp.error is None
        g = graphs[r[0]]
        (want,) = m.predictor.predict([{k: g[k].numpy() for k in ("x", "edge_index",
                                                                    "edge_attr")}])
        (t,) = resp.output_tensors
        assert t.name == "output" and t.array.shape == (1, *np.shape(want))
        np.testing.assert_array_equal(t.array[0], want)


def test_batch_inputs_that_the_backend_fills_are_read_as_the_requests_offsets(triton_model,
                                                                              caplog):
    m, graphs = triton_model
    gs = graphs[:3]
    node, edge = ptr_input_name("node"), ptr_input_name("edge")
    acc_x = np.cumsum([0] + [g.x.numel() for g in gs])
    acc_e = np.cumsum([0] + [g.edge_attr.numel() for g in gs])
    # WITH_ZERO: the batch's first request gets [0, c_1], the others [c_k]
    ok = [_request([g], {node: acc_x[:2] if i == 0 else acc_x[i + 1:i + 2],
                         edge: acc_e[:2] if i == 0 else acc_e[i + 1:i + 2]})
          for i, g in enumerate(gs)]
    with caplog.at_level("WARNING"):
        out = m.execute(ok)
    assert all(r.error is None for r in out) and not caplog.records
    wrong = [_request([g], {node: np.array([0, 1]) if i == 0 else np.array([i + 1])})
             for i, g in enumerate(gs)]
    with caplog.at_level("WARNING"):
        again = m.execute(wrong)  # said (logged), and answered by the packer's own offsets
    assert node in caplog.text
    for a, b in zip(out, again):
        np.testing.assert_array_equal(a.output_tensors[0].array, b.output_tensors[0].array)



def test_a_request_whose_features_disagree_on_graphs_gets_its_own_named_error(triton_model):
    m, graphs = triton_model
    ok = _request([graphs[0]])
    odd = _request([graphs[1]])
    odd.tensors["x"] = _Tensor("x", np.stack([graphs[1].x.numpy()] * 2))  # 2 graphs' x, 1 edge set
    out = m.execute([ok, odd, _request([graphs[2]])])
    assert out[0].error is None and out[2].error is None
    assert "batch dims" in str(out[1].error) and "'x': 2" in str(out[1].error)
