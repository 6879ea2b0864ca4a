"""benchmarks/bench_node_ceiling.py's hand-written models compute what the node demo's
GraphSAGE computes (so its timings compare the same math), and its tables hold every
real in-edge once (eager here: the compiles are the benchmark's)."""
from __future__ import annotations

import importlib.util
import os
import warnings

import pytest
import torch

from graph_adapter.app.demo.node import NodeDemoConfig, make_graph, make_model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _bench():
    path = os.path.join(ROOT, "benchmarks", "bench_node_ceiling.py")
    spec = importlib.util.spec_from_file_location("bench_node_ceiling", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def setting():
    cfg = NodeDemoConfig(nodes=600, hidden=16, batch_size=48, progress=False)
    g = make_graph(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batches = list(g.test_loader)
    plain = make_model(cfg).eval()
    c1, c2 = plain.convs
    W = {k: t.detach() for k, t in dict(
        l1=c1.lin_l.weight, b1=c1.lin_l.bias, r1=c1.lin_r.weight,
        l2=c2.lin_l.weight, b2=c2.lin_l.bias, r2=c2.lin_r.weight).items()}
    return cfg, batches, plain, W


def test_hand_written_models_equal_the_plain_model_on_real_rows(setting):
    B = _bench()
    cfg, batches, plain, W = setting
    P = cfg.batch_size * (1 + cfg.num_neighbors[0])
    width = max(cfg.num_neighbors)
    assert len(batches) > 1
    with torch.no_grad():
        for f in batches:
            nm, em = f["node_mask"], f["edge_mask"]
            ref = plain(f["x"][nm], f["edge_index"][:, em])
            N = f["x"].shape[0]
            rows = min(P, N)
            outs = {
                "scatter": B.scatter_sage(f["x"], f["edge_index"], **W),
                "ell": B.ell_sage(f["x"], *B.ell_tables(f, rows, width, edge_ids=False), **W),
                "edge ids": B.ell_edge_sage(f["x"], f["edge_index"][0],
                                            *B.ell_tables(f, rows, width, edge_ids=True), **W),
                "all rows": B.ell_edge_sage(f["x"], f["edge_index"][0],
                                            *B.ell_tables(f, N, width, edge_ids=True), **W),
            }
            for name, out in outs.items():
                assert out.shape == (N, cfg.classes), name
                torch.testing.assert_close(out[nm], ref, atol=1e-5, rtol=1e-5, msg=name)


def test_tables_hold_each_real_in_edge_once(setting):
    B = _bench()
    cfg, batches, _, _ = setting
    width = max(cfg.num_neighbors)
    f = batches[0]
    N, E = f["x"].shape[0], f["edge_index"].shape[1]
    table, inv = B.ell_tables(f, N, width, edge_ids=True)
    real = table[table < E]
    assert sorted(real.tolist()) == torch.nonzero(f["edge_mask"]).flatten().tolist()
    # each id sits in its target's row
    rows = torch.arange(N).unsqueeze(1).expand_as(table)[table < E]
    assert torch.equal(f["edge_index"][1][real], rows)
    deg = (table < E).sum(1).clamp(min=1).float()
    torch.testing.assert_close(inv.squeeze(1), 1.0 / deg)
    # an in-edge past the prefix is an error that names the row, not a silently lost edge
    top = int(f["edge_index"][1][f["edge_mask"]].max())
    with pytest.raises(ValueError, match=f"targets row {top}"):
        B.ell_tables(f, top, width, edge_ids=True)
