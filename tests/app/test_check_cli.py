"""``graph-adapter check``: the application's command line over graph_adapter.check
(graph_adapter.app.check_cli): exit codes, one-line usage errors, models not wrapped."""
import os
import sys
import textwrap

import pytest
from torch import nn
from torch_geometric.nn import GIN, global_add_pool

from graph_adapter.app.check_cli import build_check_parser, check_main

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
CHECKER_TESTS = os.path.join(TESTS, "checker")  # test_check.py: the models checked


@pytest.fixture
def factories(tmp_path, monkeypatch):
    """Write a module ``ga_factories`` of check factories; return a function adding some."""
    def write(body: str) -> None:
        (tmp_path / "ga_factories.py").write_text(textwrap.dedent(f"""
            import sys
            sys.path[:0] = [{TESTS!r}, {CHECKER_TESTS!r}, {HERE!r}]
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


class _NamedTensorsGIN(nn.Module):
    """A stock-style PyG model: forward(x, edge_index, batch), not a flat dict."""

    def __init__(self):
        super().__init__()
        self.gin = GIN(4, 8, 2, out_channels=1)

    def forward(self, x, edge_index, batch):
        return global_add_pool(self.gin(x, edge_index), batch)


def test_check_wraps_a_model_that_was_not_wrapped(factories, capsys):
    """Not ipu_wrap-ped, forward(x, edge_index, batch): checked as ipu_wrap(model), said so."""
    factories(f"""
        sys.path[:0] = [{TESTS!r}, {CHECKER_TESTS!r}, {HERE!r}]
        from test_check_cli import _NamedTensorsGIN

        def plain():
            return _NamedTensorsGIN(), flat_batch()
    """)
    assert check_main(["ga_factories:plain"]) == 0
    captured = capsys.readouterr()
    note = captured.err.strip()
    assert "\n" not in note and "ipu_wrap" in note and "inputs='tensors'" in note
    assert "missing" not in captured.out + captured.err


def test_check_help_names_the_factory_result_like_the_docs():
    """One name for one thing: (wrapped, flat[, options]) in --help, as in docs/ipu.md."""
    text = " ".join(build_check_parser().format_help().split())
    assert "(wrapped, flat) or (wrapped, flat, options)" in text
    assert "(model, flat" not in text
