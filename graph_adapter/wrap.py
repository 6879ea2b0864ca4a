"""``ipu_wrap(model)``: any PyG GNN, unmodified, behind a fixed-key dict.

The wrapped module's ``forward(flat)`` takes a padded flat dict (the
``FixedSizeLoader`` format, ``docs/dev/FORMAT.md``), with or without a leading
micro-batch dim of size 1, rebuilds the PyG batch inside forward (traceable:
``torch.compile(fullgraph=True)``, ``torch.export``), calls the model with the
static sizes of :mod:`graph_adapter.static` active, and returns a dict with
fixed keys:

* a tensor output -> ``"output"``;
* a tuple/list -> ``"output/0"``, ``"output/1"``, ... (nested: ``"output/0/1"``);
* a dict -> ``"output/<key>"``;
* a ``Data``/``Batch`` -> ``"output/<key>"`` with :func:`graph_adapter.spec.key_of`
  naming (``"output/x"``, hetero ``"output/paper/x"``);
* ``"loss"``: ``loss_fn(output, batch)`` when a ``loss_fn`` is given.

``graph_adapter.unpad(outputs, flat)`` keeps the rows of real nodes/graphs.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List, Mapping, Optional, Union

from torch import Tensor, nn
from torch_geometric.data.data import BaseData
from torch_geometric.data import Data, HeteroData

from . import static
from .norm import mask_norms
from .format import (LOSS_KEY, NODE_MASK, OUTPUT_KEY, SEP, has_micro_batch_dim, is_hetero,
                     key_of, mask_of_rows, masks_by_level, micro_batch, num_micro_batches,
                     strip_micro_batch)
from .spec import class_path, resolve_class, infer_spec, unflatten

__all__ = ["ipu_wrap", "IPUWrapped", "unpad", "strip_micro_batch", "has_micro_batch_dim",
           "MissingInputError", "OUTPUT_KEY", "LOSS_KEY"]

class StaticData(Data):
    """``Data`` whose ``num_nodes`` is the static ``node_mask`` length.

    PyG's ``Data.num_nodes`` calls ``super().num_nodes``, which Dynamo cannot
    trace; the batch rebuilt inside the wrapped forward is a ``Batch`` of this
    class (still an instance of ``Data`` and ``Batch``), so ``data.num_nodes``
    works under ``torch.compile(fullgraph=True)`` and strict export.
    """

    @property
    def num_nodes(self) -> Optional[int]:
        mask = self._store._mapping.get(NODE_MASK)
        if mask is not None:
            return mask.size(0)
        return Data.num_nodes.fget(self)

    @num_nodes.setter
    def num_nodes(self, num_nodes: Optional[int]) -> None:
        self._store.num_nodes = num_nodes


# Resolve the batch class once, eagerly: compiled code may only read the cache.
resolve_class(class_path(StaticData), True)


class MissingInputError(TypeError):
    """The model's forward needs a parameter that no key of the flat dict provides."""


def _flatten_output(out: Any, prefix: str, res: Dict[str, Tensor]) -> None:
    if isinstance(out, Tensor):
        res[prefix] = out
    elif isinstance(out, BaseData):
        if isinstance(out, HeteroData):
            stores = [((nt,), out[nt]) for nt in sorted(out.node_types)]
            stores += [(tuple(et), out[et]) for et in sorted(out.edge_types)]
            stores.append(((), out._global_store))
        else:
            stores = [((), out._store)]
        for skey, store in stores:
            for attr in sorted(store.keys()):
                v = store[attr]
                if isinstance(v, Tensor):
                    res[prefix + SEP + key_of(skey, attr)] = v
    elif isinstance(out, (tuple, list)):
        for i, v in enumerate(out):
            _flatten_output(v, f"{prefix}{SEP}{i}", res)
    elif isinstance(out, Mapping):
        for k, v in out.items():
            _flatten_output(v, f"{prefix}{SEP}{k}", res)
    elif out is None:
        pass
    else:
        raise TypeError(
            f"ipu_wrap: the model returned a {type(out).__qualname__} at {prefix!r}; only tensors, "
            f"tuples/lists/dicts of them and Data/Batch objects can be returned through the "
            f"fixed-key output dict. Return a tensor (e.g. torch.as_tensor) instead."
        )


class IPUWrapped(nn.Module):
    """The module :func:`ipu_wrap` returns (``.model`` is the wrapped model)."""

    def __init__(self, model: nn.Module, loss_fn: Optional[Callable] = None,
                 inputs: str = "auto", bind: Optional[Mapping[str, str]] = None,
                 mask_norm: bool = True, extra_kwargs: Optional[Mapping[str, Any]] = None):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.bind = dict(bind or {})
        self.extra_kwargs = dict(extra_kwargs or {})
        if mask_norm:
            mask_norms(model)
        static.install(model, *(m for m in [loss_fn] if m is not None and not isinstance(m, nn.Module)))
        if isinstance(loss_fn, nn.Module):
            static.install(loss_fn)
        fwd = model.forward
        try:
            self._sig = inspect.signature(fwd)
        except (TypeError, ValueError):  # builtins
            self._sig = None
        if inputs not in ("auto", "data", "tensors"):
            raise ValueError(f"inputs={inputs!r}; choose 'auto', 'data' or 'tensors'")
        if inputs == "auto":
            names = set(self._sig.parameters) if self._sig is not None else set()
            inputs = "tensors" if names & {"x", "edge_index", "x_dict", "edge_index_dict"} or self.bind else "data"
        self.inputs = inputs
        self._params: List[inspect.Parameter] = []
        if inputs == "tensors":
            if self._sig is None:
                raise TypeError("ipu_wrap(inputs='tensors') needs a model whose forward has a signature")
            self._params = [p for p in self._sig.parameters.values()
                            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    # ------------------------------------------------------------------
    def _kwargs(self, flat: Mapping[str, Tensor]) -> Dict[str, Any]:
        kw: Dict[str, Any] = {}
        for p in self._params:
            key = self.bind.get(p.name, p.name)
            if p.name in self.extra_kwargs:
                kw[p.name] = self.extra_kwargs[p.name]
            elif key in flat:
                kw[p.name] = flat[key]
            elif p.default is inspect.Parameter.empty:
                raise MissingInputError(
                    f"{type(self.model).__qualname__}.forward needs parameter {p.name!r}, but the "
                    f"flat dict has no key {key!r} (keys: {sorted(flat)}). Map it with "
                    f"ipu_wrap(model, bind={{{p.name!r}: '<key>'}}) or give it a default."
                )
        return kw

    def forward(self, flat: Mapping[str, Tensor]) -> Dict[str, Tensor]:
        flat = strip_micro_batch(flat)
        hetero = is_hetero(flat)
        batch = unflatten(flat, infer_spec(flat, data_cls=None if hetero else StaticData),
                          validate=False)
        frame = static.make_frame(flat)
        static.push_frame(frame)
        try:
            if self.inputs == "data":
                out = self.model(batch, **self.extra_kwargs)
            else:
                out = self.model(**self._kwargs(flat))
            loss = None if self.loss_fn is None else self.loss_fn(out, batch)
        finally:
            static.pop_frame()
        res: Dict[str, Tensor] = {}
        _flatten_output(out, OUTPUT_KEY, res)
        if loss is not None:
            if not isinstance(loss, Tensor) or loss.dim() != 0:
                raise TypeError(f"loss_fn must return a scalar tensor, got "
                                f"{type(loss).__qualname__}{tuple(getattr(loss, 'shape', ()))}")
            res[LOSS_KEY] = loss
        return res


def ipu_wrap(model: nn.Module, *, loss_fn: Optional[Callable] = None, inputs: str = "auto",
             bind: Optional[Mapping[str, str]] = None, mask_norm: bool = True,
             extra_kwargs: Optional[Mapping[str, Any]] = None) -> IPUWrapped:
    """Wrap a PyG model so that it takes a padded flat dict and returns a fixed-key dict.

    Args:
        model: any ``nn.Module``: ``forward(data)`` (gets the rebuilt batch, with
            ``batch.node_mask``/``edge_mask``/``graph_mask``) or
            ``forward(x, edge_index, batch=None, ...)`` (parameters bound to
            flat keys by name).
        loss_fn: optional ``fn(output, batch) -> scalar``, called inside the
            wrapped forward; its value is returned under ``"loss"``. See
            :mod:`graph_adapter.losses` for masked helpers.
        inputs: ``"auto"`` (named tensors if forward has ``x``/``edge_index``
            parameters, else the batch), ``"data"`` or ``"tensors"``.
        bind: ``{parameter: flat key}`` overrides for named-tensor models.
        mask_norm: swap the model's ``BatchNorm1d`` layers (in place) for
            masked ones (:mod:`graph_adapter.norm`). State-dict keys are kept.
        extra_kwargs: constant keyword arguments passed to every call.

    Raises (at call time):
        MissingInputError: a required parameter has no key.
        ValueError: a leading micro-batch dim larger than 1.
    """
    return IPUWrapped(model, loss_fn=loss_fn, inputs=inputs, bind=bind, mask_norm=mask_norm,
                      extra_kwargs=extra_kwargs)


# --------------------------------------------------------------------------
# unpad (host side)
# --------------------------------------------------------------------------
def _select(value: Tensor, masks: Mapping[str, List[Tensor]]) -> Tensor:
    if value.dim() == 0:
        return value
    m, _ = mask_of_rows(value.size(0), masks)
    return value if m is None else value[m.bool()]


def _has_rows(rows: int, masks: Mapping[str, List[Tensor]]) -> bool:
    return mask_of_rows(rows, masks)[0] is not None


def unpad(outputs: Mapping[str, Tensor], flat: Mapping[str, Tensor]) -> Union[Dict[str, Tensor], List[Dict[str, Tensor]]]:
    """Keep only the rows of real graphs / nodes / edges of each output.

    A value whose first dim equals the node count ``N`` keeps the rows where
    ``node_mask``; ``G`` (graph slots) -> ``graph_mask``; ``E`` ->
    ``edge_mask``; other values (e.g. the scalar loss) are returned as they
    are.  A size shared by two levels is decided as everywhere else
    (:func:`graph_adapter.format.mask_of_rows`: node, then graph, then edge);
    choose budgets where ``N``, ``E`` and ``G`` differ.

    When ``flat`` has a leading micro-batch dim ``F``, the result is a list of
    ``F`` dicts, one per micro-batch; outputs may then be ``[F, R, ...]``,
    ``[F * R, ...]`` (stacked by poptorch) or, for ``F == 1``, ``[R, ...]``.
    """
    if not has_micro_batch_dim(flat):
        masks = masks_by_level(flat)
        return {k: _select(v, masks) for k, v in outputs.items()}
    f = num_micro_batches(flat)
    result = []
    for i in range(f):
        masks = masks_by_level(micro_batch(flat, i))
        result.append({k: _select(_micro(v, i, f, masks), masks) for k, v in outputs.items()})
    return result


def _micro(v: Tensor, i: int, f: int, masks: Mapping[str, List[Tensor]]) -> Tensor:
    """Micro-batch ``i`` of one output (see :func:`unpad` for the layouts)."""
    if v.dim() == 0:
        return v
    if v.dim() >= 2 and v.size(0) == f and _has_rows(v.size(1), masks):
        return v[i]
    if v.size(0) % f == 0 and _has_rows(v.size(0) // f, masks) and f > 1:
        r = v.size(0) // f
        return v[i * r:(i + 1) * r]
    if v.size(0) == f:
        return v[i]
    return v
