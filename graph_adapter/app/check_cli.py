"""``graph-adapter check package.module:factory``: the checker's command line.

The library's :func:`graph_adapter.check` does the work; this module only
loads the user's factory, calls it and prints the report. Exit codes: 0 the
check passed, 1 it found errors, 2 a usage error (the one-line message on
stderr says what to fix).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any, Callable, Optional, Sequence

from graph_adapter.checker import check

from .usage import EXIT_USAGE, OneLineArgumentParser, usage_error

__all__ = ["check_main", "build_check_parser"]

PROG = "graph-adapter check"


def build_check_parser() -> argparse.ArgumentParser:
    """The parser of ``graph-adapter check``."""
    parser = OneLineArgumentParser(
        prog=PROG,
        description="Report what poptorch's dispatcher would reject in a model, on CPU.")
    parser.add_argument("factory",
                        help="package.module:factory, a function of no arguments returning "
                             "(wrapped, flat) or (wrapped, flat, options)")
    parser.add_argument("--training", action="store_true",
                        help="also check backward (needs a loss)")
    parser.add_argument("--loss-key", default="loss")
    return parser


def _load_factory(target: str) -> Callable[[], Any]:
    """Import ``package.module`` (from the current directory too) and return ``factory``."""
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"expected package.module:factory, got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{target} is not callable")
    return obj


def _err(msg: str) -> None:
    usage_error(PROG, msg)


def check_main(argv: Optional[Sequence[str]] = None) -> int:
    """``graph-adapter check package.module:factory [--training]``.

    The factory takes no arguments and returns ``(wrapped, flat)`` or
    ``(wrapped, flat, options)``. Prints the report; returns 0 if it is ok,
    1 if not, 2 on a usage error.
    """
    parser = build_check_parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return int(exc.code or 0) and EXIT_USAGE
    try:
        made = _load_factory(args.factory)()
    except Exception as exc:  # noqa: BLE001 - any failure of the user's code is a usage error
        _err(f"cannot load {args.factory}: {type(exc).__name__}: {exc}")
        return EXIT_USAGE
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        _err(f"{args.factory} must return (wrapped, flat) or (wrapped, flat, options), "
             f"got {type(made).__name__}")
        return EXIT_USAGE
    wrapped, flat = made[0], made[1]
    options = made[2] if len(made) == 3 else None
    report = check(wrapped, flat, training=args.training, options=options,
                   loss_key=args.loss_key)
    print(report)
    return 0 if report.ok else 1
