"""``ipu_wrap(model)``: any PyG GNN, unmodified, behind a fixed-key dict.

The wrapped module's ``forward(flat)`` takes a padded flat dict (the
``FixedSizeLoader`` format, ``docs/dev/FORMAT.md``), with or without a leading
micro-batch dim of size 1, rebuilds the PyG batch inside forward (traceable:
``torch.compile(fullgraph=True)``, ``torch.export``), calls the model with the
static sizes of :mod:`graph_adapter.nn.static` active, and returns a dict with
fixed keys:

* a tensor output -> ``"output"``;
* a tuple/list -> ``"output/0"``, ``"output/1"``, ... (nested: ``"output/0/1"``);
* a dict -> ``"output/<key>"``;
* a ``Data``/``Batch`` -> ``"output/<key>"`` with :func:`graph_adapter.format.spec.key_of`
  naming (``"output/x"``, hetero ``"output/paper/x"``);
* ``"loss"``: ``loss_fn(output, batch)`` when a ``loss_fn`` is given.

``graph_adapter.unpad(outputs, flat)`` keeps the rows of real nodes/graphs.
"""
from __future__ import annotations

import inspect
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

import torch
from torch import Tensor, nn
from torch_geometric.data.data import BaseData
from torch_geometric.data import Data, HeteroData

from . import stand_ins, static
from .norm import eager_ok, mask_norms, unmask_norms
from ..format import (BATCH, GRAPH_MASK, HOP_KEYS, LOSS_KEY, NODE_MASK, OUTPUT_KEY, SEP,
                      hop_budgets,
                      has_micro_batch_dim, is_hetero, key_of, set_key, set_masks,
                      strip_micro_batch)
# (the outputs' unpadding lives with the batches' in the format stage; named here too)
from ..format import AmbiguousLevelError, unpad
from ._inputs import (InputRecord, MissingInputError, UnboundInputError, check_binding,
                      check_format, choose_mode, input_signature, missing_required,
                      require_graph_mask)
from ..format import class_path, resolve_class, infer_spec, unflatten
from ..format.pyg import global_store, store_mapping
from ..contract import Signature, SpecError
from ..format import InputValueError
from ..format import DIAGNOSED, inside_poptorch, named_error, raise_for_values
from ._trim import TrimError, TrimPlan

stand_ins.register_all()  # the static stand-ins, before any wrapper installs them

__all__ = ["ipu_wrap", "IPUWrapped", "unwrap", "unpad", "strip_micro_batch", "has_micro_batch_dim",
           "MissingInputError", "UnboundInputError", "AmbiguousLevelError", "InputValueError",
           "TrimError", "OUTPUT_KEY", "LOSS_KEY"]

class StaticData(Data):
    """``Data`` whose ``num_nodes`` is the static ``node_mask`` length.

    PyG's ``Data.num_nodes`` calls ``super().num_nodes``, which Dynamo cannot
    trace; the batch rebuilt inside the wrapped forward is a ``Batch`` of this
    class (still an instance of ``Data`` and ``Batch``), so ``data.num_nodes``
    works under ``torch.compile(fullgraph=True)`` and strict export.
    """

    @property
    def num_nodes(self) -> Optional[int]:
        mask = store_mapping(global_store(self)).get(NODE_MASK)
        if mask is not None:
            return mask.size(0)
        return Data.num_nodes.fget(self)

    @num_nodes.setter
    def num_nodes(self, num_nodes: Optional[int]) -> None:
        global_store(self).num_nodes = num_nodes


# Resolve the batch class once, eagerly: compiled code may only read the cache.
resolve_class(class_path(StaticData), True)


#: entries of each eager cache of an IPUWrapped (cleared when full: a loader
#: has a handful of signatures, a stream of new shapes must not grow memory).
_CACHE_SIZE = 64
#: ``_eager_spec(key=...)`` not given
_NO_KEY = object()


def _signature_key(flat: Mapping[str, Any]) -> Optional[Tuple]:
    """The key order and the contract's :class:`~graph_adapter.contract.Signature`
    (devices included): all that the eager checks and :func:`infer_spec` read;
    ``None`` when a value is not a tensor or a shape is symbolic (unhashable), so
    the caller takes the uncached path."""
    try:
        key = (tuple(flat), Signature.of(flat, devices=True))
        hash(key)
    except (SpecError, TypeError):
        return None
    return key


def _first_param(module: nn.Module) -> Optional[Tensor]:
    """``next(module.parameters(), None)`` without its generators (~5 us a call):
    the first parameter in the same pre-order walk (a class that overrides
    ``parameters`` or ``named_parameters`` gets its own)."""
    cls = type(module)
    if cls.parameters is not nn.Module.parameters or \
            cls.named_parameters is not nn.Module.named_parameters:
        return next(module.parameters(), None)
    return _first_param_walk(module)


def _first_param_walk(module: nn.Module) -> Optional[Tensor]:
    for p in module.parameters(recurse=False):
        return p
    for m in module.children():
        p = _first_param_walk(m)
        if p is not None:
            return p
    return None


def _flatten_output(out: Any, prefix: str, res: Dict[str, Tensor]) -> None:
    if isinstance(out, Tensor):
        res[prefix] = out
    elif isinstance(out, BaseData):
        if isinstance(out, HeteroData):
            stores = [((nt,), out[nt]) for nt in sorted(out.node_types)]
            stores += [(tuple(et), out[et]) for et in sorted(out.edge_types)]
            stores.append(((), global_store(out)))
        else:
            stores = [((), global_store(out))]
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


def _with_node_sets(frame: Dict[str, Any], flat: Mapping[str, Tensor]) -> Dict[str, Any]:
    """``frame`` knowing the node and edge sets of their own of a padded homogeneous
    batch (PyG's ``PairData``: ``x_s_node_mask``, ``x_s_batch``...): their masks among
    the masks of their level (a BatchNorm on ``x_s`` rows gets ``x_s_node_mask``; the
    budget keeps every set's count distinct) and their batch vectors among the batch
    vectors (``global_mean_pool(h, data.x_s_batch)`` has ``G`` slots). Keys only: it traces."""
    sets = set_masks(flat)
    if not sets["node"] and not sets["edge"]:
        return frame
    masks = {lv: list(ms) for lv, ms in frame["masks"].items()}
    for lv in ("node", "edge"):
        masks[lv] += [flat[k] for k, _ in sets[lv]]
    frame["masks"] = masks
    frame["batches"] = list(frame["batches"]) + [flat[set_key(name, BATCH)]
                                                 for _, name in sets["node"]]
    # the static self-loop ops of a layer on one set (GCNConv(x_s, edge_index_s) passes
    # num_nodes = N_s) run over that set's nodes
    frame["node_sets"] = {flat[k].size(-1): flat[k] for k, _ in sets["node"]}
    # ... and so do those given only the index (GATConv's remove_self_loops(edge_index)):
    # an edge set's index key and its node set share their last "_" token (edge_index_s,
    # x_s), as format.node_sets names them; a tag two sets share is left to PyG
    by_tag: Dict[str, List[str]] = {}
    for k, name in sets["node"]:
        by_tag.setdefault(_tag(name), []).append(k)
    frame["edge_sets"] = [(flat[index], flat[by_tag[_tag(index)][0]])
                          for _, index in sets["edge"]
                          if _tag(index) and len(by_tag.get(_tag(index), ())) == 1]
    return frame


def _hop_list(flat: Mapping[str, Tensor], key: str) -> List[int]:
    """The per-hop block sizes a per-hop key's shape holds (``contract.hop_budgets``):
    static ints under a trace, as PyG's ``trim_to_layer`` needs them."""
    return hop_budgets(flat[key].shape)


def _with_hop_lists(batch: Any, flat: Mapping[str, Tensor]) -> Any:
    """``batch`` with ``num_sampled_nodes`` / ``num_sampled_edges`` as PyG has them (lists
    of ints: the per-hop budgets) where ``flat`` is laid out in per-hop blocks
    (:mod:`graph_adapter.sampling.hops`); item assignment, which traces."""
    if batch is None:
        return batch
    for key in HOP_KEYS:  # (membership first: this runs every step, per-hop batches are rare)
        if key in flat and not is_hetero(flat):
            batch[key] = _hop_list(flat, key)
    return batch


def _tag(name: str) -> str:
    return name.rsplit("_", 1)[1] if "_" in name else ""


class IPUWrapped(nn.Module):
    """The module :func:`ipu_wrap` returns (``.model`` is the wrapped model)."""

    #: attributes no forward reads (counters of eager calls): left out of what a
    #: precompiled entry's key describes (tuning/precompile.py)
    untraced_attributes = ("trim_stats",)

    def __setstate__(self, state: Dict[str, Any]) -> None:
        # the masked norms pickle as their plain classes (so that the user's model
        # saved alone loads without graph_adapter): a wrapper unpickled (ddp_spawn,
        # torch.load, copy.deepcopy) masks its model's norms again
        super().__setstate__(state)
        if getattr(self, "mask_norm", False):
            mask_norms(self.model)

    def __init__(self, model: nn.Module, loss_fn: Optional[Callable] = None,
                 inputs: str = "auto", bind: Optional[Mapping[str, str]] = None,
                 mask_norm: bool = True, extra_kwargs: Optional[Mapping[str, Any]] = None,
                 check_inputs: Union[bool, str] = True, trim: bool = False):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.bind = dict(bind or {})
        self.extra_kwargs = dict(extra_kwargs or {})
        self.mask_norm = bool(mask_norm)
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
        if inputs != "data" and self._sig is None:
            if inputs == "tensors":
                raise TypeError("ipu_wrap(inputs='tensors') needs a model whose forward has a signature")
            inputs = "data"
        # What the user asked for; never changed, so a compiled forward's guards
        # stay valid after an eager call decides "auto" (see the inputs property).
        self._requested_inputs = inputs
        self._chosen_inputs: Optional[str] = None
        self._params: List[inspect.Parameter] = []
        self._takes_kwargs = False
        if self._sig is not None:
            self._params = [p for p in self._sig.parameters.values()
                            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
            self._takes_kwargs = any(p.kind == p.VAR_KEYWORD for p in self._sig.parameters.values())
            unknown = sorted(set(self.bind) - {p.name for p in self._params})
            if unknown and not self._takes_kwargs:
                raise ValueError(f"ipu_wrap(bind=...) names {unknown}, which are not parameters of "
                                 f"{type(model).__qualname__}.forward {list(self._sig.parameters)}")
        if check_inputs not in (True, False, "values"):
            raise ValueError(f"ipu_wrap(check_inputs={check_inputs!r}); pass True (checks once per "
                             f"input signature), False, or 'values' (also every value, every call)")
        self.check_inputs = check_inputs
        self._record = InputRecord()  # first call's signature, bound keys per mode, row notes
        self._checked_keys: set = set()
        # Eager hot path (see _eager_spec): the inferred spec per input
        # signature, and the (signature, device, mode) triples whose checks passed.
        self._specs: Dict[Tuple, Any] = {}
        self._checked: set = set()
        if not isinstance(trim, bool):
            raise TypeError(f"ipu_wrap(trim={trim!r}); pass True (eager calls run on the real "
                            f"rows) or False (the padded path, the default)")
        #: eager calls run the model on the real rows (graph_adapter/nn/_trim.py)
        self.trim = trim
        # per input signature: how to trim it and the padded path's outputs
        self._trim_plans: Dict[Tuple, TrimPlan] = {}
        #: with ``trim=True``, eager calls that ran trimmed and that took the padded
        #: path (a signature's first call, or a dict that cannot be trimmed)
        self.trim_stats: Dict[str, int] = {"trimmed": 0, "padded": 0}

    def reset_inputs(self) -> None:
        """Forget the first batch's signature (and the binding checks) so the next batch sets them anew."""
        self._record = InputRecord()
        self._checked_keys = set()
        self._checked = set()

    # ------------------------------------------------------------------
    def _mode(self, keys: Tuple[str, ...]) -> str:
        """The input mode for these keys: fixed, or chosen by ``inputs="auto"``.

        Pure over keys, so it traces; the choice is kept (and a warning given
        when it could not tell) only in eager mode.
        """
        if self._requested_inputs != "auto":
            return self._requested_inputs
        mode, why = choose_mode(self._params, keys, self.bind, self.extra_kwargs)
        if not torch.compiler.is_compiling() and self._chosen_inputs is None:
            if why is not None:
                warnings.warn(
                    f"ipu_wrap(inputs='auto') chose inputs={mode!r} for "
                    f"{type(self.model).__qualname__}.forward: {why}. Pass inputs='data' (forward "
                    f"gets the batch object) or inputs='tensors' (parameters bound to keys by "
                    f"name) to choose yourself and silence this.", UserWarning, stacklevel=4)
            self._chosen_inputs = mode
        return mode

    @property
    def inputs(self) -> str:
        """``"data"`` or ``"tensors"``; ``"auto"`` until the first eager call decides (see choose_mode)."""
        return self._chosen_inputs or self._requested_inputs

    def _check(self, flat: Mapping[str, Tensor], mode: str) -> None:
        """The eager checks of the input dict (module :mod:`graph_adapter.nn._inputs`)."""
        sig = input_signature(flat)
        param = _first_param(self.model)
        check_format(flat, sig, None if param is None else param.device)
        self._record.check(self.model, flat, sig, mode, self.training, self._params, self.bind,
                           self.extra_kwargs, _signature_key(flat))
        keys = frozenset(flat)
        if mode == "tensors" and keys not in self._checked_keys:
            check_binding(self.model, self._params, keys, self.bind, self.extra_kwargs,
                          self._takes_kwargs)
            self._checked_keys.add(keys)

    # ------------------------------------------------------------------
    def _kwargs(self, flat: Mapping[str, Tensor]) -> Dict[str, Any]:
        kw: Dict[str, Any] = {}
        for p in self._params:
            key = self.bind.get(p.name, p.name)
            if p.name in self.extra_kwargs:
                kw[p.name] = self.extra_kwargs[p.name]
            elif key in flat:
                kw[p.name] = _hop_list(flat, key) if key in HOP_KEYS else flat[key]
            elif p.default is inspect.Parameter.empty:
                raise missing_required(self.model, p, key, flat)
        return kw

    def _eager_spec(self, flat: Mapping[str, Tensor], mode: str, key: Any = _NO_KEY) -> Any:
        """The eager path's checks and spec, each done once per input signature.

        Every check of :meth:`_check` and :func:`infer_spec` reads only keys,
        shapes, dtypes and devices (no values: ``_wrap_inputs``' docstring),
        so a signature ``((key, shape, dtype, device), ...)`` that passed once
        passes again (against the same first batch, model device and mode:
        ``reset_inputs`` clears the record) and infers the same spec. A new
        signature (a key, a shape, a dtype or a device that changed) runs
        everything again. A dict that cannot be keyed (a value that is not a
        tensor, a symbolic shape) takes the uncached path, which names the
        problem. ``key``: the signature when the caller has it already.
        """
        if key is _NO_KEY:
            key = _signature_key(flat)
        if self.check_inputs:
            param = _first_param(self.model)
            checked = None if key is None else (key, None if param is None else param.device, mode,
                                                self.training)  # keys bound per training mode
            if checked is None or checked not in self._checked:
                self._check(flat, mode)
                if checked is not None:
                    if len(self._checked) >= _CACHE_SIZE:
                        self._checked.clear()
                    self._checked.add(checked)
        spec = None if key is None else self._specs.get(key)
        if spec is None:
            spec = infer_spec(flat, data_cls=None if is_hetero(flat) else StaticData)
            if key is not None:
                if len(self._specs) >= _CACHE_SIZE:
                    self._specs.clear()
                self._specs[key] = spec
        return spec

    def _call(self, flat: Mapping[str, Tensor], spec: Any, mode: str,
              padded: bool = True) -> Tuple[Any, Any]:
        """``(output, loss or None)``: the batch rebuilt, the model and the loss called.

        ``padded=False`` (a trimmed dict, real rows only): no static-size frame,
        so the model runs as eager PyG does.
        """
        if not padded:
            # the batch object only where something reads it (eager: nothing traced)
            batch = (_with_hop_lists(unflatten(flat, spec, validate=False), flat)
                     if mode == "data" or self.loss_fn is not None else None)
            if mode == "data":
                out = self.model(batch, **self.extra_kwargs)
            else:
                out = self.model(**self._kwargs(flat))
            return out, None if self.loss_fn is None else self.loss_fn(out, batch)
        batch = unflatten(flat, spec, validate=False)
        if HOP_KEYS[0] in flat:  # (tested here: a call less a step on every other batch)
            batch = _with_hop_lists(batch, flat)
        frame = _with_node_sets(static.make_frame(flat), flat)
        static.push_frame(frame)
        try:
            if mode == "data":
                out = self.model(batch, **self.extra_kwargs)
            else:
                out = self.model(**self._kwargs(flat))
            loss = None if self.loss_fn is None else self.loss_fn(out, batch)
        finally:
            static.pop_frame()
        return out, loss

    def forward(self, flat: Mapping[str, Tensor]) -> Dict[str, Tensor]:
        eager = not torch.compiler.is_compiling()
        if self.check_inputs and eager:
            require_graph_mask(flat)
        flat = strip_micro_batch(flat)
        mode = self._mode(tuple(flat))
        plan = counts = None
        if not eager:  # traced: pure Python over keys and static shapes, no state
            spec = infer_spec(flat, data_cls=None if is_hetero(flat) else StaticData)
            out, loss = self._call(flat, spec, mode)
        else:
            key = _signature_key(flat)
            spec = self._eager_spec(flat, mode, key)
            if self.check_inputs == "values":  # opt-in: reads values, every call
                raise_for_values(flat)
            if self.trim:  # opt-in: the real rows only (graph_adapter/nn/_trim.py)
                plan, counts = self._trim_plan(flat, spec, key)
            try:
                if counts is not None:
                    out, loss = self._call(plan.trim(flat, counts), plan.spec, mode, padded=False)
                else:
                    out, loss = self._call(flat, spec, mode)
            except DIAGNOSED as exc:
                # Only after a failure (no cost on the happy path): name the bad
                # value (an index out of range...) that a bare torch error does not.
                err = self._record.named_error(key, exc) or named_error(flat, exc)
                if err is None:
                    raise
                raise err from exc
        res: Dict[str, Tensor] = {}
        _flatten_output(out, OUTPUT_KEY, res)
        if loss is not None:
            if not isinstance(loss, Tensor) or loss.dim() != 0:
                raise TypeError(f"loss_fn must return a scalar tensor, got "
                                f"{type(loss).__qualname__}{tuple(getattr(loss, 'shape', ()))}")
            res[LOSS_KEY] = loss
        if plan is not None:
            if counts is not None:
                self.trim_stats["trimmed"] += 1
                return plan.pad(res, counts)
            self.trim_stats["padded"] += 1
            if plan.outputs is None and plan.why_not is None:
                plan.record(res)  # the first call of a signature: the levels to pad back to
        return res

    def _trim_plan(self, flat: Mapping[str, Tensor], spec: Any,
                   key: Optional[Tuple]) -> Tuple[Optional[TrimPlan], Optional[List[int]]]:
        """``(plan, real counts)`` of an eager call with ``trim=True``; counts
        ``None``: this call takes the padded path (the signature's first call,
        which records its outputs; a dict that is not to be trimmed; inside a
        poptorch model or its emulation, a trace, a fake tensor)."""
        gm = flat.get(GRAPH_MASK)
        if key is None or gm is None or inside_poptorch() or not eager_ok(gm):
            return None, None
        key = (key, self.training)  # train/eval may return other outputs
        plan = self._trim_plans.get(key)
        if plan is None:
            if len(self._trim_plans) >= _CACHE_SIZE:
                self._trim_plans.clear()
            self._trim_plans[key] = plan = TrimPlan.of(flat, spec)
            return plan, None
        if plan.why_not is not None or plan.outputs is None:
            return plan, None
        return plan, plan.counts(flat)


# Over 80 lines for its docstring: the user-facing reference of every argument.
def ipu_wrap(model: nn.Module, *, loss_fn: Optional[Callable] = None, inputs: str = "auto",
             bind: Optional[Mapping[str, str]] = None, mask_norm: bool = True,
             extra_kwargs: Optional[Mapping[str, Any]] = None,
             check_inputs: Union[bool, str] = True, trim: bool = False) -> IPUWrapped:
    """Wrap a PyG model so that it takes a padded flat dict and returns a fixed-key dict.

    Args:
        model: any ``nn.Module``: ``forward(data)`` (gets the rebuilt batch, with
            ``batch.node_mask``/``edge_mask``/``graph_mask``) or
            ``forward(x, edge_index, batch=None, ...)`` (parameters bound to
            flat keys by name).
        loss_fn: optional ``fn(output, batch) -> scalar``, called inside the
            wrapped forward; its value is returned under ``"loss"``. See
            :mod:`graph_adapter.nn.losses` for masked helpers.
        inputs: ``"auto"``: named tensors when every required parameter of
            forward is a key of the flat dict (``forward(x, edge_index,
            batch)``, ``forward(z, pos, batch)``), the batch object when forward
            takes one parameter that is not a key (``forward(data)``); decided
            at the first call, with a warning naming the choice when it cannot
            tell. ``"data"`` or ``"tensors"`` choose yourself.
        bind: ``{parameter: flat key}`` overrides for named-tensor models.
        mask_norm: swap the model's ``BatchNorm1d`` layers (in place) for
            masked ones (:mod:`graph_adapter.nn.norm`). State-dict keys are kept;
            the stand-ins pickle as their plain torch / PyG classes, so
            ``torch.save(model)`` loads where graph_adapter is not installed;
            :func:`unwrap` puts the plain classes back.
        extra_kwargs: constant keyword arguments passed to every call (also
            how to leave a defaulted parameter unbound on purpose:
            ``extra_kwargs={"edge_attr": None}``).
        check_inputs: check each input dict in eager mode (never while
            compiling): see ``docs/wrapping.md``, "What the wrapped model checks".
            The checks read keys, shapes, dtypes and devices only, so they run
            once per new signature; a dict like one that passed is not re-read.
            Values are not read on the happy path: when the model (or the
            loss) raises an ``IndexError``/``RuntimeError``/``ValueError`` in
            eager mode, the dict's values are checked and a bad one (an index
            out of range, ``batch`` outside its slots) is raised as
            :class:`InputValueError` chained from the original; whatever the
            check does not explain is re-raised unchanged. Some bad values of
            a hand-made dict raise nothing and give a wrong result (an
            unsorted ``batch``, an edge touching a padding node or joining two
            graphs, masks contradicting ``batch``, a negative index read with
            ``x[idx]``: ``docs/dev/FORMAT.md``); keeping to the format is the
            caller's part (``FixedSizeLoader`` does), and
            ``check_inputs="values"`` checks every value rule before each
            eager call (it reads values: about 0.13 ms per call for a batch
            of 1k nodes, 3% of an inference call, so it is for debugging a
            hand-made dict; inside a poptorch model, whose tensors hold no
            values, it warns and checks nothing).
        trim: eager calls run the model on the real rows only (opt-in; see
            ``docs/wrapping.md``, "Trimmed eager calls"). The padded dict is
            cut to its real prefix (nodes ``[:n]``, edges ``[:e]``, graph
            slots ``[:g]``, ``ptr`` ``[:g + 1]``; per type in hetero dicts;
            the ``layout="ell"/"hyb"`` tables left out), the model runs as
            eager PyG with no static-size substitution, and every output is
            padded back with zero rows to the padded path's shape (same keys,
            shapes, dtypes; real rows, loss, gradients and BatchNorm running
            statistics equal to the padded path's). The first call of each
            input signature (and train/eval mode) runs the padded path and
            records each output's level from its row count; a dict whose
            masks are not prefixes, with fewer than two real rows at a level
            or whose last real graph has no node (of some type) takes the
            padded path too. It reads the masks (one host read a call). While
            compiling or tracing, inside poptorch or its emulation and on fake
            tensors it changes nothing. The padded path (``trim=False``, the
            default) stays the reference: static sizes and their errors, the
            padding-invariance tests and ``graph_adapter.check`` run it.
            Dropout draws other random numbers on fewer rows.

    Returns:
        An :class:`IPUWrapped` module whose ``forward(flat)`` returns a dict of fixed
        keys: ``"output"`` (a tuple, dict or ``Data`` output: ``"output/0"``,
        ``"output/<key>"``; padding rows included: :func:`unpad` drops them) and
        ``"loss"`` with a ``loss_fn``. ``.model`` is ``model`` itself.

    Raises:
        ValueError: an ``inputs`` other than ``"auto"``, ``"data"`` or ``"tensors"``
            (at wrap time); a leading micro-batch dim larger than 1 (at call time).
        MissingInputError: (this and the rest: at call time, in eager mode) a
            required parameter has no key.
        UnboundInputError: a defaulted parameter has no key while a similar
            key binds to nothing (a misspelt ``edge_atr``).
        SpecError: the input dict does not fit (``MissingKeyError``,
            ``DtypeMismatchError``, ``ShapeMismatchError``, ``DeviceMismatchError``,
            ``UnsupportedAttributeError``), naming the key.
        InputValueError: a bad value (a ``SpecError`` and ``ValueError``;
            ``.key``, ``.position``, ``.value``), see ``check_inputs``.
        graph_adapter.nn.wrap.TrimError: with ``trim=True``, a trimmed output
            whose rows are not the real count of the level it had on the
            padded path (a model that sizes it from data): pass ``trim=False``.

    Example:
        ```python
        from torch_geometric.datasets import FakeDataset
        from torch_geometric.nn import GCN

        from graph_adapter import Budget, FixedSizeLoader, ipu_wrap, masked_loss

        graphs = FakeDataset(num_graphs=16, avg_num_nodes=10, num_channels=8,
                             num_classes=3, task="node")
        model = ipu_wrap(GCN(8, 16, 2, out_channels=3),  # forward(x, edge_index)
                         loss_fn=masked_loss("cross_entropy", level="node"))
        batch = next(iter(FixedSizeLoader(graphs, Budget.tight(graphs, 4))))
        out = model(batch)  # {"output": [nodes, 3], "loss": over the real nodes}
        out["loss"].backward()
        ```
    """
    return IPUWrapped(model, loss_fn=loss_fn, inputs=inputs, bind=bind, mask_norm=mask_norm,
                      extra_kwargs=extra_kwargs, check_inputs=check_inputs, trim=trim)


def unwrap(model: nn.Module) -> nn.Module:
    """The user's model as it was before :func:`ipu_wrap`: its norms' stand-ins (the
    masked ``BatchNorm1d``, PyG's graph norms taking the static batch size) back to
    their plain classes, in place; parameters, buffers, hooks and ``state_dict``
    keys are untouched. Given the wrapper, unwraps its ``.model`` and returns it.

    Not needed to save the model: the stand-ins pickle as their plain classes
    already. Wrapping the model again masks them again.
    """
    inner = model.model if isinstance(model, IPUWrapped) else model
    unmask_norms(inner)
    return inner
