"""Every expected failure of the graph-adapter command is one line on stderr and exit
code 2, raised before any slow work starts (no molecule loaded);
absurd settings are refused or warned about with what to use instead."""
import sys

import pytest

from graph_adapter.app import cli

from graph_adapter.app.demo import graph as demo
from graph_adapter.backends import backend_names

pytest.importorskip("rdkit")  # the demo's preflight asks for it first


def _no_slow_work(monkeypatch):
    """Loading molecules fails the test: the error must come first."""
    def slow(*args, **kwargs):
        raise AssertionError("slow work started before the expected failure was reported")

    monkeypatch.setattr(demo, "load_nci5k", slow)


def _missing(*modules):
    return lambda mp: [mp.setitem(sys.modules, m, None) for m in modules]


CASES = {
    "backend module missing": (["demo", "--backend", "poptorch"], _missing("poptorch"),
                               "Poplar SDK"),
    "rdkit missing": (["demo"], _missing("rdkit", "rdkit.RDConfig"), ".[chem]"),
    "matplotlib missing": (["demo", "--plot", "p.png"], _missing("matplotlib"), ".[plot]"),
    "unknown backend": (["demo", "--backend", "nope"], None, "'nope'"),
    "unknown option": (["demo", "--frob"], None, "--frob"),
    "bad value": (["demo", "--epochs", "0"], None, "epochs must be >= 1"),
    "not a number": (["demo", "--epochs", "ten"], None, "'ten'"),
    "absurd batch size": (["demo", "--batch-graphs", "1"], None, "--batch-graphs 32 to 256"),
    "precompile without inductor": (["demo", "--precompile", "--backend", "eager"], None,
                                    "--precompile saves inductor's"),
    "missing molecule file": (["demo", "--data", "no/such/file.csv"], None, "no/such/file.csv"),
    "check: no factory": (["check"], None, "factory"),
    "check: bad module path": (["check", "no_such_module_ga:f"], None, "no_such_module_ga"),
    "check: not module:factory": (["check", "no_colon"], None, "package.module:factory"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_expected_failure_is_one_line_and_exit_2(case, monkeypatch, capsys):
    argv, setup, needle = CASES[case]
    _no_slow_work(monkeypatch)
    if setup is not None:
        setup(monkeypatch)
    assert cli.main(argv + ["--quiet"] if argv[0] == "demo" else argv) == 2
    err = capsys.readouterr().err
    assert err.endswith("\n") and err.count("\n") == 1, err  # one line
    assert err.startswith("graph-adapter") and "Traceback" not in err
    assert needle in err


def test_demo_help_lists_every_backend(capsys):
    assert cli.main(["demo", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    listed = text.rsplit("--backend NAME", 1)[1].split(" --", 1)[0]  # the option's help
    for name in backend_names():
        assert name in listed, name


def test_settings_far_from_useful_values_are_warned_about_with_a_remedy(monkeypatch):
    from graph_adapter.app import preflight
    from graph_adapter.app.preflight import DemoSettingError, check_demo_settings
    from graph_adapter.app.demo.results import DemoConfig

    monkeypatch.setattr(preflight.os, "getloadavg", lambda: (0.1, 0.1, 0.1))  # a quiet machine
    assert check_demo_settings(DemoConfig()) == []  # the defaults are fine
    small = check_demo_settings(DemoConfig(batch_graphs=4, limit=200))
    assert len(small) == 1 and "batch_graphs=4" in small[0] and "--batch-graphs 32" in small[0]
    whole = check_demo_settings(DemoConfig(batch_graphs=500, limit=100))
    assert any("one step an epoch" in w for w in whole)
    assert any("lr=5.0" in w for w in check_demo_settings(DemoConfig(lr=5.0)))
    with pytest.raises(DemoSettingError, match="45,000 in all"):
        check_demo_settings(DemoConfig(batch_graphs=1))
    assert check_demo_settings(DemoConfig(batch_graphs=1, limit=50, epochs=1)) != []  # warned


def test_a_busy_machine_is_warned_about_when_the_run_is_multi_threaded(monkeypatch):
    """Several threads on CPUs that other work keeps busy stall at every op: warned, with
    the remedy; one thread, or a quiet machine, is not warned about."""
    from graph_adapter.app import preflight
    from graph_adapter.app.demo.results import DemoConfig

    monkeypatch.setattr(preflight.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(preflight.os, "getloadavg", lambda: (5.5, 5.0, 4.0))
    (warning,) = preflight.check_demo_settings(DemoConfig(threads=2))
    assert "load average 5.5 on 2 CPUs" in warning and "--threads 1" in warning
    assert preflight.check_demo_settings(DemoConfig(threads=1)) == []
    monkeypatch.setattr(preflight.os, "getloadavg", lambda: (1.2, 1.0, 1.0))
    assert preflight.check_demo_settings(DemoConfig(threads=2)) == []


def test_demo_precompile_flag_reaches_the_adapters_compile(monkeypatch):
    """``--precompile`` is ``compile(..., precompile=True)`` for the adapter's model (a spy
    records the call and ends the run: the flag, not inductor, is under test)."""
    from graph_adapter.app.demo import timing
    from graph_adapter.app.demo.results import DemoConfig
    from graph_adapter.app.demo.graph import run_demo
    from _demo import TINY

    seen = []

    class Seen(Exception):
        pass

    def spy(wrapped, backend, **kw):  # records the call, then ends the run there
        seen.append((backend, kw.get("precompile"), kw.get("background")))
        raise Seen

    monkeypatch.setattr(timing.ga, "compile", spy)
    with pytest.raises(Seen):
        run_demo(DemoConfig(**{**TINY, "eager_baseline": False, "backend": "inductor",
                               "precompile": True}))
    # (without the flag nothing is passed: the demo tests on aot_eager would fail if it were,
    # compile() refusing precompile=True there)
    assert seen == [("inductor", True, True)]  # (background: the demo's default on inductor)
