"""``export(wrapped, loader_or_budget, path)``: the arguments checked, the inference
module traced on the first padded batch, the contract built, the artifact written by
its format's writer (:mod:`~graph_adapter.exporter.pt2`,
:mod:`~graph_adapter.exporter.onnx`)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Union

import torch

from ..batching import Budget, FixedSizeLoader
from ..nn import IPUWrapped
from ..serve import Contract
from .batches import check_batches, collator_and_example, data_of
from .checks import Case, check_cases
from .contract import (FORMATS, TOLERANCE, contract_inputs, output_fields, refuse_unservable,
                       updated, versions)
from .ladder import ladder_of
from .onnx import write_onnx, write_onnx_ladder
from .pt2 import num_threads, write_pt2, write_pt2_ladder
from .trace import Inference, drop_unread, rewritten_program, trace
from .values import index_tables, with_value_rules

__all__ = ["export"]


def _check_args(wrapped: Any, path: str, format: str, threads: Optional[int]) -> None:
    """``export``'s argument errors, named."""
    if format not in FORMATS:
        raise ValueError(f"format={format!r}; choose one of {FORMATS}")
    if not str(path).endswith("." + format):
        raise ValueError(f"path {path!r} must end in .{format} for format={format!r}")
    if threads is not None and int(threads) < 1:
        raise ValueError(f"threads={threads}: give the server's thread count (1 or more)")
    if not isinstance(wrapped, IPUWrapped):
        raise TypeError(f"export takes an ipu_wrap-ped model, got {type(wrapped).__name__}: "
                        f"export(ipu_wrap(model), loader, path)")


def _write(module: Inference, dropped: List[str], cases: List[Case], budgets: List[Budget],
           data: Sequence[Any], path: str, contract: Contract, rewrite: bool,
           threads: Optional[int], configs: Optional[Dict[str, Any]]) -> Contract:
    """The artifact of ``export`` written (one budget: traced on ``cases[0]``; a ladder:
    one program a rung of ``budgets``, each traced on its own batches of ``data``)."""
    if not budgets:
        fed = cases[0][0]
        ep = trace(module, fed)
        if rewrite:
            ep, _ = rewritten_program(ep, fed)
    if contract.format == "onnx":
        if budgets:
            return write_onnx_ladder(module, dropped, budgets, data, path, contract, rewrite,
                                     threads)
        # the neighbour tables fitted on the graphs given (as a ladder's rungs are)
        return write_onnx(ep, path, contract, cases, rewrite, threads, data=data)
    n = torch.get_num_threads() if threads is None else int(threads)
    with num_threads(n):
        if budgets:
            return write_pt2_ladder(module, dropped, budgets, data, path,
                                    updated(contract, threads=n), rewrite, configs)
        return write_pt2(ep, path, updated(contract, threads=n), cases, configs)


def export(wrapped: IPUWrapped, loader_or_budget: Union[FixedSizeLoader, Budget], path: str,
           format: str = "pt2", *, example: Optional[Sequence[Any]] = None,
           inductor_configs: Optional[Dict[str, Any]] = None, rewrite: bool = True,
           threads: Optional[int] = None,
           ladder: Union[None, bool, Sequence[Budget]] = None,
           max_nodes: Optional[int] = None, max_edges: Optional[int] = None) -> Contract:
    """Write the inference graph of ``wrapped`` for one budget as a servable artifact.

    Args:
        wrapped: an ``ipu_wrap``-ped model (trained). Exported in ``eval()`` mode without
            its ``loss_fn``; its own mode and loss are restored afterwards.
        loader_or_budget: the ``FixedSizeLoader`` it was trained or evaluated with (its
            budget and feature schema), or a ``Budget`` with ``example=[Data, ...]``.
        path: the file to write: ``*.pt2`` for ``format="pt2"``, ``*.onnx`` for onnx.
        format: ``"pt2"`` (AOTInductor, runs on torch) or ``"onnx"`` (onnxruntime).
        example: with a ``Budget``: a few graphs the model takes (they must fit one batch).
        inductor_configs: pt2 only: passed to ``aoti_compile_and_package``.
        threads: the threads the server runs it with (``serve.load(path,
            threads=...)``). pt2: inductor compiles its loops for a fixed thread count
            (its OpenMP regions), so the kernels are compiled under
            ``torch.set_num_threads(threads)`` (restored after; ``None``: this
            process's count; recorded in the contract). onnx: the check runs the
            artifact at this count and at each of :data:`CHECK_THREADS`.
        rewrite: apply the compile path's graph rewrite to the exported program
            (:func:`rewritten_program`) and, for onnx, sum row-wise scatter adds as
            sorted segments, the same at any thread count
            (:mod:`~graph_adapter.exporter.onnx_rewrites`); ``False`` exports the graph
            as traced.
        ladder: ``None``: one budget; ``True``: several in one artifact, one program
            each (:func:`ladder_budgets`, ``docs/deploy.md``); or a list of ``Budget``.
            pt2: an AOTInductor program a rung in one archive; onnx: one model, an
            ``If`` branch a rung on its ``graph_adapter_rung`` input. Every rung is
            checked as a one-budget artifact is, on its own batches of the data.
        max_nodes, max_edges: with ``ladder``: the largest single graph served, whatever
            its degrees, in both formats (a top rung for it; larger graphs refused by
            name). Either alone: the other from the data's densest graph
            (``docs/deploy.md``).

    The contract records each feature's valid values (``docs/deploy.md``, bad requests).

    Inputs the traced program never reads (``y``; a feature the forward names but
    ignores) are left out of the contract (``dropped_inputs``): requests need not carry
    them. Before anything is written the artifact runs on up to three padded batches
    (the loader's first ones, or the example graphs in other orders): pt2 once each,
    onnx :data:`CHECK_RUNS` times each at ``threads`` and at :data:`CHECK_THREADS`.

    Returns:
        The artifact's :class:`~graph_adapter.serve.Contract` (also in the file): its
        budget (``nodes``, ``edges``, ``graphs``), inputs and outputs.

    Raises:
        UnsupportedExportError: hetero graphs, layout tables (``layout=``), outputs
            without node/edge/graph rows, and (onnx) a layer with an op the ONNX
            exporter or onnxruntime cannot run (named: its module path and class).
        ExportMismatchError: an output of the artifact differs from the eager
            wrapper's beyond :data:`TOLERANCE` on any check batch, run or thread count.
        ValueError: an unknown ``format``, a ``path`` without its suffix, ``threads`` < 1.
        TypeError: a ``wrapped`` that is not an ``ipu_wrap``-ped model.

    Example:
        ```python
        from torch_geometric.datasets import FakeDataset
        from torch_geometric.nn import GCN

        import graph_adapter as ga

        graphs = FakeDataset(num_graphs=8, avg_num_nodes=10, num_channels=8)
        loader = ga.FixedSizeLoader(graphs, ga.Budget.tight(graphs, 4))
        contract = ga.export(ga.ipu_wrap(GCN(8, 16, 2)), loader, "gcn.onnx", format="onnx")
        assert (contract.nodes, contract.edges) == (loader.budget.nodes, loader.budget.edges)
        # on the server, without PyG: graph_adapter.serve.load("gcn.onnx").predict(requests)
        ```
    """
    _check_args(wrapped, path, format, threads)
    return _export_eval(wrapped, loader_or_budget, str(path), format, example, inductor_configs,
                        rewrite, threads, ladder_of(loader_or_budget, example, ladder, max_nodes,
                                                    max_edges))


def _export_eval(wrapped: IPUWrapped, loader_or_budget: Union[FixedSizeLoader, Budget], path: str,
                 format: str, example: Optional[Sequence[Any]],
                 inductor_configs: Optional[Dict[str, Any]], rewrite: bool,
                 threads: Optional[int], budgets: Any) -> Contract:
    """:func:`export`'s work, with ``wrapped`` in ``eval()`` without its loss (restored)."""
    col, flat = collator_and_example(loader_or_budget, example)
    refuse_unservable(col)
    was_training, loss_fn = wrapped.training, wrapped.loss_fn
    try:
        wrapped.eval()
        wrapped.loss_fn = None
        traced: List[Any] = []
        module, dropped, ref = drop_unread(wrapped, flat, traced)
        batches = check_batches(loader_or_budget, example, col, flat)
        cases = check_cases(module, dropped, ref, batches)
        fed = cases[0][0]
        b = col.budget
        data = data_of(loader_or_budget, example)
        inputs = contract_inputs(col, fed)
        # each feature's valid values (codes within their tables, NaN/inf or not): the
        # host refuses the rest before any call (docs/deploy.md, "Bad requests")
        tables = index_tables(traced[0], list(flat), {f.key: f for f in inputs})
        inputs = with_value_rules(inputs, tables, data, batches)
        served = budgets.served if budgets else None
        contract = Contract(format=format, nodes=int(b.nodes), edges=int(b.edges),
                            graphs=int(b.graphs), inputs=inputs,
                            outputs=output_fields(ref, b), dropped_inputs=tuple(dropped),
                            tolerance=dict(TOLERANCE[format]), versions=versions(),
                            value_rules=True, max_nodes=served[0] if served else None,
                            max_edges=served[1] if served else None)
        return _write(module, dropped, cases, budgets, data, path, contract, rewrite, threads,
                      inductor_configs)
    finally:
        wrapped.loss_fn = loss_fn
        wrapped.train(was_training)
