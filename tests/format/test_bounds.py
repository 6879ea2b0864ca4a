"""The index bounds checked before a compiled call (``compile(check_bounds=...)``).

Code that inductor generates has no Python error for an index out of range:
on the CPU it reads or writes out of bounds (a wrong result, no error), wraps
a negative index, or throws from an OpenMP region, which ends the process. So
``Compiled`` checks the index keys of every batch first (one ``aminmax`` per
key) where the engine generates code and the batch is on the CPU, and names
the bad value as the eager path does.
"""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import graph_adapter as ga
from graph_adapter import Budget, FixedSizeLoader, ipu_wrap
from graph_adapter.format import bounds_plan, raise_for_bounds, value_problems
from graph_adapter.format import stack_micro_batches
from graph_adapter.nn import InputValueError

from strategies import hetero_graph_lists, model_graph_lists
from test_bad_inputs import Bracket, DNet, _batch_beyond, _ei_beyond, _ei_negative, _flat


def _range_problems(flat):
    """value_problems' findings that are index ranges (what a bounds plan covers)."""
    return [p for p in value_problems(flat) if "outside the valid range" in p.message]


def _break(flat, plan, pick, value_of):
    """A copy of ``flat`` with one entry of a planned key set to a bad value."""
    k, dim, row, bound = plan[pick % len(plan)]
    bad = dict(flat)
    bad[k] = flat[k].clone()
    v = bad[k] if row is None else bad[k].select(dim, row)
    pos = value_of % v.numel()
    v.view(-1)[pos] = -1 - value_of % 3 if value_of % 2 else bound + value_of % 5
    return bad, k


@given(data=model_graph_lists(min_size=1, max_size=6, nonempty_last=True), k=st.integers(1, 4),
       layout=st.sampled_from([None, "ell", "hyb"]), pick=st.integers(0, 50),
       value_of=st.integers(0, 10**6))
def test_bounds_agree_with_the_value_rules(data, k, layout, pick, value_of):
    """Loader batches pass; a batch with one index out of its range raises the
    InputValueError that value_problems names (same key, position, value)."""
    loader = FixedSizeLoader(data, Budget.fit(data, min(k, len(data))), layout=layout)
    for flat in loader:
        plan = bounds_plan(flat)
        planned = {p[0] for p in plan}
        assert "batch" in planned
        if flat["edge_index"].numel():
            assert "edge_index" in planned and (not layout or "in_slots" in planned)
        raise_for_bounds(flat, plan)  # a good batch passes
        bad, key = _break(flat, plan, pick, value_of)
        (first, *_) = _range_problems(bad)
        with pytest.raises(InputValueError) as ei:
            raise_for_bounds(bad, plan)
        assert (ei.value.key, ei.value.position, ei.value.value) == \
            (first.key, first.position, first.value)


@given(data=hetero_graph_lists(), k=st.integers(1, 3), pick=st.integers(0, 50),
       value_of=st.integers(0, 10**6))
def test_hetero_bounds_are_per_row(data, k, pick, value_of):
    """Hetero edge_index rows have the bounds of their own node types."""
    for flat in FixedSizeLoader(data, Budget.fit(data, min(k, len(data)))):
        plan = bounds_plan(flat)
        raise_for_bounds(flat, plan)
        rows = {(key, r): bound for key, _, row, bound in plan
                for r in ((0, 1) if row is None else (row,))}  # None: one bound, both rows
        for key, v in flat.items():
            if key.endswith("/edge_index") and v.numel():
                src, _, dst = key.split("/")[0].split("__")
                assert rows[(key, 0)] == flat[f"{src}/node_mask"].numel()
                assert rows[(key, 1)] == flat[f"{dst}/node_mask"].numel()
                # one aminmax where both rows share a bound, one a row otherwise
                assert sum(p[0] == key for p in plan) == (1 if rows[(key, 0)] == rows[(key, 1)]
                                                          else 2)
        if not plan:
            continue
        bad, key = _break(flat, plan, pick, value_of)
        with pytest.raises(InputValueError, match=repr(key)):
            raise_for_bounds(bad, plan)


def test_micro_batches_are_checked_with_one_plan():
    flat = _flat()
    bad = _ei_beyond(flat)[0]
    stacked = stack_micro_batches([flat, bad])
    plan = bounds_plan(stacked)
    assert plan == bounds_plan(flat)
    raise_for_bounds(stack_micro_batches([flat, flat]), plan)
    with pytest.raises(InputValueError, match="'edge_index' has the value 40 at position"):
        raise_for_bounds(stacked, plan)


# ---- which compiled models check ---------------------------------------------------
@pytest.mark.parametrize("backend, want", [("inductor", True), ("inductor_eval", True),
                                           ("aot_eager", False), ("eager", False),
                                           ("export", False)])
def test_by_default_only_generated_code_is_checked(backend, want):
    """(No compile here: the plan is chosen from the engine and the batch's device.)"""
    flat = _flat()
    compiled = ga.compile(ipu_wrap(DNet()), backend)
    assert bool(compiled._plan_bounds(flat)) is want
    assert bool(ga.compile(ipu_wrap(DNet()), backend, check_bounds=True)._plan_bounds(flat))
    assert not ga.compile(ipu_wrap(DNet()), backend, check_bounds=False)._plan_bounds(flat)
    on_meta = {k: v.to("meta") for k, v in flat.items()}  # not on the CPU: off by default
    assert not compiled._plan_bounds(on_meta)


def test_check_bounds_true_names_what_aten_would_wrap_silently():
    """A negative index read with x[idx] wraps without an error in ATen too:
    check_bounds=True names it on any in-process backend."""
    flat = _flat()
    bad, key, pos, value = _ei_negative(flat)
    quiet = ga.compile(ipu_wrap(Bracket()), "aot_eager")
    quiet(bad)  # no error: the wrapped value is read
    checked = ga.compile(ipu_wrap(Bracket()), "aot_eager", check_bounds=True)
    with pytest.raises(InputValueError) as ei:
        checked(bad)
    assert (ei.value.key, ei.value.position, ei.value.value) == (key, pos, value)
    assert checked.compile_count == 0  # raised before any compile


def test_the_poptorch_runner_checks_host_batches():
    """Inside a poptorch model values cannot be read (the emulated module raises on a
    read): the runner checks the host batch first, bounds by default, every rule with
    check_inputs="values" (and the forward's "nothing was checked" warning is moot)."""
    import warnings
    from graph_adapter.ipu import EmulatorError, IPUOptions, compile_ipu, emulate_poptorch
    from test_bad_inputs import _unsorted
    flat = _flat()
    bad, key, pos, value = _ei_beyond(flat)
    with emulate_poptorch() as pt:
        runner = compile_ipu(ipu_wrap(DNet()), "poptorch", IPUOptions(), poptorch=pt)
        runner(flat)
        with pytest.raises(InputValueError) as ei:
            runner(bad)
        assert (ei.value.key, ei.value.position, ei.value.value) == (key, pos, value)
        off = ga.compile(ipu_wrap(DNet()), "poptorch", poptorch=pt, check_bounds=False)
        with pytest.raises(EmulatorError):  # the read inside, as before
            off(bad)
        values = compile_ipu(ipu_wrap(DNet(), check_inputs="values"), "poptorch",
                             IPUOptions(), poptorch=pt)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            values(flat)
            with pytest.raises(InputValueError, match="not sorted"):
                values(_unsorted(flat)[0])


@pytest.mark.slow
@pytest.mark.parametrize("case", [_ei_negative, _ei_beyond, _batch_beyond],
                         ids=lambda c: c.__name__.strip("_"))
def test_inductor_names_a_bad_index(case):
    """Through real inductor code: without the check a negative index wraps and the
    call returns (measured: no error, a wrong result); with it, the key is named."""
    torch.manual_seed(0)
    flat = _flat()
    compiled = ga.compile(ipu_wrap(DNet()).eval(), "inductor")
    with torch.no_grad():
        compiled(flat)
        bad, key, pos, value = case(flat)
        with pytest.raises(InputValueError) as ei:
            compiled(bad)
    assert (ei.value.key, ei.value.position, ei.value.value) == (key, pos, value)
    assert compiled.compile_count == 1


# ---- ipu_wrap(check_inputs="values") under a compiler ------------------------------
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "export"])
def test_the_values_check_runs_once_per_call_on_every_backend(backend, monkeypatch):
    """A traced forward cannot read values, so Compiled checks them on the host
    before the call; the eager engine's forward checks them itself (not twice)."""
    import graph_adapter.format.values as D
    from test_bad_inputs import _unsorted
    calls = []
    real = D.raise_for_values
    monkeypatch.setattr(D, "raise_for_values", lambda f: (calls.append(1), real(f)))
    import graph_adapter.nn.wrap as W
    monkeypatch.setattr(W, "raise_for_values", D.raise_for_values)
    flat = _flat()
    compiled = ga.compile(ipu_wrap(DNet(), check_inputs="values"), backend)
    compiled(flat)
    assert len(calls) == 1
    bad, key, pos, value = _unsorted(flat)
    with pytest.raises(InputValueError) as ei:
        compiled(bad)
    assert (ei.value.key, ei.value.position, ei.value.value) == (key, pos, value)
    unchecked = ga.compile(ipu_wrap(DNet()), backend)
    unchecked(flat)
    unchecked(bad)  # the default reads no values: a wrong result, no error (documented)


def test_per_mode_backends_check_values_where_they_trace():
    from graph_adapter.backends.engines import traces
    compiled = ga.compile(ipu_wrap(DNet(), check_inputs="values"), "inductor_eval")
    assert not traces(compiled._engine, True) and traces(compiled._engine, False)


@pytest.mark.parametrize("backend", ["aot_eager", "eager"])
def test_layout_tables_are_checked_on_every_backend(backend):
    """A layout table's gather clamps each id and masks the padding id, so under ATen's
    kernels too an out-of-range id would read as padding (a silently missing neighbour):
    the tables' bounds are checked on the CPU by default whatever the engine, and only
    they where the engine does not generate code."""
    from torch_geometric.nn import GraphSAGE

    from graph_adapter.app.demo.node import sbm_graph
    from graph_adapter.sampling import FixedSizeNeighborLoader

    data = sbm_graph(200, classes=3, out_degree=4, dim=8, seed=1)
    flat = next(iter(FixedSizeNeighborLoader(data, [4, 2], 16, layout="sources")))
    compiled = ga.compile(ipu_wrap(GraphSAGE(8, 16, 2, 3).eval()), backend)
    assert [p[0] for p in compiled._plan_bounds(flat)] == ["in_sources"]
    bad = dict(flat)
    bad["in_sources"] = flat["in_sources"].clone()
    bad["in_sources"][0, 0] = flat["node_mask"].numel() + 1
    with torch.no_grad(), pytest.raises(InputValueError) as ei:
        compiled(bad)
    assert (ei.value.key, ei.value.position) == ("in_sources", (0, 0))
    assert not ga.compile(ipu_wrap(DNet()), backend, check_bounds=False)._plan_bounds(flat)
