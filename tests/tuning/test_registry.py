"""graph_adapter.tuning.registry: one table of rewrites and settings, each verified on
named torch releases; an unverified one is off with one log line, never a crash."""
import dataclasses
import logging

import pytest
import torch
from torch import nn

import graph_adapter as ga
from graph_adapter.tuning import registry, rewrite_exported


def test_every_entry_says_what_it_does_where_it_runs_and_where_it_was_verified():
    names = [e.name for e in registry.entries()]
    assert len(names) == len(set(names)) >= 15
    for e in registry.entries():
        assert len(e.doc) > 80 and "pplies" in e.doc, e.name  # what it does, when it applies
        assert e.verified_on and all(v.count(".") == 1 for v in e.verified_on), e.name
        assert (e.run is None) == (e.points == ("config",)), e.name
    post = [e.name for e in registry.entries("post_grad")]
    assert post.index("unfuse_bias_addmm") < post.index("project_before_aggregate") \
        < post.index("transpose_thin_matmuls") < post.index("realize_recomputed_values")
    assert [e.name for e in registry.entries("exported")] == ["project_embedding_tables"]
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.entry("compose_linears"))
    with pytest.raises(KeyError, match="registered"):
        registry.entry("no_such_rewrite")


def test_the_cache_key_names_the_enabled_entries_and_versions():
    key = registry.cache_key()
    assert "compose_linears.v1" in key and "unfuse_bias_addmm.v1" in key
    assert "unfuse_bias_addmm" not in registry.cache_key("post_grad", cpu_inference=False)
    with registry.disabled("compose_linears"):
        assert "compose_linears" not in registry.cache_key() and not registry.enabled(
            "compose_linears")
    assert registry.enabled("compose_linears")
    with registry.replaced("compose_linears", lambda g: 0):
        assert "compose_linears.v1.swapped" in registry.cache_key("pre_grad")


def _unverified(monkeypatch, name):
    """Entry ``name`` as if verified on no torch but an old one (its log line not yet said)."""
    e = registry.entry(name)
    monkeypatch.setitem(registry._ENTRIES, name, dataclasses.replace(e, verified_on=("1.0",)))
    monkeypatch.setattr(registry, "_LOGGED", set())
    monkeypatch.delenv("GRAPH_ADAPTER_TUNING_UNVERIFIED", raising=False)


def test_an_unverified_entry_is_off_and_says_so_once(monkeypatch, caplog):
    _unverified(monkeypatch, "transpose_thin_matmuls")
    with caplog.at_level(logging.WARNING, logger="graph_adapter.tuning"):
        assert not registry.enabled("transpose_thin_matmuls")
        assert "transpose_thin_matmuls" not in registry.cache_key()
        gm = torch.fx.symbolic_trace(lambda a, b: torch.mm(a, b))
        assert "transpose_thin_matmuls" not in registry.run_point("post_grad", gm.graph)
        # the others stay as they were (on where this torch is one they were verified on)
        on = registry.torch_release() in registry.entry("dedupe_pure_ops").verified_on
        assert registry.enabled("dedupe_pure_ops") == on
    lines = [r for r in caplog.records if "transpose_thin_matmuls" in r.getMessage()]
    assert len(lines) == 1 and "not verified on torch" in lines[0].getMessage()
    assert registry.torch_release() in lines[0].getMessage()
    monkeypatch.setenv("GRAPH_ADAPTER_TUNING_UNVERIFIED", "1")  # verify it on a new torch
    assert registry.enabled("transpose_thin_matmuls")


def test_torch_release_is_major_minor():
    assert registry.torch_release("2.15.0+cu132") == "2.15"
    assert registry.torch_release("2.13.1") == "2.13"
    assert registry.torch_release() == ".".join(torch.__version__.split(".")[:2])


class _Encode(nn.Module):
    """A linear of a narrow linear (compose_linears' case) and a thin head."""

    def __init__(self):
        super().__init__()
        self.inner, self.outer, self.head = nn.Linear(3, 32), nn.Linear(32, 32), nn.Linear(32, 4)

    def forward(self, x):
        return self.head(torch.relu(self.outer(self.inner(x))))


@pytest.mark.slow  # two small inductor compiles (~15 s)
def test_compiled_with_an_unverified_rewrite_it_is_off_and_the_result_is_right(monkeypatch,
                                                                               caplog):
    from graph_adapter.backends import EngineSettings
    from graph_adapter.tuning.inductor import compile_graph

    torch.manual_seed(0)
    model, x = _Encode().double(), torch.randn(64, 3, dtype=torch.float64)
    settings = EngineSettings("inductor", {"force_disable_caches": True})
    fired = []

    def backend(gm, inputs):
        done = compile_graph(gm, inputs, settings)
        fired.append(done.rewrites)
        return done.fn

    torch._dynamo.reset()
    with torch.no_grad():
        assert torch.compile(model, backend=backend, fullgraph=True)(x) is not None
    assert fired[-1].get("compose_linears") == 1  # verified here: it fires
    _unverified(monkeypatch, "compose_linears")
    with caplog.at_level(logging.WARNING, logger="graph_adapter.tuning"):
        for _ in range(2):
            torch._dynamo.reset()
            with torch.no_grad():
                out = torch.compile(model, backend=backend, fullgraph=True)(x)
            torch.testing.assert_close(out, model(x), rtol=1e-10, atol=1e-10)
            assert "compose_linears" not in fired[-1]
    assert sum("compose_linears" in r.getMessage() for r in caplog.records) == 1
    torch._dynamo.reset()


class _GIN(nn.Module):
    def __init__(self):
        super().__init__()
        from torch_geometric.nn import GIN

        self.gnn = GIN(3, 16, 2, out_channels=2)

    def forward(self, x, edge_index, batch):
        from torch_geometric.nn import global_add_pool

        return global_add_pool(self.gnn(x, edge_index), batch)


@pytest.mark.slow  # one inductor compile of a small inference graph
def test_compiled_stats_list_the_rewrites_that_fired():
    from torch_geometric.datasets import FakeDataset

    torch.manual_seed(0)
    graphs = list(FakeDataset(num_graphs=20, avg_num_nodes=10, num_channels=3, num_classes=2))
    flat = next(iter(ga.FixedSizeLoader(graphs, ga.Budget.fit(graphs, 8))))
    wrapped = ga.ipu_wrap(_GIN()).eval()
    compiled = ga.compile(wrapped, "inductor", options={"force_disable_caches": True})
    assert compiled.stats.rewrites == {}
    with torch.no_grad():
        out, ref = compiled(flat)["output"], wrapped(flat)["output"]
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    fired = compiled.stats.rewrites
    assert fired.get("transpose_thin_matmuls", 0) >= 1, fired
    assert all(isinstance(v, int) and v > 0 for v in fired.values())
    assert "transpose_thin_matmuls x" in compiled.stats.summary()


def test_rewrite_exported_runs_the_exported_point_and_says_what_fired():
    class Tables(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Embedding(5, 16), nn.Embedding(7, 16)
            self.lin = nn.Linear(16, 16)

        def forward(self, i, j):
            return self.lin(self.a(i) + self.b(j))

    m = Tables()
    i, j = torch.randint(0, 5, (100,)), torch.randint(0, 7, (100,))
    ep = torch.export.export(m, (i, j))
    gm = ep.graph_module
    assert rewrite_exported(gm) == {"project_embedding_tables": 1}
    with registry.disabled("project_embedding_tables"):
        assert rewrite_exported(torch.export.export(m, (i, j)).graph_module) == {}
