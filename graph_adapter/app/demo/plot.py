"""The demo's plot (``graph-adapter demo --plot``): :func:`write_plot` draws a
:class:`~graph_adapter.app.demo.results.DemoResult`'s loss curves and padding histogram;
:func:`check_plot_extra` says what to install when matplotlib is missing. Importable from
:mod:`graph_adapter.app.demo.results` too.
"""
from __future__ import annotations

import importlib
from typing import Any

from ..datasets import MissingExtraError

# ``result`` is a results.DemoResult; results imports this module, so the type is
# named in words, not imported (no import cycle, for type checkers either).
DemoResult = Any

__all__ = ["write_plot", "check_plot_extra"]


def write_plot(result: DemoResult, path: str) -> None:
    """Loss curves (every run) and the histogram of per-batch node fill."""
    check_plot_extra()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ep = list(range(1, len(result.adapter.epoch_loss) + 1))
    ax1.plot(ep, result.adapter.epoch_loss, marker="o", label=f"graph_adapter [{result.backend}]")
    if result.eager is not None:
        ax1.plot(ep, result.eager.epoch_loss, marker="s", label="eager PyG")
        ax1.axhline(result.eager.test_mae, color="C1", ls=":", label="eager PyG test MAE")
    if result.pyg_compiled is not None:
        ax1.plot(ep, result.pyg_compiled.epoch_loss, marker="^", label="PyG compiled")
    ax1.axhline(result.adapter.test_mae, color="C0", ls=":", label="graph_adapter test MAE")
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("train L1 loss (TPSA, A^2)")
    ax1.set_title("loss curves")
    ax1.legend()
    ax2.hist([100 * f for f in result.batch_node_fill], bins=20, color="C2")
    ax2.axvline(100 * result.node_efficiency, color="k", ls="--",
                label=f"epoch mean {result.node_efficiency:.1%}")
    ax2.set_xlabel("real nodes / node budget, % (per batch)")
    ax2.set_ylabel("batches")
    ax2.set_title(f"padding: nodes={result.budget['nodes']}, edges={result.budget['edges']}, "
                  f"graphs={result.budget['graphs']}")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def check_plot_extra() -> None:
    """Raise :class:`MissingExtraError` (naming the 'plot' extra) if matplotlib is missing."""
    try:
        importlib.import_module("matplotlib")  # (imported, not only found: as --plot will)
    except ImportError as e:
        raise MissingExtraError(
            "--plot needs matplotlib; install the 'plot' extra: pip install -e \".[plot]\" "
            "(or pip install matplotlib)") from e
