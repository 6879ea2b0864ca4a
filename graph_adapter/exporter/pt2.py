"""``format="pt2"``: AOTInductor packages (``torch._inductor.aoti_compile_and_package``:
a zip of the compiled model and its weights, run by torch alone), checked against eager
before the archive is written, the contract in its ``extra/graph_adapter.json``; a
ladder's rungs one program each in one archive."""
from __future__ import annotations

import contextlib
import copy
import os
import tempfile
import zipfile
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from ..batching import Budget
from ..serve import CONTRACT_FILE, Contract, Rung
from .checks import Case, check_cases, max_diff
from .contract import updated
from .ladder import rung_batches
from .trace import Inference, rewritten_program, trace

__all__ = ["num_threads", "write_pt2", "write_pt2_ladder"]


@contextlib.contextmanager
def num_threads(n: int) -> Iterator[None]:
    """``torch.set_num_threads(n)`` inside, the previous count restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _compiled_and_checked(ep: Any, d: str, configs: Optional[Dict[str, Any]],
                          cases: Sequence[Case], contract: Contract,
                          where: str) -> Tuple[str, float]:
    """``ep`` compiled into a temporary AOTInductor package in ``d`` and run on ``cases``
    against eager: ``(package path, largest difference)``; the file is removed if
    anything fails (``where`` names the program in a mismatch, before the batch)."""
    fd, tmp = tempfile.mkstemp(suffix=".pt2", prefix=".export-", dir=d)
    os.close(fd)
    try:
        torch._inductor.aoti_compile_and_package(ep, package_path=tmp,
                                                 inductor_configs=dict(configs or {}))
        model = torch._inductor.aoti_load_package(tmp)
        worst = 0.0
        for i, (flat, ref, full) in enumerate(cases):
            with torch.inference_mode():
                got = model(flat)
            worst = max(worst, max_diff(got, ref, contract, full, f"{where}check batch {i}"))
    except BaseException:
        os.remove(tmp)
        raise
    return tmp, worst


def write_pt2(ep: Any, path: str, contract: Contract, cases: Sequence[Case],
              inductor_configs: Optional[Dict[str, Any]]) -> Contract:
    """The AOTInductor package of the program ``ep`` for one budget: compiled into a
    temporary file beside ``path``, checked on ``cases``, the contract added, moved to
    ``path``; returns the contract."""
    tmp, worst = _compiled_and_checked(ep, os.path.dirname(os.path.abspath(path)),
                                       inductor_configs, cases, contract, " of ")
    try:
        contract = updated(contract, verified_max_abs_diff=worst)
        with zipfile.ZipFile(tmp, "a") as z:
            root = z.namelist()[0].split("/")[0]
            z.writestr(f"{root}/extra/{CONTRACT_FILE}", contract.to_json())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return contract


def _pt2_rung(module: Inference, dropped: List[str], b: Budget, data: Sequence[Any],
              rewrite: bool, contract: Contract, configs: Optional[Dict[str, Any]],
              d: str) -> Tuple[str, float]:
    """One rung compiled into a temporary package in ``d`` and checked against eager on
    its check batches: ``(package path, largest difference)``."""
    cases = check_cases(module, dropped, None, rung_batches(data, b))
    fed = cases[0][0]
    ep = trace(module, fed)
    if rewrite:
        ep, _ = rewritten_program(ep, fed)
    c = updated(contract, nodes=int(b.nodes), edges=int(b.edges), graphs=int(b.graphs))
    where = f" of rung nodes={b.nodes}, edges={b.edges}, graphs={b.graphs}, "
    return _compiled_and_checked(ep, d, configs, cases, c, where)


def _merge_pt2(packages: Sequence[Tuple[str, str]], contract: Contract, path: str) -> None:
    """One archive of several AOTInductor packages: the first keeps its program name
    ``model``, every other one's goes under ``data/aotinductor/<name>/``."""
    base = packages[0][1]
    with zipfile.ZipFile(base, "a") as out:
        root = out.namelist()[0].split("/")[0]
        for name, pkg in packages[1:]:
            with zipfile.ZipFile(pkg) as z:
                for info in z.infolist():
                    rel = info.filename.split("/", 1)[1]
                    if rel.startswith("data/aotinductor/model/"):
                        info2 = copy.copy(info)
                        info2.filename = f"{root}/data/aotinductor/{name}/" + \
                            rel[len("data/aotinductor/model/"):]
                        out.writestr(info2, z.read(info.filename))
        out.writestr(f"{root}/extra/{CONTRACT_FILE}", contract.to_json())
    os.replace(base, path)


def write_pt2_ladder(module: Inference, dropped: List[str], budgets: Sequence[Budget],
                     data: Sequence[Any], path: str, contract: Contract, rewrite: bool,
                     configs: Optional[Dict[str, Any]]) -> Contract:
    """Every rung compiled and checked, then one archive: the largest rung is the
    program ``model`` (and the contract's top-level budget), rung ``i`` ``rung<i>``."""
    d = os.path.dirname(os.path.abspath(path))
    top = max(range(len(budgets)), key=lambda i: (budgets[i].nodes + budgets[i].edges))
    built: List[Tuple[str, str]] = []
    rungs: List[Rung] = []
    try:
        for i, b in enumerate(budgets):
            tmp, worst = _pt2_rung(module, dropped, b, data, rewrite, contract, configs, d)
            name = "model" if i == top else f"rung{i}"
            built.append((name, tmp))
            rungs.append(Rung(int(b.nodes), int(b.edges), int(b.graphs), name, worst))
        built.sort(key=lambda p: p[0] != "model")
        t = budgets[top]
        contract = updated(contract, nodes=int(t.nodes), edges=int(t.edges),
                           graphs=int(t.graphs), rungs=tuple(rungs),
                           verified_max_abs_diff=max(r.verified_max_abs_diff for r in rungs))
        _merge_pt2(built, contract, path)
    finally:
        for _, tmp in built:
            if os.path.exists(tmp):
                os.remove(tmp)
    return contract
