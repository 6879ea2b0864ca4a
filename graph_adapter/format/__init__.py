"""The format stage: PyG objects <-> padded flat dicts, by the contract's rules.

The rules themselves (reserved keys, key naming, levels, padding, the
micro-batch dim, the signature, the errors) live in :mod:`graph_adapter.contract`
(``docs/dev/FORMAT.md`` is their prose version); this stage re-exports their
names and does the torch and PyG side. One module a job:

* :mod:`~graph_adapter.format.keys`: the contract's key names, and the helpers
  that read tensors (masks by level, devices, the loss);
* :mod:`~graph_adapter.format.micro`: the leading micro-batch dim ``[F, ...]``
  (split, stack, strip);
* :mod:`~graph_adapter.format.spec`: :class:`Spec`, :func:`flatten`,
  :func:`unflatten` (its checks in ``_spec_checks``, attribute levels in
  ``_levels``, the class registry in :mod:`~graph_adapter.format.classes`);
* :mod:`~graph_adapter.format.errors`: the contract's errors, re-exported;
* :mod:`~graph_adapter.format.json_codec`: the exact JSON form of non-tensor
  values (never pickle);
* :mod:`~graph_adapter.format.values`: value rules (indices in range, masks
  consistent) checked before a call;
* :mod:`~graph_adapter.format.pytree`: flat dicts as pytree nodes;
* :mod:`~graph_adapter.format.torch_internals`: the torch internals every stage
  shares (pytree, fake tensors, dispatch modes);
* :mod:`~graph_adapter.format.pyg`: the PyG internals the package reads, one
  named helper each;
* :mod:`~graph_adapter.format.unpad`: padded batches and outputs back to
  their real rows.

It may import :mod:`graph_adapter.contract`, torch, numpy and PyG; every other
stage but the serving runtime imports it (``from graph_adapter.format import ...``).
"""
from . import errors, keys, micro, pyg, torch_internals
from .keys import *  # noqa: F401,F403 (the contract's names: re-exported by design)
from .micro import *  # noqa: F401,F403
from .errors import *  # noqa: F401,F403
from .json_codec import decode, dumps, encode
from .classes import base_class, class_path, resolve_class
from .spec import Field, Spec, allow_modules, flatten, infer_spec, unflatten
from ._node_sets import PAIR_SEP, node_sets, set_key, set_masks
from .values import (DIAGNOSED, BoundsPlan, Problem, bounds_plan, check_before_call,
                     inside_poptorch, micro_batches_of, named_error, raise_for_bounds, raise_for_values,
                     value_problems)
from .pytree import register_pytree
from .unpad import (AmbiguousLevelError, compact_hops, dim_of, inc_dims, is_per_hop,
                    real_hop_counts, sampled_hop_counts, unpad, unpad_batch, unpad_hetero)

__all__ = (list(keys.__all__) + list(micro.__all__) + list(errors.__all__) + [
    "encode", "decode", "dumps", "base_class", "class_path", "resolve_class",
    "Field", "Spec", "allow_modules", "flatten", "infer_spec", "unflatten", "node_sets", "set_key", "set_masks", "PAIR_SEP",
    "DIAGNOSED", "BoundsPlan", "Problem", "bounds_plan", "check_before_call",
    "inside_poptorch", "micro_batches_of", "named_error", "raise_for_bounds", "raise_for_values", "value_problems",
    "register_pytree", "dim_of", "inc_dims", "unpad_batch", "unpad_hetero", "unpad",
    "AmbiguousLevelError", "compact_hops", "is_per_hop", "real_hop_counts", "sampled_hop_counts",
])
