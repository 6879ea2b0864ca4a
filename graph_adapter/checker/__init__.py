"""The dispatcher checker: what poptorch would reject, found on CPU, as a report.

:func:`check` runs a wrapped model's forward (and backward) twice, under fake
tensors and under the watches of :mod:`graph_adapter.ipu.dispatcher`, and
returns a :class:`CheckReport` of every :class:`Finding`
(:mod:`graph_adapter.checker.report`). The rules themselves belong to
:mod:`graph_adapter.ipu`, whose emulation enforces them too; the command
line is the application's (``graph-adapter check``).

It may import :mod:`graph_adapter.ipu`, :mod:`graph_adapter.nn` and the
stages before them; never ``backends``, ``lightning`` or ``app``.
"""
from ..format import value_problems
from ..ipu import KINDS, POPTORCH_MESSAGES, Finding, dispatcher_rules
from ..ipu import reassigned_state, state_addresses
from .report import CheckReport, check

__all__ = ["KINDS", "POPTORCH_MESSAGES", "Finding", "CheckReport", "check", "dispatcher_rules",
           "state_addresses", "reassigned_state", "value_problems"]
