"""Whether a training run repeats bit for bit: measured, not assumed.

:func:`repeat_gap` runs the same few training steps twice from the same
state (weights, buffers such as BatchNorm's running statistics, optimizer
state, RNG) and returns how far apart their losses came out. ``0.0`` means
they repeated bit for bit; anything else means a kernel sums in an order that
changes from call to call (e.g. atomic adds run by several threads), and a
whole run's final test error will vary from run to run with it. The state is
restored afterwards, so the probe leaves the run as it found it.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple

import torch
from torch import nn

__all__ = ["repeat_gap", "known_nondeterminism", "snapshot", "restore", "PROBE_STEPS"]

#: Training steps the probe runs (twice).
PROBE_STEPS = 3


def snapshot(modules: Sequence[nn.Module], optimizer: torch.optim.Optimizer) -> Tuple[Any, ...]:
    """A copy of a run's training state: the modules' state dicts (weights and buffers),
    the optimizer's state and the RNG (:func:`restore` puts it back)."""
    return ([copy.deepcopy(m.state_dict()) for m in modules],
            copy.deepcopy(optimizer.state_dict()), torch.get_rng_state())


def restore(state: Tuple[Any, ...], modules: Sequence[nn.Module],
            optimizer: torch.optim.Optimizer) -> None:
    """Put back what :func:`snapshot` copied."""
    # load_state_dict copies into the existing tensors: compiled code keeps its inputs
    for m, sd in zip(modules, state[0]):
        m.load_state_dict(sd)
    optimizer.load_state_dict(copy.deepcopy(state[1]))
    torch.set_rng_state(state[2])


def repeat_gap(step: Callable[[Any], Tuple[float, int]], batches: Iterable[Any],
               modules: Sequence[nn.Module], optimizer: torch.optim.Optimizer,
               steps: int = PROBE_STEPS) -> float:
    """The largest difference between the losses of ``steps`` steps run twice from one state.

    Args:
        step: one training step (forward, backward, optimizer step) on a batch,
            returning ``(loss, graphs)``.
        batches: at least one batch; the first ``steps`` are used.
        modules: every module whose state a step changes (parameters, buffers).
        optimizer: the optimizer ``step`` steps.

    Returns:
        ``0.0`` when both passes gave the same losses bit for bit.
    """
    sample: List[Any] = []
    for batch in batches:
        sample.append(batch)
        if len(sample) == steps:
            break
    state = snapshot(modules, optimizer)
    losses = []
    for _ in range(2):
        restore(state, modules, optimizer)
        losses.append([step(b)[0] for b in sample])
    restore(state, modules, optimizer)
    # NaN twice counts as a repeat (the run is broken, but repeatably so)
    return max((0.0 if a == b or (a != a and b != b) else abs(a - b)
                for a, b in zip(*losses)), default=0.0)


def known_nondeterminism(backend: str, threads: int, deterministic: bool,
                         atomic_adds: Optional[bool] = None) -> Optional[str]:
    """Why training on ``backend`` with these settings will not repeat bit for bit, or ``None``.

    ``backend`` is the one that runs the training steps (``"eager"`` under
    ``"inductor_eval"``). Inductor's generated CPU kernels may accumulate
    gradients with atomic adds (``index_put`` with ``accumulate=True``: an
    embedding's gradient, PyG's gathers'); on more than one thread their order
    changes from run to run, so sums differ in the last bits and training
    drifts apart over hundreds of steps. A short probe (:func:`repeat_gap`)
    often misses it (two threads rarely collide in a few steps), so the code
    is read instead: ``atomic_adds`` is what
    :attr:`graph_adapter.backends.Compiled.atomic_adds` found in the code it
    generated (``graph_adapter.compile`` keeps ATen's ``index_add`` for
    gathers and embeddings on more than one thread, so the demo's models
    have none); ``None`` (unknown, e.g. PyG's own ``torch.compile`` route)
    assumes they are there. ``torch.use_deterministic_algorithms(True)``
    makes inductor call ATen's deterministic kernels instead; one thread has
    no order to change.
    """
    if backend == "inductor" and threads > 1 and not deterministic and atomic_adds is not False:
        return (f"inductor's CPU kernels accumulate some gradients with atomic adds on "
                f"{threads} threads, in an order that changes from run to run")
    return None
