"""``graph-adapter demo --task node``: a tiny run end to end, and the SBM generator."""
from __future__ import annotations

import json
import sys

import torch

from graph_adapter.app.cli import main
from graph_adapter.app.demo.node import NodeDemoConfig, node_config_from_args, sbm_graph


def test_sbm_graph_is_undirected_class_correlated_and_seeded():
    d = sbm_graph(400, classes=4, out_degree=5, signal=1.0, dim=8, seed=3)
    ei = d.edge_index
    assert d.x.shape == (400, 8) and d.y.shape == (400,)
    fwd = set(map(tuple, ei.t().tolist()))
    assert all((v, u) in fwd for u, v in fwd)  # undirected
    same = float((d.y[ei[0]] == d.y[ei[1]]).float().mean())
    assert same > 0.7  # 80% of the drawn edges stay inside their block (4 blocks: 25% by chance)
    assert 8 < ei.size(1) / 400 < 12  # average degree about 2 x out_degree
    e = sbm_graph(400, classes=4, out_degree=5, signal=1.0, dim=8, seed=3)
    assert torch.equal(d.edge_index, e.edge_index) and torch.equal(d.x, e.x)


def test_demo_task_node_runs_tiny_and_reports_both_runs(tmp_path, capsys):
    out = tmp_path / "node.json"
    rc = main(["demo", "--task", "node", "--nodes", "600", "--epochs", "1", "--hidden", "16",
               "--backend", "eager", "--quiet", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "graph_adapter demo --task node" in text
    assert "eager PyG batches:" in text and "test accuracy" in text
    # where the OS counts them (not Windows), each run's page faults of a pass, explained
    counted = sys.platform != "win32"
    assert ("page faults an inference pass [3]" in text) == counted
    assert ("[3] minor page faults of this process" in text) == counted
    res = json.loads(out.read_text())
    names = [r["name"] for r in res["runs"]]
    assert names == ["graph_adapter", "eager PyG"]
    assert res["num_train"] == 300 and res["num_test"] == 150
    for r in res["runs"]:
        assert 0.0 <= r["test_accuracy"] <= 1.0 and r["train_seeds_per_s"] > 0
        assert r["infer_seeds_per_s"] > 0
        assert (r["infer_page_faults"] is not None) == counted
        assert r["infer_page_faults"] is None or r["infer_page_faults"] >= 0
    assert 0 < res["node_efficiency"] <= 1 and res["batches"] == 2
    assert res["config"]["hidden"] == 16 and res["config"]["epochs"] == 1


def test_node_flags_shared_with_the_molecule_demo_keep_node_defaults():
    from graph_adapter.app.cli import build_parser

    args = build_parser().parse_args(["demo", "--task", "node"])
    cfg = node_config_from_args(args)
    d = NodeDemoConfig()
    assert (cfg.epochs, cfg.hidden, cfg.layers, cfg.lr, cfg.nodes, cfg.infer_rounds) == (
        d.epochs, d.hidden, d.layers, d.lr, d.nodes, d.infer_rounds)
    args = build_parser().parse_args(["demo", "--task", "node", "--epochs", "3", "--nodes", "900",
                                      "--infer-rounds", "5"])
    cfg = node_config_from_args(args)
    assert cfg.epochs == 3 and cfg.nodes == 900 and cfg.infer_rounds == 5


def test_demo_task_node_refuses_a_graph_too_small_for_a_batch(capsys):
    assert main(["demo", "--task", "node", "--nodes", "100", "--quiet"]) == 2
    assert "--nodes >= 512" in capsys.readouterr().err
