"""The Dynamo internals the application reads, one named helper each.

The demo counts the graphs Dynamo compiled (its counters), the preflight
checks a backend name against Dynamo's list, and the zoo resets Dynamo and
patches its config between rows. torch has no public API for these; the app
uses them through this module only (``docs/dev/ARCHITECTURE.md``, "Internals").
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List

__all__ = ["dynamo_backends", "dynamo_counters", "dynamo_config_patch", "lookup_backend",
           "reset_dynamo"]


def dynamo_backends() -> List[str]:
    """Every backend name ``torch.compile(backend=...)`` accepts here."""
    import torch._dynamo

    return list(torch._dynamo.list_backends(exclude_tags=()))


def dynamo_counters() -> Dict[str, Any]:
    """Dynamo's and inductor's process-wide event counters (``counters["inductor"]`` ...)."""
    from torch._dynamo.utils import counters

    return counters


def dynamo_config_patch(changes: Dict[str, Any]) -> Any:
    """A context in which Dynamo's config has ``changes``."""
    import torch._dynamo

    return torch._dynamo.config.patch(changes)


def lookup_backend(name: str) -> Callable:
    """The compiler function Dynamo registers under ``name``."""
    import torch._dynamo

    return torch._dynamo.lookup_backend(name)


def reset_dynamo() -> None:
    """Forget every compiled graph and guard (``torch._dynamo.reset()``)."""
    import torch._dynamo

    torch._dynamo.reset()
