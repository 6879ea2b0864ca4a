"""The package is laid out by stage, and its imports run one way (issue 28).

``graph_adapter/data`` (host side) <- ``nn`` (inside the wrapped forward) <- ``ipu``
<- ``checker`` <- ``backends`` <- ``lightning`` <- ``app``: a module imports only
its own stage and the stages before it. No import cycle, no private name of
another module, no module over 600 lines; the moved public paths still import,
with a ``DeprecationWarning`` that names the new one.
"""
import ast
import functools
import json
import os
import subprocess
import sys


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "graph_adapter")
MAX_LINES = 600

#: stage -> rank; a module may import modules of its own rank or lower
STAGES = {"data": 0, "format": 0, "compat": 0, "serve": 0, "batching": 1, "sampling": 2, "nn": 3, "ipu": 4, "checker": 5, "backends": 6, "lightning": 7, "app": 8}
#: the package's own top level (the public API, the aliases, ``python -m``)
TOP = {"graph_adapter": 7, "graph_adapter._moved": 0, "graph_adapter.__main__": 8}


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


def _runtime_nodes(tree):
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:`` (never run)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return [n for n in ast.walk(tree) if id(n) not in skip]


def _import_froms(name, path):
    """``(absolute module, [imported names], line)`` of every ``from ... import`` that runs."""
    is_pkg = path.endswith("__init__.py")
    parts = name.split(".") if is_pkg else name.split(".")[:-1]
    for node in _runtime_nodes(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            yield base, [a.name for a in node.names], node.lineno


def _imports(name, path):
    """Every module a module imports when it runs, at any depth of its code (lazy imports
    included; ``if TYPE_CHECKING:`` imports are not)."""
    found = set()
    for node in _runtime_nodes(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    mods = _modules()
    for base, names, _ in _import_froms(name, path):
        for n in names:  # ``from pkg import sub`` imports sub; ``from mod import f``, mod
            found.add(f"{base}.{n}" if f"{base}.{n}" in mods else base)
    return found


def _rank(module):
    if module in TOP:
        return TOP[module]
    stage = module.split(".")[1]
    return STAGES[stage]


def _library(mods, target):
    """The package module ``target`` names (a module, or a name inside one), or None."""
    while target and target not in mods:
        target = target.rpartition(".")[0]
    return target or None


def test_every_module_belongs_to_a_stage():
    for name in _modules():
        assert name in TOP or name.split(".")[1] in STAGES, (
            f"{name} is in no stage: put it in one of {sorted(STAGES)} (or add the stage to "
            f"STAGES and to docs/concepts.md)")


def test_imports_run_one_way():
    """data <- nn <- ipu <- checker <- backends <- lightning <- app: nothing imports upward."""
    mods = _modules()
    bad = []
    for name, path in mods.items():
        for target in _imports(name, path):
            dep = _library(mods, target)
            if dep and dep != name and _rank(dep) > _rank(name):
                bad.append(f"{name} imports {dep} (a later stage)")
    assert not bad, bad


def test_no_import_cycle():
    """No module imports (directly or through others) one that imports it back.

    A submodule importing its own package (``from . import x``) is not a cycle,
    nor an import for type checkers only.
    """
    mods = _modules()
    graph = {m: {d for d in _imports(m, p) if d in mods and d != m and not m.startswith(d + ".")}
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


def _private(module):
    return any(p.startswith("_") and not p.startswith("__") for p in module.split("."))


def test_no_module_imports_another_modules_private_name():
    """A leading underscore means "this module's (or this subpackage's) own".

    ``from .x import _name`` is refused; a private module (``data/_scan.py``) may be
    imported only from inside its own subpackage. Share a name by making it public
    in its owner, or move it.
    """
    mods = _modules()
    bad = []
    for name, path in mods.items():
        own_pkg = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        for base, names, line in _import_froms(name, path):
            if not base.startswith("graph_adapter"):
                continue
            targets = [(f"{base}.{n}", n) if f"{base}.{n}" in mods else (base, n) for n in names]
            for module, n in targets:
                if module == f"{base}.{n}":  # a module imported by name: is it private to another package?
                    if _private(module) and module.rpartition(".")[0] != own_pkg:
                        bad.append(f"{name}:{line} imports private module {module}")
                elif n.startswith("_") and not n.startswith("__"):
                    bad.append(f"{name}:{line} imports {module}.{n}, a private name")
                if module != f"{base}.{n}" and _private(module) and \
                        module.rpartition(".")[0] != own_pkg:
                    bad.append(f"{name}:{line} imports from {module}, private to its own package")
    assert not bad, bad


def test_no_module_is_over_600_lines():
    long = {name: n for name, path in _modules().items()
            if (n := sum(1 for _ in open(path))) > MAX_LINES}
    assert not long, f"split these by job (at most {MAX_LINES} lines a module): {long}"


def test_every_subpackage_says_what_it_owns_and_may_import():
    for name, path in _modules().items():
        if path.endswith("__init__.py") and name.count(".") == 1 and \
                name.split(".")[1] in STAGES:
            doc = ast.get_docstring(ast.parse(open(path).read())) or ""
            assert "may import" in doc, f"{name}'s docstring says nothing of what it may import"


def test_the_library_never_imports_the_app():
    for name, path in _modules().items():
        if name.startswith("graph_adapter.app") or name == "graph_adapter.__main__":
            continue
        bad = {m for m in _imports(name, path) if m.startswith("graph_adapter.app")}
        assert not bad, f"{name} imports the application: {sorted(bad)}"
    assert _fresh_imports()["app"] == [], "a bare import graph_adapter loads the application"


def test_app_imports_only_public_library_names():
    """The application uses the library as a user would: no underscore names."""
    mods = _modules()
    for name, path in mods.items():
        if not name.startswith("graph_adapter.app"):
            continue
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and \
                    (node.module or "").startswith("graph_adapter") and \
                    not node.module.startswith("graph_adapter.app"):
                assert not any(p.startswith("_") for p in node.module.split(".")), (name, node.module)
                assert not any(a.name.startswith("_") for a in node.names), (name, node.module)


def test_tests_mirror_the_subpackages():
    """A module's tests are found by its path: tests/<stage>/ for graph_adapter/<stage>/."""
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = {d for d in os.listdir(here) if os.path.isdir(os.path.join(here, d))
            and any(f.startswith("test_") for f in os.listdir(os.path.join(here, d)))}
    stages = {d for d in STAGES if os.path.isdir(os.path.join(PACKAGE, d))}
    assert stages <= dirs, f"no tests/ folder for {sorted(stages - dirs)}"
    assert dirs - stages <= {"lightning_graphcore_venv", "graphium_venv"}, sorted(dirs - stages)


# ----------------------------------------------------------------- the public API
#: ``graph_adapter.__all__`` before the move: every name still there
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
KEPT_PATHS = ["graph_adapter.lightning", "graph_adapter.ipu", "graph_adapter.backends",
              "graph_adapter.checker", "graph_adapter.ipu.options", "graph_adapter.ipu.emulator",
              "graph_adapter.ipu.inputs", "graph_adapter.ipu.entry",
              "graph_adapter.ipu.poptorch_backend", "graph_adapter.app.datasets"]


def test_the_public_names_did_not_change():
    import graph_adapter as ga
    assert set(PUBLIC_NAMES) <= set(ga.__all__), sorted(set(PUBLIC_NAMES) - set(ga.__all__))
    missing = [n for n in ga.__all__ if not hasattr(ga, n)]
    assert not missing, missing
    assert ga.losses.masked_loss is ga.masked_loss
    assert callable(ga.compile) and callable(ga.check)  # functions, not the subpackages


def _run(code):
    return subprocess.run([sys.executable, "-W", "error::DeprecationWarning:__main__", "-c", code],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


# One fresh interpreter for the import checks below (each costs the import of torch and
# PyG, ~5 s): what a bare ``import graph_adapter`` loads, the old paths' warnings (each
# alias warns on its own first import, so each is imported once, here), the kept paths.
_FRESH_IMPORTS = """
import importlib, json, sys, traceback, warnings
report = {}
# a deprecation raised from the package's own lines (or this script's) is an error;
# torch's own (torch.jit.script inside PyG) are not ours
warnings.filterwarnings('error', category=DeprecationWarning, module='graph_adapter|__main__')
import graph_adapter
report['app'] = sorted(m for m in sys.modules if m.startswith('graph_adapter.app'))
moved = dict(sorted(MOVED.items()))
old0 = next(iter(moved))
# the warning is blamed on the line that imports the old path (one alias suffices)
with warnings.catch_warnings(record=True) as w0:
    warnings.simplefilter('always')
    exec(f'import graph_adapter.{old0}', {})
report['blamed_on'] = [x.filename for x in w0 if 'moved to' in str(x.message)][:1]
bad = []
for old, new in moved.items():
    if old == old0:
        w = w0
    else:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter('always')
            importlib.import_module('graph_adapter.' + old)
    alias = sys.modules['graph_adapter.' + old]
    mine = [x for x in w if issubclass(x.category, DeprecationWarning)
            and 'moved to' in str(x.message)]
    if len(mine) != 1 or new not in str(mine[0].message):
        bad.append((old, 'warnings', [str(x.message) for x in w]))
    elif alias is not importlib.import_module(new):
        bad.append((old, 'not the new module'))
    elif getattr(graph_adapter, old) is not alias:
        bad.append((old, 'attribute differs'))
report['moved'] = [len(moved), bad]
try:
    for m in KEPT_PATHS:
        importlib.import_module(m)
    graph_adapter.ipu_wrap, graph_adapter.losses.masked_loss, graph_adapter.backends.compile
    report['kept'] = ''
except Exception:
    report['kept'] = traceback.format_exc()
print(json.dumps(report))
"""


@functools.lru_cache(maxsize=None)
def _fresh_imports():
    """What :data:`_FRESH_IMPORTS` reports (run once a session)."""
    from graph_adapter._moved import MOVED
    code = f"MOVED = {dict(MOVED)!r}\nKEPT_PATHS = {KEPT_PATHS!r}\n" + _FRESH_IMPORTS
    out = _run(code)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_package_and_its_kept_paths_import_without_a_deprecation():
    assert _fresh_imports()["kept"] == ""


def test_a_moved_path_still_imports_and_names_its_new_one():
    """Every old path (one fresh interpreter for all: each alias warns on its own first
    import): one DeprecationWarning naming the new path, blamed on the importing line,
    the alias is the new module, and ``graph_adapter.<old>`` is it too."""
    from graph_adapter._moved import MOVED
    count, bad = _fresh_imports()["moved"]
    assert not bad, bad
    assert count == len(MOVED)
    # blamed on the importing line, in the exec'd string
    assert _fresh_imports()["blamed_on"] == ["<string>"]
