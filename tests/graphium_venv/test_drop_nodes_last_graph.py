"""graphium 2.4.7's IPU-only paths (``is_running_on_ipu()`` / ``x.device.type == "ipu"``):
a GPS layer and a node-pair task head (issue 25, item 4). Runs in ``.ci/graphium``'s venv.

graphium sizes its dense batches on the IPU from its own padding: ``batch_size`` from its
mask key ``graph_is_true`` (GPS, ``gps_pyg.py``: only when ``feat.device.type == "ipu"``)
and ``drop_nodes_last_graph=is_running_on_ipu()`` for its one fake last graph
(``to_dense_batch``). graph_adapter's batches carry ``graph_mask`` (no ``graph_is_true``)
and the emulations run on CPU tensors, so ``batch_size`` stays None and graphium reads
``int(batch.max()) + 1`` (``graphium/ipu/to_dense_batch.py:82``); the node-pair head also
selects with a boolean mask (``global_architectures.py:2059``). Both are unsupported on
the IPU path (docs/migrating.md says why); what is tested here is that the refusal is a
clear error naming graphium's line, and that eager runs stay padding-invariant.
"""
import copy
import importlib
import os
import re

import pytest
import torch

if os.environ.get("GRAPH_ADAPTER_GRAPHIUM_CI") == "1":
    importlib.import_module("graphium")  # .ci/graphium's own venv: a failed import fails CI
else:
    pytest.importorskip("graphium", reason="graphium 2.4.7 needs lightning 2.0.9; .ci/graphium "
                                           "tests it in its own venv (tests/graphium_venv)")

from graphium.config._loader import load_architecture  # noqa: E402
from torch_geometric.data import Batch  # noqa: E402

from _graphium_case import config, featurize, in_dims  # noqa: E402

from graph_adapter.backends import compile as ga_compile  # noqa: E402
from graph_adapter.checker import check  # noqa: E402
from graph_adapter.compat import graphium as compat  # noqa: E402
from graph_adapter.batching import Budget
from graph_adapter.batching import FixedSizeLoader
from graph_adapter.ipu import EmulatorError  # noqa: E402
from graph_adapter.nn import ipu_wrap

CASES = {
    "gps": config("pyg:gps", ["sum"], layer_kwargs=dict(
        mpnn_type="pyg:gine", attn_type="full-attention", attn_kwargs=dict(num_heads=2))),
    "nodepair": config("pyg:gine", ["sum"], task_level="nodepair"),
}
# graphium's lines the refusals must name (graphium 2.4.7)
TO_DENSE_INT = r"graphium/ipu/to_dense_batch\.py:82"
NODEPAIR_MASK = r"graphium/nn/architectures/global_architectures\.py:2059"


@pytest.fixture(scope="module")
def data():
    compat.unpatch()
    ds = featurize(60)
    loader = FixedSizeLoader(ds, Budget.fit(ds, graphs_per_batch=8))
    flat, idx = next(iter(loader)), loader.plan()[0]
    return ds, flat, [ds[i] for i in idx]


def _model(name, ds):
    model_class, kwargs = load_architecture(copy.deepcopy(CASES[name]), in_dims=in_dims(ds))
    torch.manual_seed(0)
    model = model_class(**kwargs).eval()
    # graphium's IPU set-up (its datamodule passes the largest graph)
    model.set_max_num_nodes_edges_per_graph(max(g.num_nodes for g in ds),
                                            max(g.edge_index.size(1) for g in ds))
    return model


def test_gps_eager_is_padding_invariant(data):
    ds, flat, graphs = data
    model = _model("gps", ds)
    ref = model(Batch.from_data_list(graphs))["tpsa"]
    out = ipu_wrap(copy.deepcopy(model))(flat)["output/tpsa"]
    torch.testing.assert_close(out[:len(graphs)], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name, findings", [
    ("gps", [TO_DENSE_INT]),
    ("nodepair", [NODEPAIR_MASK, TO_DENSE_INT]),
])
def test_ipu_paths_are_refused_naming_graphiums_line(data, name, findings):
    ds, flat, _ = data
    report = check(ipu_wrap(_model(name, ds)), flat)
    assert not report.ok
    text = str(report)
    for where in findings:
        assert re.search(where, text), text
    emu = ga_compile(ipu_wrap(_model(name, ds)).eval(), backend="ipu-emulator")
    with pytest.raises(EmulatorError, match=r"(?s)aten::item is only supported in eager mode.*"
                       + TO_DENSE_INT):
        emu({k: v.unsqueeze(0) for k, v in flat.items()})
