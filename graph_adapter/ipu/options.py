"""``IPUOptions``: one description of an IPU run, for every IPU backend.

``F = D * R * A`` (device iterations, replicas, gradient accumulation) is the
leading dim of every host-batch tensor: ``FixedSizeLoader(micro_batches=F)``
stacks it; ``options.to_poptorch()`` builds the matching ``poptorch.Options``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, List

from torch import Tensor

from .inputs import named_tensors
from .sdk import import_poptorch

__all__ = ["OUTPUT_MODES", "IPUOptions"]

#: The output modes, with the poptorch ``OutputMode`` member each maps to.
OUTPUT_MODES = {"all": "All", "final": "Final", "sum": "Sum", "every_n": "EveryN"}


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class IPUOptions:
    """How a model runs on IPUs, for every IPU backend (poptorch and the emulator).

    Args:
        device_iterations: ``D``, steps run on the device per host call.
        replication_factor: ``R``, data-parallel replicas.
        gradient_accumulation: ``A``, micro-batches whose gradients are
            reduced (Mean, poptorch's default) before one optimizer step.
        output_mode: ``"all"`` (every micro-batch), ``"final"`` (the last
            one of each replica), ``"sum"`` (summed per replica) or
            ``"every_n"`` (every ``output_return_period``-th device iteration).
        output_return_period: ``N`` for ``"every_n"``; must divide ``D``.
        half_inputs: cast every floating input to float16 on the host before
            the call (graphium trained in fp16 on IPUs); make the model's
            parameters float16 too (``model.half()``). Both IPU backends do
            the cast; the masked losses stay finite in float16 (``torch.where``,
            never ``0 * NaN``).

    ``micro_batches`` (``F = D * R * A``) is the leading dim every host-batch
    tensor must carry: build the loader with ``FixedSizeLoader(...,
    micro_batches=options.micro_batches)``.

    Note: poptorch's own default output mode is ``Final`` for training and
    ``All`` for inference; :meth:`to_poptorch` always sets the mode named
    here, so the backends agree.

    Raises:
        ValueError: a count that is not a positive int, an unknown ``output_mode``,
            or an ``output_return_period`` that does not divide ``D``.

    Example:
        ```python
        from graph_adapter import IPUOptions

        opts = IPUOptions(device_iterations=2, gradient_accumulation=4)
        assert opts.micro_batches == 8  # F = D * R * A: the loader's micro_batches=
        ```
    """

    device_iterations: int = 1
    replication_factor: int = 1
    gradient_accumulation: int = 1
    output_mode: str = "all"
    output_return_period: int = 1
    half_inputs: bool = False

    def __post_init__(self) -> None:
        _positive_int("device_iterations", self.device_iterations)
        _positive_int("replication_factor", self.replication_factor)
        _positive_int("gradient_accumulation", self.gradient_accumulation)
        _positive_int("output_return_period", self.output_return_period)
        if self.output_mode not in OUTPUT_MODES:
            raise ValueError(
                f"output_mode={self.output_mode!r}; choose one of {sorted(OUTPUT_MODES)}"
            )
        if self.output_mode == "every_n":
            if self.device_iterations % self.output_return_period:
                raise ValueError(
                    f"output_mode='every_n' returns every N-th device iteration: "
                    f"output_return_period={self.output_return_period} must divide "
                    f"device_iterations={self.device_iterations}"
                )
        elif self.output_return_period != 1:
            raise ValueError(
                f"output_return_period={self.output_return_period} is only meaningful with "
                f"output_mode='every_n' (got {self.output_mode!r})"
            )

    @property
    def micro_batches(self) -> int:
        """``F = device_iterations * replication_factor * gradient_accumulation``."""
        return self.device_iterations * self.replication_factor * self.gradient_accumulation

    def for_inference(self) -> "IPUOptions":
        """Options for validation / prediction on the same host batches (same ``F``).

        ``inferenceModel`` needs ``gradient_accumulation=1``, so the ``A``
        accumulation steps become device iterations (``D' = D * A``) and every
        micro-batch's output comes back (output mode ``"all"``), as graphium's
        inference options did. Without it lightning-graphcore's ``IPUStrategy``
        builds ``deviceIterations(1)``, which does not match a loader with F > 1.
        """
        return dataclasses.replace(
            self, device_iterations=self.device_iterations * self.gradient_accumulation,
            gradient_accumulation=1, output_mode="all", output_return_period=1)

    @property
    def replicas_times_accumulation(self) -> int:
        """Micro-batches whose gradients one optimizer step averages (``R * A``)."""
        return self.replication_factor * self.gradient_accumulation

    def to_poptorch(self, poptorch: Any = None, base: Any = None) -> Any:
        """The matching ``poptorch.Options``.

        Args:
            poptorch: the poptorch module to use (default: import it; tests
                pass a stand-in).
            base: an existing ``poptorch.Options`` to fill in instead of a new one.

        Sets ``deviceIterations``, ``replicationFactor``,
        ``Training.gradientAccumulation``, ``outputMode`` and, explicitly,
        ``Training.accumulationAndReplicationReductionType(Mean)``. Never
        touches ``Jit.traceModel`` (it raises since SDK 3.1).
        """
        pt = poptorch if poptorch is not None else import_poptorch()
        opts = base if base is not None else pt.Options()
        opts.deviceIterations(self.device_iterations)
        opts.replicationFactor(self.replication_factor)
        opts.Training.gradientAccumulation(self.gradient_accumulation)
        opts.Training.accumulationAndReplicationReductionType(pt.ReductionType.Mean)
        mode = getattr(pt.OutputMode, OUTPUT_MODES[self.output_mode])
        if self.output_mode == "every_n":
            opts.outputMode(mode, self.output_return_period)
        else:
            opts.outputMode(mode)
        return opts

    def split_problems(self, name: str, t: Tensor) -> List[str]:
        """Why poptorch could not split input ``name`` into ``F`` micro-batches (empty if it can)."""
        F = self.micro_batches
        if F == 1:
            return []
        how = (
            f"deviceIterations ({self.device_iterations}) * replicationFactor "
            f"({self.replication_factor}) * gradientAccumulation "
            f"({self.gradient_accumulation}) = {F}"
        )
        if t.dim() == 0:
            return [f"{name}: a 0-d tensor cannot be split into {F} micro-batches ({how})"]
        if t.size(0) % F:
            return [
                f"{name}: dim 0 has size {t.size(0)}, which is not a multiple of {how}; build the "
                f"loader with FixedSizeLoader(..., micro_batches={F})"
            ]
        return []

    def check_batch(self, flat: Any) -> List[str]:
        """Problems poptorch would have splitting ``flat``'s tensors by ``F`` (empty if none)."""
        return [p for name, t in named_tensors(flat, "batch") for p in self.split_problems(name, t)]
