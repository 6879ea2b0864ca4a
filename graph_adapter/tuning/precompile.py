"""Precompiled entries: a warm process skips Dynamo's trace (opt-in, ``ENABLED``).

Inductor's FX graph cache and AOTAutograd's cache already give a second process
the compiled kernels; what it still pays at its first step is Dynamo tracing the
model again. torch 2.13's ``torch.compile(...).aot_compile(((flat,), {}))``
keeps the whole Dynamo result (the transformed bytecode, the guards, the
AOTAutograd forward and backward and their inductor code) as torch's own
serialized artifact; ``torch.compiler.load_compiled_function`` brings it back
without tracing. :class:`~graph_adapter.backends.DynamoEngine` uses one per (signature, mode,
grad mode) through :class:`PrecompiledEntries` when ``ENABLED``:

* **where**: ``$TORCHINDUCTOR_CACHE_DIR/graph_adapter_precompiled/``: torch's
  artifact ``<key>-<reads>.bin`` (written atomically; :func:`entry_name`), beside
  ``<key>.json`` (what the key was made of, for people; never read back to
  decide anything) and ``<key>.reads.json`` (what each of the key's entries read
  outside its inputs, and the values: up to 8 entries a key, newest first, each
  traced under other values of those globals);
* **the key** (:func:`artifact_key`, sha256 of a JSON document): torch and
  Python versions and executable, graph_adapter's FX pass versions, the backend, its options
  and the ``index_add`` fallback, the thread count (inductor's CPU code bakes
  it in), the batch's keys, dtypes, shapes, strides and devices, the training
  flag of every submodule and the grad mode, and the model's structure: every
  submodule's class and public attributes (:func:`_describe`: plain values,
  containers, callables by bytecode and closure contents, such as the loss
  function's), every parameter's and buffer's name, shape, dtype, device and
  ``requires_grad``;
* **stale code never runs**: the artifact records the source lines of every
  function Dynamo traced and their checksum; a load compares them with the
  files as they are now (:func:`sources_unchanged`) and recompiles on any
  difference (a changed ``forward`` of the model, of PyG, of graph_adapter);
* **the global state** (grad mode, autocast, default dtype, deterministic
  algorithms, TF32, torch-function state: Dynamo's ``GLOBAL_STATE`` guard)
  is in the key and checked on every call (:func:`global_state`), all but the
  thread count: Dynamo's guard also compares torch's thread count, and a
  background compile's child traces at one thread (a forked OpenMP pool hangs
  at more) for the parent's count, so its entry would never pass in the
  parent. The key records the count the code was generated for; inductor's
  CPU code runs on that count whatever torch's is, so a call at another count
  (the parent gives up a thread while a child compiles) computes the same;
* **no program traced under other values of a global**: every global the trace
  read (a module's attribute, a module-level dict's item or list's item, an
  imported module's attribute, ``os.environ[...]``, ``sys.argv``, a function or
  class a global names) is recorded at the save with its value, as JSON
  (:class:`Reads`, from Dynamo's guards on globals, which :func:`serializable_guards`
  sees while :func:`recording` is open), and an entry is loaded only where each
  one reads the same now (:func:`reads_differ`); other values compile (and save
  an entry of their own). Torch's own serialized guards cannot do this: they
  keep a global's *source*, and the module it hangs from pickles by name, so the
  load rebuilds each guard from the value the global has at the load, and it
  passes whatever the value; identity guards (which function a global names)
  are not serialized at all. Dynamo guards no *missing* key
  (``os.environ.get("X", "0")`` with ``X`` unset), so where the trace read
  ``os.environ`` the environment's variable names are recorded too (not their
  values; torch's own ``_TORCH...`` names left out). A trace that read a global
  whose value JSON cannot hold (a complex number, a NumPy scalar, an object
  only its identity tells apart) is not saved: a ``RuntimeWarning`` names it, once; the process runs
  the entry it compiled;
* **guards**: the loaded entry runs its own serialized guards on every call
  (the guards Dynamo can serialize: the batch's tensors, the modules' flags and
  attributes, the parameters, and the globals' values as they were at the
  load), and :func:`global_state` must read as it did at the save. A call
  whose guards fail (the model changed in this process) goes to
  the ordinary ``torch.compile`` entry, which recompiles as it would without
  precompile, and the loaded entry is dropped for that key. A function or
  class that a global names, rebound after the load, is not noticed (its
  identity guard is not serialized; the reads are checked at the load only).

Only ``"inductor"`` on the CPU and models without an ``nn.RNNBase`` use it.
The wrapped module itself is never serialized: torch pickles it as external
data (``external_data={"wrapped": ...}``), given back at the load.

Torch 2.13 rebuilds a stub of every guarded module when it loads the guards
(``GuardsStatePickler``); PyG's ``MessagePassing.__setstate__`` cannot rebuild
from a stub (``'_Missing' object has no attribute 'implements'``), so the load
runs with ``nn.Module.__setstate__`` in its place (:func:`_plain_setstate`),
restored after. (``IPUWrapped.__setstate__`` masks the norms again, which the
guards compare, skipping the submodules a stub lacks: :func:`~graph_adapter.nn.norm.mask_norms`.)
"""
from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import inspect
import json
import logging
import os
import re
import sys
import types
import warnings
from typing import Any, Callable, Dict, Iterator, Mapping, Optional

import torch
from torch import Tensor, nn

from ..backends import EngineSettings
from .registry import cache_key

__all__ = ["PrecompiledEntries", "ENABLED", "COUNTS", "artifact_key", "artifact_dir", "sources_unchanged",
           "grads_set_aside", "load", "save", "serializable_guards", "recording", "Reads",
           "reads_differ", "entry_name", "render", "Unguardable", "global_state",
           "has_entry"]

log = logging.getLogger(__name__)

#: Use precompiled entries (opt-in: set it, or ``GRAPH_ADAPTER_PRECOMPILE=1`` before import).
ENABLED = os.environ.get("GRAPH_ADAPTER_PRECOMPILE") == "1"

#: Entries this process loaded from disk (each skipped a trace) and saved, so far:
#: process-wide, as inductor's own cache counters are (``backends.precompiled_counts``).
COUNTS = {"loaded": 0, "saved": 0}

_FORMAT = "graph_adapter.precompile/2"
_PLAIN = (bool, int, float, str, type(None))


def artifact_dir() -> str:
    """Where the artifacts live: beside inductor's own caches."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return os.path.join(cache_dir(), "graph_adapter_precompiled")


def _describe(v: Any, depth: int = 0) -> Any:
    """A JSON-able, process-independent description of a module attribute that a
    trace may bake in (``None``: a submodule, listed on its own). Callables are
    described by module, name, bytecode and closure contents (``masked_loss("l1")``
    and ``masked_loss("mse")`` differ only in a closure cell: Dynamo's guard on it
    is one that cannot be saved), containers element by element, other objects by
    type and plain attributes; three levels deep."""
    if isinstance(v, _PLAIN):
        return [type(v).__name__, v]
    if isinstance(v, nn.Module):
        return None
    if isinstance(v, Tensor):
        return ["tensor", list(v.shape), str(v.dtype), str(v.device), v.requires_grad]
    if depth >= 3:
        return ["deep", type(v).__qualname__]
    if isinstance(v, (tuple, list)):
        return [type(v).__name__, [_describe(x, depth + 1) for x in v]]
    if isinstance(v, dict):
        return ["dict", [[repr(k), _describe(x, depth + 1)] for k, x in v.items()]]
    if isinstance(v, functools.partial):
        return ["partial", _describe(v.func, depth + 1), _describe(v.args, depth + 1),
                _describe(v.keywords, depth + 1)]
    code = getattr(v, "__code__", None)
    if callable(v) and code is not None:
        cells = []
        for cell in getattr(v, "__closure__", None) or ():
            try:
                cells.append(_describe(cell.cell_contents, depth + 1))
            except ValueError:  # an empty cell
                cells.append("empty")
        return ["function", getattr(v, "__module__", None), v.__qualname__,
                getattr(v, "__name__", None),
                hashlib.sha256(code.co_code + repr(code.co_names).encode()).hexdigest()[:16],
                cells, _describe(getattr(v, "__defaults__", None), depth + 1)]
    if callable(v) and not hasattr(v, "__dict__"):  # builtins, C functions
        return ["builtin", getattr(v, "__module__", None), getattr(v, "__qualname__", repr(type(v)))]
    return ["object", f"{type(v).__module__}.{type(v).__qualname__}",
            [[k, _describe(x, depth + 1)] for k, x in sorted(getattr(v, "__dict__", {}).items())
             if not k.startswith("__")]]


def _structure(wrapped: nn.Module) -> list:
    """Every submodule: name, class, training flag, plain attributes (but those its
    class lists in ``untraced_attributes``); every parameter and buffer: name, shape,
    dtype, device, requires_grad."""
    mods = []
    for name, m in wrapped.named_modules():
        # (a module's counters, which its forward never reads, would make every key new)
        untraced = set(getattr(type(m), "untraced_attributes", ()))
        attrs = {k: _describe(v) for k, v in sorted(vars(m).items())
                 if (not k.startswith("_") or k in ("_requested_inputs",)) and k not in untraced}
        mods.append([name, f"{type(m).__module__}.{type(m).__qualname__}", m.training,
                     {k: v for k, v in attrs.items() if v is not None}])
    tensors = [[kind, name, list(t.shape), str(t.dtype), str(t.device), t.requires_grad]
               for kind, it in (("p", wrapped.named_parameters()), ("b", wrapped.named_buffers()))
               for name, t in it]
    return [mods, tensors]


def _pass_versions() -> Dict[str, Any]:
    """The enabled registry entries, by name and version (CPU-inference ones included:
    an entry saved with a rewrite on or off is another program)."""
    from . import rewrites  # noqa: F401  (registers the rewrites)

    return {"tuning": cache_key()}


def artifact_key(wrapped: nn.Module, flat: Mapping[str, Tensor], settings: Any) -> Dict[str, Any]:
    """What an artifact is valid for (a JSON-able dict; :func:`digest` hashes it)."""
    import torch_geometric

    batch = [[k, str(v.dtype), list(v.shape), list(v.stride()), str(v.device)]
             for k, v in flat.items()]  # in dict order: Dynamo guards on it
    return {
        "format": _FORMAT,
        "torch": torch.__version__, "python": sys.version, "pyg": torch_geometric.__version__,
        # one environment's artifacts only: another venv may trace other code paths
        # (PyG takes torch_scatter's kernels where it is installed)
        "executable": sys.executable,
        "passes": _pass_versions(),
        "backend": settings.backend,
        "options": repr(sorted((settings.options or {}).items())),
        "index_add_fallback": repr(settings.index_add_fallback),
        "threads": torch.get_num_threads(),
        "grad": torch.is_grad_enabled(),
        "global_state": global_state(),
        "batch": batch,
        "model": _structure(wrapped),
    }


_THREADS = re.compile(r'"num_threads":\d+,?')


def global_state() -> str:
    """Dynamo's global state (the ``GLOBAL_STATE`` guard's JSON) less torch's thread
    count (module docstring): about 3 us, checked on every call of a loaded entry."""
    return _THREADS.sub("", torch._C._dynamo.guards.GlobalStateGuard().__getstate__())


def digest(key: Mapping[str, Any]) -> str:
    """The artifact's file name: 40 hex digits of the key's sha256."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:40]


def sources_unchanged(source_info: Any) -> bool:
    """Whether every source range the artifact traced still reads the same now."""
    import linecache

    from torch._dynamo.package import _hash_source

    for src in source_info.inlined_sources:
        mod = sys.modules.get(src.module)
        path = getattr(mod, "__file__", None)
        if path is None:
            return False
        linecache.checkcache(path)
        lines = linecache.getlines(path)[src.firstlineno - 1:src.lastlineno - 1]
        if _hash_source("".join(lines)) != src.checksum:
            return False
    return True


@contextlib.contextmanager
def _plain_setstate() -> Iterator[None]:
    """PyG's ``MessagePassing.__setstate__`` replaced by ``nn.Module``'s (module docstring)."""
    try:
        from torch_geometric.nn.conv import MessagePassing
    except ImportError:  # no PyG: nothing to replace
        yield
        return
    saved = MessagePassing.__dict__.get("__setstate__")
    MessagePassing.__setstate__ = nn.Module.__setstate__
    try:
        yield
    finally:
        if saved is None:
            del MessagePassing.__setstate__
        else:
            MessagePassing.__setstate__ = saved


@contextlib.contextmanager
def grads_set_aside(wrapped: nn.Module) -> Iterator[None]:
    """Every parameter's ``.grad`` set to ``None`` while an entry is compiled to be
    saved, and put back after: torch pickles a guarded tensor with its ``.grad``,
    which is in no guard tree, and its load then fails ("assigned grad expected to
    be a Tensor or None but got grad of type _Missing": an inference entry compiled
    after a training step)."""
    params = list(wrapped.parameters())
    grads = [p.grad for p in params]
    for p in params:
        p.grad = None
    try:
        yield
    finally:
        for p, g in zip(params, grads):
            p.grad = g


# ------------------------------------------------------------------ what a trace read
# Dynamo serializes the guards on globals (a module's attributes, a dict item of a
# module-level config, ``os.environ``, ``sys.argv``) by their sources only: their
# modules pickle by name (``GuardsStatePickler._unpickle_python_module``), so a load
# rebuilds each guard from the value the global has *then* (``EQUALS_MATCH`` reads
# it at build time), and the guard passes whatever the value. Identity guards
# (a function or class a global names) are not serialized at all. So every global
# the trace read is recorded here with its value, as JSON, and a load compares.

#: guard kinds whose check is the value itself (``==``, ``is None``, ``bool``)
_VALUE_GUARDS = {"CONSTANT_MATCH", "EQUALS_MATCH", "BOOL_MATCH", "NONE_MATCH"}
#: guard kinds that check what an object is (dropped by torch's serialization)
_IDENTITY_GUARDS = {"ID_MATCH", "MODULE_MATCH", "FUNCTION_MATCH", "CLASS_MATCH",
                    "CLOSURE_MATCH", "BUILTIN_MATCH", "NN_MODULE", "WEAKREF_ALIVE",
                    "DICT_VERSION"}
_CHECK_OF_GUARD = {"TYPE_MATCH": "type", "FAKE_SCRIPT_TYPE_MATCH": "type",
                   "SEQUENCE_LENGTH": "len", "TUPLE_ITERATOR_LEN": "len",
                   "EMPTY_NN_MODULE_HOOKS_DICT": "len", "DICT_KEYS_MATCH": "keys",
                   "MAPPING_KEYS_CHECK": "keys", "TENSOR_MATCH": "tensor",
                   "NOT_NONE_MATCH": "none", **{g: "value" for g in _VALUE_GUARDS},
                   **{g: "id" for g in _IDENTITY_GUARDS}}
#: guard kinds about an object's keys or attributes: the key is the guard's argument
_ARG_GUARDS = {"DICT_CONTAINS": ("in", "key"), "DICT_NOT_CONTAINS": ("in", "key"),
               "SET_CONTAINS": ("in", "key"), "SET_NOT_CONTAINS": ("in", "key"),
               "HASATTR": ("hasattr", "attr"),
               "NOT_PRESENT_IN_GENERIC_DICT": ("in_dict", "attr")}
#: aliasing between two globals: each one's own reads stand for it
_SKIPPED_GUARDS = {"DUPLICATE_INPUT"}
#: the environment's names that torch sets itself while it compiles
_TORCH_ENV_PREFIX = "_TORCH"
_ACTIVE: list = []  # the recorders of the compiles under way (innermost last)
_WARNED: set = set()


class Unguardable(Exception):
    """A global the trace read whose value cannot be recorded as JSON."""


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', None)}.{getattr(obj, '__qualname__', repr(obj))}"


def _enc(v: Any, depth: int = 0) -> Any:
    """``v`` as JSON: plain values as they are, others tagged (``{"tuple": [...]}``);
    raises :class:`Unguardable` for a value JSON cannot tell from another."""
    import enum

    if type(v) in (bool, int, float, str, type(None)):
        return v
    if depth > 8:
        raise Unguardable(f"a {type(v).__name__} nested over 8 deep")
    if isinstance(v, torch.Size):
        return {"size": list(v)}
    if type(v) in (list, tuple):
        return {type(v).__name__: [_enc(x, depth + 1) for x in v]}
    if type(v) in (set, frozenset):
        return {"set": sorted((_enc(x, depth + 1) for x in v), key=json.dumps)}
    if type(v) in (dict, collections.OrderedDict):
        return {"dict": [[_enc(k, depth + 1), _enc(x, depth + 1)] for k, x in v.items()]}
    if type(v) is bytes:
        return {"bytes": v.hex()}
    if isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return {type(v).__name__: str(v)}
    if isinstance(v, enum.Enum):
        return {"enum": [_qualname(type(v)), v.name]}
    if isinstance(v, type):
        return {"class": _qualname(v)}
    if type(v) in (range, slice):
        return {type(v).__name__: [_enc(v.start), _enc(v.stop), _enc(v.step)]}
    raise Unguardable(f"a {_qualname(type(v))}")


def _dec(v: Any) -> Any:
    """The key or index :func:`_enc` wrote (plain values, tuples, bytes)."""
    if not isinstance(v, dict):
        return v
    if "tuple" in v:
        return tuple(_dec(x) for x in v["tuple"])
    if "bytes" in v:
        return bytes.fromhex(v["bytes"])
    raise Unguardable(f"a key {v}")


@functools.lru_cache(maxsize=4096)
def _code_digest(code: types.CodeType) -> str:
    return hashlib.sha256(code.co_code + repr(code.co_names).encode()).hexdigest()[:16]


def _identity(v: Any) -> Any:
    """What an identity guard checks, by name: a module, class, function (and its
    bytecode), builtin; anything else only where it is plain data."""
    if inspect.ismodule(v):
        return {"module": v.__name__}
    if isinstance(v, type):
        return {"class": _qualname(v)}
    if isinstance(v, types.FunctionType):
        return {"function": [_qualname(v), _code_digest(v.__code__)]}
    if isinstance(v, (types.BuiltinFunctionType, types.MethodWrapperType,
                      types.WrapperDescriptorType, types.MethodDescriptorType)):
        owner = getattr(v, "__self__", None)
        owner = getattr(v, "__objclass__", None) if owner is None else owner
        owner = owner.__name__ if inspect.ismodule(owner) else _qualname(
            owner if isinstance(owner, type) else type(owner))
        return {"builtin": [owner, getattr(v, "__qualname__", repr(v))]}
    if isinstance(v, torch._ops.OpOverloadPacket) or isinstance(v, torch._ops.OpOverload):
        return {"op": str(v)}
    return {"value": _enc(v)}


def _member(v: Any) -> Any:
    """A set's member or a dict's key as JSON: its value, else what it is by name."""
    try:
        return _enc(v)
    except Unguardable:
        return _identity(v)


def _observe(check: list, obj: Any) -> Any:
    """What the guard ``check`` reads of ``obj``, as JSON."""
    kind = check[0]
    if kind == "value":
        return _enc(obj)
    if kind == "type":
        return _qualname(type(obj))
    if kind == "len":
        return len(obj)
    if kind == "keys":
        return _enc(list(dict.keys(obj)) if isinstance(obj, dict) else list(obj.keys()))
    if kind == "none":
        return obj is None
    if kind == "in":
        return _dec(check[1]) in obj
    if kind == "members":
        return sorted(json.dumps(_member(k)) for k in obj)
    if kind == "hasattr":
        return hasattr(obj, check[1])
    if kind == "in_dict":
        return check[1] in getattr(obj, "__dict__", {})
    if kind == "tensor":
        return [_qualname(type(obj)), str(obj.dtype), list(obj.shape), list(obj.stride()),
                str(obj.device), obj.requires_grad]
    if kind == "id":
        return _identity(obj)
    if kind == "env_names":  # Dynamo guards no missing key (``os.environ.get``)
        return sorted(k for k in obj if not k.startswith(_TORCH_ENV_PREFIX))
    raise Unguardable(f"a check {kind!r}")


def _steps(source: Any, import_sources: Mapping[str, str]) -> list:
    """A guard's source as a JSON path: ``[["module", "pcmod"], ["attr", "CONFIG"],
    ["item", "scale"]]``; :class:`Unguardable` for a source it cannot walk again."""
    from torch._dynamo import source as S

    out = []
    while not isinstance(source, S.GlobalSource):
        if isinstance(source, (S.AttrSource, S.GenericAttrSource)):
            out.append(["attr", source.member])
        elif isinstance(source, (S.GetItemSource, S.DictGetItemSource,
                                 S.DictSubclassGetItemSource)):
            if isinstance(source.index, S.ConstDictKeySource):
                out.append(["kitem", source.index.index])
            elif isinstance(source.index, S.Source) or getattr(source, "index_is_slice", False):
                raise Unguardable("an item of a computed index")
            else:
                out.append(["item", _enc(source.index)])
        elif isinstance(source, S.ConstDictKeySource):
            out.append(["key", source.index])
        elif isinstance(source, S.DefaultsSource):
            out.append(["kwdefaults" if source.is_kw else "defaults", source.idx_key])
        elif isinstance(source, (S.ClosureSource, S.TypeMROSource, S.CodeSource)):
            out.append(["attr", {S.ClosureSource: "__closure__", S.TypeMROSource: "__mro__",
                                 S.CodeSource: "__code__"}[type(source)]])
        elif isinstance(source, (S.TypeSource, S.TypeDictSource)):
            out.append(["type" if isinstance(source, S.TypeSource) else "typedict"])
        elif not isinstance(source, S.NNModuleSource):  # NNModuleSource: a marker only
            raise Unguardable(f"a {type(source).__name__}")
        source = source.base
    name = source.global_name
    if name in import_sources:
        root = ["module", import_sources[name]]
    elif name.startswith("__builtins_dict__"):
        root = ["builtins"]
    else:
        raise Unguardable(f"a global {name!r} of the compiled entry itself")
    return [root] + out[::-1]


def _root(root: list) -> Any:
    import builtins
    import importlib

    if root[0] == "module":
        return sys.modules.get(root[1]) or importlib.import_module(root[1])
    return {"builtins": builtins.__dict__, "environ": os.environ}[root[0]]


def _step(obj: Any, step: list) -> Any:
    kind = step[0]
    if kind == "attr":
        return getattr(obj, step[1])
    if kind == "item":
        return obj[_dec(step[1])]
    if kind == "kitem":
        return obj[list(dict.keys(obj))[step[1]]]
    if kind == "key":
        return list(dict.keys(obj))[step[1]]
    if kind in ("defaults", "kwdefaults"):
        return getattr(obj, f"__{kind}__")[step[1]]
    if kind == "type":
        return type(obj)
    if kind == "typedict":
        return dict(obj.__dict__)
    raise Unguardable(f"a step {kind!r}")


def _objects(path: list, last: Optional[list] = None) -> list:
    """Each object along ``path`` as it is now, the path's own last (an exception: it
    is not there now). ``last``: ``[path, objects]`` of the path walked before, whose
    common beginning is not walked again (sorted paths share theirs)."""
    objs = []
    if last is not None:
        prev, prev_objs = last
        for i, (a, b) in enumerate(zip(path, prev[:len(prev_objs)])):
            if a != b:
                break
            objs.append(prev_objs[i])
    if not objs:
        objs.append(_root(path[0]))
    for step in path[len(objs):]:
        objs.append(_step(objs[-1], step))
    return objs


def _now_all(entries: list) -> list:
    """What each entry's check reads at its path now; ``{"missing": ...}`` where the
    path is not there now."""
    out, last = [], None
    for path, check, _ in entries:
        try:
            objs = _objects(path, last)
            last = [path, objs]
            out.append(_observe(check, objs[-1]))
        except Exception as exc:  # noqa: BLE001 - whatever a getattr raises: not there now
            last = None
            out.append({"missing": type(exc).__name__})
    return out


def render(path: list) -> str:
    """A path as a person would write it: ``pcmod.CONFIG['scale']``."""
    out = {"module": lambda r: r[1], "builtins": lambda r: "builtins",
           "environ": lambda r: "os.environ"}[path[0][0]](path[0])
    for step in path[1:]:
        kind = step[0]
        if kind == "attr":
            out += f".{step[1]}"
        elif kind in ("item", "kitem", "key"):
            idx = repr(_dec(step[1])) if kind == "item" else f"<key {step[1]}>"
            out = f"list({out}.keys())[{step[1]}]" if kind == "key" else f"{out}[{idx}]"
        elif kind in ("defaults", "kwdefaults"):
            out += f".__{kind}__[{step[1]!r}]"
        else:
            out = f"type({out})" + (".__dict__" if kind == "typedict" else "")
    return out


def _check_of(guard_type: str, arg: Any) -> list:
    """The JSON check standing for a Dynamo guard kind (a kind not known here: its
    value, where that is plain data)."""
    if guard_type in _ARG_GUARDS:
        kind, _ = _ARG_GUARDS[guard_type]
        if kind != "in":
            return [kind, arg]
        try:
            key = _enc(arg)
            if _dec(key) == arg:
                return [kind, key]
        except Unguardable:
            pass
        return ["members"]  # a key JSON cannot give back (a function): every member, by name
    return [_CHECK_OF_GUARD.get(guard_type, "value")]


class Reads:
    """The globals one trace read (module attributes and their items, ``os.environ``,
    ``sys.argv``), from Dynamo's guards on them as :func:`serializable_guards` saw
    them while :func:`recording` was open; :meth:`resolve` makes them JSON:
    ``entries``, sorted ``[path, check, value]`` triples, and ``refused``, what
    cannot be recorded (the source as a person writes it, and why)."""

    def __init__(self) -> None:
        self.guards: list = []
        self.entries: list = []
        self.refused: Dict[str, str] = {}
        self.resolved = False

    def note(self, entries: Any) -> None:
        """Keep the guards on globals of one :func:`serializable_guards` call."""
        for e in entries:
            if not e.is_global or e.guard_type in _SKIPPED_GUARDS or "___unnamed_scope_" in e.name:
                continue  # an unnamed scope: a closure's per-call globals, not a module's
            arg = None
            if e.guard_type in _ARG_GUARDS:
                arg = (getattr(e.orig_guard.create_fn, "keywords", None) or {}).get(
                    _ARG_GUARDS[e.guard_type][1])
            self.guards.append((e.orig_guard.originating_source, e.guard_type, arg,
                                e.value if e.has_value else _NOTHING, e.name))

    def resolve(self, import_sources: Mapping[str, str]) -> None:
        """``entries`` and ``refused`` from the guards kept (``import_sources``: the
        entry's module aliases, ``__import_pcmod`` -> ``pcmod``)."""
        from torch._dynamo.source import NonSerializableSetGetItemSource as SetMember

        found, environ = {}, False
        for source, guard_type, arg, value, name in self.guards:
            path = None
            try:
                check = _check_of(guard_type, arg)
                if isinstance(source, SetMember):  # a set's i-th member: its order is the
                    source, check, value = source.base, ["members"], _NOTHING  # process's
                path = _steps(source, import_sources)
                objs = _objects(path)
                now = _observe(check, objs[-1])
                if value is not _NOTHING and value is not objs[-1] and _observe(check, value) != now:
                    raise Unguardable("another object than the one Dynamo read")
            except Exception as exc:  # noqa: BLE001 - Unguardable, or a path not walked back
                why = str(exc) if isinstance(exc, Unguardable) else f"{type(exc).__name__}: {exc}"
                self.refused.setdefault(render(path) if path else name, f"{guard_type} of {why}")
                continue
            found[json.dumps([path, check])] = [path, check, now]
            environ = environ or any(o is os.environ for o in objs)
        if environ:  # a missing variable is read without a guard: the names stand for it
            path, check = [["environ"]], ["env_names"]
            found[json.dumps([path, check])] = [path, check, _observe(check, os.environ)]
        self.entries = sorted(found.values(), key=json.dumps)
        self.resolved = True


_NOTHING = object()


@contextlib.contextmanager
def recording() -> Iterator[Reads]:
    """The :class:`Reads` of the compile inside (``aot_compile`` with
    :func:`serializable_guards` as its guard filter)."""
    reads = Reads()
    _ACTIVE.append(reads)
    try:
        yield reads
    finally:
        _ACTIVE.remove(reads)


def reads_differ(entries: list) -> Optional[str]:
    """``None`` where every recorded read has its recorded value now, else the first
    that does not (``"pcmod.CONFIG['scale'] was 1.0, is 3.0"``)."""
    now = _now_all(entries)
    if json.dumps(now) == json.dumps([value for _, _, value in entries]):
        return None
    for (path, check, value), v in zip(entries, now):
        if json.dumps(v) != json.dumps(value):
            what = "" if check[0] == "value" else f" ({' '.join(map(str, check))})"
            if check[0] == "env_names" and isinstance(v, list):
                return (f"the environment's variables: {sorted(set(v) - set(value))} set, "
                        f"{sorted(set(value) - set(v))} unset since")
            return f"{render(path)}{what} was {_shown(value)}, is {_shown(v)}"
    return None


def _shown(v: Any) -> str:
    """A recorded value for a log line (bytes, as the environment holds them, as bytes)."""
    try:
        return repr(_dec(v))
    except Unguardable:
        return json.dumps(v)


def _warn_refused(refused: Mapping[str, str]) -> None:
    """Say once per process, per set of sources, why an entry was not saved."""
    names = tuple(sorted(refused))
    if names in _WARNED:
        return
    _WARNED.add(names)
    listed = "; ".join(f"{n} ({refused[n]})" for n in names[:5])
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    warnings.warn(
        f"graph_adapter: precompiled entry not saved: the traced forward read {listed}{more}, "
        "whose value precompile cannot record as JSON, so a later process could not tell "
        "its value from this one's. Keep such a global a number, string, bool, None, a "
        "list/dict of those, a module, class or function; or read it outside forward and "
        "pass it in as an input or module attribute; or compile with precompile=False. "
        "This process compiles as usual.", RuntimeWarning, stacklevel=3)


# ------------------------------------------------------------------ entries on disk
_MAX_VARIANTS = 8  # entries kept per key, one per set of values the globals had


def entry_name(key: Mapping[str, Any], entries: list) -> str:
    """An entry's file name: the key's digest, then the digest of what its trace read
    and the values it read (so an entry is found only under the values it was traced
    under, and entries traced under other values sit beside it)."""
    reads = hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()[:16]
    return f"{digest(key)}-{reads}"


def _variants(d: str, key: Mapping[str, Any]) -> list:
    """The key's index ``<key>.reads.json``: its entries' reads, newest first."""
    try:
        with open(os.path.join(d, digest(key) + ".reads.json")) as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return []
    return doc.get("variants", []) if doc.get("format") == _FORMAT else []


def _write_json(path: str, doc: Any) -> None:
    tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)


def has_entry(key: Mapping[str, Any]) -> bool:
    """Whether an entry of ``key`` is on disk, traced under any values of its globals."""
    d = artifact_dir()
    return any(os.path.exists(os.path.join(d, v["entry"] + ".bin")) for v in _variants(d, key))


def load(key: Mapping[str, Any], wrapped: nn.Module) -> Optional[Callable]:
    """The precompiled entry of ``key`` traced under the values the globals its trace
    read have now, or ``None`` (none saved, none under these values, unreadable, made
    by other sources: each logged and answered by a compile, never raised)."""
    from . import host_checks as _host_checks

    d = artifact_dir()
    path, differ = None, None
    for variant in _variants(d, key):
        why = reads_differ(variant["reads"])
        if why is None:
            path = os.path.join(d, entry_name(key, variant["reads"]) + ".bin")
            break
        differ = differ or why
    if path is None or not os.path.exists(path):
        if differ:
            log.info("graph_adapter: no precompiled entry of %s under this process's values "
                     "(%s); compiling", digest(key), differ)
        return None
    try:
        with open(path, "rb") as fh, _plain_setstate(), _host_checks.remembered_host_checks():
            fn = torch.compiler.load_compiled_function(fh, external_data={"wrapped": wrapped})
    except Exception as exc:  # a torch artifact we cannot read: compile instead
        log.warning("graph_adapter: precompiled entry %s not loaded (%s: %s); compiling",
                    path, type(exc).__name__, exc)
        return None
    if not sources_unchanged(fn.source_info()):
        log.info("graph_adapter: precompiled entry %s traced other sources; compiling", path)
        return None
    COUNTS["loaded"] += 1
    return fn


def save(key: Mapping[str, Any], fn: Any, wrapped: nn.Module,
         reads: Optional[Reads] = None) -> bool:
    """Write ``fn`` (an ``aot_compile`` result), its key's description and what its
    trace read (``reads``, from :func:`recording` around the ``aot_compile``; without
    it, nothing: the entry then loads whatever the globals hold), atomically. An
    entry whose trace read a global that cannot be recorded is not written: a
    warning says so, once (``False``)."""
    reads = reads if reads is not None else Reads()
    if not reads.resolved:
        reads.resolve(fn._artifacts.runtime_env.import_sources)
    if reads.refused:
        _warn_refused(reads.refused)
        return False
    d = artifact_dir()
    os.makedirs(d, exist_ok=True)
    name = entry_name(key, reads.entries)
    fn.save_compiled_function(os.path.join(d, name + ".bin"), external_data={"wrapped": wrapped})
    _write_json(os.path.join(d, digest(key) + ".json"), key)
    variants = [{"entry": name, "reads": reads.entries}]
    for old in _variants(d, key):
        if old.get("entry") != name and len(variants) < _MAX_VARIANTS:
            variants.append(old)
        elif old.get("entry") != name:  # the oldest beyond the limit: its file goes too
            with contextlib.suppress(OSError):
                os.remove(os.path.join(d, old["entry"] + ".bin"))
    _write_json(os.path.join(d, digest(key) + ".reads.json"),
                {"format": _FORMAT, "variants": variants})
    COUNTS["saved"] += 1
    return True


def serializable_guards(entries: Any) -> list:
    """The ``guard_filter_fn`` of an entry to be saved: every guard Dynamo can
    serialize, globals included (torch's default for ``aot_compile`` drops globals);
    inside :func:`recording`, the guards on globals are also kept for the entry's
    reads (which are checked at a load: the serialized ones cannot be)."""
    from torch._dynamo.guards import CheckFunctionManager

    bad = CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES
    # GLOBAL_STATE: the key and a check of the loaded entry's own stand for it, less the
    # thread count (module docstring: a background child's entry would never pass)
    bad = (*bad, "GLOBAL_STATE")
    if _ACTIVE:  # a compile to be saved: what its trace read, kept beside its entry
        _ACTIVE[-1].note(entries)
    # Dynamo names the scope of some closures after an object id ("___unnamed_scope_<id>"):
    # a guard on such a name fails in any other process, so it cannot be kept
    return [not (e.guard_type in bad or any(t in bad for t in e.derived_guard_types)
                 or "___unnamed_scope_" in e.name)
            for e in entries]


class PrecompiledEntries:
    """A Dynamo engine's precompiled entries (:class:`~graph_adapter.backends.PrecompiledCalls`).

    Each (signature, mode, grad mode) runs through an entry saved by torch's
    ``aot_compile`` (an earlier process's, when its key and sources match and the
    globals its trace read hold the values they had then, else one compiled now and
    saved); where that entry's saved guards fail, :meth:`entry` answers ``None`` and
    the engine's ordinary entry runs (and recompiles)."""

    def __init__(self, wrapped: nn.Module, entry: Callable[..., Any], backend: Callable[..., Any],
                 settings: EngineSettings) -> None:
        self._wrapped, self._settings = wrapped, settings
        #: entries loaded from an earlier process's artifact
        self.loads = 0
        # (signature, mode, grad mode) -> (entry, or None: the ordinary entry; the global
        # state it was traced under)
        self.calls: Dict[Any, Any] = {}
        # the same entry, compiled ahead with the guards that serialize (globals kept)
        self._aot = torch.compile(entry, backend=backend, fullgraph=True, dynamic=False,
                                  options={"guard_filter_fn": serializable_guards})

    def entry(self, flat: Dict[str, Tensor], key: Any) -> Optional[Callable[..., Any]]:
        """The entry for this call whose guards pass (``entry(flat)`` runs it), or ``None``
        (the ordinary entry then runs: it recompiles where the model changed here)."""
        ck = (key, torch.is_grad_enabled())
        if ck not in self.calls:
            self.calls[ck] = (self._load_or_build(flat), global_state())
        fn, traced_under = self.calls[ck]
        # the global state: the entry's serialized guards leave it out
        if fn is not None and not (global_state() == traced_under and fn.guard_check(flat)):
            self.calls[ck] = (None, None)  # never retried: the ordinary entry owns this key now
            return None
        return None if fn is None else fn.fn

    def warm(self, flat: Dict[str, Tensor]) -> bool:
        """Load or build and save this call's entry; whether one is on disk now."""
        before = COUNTS["saved"] + COUNTS["loaded"]
        self._load_or_build(flat)
        return COUNTS["saved"] + COUNTS["loaded"] > before

    def has_saved_entry(self, flat: Dict[str, Tensor]) -> bool:
        """Whether an entry of this call is on disk (under any values of its globals)."""
        return has_entry(self._key(flat))

    def load_only(self, flat: Dict[str, Tensor], key: Any) -> bool:
        """Load this call's entry where one on disk serves it now (never compiles)."""
        ck = (key, torch.is_grad_enabled())
        if ck not in self.calls:
            fn = self._loaded(self._key(flat))
            if fn is None:
                return False
            self.calls[ck] = (fn, global_state())
        return self.calls[ck][0] is not None

    def _key(self, flat: Dict[str, Tensor]) -> Dict[str, Any]:
        return artifact_key(self._wrapped, flat, self._settings)

    def _loaded(self, key: Dict[str, Any]) -> Any:
        fn = load(key, self._wrapped)
        if fn is not None:
            self.loads += 1
        return fn

    def _load_or_build(self, flat: Dict[str, Tensor]) -> Any:
        """An earlier process's artifact for this call, else one compiled now and saved
        (``None`` where torch cannot build or save one: logged, and compiled as usual)."""
        key = self._key(flat)
        fn = self._loaded(key)
        if fn is not None:
            return fn
        try:
            with grads_set_aside(self._wrapped):
                with recording() as reads:  # the globals the trace reads
                    fn = self._aot.aot_compile(((flat,), {}))
                # not saved (a warning says why) where a global read cannot be recorded:
                # this process still runs the entry, traced under its own values
                save(key, fn, self._wrapped, reads)
        except Exception as exc:  # torch's precompile is experimental: compile as usual
            log.warning("graph_adapter: no precompiled entry (%s: %s); compiling as usual",
                        type(exc).__name__, exc)
            return None
        return fn
