"""The input/output contract an exported artifact carries (JSON, never pickle).

``graph_adapter.export`` writes it; :func:`graph_adapter.serve.load` reads it back. It
holds the budget (the static row counts ``N`` nodes, ``E`` edges, ``G`` graph slots of
every padded call), every input key the exported program takes, in its order, with its
level, dtype and per-graph shape (``None`` on the dim graphs are concatenated along),
and every output key with its level (``node``: ``[N, ...]``, ``edge``: ``[E, ...]``,
``graph``: ``[G, ...]``), so that the runtime can pack request graphs into the layout
of ``docs/dev/FORMAT.md`` and split the outputs per graph without PyG.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ..contract import ELL_IN, SPILL_IN, max_graph_nodes
from .errors import ArtifactError

__all__ = ["CONTRACT_VERSION", "CONTRACT_FILE", "ONNX_METADATA_KEY", "InputField",
           "OutputField", "Rung", "Contract"]

#: bumped when a runtime of an older version could misread a newer contract
CONTRACT_VERSION = 4
#: the version a one-budget contract (no ``rungs``) is written with: older runtimes read it
ONE_BUDGET_VERSION = 1
#: the version a ladder without neighbour tables is written with
LADDER_VERSION = 2
#: reserved inputs that version 3 added (an ONNX artifact's neighbour tables, built by the
#: packer: ``docs/dev/FORMAT.md``); a runtime before it cannot build them, so a contract
#: with them says version 3 and such a runtime refuses it by its version
TABLE_KEYS = (ELL_IN, SPILL_IN)
#: the version a contract with those tables (and no value rules) is written with
TABLES_VERSION = 3
#: the version a contract with value rules (:attr:`Contract.value_rules`: each feature's
#: valid codes, whether NaN/inf may appear) or a served size limit is written with: a
#: runtime before it would not check them, so it refuses such a contract by its version
VALUE_RULES_VERSION = 4
#: the contract's name inside a ``.pt2`` archive (``<archive>/extra/<this>``)
CONTRACT_FILE = "graph_adapter.json"
#: the ONNX model's ``metadata_props`` key that holds the contract
ONNX_METADATA_KEY = "graph_adapter"
LEVELS = ("node", "edge", "graph")


@dataclass(frozen=True)
class InputField:
    """One input key of the exported program.

    ``kind`` is ``"feature"`` (read from each request graph) or ``"reserved"`` (``batch``,
    ``ptr``, the masks: made by the packer). ``shape`` is the per-graph shape with
    ``None`` on ``cat_dim``; ``inc == "nodes"`` marks an index key (``edge_index``)
    offset by the nodes of the graphs before it; ``rows``: graph-level rows per graph.

    Value rules (written by ``export`` since contract version 4, checked by the host
    before any call; see :meth:`Contract.value_checks` for a contract without them):

    * ``codes``: a feature that indexes embedding tables (integer, or float cast to
      codes in the model): the rows of the table each column indexes (one entry a
      column of a ``[n, C]`` feature, else one entry; ``None``: a column that indexes
      no table). Valid codes of a column with ``r`` rows are ``0 .. r - 1``.
    * ``low``: the smallest valid value of an integer feature (``0`` where it indexes a
      table or where the export data held no negative value; ``None``: not checked).
    * ``finite``: a float feature: ``True``: NaN and +-inf refused (the export data held
      none); ``False``: allowed (the data held some); ``None``: not recorded.
    """

    key: str
    kind: str
    level: str
    dtype: str
    shape: Tuple[Optional[int], ...] = ()
    inc: str = "none"
    rows: int = 1
    codes: Optional[Tuple[Optional[int], ...]] = None
    low: Optional[int] = None
    finite: Optional[bool] = None

    def __post_init__(self):
        # read for every feature of every request graph: computed once
        object.__setattr__(self, "_cat_dim", self.shape.index(None) if None in self.shape else 0)
        object.__setattr__(self, "_fixed", tuple((d, s) for d, s in enumerate(self.shape)
                                                 if s is not None))

    def fits(self, shape: Tuple[int, ...]) -> bool:
        """Whether a request graph's array of ``shape`` has this field's per-graph shape
        (its rank, and every dim but the ``None`` one)."""
        if len(shape) != len(self.shape):
            return False
        for d, s in self._fixed:  # type: ignore[attr-defined]
            if shape[d] != s:
                return False
        return True

    @property
    def cat_dim(self) -> int:
        """The dim graphs are concatenated along (0 if the shape has no ``None``)."""
        return self._cat_dim  # type: ignore[attr-defined]


@dataclass(frozen=True)
class OutputField:
    """One output key: its level (how it is split per graph), dtype and padded shape."""

    key: str
    level: str
    dtype: str
    shape: Tuple[int, ...]


@dataclass(frozen=True)
class Rung:
    """One budget of a ladder artifact and the name of its program: in a ``.pt2``
    archive, the AOTInductor program's; in an ONNX one, ``rung<i>``, the ``If`` branch
    run when :attr:`Contract.onnx_rung_input` has ``i + 1`` elements (``i``: the rung's
    index in :attr:`Contract.rungs`)."""

    nodes: int
    edges: int
    graphs: int
    program: str
    verified_max_abs_diff: Optional[float] = None

    @property
    def max_graph_nodes(self) -> int:
        """The most nodes one graph may have in a call of this rung (as
        :attr:`Contract.max_graph_nodes`)."""
        return min(self.nodes - 2, self.nodes - self.graphs + 1)


@dataclass(frozen=True)
class Contract:
    """What an artifact takes and returns; ``to_json`` / ``from_json`` round-trip it."""

    format: str
    nodes: int
    edges: int
    graphs: int
    inputs: Tuple[InputField, ...]
    outputs: Tuple[OutputField, ...]
    dropped_inputs: Tuple[str, ...] = ()
    tolerance: Dict[str, float] = field(default_factory=dict)
    verified_max_abs_diff: Optional[float] = None
    versions: Dict[str, str] = field(default_factory=dict)
    onnx_input_names: Tuple[str, ...] = ()
    onnx_output_names: Tuple[str, ...] = ()
    #: pt2: the thread count its kernels were compiled for (inductor writes it into
    #: their OpenMP regions: a program compiled at 2 threads ran 20% slower at 1)
    threads: Optional[int] = None
    #: a ladder artifact's budgets, one program each, cheapest first (``()``: one
    #: budget, the top-level ``nodes``/``edges``/``graphs``, program ``"model"``); the
    #: top-level budget is the largest rung's
    rungs: Tuple[Rung, ...] = ()
    #: an ONNX ladder: the name of its int64 input that selects the rung: ``i + 1``
    #: elements (any values) for ``rungs[i]``; one ONNX model holds every rung (an
    #: ``If`` a rung). ``""``: not a ladder, or a ``.pt2`` one (a program a rung)
    onnx_rung_input: str = ""
    #: an ONNX ladder: each symbolic dim of its inputs (the rung input's length among
    #: them) -> its size in each rung (as ``rungs``): a session made with rung ``i``'s
    #: sizes as free dimension overrides runs that rung's graph alone
    onnx_rung_dims: Dict[str, Tuple[int, ...]] = field(default_factory=dict)
    #: whether ``export`` recorded each feature's value rules (``codes``, ``low``,
    #: ``finite`` of :class:`InputField`); ``False``: an older contract, checked by the
    #: defaults of :meth:`value_checks`
    value_rules: bool = False
    #: the largest single graph served (``export(..., max_nodes=, max_edges=)``): a
    #: graph with more nodes or edges is refused whatever the rungs could take, and
    #: every graph within both is served, whatever its degrees; ``None``: what the
    #: budget (or the largest rung) takes
    max_nodes: Optional[int] = None
    max_edges: Optional[int] = None

    def memo(self, key: str, make: Any) -> Any:
        """``make()``, computed once per contract object and kept beside its fields (a
        frozen contract is read for every request: what is derived from it is kept)."""
        store = self.__dict__.setdefault("_memo", {})
        if key not in store:
            store[key] = make()
        return store[key]

    def value_checks(self) -> List[Tuple[InputField, Optional[int],
                                         Optional[Tuple[Optional[int], ...]], bool]]:
        """What the host checks of each feature's values before any call:
        ``(field, low, codes, finite)`` per feature with a check (``low``: the smallest
        valid integer, ``None``: none; ``codes``: per column the rows of its table, see
        :class:`InputField`; ``finite``: NaN/inf refused). Index keys (``edge_index``)
        are checked against their graph's nodes by the packer instead.

        A contract without value rules (written before version 4) is checked by
        defaults: integer features refuse negative values (an ONNX ``Gather`` would wrap
        them), float features refuse NaN/inf; codes past a table are not known then (the
        artifact's own call fails on them)."""
        out = []
        for f in self.features:
            if f.inc == "nodes":
                continue
            is_float = f.dtype.startswith(("float", "bfloat")) or f.dtype.startswith("complex")
            is_int = f.dtype.startswith(("int", "uint"))
            if not self.value_rules:
                low, codes, finite = (0 if is_int else None), None, is_float
            else:
                low, codes, finite = f.low, f.codes, bool(is_float and f.finite is not False)
            if codes is not None and low is None:
                low = 0  # (codes index a table from its first row)
            if low is not None or codes or finite:
                out.append((f, low, codes, finite))
        return out

    @property
    def features(self) -> Tuple[InputField, ...]:
        return tuple(f for f in self.inputs if f.kind == "feature")

    @property
    def max_graph_nodes(self) -> int:
        """The most nodes one graph may have (:func:`graph_adapter.contract.max_graph_nodes`)."""
        return max_graph_nodes(self.graphs, self.nodes)

    def to_json(self) -> str:
        d = asdict(self)
        tables = any(f.kind == "reserved" and f.key in TABLE_KEYS for f in self.inputs)
        newest = self.value_rules or self.max_nodes is not None or self.max_edges is not None
        d["contract_version"] = VALUE_RULES_VERSION if newest else TABLES_VERSION if tables else (
            LADDER_VERSION if self.rungs else ONE_BUDGET_VERSION)
        if not self.onnx_rung_input:  # one-budget contracts stay as version 1 wrote them
            del d["onnx_rung_input"], d["onnx_rung_dims"]
        if not newest:  # (so that an older contract is written as its version had it)
            del d["value_rules"], d["max_nodes"], d["max_edges"]
            for f in d["inputs"]:
                del f["codes"], f["low"], f["finite"]
        return json.dumps(d, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str = "the artifact") -> "Contract":
        try:
            d: Dict[str, Any] = json.loads(text)
            version = d.pop("contract_version")
        except (ValueError, KeyError, AttributeError) as e:
            raise ArtifactError(f"{where}: its graph_adapter contract is not valid JSON with a "
                                f"contract_version ({e}); re-export it with "
                                f"graph_adapter.export") from None
        if version > CONTRACT_VERSION:
            raise ArtifactError(f"{where}: contract version {version} is newer than this "
                                f"runtime's ({CONTRACT_VERSION}); upgrade graph_adapter")
        try:
            inputs = tuple(InputField(**{**f, "shape": tuple(f["shape"]), "codes": (
                None if f.get("codes") is None else tuple(f["codes"]))}) for f in d.pop("inputs"))
            outputs = tuple(OutputField(**{**f, "shape": tuple(f["shape"])})
                            for f in d.pop("outputs"))
            d["rungs"] = tuple(Rung(**r) for r in d.get("rungs", ()))
            for k in ("dropped_inputs", "onnx_input_names", "onnx_output_names"):
                d[k] = tuple(d.get(k, ()))
            d["onnx_rung_dims"] = {k: tuple(v) for k, v in d.get("onnx_rung_dims", {}).items()}
            c = cls(inputs=inputs, outputs=outputs, **d)
        except (TypeError, KeyError) as e:
            raise ArtifactError(f"{where}: malformed graph_adapter contract ({e})") from None
        bad = [f.key for f in (*c.features, *c.outputs) if f.level not in LEVELS]
        if bad:
            raise ArtifactError(f"{where}: keys {bad} have no node/edge/graph level")
        return c

    def input_keys(self) -> List[str]:
        return [f.key for f in self.inputs]
