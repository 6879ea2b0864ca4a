"""``graph-adapter check``: the application's command line over graph_adapter.check
(graph_adapter.app.check_cli): exit codes, one-line usage errors, models not wrapped."""
import os
import sys
import textwrap

import pytest

from graph_adapter.app.check_cli import build_check_parser, check_main

TESTS = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def factories(tmp_path, monkeypatch):
    """Write a module ``ga_factories`` of check factories; return a function adding some."""
    def write(body: str) -> None:
        (tmp_path / "ga_factories.py").write_text(textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {TESTS!r})
            import torch
            from graph_adapter.ipu import IPUOptions
            from test_check import CleanGIN, Bad, flat_batch
        """) + textwrap.dedent(body))
        sys.modules.pop("ga_factories", None)

    monkeypatch.syspath_prepend(str(tmp_path))
    yield write
    sys.modules.pop("ga_factories", None)


def test_check_main(factories, capsys):
    factories("""
        def good():
            return CleanGIN(), flat_batch()

        def good_with_options():
            return CleanGIN(squeeze=True), flat_batch(micro=2), IPUOptions(2)

        def bad():
            return Bad("cpu"), flat_batch()

        def wrong():
            return 3
    """)
    assert check_main(["ga_factories:good"]) == 0
    assert check_main(["ga_factories:good_with_options", "--training"]) == 0
    assert check_main(["ga_factories:bad"]) == 1
    out = capsys.readouterr().out
    assert "host-transfer" in out and "torch.Tensor.cpu" in out
    assert check_main(["ga_factories:wrong"]) == 2
    assert check_main(["ga_factories:missing"]) == 2
    assert check_main(["no_colon"]) == 2
