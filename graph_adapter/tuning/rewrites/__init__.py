"""The graph rewrites of the tuning wing, one module a rewrite.

Each module defines its rewrite (a function ``graph -> how many places it
rewrote``) and registers it as an entry of :mod:`graph_adapter.tuning.registry`
(its doc, pass point, order, version and the torch releases it was verified on);
the registry's passes run them. Before autograd, on Dynamo's torch-level graphs:
:func:`compose_linears`, then :func:`project_embedding_tables` (also run on
exported programs). After autograd, on the ATen graphs inductor lowers:
:func:`unfuse_bias_addmm` (CPU inference), :func:`project_before_aggregate`,
:func:`multiply_real_rows`, :func:`merge_shared_left_mms`,
:func:`transpose_thin_matmuls`, :func:`dedupe_pure_ops`,
:func:`realize_recomputed_values`. Their shared FX helpers are in ``_graph``.
"""
from __future__ import annotations

from ._graph import LINEAR, example_value  # noqa: F401  (the tests read them)
from .compose_linears import compose_linears, compose_linears_rule
from .dedupe import dedupe_pure_ops
from .embedding_tables import project_embedding_tables
from .project_aggregate import project_before_aggregate
from .realize import realize_recomputed_values
from .shared_left import merge_shared_left_mms
from .thin_matmuls import THIN_MIN_ROWS, THIN_WIDTHS, thin_matmul_rule, transpose_thin_matmuls
from .unfuse_bias import unfuse_bias_addmm
from .zero_rows import multiply_real_rows

__all__ = ["compose_linears", "compose_linears_rule", "project_embedding_tables",
           "unfuse_bias_addmm", "project_before_aggregate", "multiply_real_rows",
           "merge_shared_left_mms", "transpose_thin_matmuls", "thin_matmul_rule",
           "dedupe_pure_ops", "realize_recomputed_values", "THIN_WIDTHS", "THIN_MIN_ROWS"]
