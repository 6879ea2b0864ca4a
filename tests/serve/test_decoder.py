"""Large bodies read in a process of their own (``graph_adapter.serve.processes.decoder``): the
columns equal what the server reads itself, a request's errors come back named (its
graph and key), a dead child is started again, and the HTTP server sends bodies past
its threshold there when the program runs in a child process."""
import json
import os
import signal

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from graph_adapter.serve import GraphInputError, Limits, PredictServer, TooLargeError
from graph_adapter.serve import app as serve_app
from graph_adapter.serve.columns import Columns
from graph_adapter.serve.decode import PayloadError, decode_request
from graph_adapter.serve.processes.decoder import DecodeProcess
from graph_adapter.serve.ops import NumpyOps
from graph_adapter.serve.pack import read_request

from serve._http import CONTRACT, Summer, post, until


@pytest.fixture(scope="module")
def decoder():
    d = DecodeProcess(CONTRACT)
    yield d
    d.close()


def _body(graphs):
    return json.dumps({"graphs": graphs}).encode()


_row = st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=32), min_size=2, max_size=2)
_graph = st.builds(lambda rows: {"x": rows, "label": 1}, st.lists(_row, min_size=1,
                                                                   max_size=5))


@settings(max_examples=20, deadline=None)
@given(st.lists(_graph, min_size=1, max_size=12))
def test_the_childs_columns_equal_the_servers_own_read(decoder, graphs):
    got = decoder.decode(_body(graphs), "application/json")
    here = decode_request(_body(graphs), "application/json", CONTRACT)
    assert isinstance(got, Columns)
    if not isinstance(here, Columns):  # (one graph: read graph by graph here)
        from graph_adapter.serve.columns import join
        here = join(CONTRACT, NumpyOps(), read_request(CONTRACT, NumpyOps(), here, set()))
    assert got.nodes == list(here.nodes) and got.edges == list(here.edges)
    np.testing.assert_array_equal(got.features["x"], here.features["x"])
    assert got.features["x"].dtype == np.float32
    assert "label" in got.ignored


def test_a_requests_errors_come_back_named(decoder):
    with pytest.raises(PayloadError, match="not valid JSON"):
        decoder.decode(b"{nope", "application/json")
    bad = [{"x": [[1.0, 2.0]]}] * 5 + [{"x": [[1.0]]}]
    with pytest.raises(GraphInputError) as e:
        decoder.decode(_body(bad), "application/json")
    assert e.value.graph == 5 and e.value.key == "x"
    with pytest.raises(TooLargeError, match="max-graphs"):
        decoder.decode(_body([{"x": [[1.0, 2.0]]}] * 4), "application/json", max_graphs=3)


def test_a_dead_child_is_started_again(decoder):
    decoder.decode(_body([{"x": [[1.0, 2.0]]}]), "application/json")
    os.kill(decoder._proc.pid, signal.SIGKILL)
    decoder._proc.wait(10)
    started = decoder.started
    got = decoder.decode(_body([{"x": [[1.0, 2.0]]}] * 2), "application/json")
    assert got.nodes == [1, 1] and decoder.started == started + 1


class _CheckedSummer(Summer):
    """The stand-in predictor as the program's child process is seen by the app: it
    takes checked graphs (the server checks them)."""

    takes_checked = True

    def check(self, graphs):
        return read_request(CONTRACT, NumpyOps(), graphs, self.ignored_keys)


def test_the_server_reads_a_large_body_in_the_child():
    graphs = [{"x": [[float(i), 0.5], [1.0, -2.0]]} for i in range(40000)]
    body = _body(graphs)
    assert len(body) > serve_app._DECODE_IN_PROCESS
    with PredictServer(_CheckedSummer(), port=0, max_delay_ms=0,
                       limits=Limits(drain_s=0, max_graphs=100_000)).start() as s:
        assert s.state.decoder is not None and s.state.decoder.started == 0
        status, _, doc = post(s.port, raw=body)
        assert status == 200, doc
        want = [np.float32(np.sum(np.asarray(g["x"], np.float32))) for g in graphs]
        assert np.array_equal(np.asarray(doc["predictions"], np.float32).ravel(), want)
        assert s.state.decoder.started == 1
        graphs[31234] = {"x": [[1.0, 2.0, 3.0]]}
        status, _, doc = post(s.port, raw=_body(graphs))
        assert status == 422 and doc["graph"] == 31234 and doc["key"] == "x", doc
        small = _body(graphs[:3])
        assert post(s.port, raw=small)[0] == 200  # (read here: no second child)
        assert s.state.decoder.started == 1
    assert until(lambda: s.state.decoder._proc is None)
