"""Test settings shared by every module: hypothesis profiles, and (under CI)
no skip that nobody expected.

Hypothesis profiles (``HYPOTHESIS_PROFILE=<name>``; property tests set no
``max_examples`` of their own, so the profile decides):

* ``default`` -- a plain ``python -m pytest``: sized so the whole suite fits
  ~10 minutes on 2 cores; examples drawn at random on every run;
* ``ci`` -- the default under ``GRAPH_ADAPTER_CI=1`` (``.ci/run``): the same
  number of examples, derandomized, so every CI run draws the same ones;
* ``thorough`` -- many more examples, for a run before a release or after a
  change to collate/loader/wrap (``HYPOTHESIS_PROFILE=thorough python -m pytest -m "not slow"``).

Skips under CI: with ``GRAPH_ADAPTER_CI=1`` (set by ``.ci/run``) a skipped
test fails unless it matches :data:`CI_EXPECTED_SKIPS`, so a broken module or
a broken extra (rdkit, lightning) cannot turn tests into a green "skipped".
"""
import importlib.util
import os
import re
import tempfile

import pytest
from hypothesis import HealthCheck, settings

# Inductor's cache inside a temp dir, never in the user's home.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), "graph_adapter_inductor"))
# The suite's inductor tests compile in the process, at the first call (what they count
# and compare); tests of the background compile, the library's default, ask for it.
os.environ.setdefault("GRAPH_ADAPTER_BACKGROUND", "0")

settings.register_profile(
    "default",
    deadline=None,  # first examples include torch/PyG warm-up and Dynamo traces (seconds)
    max_examples=30,
    # too_slow: one example builds whole graph lists and runs a model, which is
    # slower than hypothesis's generation budget expects; data_too_large: lists
    # of graphs with tensors exceed its default buffer now and then. Neither is
    # a problem of the code under test.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=400)
# CI draws the same examples on every run (derandomize): a landing is judged on the
# code, not on which examples one run happened to draw. Local runs stay random and
# keep what they find in hypothesis's example database; a failure found there goes
# into the test as an @example so CI checks it from then on.
settings.register_profile("ci", parent=settings.get_profile("default"), derandomize=True,
                          database=None)
settings.load_profile(os.environ.get(
    "HYPOTHESIS_PROFILE", "ci" if os.environ.get("GRAPH_ADAPTER_CI") == "1" else "default"))


# ----------------------------------------------------------- skips under CI
#: (node id prefix, regex the skip reason must match, why the skip is expected)
CI_EXPECTED_SKIPS = [
    ("tests/ipu/test_poptorch.py", r"poptorch",
     "real poptorch: ships only with Graphcore's Poplar SDK, not on PyPI"),
    ("tests/test_docs.py::test_block_runs", r"needs poptorch, not installed",
     "docs blocks that call poptorch (no Poplar SDK on CI)"),
    ("tests/test_docs.py::test_block_runs", r"needs torch_scatter, not installed",
     "docs blocks that import torch_scatter (docs/migrating.md's graphium reproduction): the "
     "README's environment has no torch_scatter; the block is not run in CI's scatter step yet"),
    ("tests/test_docs.py::test_block_runs", r"needs lightning_graphcore, not installed",
     "docs/ipu.md's lightning-graphcore recipe: tests/lightning_graphcore_venv runs it in its own venv"),
    ("tests/test_docs.py::test_block_runs", r"^(?!.*needs \S+, not installed)",
     "docs blocks marked `skip (REASON)` (signatures, excerpts); the reason is required"),
    ("tests/lightning_graphcore_venv/", r"lightning-graphcore .* own venv",
     "lightning-graphcore pins an old lightning; its tests run in the IPU CI venv, not the main one"),
    ("tests/graphium_venv/", r"graphium 2\.4\.7 .* own venv",
     "graphium pins an old lightning and torchmetrics; .ci/graphium runs it in its own venv"),
    ("tests/nn/test_torch_scatter.py", r"torch_scatter is not installed",
     "torch_scatter has no PyPI wheel for this torch (a 20-minute source build); "
     ".ci/run runs these tests in a venv of their own with the prebuilt wheels"),
    ("tests/serve/test_ray_serve.py", r"ray\[serve\] is not installed",
     "Ray Serve (the ray extra, ~200 MB with its dependencies) is not in the README's venv; "
     "its extended test runs in .ci/run's Ray step (.cache/venv-ray, GRAPH_ADAPTER_REQUIRE_RAY=1)"),
    ("tests/serve/test_http_wrk.py", r"wrk is not installed",
     "the HTTP load test drives Debian's wrk (apt-get install wrk); .ci/run installs it where "
     "apt-get may run, and the test skips elsewhere"),
    ("tests/", r"^needs_scatter: ",
     "tests marked needs_scatter (torch_scatter / torch_sparse): the README's environment has "
     "neither; .ci/run runs them (-m needs_scatter) in .cache/venv-scatter with the wheels"),
]

_CI = os.environ.get("GRAPH_ADAPTER_CI") == "1"
#: the optional packages behind the ``needs_scatter`` marker
SCATTER_PACKAGES = ("torch_scatter", "torch_sparse")
_unexpected_collect_skips = []


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return re.sub(r"^Skipped: ", "", str(longrepr[2]))
    return str(longrepr)


def expected_skip(nodeid: str, reason: str) -> bool:
    """Whether a skip of ``nodeid`` with ``reason`` is on the CI allow-list."""
    return any(nodeid.startswith(prefix) and re.search(pattern, reason)
               for prefix, pattern, _why in CI_EXPECTED_SKIPS)


def _import_problem(module: str) -> str:
    """'' if ``module`` imports, else why not. An import, not find_spec: torch_sparse is
    found without scipy but fails to import, and PyG then treats it as absent."""
    if importlib.util.find_spec(module) is None:
        return f"{module} not installed"
    try:
        importlib.import_module(module)
    except ImportError as e:
        return f"{module} installed but fails to import ({e})"
    return ""


def pytest_runtest_setup(item):
    """A test marked ``needs_scatter`` skips (with a reason CI expects) where torch_scatter or
    torch_sparse is missing; with ``GRAPH_ADAPTER_REQUIRE_SCATTER=1`` (.ci/run's scatter step)
    a missing one fails instead, so that step cannot go green by skipping."""
    if item.get_closest_marker("needs_scatter") is None:
        return
    missing = [m for m in SCATTER_PACKAGES if _import_problem(m)]
    if not missing:
        return
    why = (f"needs_scatter: {'; '.join(_import_problem(m) for m in missing)} (pip install "
           f"scipy, then --no-deps ../shared/wheels/torch_scatter-*.whl "
           f"../shared/wheels/torch_sparse-*.whl)")
    if os.environ.get("GRAPH_ADAPTER_REQUIRE_SCATTER") == "1":
        pytest.fail(why + " under GRAPH_ADAPTER_REQUIRE_SCATTER=1", pytrace=False)
    pytest.skip(why)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI, an unexpected skip of a test becomes a failure (xfails stay xfails)."""
    outcome = yield
    report = outcome.get_result()
    if not _CI or not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report)
    if not expected_skip(report.nodeid, reason):
        report.outcome = "failed"
        report.longrepr = (f"unexpected skip under GRAPH_ADAPTER_CI=1: {reason}\n"
                           "Make it run (install the extra, fix the import) or add it, with the "
                           "reason, to CI_EXPECTED_SKIPS in tests/conftest.py.")


def pytest_collectreport(report):
    """Under CI, remember a module skipped at import (e.g. a module-level importorskip)."""
    if _CI and report.skipped:
        reason = _skip_reason(report)
        if not expected_skip(report.nodeid, reason):
            _unexpected_collect_skips.append(f"{report.nodeid}: {reason}")


def pytest_terminal_summary(terminalreporter):
    for line in _unexpected_collect_skips:
        terminalreporter.write_line(f"UNEXPECTED SKIP (GRAPH_ADAPTER_CI=1): {line}", red=True)


def pytest_sessionfinish(session, exitstatus):
    if _unexpected_collect_skips and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
