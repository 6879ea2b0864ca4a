"""PyG classes, resolved eagerly, once, outside any compiled region.

A :class:`~graph_adapter.format.spec.Spec` names its class as ``"module:qualname"``
(:func:`class_path`); :func:`resolve_class` turns that back into the concrete
class (PyG's batch classes are made on demand) and caches it, so that the
compiled forward only reads a dict. :func:`new` makes the empty instance that
``unflatten`` fills by item assignment (what ``torch.compile(fullgraph=True)``
traces); :func:`new_eager` is the same without PyG's per-call signature read.
"""
from __future__ import annotations

import inspect
from typing import Dict, Iterable, Tuple

from torch_geometric.data import Batch, Data, HeteroData
from torch_geometric.data.batch import DynamicInheritance
from torch_geometric.data.data import BaseData

from ._spec_checks import resolve_data_class

__all__ = ["class_path", "resolve_class", "remember", "new", "new_eager", "base_class"]


def class_path(cls: type) -> str:
    """``"module:qualname"`` of a class, as a :class:`Spec` names it."""
    return f"{cls.__module__}:{cls.__qualname__}"


_CLASSES: Dict[Tuple[str, bool], type] = {}


def resolve_class(data_cls: str, is_batch: bool, allow_modules: Iterable[str] = ()) -> type:
    """The concrete class a spec names; cached so that compiled code only reads a dict.

    Only ``Data``/``HeteroData`` subclasses of imported (or allowed) modules
    resolve: a :class:`ClassNotAllowedError` otherwise, before anything is
    called (see :func:`graph_adapter.format.spec.allow_modules`).
    """
    cached = _CLASSES.get((data_cls, is_batch)) if isinstance(data_cls, str) else None
    if cached is not None:
        return cached
    obj = resolve_data_class(data_cls, allow_modules)
    if is_batch:
        # PyG makes ``DataBatch`` & co. on demand (``DynamicInheritance``).
        obj = type(Batch(_base_cls=obj))
    _CLASSES[(data_cls, is_batch)] = obj
    return obj


def remember(data_cls: str, is_batch: bool, cls: type) -> None:
    """Cache ``cls`` as what ``data_cls`` names (the latest one of that name wins)."""
    _CLASSES[(data_cls, is_batch)] = cls


for _cls in (Data, HeteroData):  # the classes infer_spec() names, resolved up front
    for _is_batch in (False, True):
        resolve_class(class_path(_cls), _is_batch)


def new(cls: type) -> BaseData:
    """An empty instance of ``cls``.

    A concrete batch class must be passed itself as ``_base_cls``: its
    metaclass would otherwise derive yet another class (``DataDataBatch``).
    """
    if issubclass(cls, Batch):
        return cls(_base_cls=cls)
    return cls()


# Batch classes -> the keyword arguments PyG's ``DynamicInheritance.__call__``
# passes to ``__init__`` (``None`` for each required parameter).
_INIT_FILL: Dict[type, Dict[str, None]] = {}


def new_eager(cls: type) -> BaseData:
    """:func:`new` without PyG's per-instance ``inspect.signature`` (eager only).

    ``DynamicInheritance.__call__`` (PyG's batch metaclass) reads the
    signature of ``__init__`` on every instantiation (~17 us) to fill
    ``None`` for its required parameters; for a concrete batch class it then
    calls the next metaclass's ``__call__``. Here the fill is computed once per
    class and that call made directly: the same instance. Any other class, or
    a PyG whose metaclass is not as read here, takes :func:`new`.
    """
    meta = type(cls)
    if not (issubclass(cls, Batch) and issubclass(meta, DynamicInheritance)):
        return new(cls)
    fill = _INIT_FILL.get(cls)
    if fill is None:
        params = list(inspect.signature(cls.__init__).parameters.items())[1:]
        fill = {k: None for k, v in params  # PyG's own rule, as it reads it
                if k not in ("args", "kwargs") and v.default is inspect.Parameter.empty}
        _INIT_FILL[cls] = fill
    return super(DynamicInheritance, cls).__call__(**fill)


def base_class(obj: BaseData) -> type:
    """The data class a batch was made of (``Data`` for a ``DataBatch``), or ``type(obj)``."""
    if isinstance(obj, Batch):
        return type(obj).__bases__[-1]
    return type(obj)
