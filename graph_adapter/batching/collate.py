"""Padded collate: a list of graphs straight to a fixed-size flat dict.

No ``Batch.from_data_list``: outputs are preallocated at the budget's shape,
offsets come from cumulative sums, and copies are numpy gathers
(:mod:`graph_adapter.batching._gather`) from a *columnar* copy of the dataset, built
once by :class:`Collator` in one pass (:mod:`graph_adapter.batching._scan`).  A
homogeneous graph is the one-store case of a hetero one: one collator, one
unpad.

Padding convention (the rules are :mod:`graph_adapter.contract`'s: ``misfit``,
``slot_counts``, ``padding_node``, ``pad_value``), per node type / edge type
(homogeneous: the one store):

* real graphs come first, in the order given; real nodes/edges/graph rows
  occupy the leading rows of every tensor, exactly as ``Batch.from_data_list``
  would lay them out (``edge_index`` offset by ``ptr``);
* padding nodes (at least two: the budget reserves them, see
  :data:`graph_adapter.batching.budget.RESERVED_NODES`) fill the padding graph slots
  ``g .. G - 1``: one each while they last, the rest in the last slot
  ``G - 1`` (so ``batch.max() == G - 1`` and the padding edges' node
  ``N - 1`` is in it).  No padding slot is empty when there are at least as
  many padding nodes as padding slots, which the packer guarantees (see
  :func:`graph_adapter.batching.packing.plan_epoch`): every per-graph op (log of a
  sum, max, softmax...) then sees a non-empty set on padding rows too, so
  its value and gradient stay finite;
* padding edges run from the last node ``N - 1`` of the source type to the
  last node of the destination type (both padding nodes), so they never touch
  a real node; a batch with exactly ``E`` real edges has no padding edge;
* padding features are zero; graph-level float rows of padding slots are NaN,
  integer/bool ones 0;
* boolean ``node_mask`` [N], ``edge_mask`` [E], ``graph_mask`` [G] mark real
  rows.

Keys: every tensor attribute of the graphs, with PyG's collate semantics
(``__cat_dim__``, ``__inc__``), plus ``batch``, ``ptr`` and the masks, named
by :func:`graph_adapter.contract.key_of`.  A homogeneous key's level (node, edge
or graph) is decided as PyG does on the first graph, checked against every
graph of the dataset.  Non-tensor attributes (e.g. a ``smiles`` string) cannot
live in a tensor dict: they are excluded, listed in ``excluded_keys`` and
reported with a warning.
"""
from __future__ import annotations

import warnings
from typing import Any, Collection, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

from ._gather import Gather
from ._layout import LAYOUTS, DegreeWidthError, fit_layout, graph_of_node, layout_tables
from ._scan import TRIM_FROM, Scan, release_freed_memory
from .budget import RESERVED_NODES, Budget
from ..contract import dtype_name, pad_value, padding_node, slot_counts
from ..format import (BATCH, EDGE_MASK, GRAPH_MASK, NODE_MASK, PTR, key_of,
                      stack_micro_batches, store_name)
from .packing import GraphSizes
from ..format import Field
from ..format import dim_of, inc_dims, set_key, unpad_hetero

__all__ = ["Collator", "collate_padded"]


class _Step:
    """How one key of a batch is made: a gather plus where its rows and offsets come from."""

    __slots__ = ("field", "gather", "rows_of", "per", "src", "dst", "ones")

    def __init__(self, field: Field, gather: Gather, rows_of: Any, per: Optional[int],
                 src: int, dst: int):
        self.field = field
        self.gather = gather
        self.rows_of = rows_of  # key of the gather index: a size-dim column, or ("graph", rows)
        self.per = per  # size-dim column of the per-graph row counts (None: graph level)
        self.src, self.dst = src, dst  # node-offset columns (inc == "nodes")
        self.ones = (1,) * len(field.trail)


class Collator:
    """Padded collate for one dataset (``Data`` or ``HeteroData``) and one budget.

    Built once (one pass over ``dataset``: sizes, schema checks and, with
    ``columnar=True``, a columnar copy of every tensor attribute, so that a
    batch is a gather).  Call :meth:`collate_indices` with dataset indices
    (columnar) or :meth:`collate` with graph objects.

    Args:
        dataset: a PyG dataset or a list of ``Data`` (a homogeneous
            :class:`Budget`) or of ``HeteroData`` (a hetero one).
        budget: the fixed batch shape.
        columnar: keep a columnar copy of the dataset (memory: one more copy
            of the tensors) for the fastest collate.
        index_dtype: dtype of index tensors on the host (``edge_index`` and
            other incremented keys, ``batch``, ``ptr``): ``torch.int64``
            (PyG's) or ``torch.int32`` (what poptorch narrows to anyway).
        warn: warn about excluded (non-tensor) keys.
        exclude: keys to leave out on purpose (``"smiles"``, ``"paper/year"``):
            listed in ``excluded_keys`` without a warning.
        validate: check every index key of every graph (integer dtype,
            ``edge_index`` of shape ``[2, E]``, ``0 <= index < num_nodes`` of
            its graph) and raise naming the graph; ``False`` skips the
            range check (see ``docs/batching.md`` for its cost).
        layout: ``None`` or ``"ell"``: also emit the ELL neighbour tables
            ``in_slots`` ``[N, Din]`` / ``out_slots`` ``[N, Dout]`` (ids of each
            node's real in-/out-edges, padded with ``E``), which a wrapped
            model's PyG layers then aggregate through
            (:mod:`graph_adapter.nn.static_layout`). Homogeneous only.
            ``"hyb"``: narrower tables plus ``[2, K]`` lists of the edges past
            a node's width (``in_spill`` / ``out_spill``, see ``_layout.py``).
        layout_widths: ``(Din, Dout)``; default: the dataset's largest in- and
            out-degree (``"hyb"``: the 99.5th percentile of the degrees). A
            graph with a node beyond them (``"hyb"``: a batch spilling more
            than the capacity fitted from the dataset) raises
            :class:`~graph_adapter.batching._layout.DegreeWidthError` naming it.
        layout_spills: ``"hyb"`` only, with ``layout_widths``: the spill
            capacities ``(Kin, Kout)`` instead of fitting them; with the
            widths, what another collator fitted (``layout_widths`` /
            ``layout_spills`` of a loader over a superset), so that two
            loaders (train, test) give batches of one shape.

    Hetero keys follow ``docs/dev/FORMAT.md``: ``<node_type>/<attr>`` plus
    ``<node_type>/batch``, ``/ptr``, ``/node_mask`` for every node type,
    ``<src>__<rel>__<dst>/<attr>`` plus ``/edge_mask`` for every edge type,
    bare graph-level attributes and ``graph_mask``.  Key order: stores in PyG
    order (node types, edge types, global store), names sorted within a store.

    Returns:
        :meth:`collate_indices` / :meth:`collate`: one flat dict ``{key: tensor}`` of
        the budget's shapes; :meth:`unpad` turns one back into the graphs.

    Raises:
        ValueError: graphs the budget cannot batch, or that disagree with each other
            (an attribute's dtype or trailing shape, a bad index: named by graph and
            key), a bad ``layout`` / ``index_dtype`` / widths.
        TypeError: a dataset item that is not a ``Data`` / ``HeteroData``, or an
            attribute that cannot be collated.

    Example:
        ```python
        from torch_geometric.datasets import FakeDataset

        from graph_adapter import Budget, Collator

        graphs = FakeDataset(num_graphs=20, avg_num_nodes=10)
        collator = Collator(graphs, Budget.tight(graphs, 4))
        flat = collator.collate_indices([0, 1, 2])  # graphs 0-2 padded to the budget
        assert flat["graph_mask"].sum() == 3 and len(collator.unpad(flat)) == 3
        ```
    """

    def __init__(self, dataset: Sequence[Any], budget: Budget, *, columnar: bool = True,
                 index_dtype: torch.dtype = torch.int64, warn: bool = True,
                 exclude: Collection[str] = (), validate: bool = True,
                 layout: Optional[str] = None, layout_widths: Optional[Tuple[int, int]] = None,
                 layout_spills: Optional[Tuple[int, int]] = None):
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be None, 'ell' or 'hyb', got {layout!r}")
        if index_dtype not in (torch.int64, torch.int32):
            raise ValueError(f"index_dtype must be torch.int64 or torch.int32, got {index_dtype}")
        if isinstance(exclude, str):
            exclude = (exclude,)
        self.validate = bool(validate)
        self._setup(Scan(dataset, budget, columnar, exclude=exclude, validate=validate), budget,
                    columnar, index_dtype)
        self.layout = layout
        self.layout_widths: Optional[Tuple[int, int]] = None
        self.layout_spills: Optional[Tuple[int, int]] = None  # layout="hyb": (Kin, Kout)
        self.widths_from = "given" if layout_widths is not None else "fitted from the dataset"
        if layout_spills is not None and (layout != "hyb" or layout_widths is None):
            raise ValueError(f"layout_spills={layout_spills!r} is for layout='hyb' with "
                             f"layout_widths given too (layout={layout!r}, layout_widths="
                             f"{layout_widths!r}); take both from the loader that fitted them")
        if layout is not None:
            self.layout_widths, self.layout_spills = self._fit_layout(layout_widths, dataset,
                                                                      layout_spills)
        if self.sizes.num_graphs >= TRIM_FROM:
            release_freed_memory()  # the scan's scratch (see the function)
        if warn:
            self._warn_excluded()

    def _fit_layout(self, widths: Optional[Tuple[int, int]], dataset: Sequence[Any],
                    spills: Optional[Tuple[int, int]] = None
                    ) -> Tuple[Tuple[int, int], Optional[Tuple[int, int]]]:
        """``((Din, Dout), spill capacities or None)`` of the layout's tables
        (given, or fitted from the dataset: graph_adapter/batching/_layout.py)."""
        if self.is_hetero:
            raise ValueError(f"layout={self.layout!r} is for homogeneous datasets only (a "
                             "HeteroData dataset has one edge_index per edge type); pass "
                             "layout=None")
        if "edge_index" not in {f.key for f in self.schema} or self.scan.sets is not None:
            raise ValueError(f"layout={self.layout!r} needs an 'edge_index' in every graph, and "
                             f"one node set a store (these graphs have "
                             f"{self.scan.sets.sets() if self.scan.sets else 'none'} besides); "
                             f"pass layout=None")
        if widths is not None:
            din, dout = (int(w) for w in widths)
            if din < 1 or dout < 1:
                raise ValueError(f"layout_widths must be two positive ints, got {widths!r}")
            widths = din, dout
            if self.layout == "ell":
                return widths, None
            if spills is not None:
                kin, kout = (int(k) for k in spills)
                if kin < 0 or kout < 0:
                    raise ValueError(f"layout_spills must be two ints >= 0, got {spills!r}")
                return widths, (kin, kout)
        m = self.sizes.matrix
        if self.columnar:
            ei = self.scan.columns["edge_index"].numpy().T  # columns are cat dim first
        else:  # one pass over the graphs (the columnar scan has them in one array)
            parts = [np.asarray(dataset[i].edge_index, dtype=np.int64)
                     for i in range(len(dataset))]
            ei = np.concatenate(parts, axis=1) if parts else np.zeros((2, 0), np.int64)
        return fit_layout(self.layout, ei, m[:, 1], m[:, 0], self.budget.graphs, widths)

    def _setup(self, scan: Scan, budget: Budget, columnar: bool,
               index_dtype: torch.dtype) -> None:
        """Everything a batch needs that does not depend on the batch (per-graph
        lookup table, output keys, one gather plan per key)."""
        self.budget = budget
        self.index_dtype = index_dtype
        self.scan = scan
        self.columnar = columnar
        self.schema: List[Field] = scan.fields
        self.excluded_keys: Dict[str, str] = {**scan.excluded, **scan.on_purpose}
        self.sizes: GraphSizes = scan.sizes
        self._np_idt = np.int64 if index_dtype == torch.int64 else np.int32
        m = self.sizes.matrix
        self._k = len(scan.dims)
        # each graph's first row in the columns, per size dim (a batch's gather
        # starts there).  Filled in place, with no whole-table temporaries (freed,
        # they would stay resident in the heap of a large dataset), and 4 bytes
        # a graph and dim while the columns have fewer than 2**31 rows: with the
        # counts (sizes.matrix, int64) 12 bytes a graph and dim, not 16
        total = m.sum(axis=0).max(initial=0) if m.size else 0
        self._starts = np.empty(m.shape, dtype=np.int32 if total < 2**31 else np.int64)
        if m.size:
            self._starts[0] = 0
            np.cumsum(m[:-1], axis=0, out=self._starts[1:])
        self._col = {dim: j for j, dim in enumerate(scan.dims)}
        self._rows = np.concatenate([list(budget.nodes.values()), list(budget.edges.values())]) \
            if budget.is_hetero else np.array([budget.nodes, budget.edges])
        self._cap = budget.capacity()[0].tolist()  # real rows per size dim
        G = budget.graphs
        self._ar_G = np.arange(G, dtype=self._np_idt)
        self._ar = np.arange(max(int(self._rows.max()), G))
        self.keys: List[str] = [key_of(st.key, name) for st in scan.stores for name in sorted(
            [f.attr for f in self.schema if f.store == st.key] + list(st.reserved))]
        self._template = dict.fromkeys(self.keys)
        self._steps = [self._step(f) for f in self.schema]
        # (column, padded rows, keys) of the reserved keys of every size dim
        self._reserved = [(j, int(self._rows[j]), *self._reserved_keys(dim))
                          for dim, j in self._col.items()]
        self._used = sorted({s.rows_of for s in self._steps if isinstance(s.rows_of, int)})
        self._graph_rows = sorted({f.rows for f in self.schema if f.level == "graph"})

    def _reserved_keys(self, dim: Tuple[str, Tuple[str, ...]]) -> Tuple[str, ...]:
        """``(edge_mask,)`` of an edge dim, ``(batch, ptr, node_mask)`` of a node dim: of
        its store (``paper/batch``), or of a set of its own (``x_s_batch``: ``_sets.py``)."""
        level, store = dim
        attrs = (EDGE_MASK,) if level == "edge" else (BATCH, PTR, NODE_MASK)
        if self.scan.sets is not None and store:
            return tuple(set_key(store[0], a) for a in attrs)
        return tuple(key_of(store, a) for a in attrs)

    @property
    def is_hetero(self) -> bool:
        return self.scan.hetero

    @property
    def node_sets(self) -> List[str]:
        """The node sets of their own of a homogeneous store (PyG's ``PairData``:
        ``["x_s", "x_t"]``, each a budget count with its ``<set>_batch``, ``_ptr`` and
        ``_node_mask``: ``_sets.py``); ``[]`` for one node set (and hetero graphs)."""
        return [] if self.scan.sets is None else self.scan.sets.sets()

    @property
    def levels(self) -> Dict[str, str]:
        """``{key: "node" | "edge" | "graph"}`` of every collated attribute."""
        return {f.key: f.level for f in self.schema}

    def _warn_excluded(self) -> None:
        # Non-tensor attributes cannot live in a tensor dict: say so, never drop silently.
        if self.scan.excluded:
            keys = list(self.scan.excluded)
            warnings.warn(
                "graph_adapter: these attributes cannot live in a tensor dict and are left out "
                "of the padded batches: " + ", ".join(f"{k!r} ({why})" for k, why in
                                                      self.scan.excluded.items())
                + f". To leave them out on purpose and silence this warning, pass "
                  f"exclude={keys!r} (Collator / FixedSizeLoader), or delete the attribute "
                  f"from the graphs; to keep one, store it as a tensor.", stacklevel=4)

    # ------------------------------------------------------------ plans
    def _step(self, f: Field) -> _Step:
        """The gather plan of one key (built once): output shape, padding value, offsets."""
        trail, cat = list(f.trail), f.cat_dim
        if f.level == "graph":
            R, rows_of, per = self.budget.graphs * f.rows, ("graph", f.rows), None
        else:
            per = self._col[dim_of(f)]
            R, rows_of = int(self._rows[per]), per
        shape = [R] if f.scalar else trail[:cat] + [R] + trail[cat:]
        col = self.scan.columns[f.key] if self.columnar else \
            torch.zeros([0] + ([] if f.scalar else trail), dtype=f.torch_dtype)
        src = dst = -1
        if f.inc == "none":
            fill = pad_value(f.level, dtype_name(f.torch_dtype)) or None  # (None: zeros)
            return _Step(f, Gather(col, shape, cat, f.torch_dtype, fill, "plain"),
                         rows_of, per, src, dst)
        if f.inc == "nodes":
            src, dst = (self._col[d] for d in inc_dims(f))
            # padding rows point at the last node of each end, a padding node
            n_src, n_dst = padding_node(int(self._rows[src])), padding_node(int(self._rows[dst]))
            fill = n_src if src == dst else np.array([n_src, n_dst])
            out_dt = self.index_dtype
            fast = f.torch_dtype in (torch.int64, out_dt)
        else:
            fill, out_dt, fast = None, f.torch_dtype, False
        kind = "inc" if fast else "torch_inc"
        return _Step(f, Gather(col, shape, cat, out_dt, fill, kind), rows_of, per, src, dst)

    # ------------------------------------------------------------ collate
    def collate_indices(self, indices: Sequence[int]) -> Dict[str, Tensor]:
        """Padded batch of the dataset graphs ``indices`` (columnar gather).

        All index arithmetic is done once per size dim in numpy (one gather
        index for the node-level keys of a store, one for its edge-level
        keys); each key is then one numpy ``take`` of whole rows into a freshly
        allocated budget-shaped array (never reused, so batches handed to a
        DataLoader with workers or ``pin_memory`` never alias).
        """
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and not self.columnar:
            raise RuntimeError("collate_indices needs columnar=True; use collate(data_list)")
        return self._batch(idx, f"of dataset indices {idx[:8].tolist()}...")

    def _batch(self, idx: np.ndarray, where: str) -> Dict[str, Tensor]:
        g = idx.size
        if g and idx.min() < 0:  # (too large ones raise in the lookup below)
            raise IndexError(f"negative dataset indices: {idx[idx < 0][:8].tolist()}")
        G, k = self.budget.graphs, self._k
        cnt = self.sizes.matrix[idx]
        first = self._starts[idx]
        cum = cnt.cumsum(axis=0)
        tot = cum[-1].tolist() if g else [0] * k  # real rows per size dim
        off = cum - cnt  # per graph, per size dim: its first row inside the batch
        if g > G - 1 or any(t > c for t, c in zip(tot, self._cap)):
            raise ValueError(self._misfit(where, g, tot))
        ar = self._ar
        gidx: Dict[Any, np.ndarray] = {}
        for j in self._used:
            gidx[j] = (first[:, j] - off[:, j]).repeat(cnt[:, j]) + ar[:tot[j]]
        for r in self._graph_rows:
            gidx[("graph", r)] = idx if r == 1 else \
                (idx[:, None] * r + np.arange(r)[None, :]).reshape(-1)
        out = self._template.copy()
        for s in self._steps:
            gi = gidx[s.rows_of]
            f = s.field
            if f.inc == "none":
                out[f.key] = s.gather.run(gi)
                continue
            per = f.rows if s.per is None else cnt[:, s.per]
            if f.inc == "nodes" and s.src != s.dst:
                o = np.empty((gi.shape[0], 2), dtype=np.int64)
                o[:, 0] = off[:, s.src].repeat(per)
                o[:, 1] = off[:, s.dst].repeat(per)
            else:
                if f.inc == "nodes":
                    first = off[:, s.src]
                else:
                    inc = self.scan.incs[f.key][idx]
                    first = np.cumsum(inc) - inc
                o = np.repeat(first, per)
                o = o.reshape(o.shape + s.ones)
            out[f.key] = s.gather.run(gi, o)
        self._add_reserved(out, g, cnt, tot)
        if self.layout is not None:
            self._add_layout(out, idx, tot[1], where)
        return out

    def _add_layout(self, out: Dict[str, Any], idx: np.ndarray, real_edges: int,
                    where: str) -> None:
        """The ELL tables of the batch (real edges come first in ``edge_index``)."""
        ei = out["edge_index"].numpy()
        try:
            tables = layout_tables(self.layout, ei, real_edges, int(self._rows[0]),
                                   self.layout_widths, self.layout_spills, self._np_idt)
        except DegreeWidthError as e:
            ptr = out[PTR].numpy()
            node, what, width = e.args[1:]
            slot = graph_of_node(ptr, node)
            raise DegreeWidthError(
                f"graph {int(idx[slot]) if slot < idx.size else slot} (batch {where}): its node "
                f"{node - int(ptr[slot])} has {what}, more than the ELL width {width} "
                f"(Din={self.layout_widths[0]}, Dout={self.layout_widths[1]}, "
                f"{self.widths_from}). Pass layout_widths=(Din, Dout) large enough for "
                f"every graph, or leave such graphs out.") from None
        for k, v in tables.items():
            out[k] = torch.from_numpy(v)

    def _add_reserved(self, out: Dict[str, Any], g: int, cnt: np.ndarray,
                      tot: List[int]) -> None:
        """``batch``, ``ptr`` and the masks of every store."""
        G, ar = self.budget.graphs, self._ar
        for j, R, *keys in self._reserved:
            real = tot[j]
            if len(keys) == 1:  # an edge dim: its mask
                out[keys[0]] = torch.from_numpy(ar[:R] < real)
                continue
            c = np.asarray(slot_counts(cnt[:, j].tolist(), G, R - real), dtype=self._np_idt)
            ptr = np.empty(G + 1, dtype=self._np_idt)
            ptr[0] = 0
            c.cumsum(out=ptr[1:])
            out[keys[0]] = torch.from_numpy(self._ar_G.repeat(c))
            out[keys[1]] = torch.from_numpy(ptr)
            out[keys[2]] = torch.from_numpy(ar[:R] < real)
        out[GRAPH_MASK] = torch.from_numpy(self._ar_G < g)

    def _misfit(self, where: str, g: int, tot: List[int]) -> str:
        b = self.budget
        parts = [f"{g} graphs (max {b.graphs - 1})"]
        for (level, store), j in self._col.items():
            name = f"{level}s" + (f" of {store_name(store) or 'the store'}" if
                                  self.budget.is_hetero else "")
            parts.append(f"{tot[j]} {name} (max {self._cap[j]})")
        return (f"batch {where} does not fit {b!r}: " + ", ".join(parts)
                + f" (every batch keeps {RESERVED_NODES} padding nodes of each node type and "
                  f"one padding graph slot; a larger budget, or fewer graphs a batch)")

    def collate(self, data_list: Sequence[Any], ids: Optional[Sequence[int]] = None
                ) -> Dict[str, Tensor]:
        """Padded batch of graph objects with this collator's schema (scanned
        into columns first, then gathered like the dataset).  ``ids``: their
        dataset indices, named by error messages (default: list positions)."""
        if len(data_list) == 0:
            return self.empty()
        scan = Scan(list(data_list), self.budget, True, schema=self.schema, sets=self.scan.sets,
                    exclude=self.scan.exclude, validate=self.validate, ids=ids)
        return Collator._batch_of_scan(self, scan)

    @classmethod
    def _batch_of_scan(cls, like: "Collator", scan: Scan) -> Dict[str, Tensor]:
        """The padded batch of every graph of ``scan``, collated as ``like`` collates its
        dataset (same budget, schema, index dtype and layout tables)."""
        new = cls.__new__(cls)
        cls._setup(new, scan, like.budget, True, like.index_dtype)
        new.layout, new.layout_widths = like.layout, like.layout_widths
        new.layout_spills, new.widths_from = like.layout_spills, like.widths_from
        return cls._batch(new, np.arange(scan.num_graphs), "of graphs")

    def collate_group(self, items: Sequence[Any]) -> Dict[str, Tensor]:
        """Padded batch of one group: dataset indices (columnar) or graph objects."""
        if len(items) == 0:
            return self.empty()
        if isinstance(items[0], (int, np.integer)):
            return self.collate_indices(items)
        return self.collate(items)

    def collate_micro(self, groups: Sequence[Sequence[Any]]) -> Dict[str, Tensor]:
        """Stack the padded batches of several groups on a new leading dim."""
        return stack_micro_batches([self.collate_group(g) for g in groups])

    def empty(self) -> Dict[str, Tensor]:
        """A fully padded batch (no real graph)."""
        return self._batch(np.zeros(0, dtype=np.int64), "")

    def shapes(self) -> Dict[str, Tuple[Tuple[int, ...], torch.dtype]]:
        e = self.empty()
        return {k: (tuple(v.shape), v.dtype) for k, v in e.items()}

    def unpad(self, flat: Mapping[str, Tensor]) -> List[Any]:
        """The real graphs of a padded flat dict, as ``Data`` / ``HeteroData`` (graphs with
        node sets of their own, PyG's ``PairData``: ``Data`` with the same keys)."""
        return unpad_hetero(flat, self.schema, self.scan.node_types, self.scan.edge_types)


def collate_padded(data_list: Sequence[Any], budget: Budget, *,
                   index_dtype: torch.dtype = torch.int64) -> Dict[str, Tensor]:
    """One-off padded collate of a list of ``Data`` (schema from this list).

    For many batches of one dataset build a :class:`Collator` once instead.
    """
    c = Collator(list(data_list), budget, index_dtype=index_dtype, warn=False)
    return c.collate_indices(range(len(data_list)))
