"""Rewrites of an exported ONNX model before ``graph_adapter.export`` writes it.

One module a rewrite, each module's docstring saying what it does and when it applies;
:data:`REWRITES` lists them in the order :func:`rewrite_model` runs them (what
:mod:`graph_adapter.exporter.onnx` calls on every model it writes, unless
``export(..., rewrite=False)``), and the counts it returns say which fired (logged on
the ``graph_adapter.export`` logger). All of them keep the function; the row sums give
the same bits at any onnxruntime thread count.

* :mod:`.lookups`: sums of embedding lookups as lookups of combined tables;
* :mod:`.table_sums`: edge rows summed into their target nodes over neighbour tables
  (two inputs the serving packer builds), when export gives the tables;
* :mod:`.zero_rows`: a table sum's zero row computed by its edge rows, not copied;
* :mod:`.sorted_scatters`: the other row scatter adds as sorted segments;
* :mod:`.unread_initializers`: the initializers nothing reads any more, dropped.

Not in the registry: :mod:`.scatter_nd` (row adds as one ``ScatterND``: faster, but not
deterministic at 2 threads and more; kept for ``benchmarks/bench_onnx_scatter.py``) and
:mod:`.ladder` (the models of a ladder's rungs as one model). Their shared ONNX-graph
helpers are in ``_graph``; measurements of each rewrite are in ``docs/dev/RESULTS.md``.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence, Tuple

from ._graph import drop_dead_nodes
from .ladder import ladder_model
from .lookups import COMBINED_ROWS, combine_table_lookups
from .scatter_nd import scatter_rows_as_scatter_nd
from .sorted_scatters import deterministic_row_scatters
from .table_sums import table_row_scatters
from .unread_initializers import drop_unread_initializers
from .zero_rows import computed_zero_rows

__all__ = ["Rewrite", "REWRITES", "ModelInputs", "TableInputs", "rewrite_model",
           "combine_table_lookups", "table_row_scatters", "computed_zero_rows",
           "deterministic_row_scatters", "drop_unread_initializers", "drop_dead_nodes",
           "scatter_rows_as_scatter_nd", "ladder_model", "COMBINED_ROWS"]


class TableInputs(NamedTuple):
    """The neighbour tables an exported model's edge sums may read (:mod:`.table_sums`):
    the ONNX input names of ``edge_index`` (the model's) and of the two tables (new),
    and their sizes, fitted by export on the graphs it was given."""

    edge_index: str
    slots: str
    spill: str
    nodes: int
    width: int
    capacity: int


class ModelInputs(NamedTuple):
    """What export knows of an exported model's inputs that the rewrites use:
    ``tables`` (``None``: the model reads no ``edge_index``, or export fitted no
    tables) and ``ordered``, the ONNX names of row indices already in non-decreasing
    order (``batch``: the packer lays the nodes out in graph order)."""

    tables: Optional[TableInputs] = None
    ordered: Tuple[str, ...] = ()


class Rewrite(NamedTuple):
    """One entry of :data:`REWRITES`: its ``name`` (its module's), what it does and when
    it applies (``does``, one line; the module's docstring says the rest), and ``run``:
    ``run(model, inputs)`` rewrites an ``onnx.ModelProto`` in place and returns how
    many places it rewrote (``0``: it did not apply)."""

    name: str
    does: str
    run: Callable[[Any, ModelInputs], int]


def _table_sums(model: Any, inputs: ModelInputs) -> int:
    return 0 if inputs.tables is None else table_row_scatters(model, *inputs.tables)


#: the ONNX rewrites export runs, in this order (each may rely on the ones before it)
REWRITES: Tuple[Rewrite, ...] = (
    Rewrite("lookups",
            "sums of embedding lookups of constant tables (by columns of one input, a "
            "bias row added last) become one lookup of a combined table; always tried",
            lambda model, inputs: combine_table_lookups(model)),
    Rewrite("table_sums",
            "float row adds of edge rows into their target nodes (ScatterElements on "
            "edge_index[1]) become sums over neighbour tables; when export gives tables",
            _table_sums),
    Rewrite("zero_rows",
            "a table sum's appended zero row is computed by its edge rows (gathers "
            "through Identity/Relu/Add) instead of copied; after table_sums wrote sums",
            lambda model, inputs: computed_zero_rows(model)),
    Rewrite("sorted_scatters",
            "the other row scatter adds (ScatterElements axis=0 add on an expanded row "
            "index, reducing ScatterND on an [E, 1] one) as sorted segment sums; opset 16+",
            lambda model, inputs: deterministic_row_scatters(model, inputs.ordered)),
    Rewrite("unread_initializers",
            "initializers nothing reads (replaced tables, the exporter's leftovers) "
            "dropped; always, last",
            lambda model, inputs: drop_unread_initializers(model.graph)),
)


def rewrite_model(model: Any, inputs: ModelInputs = ModelInputs(),
                  rewrites: Sequence[Rewrite] = REWRITES) -> Dict[str, int]:
    """Run ``rewrites`` (:data:`REWRITES`, or a selection of it, in its order) on
    ``model`` (an ``onnx.ModelProto``, in place); returns each one's name -> how many
    places it rewrote (``0``: it did not apply)."""
    return {r.name: r.run(model, inputs) for r in rewrites}
