"""The inverse of padded collate: a padded flat dict back to its real graphs.

``unpad_batch(flat, schema)`` gives the real graphs of a batch as ``Data``
(``HeteroData``) objects, in the order they were packed: padding rows (past
the masks' real counts) and padding graphs are dropped, index attributes
shifted back by their node offsets (PyG's ``__inc__``), and a micro-batched
dict gives the graphs of every micro-batch in order. With the collator's
``schema`` every key comes back exactly; without it, levels are guessed
from the row counts (``docs/batching.md``).
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .keys import Dim, BATCH, EDGE_MASK, GRAPH_MASK, LAYOUT_KEYS, NODE_MASK, PTR, RESERVED_KEYS, is_hetero, is_index_attr, key_of, levels_of_rows, parse_key
from .micro import has_micro_batch_dim, split_micro_batches
from .spec import Field

__all__ = ["unpad_batch", "unpad_hetero", "inc_dims"]


def inc_dims(f: Field) -> Tuple[Dim, Dim]:
    """The node dims whose counts offset an ``inc == "nodes"`` key: (source, destination)."""
    if len(f.store) == 3:
        return ("node", (f.store[0],)), ("node", (f.store[2],))
    return ("node", f.store), ("node", f.store)


def unpad_batch(flat: Mapping[str, Tensor], schema: Optional[Sequence[Field]] = None,
                levels: Optional[Mapping[str, str]] = None) -> List[Any]:
    """Give back the real graphs of a padded flat dict as ``Data`` (``HeteroData``) objects.

    ``schema`` (``Collator.schema`` / ``FixedSizeLoader.schema``) restores
    every key exactly (0-d graph attributes, custom increments).  Without it,
    ``levels`` (``{key: "node"|"edge"|"graph"}``) or a guess from the row
    counts is used, and keys named like indices (``*index*``, ``face``) are
    shifted back by the node offsets.  A micro-batched dict
    (``graph_mask.dim() == 2``) gives the graphs of all micro-batches in order.
    """
    return _unpad(flat, schema, (), (), levels)


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
    hetero = is_hetero(flat)
    if hetero and not node_types:  # the stores, from the format's own keys
        node_types = [parse_key(k)[0][0] for k in flat if parse_key(k)[1] == PTR]
        edge_types = [parse_key(k)[0] for k in flat if parse_key(k)[1] == EDGE_MASK]
    node_stores = [(nt,) for nt in node_types] if hetero else [()]
    edge_stores = [tuple(et) for et in edge_types] if hetero else [()]
    g = int(flat[GRAPH_MASK].sum())
    G = flat[GRAPH_MASK].numel()
    n_i, n_off = {}, {}
    for st in node_stores:
        ptr = flat[key_of(st, PTR)].long()
        n_i[st], n_off[st] = ptr[1:g + 1] - ptr[:g], ptr[:g]
    e_i = {st: _edge_counts(flat, st, g) for st in edge_stores}
    specs = {f.key: f for f in schema} if schema is not None else {}
    parts: Dict[Field, List[Tensor]] = {}
    for k, v in flat.items():
        if parse_key(k)[1] in RESERVED_KEYS or k in LAYOUT_KEYS or (hetero and specs and k not in specs):
            continue  # (hetero with a schema: the schema's keys only)
        f = specs.get(k) or _guess_field(k, v, flat, levels or {}, G)
        parts[f] = _split(f, v, g, G, n_i, n_off, e_i)
    return [_build(parts, j, hetero, node_stores, n_i, specs) for j in range(g)]


def _edge_counts(flat: Mapping[str, Tensor], st: Tuple[str, ...], g: int) -> Tensor:
    """Real edges of every real graph of one edge store (from its source nodes' graphs)."""
    e_real = int(flat[key_of(st, EDGE_MASK)].sum())
    ei = flat.get(key_of(st, "edge_index"))
    if ei is None:
        if e_real:
            raise ValueError("unpad_batch: cannot split edges without edge_index")
        return torch.zeros(g, dtype=torch.long)
    if not e_real:
        return torch.zeros(g, dtype=torch.long)
    src_store = st[:1]
    src = ei[0, :e_real].long()
    return torch.bincount(flat[key_of(src_store, BATCH)].long()[src], minlength=g)[:g]


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
        cnt = n_i[f.store]
    else:
        cnt = e_i[f.store]
    m = int(cnt.sum())
    out = []
    for j, p in enumerate(torch.split(vv[:m], cnt.tolist()) if g else []):
        if f.inc == "nodes":
            (_, src), (_, dst) = inc_dims(f)
            sub = n_off[src][j] if src == dst else torch.stack([n_off[src][j], n_off[dst][j]])
            p = p - sub.to(p.dtype)
        # (custom increments cannot be undone from the flat dict alone)
        if cat != 0:
            p = p.movedim(0, cat)
        if f.scalar:
            p = p.reshape(())
        out.append(p.contiguous())
    return out


def _build(parts: Mapping[Field, List[Tensor]], j: int, hetero: bool, node_stores,
           n_i, specs: Mapping[str, Field]) -> Any:
    """Real graph ``j`` as a ``Data`` / ``HeteroData``."""
    from torch_geometric.data import Data, HeteroData

    if hetero:
        h = HeteroData()
        for st in node_stores:
            h[st[0]].num_nodes = int(n_i[st][j])
        for f, ps in parts.items():
            (h[f.store if len(f.store) == 3 else f.store[0]] if f.store else h)[f.attr] = ps[j]
        return h
    d = Data(**{f.attr: ps[j] for f, ps in parts.items()})
    if not any((f.key in specs and f.level == "node") or f.attr == "x" for f in parts):
        d.num_nodes = int(n_i[()][j])
    return d
