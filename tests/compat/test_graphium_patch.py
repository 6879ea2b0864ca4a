"""graph_adapter.compat.graphium.patch(): graphium's shape test, rewritten so that
``torch.compile(fullgraph=True)`` compiles (issue 25 item 2), on a stand-in written
like graphium's methods (graphium itself: ``.ci/graphium``)."""
import importlib.util
import math
import os
import sys

import pytest
import torch
from torch_geometric.data import Data

import graph_adapter as ga
from graph_adapter.compat import CompatError, graphium as compat

HERE = os.path.dirname(__file__)


@pytest.fixture
def standin():
    """A fresh import of tests/compat/graphium_standin.py (as a module of its own name)."""
    name = "graph_adapter_test_graphium_standin"
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, "graphium_standin.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    yield mod
    compat.unpatch()
    del sys.modules[name]


def molecules(n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        k = 2 + i % 5
        ring = torch.arange(k)
        src = torch.cat([ring, (ring + 1) % k])
        dst = torch.cat([(ring + 1) % k, ring])
        out.append(Data(x=torch.randn(k, 4, generator=g), edge_index=torch.stack([src, dst]),
                        edge_attr=torch.randn(2 * k, 3, generator=g), y=torch.randn(1, generator=g)))
    return out


def batches():
    data = molecules()
    return list(ga.FixedSizeLoader(data, ga.Budget.fit(data, 4)))


def test_patch_rewrites_exactly_the_shape_tests_and_unpatch_restores(standin):
    originals = {q: standin.__dict__[q.split(".")[0]].__dict__["forward"] for _, q in standin.TARGETS}
    done = compat.patch(standin.TARGETS)
    assert done == [f"{standin.__name__}.{q}: 1 test(s) -> math.prod" for _, q in standin.TARGETS]
    assert compat.patch(standin.TARGETS) == []  # idempotent
    for _, q in standin.TARGETS:
        new = standin.__dict__[q.split(".")[0]].__dict__["forward"]
        assert new is not originals[q] and new.__graph_adapter_original__ is originals[q]
        assert new.__qualname__ == q and new.__module__ == standin.__name__
        # the code keeps its file and its line numbers
        assert new.__code__.co_filename == originals[q].__code__.co_filename
        assert new.__code__.co_firstlineno == originals[q].__code__.co_firstlineno
        names = set(new.__code__.co_names)
        assert "as_tensor" not in names and "prod" in names, names
    assert standin._graph_adapter_math is math
    assert sorted(compat.unpatch()) == sorted(f"{standin.__name__}.{q}" for _, q in standin.TARGETS)
    for _, q in standin.TARGETS:
        assert standin.__dict__[q.split(".")[0]].__dict__["forward"] is originals[q]
    assert not hasattr(standin, "_graph_adapter_math") and compat.patched() == []


def test_patched_model_gives_the_same_values_and_empty_inputs_still_work(standin):
    model = standin.FullGraphMultiTaskNetwork()
    flat = batches()[0]
    w = ga.ipu_wrap(model)
    before = w(flat)["output"]
    empty = torch.zeros(0, 4)
    before_empty = model.pre_nn(empty)
    compat.patch(standin.TARGETS)
    torch.testing.assert_close(w(flat)["output"], before, rtol=0, atol=0)
    after_empty = model.pre_nn(empty)  # the zero-row branch (and super() inside it)
    assert after_empty.shape == before_empty.shape == (0, 8)


def test_fullgraph_compiles_once_per_mode_only_when_patched(standin):
    model = standin.FullGraphMultiTaskNetwork()
    bs = batches()
    assert len(bs) >= 2
    torch._dynamo.reset()
    with pytest.raises(Exception, match="Data-dependent branching"):
        ga.compile(ga.ipu_wrap(model), "aot_eager")(bs[0])
    compat.patch(standin.TARGETS)
    torch._dynamo.reset()
    def loss_fn(out, b):
        err = torch.where(b.graph_mask, out - torch.nan_to_num(b.y), torch.zeros_like(out))
        return err.pow(2).sum() / b.graph_mask.sum().clamp(min=1)

    w = ga.ipu_wrap(model, loss_fn=loss_fn)
    c = ga.compile(w, "aot_eager")
    counts = []
    for mode in ("eval", "train"):
        getattr(c, mode)()
        for b in bs:
            out = c(b)
            if mode == "train":
                out["loss"].backward()
            ref = getattr(w, mode)()(b)
            torch.testing.assert_close(out["output"], ref["output"])
            torch.testing.assert_close(out["loss"], ref["loss"])
            counts.append(c.compile_count)
    n = len(bs)
    # one compile in eval, none more in the mode's later batches; training adds at most one
    assert counts[:n] == [1] * n and len(set(counts[n:])) == 1 and counts[-1] <= 2, counts


def test_a_source_without_the_pattern_patches_nothing(standin):
    targets = standin.TARGETS + ((standin.__name__, "FCLayer.__init__"),)
    with pytest.raises(CompatError, match=r"FCLayer.__init__: no 'torch.prod\(torch.as_tensor"):
        compat.patch(targets)
    assert compat.patched() == []  # all or nothing
    with pytest.raises(CompatError, match="does not import"):
        compat.patch([("no_such_module_here", "X.forward")])
    with pytest.raises(CompatError, match="not found"):
        compat.patch([(standin.__name__, "NoSuchLayer.forward")])


def test_only_shape_expressions_are_rewritten():
    def f(x, y):
        a = torch.prod(torch.as_tensor(x.shape[:-1])) == 0  # rewritten
        b = torch.prod(torch.as_tensor(y)) == 0  # a tensor's values: not a shape, kept
        c = torch.prod(torch.as_tensor(x.size())) <= 1  # rewritten
        d = torch.prod(torch.as_tensor(x.shape))  # not in a comparison: kept
        return a, b, c, d

    new, count = compat.rewrite_shape_tests(f)
    assert count == 2
    x, y = torch.zeros(2, 0), torch.tensor([1, 0])
    a, b, c, d = new(x, y)
    assert a is False and c is True and isinstance(b, torch.Tensor) and bool(b)
    assert isinstance(d, torch.Tensor) and int(d) == 0
