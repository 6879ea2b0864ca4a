"""The inverse of padded collate: a padded batch back to its real graphs, and a
compiled call's outputs back to their real rows (:func:`unpad`).

``unpad_batch(flat, schema)`` gives the real graphs of a batch as ``Data``
(``HeteroData``) objects, in the order they were packed: padding rows (past
the masks' real counts) and padding graphs are dropped, index attributes
shifted back by their node offsets (PyG's ``__inc__``), and a micro-batched
dict gives the graphs of every micro-batch in order. With the collator's
``schema`` every key comes back exactly; without it, levels are guessed
from the row counts (``docs/batching.md``). A sampled batch laid out in per-hop
blocks (``per_hop_budget=``: the ``num_sampled_nodes`` / ``num_sampled_edges``
keys) is first brought back to the plain layout (:func:`compact_hops`) and its
graph gets PyG's ``num_sampled_nodes`` / ``num_sampled_edges``: the real count of
every block.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .errors import SpecError
from .keys import (Dim, BATCH, EDGE_MASK, GRAPH_MASK, LAYOUT_KEYS, MASK_OF_LEVEL, NODE_MASK, PTR,
                   RESERVED_KEYS, SEP, is_hetero, is_index_attr, key_of, levels_of_rows,
                   mask_of_rows, masks_by_level, parse_key, store_name)
from .micro import has_micro_batch_dim, micro_batch, num_micro_batches, split_micro_batches
from .spec import Field
from ._node_sets import PAIR_SEP, set_key, set_masks
from ..contract import padding_node
from .keys import HOP_EDGES, HOP_KEYS, HOP_NODES, SEED_MASK, cat_dim_of, hop_budgets

__all__ = ["unpad_batch", "unpad_hetero", "inc_dims", "dim_of", "unpad", "AmbiguousLevelError",
           "is_per_hop", "real_hop_counts", "compact_hops", "sampled_hop_counts"]


def dim_of(f: Field) -> Dim:
    """The size dim whose rows a node- or edge-level key has: ``(level, store)``, or,
    for a key in a node or edge set of its own (PyG's ``PairData``: ``Field.nodes`` /
    ``Field.edges``), ``("node", (set,))`` / ``("edge", (edge set,))``."""
    if f.level == "node" and f.nodes:
        return "node", (f.nodes,)
    if f.level == "edge" and f.edges:
        return "edge", (f.edges,)
    return f.level, f.store


def inc_dims(f: Field) -> Tuple[Dim, Dim]:
    """The node dims whose counts offset an ``inc == "nodes"`` key: (source, destination)
    (a key pointing into a node set of its own: that set's, ``Field.nodes``)."""
    if len(f.store) == 3:
        return ("node", (f.store[0],)), ("node", (f.store[2],))
    if f.nodes:  # a bipartite index: "x_s,x_t" (rows into two sets)
        src, sep, dst = f.nodes.partition(PAIR_SEP)
        dst = dst if sep else src
        return ("node", (src,) if src else ()), ("node", (dst,) if dst else ())
    return ("node", f.store), ("node", f.store)


def unpad_batch(flat: Mapping[str, Tensor], schema: Optional[Sequence[Field]] = None,
                levels: Optional[Mapping[str, str]] = None, hops: Optional[int] = None
                ) -> List[Any]:
    """Give back the real graphs of a padded flat dict as ``Data`` (``HeteroData``) objects.

    ``schema`` (``Collator.schema`` / ``FixedSizeLoader.schema``) restores
    every key exactly (0-d graph attributes, custom increments).  Without it,
    ``levels`` (``{key: "node"|"edge"|"graph"}``) or a guess from the row
    counts is used, and keys named like indices (``*index*``, ``face``) are
    shifted back by the node offsets.  A micro-batched dict
    (``graph_mask.dim() == 2``) gives the graphs of all micro-batches in order.
    A batch in per-hop blocks (``per_hop_budget=``) gives PyG's layout with PyG's
    ``num_sampled_nodes`` / ``num_sampled_edges``; ``hops`` (the sampler's number
    of hops, ``len(num_neighbors)``) gives a plain neighbour-sampled batch (one
    with ``seed_mask``, ``directed=True``) the same lists, from the sampled edges
    (:func:`sampled_hop_counts`).
    """
    graphs = _unpad(flat, schema, (), (), levels)
    if hops is not None and not is_per_hop(flat):
        for d in graphs:
            if SEED_MASK in d and "edge_index" in d:
                d[HOP_NODES], d[HOP_EDGES] = sampled_hop_counts(
                    d["edge_index"], int(d[SEED_MASK].numel()), int(d[SEED_MASK].sum()), hops)
    return graphs


def sampled_hop_counts(edge_index: Tensor, num_nodes: int, num_seeds: int, hops: int
                       ) -> Tuple[List[int], List[int]]:
    """PyG's ``num_sampled_nodes`` / ``num_sampled_edges`` of a directed neighbour
    sample in hop order (rows: the seeds, hop 1's new nodes, ...; edges hop by hop,
    each into the hop before).

    A row first sampled at hop ``h`` is exactly ``h`` sampled edges from the seeds
    (an edge into a nearer row would have been sampled, and the row found, at an
    earlier hop), so the hops are the distances, and an edge's hop is its
    destination's plus one. Rows are in hop order: a row no edge reaches (a
    loader's ``oversize="trim"`` cut its edges) counts with the hop of the rows
    before it.

    Args:
        edge_index: ``[2, m]`` rows of the sample (source, destination).
        num_nodes: the sample's rows.
        num_seeds: its seeds (the first rows).
        hops: the sampler's number of hops (the lists have ``hops + 1`` / ``hops``
            entries, trailing empty hops included).

    Returns:
        ``(nodes per hop, edges per hop)``.
    """
    far = hops + 1
    dist = torch.full((num_nodes,), far, dtype=torch.long)
    dist[:num_seeds] = 0
    src, dst = edge_index[0].long(), edge_index[1].long()
    for h in range(1, hops + 1):
        new = src[dist[dst] == h - 1]
        new = new[dist[new] == far]
        if new.numel() == 0:
            break
        dist[new] = h
    reached = torch.where(dist == far, torch.zeros_like(dist), dist)
    hop = torch.cummax(reached, 0).values if num_nodes else reached
    nodes = torch.bincount(hop, minlength=hops + 1)[:hops + 1].tolist()
    edges = torch.bincount(hop[dst] + 1, minlength=hops + 1)[1:hops + 1].tolist() \
        if dst.numel() else [0] * hops
    return [int(c) for c in nodes], [int(c) for c in edges]


def unpad_hetero(flat: Mapping[str, Tensor], schema: Sequence[Field],
                 node_types: Sequence[str], edge_types: Sequence[Tuple[str, str, str]]
                 ) -> List[Any]:
    """:func:`unpad_batch` of a hetero flat dict (``schema``, ``node_types``,
    ``edge_types`` from the collator: ``c.schema``, ``c.scan.node_types``...)."""
    return _unpad(flat, schema, node_types, edge_types)


def _unpad(flat: Mapping[str, Tensor], schema: Optional[Sequence[Field]],
           node_types: Sequence[str], edge_types: Sequence[Tuple[str, ...]],
           levels: Optional[Mapping[str, str]] = None) -> List[Any]:
    if has_micro_batch_dim(flat):
        return [d for one in split_micro_batches(flat)
                for d in _unpad(one, schema, node_types, edge_types, levels)]
    hops = None
    if is_per_hop(flat):  # per-hop blocks: the plain layout first, PyG's per-hop counts after
        flat, hops = compact_hops(flat)
    hetero = is_hetero(flat)
    if hetero and not node_types:  # the stores, from the format's own keys
        node_types = [parse_key(k)[0][0] for k in flat if parse_key(k)[1] == PTR]
        edge_types = [parse_key(k)[0] for k in flat if parse_key(k)[1] == EDGE_MASK]
    specs = {f.key: f for f in schema} if schema is not None else {}
    if not hetero and not specs and PTR not in flat:
        raise ValueError(
            f"unpad_batch: this homogeneous batch has no {PTR!r} (keys {sorted(flat)[:8]}...): "
            f"its nodes are in sets of their own (PyG's PairData: x_s_ptr, x_t_ptr), which only "
            f"the collator's schema names; pass schema=loader.schema (or call "
            f"loader.collator.unpad(batch)).")
    node_dims = [("node", (nt,)) for nt in node_types] if hetero else _set_dims(specs, "node")
    edge_dims = [("edge", tuple(et)) for et in edge_types] if hetero else _set_dims(specs, "edge")
    g = int(flat[GRAPH_MASK].sum())
    G = flat[GRAPH_MASK].numel()
    n_i, n_off = {}, {}
    for dim in node_dims:
        ptr = flat[_reserved(dim, PTR, hetero)].long()
        n_i[dim], n_off[dim] = ptr[1:g + 1] - ptr[:g], ptr[:g]
    e_i = {dim: _edge_counts(flat, dim, g, specs, hetero) for dim in edge_dims}
    reserved = set(RESERVED_KEYS) | {_reserved(d, r, hetero) for d in node_dims
                                     for r in (BATCH, PTR, NODE_MASK)} | \
        {_reserved(d, EDGE_MASK, hetero) for d in edge_dims}
    parts: Dict[Field, List[Tensor]] = {}
    for k, v in flat.items():
        if parse_key(k)[1] in reserved or k in LAYOUT_KEYS or (hetero and specs and k not in specs):
            continue  # (hetero with a schema: the schema's keys only)
        f = specs.get(k) or _guess_field(k, v, flat, levels or {}, G)
        parts[f] = _split(f, v, g, G, n_i, n_off, e_i)
    graphs = [_build(parts, j, hetero, node_dims, n_i, specs) for j in range(g)]
    if hops is not None:
        for d in graphs:
            d[HOP_NODES], d[HOP_EDGES] = list(hops[0]), list(hops[1])
    return graphs


def _set_dims(specs: Mapping[str, Field], level: str) -> List[Dim]:
    """A homogeneous batch's node (edge) dims: the store's own, and with a schema whose
    keys are in sets of their own (``PairData``), those sets' (:func:`dim_of`)."""
    sets = sorted({dim_of(f)[1] for f in specs.values() if f.level == level})
    if not any(sets):
        return [(level, ())]
    return [(level, s) for s in sets]


def _reserved(dim: Dim, attr: str, hetero: bool) -> str:
    """The key of reserved ``attr`` (``ptr``, ``batch``, a mask) of one size dim."""
    store = dim[1]
    if hetero or not store:
        return key_of(store, attr)
    return set_key(store[0], attr)


def _edge_counts(flat: Mapping[str, Tensor], dim: Dim, g: int, specs: Mapping[str, Field],
                 hetero: bool) -> Tensor:
    """Real edges of every real graph of one edge dim (from its source nodes' graphs):
    of a hetero edge store, the store's own edges, or an edge set of its own (named
    by its index key, which points into a node set: ``Field.nodes``)."""
    st = dim[1]
    e_real = int(flat[_reserved(dim, EDGE_MASK, hetero)].sum())
    if hetero:
        index, src_dim = key_of(st, "edge_index"), ("node", st[:1])
    else:  # the store's own edges, or an edge set named by its index key
        index = st[0] if st else "edge_index"
        src_dim = inc_dims(specs[index])[0] if index in specs else ("node", ())
    ei = flat.get(index)
    if ei is None:
        if e_real:
            raise ValueError(f"unpad_batch: cannot split edges without {index!r}")
        return torch.zeros(g, dtype=torch.long)
    if not e_real:
        return torch.zeros(g, dtype=torch.long)
    src = ei.reshape(-1, ei.shape[-1])[0, :e_real].long()
    batch = flat[_reserved(src_dim, BATCH, hetero)].long()
    return torch.bincount(batch[src], minlength=g)[:g]


def _guess_field(k: str, v: Tensor, flat: Mapping[str, Tensor], levels: Mapping[str, str],
                 G: int) -> Field:
    """A key's field without a schema: by its store (hetero), else by its row count."""
    store, attr = parse_key(k)
    inc = "nodes" if is_index_attr(attr) else "none"
    cat = v.dim() - 1 if inc == "nodes" else 0
    size = v.shape[cat] if v.dim() else 0
    level = levels.get(k)
    if level is None and is_hetero(flat):  # the store says
        level = {0: "graph", 1: "node", 3: "edge"}[len(store)]
    elif level is None:
        # the row count alone, never a guess: every level it matches is a
        # candidate (graph: one row per slot); a tie is an error
        N, E = flat[NODE_MASK].numel(), flat[EDGE_MASK].numel()
        cands = list(levels_of_rows(size, {"node": N, "edge": E, "graph": G}))
        if k == "edge_index":  # [2, E] by definition
            cands = ["edge"]
        if not cands and size % G == 0:
            cands = ["graph"]  # several rows per graph slot
        if len(cands) != 1:
            why = (f"its {size} rows match the {' and the '.join(cands)} row counts"
                   if cands else f"its {size} rows match no level (N={N}, E={E}, G={G})")
            raise ValueError(
                f"unpad_batch: cannot tell the level of key {k!r}: {why}. Pass "
                f"schema=loader.schema (or levels={{{k!r}: 'node'|'edge'|'graph'}}); "
                f"Budget.fit / Budget.tight choose N, E and G pairwise different.")
        level = cands[0]
    shape: List[Optional[int]] = list(v.shape)
    if shape:
        shape[cat] = None
    return Field(k, store, attr, str(v.dtype).replace("torch.", ""), tuple(shape), level, inc,
                 size // G if level == "graph" else 1)


def _split(f: Field, v: Tensor, g: int, G: int, n_i, n_off, e_i) -> List[Tensor]:
    """The rows of each real graph of one key, offsets undone, in the graph's own layout."""
    cat = f.cat_dim
    vv = v.movedim(cat, 0) if cat != 0 and v.dim() else v
    if f.level == "graph":
        cnt = torch.full((g,), vv.shape[0] // G, dtype=torch.long)
    elif f.level == "node":
        cnt = n_i[dim_of(f)]
    else:
        cnt = e_i[dim_of(f)]
    m = int(cnt.sum())
    out = []
    for j, p in enumerate(torch.split(vv[:m], cnt.tolist()) if g else []):
        if f.inc == "nodes":
            src, dst = inc_dims(f)
            sub = n_off[src][j] if src == dst else torch.stack([n_off[src][j], n_off[dst][j]])
            p = p - sub.to(p.dtype)
        # (custom increments cannot be undone from the flat dict alone)
        if cat != 0:
            p = p.movedim(0, cat)
        if f.scalar:
            p = p.reshape(())
        out.append(p.contiguous())
    return out


def _build(parts: Mapping[Field, List[Tensor]], j: int, hetero: bool, node_dims,
           n_i, specs: Mapping[str, Field]) -> Any:
    """Real graph ``j`` as a ``Data`` / ``HeteroData``."""
    from torch_geometric.data import Data, HeteroData

    if hetero:
        h = HeteroData()
        for dim in node_dims:
            h[dim[1][0]].num_nodes = int(n_i[dim][j])
        for f, ps in parts.items():
            (h[f.store if len(f.store) == 3 else f.store[0]] if f.store else h)[f.attr] = ps[j]
        return h
    d = Data(**{f.attr: ps[j] for f, ps in parts.items()})
    own = ("node", ())
    if own in n_i and not any((f.key in specs and dim_of(f) == own) or f.attr == "x" for f in parts):
        d.num_nodes = int(n_i[own][j])
    return d


# --------------------------------------------------------------------------
# unpad: a compiled call's outputs back to their real rows
# --------------------------------------------------------------------------
class AmbiguousLevelError(SpecError, ValueError):
    """An output's row count is that of two levels (or two node/edge types) of the batch."""


_KEEP = ("none", "other")


def _matches(rows: int, flat: Mapping[str, Tensor]) -> List[Tuple[str, str]]:
    """``(mask key, level)`` of every mask whose last dim is ``rows`` (node, edge, graph;
    the masks of node and edge sets of their own, ``x_s_node_mask``, too)."""
    level_of = {m: lv for lv, m in MASK_OF_LEVEL.items()}
    level_of.update({k: lv for lv, ms in set_masks(flat).items() for k, _ in ms})
    found = [(k, level_of.get(k) or level_of[parse_key(k)[1]]) for k, v in flat.items()
             if (k in level_of or parse_key(k)[1] in level_of) and v.size(-1) == rows]
    return sorted(found, key=lambda kl: list(MASK_OF_LEVEL).index(kl[1]))


def _mask_for(key: str, rows: int, flat: Mapping[str, Tensor],
              levels: Mapping[str, str]) -> Optional[Tensor]:
    """The mask that selects the real rows of output ``key`` (``None``: keep it whole).

    ``levels[key]`` (a level, a mask key such as ``"paper/node_mask"``, or
    ``"none"``) decides; else the one mask with ``rows`` rows; when several
    match, the one whose store the output key names (``output/paper``), else
    :class:`AmbiguousLevelError`.
    """
    found = _matches(rows, flat)
    want = levels.get(key)
    if want in _KEEP:
        return None
    if want is not None:
        found = [(k, lv) for k, lv in found if want in (k, lv)]
        if not found:
            raise AmbiguousLevelError(
                f"unpad: levels[{key!r}] = {want!r}, but output {key!r} has {rows} rows and no "
                f"{want!r} mask of the batch has {rows} rows ({_sizes(flat)}). Pass a level whose "
                f"size it has, or 'none' to keep it whole.")
    if len(found) > 1:
        parts = set(key.split(SEP))
        named = [(k, lv) for k, lv in found if parse_key(k)[0] and store_name(parse_key(k)[0]) in parts]
        if len(named) == 1:
            found = named
    if len(found) > 1:
        raise AmbiguousLevelError(
            f"unpad: output {key!r} has {rows} rows, which is the size of "
            f"{', '.join(f'{k} ({lv})' for k, lv in found)} in this batch ({_sizes(flat)}), so "
            f"its real rows cannot be told apart. Say which: unpad(out, flat, "
            f"levels={{{key!r}: {found[0][0] if len({lv for _, lv in found}) == 1 else found[0][1]!r}}}), "
            f"or choose a budget whose node, edge and graph counts differ.")
    return flat[found[0][0]] if found else None


def _sizes(flat: Mapping[str, Tensor]) -> str:
    sets = {k for ms in set_masks(flat).values() for k, _ in ms}
    return ", ".join(f"{k}: {v.size(-1)}" for k, v in flat.items()
                     if parse_key(k)[1] in MASK_OF_LEVEL.values() or k in sets)


def _select(key: str, value: Tensor, flat: Mapping[str, Tensor], levels: Mapping[str, str]) -> Tensor:
    if value.dim() == 0:
        return value
    m = _mask_for(key, value.size(0), flat, levels)
    return value if m is None else value[m.bool()]


def _has_rows(rows: int, masks: Mapping[str, List[Tensor]]) -> bool:
    return mask_of_rows(rows, masks)[0] is not None


def unpad(outputs: Mapping[str, Tensor], flat: Mapping[str, Tensor],
          levels: Optional[Mapping[str, str]] = None) -> Union[Dict[str, Tensor], List[Dict[str, Tensor]]]:
    """Keep only the rows of real graphs / nodes / edges of each output.

    A value whose first dim equals the node count ``N`` keeps the rows where
    ``node_mask``; ``G`` (graph slots) -> ``graph_mask``; ``E`` ->
    ``edge_mask``; other values (e.g. the scalar loss) are returned as they
    are. ``unpad`` never guesses: when ``N``, ``E`` or ``G`` (or two node
    types' counts) are equal and an output has that many rows, it raises
    :class:`AmbiguousLevelError` naming the key and the sizes, unless
    ``levels`` says which: ``levels={"output": "node"}`` (a level, a mask key
    such as ``"paper/node_mask"``, or ``"none"`` to keep it whole). A hetero
    output whose key names its store (``"output/paper"``) needs no hint.

    When ``flat`` has a leading micro-batch dim ``F``, the result is a list of
    ``F`` dicts, one per micro-batch; outputs may then be ``[F, R, ...]``,
    ``[F * R, ...]`` (stacked by poptorch) or, for ``F == 1``, ``[R, ...]``.

    Args:
        outputs: what the wrapped model returned (``{"output": ..., "loss": ...}``).
        flat: the padded batch the outputs are of (its masks say which rows are real).
        levels: ``{output key: level}`` where a row count names several levels.

    Returns:
        ``{key: tensor}`` of the real rows of each output, in the batch's order (a
        list of such dicts, one a micro-batch, for a batch with a leading ``F``).

    Raises:
        AmbiguousLevelError: an output whose row count is the size of two levels
            and no ``levels`` entry says which (or one that names neither).
        KeyError: a ``levels`` key that is not an output key.

    Example:
        ```python
        from torch_geometric.datasets import FakeDataset
        from torch_geometric.nn import GCN

        from graph_adapter import Budget, FixedSizeLoader, ipu_wrap, unpad

        graphs = FakeDataset(num_graphs=8, avg_num_nodes=10, num_channels=8)
        batch = next(iter(FixedSizeLoader(graphs, Budget.tight(graphs, 4))))
        out = unpad(ipu_wrap(GCN(8, 16, 2))(batch), batch)  # the real nodes' rows only
        assert out["output"].shape[0] == batch["node_mask"].sum()
        ```
    """
    levels = dict(levels or {})
    unknown = sorted(set(levels) - set(outputs))
    if unknown:
        raise KeyError(f"unpad(levels=...) names {unknown}, which are not output keys "
                       f"{sorted(outputs)}")
    if not has_micro_batch_dim(flat):
        return {k: _select(k, v, flat, levels) for k, v in outputs.items()}
    f = num_micro_batches(flat)
    result = []
    for i in range(f):
        one = micro_batch(flat, i)
        masks = masks_by_level(one)
        result.append({k: _select(k, _micro(v, i, f, masks), one, levels) for k, v in outputs.items()})
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


# --------------------------------------------------------------------------
# Per-hop blocks (FixedSizeNeighborLoader(per_hop_budget=...)) back to the plain layout
# --------------------------------------------------------------------------


def is_per_hop(flat: Mapping[str, Tensor]) -> bool:
    """Whether ``flat`` (homogeneous) is laid out in per-hop blocks."""
    return HOP_NODES in flat and HOP_EDGES in flat


def _block_sums(mask: Tensor, sizes: List[int]) -> List[int]:
    """The True entries of ``mask`` in each consecutive block of ``sizes``."""
    if not sizes:
        return []
    return [int(c) for c in torch.stack([b.sum() for b in mask.split(sizes)]).tolist()]


def real_hop_counts(flat: Mapping[str, Tensor]) -> Tuple[List[int], List[int]]:
    """``(real nodes per hop, real edges per hop)`` of a per-hop batch (no micro-batch
    dim): what PyG's loader reports as ``num_sampled_nodes`` / ``num_sampled_edges``."""
    nodes = hop_budgets(flat[HOP_NODES].shape)
    edges = hop_budgets(flat[HOP_EDGES].shape)
    return _block_sums(flat[NODE_MASK], nodes), _block_sums(flat[EDGE_MASK], edges)


def compact_hops(flat: Mapping[str, Tensor]
                 ) -> Tuple[Dict[str, Tensor], Tuple[List[int], List[int]]]:
    """The plain layout of a per-hop batch (no micro-batch dim), and its real per-hop
    counts (:func:`real_hop_counts`).

    Real rows (edges) keep their order, every block's before the next one's; the
    padding rows follow; ``edge_index`` is renumbered, padding edges become
    self-loops on the last row; ``batch`` / ``ptr`` are the plain layout's (real
    slot, padding slot); the per-hop keys are left out.
    """
    counts = real_hop_counts(flat)
    nm, em = flat[NODE_MASK], flat[EDGE_MASK]
    N, E, G = nm.numel(), em.numel(), flat[GRAPH_MASK].numel()
    # stable: real rows stay in block order (each block holds its real rows first)
    perm_n = torch.sort((~nm).to(torch.uint8), stable=True).indices
    perm_e = torch.sort((~em).to(torch.uint8), stable=True).indices
    new_row = torch.empty_like(perm_n)
    new_row[perm_n] = torch.arange(N)
    n, m = int(nm.sum()), int(em.sum())
    out: Dict[str, Tensor] = {}
    for k, v in flat.items():
        if k in HOP_KEYS:
            continue
        dim = cat_dim_of(k)
        rows = v.size(dim) if v.dim() else -1
        lv = levels_of_rows(rows, {"node": N, "edge": E, "graph": G})
        if k == "edge_index":
            ei = new_row[v[:, perm_e]]
            ei[:, m:] = padding_node(N)
            out[k] = ei
        elif k in (BATCH, PTR) or k == GRAPH_MASK:
            out[k] = v
        elif "edge" in lv and ("node" not in lv or "edge" in k):
            out[k] = v.index_select(dim, perm_e)
        elif "node" in lv:
            out[k] = v.index_select(dim, perm_n)
        else:
            out[k] = v
    # the plain layout's slots: real rows in slot 0, padding in slot 1 (a fill batch
    # keeps one padding row in slot 0: contract.slot_counts)
    n0 = max(n, 1)
    out[BATCH] = (torch.arange(N) >= n0).to(flat[BATCH].dtype)
    out[PTR] = torch.tensor([0, n0, N], dtype=flat[PTR].dtype)
    return {k: out[k] for k in flat if k in out}, counts
