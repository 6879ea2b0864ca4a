"""Static sizes for PyG ops, active only inside an ``ipu_wrap``-ped forward.

PyG computes ``int(index.max()) + 1`` whenever a size argument is missing
(``global_*_pool``, ``utils.scatter``, ``utils.softmax``, ``to_dense_batch``,
aggregation modules, ``maybe_num_nodes``), and drops self-loops with a boolean
mask (``remove_self_loops``, ``add_remaining_self_loops``). Both give
data-dependent shapes. Inside the wrapped forward the sizes are known and
static (the padded budget): ``N`` nodes, ``E`` edges, ``G`` graph slots.

How it works:

* :func:`install` swaps each of those PyG functions, *at every module
  attribute where code looks it up* (the ``torch_geometric`` modules that
  imported it by name, and the modules of the user's model classes), for a
  replacement that behaves exactly like the original **unless a frame is
  active**. It also patches ``Aggregation.__call__``. Installation is done once
  by ``ipu_wrap`` (and again for newly imported modules) and stays in place:
  patching module dictionaries inside a traced forward is not something
  Dynamo or ``torch.export`` can trace, while reading a module-level list is.
  :func:`uninstall` restores every original.
* The wrapped forward pushes a *frame* (a dict with the static sizes, the
  batch vector and the masks) on :data:`_FRAMES` for the duration of the
  model call (``try/finally``), so the substitution is active only there.

Rules the replacements follow when a size is missing (and a frame is active):

* the index *is* the batch vector -> ``G``;
* otherwise by its length: ``E`` (an edge -> node index) -> ``N``;
  ``N`` (a node -> graph index) -> ``G``; anything else, or ``N == E`` for an
  index that is not the batch vector, raises :class:`StaticSizeError` naming
  the op and the user's source line. Pass the size explicitly there.
* ``remove_self_loops`` keeps the shape and turns every self-loop into an
  edge between two padding nodes (first padding node -> last node), so no
  real node sees it and, when the batch has two or more padding nodes, no
  self-loop is left (as in PyG).
* ``add_remaining_self_loops`` turns existing self-loops into edges the same
  way (the loop weight of a node with a self-loop is taken from it, as PyG
  does) and appends ``N`` self-loops: ``E + N`` edges, static, and the only
  self-loops are the ``N`` appended ones, in node order.
* ``index2ptr`` without ``size`` follows the same rule; aggregations skip
  their sorted-index assertion for the batch vector (sorted by construction).
* ``to_dense_batch`` without ``batch_size`` uses ``G``; without
  ``max_num_nodes`` it uses ``N`` (every graph fits; the dense output is
  ``[G, N, F]`` instead of PyG's ``[B, max_nodes, F]``).
"""
from __future__ import annotations

import os
import sys
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor

import torch_geometric
import torch_geometric.utils as pyg_utils
from torch_geometric import EdgeIndex
from torch_geometric.index import index2ptr as index2ptr_orig
from torch_geometric.nn.aggr.base import Aggregation
from torch_geometric.utils import num_nodes as _num_nodes_mod

from ..format import (BATCH, EDGE_MASK, ELL_IN, ELL_OUT, GRAPH_MASK, HOP_NODES, IN_SOURCES,
                      NODE_MASK, PTR, hop_budgets,
                      SPILL_IN, SPILL_OUT, is_hetero, levels_of_rows, masks_by_level,
                      parse_key)

__all__ = [
    "StaticSizeError",
    "install",
    "uninstall",
    "installed",
    "current_frame",
    "push_frame",
    "pop_frame",
    "make_frame",
    "index_size",
]


class StaticSizeError(RuntimeError):
    """An op inside the wrapped forward needs a size that cannot be made static."""


#: Stack of active frames; the wrapped forward pushes one around the model call.
_FRAMES: List[Dict[str, Any]] = []


def current_frame() -> Optional[Dict[str, Any]]:
    return _FRAMES[-1] if _FRAMES else None


def push_frame(frame: Dict[str, Any]) -> None:
    _FRAMES.append(frame)


def pop_frame() -> None:
    _FRAMES.pop()


def make_frame(flat: Dict[str, Tensor]) -> Dict[str, Any]:
    """The frame for a (micro-batch-free) padded flat dict.

    Homogeneous: ``N``/``E``/``G`` from the mask lengths (``x``/``edge_index``
    /``ptr`` when a mask is missing). Hetero: ``G`` and per-store masks; the
    node-level rules then apply only to the batch vectors.
    """
    frame: Dict[str, Any] = {"hetero": is_hetero(flat)}
    g = None
    if GRAPH_MASK in flat:
        g = flat[GRAPH_MASK].size(-1)
    elif PTR in flat:
        g = flat[PTR].size(-1) - 1
    frame["G"] = g
    frame[GRAPH_MASK] = flat.get(GRAPH_MASK)
    frame["masks"] = masks_by_level(flat)
    if not frame["hetero"]:
        n = e = None
        if NODE_MASK in flat:
            n = flat[NODE_MASK].size(0)
        elif "x" in flat:
            n = flat["x"].size(0)
        elif BATCH in flat:
            n = flat[BATCH].size(0)
        if EDGE_MASK in flat:
            e = flat[EDGE_MASK].size(0)
        elif "edge_index" in flat:
            e = flat["edge_index"].size(-1)
        frame["N"] = n
        frame["E"] = e
        frame[BATCH] = flat.get(BATCH)
        frame[NODE_MASK] = flat.get(NODE_MASK)
        frame[EDGE_MASK] = flat.get(EDGE_MASK)
        frame["batches"] = [flat[BATCH]] if BATCH in flat else []
        # ELL tables (layout="ell"): graph_adapter.nn.static_layout routes PyG's
        # gather and sum/mean aggregation over the batch's edge_index through them
        frame["edge_index"] = flat.get("edge_index")
        # (+ the spill lists of layout="hyb", else None)
        frame["ell"] = (flat[ELL_IN], flat[ELL_OUT], flat.get(SPILL_IN), flat.get(SPILL_OUT)) \
            if ELL_IN in flat and ELL_OUT in flat else None
        # layout="sources" (sampled batches): each row's in-edge sources, same routing
        frame["sources"] = flat.get(IN_SOURCES)
        if HOP_NODES in flat and NODE_MASK in flat:
            _per_hop_frame(frame, flat)
    else:
        frame["N"] = frame["E"] = None
        frame[BATCH] = None
        frame["batches"] = [v for k, v in flat.items() if parse_key(k)[1] == BATCH]
    return frame


def _per_hop_frame(frame: Dict[str, Any], flat: Dict[str, Tensor]) -> None:
    """What the static self-loop ops need of a batch in per-hop blocks
    (:mod:`graph_adapter.sampling.hops`): its padding rows are not the last ones,
    and ``trim_to_layer`` hands a layer the first blocks only. So loops are moved
    to two padding rows of the seeds' block, which every layer keeps
    (``loop_rows``), and each trimmed row count (blocks ``0..h``) is a node set of
    its own whose mask is the node mask's prefix (a layer given ``num_nodes`` of a
    trimmed ``x`` runs over it; a masked norm on a trimmed ``x`` reads it)."""
    blocks = hop_budgets(flat[HOP_NODES].shape)
    mask = flat[NODE_MASK]
    frame["loop_rows"] = (blocks[0] - 2, blocks[0] - 1)  # RESERVED_NODES padding rows there
    ends, acc = {}, 0
    for b in blocks[:-1]:
        acc += b
        ends[acc] = mask[:acc]
    frame["node_sets"] = ends
    # ... and a masked norm on a trimmed x normalises its real rows by the prefix's mask
    masks = {lv: list(ms) for lv, ms in frame["masks"].items()}
    masks["node"] += list(ends.values())
    frame["masks"] = masks


# --------------------------------------------------------------------------
# Error messages that name the user's line
# --------------------------------------------------------------------------
_SKIP = (
    os.path.dirname(torch.__file__),
    os.path.dirname(torch_geometric.__file__),
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),  # graph_adapter/
    os.path.dirname(os.__file__),
)
# The bundled application (demo, zoo) calls the library as a user would: its lines count.
_APP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "app") + os.sep


def _user_line() -> str:
    if torch.compiler.is_compiling():
        return "<inside a compiled region; run the wrapped model eagerly to see the line>"
    for fr in reversed(traceback.extract_stack()):
        if fr.filename.startswith("<frozen"):  # runpy, importlib: never the user's line
            continue
        path = os.path.abspath(fr.filename)
        if not path.startswith(_SKIP) or path.startswith(_APP):
            return f"{fr.filename}:{fr.lineno} ({(fr.line or '').strip()})"
    return "<unknown>"


def _fail(op: str, why: str, fix: str) -> None:
    raise StaticSizeError(f"{op} called at {_user_line()}: {why}. {fix}")


def _is_batch_vector(frame: Dict[str, Any], index: Tensor) -> bool:
    for b in frame["batches"]:
        if index is b:
            return True
    return False


def index_size(frame: Dict[str, Any], index: Tensor, op: str, arg: str) -> int:
    """Static output size for an index whose size argument (``arg`` of ``op``) is missing.

    The batch vector maps nodes to graphs (``G``); otherwise the index's level
    (:func:`graph_adapter.contract.levels_of_rows` of its length) says: an
    edge-level index maps edges to nodes (``N``), a node-level one nodes to
    graphs (``G``).  Raises :class:`StaticSizeError` when it cannot tell.
    """
    if _is_batch_vector(frame, index):
        return frame["G"]
    n, e, g = frame["N"], frame["E"], frame["G"]
    length = index.size(-1) if index.dim() else 1
    if n is None:
        _fail(op, f"{arg} is missing and the index is not a batch vector of this hetero batch",
              f"pass {arg}= explicitly")
    levels = levels_of_rows(length, {"node": n, "edge": e})
    if levels == ("edge",):
        return n
    if levels == ("node",):
        return g
    if levels:
        _fail(op, f"{arg} is missing and the index (length {length}) is not the batch vector; "
                  f"the budget has as many nodes as edges, so it cannot tell a node->graph "
                  f"index from an edge->node one", f"pass {arg}= explicitly")
    _fail(op, f"{arg} is missing and the index has length {length}, neither the node count "
              f"{n} nor the edge count {e} of the budget, so the output size would be "
              f"int(index.max()) + 1 (data-dependent)", f"pass {arg}= explicitly")
    raise AssertionError  # unreachable


# --------------------------------------------------------------------------
# Replacements
# --------------------------------------------------------------------------
_ORIG: Dict[str, Callable] = {
    "scatter": pyg_utils.scatter,
    "softmax": pyg_utils.softmax,
    "to_dense_batch": pyg_utils.to_dense_batch,
    "maybe_num_nodes": _num_nodes_mod.maybe_num_nodes,
    "add_remaining_self_loops": pyg_utils.add_remaining_self_loops,
    "remove_self_loops": pyg_utils.remove_self_loops,
    "index2ptr": index2ptr_orig,
}
_ORIG_AGGR_CALL = Aggregation.__call__
_ORIG_ASSERT_SORTED = Aggregation.assert_sorted_index


def _plain(t: Any) -> bool:
    """A plain dense tensor (no EdgeIndex, no sparse layout)."""
    return isinstance(t, Tensor) and not isinstance(t, EdgeIndex) and t.layout == torch.strided


def scatter(src: Tensor, index: Tensor, dim: int = 0, dim_size: Optional[int] = None,
            reduce: str = "sum") -> Tensor:
    if dim_size is None and _FRAMES:
        dim_size = index_size(_FRAMES[-1], index, "torch_geometric.utils.scatter "
                               "(or a global_*_pool)", "dim_size/size")
    return _ORIG["scatter"](src, index, dim, dim_size, reduce)


def softmax(src: Tensor, index: Optional[Tensor] = None, ptr: Optional[Tensor] = None,
            num_nodes: Optional[int] = None, dim: int = 0) -> Tensor:
    if num_nodes is None and ptr is None and index is not None and _FRAMES:
        num_nodes = index_size(_FRAMES[-1], index, "torch_geometric.utils.softmax", "num_nodes")
    return _ORIG["softmax"](src, index, ptr, num_nodes, dim)


def to_dense_batch(x: Tensor, batch: Optional[Tensor] = None, fill_value: float = 0.0,
                   max_num_nodes: Optional[int] = None, batch_size: Optional[int] = None):
    if batch is not None and _FRAMES:
        frame = _FRAMES[-1]
        if batch_size is None:
            batch_size = index_size(frame, batch, "torch_geometric.utils.to_dense_batch",
                                     "batch_size")
        if max_num_nodes is None:
            max_num_nodes = x.size(0)
            out, mask = _ORIG["to_dense_batch"](x, batch, fill_value, max_num_nodes, batch_size)
            _record_dense_mask(frame, mask, batch, batch_size, max_num_nodes)
            return out, mask
    return _ORIG["to_dense_batch"](x, batch, fill_value, max_num_nodes, batch_size)


def _record_dense_mask(frame: Dict[str, Any], mask: Tensor, batch: Tensor, graphs: int,
                       width: int) -> None:
    """Where each node sits in the flattened ``[G * width]`` dense batch (node order).

    Every node fits (``width`` is the node count), so ``dense[mask]`` is the
    gather of these positions (:mod:`graph_adapter.nn.static_index` uses it).
    """
    counts = torch.zeros(graphs, dtype=batch.dtype, device=batch.device)
    counts = counts.scatter_add(0, batch, torch.ones_like(batch))
    starts = counts.cumsum(0) - counts
    local = torch.arange(batch.size(0), device=batch.device) - starts[batch]
    frame.setdefault("dense_masks", []).append((mask, batch * width + local))


def maybe_num_nodes(edge_index: Any, num_nodes: Optional[int] = None) -> int:
    if num_nodes is None and _FRAMES and isinstance(edge_index, Tensor):
        n = _FRAMES[-1]["N"]
        if n is not None and not edge_index.is_sparse:
            return n
        mask = _set_of_index(_FRAMES[-1], edge_index)  # an index into a node set of its own
        if mask is not None:
            return mask.size(-1)
    return _ORIG["maybe_num_nodes"](edge_index, num_nodes)


def _loop_nodes(edge_index: Any, num_nodes: Optional[int]) -> Optional[Tuple[int, Any]]:
    """``(N, node mask)`` of the nodes a static self-loop op runs over: the batch's
    own, or (``num_nodes`` given, the store's own not matching) those of the node set
    of its own with ``num_nodes`` rows (``frame["node_sets"]``, set by the wrapper for
    PyG's ``PairData``: every set's count differs), or, without ``num_nodes``, of the
    set the batch's own index key ``edge_index`` points into; ``None``: PyG's op runs."""
    if not _FRAMES or not _plain(edge_index) or edge_index.dim() != 2:
        return None
    frame = _FRAMES[-1]
    n = frame["N"]
    if n is not None and (num_nodes is None or num_nodes == n):
        return n, frame.get(NODE_MASK)
    sets = frame.get("node_sets") or {}
    if num_nodes is not None and num_nodes in sets:
        return num_nodes, sets[num_nodes]
    if num_nodes is None:
        mask = _set_of_index(frame, edge_index)
        if mask is not None:
            return mask.size(-1), mask
    return None


def _set_of_index(frame: Dict[str, Any], index: Any) -> Optional[Tensor]:
    """The node mask of the node set of its own that ``index`` (an edge set's index key
    of the batch itself, ``frame["edge_sets"]``) points into, or ``None``."""
    for t, mask in frame.get("edge_sets") or ():
        if index is t:
            return mask
    return None


def remove_self_loops(edge_index: Tensor, edge_attr: Optional[Tensor] = None):
    nodes = _loop_nodes(edge_index, None)
    if nodes is None:
        return _ORIG["remove_self_loops"](edge_index, edge_attr)
    return _unloop(edge_index, _FRAMES[-1], nodes), edge_attr


def _unloop(edge_index: Tensor, frame: Dict[str, Any],
            nodes: Optional[Tuple[int, Any]] = None) -> Tensor:
    """``edge_index`` ``[2, E]`` with every self-loop turned into a padding -> trash edge.

    Every loop ``(i, i)`` (real or padding) becomes ``(P, N - 1)``: ``N - 1``
    (the trash node) and ``P`` (the first padding node, ``node_mask.sum()``)
    are both padding nodes, so no real node sends, receives or counts these
    edges, whatever the layer's flow or degree side. Every batch has at
    least two padding nodes (``P != N - 1``; the budget reserves them,
    ``budget.RESERVED_NODES``), so the result has **no self-loop**, as PyG's
    ``remove_self_loops`` promises (``ClusterGCNConv`` then selects exactly
    the ``N`` appended loops with ``row == col``); a hand-made dict with a
    single padding node keeps them on the trash node. Same shape, no value
    read on the host.
    """
    n, mask = nodes if nodes is not None else (frame["N"], frame.get(NODE_MASK))
    trash = n - 1
    row, col = edge_index[0], edge_index[1]
    loop_rows = frame.get("loop_rows")
    if loop_rows is not None:  # per-hop blocks: two padding rows no trimming cuts
        is_loop = row == col
        row = torch.where(is_loop, torch.full_like(row, loop_rows[0]), row)
        col = torch.where(is_loop, torch.full_like(col, loop_rows[1]), col)
        return torch.stack([row, col], dim=0)
    if mask is None:
        first_pad = torch.full_like(row, trash)
    else:
        first_pad = mask.sum().to(row.dtype).clamp(max=trash).expand_as(row)
    is_loop = row == col
    row = torch.where(is_loop, first_pad, row)
    col = torch.where(is_loop, torch.full_like(col, trash), col)
    return torch.stack([row, col], dim=0)


def add_remaining_self_loops(edge_index: Tensor, edge_attr: Optional[Tensor] = None,
                             fill_value: Any = None, num_nodes: Optional[int] = None):
    nodes = _loop_nodes(edge_index, num_nodes)
    if nodes is None:
        return _ORIG["add_remaining_self_loops"](edge_index, edge_attr, fill_value, num_nodes)
    n = nodes[0]
    row, col = edge_index[0], edge_index[1]
    is_loop = row == col
    loop_index = torch.arange(n, device=edge_index.device, dtype=edge_index.dtype)
    loop_index = loop_index.view(1, -1).repeat(2, 1)
    if edge_attr is not None:
        from torch_geometric.utils.loop import compute_loop_attr

        loop_attr = compute_loop_attr(edge_index, edge_attr, n, False, fill_value)
        # PyG: loop_attr[row[is_loop]] = edge_attr[is_loop]; static: scatter
        # the loops' attributes into an extra trash row for non-loops.
        target = torch.where(is_loop, row, torch.full_like(row, n))
        buf = torch.cat([loop_attr, loop_attr[:1]], dim=0)
        shape = (-1,) + (1,) * (edge_attr.dim() - 1)
        idx = target.view(shape).expand_as(edge_attr)
        buf = buf.scatter(0, idx, edge_attr)
        loop_attr = buf[:n]
        edge_attr = torch.cat([edge_attr, loop_attr], dim=0)
    edge_index = torch.cat([_unloop(edge_index, _FRAMES[-1], nodes), loop_index], dim=1)
    return edge_index, edge_attr


def _aggr_call(self, x: Tensor, index: Optional[Tensor] = None, ptr: Optional[Tensor] = None,
               dim_size: Optional[int] = None, dim: int = -2, **kwargs):
    if dim_size is None and ptr is None and index is not None and _FRAMES:
        dim_size = index_size(_FRAMES[-1], index, f"{type(self).__name__} (aggregation module)",
                               "dim_size")
    return _ORIG_AGGR_CALL(self, x, index=index, ptr=ptr, dim_size=dim_size, dim=dim, **kwargs)


def _assert_sorted_index(self, index: Optional[Tensor]) -> None:
    # The batch vector of a padded batch is sorted by construction (padding
    # nodes belong to the last graph slot); checking it reads values.
    if _FRAMES and index is not None and _is_batch_vector(_FRAMES[-1], index):
        return
    _ORIG_ASSERT_SORTED(self, index)


def index2ptr(index: Tensor, size: Optional[int] = None) -> Tensor:
    if size is None and _FRAMES:
        size = index_size(_FRAMES[-1], index, "torch_geometric.index.index2ptr", "size")
    return _ORIG["index2ptr"](index, size)


_REPLACEMENTS: Dict[str, Callable] = {
    "scatter": scatter,
    "softmax": softmax,
    "to_dense_batch": to_dense_batch,
    "maybe_num_nodes": maybe_num_nodes,
    "add_remaining_self_loops": add_remaining_self_loops,
    "remove_self_loops": remove_self_loops,
    "index2ptr": index2ptr,
}
for _name, _fn in _REPLACEMENTS.items():
    _fn.__wrapped__ = _ORIG[_name]  # type: ignore[attr-defined]

# --------------------------------------------------------------------------
# Installation
# --------------------------------------------------------------------------
#: (module dict, name, original) for every patched global.
_PATCHED: List[Tuple[Dict[str, Any], str, Any]] = []
_SCANNED: set = set()
_BY_ID = {id(fn): name for name, fn in _ORIG.items()}


def _patch_namespace(ns: Dict[str, Any]) -> None:
    for name, value in list(ns.items()):
        key = _BY_ID.get(id(value))
        if key is not None and value is _ORIG[key]:
            ns[name] = _REPLACEMENTS[key]
            _PATCHED.append((ns, name, value))


#: Substitution tables registered by the other static modules (static_geometry,
#: static_scatter): (key prefix, originals, replacements, module prefixes to scan).
_TABLES: List[Tuple[str, Dict[str, Callable], Dict[str, Callable], Tuple[str, ...]]] = []
#: (install, uninstall) hooks registered by static_index.
_HOOKS: List[Tuple[Callable[[], None], Callable[[], None]]] = []


def register(prefix: str, originals: Dict[str, Callable], replacements: Dict[str, Callable],
             module_prefixes: Tuple[str, ...] = ()) -> None:
    """Add a table of stand-ins (``name -> original`` / ``name -> replacement``).

    :func:`graph_adapter.nn.stand_ins.register_all` calls it for each table of
    :data:`~graph_adapter.nn.stand_ins.TABLES`; ``module_prefixes`` are extra
    top-level packages to scan.
    """
    _TABLES.append((prefix, originals, replacements, module_prefixes))


def register_hooks(install_fn: Callable[[], None], uninstall_fn: Callable[[], None]) -> None:
    """Run ``install_fn`` in :func:`install` and ``uninstall_fn`` in :func:`uninstall`."""
    _HOOKS.append((install_fn, uninstall_fn))


def _add_tables() -> Tuple[str, ...]:
    """Merge the registered tables into the one table (once); the prefixes to scan."""
    prefixes: Tuple[str, ...] = ()
    for prefix, originals, replacements, mods in _TABLES:
        prefixes += mods
        for name, orig in originals.items():
            key = prefix + name
            if key not in _ORIG:
                _ORIG[key] = orig
                _REPLACEMENTS[key] = replacements[name]
                _BY_ID[id(orig)] = key
    return prefixes


def install(*objects: Any) -> None:
    """Install the substitutions (idempotent; new modules are scanned).

    Scans every loaded ``torch_geometric`` module (and, when installed,
    ``torch_scatter``/``torch_sparse``: :mod:`graph_adapter.nn.static_scatter`), plus the modules that
    define ``objects`` (models, modules, functions: e.g. your model whose
    file did ``from torch_geometric.utils import scatter``) and the classes
    of their submodules.
    """
    for hook, _ in _HOOKS:
        hook()
    if Aggregation.__call__ is _ORIG_AGGR_CALL:
        Aggregation.__call__ = _aggr_call
        Aggregation.assert_sorted_index = _assert_sorted_index
    prefixes = ("torch_geometric",) + _add_tables()
    names = [m for m in list(sys.modules) if m.split(".")[0] in prefixes]
    for obj in objects:
        mods = obj.modules() if isinstance(obj, torch.nn.Module) else [obj]
        for m in mods:
            for cls in type(m).__mro__ if isinstance(m, torch.nn.Module) else [m]:
                mod = getattr(cls, "__module__", None)
                if mod:
                    names.append(mod)
            fwd = getattr(type(m), "forward", None) if isinstance(m, torch.nn.Module) else None
            if fwd is not None and getattr(fwd, "__module__", None):
                names.append(fwd.__module__)
    for name in names:
        if name in _SCANNED or name.startswith("graph_adapter"):
            continue
        mod = sys.modules.get(name)
        if mod is None:
            continue
        _SCANNED.add(name)
        ns = getattr(mod, "__dict__", None)
        if isinstance(ns, dict):
            _patch_namespace(ns)


def uninstall() -> None:
    """Put every original PyG function back."""
    while _PATCHED:
        ns, name, value = _PATCHED.pop()
        if ns.get(name) is _REPLACEMENTS.get(_BY_ID.get(id(value), ""), None):
            ns[name] = value
    _SCANNED.clear()
    Aggregation.__call__ = _ORIG_AGGR_CALL
    for _, unhook in _HOOKS:
        unhook()
    Aggregation.assert_sorted_index = _ORIG_ASSERT_SORTED


def installed() -> bool:
    return Aggregation.__call__ is _aggr_call
