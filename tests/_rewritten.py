"""A Dynamo graph after one of ``graph_adapter.tuning.rewrites``' rewrites (tests' helper)."""
import pytest
import torch


def rewritten_graph(model, rewrite, expected, *inputs):
    """Dynamo's graph of ``model(*inputs)`` after ``rewrite(graph)``, which must return
    ``expected`` (the count of rewrites); the graph runs as rewritten."""
    captured = []

    def backend(gm, example_inputs):
        assert rewrite(gm.graph) == expected
        captured.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(model, backend=backend, fullgraph=True)(*inputs)
    return captured[0].graph


def compiled_equals_eager(base, flat, grad_rtol=1e-10):
    """``base`` (float64) wrapped with an L1 loss, compiled with inductor (caches off: a
    hit would skip the passes) and run on ``flat``: outputs and every parameter's
    gradient equal the eager wrapper's. Returns ``(eager, wrapped)`` after the call."""
    import copy

    import graph_adapter as ga

    eager = ga.ipu_wrap(copy.deepcopy(base), loss_fn=ga.masked_loss("l1"))
    wrapped = ga.ipu_wrap(copy.deepcopy(base), loss_fn=ga.masked_loss("l1"))
    compiled = ga.compile(wrapped, "inductor", options={"force_disable_caches": True})
    out, ref = compiled(flat), eager(flat)
    torch.testing.assert_close(out["output"], ref["output"], rtol=1e-10, atol=1e-10)
    grads = torch.autograd.grad(out["loss"], list(wrapped.parameters()))
    ref_grads = torch.autograd.grad(ref["loss"], list(eager.parameters()))
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=grad_rtol, atol=1e-10)
    return eager, wrapped


def count_rewrite(name, request):
    """A list that each run of registry rewrite ``name`` appends its count to, for the
    rest of the test (``request``: pytest's fixture; the rewrite is swapped through
    ``graph_adapter.tuning.registry.replaced`` and put back at the test's end)."""
    registry = pytest.importorskip("graph_adapter.tuning.registry")  # (the tuning wing)

    counts = []
    orig = registry.entry(name).run
    swap = registry.replaced(name, lambda g: counts.append(orig(g)) or counts[-1])
    swap.__enter__()
    request.addfinalizer(lambda: swap.__exit__(None, None, None))
    return counts
