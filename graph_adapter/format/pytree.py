"""PyG data classes as ``torch.utils._pytree`` nodes.

With these registrations ``torch.export.export(model, (batch,))`` accepts a
model whose forward takes a PyG object, and ``torch.export.save``/``load``
round-trip the program: the children are the tensors of :func:`flatten` (in
key order) and the context is its :class:`~graph_adapter.format.spec.Spec`, dumped
as JSON (never pickle).

``Data``, ``HeteroData``, ``DataBatch`` and ``HeteroDataBatch`` are registered
when ``graph_adapter`` is imported; call :func:`register_pytree` for your own
``Data`` subclasses.

Note: the context holds the whole spec, non-tensor attributes and batch
metadata included, so an exported program accepts only batches with that
exact spec. For programs that take batches of one budget, export the
``ipu_wrap``-ped model, which takes a flat dict instead.
"""
from __future__ import annotations

from typing import Any, List, Tuple

from torch_geometric.data import Batch, Data, HeteroData
from torch_geometric.data.data import BaseData

from .spec import Spec, class_path, flatten, unflatten
from .torch_internals import pytree

__all__ = ["register_pytree"]

_REGISTERED: set = set()


def _flatten(obj: BaseData) -> Tuple[List[Any], Spec]:
    flat, spec = flatten(obj)
    return list(flat.values()), spec


def _flatten_with_keys(obj: BaseData) -> Tuple[List[Tuple[Any, Any]], Spec]:
    flat, spec = flatten(obj)
    return [(pytree.MappingKey(k), v) for k, v in flat.items()], spec


def _unflatten(children: List[Any], spec: Spec) -> BaseData:
    return unflatten(dict(zip(spec.keys, children)), spec, validate=False)


def _serialized_name(cls: type) -> str:
    if issubclass(cls, Batch):
        # Batch classes are made on the fly and live in module ``abc``; name
        # them by what they batch.
        return "graph_adapter.batch_of." + class_path(cls.__bases__[-1]).replace(":", ".")
    return class_path(cls).replace(":", ".")


def register_pytree(cls: type) -> None:
    """Register a ``Data``/``HeteroData`` subclass (and its batch class) as a pytree node.

    Idempotent. The serialized type name is the class's import path (for
    batch classes, ``graph_adapter.batch_of.<path of the batched class>``).
    """
    classes = [cls]
    if not issubclass(cls, Batch):
        classes.append(type(Batch(_base_cls=cls)))
    for c in classes:
        if c in _REGISTERED:
            continue
        pytree.register_pytree_node(
            c,
            _flatten,
            _unflatten,
            serialized_type_name=_serialized_name(c),
            to_dumpable_context=lambda spec: spec.to_json(),
            from_dumpable_context=Spec.from_json,
            flatten_with_keys_fn=_flatten_with_keys,
        )
        _REGISTERED.add(c)


for _cls in (Data, HeteroData):
    register_pytree(_cls)
