"""The "models" table compares like with like: every model of the table, wrapped and
fed a padded batch, gives eager PyG's outputs on the real graphs; the measuring code
runs end to end (with the cheap ``"eager"`` backend: no timing is asserted)."""
import math

import pytest
import torch
from torch_geometric.data import Batch

from benchmarks.harness import model_table as M
from graph_adapter.batching import Budget
from graph_adapter.batching import FixedSizeLoader
from graph_adapter.nn import ipu_wrap, unpad

pytest.importorskip("rdkit")


@pytest.fixture(scope="module")
def molecules():
    from graph_adapter.app.datasets import load_nci5k

    data, _ = load_nci5k(limit=48)
    for d in data:
        del d.smiles
    return data


@pytest.mark.parametrize("name", sorted(M.MODELS))
def test_wrapped_model_equals_eager_pyg_on_real_graphs(name, molecules):
    layout = M.MODELS[name][2]() if callable(M.MODELS[name][2]) else M.MODELS[name][2]
    budget = Budget.fit(molecules, 16)
    flat = next(iter(FixedSizeLoader(molecules, budget, shuffle=False, layout=layout)))
    real = int(flat["graph_mask"].sum())
    model = M.build(name).eval()
    want = model(Batch.from_data_list(molecules[:real]))
    got = unpad(ipu_wrap(model).eval()(flat), flat)["output"]
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_measure_model_and_table_run(molecules):
    budget = Budget.fit(molecules, 16)
    res = {name: M.measure_model(name, molecules, budget, batch=16, rounds=1, backend="eager")
           for name in ("gcn", "demo")}
    for r in res.values():
        assert r["train"] > 0 and r["infer"] > 0 and r["compiles"] == 2
    assert res["demo"]["layout"] == "hyb" and res["gcn"]["layout"] is None
    text = M.table(res)
    assert "| geomean |" in text and "GCN 3x64" in text


def test_geomean_and_unknown_model():
    assert math.isclose(M.geomean([2.0, 8.0]), 4.0)
    assert math.isnan(M.geomean([]))
    with pytest.raises(KeyError, match="choose from"):
        M.build("nope")
