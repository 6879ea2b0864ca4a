"""``patch()``: graphium as it ships, made to compile under ``torch.compile(fullgraph=True)``.

graphium 2.4.7 skips a linear layer when a tensor has no rows with

    if torch.prod(torch.as_tensor(h.shape[:-1])) == 0:

(``graphium/nn/base_layers.py``, ``FCLayer.forward``; the same test on
``e.shape[:-1]`` in ``graphium/nn/architectures/global_architectures.py``,
``FullGraphMultiTaskNetwork.forward``). The condition depends on shapes only,
but it is a tensor: Dynamo refuses the branch ("Data-dependent branching"),
so no graphium model compiles with ``fullgraph=True``. (poptorch runs it:
``torch.as_tensor`` of Python ints makes a host tensor, whose read runs on the
host; ``graph_adapter.check`` agrees.)

:func:`patch` makes exactly one kind of change, in exactly those methods:
in a comparison, ``torch.prod(torch.as_tensor(<shape>))`` where ``<shape>``
is written as ``<name>.shape``, ``<name>.shape[...]`` or ``<name>.size()``
becomes ``math.prod(<shape>)``, a Python int (the same value), which Dynamo
folds. Nothing else in the methods changes (they are recompiled from their
own source, at their own line numbers, in their own module). A method whose
source lacks the pattern raises :class:`CompatError` (another graphium
version): nothing is patched then. :func:`unpatch` restores the originals.

graph_adapter's static substitutions cannot do this in general: the test's
``torch.as_tensor`` and ``torch.prod`` are looked up on the ``torch`` module
itself, which graph_adapter does not patch.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import math
import textwrap
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

__all__ = ["GRAPHIUM_TARGETS", "CompatError", "patch", "unpatch", "patched", "rewrite_shape_tests"]

#: ``(module, qualified name)`` of graphium 2.4.7's methods that hold the test.
GRAPHIUM_TARGETS: Tuple[Tuple[str, str], ...] = (
    ("graphium.nn.base_layers", "FCLayer.forward"),
    ("graphium.nn.architectures.global_architectures", "FullGraphMultiTaskNetwork.forward"),
)

# The module global the rewritten code reads ``math.prod`` through (set on patch,
# removed on unpatch): the client module may have no ``math`` of its own.
_MATH = "_graph_adapter_math"

# (module, qualname) -> the original function, for unpatch()
_PATCHED: Dict[Tuple[str, str], Callable[..., Any]] = {}


class CompatError(RuntimeError):
    """A compatibility patch cannot apply: the target is missing or its source differs."""


# --------------------------------------------------------------------------
# The rewrite
# --------------------------------------------------------------------------
def _is_torch_attr(node: ast.AST, attr: str) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == attr
            and isinstance(node.value, ast.Name) and node.value.id == "torch")


def _is_shape_expr(node: ast.AST) -> bool:
    """``x.shape``, ``x.shape[...]`` or ``x.size()``: a ``torch.Size`` (static ints)."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute) and node.attr == "shape":
        return True
    return (isinstance(node, ast.Call) and not node.args and not node.keywords
            and isinstance(node.func, ast.Attribute) and node.func.attr == "size")


def _shape_of_prod(node: ast.AST) -> Optional[ast.AST]:
    """The ``<shape>`` of ``torch.prod(torch.as_tensor(<shape>))``, else None."""
    if not (isinstance(node, ast.Call) and _is_torch_attr(node.func, "prod")
            and len(node.args) == 1 and not node.keywords):
        return None
    inner = node.args[0]
    if not (isinstance(inner, ast.Call) and _is_torch_attr(inner.func, "as_tensor")
            and len(inner.args) == 1 and not inner.keywords):
        return None
    return inner.args[0] if _is_shape_expr(inner.args[0]) else None


class _ShapeTests(ast.NodeTransformer):
    """Rewrites the pattern where it is an operand of a comparison, and counts."""

    def __init__(self) -> None:
        self.count = 0

    def visit_Compare(self, node: ast.Compare) -> ast.AST:  # noqa: N802 (ast's name)
        self.generic_visit(node)
        operands = [node.left] + list(node.comparators)
        new = [self._math_prod(o) for o in operands]
        node.left, node.comparators = new[0], new[1:]
        return node

    def _math_prod(self, node: ast.AST) -> ast.AST:
        shape = _shape_of_prod(node)
        if shape is None:
            return node
        self.count += 1
        call = ast.Call(func=ast.Attribute(value=ast.Name(id=_MATH, ctx=ast.Load()), attr="prod",
                                           ctx=ast.Load()), args=[shape], keywords=[])
        return ast.copy_location(call, node)


def rewrite_shape_tests(func: Callable[..., Any]) -> Tuple[Callable[..., Any], int]:
    """``func`` recompiled with its shape tests rewritten, and how many were.

    The new function has ``func``'s globals (its module), name, qualified name,
    defaults, docstring and line numbers; a zero-argument ``super()`` keeps
    working (``__class__`` is provided from ``func``'s own closure, or the
    class its qualified name names).

    Raises:
        CompatError: no source, a decorated function, or no occurrence of the pattern.
    """
    try:
        source = textwrap.dedent(inspect.getsource(func))
        filename = inspect.getsourcefile(func) or "<patched>"
        _, first_line = inspect.getsourcelines(func)
    except (OSError, TypeError) as exc:
        raise CompatError(f"{func.__qualname__}: its source cannot be read ({exc})") from exc
    tree = ast.parse(source)
    fdef = tree.body[0]
    if not isinstance(fdef, (ast.FunctionDef, ast.AsyncFunctionDef)) or fdef.decorator_list:
        raise CompatError(f"{func.__qualname__}: not a plain (undecorated) function; not patched")
    rewriter = _ShapeTests()
    fdef = rewriter.visit(fdef)
    if rewriter.count == 0:
        raise CompatError(
            f"{func.__module__}.{func.__qualname__}: no 'torch.prod(torch.as_tensor(<x>.shape...)) "
            f"<op> ...' test in its source (another version of the library?); not patched")
    # def __maker__(__class__): <the function>; return <name>  -- gives super() its cell
    maker = ast.FunctionDef(
        name="__graph_adapter_maker__",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg="__class__")], vararg=None,
                           kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=[fdef, ast.Return(value=ast.Name(id=fdef.name, ctx=ast.Load()))],
        decorator_list=[], returns=None)
    module = ast.Module(body=[maker], type_ignores=[])
    ast.fix_missing_locations(module)
    ast.increment_lineno(module, first_line - 1)
    code = compile(module, filename, "exec")
    scope: Dict[str, Any] = {}
    func_globals = func.__globals__
    func_globals.setdefault(_MATH, math)
    exec(code, func_globals, scope)  # defines the maker only (in scope, not in the module)
    new = scope["__graph_adapter_maker__"](_class_of(func))
    new.__qualname__, new.__module__ = func.__qualname__, func.__module__
    new.__defaults__, new.__kwdefaults__ = func.__defaults__, func.__kwdefaults__
    new.__graph_adapter_original__ = func
    return new, rewriter.count


def _class_of(func: Callable[..., Any]) -> Optional[type]:
    if func.__closure__ and "__class__" in func.__code__.co_freevars:
        return func.__closure__[func.__code__.co_freevars.index("__class__")].cell_contents
    owner: Any = importlib.import_module(func.__module__)
    for part in func.__qualname__.split(".")[:-1]:
        owner = getattr(owner, part, None)
    return owner if isinstance(owner, type) else None


# --------------------------------------------------------------------------
# patch / unpatch
# --------------------------------------------------------------------------
def _resolve(module_name: str, qualname: str) -> Tuple[Any, str, Callable[..., Any]]:
    try:
        owner: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise CompatError(f"{module_name} does not import ({exc}); is graphium installed?") from exc
    *path, attr = qualname.split(".")
    for part in path:
        owner = getattr(owner, part, None)
        if owner is None:
            raise CompatError(f"{module_name}.{qualname}: {part} not found (another graphium version?)")
    func = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
    if not callable(func):
        raise CompatError(f"{module_name}.{qualname}: not found (another graphium version?)")
    return owner, attr, func


def patch(targets: Iterable[Tuple[str, str]] = GRAPHIUM_TARGETS) -> List[str]:
    """Rewrite the shape tests of ``targets`` (default: graphium 2.4.7's two methods).

    Opt-in, idempotent (a patched target is left as it is) and all-or-nothing:
    every target is rewritten before any is installed, so a :class:`CompatError`
    (a missing module or method, a source without the pattern) changes nothing.

    Returns:
        ``"module.qualname: N test(s)"`` for each target patched by this call.
    """
    planned = []
    for module_name, qualname in targets:
        if (module_name, qualname) in _PATCHED:
            continue
        owner, attr, func = _resolve(module_name, qualname)
        new, count = rewrite_shape_tests(func)
        planned.append(((module_name, qualname), owner, attr, func, new, count))
    done = []
    for key, owner, attr, func, new, count in planned:
        setattr(owner, attr, new)
        _PATCHED[key] = func
        done.append(f"{key[0]}.{key[1]}: {count} test(s) -> math.prod")
    return done


def unpatch() -> List[str]:
    """Restore every method :func:`patch` rewrote; returns their names."""
    restored = []
    for (module_name, qualname), func in list(_PATCHED.items()):
        owner, attr, _ = _resolve(module_name, qualname)
        setattr(owner, attr, func)
        del _PATCHED[(module_name, qualname)]
        restored.append(f"{module_name}.{qualname}")
        if not any(m == module_name for m, _ in _PATCHED):
            vars(importlib.import_module(module_name)).pop(_MATH, None)
    return restored


def patched() -> Sequence[str]:
    """``"module.qualname"`` of every target patched now."""
    return [f"{m}.{q}" for m, q in _PATCHED]
