"""Compile once, really: a second process compiling the same model and budget hits
inductor's FX graph cache for every graph (training forward and backward with the
``index_add`` fallback, and inference) and AOTAutograd's cache for both modes (the
HYB layout's autograd.Functions included), and the decomposition table pickles by
its recipe, so the cache key is stable; the second process also skips inductor's
host checks (ISA probes, header preprocessing: ``backends/_host_checks.py``)."""
import os
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch

from graph_adapter.tuning import cpu_settings as I

aten = torch.ops.aten


def test_decomposition_table_pickles_by_its_recipe():
    """The table inductor puts into its cache key pickles (it did not: a pybind11 entry)
    and comes back as the same table; the pickle names the setting and the version."""
    table = I.decompositions(True)
    assert isinstance(table, I.DecompositionTable)
    blob = pickle.dumps(table)
    assert b"_rebuild_table" in blob
    back = pickle.loads(blob)
    assert set(back) == set(table)
    assert back[aten.index_put.default] is I._index_put_as_index_add
    assert pickle.dumps(I.decompositions(True)) == blob  # stable: same bytes every time


def test_inductor_cache_key_of_the_fallback_table_is_stable():
    """Inductor's own cache pickler (the one that raised the bypass) accepts the table."""
    from torch._inductor.codecache import FxGraphCachePickler
    from torch._inductor.compile_fx import _ConstantDecompTable

    pickler = FxGraphCachePickler(torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph()))
    one = pickler.dumps({"get_decomp_fn": _ConstantDecompTable(I.decompositions(True))})
    two = pickler.dumps({"get_decomp_fn": _ConstantDecompTable(I.decompositions(True))})
    assert one == two


_CHILD = textwrap.dedent("""
    import json, subprocess, sys
    # count inductor's host checks: the ISA probes start `python -c`, the header check `g++ -E`
    host_checks = {"isa_probes": 0, "header_preprocess": 0}
    _run = subprocess.run

    def _counting_run(cmd, *args, **kwargs):
        if isinstance(cmd, (list, tuple)) and cmd:
            if cmd[0] == sys.executable:
                host_checks["isa_probes"] += 1
            elif "-E" in cmd:
                host_checks["header_preprocess"] += 1
        return _run(cmd, *args, **kwargs)

    subprocess.run = _counting_run
    import torch
    from torch._dynamo.utils import counters
    from torch_geometric.nn import GINConv, global_add_pool
    import graph_adapter.backends as B
    from graph_adapter.batching.budget import Budget
    from graph_adapter.batching.loader import FixedSizeLoader
    from graph_adapter.nn.losses import masked_mse_loss
    from graph_adapter.nn.wrap import ipu_wrap
    from _padding import random_graphs

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 8)
            self.conv = GINConv(torch.nn.Linear(8, 8))
            self.head = torch.nn.Linear(8, 1)

        def forward(self, x, edge_index, batch):
            h = self.conv(self.lin(x), edge_index).relu()
            return self.head(global_add_pool(h, batch))

    torch.manual_seed(0)
    graphs = random_graphs(torch.Generator().manual_seed(3), 12)
    budget = Budget(nodes=96, edges=192, graphs=16)
    # HYB at width 1: the layout's autograd.Functions and its spill lists are in the graphs
    flat = next(iter(FixedSizeLoader(graphs, budget, shuffle=False, layout="hyb",
                                     layout_widths=(1, 1))))
    loss = lambda out, b: masked_mse_loss(out, b.y, b.graph_mask)
    wrapped = ipu_wrap(Net(), loss_fn=loss).train()
    c = B.compile(wrapped, "inductor", index_add_fallback=True)
    loss = c(flat)["loss"]
    loss.backward()
    c.eval()
    with torch.no_grad():
        out = c(flat)["output"]
    grads = [float(p.grad.double().sum()) for p in wrapped.parameters()]
    print("COUNTERS " + json.dumps({"inductor": dict(counters["inductor"]),
                                    "aot": dict(counters["aot_autograd"]),
                                    "host_checks": host_checks,
                                    "values": [float(loss), float(out.double().sum())] + grads}))
""")


def _run_child(cache_dir: str, tests_dir: str) -> dict:
    """Run :data:`_CHILD` in a fresh process on ``cache_dir``; its counters and values."""
    import json

    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache_dir, TORCHINDUCTOR_COMPILE_THREADS="1",
               PYTHONPATH=os.pathsep.join([tests_dir, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("COUNTERS ")][-1]
    return json.loads(line[len("COUNTERS "):])


@pytest.mark.slow
@pytest.mark.extended  # ~8-35 s: CI's second step runs it (setup.cfg)
def test_second_process_hits_the_fx_graph_cache(tmp_path):
    """Two fresh processes, one temp cache, a HYB batch with the ``index_add`` fallback:
    the first misses for its three graphs (training forward, backward, inference) and
    bypasses no cache; the second hits all three in inductor's FX graph cache and both
    graphs in AOTAutograd's, and computes the same loss, outputs and gradients."""
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    first = _run_child(str(tmp_path), tests_dir)
    assert first["inductor"].get("fxgraph_cache_bypass", 0) == 0, first
    assert first["inductor"].get("fxgraph_cache_miss", 0) == 3, first
    assert first["aot"].get("autograd_cache_bypass", 0) == 0, first
    second = _run_child(str(tmp_path), tests_dir)
    assert second["inductor"].get("fxgraph_cache_bypass", 0) == 0, second
    assert second["inductor"].get("fxgraph_cache_hit", 0) == 3, second
    assert second["inductor"].get("fxgraph_cache_miss", 0) == 0, second
    assert second["aot"].get("autograd_cache_hit", 0) == 2, second
    assert second["values"] == first["values"]
    # the host checks are answered from records (backends/_host_checks): the first
    # process's, or, for the ISA checks, this machine's (machine-wide: a fresh cache dir
    # probes only where no earlier process on the machine passed them; test_host_checks)
    assert second["host_checks"] == {"isa_probes": 0, "header_preprocess": 0}, second
