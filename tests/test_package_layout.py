"""The package follows docs/dev/ARCHITECTURE.md: its tables are read here, not copied.

The page lists the stages with their ranks (a module imports its own stage or
earlier ones), the modules allowed to touch torch's and PyG's internals, and the
few functions allowed over 80 lines. This file checks every rule the page states:
one-way imports through each stage's package, no import cycle (``TYPE_CHECKING``
imports included), no private name or module of another package, no private
attribute of another object, function length, folder size, tests mirroring the
stages.
"""
import ast
import functools
import json
import os
import re
import subprocess
import sys


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "graph_adapter")
PAGE = os.path.join(ROOT, "docs", "dev", "ARCHITECTURE.md")
MAX_FUNCTION_LINES = 80
MAX_LONG_FUNCTIONS = 3
MAX_FOLDER_MODULES = 15
MAX_FOLDER_LINES = 5000
#: the package's own top level: the public API, ``python -m``
TOP = {"graph_adapter": "lightning", "graph_adapter.__main__": "app"}
#: Known breaches of the page's rules, to be removed as they are mended (a breach not
#: listed fails; a listed one that is gone fails too, so the list only shrinks).
NOT_YET_SPLIT: set = set()  # functions over 80 lines (docstring included), to split by job
NOT_YET_PUBLIC: set = set()  # modules still reading another module's private attributes
#: underscore names that are public API (namedtuple methods, ``os._exit``)
PUBLIC_UNDERSCORE = {"_replace", "_asdict", "_fields", "_make", "_field_defaults", "_exit"}


# ------------------------------------------------------------------ the page's tables
def _table(heading):
    """Rows (lists of cells, backticks stripped) of the first table under ``## heading``."""
    text = open(PAGE).read()
    m = re.search(rf"^## {re.escape(heading)}\s*$", text, re.M)
    assert m, f"docs/dev/ARCHITECTURE.md has no '## {heading}' section"
    rows = []
    for line in text[m.end():].splitlines():
        if line.startswith("## "):
            break
        if line.startswith("|") and not re.match(r"^\|[\s:|-]+\|$", line):
            rows.append([c.strip().strip("`") for c in line.strip().strip("|").split("|")])
    assert len(rows) > 1, f"the '{heading}' section has no table"
    return rows[1:]  # without the header row


@functools.lru_cache(maxsize=None)
def stages():
    """``{stage: rank}`` from the page's "Stages" table."""
    return {row[1].rstrip("/").split("/")[-1].removesuffix(".py"): int(row[0])
            for row in _table("Stages")}


@functools.lru_cache(maxsize=None)
def internals():
    """``{module path: what it touches}`` from the page's "Internals" table."""
    return {row[0]: row[1] for row in _table("Internals")}


@functools.lru_cache(maxsize=None)
def long_functions():
    """``{"path:qualname"}`` from the page's "Long functions" table."""
    return {row[0] for row in _table("Long functions")}


# ------------------------------------------------------------------ the source tree
@functools.lru_cache(maxsize=None)
def _modules():
    """``{module name: path}`` of every module of the package (from the source tree)."""
    out = {}
    for d, _, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(d, f), ROOT)[:-3]
                name = rel.replace(os.sep, ".")
                out[name[: -len(".__init__")] if name.endswith(".__init__") else name] = \
                    os.path.join(d, f)
    return out


@functools.lru_cache(maxsize=None)
def _tree(path):
    return ast.parse(open(path).read())


def _rel(path):
    return os.path.relpath(path, ROOT).replace(os.sep, "/")


def _import_froms(name, path):
    """``(absolute module, [imported names], line)`` of every ``from ... import`` (lazy
    ones and those under ``if TYPE_CHECKING:`` included)."""
    is_pkg = path.endswith("__init__.py")
    parts = name.split(".") if is_pkg else name.split(".")[:-1]
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            yield base, [a.name for a in node.names], node.lineno


def _imports(name, path):
    """Every package module a module imports, at any depth of its code."""
    mods = _modules()
    found = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    for base, names, _ in _import_froms(name, path):
        for n in names:  # ``from pkg import sub`` imports sub; ``from mod import f``, mod
            found.add(f"{base}.{n}" if f"{base}.{n}" in mods else base)
    return found


def _library(target):
    """The package module ``target`` names (a module, or a name inside one), or None."""
    mods = _modules()
    while target and target not in mods:
        target = target.rpartition(".")[0]
    return target or None


def _stage(module):
    if module in TOP:
        return TOP[module]
    return module.split(".")[1].removesuffix(".py")


def _rank(module):
    return stages()[_stage(module)]


def _private(module):
    return any(p.startswith("_") and not p.startswith("__") for p in module.split("."))


# ------------------------------------------------------------------ stages and imports
def test_every_module_belongs_to_a_stage_of_the_page():
    for name in _modules():
        assert name in TOP or _stage(name) in stages(), (
            f"{name} is in no stage: put it in one of {sorted(stages())}, or add its stage to "
            f"the Stages table of docs/dev/ARCHITECTURE.md")


def test_every_stage_is_a_package_that_says_what_it_owns_and_exports():
    for stage in stages():
        init = os.path.join(PACKAGE, stage, "__init__.py")
        if not os.path.exists(init):
            assert os.path.exists(os.path.join(PACKAGE, f"{stage}.py")), stage
            continue
        tree = _tree(init)
        doc = ast.get_docstring(tree) or ""
        assert "may import" in doc, f"graph_adapter.{stage}'s docstring says nothing of what it may import"
        assert any(isinstance(n, (ast.Assign, ast.AugAssign)) and "__all__" in ast.unparse(n)
                   for n in tree.body), f"graph_adapter.{stage} has no __all__"


def test_imports_run_one_way():
    """A module imports its own stage or earlier ones (the page's ranks)."""
    bad = []
    for name, path in _modules().items():
        for target in _imports(name, path):
            dep = _library(target)
            if dep and dep != name and _rank(dep) > _rank(name):
                bad.append(f"{name} imports {dep} (stage {_stage(dep)}, a later one)")
    assert not bad, bad


def test_other_stages_import_a_stage_not_its_files():
    """``from graph_adapter.format import X``, never ``from graph_adapter.format.keys import X``,
    outside the format stage (the app and the top level too); the internals helpers of
    the page's table are imported by module (``from graph_adapter.format.pyg import ...``)."""
    mods = _modules()
    bad = []
    for name, path in mods.items():
        for base, names, line in _import_froms(name, path):
            if not base.startswith("graph_adapter.") or base.count(".") < 2:
                continue
            stage = base.split(".")[1]
            helper = base.replace(".", "/") + ".py" in internals()  # a named internals helper
            if stage in stages() and os.path.isdir(os.path.join(PACKAGE, stage)) and \
                    _stage(name) != stage and not helper:
                bad.append(f"{name}:{line} imports from {base}: import graph_adapter.{stage}")
    assert not bad, bad


def test_no_import_cycle():
    """No module imports (directly or through others) one that imports it back, counting
    lazy imports and imports for type checkers. A package importing its own submodules
    is not a cycle, nor a submodule naming its own package's path."""
    mods = _modules()
    graph = {m: {d for d in map(_library, _imports(m, p))
                 if d and d != m and not m.startswith(d + ".")}
             for m, p in mods.items()}
    state, stack, cycles = {}, [], []

    def visit(u):
        state[u] = "open"
        stack.append(u)
        for v in sorted(graph[u]):
            if state.get(v) == "open":
                cycles.append(" -> ".join(stack[stack.index(v):] + [v]))
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not cycles, cycles


def test_no_module_imports_another_packages_private_name_or_module():
    """A leading underscore means "this module's (or this subpackage's) own": ``from .x
    import _name`` is refused, and a private module is imported only inside its own
    subpackage."""
    mods = _modules()
    bad = []
    for name, path in mods.items():
        own_pkg = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        for base, names, line in _import_froms(name, path):
            if not base.startswith("graph_adapter"):
                continue
            for n in names:
                module = f"{base}.{n}" if f"{base}.{n}" in mods else base
                imported_module = module == f"{base}.{n}"
                if imported_module and _private(module) and \
                        not own_pkg.startswith(module.rpartition(".")[0]):
                    bad.append(f"{name}:{line} imports private module {module}")
                if not imported_module and n.startswith("_") and not n.startswith("__"):
                    bad.append(f"{name}:{line} imports {module}.{n}, a private name")
                if not imported_module and _private(module) and \
                        not own_pkg.startswith(module.rpartition(".")[0]):
                    bad.append(f"{name}:{line} imports from {module}, private to its package")
    assert not bad, bad


# ------------------------------------------------------------------ private attributes
def _is_own(value, classes=()):
    """``self``, ``cls``, ``super()``, ``type(self)`` or a class of the same module by
    name: an object's (or its class's) own attributes."""
    if isinstance(value, ast.Name):
        return value.id in ("self", "cls") or value.id in classes
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        return value.func.id == "super" or (
            value.func.id == "type" and len(value.args) == 1 and
            isinstance(value.args[0], ast.Name) and value.args[0].id == "self")
    return False


def _private_name(name):
    """A private attribute's name: a leading underscore, not a dunder (``__dict__``,
    ``__code__``: Python's data model, allowed as ``obj.__x`` is) nor namedtuple's API."""
    return isinstance(name, str) and name.startswith("_") and not name.startswith("__") and \
        name not in PUBLIC_UNDERSCORE


def _literal_rows(node):
    """The rows of a literal a loop may walk: a tuple / list / set of strings (each its own
    row), of tuples of them (a table), or a dict's keys; [] for anything else."""
    items = node.keys if isinstance(node, ast.Dict) else \
        node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else []
    rows = []
    for e in items:
        if isinstance(e, ast.Tuple):
            rows.append(tuple(c.value if isinstance(c, ast.Constant) else None for c in e.elts))
        elif isinstance(e, ast.Constant):
            rows.append((e.value,))
    return rows


_SCOPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _scoped(tree):
    """``(node, scope)`` of every node: its innermost function, class or the module (a
    comprehension's variables counted in the scope around it)."""
    todo = [(tree, tree)]
    while todo:
        node, scope = todo.pop()
        yield node, scope
        inner = node if isinstance(node, _SCOPES) else scope
        todo += [(child, inner) for child in ast.iter_child_nodes(node)]


def _loop_strings(tree):
    """``{(scope, variable): {strings}}``: the literal strings a loop or comprehension
    variable takes in its scope (:func:`_scoped`): ``for name in ("_a", "b")``, ``for
    name, fn in TABLE.items()`` over a module literal, ``for module, cls, meth in TABLE``
    over a table of tuples."""
    tables = {}
    for node in tree.body:
        value = getattr(node, "value", None)
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        for t in targets:
            if isinstance(t, ast.Name) and value is not None and _literal_rows(value):
                tables[t.id] = _literal_rows(value)
    out = {}
    for node, scope in _scoped(tree):
        if not isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            continue
        it = node.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and \
                it.func.attr in ("items", "keys") and not it.args:
            it = it.func.value  # the dict's keys: the first of (key, value)
        rows = tables.get(it.id, []) if isinstance(it, ast.Name) else _literal_rows(it)
        targets = node.target.elts if isinstance(node.target, ast.Tuple) else [node.target]
        for i, t in enumerate(targets):
            if isinstance(t, ast.Name):
                out.setdefault((id(scope), t.id), set()).update(
                    r[i] for r in rows if i < len(r) and isinstance(r[i], str))
    return out


def _instance_dict(node):
    """``obj`` of ``obj.__dict__`` or ``vars(obj)`` (an instance's attribute dict), else None."""
    if isinstance(node, ast.Attribute) and node.attr == "__dict__":
        return node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
            node.func.id == "vars" and len(node.args) == 1:
        return node.args[0]
    return None


def _string_reaches(tree, classes):
    """``(line, text)`` of the private attributes named by a string: ``getattr`` /
    ``setattr`` / ``hasattr`` / ``delattr(obj, "_x")`` (or a loop variable over literal
    names, :func:`_loop_strings`), ``obj.__dict__["_x"]``, ``vars(obj).get("_x")``
    (``get`` / ``pop`` / ``setdefault``); obj not one of :func:`_is_own`'s."""
    loops = _loop_strings(tree)
    out = []
    for node, scope in _scoped(tree):
        obj, name = None, None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("getattr", "setattr", "hasattr", "delattr") and \
                len(node.args) >= 2:
            obj, name = node.args[:2]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("get", "pop", "setdefault") and node.args:
            obj, name = _instance_dict(node.func.value), node.args[0]
        elif isinstance(node, ast.Subscript):
            obj, name = _instance_dict(node.value), node.slice
        if obj is None or _is_own(obj, classes):
            continue
        names = {name.value} if isinstance(name, ast.Constant) else \
            loops.get((id(scope), name.id), set()) if isinstance(name, ast.Name) else set()
        private = sorted(n for n in names if _private_name(n))
        if private:
            via = "" if isinstance(name, ast.Constant) else f" ({name.id}: {', '.join(private)})"
            out.append((node.lineno, ast.unparse(node)[:70] + via))
    return out


def _inherited_reaches(tree):
    """``(line, text)`` of ``self._x`` / ``getattr(self, "_x")`` inside a class with a
    base from another package (torch, PyG, Lightning) where the module never defines
    ``_x`` (no def, class, assignment or ``setattr``): the base's private attribute
    (Lightning's ``_trainer``, PyG's ``Data._store``), which ``self`` does not make ours."""
    foreign = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and \
                not (node.module or "").startswith("graph_adapter"):
            foreign.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Import):
            foreign.update((a.asname or a.name).split(".")[0] for a in node.names
                           if not a.name.startswith("graph_adapter"))
    defined = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            defined.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id == "setattr" and len(node.args) > 1 and \
                isinstance(node.args[1], ast.Constant):
            defined.add(node.args[1].value)

    def root(base):
        while isinstance(base, ast.Attribute):
            base = base.value
        return base.id if isinstance(base, ast.Name) else None

    out = []
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef) or not any(root(b) in foreign for b in cls.bases):
            continue
        for node in ast.walk(cls):
            name = None
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.value.id in ("self", "cls"):
                name = node.attr
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in ("getattr", "hasattr") and len(node.args) > 1 and \
                    isinstance(node.args[0], ast.Name) and node.args[0].id == "self" and \
                    isinstance(node.args[1], ast.Constant):
                name = node.args[1].value
            if _private_name(name) and name not in defined:
                out.append((node.lineno, f"{ast.unparse(node)[:60]} (inherited from "
                                         f"{', '.join(ast.unparse(b) for b in cls.bases)})"))
    return out


def _reaches(tree):
    """``(line, text)`` of every access of another object's or library's private name:
    ``obj._x`` (obj not self/cls/super()/type(self)/a class of the module), the same named
    by a string (:func:`_string_reaches`), a foreign base's private through ``self``
    (:func:`_inherited_reaches`), ``import torch._x``, ``from torch._x import y``."""
    out = []
    classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private_name(node.attr) and \
                not _is_own(node.value, classes):
            out.append((node.lineno, ast.unparse(node)[:70]))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, f"import {a.name}") for a in node.names
                    if not a.name.startswith("graph_adapter") and _private(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                not node.module.startswith("graph_adapter") and _private(node.module):
            out.append((node.lineno, f"from {node.module} import ..."))
    return sorted(out + _string_reaches(tree, classes) + _inherited_reaches(tree))


def _private_reaches(path):
    """:func:`_reaches` of one module's source."""
    return _reaches(_tree(path))


_SNIPPET = '''
from torch_geometric.data import Data
from torch_geometric.nn import MessagePassing
from lightning.pytorch import LightningModule

TABLE = {"_set_size": None, "aggregate": None}
ROWS = [("torch_geometric.nn", "GCNConv", "_cached"), ("m", "C", "forward")]


class Mine:
    _x = 1


class Graph(Data):
    def f(self):
        self._made = 1
        return self._made, self._store, getattr(self, "_mapping", None), super()._y


class Module(LightningModule):
    def f(self):
        return getattr(self, "_trainer", None), self.trainer


def reaches(obj, m):
    getattr(obj, "_a"), setattr(obj, "_b", 1), hasattr(obj, "_c"), delattr(obj, "_d")
    obj.__dict__["_e"], vars(obj).get("_f"), obj.__dict__.pop("_g", None)
    for name, fn in TABLE.items():
        setattr(MessagePassing, name, fn)
    for module, cls, meth in ROWS:
        getattr(m, meth)
    return [getattr(m, n) for n in ("_h", "public")], obj._i


def allowed(self, obj, n):
    getattr(obj, "__dict__"), getattr(obj, "public"), getattr(Mine, "_x"), obj.__dict__["k"]
    getattr(obj, "_replace"), getattr(self, "_own"), self.__dict__["_own"], getattr(obj, n)
    for n in ("public", "__doc__"):
        getattr(obj, n)
'''


def test_the_private_attribute_rule_sees_strings_loops_and_inherited_names():
    """The checker itself, on a snippet: every reach of :data:`_SNIPPET`'s ``reaches`` (and
    the inherited ``_store`` / ``_trainer``) is found, nothing of ``allowed`` is."""
    found = sorted(text.split(" (")[0] for _, text in _reaches(ast.parse(_SNIPPET)))
    assert found == sorted([
        "self._store", "getattr(self, '_mapping', None)",
        "getattr(self, '_trainer', None)",
        "getattr(obj, '_a')", "setattr(obj, '_b', 1)", "hasattr(obj, '_c')",
        "delattr(obj, '_d')", "obj.__dict__['_e']", "vars(obj).get('_f')",
        "obj.__dict__.pop('_g', None)", "setattr(MessagePassing, name, fn)", "getattr(m, meth)",
        "getattr(m, n)", "obj._i"]), found
    texts = dict((t.split(" (")[0], t) for _, t in _reaches(ast.parse(_SNIPPET)))
    assert texts["setattr(MessagePassing, name, fn)"].endswith("(name: _set_size)")
    assert texts["getattr(m, meth)"].endswith("(meth: _cached)")
    assert "inherited from LightningModule" in texts["getattr(self, '_trainer', None)"]


def test_only_the_pages_internals_modules_touch_private_attributes():
    """No module reaches a private attribute of another module's object; torch's and PyG's
    internals, where the job needs them, are touched only by the modules the page's
    Internals table names (each a named helper per internal)."""
    listed = internals()
    bad = []
    for name, path in _modules().items():
        reaches = _private_reaches(path)
        if reaches and _rel(path) not in listed and _rel(path) not in NOT_YET_PUBLIC:
            bad += [f"{_rel(path)}:{line}: {text}" for line, text in reaches]
    gone = [m for m in NOT_YET_PUBLIC if not os.path.exists(os.path.join(ROOT, m)) or
            not _private_reaches(os.path.join(ROOT, m))]
    assert not gone, f"mended or moved: remove {gone} from NOT_YET_PUBLIC"
    assert not bad, ("private attributes of other objects (use a public name, or add one "
                     "helper to a module of the Internals table):\n" + "\n".join(bad))


def test_the_internals_table_lists_only_modules_that_need_it():
    stale = [m for m in internals()
             if not os.path.exists(os.path.join(ROOT, m)) or
             not _private_reaches(os.path.join(ROOT, m))]
    assert not stale, f"the Internals table lists modules that touch no internals: {stale}"


# ------------------------------------------------------------------ sizes
def _functions(tree, prefix=""):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{prefix}{node.name}", node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")


def test_functions_are_at_most_80_lines_but_the_pages_few():
    """At most three functions over 80 lines (docstring included), each listed in the
    page's "Long functions" table with a comment above its ``def`` saying why."""
    long, undocumented = {}, []
    for name, path in _modules().items():
        lines = open(path).read().splitlines()
        for qual, node in _functions(_tree(path)):
            n = node.end_lineno - node.lineno + 1
            if n > MAX_FUNCTION_LINES:
                key = f"{_rel(path)}:{qual}"
                long[key] = n
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if not lines[first - 2].strip().startswith("#"):
                    undocumented.append(key)
    assert set(long) <= long_functions() | NOT_YET_SPLIT, (
        f"split these by job (at most {MAX_FUNCTION_LINES} lines a function): "
        f"{ {k: v for k, v in long.items() if k not in long_functions() | NOT_YET_SPLIT} }")
    split = NOT_YET_SPLIT - set(long)
    assert not split, f"now at most {MAX_FUNCTION_LINES} lines: remove {split} from NOT_YET_SPLIT"
    undocumented = [k for k in undocumented if k not in NOT_YET_SPLIT]
    assert len(long_functions()) <= MAX_LONG_FUNCTIONS, sorted(long_functions())
    assert not undocumented, f"no comment above these long functions saying why: {undocumented}"


def test_no_folder_is_over_15_modules_or_5000_lines():
    big = {}
    for d, _, files in os.walk(PACKAGE):
        py = [f for f in files if f.endswith(".py")]
        lines = sum(sum(1 for _ in open(os.path.join(d, f))) for f in py)
        if len(py) > MAX_FOLDER_MODULES or lines > MAX_FOLDER_LINES:
            big[_rel(d)] = (len(py), lines)
    assert not big, f"split these folders by job (modules, lines): {big}"


# ------------------------------------------------------------------ the app and the tests
def test_the_library_never_imports_the_app():
    for name, path in _modules().items():
        if name.startswith("graph_adapter.app") or name == "graph_adapter.__main__":
            continue
        bad = {m for m in _imports(name, path) if m.startswith("graph_adapter.app")}
        assert not bad, f"{name} imports the application: {sorted(bad)}"
    assert _fresh_imports()["app"] == [], "a bare import graph_adapter loads the application"


def test_app_imports_only_public_library_names():
    """The application uses the library as a user would: no underscore names."""
    for name, path in _modules().items():
        if not name.startswith("graph_adapter.app"):
            continue
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and \
                    (node.module or "").startswith("graph_adapter") and \
                    not node.module.startswith("graph_adapter.app"):
                assert not _private(node.module), (name, node.module)
                assert not any(a.name.startswith("_") for a in node.names), (name, node.module)


def test_tests_mirror_the_stages():
    """A module's tests are found by its path: tests/<stage>/ for graph_adapter/<stage>/."""
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = {d for d in os.listdir(here) if os.path.isdir(os.path.join(here, d))
            and any(f.startswith("test_") for f in os.listdir(os.path.join(here, d)))}
    folders = {s for s in stages() if os.path.isdir(os.path.join(PACKAGE, s))}
    assert folders <= dirs, f"no tests/ folder for {sorted(folders - dirs)}"
    # besides the stages: the venv-only suites, and benchmarks/ (a source checkout's, not a stage)
    assert dirs - folders <= {"lightning_graphcore_venv", "graphium_venv", "benchmarks"}, \
        sorted(dirs - folders)


# ----------------------------------------------------------------- the public API
#: ``graph_adapter.__all__`` of 0.1: every name still there
PUBLIC_NAMES = [
    "BatchMismatchError", "ClassNotAllowedError", "DeviceMismatchError", "SpecFormatError",
    "AmbiguousLevelError", "UnboundInputError", "DtypeMismatchError", "Field", "MissingKeyError",
    "ShapeMismatchError", "Spec", "SpecError", "UnexpectedKeyError", "UnsupportedAttributeError",
    "flatten", "unflatten", "register_pytree", "Budget", "GraphSizes", "graph_sizes",
    "plan_efficiency", "plan_epoch", "Collator", "collate_padded", "unpad_batch",
    "FixedSizeLoader", "LoaderStats", "ipu_wrap", "unpad", "IPUWrapped", "MissingInputError",
    "InputValueError", "StaticSizeError", "losses", "masked_loss", "compile", "Compiled",
    "ShapeChangedError", "IPUOptions", "IPUEmulator", "EmulatorError", "compile_ipu", "check",
    "CheckReport", "Finding",
]
#: module paths the docs tell users to import from that did not move
KEPT_PATHS = ["graph_adapter.format", "graph_adapter.batching", "graph_adapter.sampling",
              "graph_adapter.nn", "graph_adapter.lightning", "graph_adapter.ipu",
              "graph_adapter.backends", "graph_adapter.checker", "graph_adapter.ipu.options",
              "graph_adapter.ipu.emulator", "graph_adapter.ipu.inputs", "graph_adapter.ipu.entry",
              "graph_adapter.ipu.poptorch_backend", "graph_adapter.app.datasets"]
#: old module paths, deprecated aliases in 0.1.0 and removed in 0.2.0: a sample of each kind
REMOVED_PATHS = ["graph_adapter.spec", "graph_adapter.loader", "graph_adapter.wrap",
                 "graph_adapter.data", "graph_adapter.data.loader", "graph_adapter.data.neighbor",
                 "graph_adapter.backends._export_opt", "graph_adapter._moved"]


def test_the_public_names_did_not_change():
    import graph_adapter as ga
    assert set(PUBLIC_NAMES) <= set(ga.__all__), sorted(set(PUBLIC_NAMES) - set(ga.__all__))
    missing = [n for n in ga.__all__ if not hasattr(ga, n)]
    assert not missing, missing
    assert ga.losses.masked_loss is ga.masked_loss
    assert callable(ga.compile) and callable(ga.check)  # functions, not the subpackages


def test_each_stage_exports_what_its_modules_export():
    """``from graph_adapter.<stage> import X`` works for the public names of its modules
    that the stage's ``__all__`` lists, and every listed name exists."""
    import importlib
    for stage in stages():
        if not os.path.isdir(os.path.join(PACKAGE, stage)) or stage == "app":
            continue
        pkg = importlib.import_module(f"graph_adapter.{stage}")
        missing = [n for n in pkg.__all__ if not hasattr(pkg, n)]
        assert not missing, (stage, missing)


def _run(code):
    return subprocess.run([sys.executable, "-W", "error::DeprecationWarning:__main__", "-c", code],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


# One fresh interpreter for the import checks below (each costs the import of torch and
# PyG, ~5 s): what a bare ``import graph_adapter`` loads, the kept paths, the removed ones.
_FRESH_IMPORTS = """
import importlib, json, sys, traceback, warnings
report = {}
# a deprecation raised from the package's own lines (or this script's) is an error;
# torch's own (torch.jit.script inside PyG) are not ours
warnings.filterwarnings('error', category=DeprecationWarning, module='graph_adapter|__main__')
import graph_adapter
report['app'] = sorted(m for m in sys.modules if m.startswith('graph_adapter.app'))
try:
    for m in KEPT_PATHS:
        importlib.import_module(m)
    graph_adapter.ipu_wrap, graph_adapter.losses.masked_loss, graph_adapter.backends.compile
    report['kept'] = ''
except Exception:
    report['kept'] = traceback.format_exc()
still = []
for old in REMOVED_PATHS:
    try:
        importlib.import_module(old)
        still.append(old)
    except ModuleNotFoundError:
        parent, _, leaf = old.rpartition('.')
        if hasattr(sys.modules.get(parent), leaf):
            still.append(old + ' (an attribute)')
report['removed'] = still
print(json.dumps(report))
"""


@functools.lru_cache(maxsize=None)
def _fresh_imports():
    """What :data:`_FRESH_IMPORTS` reports (run once a session)."""
    code = f"KEPT_PATHS = {KEPT_PATHS!r}\nREMOVED_PATHS = {REMOVED_PATHS!r}\n" + _FRESH_IMPORTS
    out = _run(code)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_package_and_its_kept_paths_import_without_a_deprecation():
    assert _fresh_imports()["kept"] == ""


def test_the_module_paths_removed_in_0_2_do_not_import():
    """0.2.0 removed the old module paths that 0.1.0 kept as deprecated aliases
    (CHANGELOG.md): none imports, and none is an attribute of its old parent."""
    assert _fresh_imports()["removed"] == []
