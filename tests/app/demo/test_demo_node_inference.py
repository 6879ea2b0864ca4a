"""The node demo's inference: its compiled model (the module wrapped without the loss,
serial generated kernels on the CPU) and its inference batch size, which must not change
what the model computes."""
from __future__ import annotations

import warnings

import pytest
import torch

import graph_adapter as ga
from graph_adapter.app.demo.node import (INFER_LAYOUT, INFER_OPTIONS, NodeDemoConfig,
                                         infer_layout, inference_model, inference_options,
                                         make_graph, make_model, run_node_demo)
from graph_adapter.backends.select import drop_layout_tables
from graph_adapter.nn import masked_cross_entropy

TINY = dict(nodes=600, epochs=1, hidden=16, progress=False, infer_rounds=1)


def _wrapped(cfg: NodeDemoConfig):
    return ga.ipu_wrap(make_model(cfg), loss_fn=lambda out, b: masked_cross_entropy(
        out, b["y"], b["seed_mask"]))


def test_inference_model_wraps_the_same_module_without_the_loss():
    cfg = NodeDemoConfig(**TINY)
    wrapped = _wrapped(cfg)
    for backend, options in (("eager", {}), ("aot_eager", {}),
                             ("inductor", INFER_OPTIONS[INFER_LAYOUT])):
        trained = ga.compile(wrapped, backend)
        infer = inference_model(wrapped, backend, trained)
        assert infer is not trained and infer.backend == backend
        assert infer.wrapped.model is wrapped.model  # the trained parameters, the same mode
        assert infer.wrapped.loss_fn is None and wrapped.loss_fn is not None
        assert inference_options(wrapped, backend) == options
    # PyG's scatter path: generated loops on one thread; the source tables: none left
    assert INFER_LAYOUT == "sources" and INFER_OPTIONS["sources"] == {}
    assert inference_options(wrapped, "inductor", None) == {"cpp.threads": 1}
    assert inference_options(wrapped, "inductor", "hyb") == {"cpp.threads": 1}
    assert infer_layout("inductor") == "sources" and infer_layout("ipu-emulator") is None
    keep = object()  # an IPU backend's model serves inference itself (poptorch's runner)
    assert inference_model(wrapped, "ipu-emulator", keep) is keep
    # eager: the loss-free wrapper returns the training wrapper's outputs, and no loss
    g = make_graph(cfg)
    flat = next(iter(g.test_loader))
    trained, infer = ga.compile(wrapped, "eager"), inference_model(wrapped, "eager", None)
    trained.eval(), infer.eval()
    with torch.no_grad():
        a, b = trained(flat), infer(flat)
    assert "loss" in a and sorted(b) == ["output"]
    assert torch.equal(a["output"], b["output"])


def test_demo_infer_batch_size_batches_both_sides_alike_and_says_so():
    cfg = NodeDemoConfig(**TINY, backend="eager", infer_batch_size=150)
    g = make_graph(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trims: counted, not the point here
        batches = list(g.test_loader)
    assert len(batches) == 1 and int(batches[0]["seed_mask"].sum()) == 150
    assert g.test_loader.budget != g.loader.budget  # fitted for 150 seeds, not 256
    res = run_node_demo(cfg)
    assert res.infer_options == {} and res.infer_without_loss  # eager: no inductor options
    text = res.report()
    assert "inference batches of 150 seeds, a budget of their own" in text
    assert "(150 a batch, both runs)" in text
    assert all(r.infer_seeds_per_s > 0 for r in res.runs)
    # default: the training budget's shape, shared
    g0 = make_graph(NodeDemoConfig(**TINY))
    assert g0.test_loader.budget == g0.loader.budget


@pytest.mark.extended  # two inductor compiles of the eval graph: ~10-20 s on 2 cores
def test_inference_settings_compute_what_the_training_settings_and_eager_compute():
    """The inference model (no loss; on test batches with each row's in-edge sources,
    gathered instead of scattered, the last layer projected first; and on PyG's scatter
    path with INFER_OPTIONS: inductor's loops on one thread, the scatter-add fused)
    changes how the outputs are computed, not what they are: on every test batch, at 2
    torch threads, the real rows equal the training model's compile's and the plain
    model's on the unpadded subgraph."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        cfg = NodeDemoConfig(**TINY)
        g = make_graph(cfg)
        wrapped = _wrapped(cfg)
        plain = make_model(cfg).eval()
        plain.load_state_dict(wrapped.model.state_dict())
        default = ga.compile(wrapped, "inductor")
        infer = inference_model(wrapped, "inductor", default)
        scatter = inference_model(wrapped, "inductor", default, None)
        infer.eval(), scatter.eval()
        assert g.test_loader.layout == "sources"
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            for flat in g.test_loader:
                nm, em = flat["node_mask"], flat["edge_mask"]
                bare = drop_layout_tables(flat)
                got = infer(flat)["output"][nm]
                ref = plain(flat["x"][nm], flat["edge_index"][:, em])
                torch.testing.assert_close(got, default(bare)["output"][nm])
                torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
                torch.testing.assert_close(scatter(bare)["output"][nm], ref,
                                           rtol=1e-5, atol=1e-5)
        assert infer.compile_count == 1 and not infer.atomic_adds
        assert scatter.compile_count == 1 and not scatter.atomic_adds
    finally:
        torch.set_num_threads(threads)


def test_inference_rounds_run_each_run_its_passes_in_a_row_and_take_their_median(monkeypatch):
    """Rounds interleave the runs; within a round a run's passes run back to back and the
    round's time is their median (a pass in steady state), so one slow pass in a round
    (the first after the other run's) does not set the rate. Each run's page faults are
    counted a pass (a fake counter here: ``a``'s passes fault 10 times, ``b``'s 1000)."""
    from graph_adapter.app.demo import node
    from graph_adapter.app.demo.node import NodeRun, _time_inference

    calls = []
    faults = [0]
    monkeypatch.setattr(node, "minor_faults", lambda: faults[0])

    def infer_of(name, secs):
        it = iter(secs)

        def infer():
            calls.append(name)
            faults[0] += 10 if name == "a" else 1000
            return 9, 10, next(it)
        return infer

    a, b = NodeRun(name="a"), NodeRun(name="b")
    # warm-up, then two rounds of three passes: a's first pass of each round is slow
    ta = [5.0, 9.0, 1.0, 1.2, 8.0, 1.1, 1.3]
    tb = [5.0, 2.0, 2.2, 2.1, 2.4, 2.3, 2.5]
    _time_inference([(a, infer_of("a", ta)), (b, infer_of("b", tb))], rounds=2, num_test=100,
                    progress=False, passes=3)
    assert calls == ["a", "b"] + ["a"] * 3 + ["b"] * 3 + ["a"] * 3 + ["b"] * 3
    # round medians: a 1.2, 1.3 -> the median of two rounds is the upper one (1.3)
    assert a.infer_seeds_per_s == pytest.approx(100 / 1.3)
    assert b.infer_seeds_per_s == pytest.approx(100 / 2.4)
    assert a.test_accuracy == b.test_accuracy == 0.9
    assert (a.infer_page_faults, b.infer_page_faults) == (10, 1000)
