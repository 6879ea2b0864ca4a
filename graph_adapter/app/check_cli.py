"""``graph-adapter check package.module:factory``: the checker's command line.

The library's :func:`graph_adapter.check` does the work; this module only
loads the user's factory, calls it and prints the report. Exit codes: 0 the
check passed, 1 it found errors, 2 a usage error (the one-line message on
stderr says what to fix).
"""
from __future__ import annotations

import argparse
import copy
import importlib
import inspect
import os
import sys
from typing import Any, Callable, Mapping, Optional, Sequence

from torch import nn

from graph_adapter.checker import check
from graph_adapter.nn import IPUWrapped, ipu_wrap

from .usage import EXIT_USAGE, OneLineArgumentParser, usage_error

__all__ = ["check_main", "build_check_parser", "load_factory"]

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
    parser.add_argument("--loss-key", default="loss",
                        help="the key of the loss in the model's output dict (default: loss)")
    return parser


def load_factory(target: str) -> Callable[[], Any]:
    """Import ``package.module`` (from the current directory too) and return ``factory``
    (``package.module:attr.attr``, callable): the factory of ``check`` and ``export``."""
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


def _takes_named_tensors(model: nn.Module, flat: Mapping[str, Any]) -> bool:
    """True when ``model.forward`` wants tensors by name, not the flat dict itself.

    That is: more than one required parameter, or a parameter named like a
    key of ``flat`` (``forward(x, edge_index, batch)``). A forward of one
    parameter (``forward(flat)``) takes the dict as it is.
    """
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):  # no signature to read: call it as it is
        return False
    params = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    required = [p for p in params if p.default is inspect.Parameter.empty]
    return len(required) > 1 or any(p.name in flat for p in params)


def _as_checked(model: Any, flat: Mapping[str, Any], factory: str) -> Any:
    """``model`` itself, or ``ipu_wrap`` of a copy of it when it was not wrapped but must be.

    A model whose forward takes named tensors fails on a flat dict with
    "forward() missing ... required positional arguments"; the check wraps a
    copy (the factory's model is left as it is) and says so, naming the mode.
    """
    if isinstance(model, IPUWrapped) or not isinstance(model, nn.Module) \
            or not _takes_named_tensors(model, flat):
        return model
    wrapped = ipu_wrap(copy.deepcopy(model), inputs="tensors")
    _err(f"note: {factory} returned a model that is not ipu_wrap-ped; its forward takes "
         f"tensors by name, so this checks ipu_wrap(model, inputs='tensors') (forward's "
         f"parameters bound to the flat dict's keys by name). Return ipu_wrap(model, ...) from "
         f"the factory to check the model as you run it")
    return wrapped


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
        made = load_factory(args.factory)()
    except Exception as exc:  # noqa: BLE001 - any failure of the user's code is a usage error
        _err(f"cannot load {args.factory}: {type(exc).__name__}: {exc}")
        return EXIT_USAGE
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        _err(f"{args.factory} must return (wrapped, flat) or (wrapped, flat, options), "
             f"got {type(made).__name__}")
        return EXIT_USAGE
    flat = made[1]
    options = made[2] if len(made) == 3 else None
    try:
        wrapped = _as_checked(made[0], flat, args.factory)
    except (TypeError, ValueError) as exc:  # ipu_wrap cannot bind it: say what to pass
        _err(f"{args.factory} returned a model that is not ipu_wrap-ped and ipu_wrap(model) "
             f"failed ({exc}); return ipu_wrap(model, inputs=..., bind=...) from the factory")
        return EXIT_USAGE
    report = check(wrapped, flat, training=args.training, options=options,
                   loss_key=args.loss_key)
    print(report)
    return 0 if report.ok else 1
