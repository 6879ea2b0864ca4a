"""The batcher's pipelining with a predictor whose program runs elsewhere (``send`` /
``receive`` / ``can_send`` / ``reply_fd``, as ``worker.ProcessPredictor``): a request that
comes while a merge is in flight is sent ahead at once, not after that merge's reply."""
import os
import threading
import time

from hypothesis import given, settings, strategies as st

from graph_adapter.serve.batcher import DynamicBatcher

from serve._http import until


class _PipePredictor:
    """A stand-in program: ``send`` records a merge; its reply is one byte on a real pipe,
    written by the test (``release``), read in order by ``receive``."""

    contract = None
    takes_checked = False

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        self.sent = []  # each merge's graphs, in the order sent
        self.got = 0  # replies read

    def send(self, graphs):
        self.sent.append(list(graphs))
        return len(self.sent) - 1

    def can_send(self) -> bool:
        return len(self.sent) - self.got < 2

    def reply_fd(self, ticket):
        return self.r if ticket >= self.got else None

    def receive(self, ticket):
        assert ticket == self.got, "replies are read in the order sent"
        assert os.read(self.r, 1) == b"."
        self.got += 1
        return [g * 10 for g in self.sent[ticket]]

    def predict(self, graphs):  # (the batcher's fallback for a merge that failed to send)
        return [g * 10 for g in graphs]

    def release(self, n: int = 1) -> None:
        os.write(self.w, b"." * n)

    def close(self) -> None:
        os.close(self.r)
        os.close(self.w)


def test_a_request_is_sent_ahead_while_the_last_merge_runs():
    p = _PipePredictor()
    b = DynamicBatcher(p, max_delay_s=0.0, max_batch=8)
    try:
        first = b.enqueue([1, 2])
        assert until(lambda: len(p.sent) == 1)
        second = b.enqueue([3])
        # no reply has come: the second merge must go out now, for the program to run it
        # right after the first (waiting in the first's read left the program idle)
        assert until(lambda: len(p.sent) == 2, within=2.0), p.sent
        assert not first.answered and not second.answered
        p.release(2)
        assert first.wait(5) and second.wait(5)
        assert DynamicBatcher.result(first) == [10, 20]
        assert DynamicBatcher.result(second) == [30]
    finally:
        p.release(8)
        b.close(5)
        p.close()


def test_no_more_than_can_send_allows_is_in_flight():
    p = _PipePredictor()
    b = DynamicBatcher(p, max_delay_s=0.0, max_batch=8)
    try:
        tickets = [b.enqueue([1])]
        assert until(lambda: len(p.sent) == 1)
        tickets.append(b.enqueue([2]))
        assert until(lambda: len(p.sent) == 2)
        tickets += [b.enqueue([3]), b.enqueue([4])]
        time.sleep(0.05)
        assert len(p.sent) == 2  # both slots taken: the rest wait, merged
        p.release(1)
        assert until(lambda: len(p.sent) == 3)
        assert p.sent[2] == [3, 4]
        p.release(2)
        assert all(t.wait(5) for t in tickets)
        assert [DynamicBatcher.result(t) for t in tickets] == [[10], [20], [30], [40]]
    finally:
        p.release(8)
        b.close(5)
        p.close()


@settings(max_examples=25, deadline=None)
@given(st.lists(st.one_of(st.lists(st.integers(0, 99), min_size=1, max_size=4),
                          st.just("reply")), max_size=20))
def test_every_request_gets_its_own_predictions_whatever_the_interleaving(ops):
    p = _PipePredictor()
    b = DynamicBatcher(p, max_delay_s=0.0, max_batch=6)
    asked, released = [], 0
    try:
        for op in ops:
            if op == "reply":
                if released < len(p.sent):
                    p.release()
                    released += 1
            else:
                asked.append((op, b.enqueue(op)))
            time.sleep(0.001)
        # answer whatever is sent from now on, until every request is answered
        stop = threading.Event()

        def answer_rest():
            nonlocal released
            while not stop.is_set():
                if released < len(p.sent):
                    p.release()
                    released += 1
                time.sleep(0.001)
        t = threading.Thread(target=answer_rest)
        t.start()
        try:
            assert all(ticket.wait(10) for _, ticket in asked)
        finally:
            stop.set()
            t.join()
        for graphs, ticket in asked:
            assert DynamicBatcher.result(ticket) == [g * 10 for g in graphs]
        assert all(len(m) <= 6 for m in p.sent)
    finally:
        p.release(64)
        b.close(5)
        p.close()


class _Recorder:
    """A predict-only stand-in recording each merged call."""

    contract = None
    takes_checked = False

    def __init__(self) -> None:
        self.calls = []

    def predict(self, graphs):
        self.calls.append(list(graphs))
        return [g * 10 for g in graphs]


def test_a_request_alone_in_the_server_runs_at_once():
    p, coming = _Recorder(), [0]
    b = DynamicBatcher(p, max_delay_s=5.0, max_batch=8, coming=lambda: coming[0])
    try:
        t0 = time.monotonic()
        assert b.submit([1], timeout=10) == [10]
        # nobody else on the way: the merge did not wait out max_delay for nobody
        assert time.monotonic() - t0 < 2.5
    finally:
        b.close(5)


def test_a_merge_waits_for_the_requests_on_their_way():
    p, coming = _Recorder(), [1]  # one request's body is being read
    b = DynamicBatcher(p, max_delay_s=5.0, max_batch=8, coming=lambda: coming[0])
    try:
        first = b.enqueue([1])
        time.sleep(0.1)
        assert not first.answered and p.calls == []  # waiting for the one on its way
        coming[0] = 0
        second = b.enqueue([2, 3])
        assert first.wait(5) and second.wait(5)
        assert p.calls == [[1, 2, 3]]  # one merge
        assert DynamicBatcher.result(second) == [20, 30]
    finally:
        b.close(5)
