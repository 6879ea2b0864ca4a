"""``graph-adapter export package.module:factory OUT.pt2|OUT.onnx``: write a servable artifact.

The factory takes no arguments and returns ``(wrapped, loader)`` (an ``ipu_wrap``-ped,
trained model and its ``FixedSizeLoader``) or ``(wrapped, budget, example_graphs)``.
:func:`graph_adapter.exporter.export` does the work; this prints the contract.
``--ladder`` (with ``--max-nodes`` and/or ``--max-edges``: the largest single graph
served, the one not given derived from the data) writes a ladder of budgets, one
program a rung (``export(..., ladder=True)``). Exit codes: 0 written,
1 the export failed (unsupported model, outputs beyond tolerance: the message says
which), 2 a usage error or a missing extra.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from graph_adapter.exporter import FORMATS, ExportError, export

from .check_cli import load_factory
from .usage import EXIT_USAGE, OneLineArgumentParser, usage_error

__all__ = ["export_main", "build_export_parser"]

PROG = "graph-adapter export"


def build_export_parser() -> argparse.ArgumentParser:
    """The parser of ``graph-adapter export``."""
    p = OneLineArgumentParser(prog=PROG, description="Export a trained wrapped model to one "
                              "artifact (AOTInductor .pt2 or .onnx) that graph_adapter.serve "
                              "runs without PyG.")
    p.add_argument("factory", help="package.module:factory, a function of no arguments "
                                   "returning (wrapped, loader) or (wrapped, budget, graphs)")
    p.add_argument("path", help="the artifact to write: *.pt2 or *.onnx")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="default: from the path's suffix")
    p.add_argument("--threads", type=int, default=None,
                   help="pt2: the threads the server runs it with (inductor compiles its "
                        "loops for one thread count); default: this process's")
    p.add_argument("--ladder", action="store_true",
                   help="several budgets in one artifact, one program each: fitted on the "
                        "data for calls of about 1, 16 and 256 graphs (both formats)")
    p.add_argument("--max-nodes", type=int, default=None, metavar="N",
                   help="with --ladder: the largest single graph served has N nodes (a top "
                        "rung for it; larger graphs are refused, whatever their degrees)")
    p.add_argument("--max-edges", type=int, default=None, metavar="E",
                   help="with --ladder: ... and E edges (default: derived from N by the "
                        "data's most edges per node; either flag alone works)")
    return p


def _export_options(args: argparse.Namespace) -> Optional[dict]:
    """``export``'s keyword options from the flags, or ``None`` after a usage error."""
    kw: dict = {} if args.threads is None else {"threads": args.threads}
    sized = args.max_nodes is not None or args.max_edges is not None
    if sized and not args.ladder:
        usage_error(PROG, "--max-nodes / --max-edges size the top rung of a ladder: add "
                          "--ladder (or fit the one budget on data with such graphs)")
        return None
    for flag, v in (("--max-nodes", args.max_nodes), ("--max-edges", args.max_edges)):
        if v is not None and v < 1:
            usage_error(PROG, f"{flag} {v}: give the largest graph's count (1 or more)")
            return None
    if args.ladder:
        kw.update(ladder=True, max_nodes=args.max_nodes, max_edges=args.max_edges)
    return kw


def export_main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``graph-adapter export``; returns the exit code."""
    parser = build_export_parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return int(exc.code or 0) and EXIT_USAGE
    fmt = args.format or os.path.splitext(args.path)[1].lstrip(".")
    if fmt not in FORMATS:
        usage_error(PROG, f"cannot tell the format from {args.path!r}: end it in .pt2 or .onnx, "
                          f"or pass --format")
        return EXIT_USAGE
    kw = _export_options(args)
    if kw is None:
        return EXIT_USAGE
    try:
        made = load_factory(args.factory)()
    except Exception as exc:  # noqa: BLE001 - any failure of the user's code is a usage error
        usage_error(PROG, f"cannot load {args.factory}: {type(exc).__name__}: {exc}")
        return EXIT_USAGE
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        usage_error(PROG, f"{args.factory} must return (wrapped, loader) or (wrapped, budget, "
                          f"graphs), got {type(made).__name__}")
        return EXIT_USAGE
    example = made[2] if len(made) == 3 else None
    try:
        contract = export(made[0], made[1], args.path, format=fmt, example=example, **kw)
    except (TypeError, ValueError, ImportError) as exc:  # what to pass or install
        if isinstance(exc, ExportError):
            usage_error(PROG, f"export failed: {exc}")
            return 1
        usage_error(PROG, str(exc))
        return EXIT_USAGE
    except ExportError as exc:
        usage_error(PROG, f"export failed: {exc}")
        return 1
    size = os.path.getsize(args.path)
    feats = ", ".join(f"{f.key} {f.dtype}{list(f.shape)}" for f in contract.features)
    outs = ", ".join(f"{f.key} ({f.level}-level)" for f in contract.outputs)
    print(f"wrote {args.path} ({fmt}, {size / 1e6:.2f} MB): budget nodes={contract.nodes} "
          f"edges={contract.edges} graphs={contract.graphs}; inputs {feats}; outputs {outs}; "
          f"max |artifact - eager| on the example batch {contract.verified_max_abs_diff:.2g}"
          + ("" if contract.threads is None else f"; compiled for {contract.threads} thread(s)"))
    if contract.rungs:
        most = (contract.max_nodes, contract.max_edges) if contract.max_nodes is not None \
            else (max(r.max_graph_nodes for r in contract.rungs),
                  max(r.edges for r in contract.rungs))
        print("rungs (one program each): " + "; ".join(
            f"nodes={r.nodes} edges={r.edges} graphs={r.graphs}" for r in contract.rungs)
            + f"; one graph of up to {most[0]} nodes and {most[1]} edges is served")
    coded = [f"{f.key} {list(f.codes)}" for f in contract.features if f.codes]
    if coded:
        print(f"codes checked against their embedding tables' rows: {'; '.join(coded)}")
    if contract.dropped_inputs:
        print(f"not read by the model, left out of requests: {list(contract.dropped_inputs)}")
    return 0
