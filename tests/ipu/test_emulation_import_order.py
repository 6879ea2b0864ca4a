"""emulate_poptorch() after Lightning was imported (issue 25 item 3).

Lightning calls lightning-utilities' memoised ``package_available("poptorch")``
when it is imported; graphium imports Lightning, so a graphium user's
``emulate_poptorch()`` comes after it. Each case runs in a fresh interpreter
(the memo is per process). lightning-graphcore itself is tested in its own venv
(``tests/lightning_graphcore_venv``).
"""
import subprocess
import sys
import textwrap
import types

import pytest

from graph_adapter.ipu import EmulatorError, emulate_poptorch


def _run(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_lightning_imported_first_still_finds_the_emulation():
    pytest.importorskip("lightning")
    out = _run("""
        import lightning.pytorch  # memoises package_available("poptorch") = False
        from lightning_utilities.core.imports import package_available, module_available
        assert package_available("poptorch") is False
        from graph_adapter.ipu import emulate_poptorch
        with emulate_poptorch():
            print("inside", package_available("poptorch"), module_available("poptorch"))
        print("after", package_available("poptorch"))
    """)
    assert out.split() == ["inside", "True", "True", "after", "False"], out


def test_a_module_that_recorded_no_poptorch_is_named(monkeypatch):
    stale = types.ModuleType("lightning_graphcore.accelerator")
    stale._POPTORCH_AVAILABLE = False  # what lightning-graphcore records when imported first
    monkeypatch.setitem(sys.modules, "lightning_graphcore.accelerator", stale)
    before = sys.modules.get("poptorch")
    with pytest.raises(EmulatorError, match=r"lightning_graphcore\.accelerator was imported before "
                       r"emulate_poptorch\(\).*call graph_adapter\.ipu\.emulate_poptorch\(\) before"):
        emulate_poptorch()
    assert sys.modules.get("poptorch") is before  # nothing installed
    stale._POPTORCH_AVAILABLE = True  # imported after the emulation: fine
    emulate_poptorch().restore()
