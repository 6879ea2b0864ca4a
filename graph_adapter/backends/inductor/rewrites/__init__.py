"""Graph rewrites applied to a model's graphs when inductor compiles them.

Eight rewrites at two pass points (inductor has one slot per point, so one
``CustomGraphPass`` runs every rewrite of its point). Before autograd
(``pre_grad_custom_pass``, on Dynamo's torch-level graphs): :func:`compose_linears`
(a linear layer of a linear layer, e.g. a per-layer edge projection of encoded
bond features, becomes one product of the raw features), then
:func:`project_embedding_tables` (below).
After autograd (``post_grad_custom_post_pass``, on the ATen graphs inductor
lowers): :func:`project_before_aggregate` (a narrowing linear layer of a sum or
mean aggregation, GraphSAGE's last layer, projects the rows before they are
gathered and summed: fewer channels an edge), :func:`multiply_real_rows` (a product
of rows padded with zero rows multiplies the real rows only), :func:`merge_shared_left_mms` (thin
products of one left operand computed as one), :func:`transpose_thin_matmuls`,
:func:`dedupe_pure_ops` (an inference graph's per-layer copies of one computation,
GCN's ``gcn_norm``, computed once) and :func:`realize_recomputed_values` (a value
that inductor's fused loops would recompute per edge or per vector is stored once,
GCN's normalisation). Each is
described at its definition; the embedding-table projection here.

One module a rewrite (:mod:`.compose_linears`, :mod:`.embedding_tables`,
:mod:`.project_aggregate`, :mod:`.zero_rows`, :mod:`.shared_left`, :mod:`.thin_matmuls`,
:mod:`.dedupe`, :mod:`.realize`), their shared FX helpers in ``_graph``; this package holds the two
passes that run them and the version numbers inductor's cache keys follow.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Tuple

from torch import fx

from ._graph import LINEAR, example_value  # noqa: F401  (R._LINEAR, R._value: the tests read them)
from .compose_linears import compose_linears, compose_linears_rule
from .dedupe import CSE_VERSION, dedupe_pure_ops
from .embedding_tables import project_embedding_tables
from . import project_aggregate as _project
from .project_aggregate import project_before_aggregate
from . import shared_left as _shared
from .shared_left import merge_shared_left_mms
from .realize import REALIZE_VERSION, realize_recomputed_values
from .thin_matmuls import (THIN_MIN_ROWS, THIN_WIDTHS, THIN_VERSION, thin_matmul_rule,
                           transpose_thin_matmuls)
from .zero_rows import ZERO_ROWS_VERSION, multiply_real_rows

__all__ = ["project_embedding_tables", "project_embedding_tables_pass",
           "transpose_thin_matmuls", "thin_matmul_rule", "transpose_thin_matmuls_pass",
           "compose_linears", "compose_linears_rule", "realize_recomputed_values",
           "dedupe_pure_ops", "project_before_aggregate", "merge_shared_left_mms",
           "multiply_real_rows",
           "PASS_VERSION", "THIN_WIDTHS", "THIN_MIN_ROWS"]


#: Bumped whenever the pre-grad rewrites (:func:`compose_linears`, then
#: :func:`project_embedding_tables`) change what they rewrite (inductor's cache keys
#: compiled graphs by it). 4: :func:`compose_linears` added.
PASS_VERSION = 4


def _counting_pass(name: str, rewrites: Tuple[str, ...], uuid: Callable[[], str],
                   doc: str) -> type:
    """A ``CustomGraphPass`` class (inductor caches graphs by its ``uuid()``) whose
    instances run this module's functions ``rewrites`` on a graph, in turn, and count
    in ``rewritten`` what they rewrote (a graph loaded from inductor's cache is not
    rewritten again: it was already). Inductor has one slot per pass point, so one
    pass runs every rewrite of its point. Built on first use: importing
    ``torch._inductor`` is slow (see _inductor_cpu)."""
    from torch._inductor.custom_graph_pass import CustomGraphPass

    def __call__(self, graph: fx.Graph) -> None:
        for rewrite in rewrites:
            # looked up at each call: a test may have replaced the function
            self.rewritten += globals()[rewrite](graph)

    return type(name, (CustomGraphPass,), {"__doc__": doc, "__module__": __name__,
                                           "rewritten": 0, "__call__": __call__,
                                           "uuid": lambda self: uuid()})


@functools.lru_cache(maxsize=None)
def _pass_class() -> type:
    return _counting_pass(
        "ProjectEmbeddingTables", ("compose_linears", "project_embedding_tables"),
        lambda: f"graph_adapter.ProjectEmbeddingTables.v{PASS_VERSION}",
        "Inductor's ``pre_grad_custom_pass``: :func:`compose_linears` (a linear of a "
        "linear), then :func:`project_embedding_tables`.")


def project_embedding_tables_pass() -> Any:
    """A fresh instance of the pre-grad pass (a ``CustomGraphPass``, so inductor caches)."""
    return _pass_class()()


@functools.lru_cache(maxsize=None)
def _thin_pass_class() -> type:
    return _counting_pass(
        "TransposeThinMatmuls",
        ("project_before_aggregate", "multiply_real_rows", "merge_shared_left_mms",
         "transpose_thin_matmuls", "dedupe_pure_ops", "realize_recomputed_values"),
        lambda: (f"graph_adapter.TransposeThinMatmuls.v{THIN_VERSION}"
                 f".{THIN_WIDTHS.start}-{THIN_WIDTHS.stop}.{THIN_MIN_ROWS}"
                 f".realize{REALIZE_VERSION}.cse{CSE_VERSION}.zero{ZERO_ROWS_VERSION}"
                 f".{_project.project_key()}.{_shared.shared_key()}"),
        "Inductor's ``post_grad_custom_post_pass``: :func:`project_before_aggregate` "
        "(its new product may be thin), :func:`multiply_real_rows`, "
        ":func:`merge_shared_left_mms` (thin products of "
        "one left operand as one), :func:`transpose_thin_matmuls`, "
        ":func:`dedupe_pure_ops`, then :func:`realize_recomputed_values`.")


def transpose_thin_matmuls_pass() -> Any:
    """A fresh instance of the post-grad pass (a ``CustomGraphPass``, so inductor caches)."""
    return _thin_pass_class()()
