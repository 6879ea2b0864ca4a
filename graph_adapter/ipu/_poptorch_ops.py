"""The one data table of aten ops poptorch's dispatcher has no handler for.

Each row: the aten op (``OpOverloadPacket`` name, as ``torch.ops.aten.<name>``),
what to use instead, and where the fact comes from. The checker
(:mod:`graph_adapter.checker`) flags these ops when the *forward* runs them
(backward ops do not matter: poptorch differentiates its own graph).

Add a row only with a source: a poptorch file/line read, or an IPU run.
"""
from __future__ import annotations

from typing import Dict, NamedTuple


class NoHandler(NamedTuple):
    op: str
    instead: str
    source: str


NO_HANDLER: Dict[str, NoHandler] = {
    row.op: row
    for row in (
        NoHandler(
            op="index_add",
            instead="torch.scatter_add / Tensor.scatter_add_ with the index expanded to the "
            "source's shape (or torch_geometric.utils.scatter(..., reduce='sum') with dim_size)",
            source="shared/FACTS.md, poptorch section: 'index_add (no poptorch handler)' "
            "(read in poptorch 3.4 sources); also index_add_ (same aten packet)",
        ),
    )
}
