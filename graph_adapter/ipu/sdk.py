"""Where poptorch comes from: the one place that imports it.

poptorch ships with Graphcore's Poplar SDK, not on PyPI; every IPU module
calls :func:`import_poptorch` when (and only when) it needs the real thing,
so that ``import graph_adapter`` never needs it.
"""
from __future__ import annotations

from typing import Any

__all__ = ["import_poptorch"]


def import_poptorch() -> Any:
    """``import poptorch``, or an ``ImportError`` that says where it comes from.

    The original error is chained (``__cause__``) and quoted.
    """
    try:
        import poptorch  # noqa: F401  (ships with the Graphcore Poplar SDK)
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise ImportError(
            "graph_adapter's 'poptorch' backend needs poptorch, which ships with Graphcore's "
            "Poplar SDK and is not on PyPI: install the SDK and its poptorch wheel, then "
            "`source enable.sh`. To test IPU code without hardware use "
            f"backend='ipu-emulator'. (Original error: {exc!r})"
        ) from exc
    return poptorch
