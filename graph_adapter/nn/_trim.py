"""``ipu_wrap(model, trim=True)``: eager calls on the real rows only.

A padded batch from ``FixedSizeLoader`` keeps its real rows first
(``docs/dev/FORMAT.md``): real nodes ``0 .. n - 1`` then padding nodes, real
edges then padding edges, real graph slots then padding slots (hetero: per
node and edge type). So the real batch is a prefix of every key: node-level
keys ``[:n]``, edge-level ones ``[:e]`` (``edge_index`` columns), graph-level
ones ``[:g]``, ``ptr`` ``[:g + 1]``. An eager trimmed call slices the padded
dict to that prefix, runs the model on it as eager PyG would (no static-size
frame: no padding row exists to send self-loops or empty-graph sizes to, and
PyG's own ``int(index.max()) + 1`` is right on real rows), and pads every
output back to the padded path's shape with zero rows, so the caller sees
the same keys, shapes and dtypes, and the same real rows.

What a call needs is planned once per input signature (:class:`TrimPlan`,
from the padded spec: which key is sliced along which dim by which mask's
count, which keys are dropped); the first call of a signature runs the padded
path and records each output's level from its row count
(:meth:`TrimPlan.record`). A later call reads the real counts and the
prefix test of every mask in one host read (:meth:`TrimPlan.counts`) and
trims when all of these hold, else it runs the padded path:

* every mask is a prefix (``True ... True False ... False``);
* every level has at least two real rows (a plain ``BatchNorm1d`` in
  ``train()`` raises on one row; the masked one of the padded path does not);
* the last real graph slot holds a node of every node type (eager PyG pools to
  ``batch.max() + 1`` rows, which a trailing empty graph would shorten).

A signature is never trimmed when a key is none of node-, edge- or
graph-level (nor ``ptr`` or a layout table), when two masks have one length
(a hand-made dict that ties: the output levels would be ambiguous), or when a
mask is not boolean. The static aggregation tables of ``layout="ell"/"hyb"``
index padded edges and are dropped (the model never reads them: the static
routing runs only inside a frame).
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Mapping, Optional, Tuple

import torch
from torch import Tensor

from ..format import (GRAPH_MASK, LAYOUT_KEYS, LEVEL_OF_MASK, MASK_OF_LEVEL, PTR, BATCH,
                      cat_dim_of, is_index_attr, mask_key, parse_key)
from ..format import Spec

__all__ = ["TrimError", "TrimPlan", "MIN_ROWS"]

#: Fewer real rows than this at any level and the call takes the padded path.
MIN_ROWS = 2

class TrimError(RuntimeError):
    """A trimmed call's output does not fit the padded path's (its rows are not
    the real count of the level it had there, or its keys, dtype or shape differ)."""


@dataclasses.dataclass
class TrimPlan:
    """How to trim the dicts of one input signature (see the module doc).

    ``mask_keys`` / ``mask_rows``: every mask and its padded length, in key
    order (the order of :meth:`counts`); ``slices``: ``(key, mask index, dim,
    extra)``, the key keeps ``count + extra`` entries along ``dim`` (``ptr``:
    ``extra=1``); ``drop``: keys left out of the trimmed dict; ``batches``:
    ``(node mask index, batch key)`` pairs checked for a trailing empty
    graph; ``spec``: the padded spec without the dropped keys (``unflatten``
    reads keys, stores and attributes only, so it serves every trimmed
    shape); ``why_not``: why this signature is never trimmed (``None``:
    it is); ``outputs``: per output key ``(mask index or None, dim, shape,
    dtype)`` as the padded path returned it (``None`` until recorded).
    """

    mask_keys: Tuple[str, ...]
    mask_rows: Tuple[int, ...]
    graph_index: int
    slices: Tuple[Tuple[str, int, int, int], ...]
    drop: frozenset
    batches: Tuple[Tuple[int, str], ...]
    spec: Optional[Spec]
    why_not: Optional[str]
    outputs: Optional[Dict[str, Tuple[Optional[int], int, torch.Size, torch.dtype]]] = None

    def __post_init__(self) -> None:
        self._cut = {key: (mi, dim, extra) for key, mi, dim, extra in self.slices}

    # ------------------------------------------------------------------
    @classmethod
    def of(cls, flat: Mapping[str, Tensor], spec: Spec) -> "TrimPlan":
        """The plan for ``flat``'s signature (keys, shapes, dtypes only; no value read)."""
        mask_keys = tuple(k for k in flat if parse_key(k)[1] in LEVEL_OF_MASK)
        mask_rows = tuple(flat[k].size(-1) for k in mask_keys)
        index = {k: i for i, k in enumerate(mask_keys)}

        def never(why: str) -> "TrimPlan":
            return cls(mask_keys, mask_rows, -1, (), frozenset(), (), None, why)

        if GRAPH_MASK not in index:
            return never(f"no {GRAPH_MASK!r} key")
        if len(set(mask_rows)) != len(mask_rows):
            return never(f"two masks have one length ({dict(zip(mask_keys, mask_rows))}): "
                         f"an output's level would be ambiguous")
        for k in mask_keys:
            if flat[k].dtype != torch.bool or flat[k].dim() != 1:
                return never(f"mask {k!r} is not a 1-d bool tensor")
        slices: List[Tuple[str, int, int, int]] = []
        drop = set()
        batches: List[Tuple[int, str]] = []
        for f in spec.fields:
            store, attr = f.store, f.attr
            t = flat[f.key]
            if attr in LAYOUT_KEYS and not store:
                drop.add(f.key)  # index padded edges; used only inside a frame
                continue
            if attr == PTR:
                if t.dim() != 1 or t.size(0) != mask_rows[index[GRAPH_MASK]] + 1:
                    return never(f"{f.key!r} is not [G + 1]")
                slices.append((f.key, index[GRAPH_MASK], 0, 1))
                continue
            if f.level not in MASK_OF_LEVEL:
                return never(f"key {f.key!r} is neither node-, edge- nor graph-level "
                             f"({tuple(t.shape)})")
            mk = mask_key(store, f.level)
            mi = index.get(mk)
            dim = cat_dim_of(attr)
            if mi is None or t.dim() == 0 or t.size(dim) != mask_rows[mi]:
                return never(f"key {f.key!r} ({tuple(t.shape)}) has no rows of {mk!r}")
            slices.append((f.key, mi, dim % t.dim(), 0))
            if attr == BATCH and f.level == "node":
                batches.append((mi, f.key))
        trimmed = dataclasses.replace(spec, fields=tuple(f for f in spec.fields
                                                         if f.key not in drop))
        return cls(mask_keys, mask_rows, index[GRAPH_MASK], tuple(slices), frozenset(drop),
                   tuple(batches), trimmed, None)

    # ------------------------------------------------------------------
    def record(self, res: Mapping[str, Tensor]) -> None:
        """Remember the padded path's outputs: each one's level (the mask whose
        length its row count is: dim 0, or the last dim of an ``*index`` key),
        shape and dtype."""
        outputs = {}
        for k, v in res.items():
            mi, dim = None, 0
            if v.dim():
                dim = v.dim() - 1 if v.dim() >= 2 and is_index_attr(parse_key(k)[1]) else 0
                rows = v.size(dim)
                hits = [i for i, r in enumerate(self.mask_rows) if r == rows]
                mi = hits[0] if hits else None  # one at most: the plan has no two equal lengths
            outputs[k] = (mi, dim, v.shape, v.dtype)
        self.outputs = outputs

    def counts(self, flat: Mapping[str, Tensor]) -> Optional[List[int]]:
        """The real count of every mask (in ``mask_keys`` order), or ``None``
        when this dict is not to be trimmed (a mask that is not a prefix, a
        level with fewer than :data:`MIN_ROWS` real rows, a trailing graph slot
        without a node of some type). CPU tensors are read in place through
        numpy (a few microseconds); others with one host read (a sync)."""
        masks = [flat[k] for k in self.mask_keys]
        if all(m.device.type == "cpu" for m in masks):
            return self._counts_cpu(flat, masks)
        parts = []
        for k in self.mask_keys:
            m = flat[k]
            # argmin of a 0/1 view: the first False (0 when none): a prefix iff it is the count
            parts.append(m.sum())
            parts.append(m.view(torch.uint8).argmin())
        for mi, bk in self.batches:
            b = flat[bk]
            parts.append(torch.where(flat[self.mask_keys[mi]], b, b.new_zeros(())).max().long())
        vals = torch.stack(parts).tolist()
        k = len(self.mask_keys)
        counts = vals[0:2 * k:2]
        for i, (n, first_false) in enumerate(zip(counts, vals[1:2 * k:2])):
            if n < MIN_ROWS or (n != self.mask_rows[i] and first_false != n):
                return None
        g = counts[self.graph_index]
        for top in vals[2 * k:]:
            if top + 1 != g:
                return None
        return counts

    def _counts_cpu(self, flat: Mapping[str, Tensor], masks: List[Tensor]) -> Optional[List[int]]:
        # bytes of the numpy view (0/1 per bool; one small copy): the first False
        # is the count iff no True follows it. C-level scans, few Python steps:
        # this runs right after a model call, with the caches cold.
        counts = []
        for m in masks:
            raw = m.numpy().tobytes()
            n = raw.find(0)
            if n < 0:
                n = len(raw)
            elif raw.find(1, n) >= 0:
                return None  # not a prefix
            if n < MIN_ROWS:
                return None
            counts.append(n)
        g = counts[self.graph_index]
        for mi, bk in self.batches:
            # real nodes are a prefix and batch is sorted: the last real node
            # is in the last real graph iff that graph has a node
            if int(flat[bk].numpy()[counts[mi] - 1]) + 1 != g:
                return None
        return counts

    def trim(self, flat: Mapping[str, Tensor], counts: List[int]) -> Dict[str, Tensor]:
        """``flat`` cut to its real rows, in its own key order (layout tables left out)."""
        cut = self._cut
        out: Dict[str, Tensor] = {}
        for key, v in flat.items():
            c = cut.get(key)
            if c is not None:
                out[key] = v.narrow(c[1], 0, counts[c[0]] + c[2])
            elif key not in self.drop:
                out[key] = v
        return out

    def pad(self, res: Mapping[str, Tensor], counts: List[int]) -> Dict[str, Tensor]:
        """The trimmed call's outputs back at the padded path's shapes: zero rows
        appended along each output's level dim (differentiable: ``cat``)."""
        want = self.outputs
        assert want is not None
        if list(res) != list(want):
            raise TrimError(
                f"ipu_wrap(trim=True): the trimmed call returned the keys {list(res)}, the "
                f"padded call {list(want)}; a model whose output keys depend on the batch "
                f"cannot be trimmed: pass trim=False")
        out: Dict[str, Tensor] = {}
        for k, v in res.items():
            mi, dim, shape, dtype = want[k]
            if mi is None:
                if v.shape != shape or v.dtype != dtype:
                    raise TrimError(self._mismatch(k, v, shape, dtype, None))
                out[k] = v
                continue
            rows = counts[mi]
            expect = list(shape)
            expect[dim] = rows
            if list(v.shape) != expect or v.dtype != dtype:
                raise TrimError(self._mismatch(k, v, shape, dtype, (self.mask_keys[mi], rows)))
            missing = shape[dim] - rows
            if missing == 0:
                out[k] = v
            else:
                rest = list(shape)
                rest[dim] = missing
                out[k] = torch.cat([v, v.new_zeros(rest)], dim=dim)
        return out

    @staticmethod
    def _mismatch(key: str, v: Tensor, shape: torch.Size, dtype: torch.dtype,
                  level: Optional[Tuple[str, int]]) -> str:
        where = (f"{level[1]} rows (the real count of {level[0]!r}, the level its "
                 f"{shape} rows had on the padded path)" if level is not None else
                 f"the padded path's shape {tuple(shape)}")
        return (f"ipu_wrap(trim=True): output {key!r} of the trimmed call is "
                f"{tuple(v.shape)} {v.dtype}, expected {where}, {dtype}. The model sizes this "
                f"output from the padded budget or from data (e.g. to_dense_batch, a "
                f"remove_self_loops whose edges come out): pass trim=False (the padded path) "
                f"for this model.")
