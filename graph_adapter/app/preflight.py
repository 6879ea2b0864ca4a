"""The demo's settings checked before any slow work starts (loading molecules, compiling).

:func:`check_demo_settings` raises for what cannot work (a bad value, a
missing extra or backend module, a missing file) and returns warnings for
what works but is probably not meant (a setting far from useful values, or
several threads on a machine other work keeps busy), each saying what to use
instead. ``graph-adapter demo`` prints each as one
line on stderr; :func:`graph_adapter.app.demo.graph.run_demo` calls it too.
"""
from __future__ import annotations

import math
import os
from typing import List

import torch

from graph_adapter.backends import backend_names, resolve_backend

from .datasets import require_rdkit
from .models import MODELS
from .demo.results import DemoConfig, check_plot_extra

__all__ = ["DemoSettingError", "check_demo_settings", "MAX_STEPS_PER_RUN", "NCI5K_SIZE"]

#: Molecules in rdkit's NCI first_5k file (the demo's data without ``--limit``).
NCI5K_SIZE = 5000
#: More optimizer steps than this in one run (epochs x batches an epoch) is refused:
#: the defaults take 710, and a run this long is hours of eager PyG on a CPU.
MAX_STEPS_PER_RUN = 20_000
#: Fewer graphs a batch than this gives noisy BatchNorm statistics: warned about.
MIN_USEFUL_BATCH_GRAPHS = 8


class DemoSettingError(ValueError):
    """A demo setting that cannot work; the message says what to use instead."""


def _expected_molecules(cfg: DemoConfig) -> int:
    """How many molecules the run will load, known before loading them (an upper bound)."""
    if cfg.path is not None:
        with open(cfg.path) as f:  # counting lines is cheap; parsing SMILES is the slow part
            n = sum(1 for line in f if line.strip() and not line.lstrip().startswith("#"))
    else:
        n = NCI5K_SIZE
    return n if cfg.limit is None else min(n, cfg.limit)


def _require_backend(name: str) -> None:
    """Import what the backend needs now, so that a missing one fails before the data loads."""
    concrete, _ = resolve_backend(name)
    if concrete == "poptorch":
        from graph_adapter.ipu import import_poptorch

        import_poptorch()  # an ImportError naming the Poplar SDK when poptorch is missing


def _dynamo_backends() -> List[str]:
    from .torch_internals import dynamo_backends

    return dynamo_backends()


def _check_values(cfg: DemoConfig) -> None:
    if cfg.model not in MODELS:
        raise DemoSettingError(f"model={cfg.model!r}; choose one of {sorted(MODELS)}")
    if cfg.backend not in backend_names():
        raise DemoSettingError(f"backend={cfg.backend!r}; choose one of {', '.join(backend_names())}")
    if cfg.backend == "inductor_cudagraphs":  # the demo trains on the CPU
        raise DemoSettingError("backend='inductor_cudagraphs' records CUDA graphs and the demo "
                               "runs on the CPU; use --backend inductor (or auto)")
    for name in ("epochs", "batch_graphs", "hidden", "layers"):
        value = getattr(cfg, name)
        if value < 1:
            raise DemoSettingError(f"{name} must be >= 1, got {value} "
                                   f"(default {getattr(DemoConfig, name)})")
    if isinstance(cfg.infer_rounds, bool) or not isinstance(cfg.infer_rounds, int) \
            or cfg.infer_rounds < 1:
        raise DemoSettingError(f"infer_rounds must be an int >= 1 (interleaved inference "
                               f"rounds), got {cfg.infer_rounds!r} (default "
                               f"{DemoConfig.infer_rounds})")
    if isinstance(cfg.train_rounds, bool) or not isinstance(cfg.train_rounds, int) \
            or cfg.train_rounds < 0:
        raise DemoSettingError(f"train_rounds must be an int >= 0 (interleaved training "
                               f"rounds; 0: the runs' own epochs), got {cfg.train_rounds!r} "
                               f"(default {DemoConfig.train_rounds})")
    if not (math.isfinite(cfg.lr) and cfg.lr > 0):
        raise DemoSettingError(f"lr must be a positive number, got {cfg.lr} (default {DemoConfig.lr})")
    if cfg.limit is not None and cfg.limit < 2:
        raise DemoSettingError(f"limit must be >= 2 (a train and a test molecule), got {cfg.limit}")
    if cfg.threads is not None and cfg.threads < 1:
        raise DemoSettingError(f"threads must be >= 1, got {cfg.threads}")
    if cfg.precompile and resolve_backend(cfg.backend)[0] != "inductor":
        raise DemoSettingError(f"--precompile saves inductor's compiled graphs, and backend "
                               f"{cfg.backend!r} resolves to "
                               f"{resolve_backend(cfg.backend)[0]!r}; use --backend inductor "
                               f"(or auto without poptorch), or drop --precompile")
    if cfg.pyg_compile and cfg.pyg_compile_backend not in _dynamo_backends():
        raise DemoSettingError(f"pyg_compile_backend={cfg.pyg_compile_backend!r}; choose one of "
                               f"torch._dynamo.list_backends(): {_dynamo_backends()}")
    if not 0 < cfg.test_fraction < 1:
        raise DemoSettingError(f"test_fraction must be in (0, 1), got {cfg.test_fraction}")


def _check_scale(cfg: DemoConfig, molecules: int) -> List[str]:
    """Refuse a run of absurd length; warn about settings far from useful values."""
    warnings: List[str] = []
    train = max(1, molecules - max(1, round(molecules * cfg.test_fraction)))
    per_epoch = math.ceil(train / cfg.batch_graphs)
    if per_epoch * cfg.epochs > MAX_STEPS_PER_RUN:
        raise DemoSettingError(
            f"batch_graphs={cfg.batch_graphs} with epochs={cfg.epochs} means about "
            f"{per_epoch:,} optimizer steps an epoch ({per_epoch * cfg.epochs:,} in all) for each "
            f"of the runs; use --batch-graphs 32 to 256 (default {DemoConfig.batch_graphs}), "
            f"fewer --epochs, or --limit for fewer molecules")
    if cfg.batch_graphs < MIN_USEFUL_BATCH_GRAPHS:
        warnings.append(
            f"batch_graphs={cfg.batch_graphs}: BatchNorm statistics over so few graphs are noisy "
            f"and each step does little work; use --batch-graphs 32 to 256 "
            f"(default {DemoConfig.batch_graphs})")
    if cfg.batch_graphs >= train:
        warnings.append(
            f"batch_graphs={cfg.batch_graphs} is not below the {train} training molecules: one "
            f"step an epoch; use a --batch-graphs well below {train}")
    if cfg.lr > 0.1:
        warnings.append(f"lr={cfg.lr} is far above Adam's useful range and will likely diverge; "
                        f"use 1e-4 to 1e-2 (default {DemoConfig.lr})")
    return warnings


def _check_load(cfg: DemoConfig) -> List[str]:
    """Warn when other work already keeps every CPU busy and the run is multi-threaded.

    Each multi-threaded op waits at its end for all of its threads; on a CPU
    shared with other busy processes one of them is often off the core, so
    steps stall. Measured on a 2-core machine at load average 5-6: eager PyG
    steps of the defaults took 6.4 s at 2 threads, 0.045 s at 1 thread.
    """
    threads = cfg.threads or torch.get_num_threads()
    cpus = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:  # (not on every platform)
        return []
    if threads > 1 and load >= cpus:
        return [f"the machine is busy (load average {load:.1f} on {cpus} CPUs): with {threads} "
                f"threads every step waits for a free core, so steps can take many times longer "
                f"and the throughput figures are not steady; run when the machine is quiet, or "
                f"use --threads 1 (much faster on a busy machine)"]
    return []


def check_demo_settings(cfg: DemoConfig) -> List[str]:
    """Check ``cfg`` before the demo starts; return warnings (one line each, with a remedy).

    Raises:
        DemoSettingError: a value that cannot work, or a run of more than
            :data:`MAX_STEPS_PER_RUN` steps.
        graph_adapter.app.datasets.MissingExtraError: rdkit (or, with
            ``plot``, matplotlib) is not installed.
        ImportError: the backend's module (poptorch) is not installed.
        FileNotFoundError: ``path`` does not exist.
    """
    _check_values(cfg)
    require_rdkit()
    if cfg.path is not None and not os.path.isfile(cfg.path):
        raise FileNotFoundError(f"molecule file not found: {cfg.path}")
    if cfg.plot:
        check_plot_extra()
    _require_backend(cfg.backend)
    return _check_scale(cfg, _expected_molecules(cfg)) + _check_load(cfg)
