"""The demo's settings: one :class:`DemoConfig`, built once (from the CLI flags, or
:func:`~graph_adapter.app.demo.graph.run_demo`'s overrides) and passed down to the runs,
the rounds, the preflight and the report."""
from __future__ import annotations

import dataclasses
from typing import Optional

__all__ = ["DemoConfig", "LAYOUTS", "loader_layout"]

#: The demo's ``layout`` setting, one form from ``--layout`` to the report: FixedSizeLoader's
#: aggregation layouts by name, ``"none"`` for PyG's scatter (the loader's ``layout=None``).
LAYOUTS = ("hyb", "ell", "none")


def loader_layout(layout: str) -> Optional[str]:
    """FixedSizeLoader's ``layout`` argument for the demo's setting (``"none"``: ``None``)."""
    return None if layout == "none" else layout


@dataclasses.dataclass
class DemoConfig:
    """Settings of :func:`run_demo` (the CLI flags of ``graph-adapter demo``)."""

    epochs: int = 10
    batch_graphs: int = 64
    seed: int = 0
    model: str = "gine"
    backend: str = "auto"
    # FixedSizeLoader's aggregation layout, one of LAYOUTS ("none": PyG's scatter): HYB's
    # narrow neighbour tables were the steadiest compiled training and the fastest
    # inference measured (docs/benchmarks.md); fitted on every molecule, shared by the
    # train and test loaders
    layout: str = "hyb"
    hidden: int = 64
    layers: int = 4
    lr: float = 2e-3
    test_fraction: float = 0.1
    limit: Optional[int] = None  # use only the first `limit` molecules
    path: Optional[str] = None  # a SMILES,TPSA csv instead of rdkit's
    eager_baseline: bool = True
    # a third run: eager PyG's model under torch.compile(dynamic=True) (PyG's documented
    # compile route) on the same DataLoader batches
    pyg_compile: bool = True
    # the Dynamo backend of that run ("inductor": torch.compile's default, PyG's route;
    # the tests pass "aot_eager", which compiles nothing but counts the same graphs)
    pyg_compile_backend: str = "inductor"
    progress: bool = True
    plot: Optional[str] = None  # write loss curves + padding histogram to this PNG
    explain: bool = False  # print the method notes of the report's [1]-[4]
    threads: Optional[int] = None
    # torch.use_deterministic_algorithms(True) for the run: compiled kernels fall back to
    # ATen's deterministic ones instead of multi-threaded atomic adds
    deterministic: bool = False
    # inference is timed after every run has trained and compiled, in this many
    # interleaved rounds over the test split (each round runs each run once, in turn)
    infer_rounds: int = 30
    # training too, before those: each run's training step over the same number of
    # training graphs (TRAIN_ROUND_GRAPHS) in this many interleaved rounds, its weights and
    # optimizer state put back afterwards (0: the training figures of the runs' own
    # epochs, run after run)
    train_rounds: int = 15
    # compile(..., precompile=True) for the adapter's model (inductor only): a later run
    # with the same settings loads each graph's Dynamo result instead of tracing again
    precompile: bool = False
    # compile(..., background=True) for the adapter's model: it trains eagerly while a
    # child process compiles, then switches (None: on with backend "inductor", the
    # demo's default; False: the first step compiles)
    background: Optional[bool] = None
