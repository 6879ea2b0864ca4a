"""ipu_wrap(model, trim=True): eager calls on the real rows give the padded path's results.

The padded path (``trim=False``) is the reference, itself padding invariant
(tests/nn/test_invariance.py). Trimmed calls must agree with it on the real rows
of every output, the loss, every parameter gradient and the BatchNorm running
statistics, return the same keys, shapes and dtypes (padding rows zero), and
fall back to the padded path, counted in ``trim_stats``, where trimming would
change a result.
"""
import copy

import pytest
import torch
from hypothesis import assume, given
from torch_geometric.data import Batch

import graph_adapter as ga
from graph_adapter.ipu import emulate_poptorch
from graph_adapter.nn._trim import TrimError, TrimPlan
from graph_adapter.nn import masked_loss
from graph_adapter.format import infer_spec

from _padding import pad_batch, random_graphs
from strategies import model_graph_lists, paddings
from test_invariance import ATOL, MODELS, make
from test_wrap_hetero import HeteroNet, _graphs as hetero_graphs, _loss as hetero_loss


def _pair(model, **kw):
    """A padded and a trimmed wrapper of two copies of ``model``."""
    return (ga.ipu_wrap(copy.deepcopy(model), **kw),
            ga.ipu_wrap(copy.deepcopy(model), trim=True, **kw))


def _warm(wrapped, flat):
    """Run the signature's first (padded, recording) call, then undo what it did
    to the model (running statistics, gradients), so the next call starts equal."""
    state = copy.deepcopy(wrapped.model.state_dict())
    wrapped(flat)
    wrapped.model.load_state_dict(state)
    wrapped.zero_grad(set_to_none=True)
    assert wrapped.trim_stats == {"trimmed": 0, "padded": 1}


def _assert_same(flat, padded, trimmed, res_p, res_t, trimmed_call=True):
    """Same keys, shapes, dtypes; equal real rows; zero padding rows (of a trimmed
    call); equal loss, gradients and buffers."""
    assert list(res_t) == list(res_p)
    for k in res_p:
        assert res_t[k].shape == res_p[k].shape and res_t[k].dtype == res_p[k].dtype, k
    out_p, out_t = res_p["output"], res_t["output"]
    mask = flat["graph_mask"] if out_p.size(0) == flat["graph_mask"].numel() else flat["node_mask"]
    torch.testing.assert_close(out_t[mask], out_p[mask], atol=ATOL, rtol=1e-4)
    assert not trimmed_call or not out_t[~mask].any(), "trimmed outputs are padded back with zeros"
    if "loss" in res_p:
        torch.testing.assert_close(res_t["loss"], res_p["loss"], atol=ATOL, rtol=1e-4)
        res_p["loss"].backward()
        res_t["loss"].backward()
        for (pn, p), q in zip(padded.model.named_parameters(), trimmed.model.parameters()):
            if p.grad is None or q.grad is None:
                assert (p.grad is None or not p.grad.any()) and (q.grad is None or not q.grad.any()), pn
                continue
            torch.testing.assert_close(q.grad, p.grad, atol=ATOL, rtol=1e-4, msg=lambda m: f"{pn}: {m}")
    for (bn, p), q in zip(padded.model.named_buffers(), trimmed.model.buffers()):
        torch.testing.assert_close(q.float(), p.float(), atol=ATOL, rtol=1e-4, msg=lambda m: f"{bn}: {m}")


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("name", MODELS)
@given(graphs=model_graph_lists(), padding=paddings())
def test_trimmed_calls_equal_the_padded_path(name, train, graphs, padding):
    """Drawn structure: 0-node and 0-edge graphs anywhere (a trailing one too: then
    the padded path runs), levels with one real row, many empty graph slots."""
    b = Batch.from_data_list(graphs)
    n, e, g = b.num_nodes, b.edge_index.size(1), b.num_graphs
    flat = pad_batch(graphs, n + padding[0], e + padding[1], g + padding[2])
    assume(len({flat["node_mask"].numel(), flat["edge_mask"].numel(),
                flat["graph_mask"].numel()}) == 3)  # a row count tells its level
    torch.manual_seed(0)
    padded, trimmed = _pair(make(name), loss_fn=masked_loss("mse"))
    padded.train(train)
    trimmed.train(train)
    _warm(trimmed, flat)
    res_p, res_t = padded(flat), trimmed(flat)
    # a level with one real row (a plain BatchNorm in train() raises) or a trailing
    # 0-node graph (eager pooling would drop its row) takes the padded path
    trims = min(n, e, g) >= 2 and graphs[-1].num_nodes > 0
    assert trimmed.trim_stats == {"trimmed": int(trims), "padded": 2 - int(trims)}
    _assert_same(flat, padded, trimmed, res_p, res_t, trims)


def test_loader_training_steps_stay_equal():
    """SGD steps over FixedSizeLoader epochs (the last batch partial): parameters
    and running statistics stay equal, and all but each signature's first call trim."""
    data = random_graphs(torch.Generator().manual_seed(0), 37)
    loader = ga.FixedSizeLoader(data, ga.Budget.fit(data, 8))
    torch.manual_seed(0)
    padded, trimmed = _pair(make("gin_bn"), loss_fn=masked_loss("mse"))
    # (lr 0.01: at 0.05 this model diverges to inf within two epochs of these batches)
    opts = [torch.optim.SGD(w.parameters(), lr=0.01) for w in (padded, trimmed)]
    calls, lone = 0, 0
    for _ in range(2):
        for flat in loader:
            for w, opt in zip((padded, trimmed), opts):
                opt.zero_grad()
                w(flat)["loss"].backward()
                opt.step()
            # the rule: a call with fewer than 2 real rows at a level takes the padded path
            # (here the partial last batch of each epoch when it holds one graph)
            lone += calls > 0 and min(int(flat[m].sum()) for m in
                                      ("node_mask", "edge_mask", "graph_mask")) < 2
            calls += 1
    assert trimmed.trim_stats == {"trimmed": calls - 1 - lone, "padded": 1 + lone}
    for (k, v), w in zip(padded.model.state_dict().items(), trimmed.model.state_dict().values()):
        torch.testing.assert_close(w.float(), v.float(), atol=1e-5, rtol=1e-4, msg=lambda m: f"{k}: {m}")


@pytest.mark.parametrize("layout", ["ell", "hyb"])
def test_layout_tables_are_left_out(layout):
    """The ELL/HYB tables index padded rows; a trimmed call leaves them out."""
    data = random_graphs(torch.Generator().manual_seed(7), 20)
    kw = {"layout_widths": (2, 2)} if layout == "hyb" else {}
    loader = ga.FixedSizeLoader(data, ga.Budget.fit(data, 6), layout=layout, **kw)
    torch.manual_seed(0)
    padded, trimmed = _pair(make("sage"), loss_fn=masked_loss("mse"))
    flats = list(loader)
    _warm(trimmed, flats[0])
    plan = next(iter(trimmed._trim_plans.values()))
    assert plan.drop and all(k in flats[0] for k in plan.drop)
    for flat in flats:
        assert not plan.drop & set(plan.trim(flat, plan.counts(flat)))
        padded.zero_grad()
        trimmed.zero_grad()
        _assert_same(flat, padded, trimmed, padded(flat), trimmed(flat))
    assert trimmed.trim_stats["trimmed"] == len(flats)


def test_hetero_batches_trim_per_type():
    data = hetero_graphs(1, n=24)
    loader = ga.FixedSizeLoader(data, ga.Budget.fit(data, 6))
    torch.manual_seed(0)
    padded, trimmed = _pair(HeteroNet(), loss_fn=hetero_loss)
    flats = list(loader)
    _warm(trimmed, flats[0])
    for flat in flats:
        padded.zero_grad()
        trimmed.zero_grad()
        _assert_same(flat, padded, trimmed, padded(flat), trimmed(flat))
    assert trimmed.trim_stats["trimmed"] >= 1


def _five_graphs(seed, extra_nodes=3):
    """Five random graphs padded with ``extra_nodes`` nodes, 2 edges, 2 graph slots."""
    graphs = random_graphs(torch.Generator().manual_seed(seed), 5)
    b = Batch.from_data_list(graphs)
    return pad_batch(graphs, b.num_nodes + extra_nodes, b.edge_index.size(1) + 2, 7)


def _with_hole_in_edge_mask(flat):
    """``flat`` with its last padding edge moved before its last real edge: a
    valid padded dict whose edge mask is not a prefix (a hole after 2+ real edges)."""
    e, last = int(flat["edge_mask"].sum()), flat["edge_index"].size(1) - 1
    assert e >= 3 and last >= e
    order = torch.cat([torch.arange(e - 1), torch.tensor([last]), torch.arange(e - 1, last)])
    out = dict(flat, edge_index=flat["edge_index"][:, order], edge_mask=flat["edge_mask"][order])
    assert out["edge_mask"][:e - 1].all() and not out["edge_mask"][e - 1] and out["edge_mask"][e]
    return out


def test_a_mask_that_is_not_a_prefix_takes_the_padded_path():
    flat = _five_graphs(seed=2)
    torch.manual_seed(0)
    padded, trimmed = _pair(make("gcn"), loss_fn=masked_loss("mse"))
    _warm(trimmed, flat)
    holed = _with_hole_in_edge_mask(flat)
    _assert_same(holed, padded, trimmed, padded(holed), trimmed(holed), False)
    assert trimmed.trim_stats == {"trimmed": 0, "padded": 2}
    plan = next(iter(trimmed._trim_plans.values()))
    assert plan.counts(holed) is None and plan.counts(flat) is not None


def test_an_output_sized_from_data_raises_trim_error():
    class FirstHalf(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 2)

        def forward(self, x, edge_index):
            return self.lin(x[: x.size(0) // 2])  # rows from the batch, not a level

    flat = _five_graphs(seed=3, extra_nodes=4)
    wrapped = ga.ipu_wrap(FirstHalf(), trim=True)
    wrapped(flat)
    with pytest.raises(TrimError, match=r"output 'output'.*trim=False"):
        wrapped(flat)


def test_compiled_and_emulated_calls_never_trim():
    flat = _five_graphs(seed=4)
    torch.manual_seed(0)
    padded, trimmed = _pair(make("gin_bn"), loss_fn=masked_loss("mse"))
    _warm(trimmed, flat)
    compiled = ga.compile(trimmed, "aot_eager")
    res = compiled(flat)
    torch.testing.assert_close(res["output"], padded(flat)["output"], atol=ATOL, rtol=1e-4)
    assert trimmed.trim_stats["trimmed"] == 0
    with emulate_poptorch() as pt:
        pt.inferenceModel(trimmed.eval())(flat)
    assert trimmed.trim_stats["trimmed"] == 0


def test_check_runs_the_padded_path():
    flat = _five_graphs(seed=5)
    padded, trimmed = _pair(make("gcn"), loss_fn=masked_loss("mse"))
    _warm(trimmed, flat)
    assert ga.check(trimmed, flat).ok == ga.check(padded, flat).ok
    assert trimmed.trim and trimmed.trim_stats == {"trimmed": 0, "padded": 1}


def test_the_plan_of_a_dict_with_two_masks_of_one_length_never_trims():
    graphs = random_graphs(torch.Generator().manual_seed(6), 3)
    b = Batch.from_data_list(graphs)
    n = max(b.num_nodes, b.edge_index.size(1)) + 2
    flat = pad_batch(graphs, n, n, 5)  # node and edge masks of one length
    plan = TrimPlan.of(flat, infer_spec(flat))
    assert plan.why_not is not None and "one length" in plan.why_not


def test_trim_takes_a_bool():
    with pytest.raises(TypeError, match="trim="):
        ga.ipu_wrap(make("gcn"), trim="yes")
