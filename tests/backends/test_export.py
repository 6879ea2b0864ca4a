"""``graph_adapter.export``: what it refuses, by name, and what the artifact records (issue 26).

Fast: the ONNX format (no AOTInductor compile); the pt2 path is in tests/serve/test_pt2.py.
"""
import os

import pytest
import torch
from torch import nn

pytest.importorskip("onnxruntime", reason="the serve extra (onnx, onnxscript, onnxruntime)")

import graph_adapter.backends.export as E  # noqa: E402
from graph_adapter import serve  # noqa: E402
from graph_adapter.app.models import build_model  # noqa: E402
from graph_adapter.backends.export import (ExportMismatchError, UnsupportedExportError,  # noqa: E402
                                           export)
from graph_adapter.data.budget import Budget  # noqa: E402
from graph_adapter.data.loader import FixedSizeLoader  # noqa: E402
from graph_adapter.nn.wrap import ipu_wrap  # noqa: E402

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


def test_budget_with_example_graphs_writes_a_loadable_contract(setup, tmp_path):
    graphs, budget, wrapped = setup
    path = str(tmp_path / "m.onnx")
    c = export(wrapped, budget, path, format="onnx", example=graphs[:4])
    assert (c.nodes, c.edges, c.graphs) == (budget.nodes, budget.edges, budget.graphs)
    assert [f.key for f in c.features] == ["edge_attr", "edge_index", "x"] and c.dropped_inputs == ("y",)
    assert c.tolerance == E.TOLERANCE["onnx"] and c.verified_max_abs_diff <= 1e-4
    assert c.versions["torch"] == torch.__version__
    assert serve.read_contract(path) == c
    assert serve.Contract.from_json(c.to_json()) == c


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
