"""Load an exported artifact and predict: ``load(path).predict(graphs)``.

``.pt2`` (an AOTInductor package) runs on torch alone; ``.onnx`` on onnxruntime + numpy
(torch is never imported for it). Both read the artifact's JSON contract first.
"""
from __future__ import annotations

import dataclasses
import os
import zipfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from .columns import Columns, join, select, split_rows
from .contract import CONTRACT_FILE, ONNX_METADATA_KEY, Contract
from .errors import ArtifactError, RuntimeMissingError
from .ops import NumpyOps, TorchOps
from .pack import (Graph, check_served_size, check_values, column_spills, pack_call,
                   pack_columns, plan_calls, plan_ladder, read_request, table_width)

__all__ = ["load", "Predictor", "read_contract", "onnx_session"]

PathLike = Union[str, "os.PathLike[str]"]


def _pt2_contract(path: str) -> Contract:
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if n.endswith("/extra/" + CONTRACT_FILE)]
        if not names:
            raise ArtifactError(f"{path}: a .pt2 package without {CONTRACT_FILE}: not written "
                                f"by graph_adapter.export (re-export the model with it)")
        return Contract.from_json(z.read(names[0]).decode(), path)


def onnx_session(model: Union[str, bytes], threads: Optional[int],
                 dims: Optional[Mapping[str, int]] = None) -> Any:
    """An onnxruntime CPU session of an ONNX model (its path or bytes), as the server
    runs it: ``threads`` intra-op threads and one inter-op thread; ``dims``: free
    dimension overrides (a ladder's rung). The exporter checks an artifact in the
    same session."""
    try:
        import onnxruntime as ort
    except ImportError as e:
        where = model if isinstance(model, str) else "this model"
        raise RuntimeMissingError(f"{where} is an ONNX artifact: it runs on onnxruntime, "
                                  f"which is not installed (pip install "
                                  f"'graph_adapter[serve]' or onnxruntime numpy)") from e
    opts = ort.SessionOptions()
    if threads is not None:
        opts.intra_op_num_threads = int(threads)
        opts.inter_op_num_threads = 1
    for name, size in (dims or {}).items():
        opts.add_free_dimension_override_by_name(name, int(size))
    return ort.InferenceSession(model, sess_options=opts, providers=["CPUExecutionProvider"])


def _onnx_contract(session: Any, path: str) -> Contract:
    meta = session.get_modelmeta().custom_metadata_map
    if ONNX_METADATA_KEY not in meta:
        raise ArtifactError(f"{path}: an ONNX model without the {ONNX_METADATA_KEY!r} metadata: "
                            f"not written by graph_adapter.export (re-export it with it)")
    return Contract.from_json(meta[ONNX_METADATA_KEY], path)


def read_contract(path: PathLike) -> Contract:
    """The contract of an artifact, without loading its program (pt2 needs no torch here)."""
    path = os.fspath(path)
    if zipfile.is_zipfile(path):
        return _pt2_contract(path)
    return _onnx_contract(onnx_session(path, 1), path)


class _Pt2:
    def __init__(self, path: str, threads: Optional[int], rungs: Sequence[Any] = ()):
        try:
            import torch
        except ImportError as e:
            raise RuntimeMissingError(f"{path} is a .pt2 (AOTInductor) artifact: it runs on "
                                      f"torch, which is not installed") from e
        if threads is not None:
            torch.set_num_threads(int(threads))  # process-wide: AOTInductor's kernels use it
        self.torch = torch
        self.model = torch._inductor.aoti_load_package(path)
        self.programs: Dict[str, Any] = {}
        if rungs:  # a ladder: one program a rung, by its name in the archive
            from torch._inductor.package import load_package

            self.programs = {r.program: load_package(path, r.program) for r in rungs}

    def __call__(self, flat: Dict[str, Any], contract: Contract,
                 program: Optional[str] = None) -> Dict[str, Any]:
        model = self.programs[program] if program else self.model
        with self.torch.inference_mode():
            return dict(model(flat))


class _Onnx:
    """onnxruntime sessions of one artifact. A ladder is one model too (an ``If``
    branch a rung, chosen by the length of ``contract.onnx_rung_input``): it gets one
    session a rung, made with the rung's sizes as free dimension overrides
    (``contract.onnx_rung_dims``), in which onnxruntime folds the choice away and runs
    the rung's graph alone, as a one-budget artifact of that budget would
    (``benchmarks/bench_onnx_ladder.py``); a runtime that does not fold runs the ``If``s
    instead, with the same results. Loading costs one session a rung.
    ``program=None``: the top rung, the contract's top-level budget."""

    def __init__(self, session: Any, contract: Contract, path: str = "the artifact",
                 threads: Optional[int] = None):
        self.session = session
        self.sessions: Dict[Optional[str], Any] = {}
        self.rung_feed: Dict[Optional[str], Any] = {}
        if contract.rungs:
            import numpy as np

            dims = contract.onnx_rung_dims
            if not contract.onnx_rung_input or any(len(v) != len(contract.rungs)
                                                   for v in dims.values()):
                raise ArtifactError(f"{path}: an ONNX contract with rungs but no "
                                    f"onnx_rung_input or onnx_rung_dims of each rung; "
                                    f"re-export it with graph_adapter.export")
            for i, r in enumerate(contract.rungs):
                self.sessions[r.program] = onnx_session(
                    path, threads, {k: v[i] for k, v in dims.items()})
                self.rung_feed[r.program] = np.zeros(i + 1, dtype=np.int64)
            # the rung of the top-level budget (export writes the largest rung's there)
            top = max(contract.rungs, key=lambda r: (
                (r.nodes, r.edges, r.graphs) == (contract.nodes, contract.edges, contract.graphs),
                r.nodes + r.edges))
            self.sessions[None] = self.sessions[top.program]
            self.rung_feed[None] = self.rung_feed[top.program]
            self.session = None  # the plain one (every rung's If run a call): not used

    def __call__(self, flat: Dict[str, Any], contract: Contract,
                 program: Optional[str] = None) -> Dict[str, Any]:
        feed = {name: flat[f.key] for name, f in zip(contract.onnx_input_names, contract.inputs)
                if name}
        session = self.session
        if self.sessions:
            session = self.sessions[program]
            feed[contract.onnx_rung_input] = self.rung_feed[program]
        values = session.run(list(contract.onnx_output_names), feed)
        return {f.key: v for f, v in zip(contract.outputs, values)}


class Predictor:
    """An artifact, loaded: ``predict(graphs)`` packs, runs and splits per graph.

    Attributes:
        contract: what the artifact takes and returns (:class:`Contract`).
        format: ``"pt2"`` or ``"onnx"``.
        calls: padded calls run so far.
        ignored_keys: request keys the model does not read (labels, SMILES...), seen
            so far: left out of the calls, listed here (never an error).
    """

    def __init__(self, contract: Contract, runner: Any, ops: Any):
        self.contract = contract
        self.format = contract.format
        self._run = runner
        self.ops = ops
        self.calls = 0
        self.ignored_keys: set = set()
        # a ladder: each rung as a contract of its own budget (what pack_call packs for)
        self.rungs = [rung_contract(contract, i) for i in range(len(contract.rungs))]
        #: calls run so far per rung (by its program name); a ladder only
        self.rung_calls: Dict[str, int] = {r.program: 0 for r in contract.rungs}

    def plan(self, checked: Sequence[Graph], spills: Optional[Sequence[int]] = None
             ) -> List[Any]:
        """``(rung index or None, graph positions)`` per call (``None``: one budget);
        ``spills``: the graphs' :func:`~graph_adapter.serve.pack.spill_counts`, if known.
        A graph past the contract's served limit (``max_nodes`` / ``max_edges``) raises
        ``GraphTooLargeError`` whatever a rung could take."""
        check_served_size(self.contract, checked)
        if not self.rungs:
            return [(None, call) for call in plan_calls(self.contract, checked, spills)]
        return plan_ladder(self.rungs, checked, spills)

    def _call_contract(self, rung: Optional[int]) -> Contract:
        return self.contract if rung is None else self.rungs[rung]

    def check(self, graphs: Sequence[Any]) -> List[Graph]:
        """Every request graph checked against the contract (its features' keys, dtypes,
        shapes, sizes, and values: no 0-node graph, codes within their embedding tables,
        no NaN/inf where the contract forbids them: named errors), nothing run; index
        ranges are checked by ``pack``."""
        return read_request(self.contract, self.ops, graphs, self.ignored_keys)

    def pack(self, graphs: Sequence[Any]) -> List[Dict[str, Any]]:
        """The padded flat dicts ``predict`` would run (one per call)."""
        checked = self.check(graphs)
        return [pack_call(self._call_contract(r), self.ops, [checked[i] for i in call])
                for r, call in self.plan(checked)]

    def run_padded(self, flat: Dict[str, Any], rung: Optional[int] = None) -> Dict[str, Any]:
        """The artifact's raw outputs on one padded flat dict (keys: the contract's);
        ``rung``: a ladder's rung index (its budget's program), ``None`` for one budget."""
        self.calls += 1
        if rung is None:
            return self._run(flat, self.contract)
        program = self.contract.rungs[rung].program
        self.rung_calls[program] += 1
        return self._run(flat, self.contract, program)

    def predict(self, graphs: Sequence[Any]) -> List[Any]:
        """One prediction per graph, in request order.

        A graph-level output gives each graph its row (``[...]``: the output's trailing
        shape), a node-level one its nodes' rows (``[n_i, ...]``), an edge-level one its
        edges' rows. With one output key (``"output"``, a model returning one tensor) each
        item is that array; with several, a dict ``{key: array}``. Arrays are torch
        tensors for pt2, numpy arrays for onnx. Many graphs run as several padded calls;
        a ladder artifact packs them over its rungs (:func:`~graph_adapter.serve.pack.plan_ladder`).
        ``graphs`` may also be a :class:`~graph_adapter.serve.columns.Columns` (checked
        already: a server's decoded request), packed from its arrays.
        """
        if not isinstance(graphs, Columns):
            return self.predict_checked(self.check(graphs))
        if not len(graphs):
            return []
        return split_rows(self.contract, self.predict_columns(graphs), graphs.nodes,
                          graphs.edges)

    def predict_columns(self, cols: Columns) -> Dict[str, Any]:
        """The outputs of checked graphs given as columns: each output key's rows of every
        graph joined in request order (graph-level: one row a graph), what ``predict``
        splits per graph. A call of consecutive graphs packs slices of ``cols`` (no view
        or copy a graph); values (:func:`~graph_adapter.serve.pack.check_values`) and
        index ranges are checked here, before any call."""
        ops = self.ops
        cols = Columns({k: ops.asarray(v) for k, v in cols.features.items()}, cols.nodes,
                       cols.edges, cols.positions, cols.ignored)  # this runtime's arrays
        check_values(self.contract, ops, cols)
        return self._run_columns(cols)

    def _run_columns(self, cols: Columns) -> Dict[str, Any]:
        """:meth:`predict_columns` of columns of this runtime's arrays, values checked."""
        ops = self.ops
        sizes = [Graph({}, n, e, (), k) for k, (n, e) in enumerate(zip(cols.nodes, cols.edges))]
        width = table_width(self.rungs or [self.contract])
        calls = self.plan(sizes, column_spills(cols, width) if width else None)
        subs = [select(self.contract, ops, cols, call) for _, call in calls]
        flats = [pack_columns(self._call_contract(r), ops, sub)  # all checked first
                 for (r, _), sub in zip(calls, subs)]
        pieces = [_real_rows(self.contract, self.run_padded(flat, r), sub)
                  for (r, _), sub, flat in zip(calls, subs, flats)]
        order = [i for _, call in calls for i in call]
        if order != list(range(len(cols))):  # a graph ran alone elsewhere: request order
            per: List[Any] = [None] * len(cols)
            for (_, call), piece, sub in zip(calls, pieces, subs):
                for i, p in zip(call, split_rows(self.contract, piece, sub.nodes, sub.edges,
                                                 as_dicts=True)):
                    per[i] = p
            pieces = [{f.key: p[f.key] if f.level != "graph" else p[f.key][None]
                       for f in self.contract.outputs} for p in per]
        return {f.key: pieces[0][f.key] if len(pieces) == 1 else
                ops.cat([p[f.key] for p in pieces], 0) for f in self.contract.outputs}

    def predict_checked(self, checked: Sequence[Graph]) -> List[Any]:
        """:meth:`predict` of graphs :meth:`check` has read already: joined (one ``cat`` a
        feature), then as :meth:`predict_columns`, split per graph."""
        cols = join(self.contract, self.ops, checked)
        if not len(cols):
            return []
        # (their values were checked with them: read_graphs)
        return split_rows(self.contract, self._run_columns(cols), cols.nodes, cols.edges)


def _real_rows(contract: Contract, out: Dict[str, Any], cols: Columns) -> Dict[str, Any]:
    """The rows of a call's outputs that belong to its real graphs (``cols``)."""
    n, e, k = sum(cols.nodes), sum(cols.edges), len(cols)
    return {f.key: out[f.key][:{"node": n, "edge": e}.get(f.level, k)]
            for f in contract.outputs}


def rung_contract(contract: Contract, i: int) -> Contract:
    """Rung ``i`` of a ladder as a contract of its own budget (what ``pack_call`` packs
    for): its sizes, and the padded shapes of the reserved inputs whose ONNX dims differ
    between rungs (an ONNX ladder's neighbour tables: ``[N, S]``, ``[2, K]``) read from
    ``onnx_rung_dims`` (``<onnx input>_dim<k>``)."""
    r = contract.rungs[i]
    dims = contract.onnx_rung_dims
    names = contract.onnx_input_names or ("",) * len(contract.inputs)
    inputs = []
    for f, name in zip(contract.inputs, names):
        if f.kind == "reserved" and name and any(f"{name}_dim{k}" in dims
                                                 for k in range(len(f.shape))):
            shape = tuple(dims[f"{name}_dim{k}"][i] if f"{name}_dim{k}" in dims else s
                          for k, s in enumerate(f.shape))
            f = dataclasses.replace(f, shape=shape)
        inputs.append(f)
    return dataclasses.replace(contract, nodes=r.nodes, edges=r.edges, graphs=r.graphs,
                               rungs=(), inputs=tuple(inputs))


def load(path: PathLike, *, threads: Optional[int] = None) -> Predictor:
    """Load an artifact written by ``graph_adapter.export``.

    Args:
        path: the ``.pt2`` or ``.onnx`` file.
        threads: intra-op threads (onnxruntime's session option; for pt2,
            ``torch.set_num_threads``, which is process-wide); ``None``: the
            runtime's default. An ``.onnx`` artifact of ``graph_adapter.export`` gives
            the same predictions at any count (its scatter adds are written so; export
            checked it at 2 and 4 threads); a ``.pt2`` one runs fastest at the count it
            was exported for (``contract.threads``).

    Returns:
        A :class:`Predictor`: ``predict(graphs)`` packs requests (dicts of arrays, or
        PyG ``Data``) into the artifact's padded calls and returns one prediction a
        graph; ``.contract`` is what the artifact takes and returns.

    Raises:
        FileNotFoundError: no file at ``path``.
        ArtifactError: a file without a graph_adapter contract.
        RuntimeMissingError: the runtime the artifact needs (torch, onnxruntime) is
            not installed: names what to install.

    Example:
        ```python
        from torch_geometric.datasets import FakeDataset
        from torch_geometric.nn import GCN

        import graph_adapter as ga
        from graph_adapter import serve

        graphs = FakeDataset(num_graphs=8, avg_num_nodes=10, num_channels=8)
        loader = ga.FixedSizeLoader(graphs, ga.Budget.tight(graphs, 4))
        ga.export(ga.ipu_wrap(GCN(8, 16, 2)), loader, "gcn.onnx", format="onnx")

        predictor = serve.load("gcn.onnx", threads=1)  # no PyG needed from here on
        g = graphs[0]
        request = {"x": g.x.numpy(), "edge_index": g.edge_index.numpy()}  # or a Data
        (pred,) = predictor.predict([request])
        assert pred.shape == (g.num_nodes, 16)  # the graph's node rows
        ```
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no artifact at {path}")
    if zipfile.is_zipfile(path):
        contract = _pt2_contract(path)
        return Predictor(contract, _Pt2(path, threads, contract.rungs), TorchOps())
    session = onnx_session(path, threads)
    contract = _onnx_contract(session, path)
    return Predictor(contract, _Onnx(session, contract, path, threads), NumpyOps())
