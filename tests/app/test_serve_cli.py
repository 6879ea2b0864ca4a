"""``graph-adapter serve``: the command hands over to ``graph_adapter.serve.serve_main``
(tested with an artifact in ``tests/serve/test_server.py``)."""
from graph_adapter.app.cli import build_parser, main


def test_serve_is_a_command_and_names_a_missing_artifact(capsys):
    assert "serve" in build_parser().format_help()
    assert main(["serve", "--help"]) == 0
    assert "--max-delay-ms" in capsys.readouterr().out
    assert main(["serve", "/no/such/model.pt2", "--port", "0"]) == 2
    assert "graph-adapter serve: error: no artifact at /no/such/model.pt2" in capsys.readouterr().err
