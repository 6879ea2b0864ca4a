"""The GPU path, tested on CPU where it can be (issue 14, item 7).

* ``FixedSizeLoader(..., device=)`` / ``format.to_device``: batches moved with
  ``non_blocking`` copies, keys, dtypes and shapes unchanged (checked with the
  ``meta`` device, which every torch build has);
* ``compile(..., "inductor_cudagraphs")``: refuses a model that is not on a
  CUDA device (inductor would silently run without graphs), and otherwise
  passes CUDA graphs to inductor and marks a new step on every call (checked
  with the compiler stubbed out: no GPU here).

What a GPU run measures is in docs/benchmarks.md ("On a GPU"): nothing yet.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given
from torch.overrides import TorchFunctionMode
from torch_geometric.nn import GCNConv, global_add_pool

import graph_adapter as ga
from graph_adapter import backends
from graph_adapter.backends import engines, registry
from graph_adapter.format import OUTPUT_KEY, to_device

from strategies import graph_lists


class _RecordTo(TorchFunctionMode):
    """Records the keyword arguments of every ``Tensor.to`` call."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.to:
            self.calls.append(dict(kwargs))
        return func(*args, **kwargs)


def _signature(flat):
    return {k: (v.dtype, tuple(v.shape)) for k, v in flat.items()}


@given(graph_lists(min_size=1, max_size=5))
def test_batches_moved_to_a_device_keep_every_key_dtype_and_shape(graphs):
    budget = ga.Budget.tight(graphs, 2)
    host = list(ga.FixedSizeLoader(graphs, budget, exclude=["smiles"]))
    moved = ga.FixedSizeLoader(graphs, budget, device="meta", exclude=["smiles"])
    batches = list(moved)
    assert len(batches) == len(host)
    for h, m in zip(host, batches):
        assert _signature(m) == _signature(h)
        assert {v.device.type for v in m.values()} == {"meta"}
    empty = moved.empty_batch()
    assert _signature(empty) == _signature(host[0])
    assert {v.device.type for v in empty.values()} == {"meta"}


def test_to_device_copies_without_blocking_and_names_a_value_that_is_not_a_tensor():
    flat = {"x": torch.ones(3, 2), "graph_mask": torch.ones(2, dtype=torch.bool)}
    with _RecordTo() as rec:
        out = to_device(flat, "meta")
    assert len(rec.calls) == 2 and all(c.get("non_blocking") is True for c in rec.calls)
    assert out["x"].device.type == "meta" and out["graph_mask"].dtype == torch.bool
    with pytest.raises(TypeError, match="'n'.*not a tensor"):
        to_device({**flat, "n": 3}, "meta")


def test_a_loader_without_device_leaves_batches_where_the_collator_made_them():
    from torch_geometric.data import Data
    graphs = [Data(x=torch.ones(2, 1), edge_index=torch.tensor([[0], [1]]))] * 3
    loader = ga.FixedSizeLoader(graphs, ga.Budget.tight(graphs, 2))
    with _RecordTo() as rec:
        batches = list(loader)
    assert loader.device is None and not rec.calls
    assert all(v.device.type == "cpu" for b in batches for v in b.values())


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = GCNConv(3, 8)
        self.head = torch.nn.Linear(8, 1)

    def forward(self, data):
        return self.head(global_add_pool(self.conv(data.x, data.edge_index), data.batch))


def _batches(n=3):
    from torch_geometric.data import Data
    g = torch.Generator().manual_seed(0)
    graphs = [Data(x=torch.randn(k, 3, generator=g),
                   edge_index=torch.randint(0, k, (2, 2 * k), generator=g))
              for k in (3, 5, 4, 6, 2, 7)]
    return list(ga.FixedSizeLoader(graphs, ga.Budget.fit(graphs, 2)))[:n]


def test_cudagraphs_refuses_a_model_that_is_not_on_a_cuda_device():
    wrapped = ga.ipu_wrap(_Net())
    with pytest.raises(ValueError, match="inductor_cudagraphs.*parameters are on cpu.*'cuda'"):
        ga.compile(wrapped, "inductor_cudagraphs")


def test_cudagraphs_passes_cuda_graphs_to_inductor_and_marks_a_step_every_call(monkeypatch):
    """No GPU here: the device check is told the model is on CUDA and the compiler is
    replaced by one that records its settings and runs the graph as it is."""
    seen = {}

    class Recorder:
        def __init__(self, settings):
            seen.update(name=settings.backend, options=settings.options)
            self.name, self.count, self.atomic_adds = settings.backend, 0, False
            self.rewrites = {}

        def __call__(self, gm, example_inputs):
            self.count += 1
            return gm.forward

    marks = []
    monkeypatch.setattr(engines, "_CountingBackend", Recorder)
    monkeypatch.setattr(engines, "device_of", lambda m: torch.device("cuda"))
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    torch.manual_seed(0)
    wrapped = ga.ipu_wrap(_Net()).eval()
    compiled = ga.compile(wrapped, "inductor_cudagraphs", options={"max_autotune": False})
    assert seen == {"name": "inductor",
                    "options": {"triton.cudagraphs": True, "max_autotune": False}}
    batches = _batches()
    with torch.no_grad():
        outs = [compiled(b)[OUTPUT_KEY] for b in batches]
        want = [wrapped(b)[OUTPUT_KEY] for b in batches]
    assert len(marks) == len(batches)
    assert compiled.compile_count == 1 and compiled.backend == "inductor_cudagraphs"
    for o, w in zip(outs, want):
        torch.testing.assert_close(o, w)
    # micro-batches: one step mark per call (a mark between them would let the second
    # replay overwrite the first one's outputs and saved activations)
    stacked = ga.format.stack_micro_batches(batches[:2])
    marks.clear()
    with torch.no_grad():
        out = compiled(stacked)[OUTPUT_KEY]
    assert len(marks) == 1 and out.shape[0] == 2
    torch.testing.assert_close(out[1], want[1])


def test_cudagraphs_is_a_registered_backend_with_a_help_line():
    assert "inductor_cudagraphs" in backends.backend_names()
    assert "CUDA" in registry._REGISTRY["inductor_cudagraphs"].doc


def test_the_demo_refuses_cudagraphs_before_loading_data():
    """The demo trains on the CPU: the setting fails at once, with the remedy."""
    from graph_adapter.app.preflight import DemoSettingError, check_demo_settings
    from graph_adapter.app.demo.results import DemoConfig

    with pytest.raises(DemoSettingError, match="--backend inductor"):
        check_demo_settings(DemoConfig(backend="inductor_cudagraphs"))
