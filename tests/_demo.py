"""What the demo's tests share: a tiny run's settings, and a fresh Dynamo per test."""
import pytest

from graph_adapter.app.torch_internals import reset_dynamo

#: ``run_demo(**TINY)``: a run of seconds (40 molecules, one epoch, a one-layer model).
TINY = dict(limit=40, epochs=1, hidden=8, layers=1, batch_graphs=16, progress=False,
            pyg_compile=False)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test compiles from scratch (Dynamo's caches and recompile counts reset)."""
    reset_dynamo()
    yield
