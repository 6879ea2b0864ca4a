"""The compile core without its tuning wing: slower, not broken.

``graph_adapter.tuning`` is optional (``docs/dev/ARCHITECTURE.md``): the main job,
the README's training snippet, runs with the wing blocked from importing and with
``GRAPH_ADAPTER_TUNING=0``, and trains as the eager wrapper does.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: a meta-path finder that makes ``graph_adapter.tuning`` (and its modules) missing
_BLOCK = textwrap.dedent("""
    import sys

    class _NoTuning:
        def find_spec(self, name, path=None, target=None):
            if name == "graph_adapter.tuning" or name.startswith("graph_adapter.tuning."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, _NoTuning())
""")

_MAIN_JOB = _BLOCK + textwrap.dedent("""
    import copy, json
    import torch
    from torch_geometric.datasets import FakeDataset
    from torch_geometric.nn import GIN, global_add_pool
    import graph_adapter as ga
    from graph_adapter.backends import active_tuner

    class Net(torch.nn.Module):  # the README's model
        def __init__(self):
            super().__init__()
            self.gnn, self.head = GIN(8, 32, num_layers=2), torch.nn.Linear(32, 1)

        def forward(self, x, edge_index, batch):
            return self.head(global_add_pool(self.gnn(x, edge_index), batch))

    torch.manual_seed(0)
    dataset = FakeDataset(num_graphs=64, avg_num_nodes=12, avg_degree=3, num_channels=8,
                          num_classes=0, y=1)
    model = Net()
    budget = ga.Budget.fit(dataset, graphs_per_batch=16)
    batches = list(ga.FixedSizeLoader(dataset, budget))[:3]
    wrapped = ga.ipu_wrap(model, loss_fn=ga.masked_loss("mse"))
    eager = copy.deepcopy(wrapped)
    step = ga.compile(wrapped, backend="inductor")
    opt = torch.optim.Adam(wrapped.parameters())
    ref_opt = torch.optim.Adam(eager.parameters())
    losses, diffs = [], []
    for flat in batches:
        out, ref = step(flat), eager(flat)
        diffs.append(float((out["output"] - ref["output"]).abs().max()))
        losses.append([float(out["loss"]), float(ref["loss"])])
        for o, l in ((opt, out["loss"]), (ref_opt, ref["loss"])):
            o.zero_grad(); l.backward(); o.step()
    print("RESULT " + json.dumps({
        "tuning_imported": any(m.startswith("graph_adapter.tuning") for m in sys.modules),
        "tuner": active_tuner() is not None, "compiles": step.compile_count,
        "rewrites": step.stats.rewrites, "losses": losses, "diffs": diffs,
        "params": max(float((a - b).abs().max()) for a, b in
                      zip(wrapped.parameters(), eager.parameters()))}))
""")

_REFUSALS = textwrap.dedent("""
    import json, torch
    import graph_adapter as ga
    from graph_adapter.backends import active_tuner, precompiled_counts

    wrapped = ga.ipu_wrap(torch.nn.Linear(2, 2))
    said = {}
    for arg in ("precompile", "background"):
        try:
            ga.compile(wrapped, "inductor", **{arg: True})
        except ValueError as exc:
            said[arg] = str(exc)
    from graph_adapter.tuning import rewrite_exported
    print("RESULT " + json.dumps({
        "tuner": active_tuner() is not None, "said": said, "counts": precompiled_counts(),
        "stats": ga.compile(wrapped, "inductor").stats.background,
        "exported": rewrite_exported(torch.fx.symbolic_trace(torch.nn.Linear(2, 2)))}))
""")


def _run(code, **env):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600, cwd=ROOT, env={**os.environ, **env})
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


@pytest.mark.slow  # one inductor compile of a training step in a fresh process (~30 s)
@pytest.mark.extended  # (CI's second step: the main suite stays under 10 minutes)
def test_the_main_job_trains_with_the_tuning_wing_missing_and_switched_off():
    r = _run(_MAIN_JOB, GRAPH_ADAPTER_TUNING="0")
    assert not r["tuning_imported"] and not r["tuner"]
    assert r["compiles"] >= 1 and r["rewrites"] == {}  # inductor as it is: no rewrite ran
    assert max(r["diffs"]) < 1e-4 and r["params"] < 1e-4, r
    for ours, ref in r["losses"]:
        assert abs(ours - ref) <= 1e-4 * max(1.0, abs(ref)), r


def test_switched_off_the_wing_registers_nothing_and_its_arguments_say_so():
    r = _run(_REFUSALS, GRAPH_ADAPTER_TUNING="0")
    assert not r["tuner"] and r["counts"] == [0, 0] and r["stats"] is None
    assert r["exported"] == {}
    for arg in ("precompile", "background"):
        assert f"{arg}=True) needs graph_adapter.tuning" in r["said"][arg]
