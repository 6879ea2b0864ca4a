"""One row of the zoo (:func:`run_row`): the layer built and called on padded batches of
one budget, eager against unpadded, compiled, exported and checked; a red row's note
measured by the probes of :data:`~graph_adapter.app.zoo.why.WHY_NOT` and its workarounds
run like rows.
"""
from __future__ import annotations

import contextlib
import copy
import os
import re
from typing import Any, Callable, Dict, List, Tuple

import torch
from torch import nn

from torch_geometric.data import Batch, Data

from graph_adapter import check, ipu_wrap
from graph_adapter.backends import has_rnn, rnn_settings

from .layers import BUDGET, EDGE_DIM, F, Row, call
from .why import CELLS, WHY_NOT, Try

__all__ = ["run_row"]


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------
def _graphs(seed: int, num: int = 4) -> List[Data]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(num):
        n = int(torch.randint(2, 7, (1,), generator=gen))
        m = int(torch.randint(1, 2 * n + 1, (1,), generator=gen))
        ei = torch.randint(0, n, (2, m), generator=gen)
        out.append(Data(x=torch.randn(n, F, generator=gen), edge_index=ei,
                        edge_attr=torch.randn(m, EDGE_DIM, generator=gen),
                        pos=torch.randn(n, 3, generator=gen),
                        z=torch.randint(1, 9, (n,), generator=gen), y=torch.randn(1, generator=gen)))
    return out


def _pad(graphs: List[Data]) -> Tuple[Batch, Dict[str, torch.Tensor]]:
    """The batch and its padded flat dict (docs/dev/FORMAT.md), budget :data:`BUDGET`."""
    b = Batch.from_data_list(graphs)
    N, E, G = BUDGET["nodes"], BUDGET["edges"], BUDGET["graphs"]
    n, e, g = b.num_nodes, b.edge_index.size(1), b.num_graphs
    flat = {
        "x": torch.cat([b.x, b.x.new_zeros(N - n, F)]),
        "pos": torch.cat([b.pos, b.pos.new_zeros(N - n, 3)]),
        "z": torch.cat([b.z, b.z.new_ones(N - n)]),
        "edge_index": torch.cat([b.edge_index, torch.full((2, E - e), N - 1)], dim=1),
        "edge_attr": torch.cat([b.edge_attr, b.edge_attr.new_zeros(E - e, EDGE_DIM)]),
        "y": torch.cat([b.y, b.y.new_full((G - g,), float("nan"))]),
        "batch": torch.cat([b.batch, torch.full((N - n,), G - 1)]),
        "ptr": torch.cat([b.ptr, torch.full((G - g - 1,), n), torch.tensor([N])]),
        "node_mask": torch.arange(N) < n,
        "edge_mask": torch.arange(E) < e,
        "graph_mask": torch.arange(G) < g,
    }
    return b, flat


# --------------------------------------------------------------------------
# A red row's note: its causes as the probes measure them, its workarounds run
# --------------------------------------------------------------------------
def _summary(res: Dict[str, str], t: Try) -> str:
    if res["note"]:
        return res["note"]
    if all(res[k] == "ok" for k in t.cells):
        return "all four green" if len(t.cells) == 4 else " ".join(f"{k} ✅" for k in t.cells)
    return ", ".join(f"{k} " + ("✅" if res[k] == "ok" else f"❌ {res[k][:70]}") for k in t.cells)


def _why_not(family: str, name: str, factory: Callable, style: str, model: nn.Module,
             batches: Tuple[Batch, Batch], res: Dict[str, str]) -> str:
    """The note of a red row: ``why: <measured causes>. Instead: <workaround>: <its cells>``."""
    entry = WHY_NOT.get(name)
    if entry is None:
        return "unexplained: no cause recorded for this row (graph_adapter/app/zoo/why.py WHY_NOT)"
    causes = []
    for probe in entry.probes:
        try:
            cause = probe(model, batches, res)
        except Exception as e:  # noqa: BLE001 - the note reports it
            return f"unexplained: the probe {probe.__name__} failed: {_why(e)}"
        if cause is None:
            return (f"unexplained: the probe {probe.__name__} did not reproduce its cause "
                    f"(graph_adapter/app/zoo/why.py WHY_NOT)")
        causes.append(cause)
    tried = []
    from ..torch_internals import dynamo_config_patch

    for t in entry.tries:
        def workaround(variant=t.variant):
            return variant(factory())

        with dynamo_config_patch(dict(t.config)), \
                torch.backends.mkldnn.flags(enabled=t.mkldnn and torch.backends.mkldnn.enabled):
            got = run_row(family, name, (workaround, style), why=False, modes=t.modes,
                          grad=t.grad)
        tried.append((f"{t.label}: " if t.label else "") + _summary(got, t))
    note = f"why: {'; '.join(causes)}. Instead: {entry.instead}"
    if tried:
        note += " -> " + "; ".join(tried)
    return note.replace("|", "/")


# --------------------------------------------------------------------------
# One row
# --------------------------------------------------------------------------
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def _why(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    msg = re.sub(r"\s+", " ", msg).replace("|", "/")
    msg = msg.replace(_CHECKOUT, "")  # paths as the table shows them on any machine
    return f"{type(e).__name__}: {msg[:110]}"


def _invariant(model: nn.Module, b: Batch, flat) -> str:
    model = model.eval()
    ref = call(model, b)
    w = ipu_wrap(copy.deepcopy(model), inputs="tensors").eval()
    out = w(flat)["output"]
    rows = flat["node_mask"] if out.size(0) == BUDGET["nodes"] and ref.size(0) == b.num_nodes else (
        flat["graph_mask"] if out.size(0) == BUDGET["graphs"] else None)
    if rows is None:
        return f"output rows {out.size(0)} (unpadded {ref.size(0)}): not a node or graph level result"
    got = out[rows]
    if got.shape != ref.shape:
        return f"shape {tuple(got.shape)} vs unpadded {tuple(ref.shape)}"
    err = (got - ref).abs().max().item() if ref.numel() else 0.0
    return "ok" if err < 1e-4 else f"differs by {err:.2g}"


def _compiles(model: nn.Module, flats, modes: Tuple[bool, ...] = (True, False),
              grad: bool = True) -> str:
    from ..torch_internals import lookup_backend, reset_dynamo

    aot = lookup_backend("aot_eager")
    counts = []
    for train in modes:
        reset_dynamo()
        n = [0]

        def counting(gm, ex):
            n[0] += 1
            return aot(gm, ex)

        w = ipu_wrap(copy.deepcopy(model), inputs="tensors").train(train)
        compiled = torch.compile(w, fullgraph=True, dynamic=False, backend=counting)
        # the settings graph_adapter.compile scopes to each call of a model with an RNN
        rnn = rnn_settings() if has_rnn(w) else contextlib.nullcontext()
        with torch.set_grad_enabled(grad), rnn:
            for flat in flats:
                compiled(flat)
        counts.append(n[0])
    if counts == [1] * len(modes):
        return "ok"
    return "compiles " + ", ".join(f"{'train' if t else 'eval'} {c}" for t, c in zip(modes, counts))


def _exports(model: nn.Module, flat) -> str:
    w = ipu_wrap(copy.deepcopy(model), inputs="tensors").eval()
    torch.export.export(w, (flat,), strict=False)
    return "ok"


def _clean(model: nn.Module, flat) -> str:
    report = check(ipu_wrap(copy.deepcopy(model), inputs="tensors").eval(), flat)
    if report.ok:
        return "ok"
    f = report.errors[0]
    where = re.search(r"torch_geometric/[\w/]+\.py:\d+", f.message)
    return f"{f.kind}: {f.op.split(' (')[0]}" + (f" at {where.group(0)}" if where else "")


def run_row(family: str, name: str, entry: Any, why: bool = True,
            modes: Tuple[bool, ...] = (True, False), grad: bool = True) -> Dict[str, str]:
    """The four results of one row (``"ok"`` or why not) and a note.

    A built row with a red cell gets its note from :data:`WHY_NOT` (the cause
    as the probes measure it, the workaround and the workaround's own cells);
    ``why=False`` skips that (a workaround's own run). ``modes``: the
    ``train()`` modes compiled; ``grad``: compile with gradients enabled.
    """
    res = {"family": family, "name": name, "eager": "", "compile": "", "export": "", "check": "",
           "note": ""}
    if isinstance(entry, str):
        res["note"] = "not built: " + entry
        return res
    factory, style = entry if isinstance(entry, tuple) else (entry, "")
    try:
        torch.manual_seed(0)
        layer = factory()
        model = Row(family, layer, style)
        b, flat = _pad(_graphs(0))
        call(model.eval(), b)
    except Exception as e:  # noqa: BLE001 - the table reports it
        res["note"] = "not built: " + _why(e)
        return res
    b1, flat1 = _pad(_graphs(1))
    steps = [("eager", lambda: _invariant(model, b, flat)),
             ("compile", lambda: _compiles(model, [flat, flat1], modes, grad)),
             ("export", lambda: _exports(model, flat)), ("check", lambda: _clean(model, flat))]
    for key, step in steps:
        try:
            res[key] = step()
        except Exception as e:  # noqa: BLE001
            res[key] = _why(e)
    if why and not all(res[k] == "ok" for k in CELLS):
        res["note"] = _why_not(family, name, factory, style, model, (b, b1), res)
    return res
