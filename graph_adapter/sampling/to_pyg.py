"""A padded batch of a sampling loader back to the PyG object PyG's loader yields.

``loader.to_pyg(batch)`` (:func:`to_pyg`) turns one padded flat dict of
:class:`~graph_adapter.sampling.neighbor.FixedSizeNeighborLoader`,
:class:`~graph_adapter.sampling.hetero_neighbor.FixedSizeHeteroNeighborLoader`,
:class:`~graph_adapter.sampling.link.FixedSizeLinkNeighborLoader` or
:class:`~graph_adapter.sampling.cluster.FixedSizeClusterLoader` into the
``Data`` / ``HeteroData`` that PyG's ``NeighborLoader`` / ``LinkNeighborLoader``
/ ``ClusterLoader`` yields for the same sample: padding rows, edges and slots
dropped, and the attributes PyG's loaders add, named as PyG names them:

* node loaders: ``n_id``, ``e_id``, ``input_id`` (the seeds' positions in
  ``input_nodes`` where it was an index; their node ids for ``None`` or a bool
  mask, as PyG), ``batch_size`` (the seeds of this batch), ``batch``
  (``disjoint=True``: each row's seed), ``num_sampled_nodes`` /
  ``num_sampled_edges`` (per hop, PyG's pyg-lib layout; absent where PyG's
  sampler gives none: the induced subgraph);
* the link loader: the same plus ``edge_label_index`` / ``edge_label`` (binary)
  or ``src_index`` / ``dst_pos_index`` / ``dst_neg_index`` (triplet), the real
  slots only; no ``batch_size`` (PyG's link batches have none);
* the cluster loader: the attributes of the graph only, as ``ClusterLoader``
  (no ``n_id``: read it from the padded batch);
* graph-level attributes of the input graph, which the padded batches leave
  out, come back as they are (PyG copies them into every batch).

A micro-batched batch (``[F, ...]``) gives a list of ``F`` objects. The rows,
edges and slots are in the padded batch's order, which is PyG's where PyG
defines one (seeds first, hop by hop; ``tests/sampling/test_pyg_equivalence.py``
and ``tests/sampling/pyg_mirror/`` hold it).
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from ..contract import EDGE_LABEL_TIME, SEED_TIME
from ..format import (BATCH, DST_NEG_INDEX, DST_POS_INDEX, E_ID, EDGE_LABEL, EDGE_LABEL_INDEX,
                      EDGE_MASK, HOP_EDGES, HOP_NODES, INPUT_ID, LINK_KEYS, LINK_MASK, N_ID,
                      NODE_MASK, SEED_MASK, SEED_OF, SRC_INDEX, compact_hops,
                      has_micro_batch_dim, is_hetero, is_per_hop, key_of, split_micro_batches)

__all__ = ["to_pyg", "sampled_per_hop", "ForeignBatchError"]


class ForeignBatchError(ValueError):
    """``loader.to_pyg(d)`` of a dict that is not one of the loader's padded batches."""

#: The attribute PyG's node loaders add to a sampled batch for its seeds' count (the
#: per-hop counts are the contract's ``HOP_NODES`` / ``HOP_EDGES``: PyG's names).
BATCH_SIZE = "batch_size"
NUM_SAMPLED_NODES, NUM_SAMPLED_EDGES = HOP_NODES, HOP_EDGES
_EDGE_INDEX = "edge_index"
_SEED_TIME, _EDGE_LABEL_TIME = SEED_TIME, EDGE_LABEL_TIME
_NUM_NODES = "num_nodes"


def to_pyg(loader: Any, flat: Mapping[str, Tensor]) -> Union[Any, List[Any]]:
    """The PyG object PyG's loader yields for the sample of padded batch ``flat``.

    Args:
        loader: the loader that yielded ``flat`` (its graph, settings and seeds
            say what PyG's loader would have added).
        flat: one padded batch of ``loader`` (``[F, ...]`` micro-batched: a list).

    Returns:
        A ``Data`` (``HeteroData`` for a hetero loader), or a list of ``F`` of them.

    Raises:
        ForeignBatchError: ``flat`` lacks a key every batch of ``loader`` has (it is
            not one of its batches: an unpadded object, another loader's dict).
    """
    _check_batch(loader, flat)
    if has_micro_batch_dim(flat):
        return [to_pyg(loader, one) for one in split_micro_batches(flat)]
    if is_hetero(flat):
        return _hetero(loader, flat)
    return _homo(loader, flat)


def _check_batch(loader: Any, flat: Any) -> None:
    """Raise :class:`ForeignBatchError` naming what a batch of ``loader`` has and ``flat`` lacks."""
    name = type(loader).__name__
    if not isinstance(flat, Mapping):
        raise ForeignBatchError(f"{name}.to_pyg: got a {type(flat).__name__}; pass a padded "
                                f"batch this loader yielded (a dict of tensors)")
    hetero = hasattr(loader, "seed_type") or is_hetero(flat)
    masks = [k for k in flat if k.rsplit("/", 1)[-1] == NODE_MASK] if hetero else \
        [k for k in (NODE_MASK, EDGE_MASK, N_ID, _EDGE_INDEX) if k in flat]
    want = 1 if hetero else 4
    if len(masks) < want:
        missing = "a '<node_type>/node_mask' key" if hetero else \
            sorted({NODE_MASK, EDGE_MASK, N_ID, _EDGE_INDEX} - set(flat))
        raise ForeignBatchError(
            f"{name}.to_pyg: the dict lacks {missing} (keys {sorted(flat)[:8]}...), which every "
            f"batch of this loader has: pass a padded batch it yielded (for an unpadded PyG "
            f"object there is nothing to convert)")


# --------------------------------------------------------------------------
# per-hop counts
# --------------------------------------------------------------------------
def sampled_per_hop(edge_index: Tensor, num_nodes: int, num_seeds: int, hops: int
                    ) -> Tuple[List[int], List[int]]:
    """``(num_sampled_nodes [hops + 1], num_sampled_edges [hops])`` of a directed sample.

    A directed sample expands every node once, in the hop after the one that
    added it, and lays its rows and edges out hop by hop, so the hops can be
    read back from the edges: the edges of hop ``h`` are those into the rows of
    hop ``h - 1``, and the rows of hop ``h`` the sources of those edges not seen
    before.

    Args:
        edge_index: ``[2, m]`` local rows (source, destination), real edges only.
        num_nodes: real rows; num_seeds: the first rows that are seeds.
        hops: the number of hops (``len(num_neighbors)``).

    Returns:
        PyG's ``num_sampled_nodes`` and ``num_sampled_edges`` lists.
    """
    hop = torch.full((num_nodes,), -1, dtype=torch.long)
    hop[:num_seeds] = 0
    src, dst = edge_index[0].long(), edge_index[1].long()
    nodes, edges = [num_seeds], []
    for h in range(1, hops + 1):
        into = hop[dst] == h - 1
        edges.append(int(into.sum()))
        new = src[into]
        new = new[hop[new] < 0]
        hop[new] = h
        nodes.append(int((hop == h).sum()))
    return nodes, edges


def _hops(loader: Any) -> Optional[int]:
    """Hops of the loader's sampler, or ``None`` where PyG gives no per-hop counts (the
    induced subgraph: PyG's torch-sparse path; the cluster loader)."""
    fan = getattr(loader, "num_neighbors", None)
    if fan is None or not getattr(loader, "directed", True):
        return None
    if getattr(loader, "subgraph_type", None) in ("induced",):
        return None
    if isinstance(fan, dict):
        return len(next(iter(fan.values()))) if fan else 0
    return len(fan)


def _bidirectional(loader: Any) -> bool:
    """PyG's ``subgraph_type="bidirectional"``: no per-hop counts (its hops are merged)."""
    st = getattr(loader, "subgraph_type", None)
    return str(getattr(st, "value", st)) == "bidirectional"


# --------------------------------------------------------------------------
# homogeneous
# --------------------------------------------------------------------------
def _homo(loader: Any, flat: Mapping[str, Tensor]) -> Any:
    from torch_geometric.data import Data

    hop_counts = None
    if is_per_hop(flat):  # per-hop blocks: the plain layout, and the blocks' real counts
        flat, hop_counts = compact_hops(flat)
    n, m = int(flat[NODE_MASK].sum()), int(flat[EDGE_MASK].sum())
    seeds = int(flat[SEED_MASK].sum()) if SEED_MASK in flat else n
    cluster = _is_cluster(loader)
    node_attrs = dict(getattr(loader, "node_attrs", {}))
    edge_attrs = dict(getattr(loader, "edge_attrs", {}))
    keep_n = seeds if cluster and getattr(loader, "keep_inter_cluster_edges", False) else n
    out = Data()
    data = getattr(loader, "data", None)
    if not hasattr(data, "is_node_attr"):  # a (FeatureStore, GraphStore) pair: its columns
        data = None
    order = list(data.keys()) if data is not None else []
    order += [k for k in flat if k not in order]
    ei = flat[_EDGE_INDEX][:, :m]
    for k in order:
        if k == _EDGE_INDEX:
            out[k] = cluster_edge_index(loader, flat, ei) if cluster else ei
        elif k in node_attrs and k in flat:
            out[k] = flat[k][:keep_n]
        elif k in edge_attrs and k in flat:
            out[k] = flat[k][:m]
        elif _graph_level(data, k, flat, node_attrs, edge_attrs):
            out[k] = data[k]  # PyG copies a graph-level attribute into every batch
    if _EDGE_INDEX not in out:
        out[_EDGE_INDEX] = ei
    if cluster:
        if not node_attrs or (data is not None and _NUM_NODES in data.keys()):
            out.num_nodes = keep_n
        return out
    out[N_ID] = flat[N_ID][:n]
    if E_ID in flat:  # (PyG's bidirectional keeps one id an edge pair; so does the batch)
        out[E_ID] = flat[E_ID][:m]
    if SEED_OF in flat:
        out[BATCH] = flat[SEED_OF][:n]
    _per_hop_homo(loader, out, ei, n, seeds, hop_counts)
    if getattr(loader, "neg_sampling", False) is not False:  # a link loader
        _links(loader, flat, out)
        return out
    out[INPUT_ID] = _input_id(loader, flat[N_ID][:seeds])
    out[BATCH_SIZE] = seeds
    seed_time = _seed_time(loader, flat, flat[N_ID][:seeds], None)
    if seed_time is not None:
        out[_SEED_TIME] = seed_time
    if not node_attrs or (data is not None and _NUM_NODES in data.keys()):
        out.num_nodes = n
    return out


def _graph_level(data: Any, k: str, flat: Mapping[str, Tensor], node_attrs: Mapping[str, Any],
                 edge_attrs: Mapping[str, Any]) -> bool:
    """Whether ``k`` is an attribute of the input graph that PyG copies into a batch as it
    is: neither node- nor edge-level, not in the padded batch, not a supervision key."""
    if data is None or k in flat or k in LINK_KEYS or k == _NUM_NODES or k in node_attrs \
            or k in edge_attrs or k not in data.keys():
        return False
    return not (data.is_node_attr(k) or data.is_edge_attr(k))


def _per_hop_homo(loader: Any, out: Any, ei: Tensor, n: int, seeds: int,
                  hop_counts: Optional[Tuple[List[int], List[int]]]) -> None:
    """PyG's ``num_sampled_nodes`` / ``num_sampled_edges``: a per-hop batch's real block
    counts, else read back from the sample's hop order (:func:`sampled_per_hop`)."""
    if hop_counts is not None:
        out[NUM_SAMPLED_NODES], out[NUM_SAMPLED_EDGES] = list(hop_counts[0]), list(hop_counts[1])
        return
    hops = _hops(loader)
    if hops is None or _bidirectional(loader):
        return
    out[NUM_SAMPLED_NODES], out[NUM_SAMPLED_EDGES] = sampled_per_hop(ei, n, seeds, hops)


def _seed_time(loader: Any, flat: Mapping[str, Tensor], seed_ids: Tensor,
               seed_type: Optional[str]) -> Optional[Tensor]:
    """PyG's ``seed_time`` of a temporal node batch: each seed's ``input_time``, else its
    node time; ``None`` where the loader samples without time."""
    if getattr(loader, "time_attr", None) is None:
        return None
    k = key_of((seed_type,) if seed_type else (), _SEED_TIME)
    if k in flat:
        return flat[k][:seed_ids.numel()]
    lookup = getattr(loader, "seed_times_of", None)
    t = lookup(seed_ids) if lookup is not None else None
    if t is not None:
        return t
    node_time = getattr(loader, "node_time", None)
    if isinstance(node_time, Mapping):
        node_time = node_time.get(seed_type)
    return None if node_time is None else node_time[seed_ids]


def _input_id(loader: Any, seed_ids: Tensor) -> Tensor:
    """PyG's ``input_id``: the seeds' positions in ``input_nodes`` where it was an index,
    else (``None``, a bool mask) their node ids."""
    if not getattr(loader, "input_is_index", False):
        return seed_ids.clone()
    order = getattr(loader, "seeds")
    srt, perm = torch.sort(order)
    return perm[torch.searchsorted(srt, seed_ids)]


def _links(loader: Any, flat: Mapping[str, Tensor], out: Any) -> None:
    """The link loader's supervision keys, the real slots only, named as PyG's."""
    real = flat[LINK_MASK]
    s = int(real.sum())
    pos = flat[INPUT_ID] >= 0
    out[INPUT_ID] = flat[INPUT_ID][pos]
    if getattr(loader, "neg_sampling", None) == "triplet" or SRC_INDEX in flat:
        for k in (SRC_INDEX, DST_POS_INDEX, DST_NEG_INDEX):
            out[k] = flat[k][:s]
        if _SEED_TIME in flat:
            out[_SEED_TIME] = flat[_SEED_TIME][:s]
        return
    out[EDGE_LABEL_INDEX] = flat[EDGE_LABEL_INDEX][:, :s]
    if EDGE_LABEL in flat:
        out[EDGE_LABEL] = flat[EDGE_LABEL][:s]
    if _EDGE_LABEL_TIME in flat:
        out[_EDGE_LABEL_TIME] = flat[_EDGE_LABEL_TIME][:s]


# --------------------------------------------------------------------------
# the cluster loader
# --------------------------------------------------------------------------
def _is_cluster(loader: Any) -> bool:
    return hasattr(loader, "partptr") and hasattr(loader, "node_perm")


def cluster_edge_index(loader: Any, flat: Mapping[str, Tensor], ei: Tensor) -> Tensor:
    """The cluster batch's ``edge_index`` as PyG's: local rows; with
    ``keep_inter_cluster_edges`` the outer side (the destination for
    ``sparse_format="csr"``, the source for ``"csc"``) in ``ClusterData``'s
    permuted node numbering, as ``ClusterData[i]`` gives it."""
    if not getattr(loader, "keep_inter_cluster_edges", False):
        return ei
    rank = torch.empty_like(loader.node_perm)
    rank[loader.node_perm] = torch.arange(loader.node_perm.numel())
    side = 1 if getattr(loader, "sparse_format", "csr") == "csr" else 0
    n = int(flat[NODE_MASK].sum())
    out = ei.clone()
    out[side] = rank[flat[N_ID][:n][ei[side]]]
    return out


# --------------------------------------------------------------------------
# heterogeneous
# --------------------------------------------------------------------------
def _types(flat: Mapping[str, Tensor]) -> Tuple[List[str], List[Tuple[str, ...]]]:
    """The node and edge types of a hetero flat dict, in key order."""
    nts: List[str] = []
    ets: List[Tuple[str, ...]] = []
    for k in flat:
        store = tuple(k.rsplit("/", 1)[0].split("__")) if "/" in k else ()
        if len(store) == 1 and store[0] not in nts:
            nts.append(store[0])
        elif len(store) == 3 and store not in ets:
            ets.append(store)
    return nts, ets


def _hetero(loader: Any, flat: Mapping[str, Tensor]) -> Any:
    from torch_geometric.data import HeteroData

    data = getattr(loader, "data", None)
    nts, ets = _types(flat)
    if data is not None and hasattr(data, "node_types"):
        nts = [t for t in data.node_types if t in nts] + [t for t in nts if t not in data.node_types]
        ets = [tuple(e) for e in data.edge_types if tuple(e) in ets] + \
              [e for e in ets if e not in [tuple(x) for x in data.edge_types]]
    out = HeteroData()
    n = {t: int(flat[key_of((t,), NODE_MASK)].sum()) for t in nts}
    # an edge type of supervision keys only (a link loader's type the graph has no edges
    # of): no edges, as PyG's batch holds none there
    m = {e: int(flat[key_of(e, EDGE_MASK)].sum()) if key_of(e, EDGE_MASK) in flat else 0
         for e in ets}
    node_attrs = getattr(loader, "node_attrs", {})
    edge_attrs = getattr(loader, "edge_attrs", {})
    for t in nts:
        attrs = node_attrs.get(t, {})
        for a in attrs:
            k = key_of((t,), a)
            if k in flat:
                out[t][a] = flat[k][:n[t]]
        out[t][N_ID] = flat[key_of((t,), N_ID)][:n[t]]
        if not any(a in out[t] for a in attrs):
            out[t].num_nodes = n[t]
        if key_of((t,), SEED_OF) in flat:
            out[t][BATCH] = flat[key_of((t,), SEED_OF)][:n[t]]
    for e in ets:
        if key_of(e, _EDGE_INDEX) not in flat:
            continue
        out[e][_EDGE_INDEX] = flat[key_of(e, _EDGE_INDEX)][:, :m[e]]
        # (a bidirectional type merged with its reverse has no ids, as PyG's: not in the batch)
        for a in edge_attrs.get(e, {}):
            k = key_of(e, a)
            if k in flat:
                out[e][a] = flat[k][:m[e]]
        if key_of(e, E_ID) in flat:
            out[e][E_ID] = flat[key_of(e, E_ID)][:m[e]]
    seed_type = getattr(loader, "seed_type", None)
    seed_mask = {t: flat[key_of((t,), SEED_MASK)] for t in nts if key_of((t,), SEED_MASK) in flat}
    seeds = {t: int(v.sum()) for t, v in seed_mask.items()}
    _per_hop_hetero(loader, flat, out, nts, ets, n, seeds)
    link_store = [e for e in ets if key_of(e, LINK_MASK) in flat] + \
                 [(t,) for t in nts if key_of((t,), LINK_MASK) in flat]
    if link_store or getattr(loader, "neg_sampling", False) is not False:
        _hetero_links(loader, flat, out, link_store)
        return out
    if seed_type is None and seeds:
        seed_type = next(iter(seeds))
    if seed_type is not None:
        b = seeds.get(seed_type, 0)
        out[seed_type][INPUT_ID] = _input_id(loader, out[seed_type][N_ID][:b])
        out[seed_type][BATCH_SIZE] = b
        seed_time = _seed_time(loader, flat, out[seed_type][N_ID][:b], seed_type)
        if seed_time is not None:
            out[seed_type][_SEED_TIME] = seed_time
    return out


def _per_hop_hetero(loader: Any, flat: Mapping[str, Tensor], out: Any, nts: Sequence[str],
                    ets: Sequence[Tuple[str, ...]], n: Mapping[str, int],
                    seeds: Mapping[str, int]) -> None:
    """PyG's per-type ``num_sampled_nodes`` / ``num_sampled_edges`` (see
    :func:`sampled_per_hop`; every node type of the seeds' hop ``0`` at its seed count)."""
    have = [t for t in nts if key_of((t,), NUM_SAMPLED_NODES) in flat]
    if have:
        for t in nts:
            k = key_of((t,), NUM_SAMPLED_NODES)
            if k in flat:
                out[t][NUM_SAMPLED_NODES] = [int(v) for v in flat[k].reshape(-1)]
        for e in ets:
            k = key_of(e, NUM_SAMPLED_EDGES)
            if k in flat:
                out[e][NUM_SAMPLED_EDGES] = [int(v) for v in flat[k].reshape(-1)]
        return
    hops = _hops(loader)
    if hops is None or _bidirectional(loader):
        return
    hop = {t: torch.full((n[t],), -1, dtype=torch.long) for t in nts}
    for t in nts:
        hop[t][:seeds.get(t, 0)] = 0
    nodes = {t: [seeds.get(t, 0)] for t in nts}
    ets = [e for e in ets if _EDGE_INDEX in out[e]]  # not a supervision-only edge type
    edges: Dict[Tuple[str, ...], List[int]] = {e: [] for e in ets}
    eis = {e: out[e][_EDGE_INDEX].long() for e in ets}
    for h in range(1, hops + 1):
        new: Dict[str, List[Tensor]] = {t: [] for t in nts}
        for e in ets:
            src, dst = eis[e]
            into = hop[e[2]][dst] == h - 1
            edges[e].append(int(into.sum()))
            new[e[0]].append(src[into])
        for t in nts:
            if new[t]:
                cand = torch.cat(new[t])
                cand = cand[hop[t][cand] < 0]
                hop[t][cand] = h
            nodes[t].append(int((hop[t] == h).sum()))
    for t in nts:
        out[t][NUM_SAMPLED_NODES] = nodes[t]
    for e in ets:
        out[e][NUM_SAMPLED_EDGES] = edges[e]


def _hetero_links(loader: Any, flat: Mapping[str, Tensor], out: Any,
                  stores: Sequence[Tuple[str, ...]]) -> None:
    """A hetero link batch's supervision keys, real slots only, on PyG's stores:
    ``input_id`` / ``edge_label_index`` / ``edge_label`` / ``edge_label_time`` on the
    edge type; ``src_index`` (and ``seed_time``) on its source node type,
    ``dst_pos_index`` / ``dst_neg_index`` (and ``seed_time``) on its destination type,
    wherever the padded batch keeps them."""
    for st in stores:
        s = int(flat[key_of(st, LINK_MASK)].sum())
        edge = st if len(st) == 3 else None
        for a in (INPUT_ID, EDGE_LABEL_INDEX, EDGE_LABEL, _EDGE_LABEL_TIME, SRC_INDEX,
                  DST_POS_INDEX, DST_NEG_INDEX, _SEED_TIME):
            k = key_of(st, a)
            if k not in flat:
                continue
            v = flat[k]
            if a == INPUT_ID:
                v = v[v >= 0]
            elif a == EDGE_LABEL_INDEX:
                v = v[:, :s]
            else:
                v = v[:s]
            if edge is None:
                out[st[0]][a] = v
            elif a == SRC_INDEX:
                out[edge[0]][a] = v
            elif a in (DST_POS_INDEX, DST_NEG_INDEX):
                out[edge[2]][a] = v
            elif a == _SEED_TIME:
                out[edge[0]][a] = v
                out[edge[2]][a] = v
            else:
                out[edge][a] = v
