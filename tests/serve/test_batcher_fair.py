"""Fair scheduling in the batcher: a request longer than ``max_batch`` runs in slices.

On stand-in predictors (no artifact): one with ``predict`` only, one that keeps a second
request in flight (``send`` / ``receive`` / ``can_send``, as a program's process). Each
records its calls. Checked: every request gets exactly its own predictions, in order,
whatever the sizes and the arrival (hypothesis; requests as dict lists, checked
``Graph`` lists or ``Columns``); no call holds more than ``max_batch`` graphs; a short
request queued while a long one is sliced is answered before the long one's last slice
runs; a slice's error names the request's graph; a failed or given-up long request
stops being sliced.
"""
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graph_adapter.serve import DynamicBatcher, GraphInputError, MissingFeatureError
from graph_adapter.serve.batcher import _offset, slice_request
from graph_adapter.serve.columns import Columns
from graph_adapter.serve.pack import Graph

WAIT = 20.0  # seconds a ticket may take before the test fails (they take milliseconds)

# a contract of two graph-level 0-d features (the graph's id, whether it is refused) and a
# node-level one (each node's row holds the graph's id): enough for Columns and merges
_FEATURES = [SimpleNamespace(key="id", shape=(), cat_dim=0, level="graph", rows=1,
                             dtype="int64"),
             SimpleNamespace(key="bad", shape=(), cat_dim=0, level="graph", rows=1,
                             dtype="int64"),
             SimpleNamespace(key="x", shape=(None, 1), cat_dim=0, level="node", rows=None,
                             dtype="int64")]


def _contract(cap):
    return SimpleNamespace(rungs=(), graphs=cap + 1, features=_FEATURES)


def _graph(i, bad=False, nodes=2):
    return {"id": np.int64(i), "bad": np.int64(bad), "x": np.full((nodes, 1), i, np.int64)}


def _as(kind, graphs):
    """A request's graphs as the batcher may get them: dicts, checked Graphs, Columns."""
    if kind == "dicts":
        return graphs
    checked = [Graph(g, len(g["x"]), 0, (), k) for k, g in enumerate(graphs)]
    if kind == "graphs":
        return checked
    feats = {"id": np.array([g["id"] for g in graphs], np.int64),
             "bad": np.array([g["bad"] for g in graphs], np.int64),
             "x": np.concatenate([g["x"] for g in graphs] or [np.zeros((0, 1), np.int64)])}
    return Columns(feats, [len(g["x"]) for g in graphs], [0] * len(graphs),
                   range(len(graphs)))


def _read(graphs):
    """``[(id, bad, position its errors name)]`` of a call's graphs, whatever their form."""
    if isinstance(graphs, Columns):
        ns = np.cumsum([0, *graphs.nodes])
        for k in range(len(graphs)):  # (a node row of another graph: a slicing bug)
            assert (graphs.features["x"][ns[k]:ns[k + 1]] == graphs.features["id"][k]).all()
        return [(int(graphs.features["id"][k]), bool(graphs.features["bad"][k]),
                 graphs.positions[k]) for k in range(len(graphs))]
    # a list's graphs named by their place in it (a program's child names the graphs of
    # the call it got; a slice's are counted from 0 there)
    return [(int(f["id"]), bool(f["bad"]), k) for k, f in
            enumerate(g.features if isinstance(g, Graph) else g for g in graphs)]


class _Predict:
    """``predict`` only: ``2 * id`` a graph; a bad graph refused, named as the runtime
    names it (its position within the list, or the columns' own)."""

    def __init__(self, cap):
        self.contract = _contract(cap)
        self.calls = []  # each call's graph ids, in the order run
        self.gate = threading.Event()  # calls wait for it (a test queues requests first)
        self.gate.set()
        self.running = threading.Event()  # set once a call waits at the gate

    def _run(self, graphs):
        read = _read(graphs)
        self.calls.append([i for i, _, _ in read])
        for i, bad, pos in read:
            if bad:
                raise MissingFeatureError(f"graph {pos}: no feature 'ok'", pos, "ok")
        return [2 * i for i, _, _ in read]

    def predict(self, graphs):
        self.running.set()
        assert self.gate.wait(WAIT)
        return self._run(graphs)


class _Pipelined(_Predict):
    """``send`` records the call at once (it is on its way to the program), ``receive``
    waits for the gate; at most two calls in flight (as ``ProcessPredictor.can_send``)."""

    def __init__(self, cap):
        super().__init__(cap)
        self.in_flight = 0

    def send(self, graphs):
        self.in_flight += 1
        try:
            return ("ok", self._run(graphs))
        except GraphInputError as e:
            return ("error", e)

    def can_send(self):
        return self.in_flight < 2

    def receive(self, ticket):
        self.running.set()
        assert self.gate.wait(WAIT)
        self.in_flight -= 1
        if ticket[0] == "error":
            raise ticket[1]
        return ticket[1]


PREDICTORS = [_Predict, _Pipelined]


def _answer(b, ticket):
    assert ticket.wait(WAIT), "a request was never answered"
    try:
        return b.result(ticket)
    except GraphInputError as e:
        return e


def _requests(sizes, kinds, bads, start=0):
    """Requests of ``sizes`` graphs with ids counted from ``start``; ``bads[r]``: the
    position of request ``r``'s refused graph (``None``: none)."""
    reqs, ids = [], start
    for n, kind, bad in zip(sizes, kinds, bads):
        graphs = [_graph(ids + k, bad=k == bad) for k in range(n)]
        ids += n
        reqs.append((graphs, _as(kind, graphs)))
    return reqs


def _check(req, got):
    graphs, _ = req
    bad = [k for k, g in enumerate(graphs) if g["bad"]]
    if bad:  # its own error, its graph named by its position in the request
        assert isinstance(got, MissingFeatureError), got
        assert got.graph == bad[0] and str(got).startswith(f"graph {bad[0]}: "), str(got)
    else:
        assert got == [2 * int(g["id"]) for g in graphs]


@settings(max_examples=30, deadline=None)
@given(cap=st.integers(1, 6), pred_cls=st.sampled_from(PREDICTORS), data=st.data())
def test_each_request_gets_its_own_predictions_in_order_and_calls_hold_at_most_max_batch(
        cap, pred_cls, data):
    sizes = data.draw(st.lists(st.integers(0, 4 * cap + 3), min_size=1, max_size=10))
    kinds = data.draw(st.lists(st.sampled_from(["dicts", "graphs", "columns"]),
                               min_size=len(sizes), max_size=len(sizes)))
    bads = [data.draw(st.one_of(st.none(), st.integers(0, n - 1)) if n else st.none())
            for n in sizes]
    held = data.draw(st.integers(0, len(sizes)))  # queued while the first call waits
    pred = pred_cls(cap)
    b = DynamicBatcher(pred, max_delay_s=data.draw(st.sampled_from([0.0, 0.001])),
                       max_batch=cap)
    try:
        reqs = _requests(sizes, kinds, bads)
        pred.gate.clear()
        tickets = [b.enqueue(r[1]) for r in reqs[:held]]
        pred.gate.set()
        tickets += [b.enqueue(r[1]) for r in reqs[held:]]  # (arriving while it runs)
        for req, t in zip(reqs, tickets):
            _check(req, _answer(b, t))
    finally:
        b.close(WAIT)
    assert all(len(c) <= cap for c in pred.calls), pred.calls
    assert b.stats["requests"] == len(sizes)
    assert b.stats["refused"] == sum(bad is not None for bad in bads)
    if all(bad is None for bad in bads):  # (a refused graph's merge runs again without it)
        ran = [i for c in pred.calls for i in c]
        assert sorted(ran) == list(range(sum(sizes)))  # each graph once
    assert b.queued_graphs == 0 and not b.queue


@pytest.mark.parametrize("pred_cls", PREDICTORS)
def test_a_short_request_queued_meanwhile_runs_before_the_long_ones_last_slice(pred_cls):
    cap = 4
    pred = pred_cls(cap)
    b = DynamicBatcher(pred, max_delay_s=0.0, max_batch=cap)
    (long_graphs, long_req), (short_graphs, short_req) = _requests([10 * cap, 2],
                                                                   ["dicts"] * 2, [None] * 2)
    seen = {}
    pred.gate.clear()
    t_long = b.enqueue(long_req)
    assert pred.running.wait(WAIT)  # its first slice runs (and one is sent ahead)
    t_short = b.enqueue(short_req, lambda: seen.setdefault("long", t_long.answered))
    pred.gate.set()
    _check((short_graphs, short_req), _answer(b, t_short))
    _check((long_graphs, long_req), _answer(b, t_long))
    b.close(WAIT)
    assert seen["long"] is False  # the short one was answered first
    short_call = next(k for k, c in enumerate(pred.calls) if short_graphs[0]["id"] in c)
    # after the slice that ran (and, pipelined, the one sent ahead of its answer) only
    assert short_call <= (2 if pred_cls is _Pipelined else 1), pred.calls
    assert all(len(c) <= cap for c in pred.calls)
    assert sorted(i for c in pred.calls for i in c) == list(range(10 * cap + 2))
    assert b.stats["requests"] == 2 and b.stats["graphs"] == 10 * cap + 2
    assert b.stats["batches"] == len(pred.calls)


@pytest.mark.parametrize("pred_cls", PREDICTORS)
@pytest.mark.parametrize("kind", ["dicts", "graphs", "columns"])
def test_a_slices_error_names_the_requests_graph_and_its_later_slices_never_run(pred_cls,
                                                                                  kind):
    cap, n, bad = 5, 40, 17
    pred = pred_cls(cap)
    b = DynamicBatcher(pred, max_delay_s=0.0, max_batch=cap)
    req = _requests([n], [kind], [bad])[0]
    got = _answer(b, b.enqueue(req[1]))
    _check(req, got)  # graph 17 (graph 2 of the slice 15 .. 19)
    assert isinstance(got, MissingFeatureError) and got.key == "ok"
    after = _requests([3], ["dicts"], [None], start=n)[0]  # the batcher goes on
    _check(after, _answer(b, b.enqueue(after[1])))
    b.close(WAIT)
    slices = [c for c in pred.calls if c[0] < n]
    # the failed slice was the 4th; pipelined, the 5th was on its way already
    assert len(slices) == (5 if pred_cls is _Pipelined else 4), pred.calls
    assert b.stats["refused"] == 1 and b.stats["requests"] == 2


@pytest.mark.parametrize("pred_cls", PREDICTORS)
def test_a_given_up_long_request_stops_being_sliced(pred_cls):
    cap = 3
    pred = pred_cls(cap)
    b = DynamicBatcher(pred, max_delay_s=0.0, max_batch=cap)
    (_, long_req), short = _requests([30 * cap, 2], ["columns", "dicts"], [None] * 2)
    pred.gate.clear()
    ticket = b.enqueue(long_req)
    assert pred.running.wait(WAIT)
    ticket.answer(error=TimeoutError("the client gave up"))  # (as submit's timeout does)
    with pytest.raises(TimeoutError, match="gave up"):
        b.result(ticket)
    pred.gate.set()
    _check(short, _answer(b, b.enqueue(short[1])))
    b.close(WAIT)
    slices = [c for c in pred.calls if c and c[0] < 30 * cap]
    assert len(slices) <= (2 if pred_cls is _Pipelined else 1), pred.calls
    assert b.queued_graphs == 0 and not b.queue and not b._long


def test_submit_of_a_long_request_waits_for_all_its_slices_and_may_time_out():
    pred = _Predict(2)
    b = DynamicBatcher(pred, max_delay_s=0.0, max_batch=2)
    graphs = [_graph(i) for i in range(9)]
    assert b.submit(graphs, timeout=WAIT) == [2 * i for i in range(9)]
    assert [len(c) for c in pred.calls] == [2, 2, 2, 2, 1]
    pred.gate.clear()
    with pytest.raises(TimeoutError, match="no answer within"):
        b.submit(graphs, timeout=0.05)
    pred.gate.set()
    assert b.submit(graphs[:3], timeout=WAIT) == [0, 2, 4]
    b.close(WAIT)
    # the given-up one: only its slice that was running
    assert [len(c) for c in pred.calls] == [2, 2, 2, 2, 1, 2, 2, 1]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 30), a=st.integers(0, 30), b=st.integers(0, 30),
       kind=st.sampled_from(["dicts", "graphs", "columns"]))
def test_slice_request_takes_the_graphs_a_to_b_counted_from_zero(n, a, b, kind):
    a, b = sorted((min(a, n), min(b, n)))
    graphs = [_graph(i, nodes=1 + i % 3) for i in range(n)]
    part = slice_request(_contract(4), _as(kind, graphs), a, b)
    assert [(i, pos) for i, _, pos in _read(part)] == [(i, i - a) for i in range(a, b)]


@given(k=st.integers(0, 50), start=st.integers(0, 1000))
def test_offset_renames_the_graph_in_the_error_and_its_message(k, start):
    e = MissingFeatureError(f"graph {k}: no feature 'x', which the model reads", k, "x")
    _offset(e, start)
    assert e.graph == k + start and e.key == "x"
    assert str(e) == f"graph {k + start}: no feature 'x', which the model reads"
    e = MissingFeatureError("a message naming no graph", k, "x")
    _offset(e, start)
    assert e.graph == k + start
    assert str(e) == "a message naming no graph" + (
        f" (graph {k + start} of the request)" if start else "")
