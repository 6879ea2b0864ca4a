"""The PyG zoo through graph_adapter: one row per conv, model, norm, pool and aggregation.

``python -m graph_adapter.app.zoo.table [--write docs/zoo.md] [--only NAME ...]``

For every class/function in ``torch_geometric.nn.conv / aggr / norm / pool /
models.__all__`` this builds the layer (a small default: 8 features, 3 edge
features, 3-D positions) and, on padded batches of one budget:

* **eager**: ``ipu_wrap(layer)(padded)`` equals ``layer(unpadded)`` on real rows (eval);
* **compile**: ``torch.compile(fullgraph=True, backend="aot_eager")`` compiles
  once in train() and once in eval() over two batches of the budget;
* **export**: ``torch.export.export`` (non-strict) of the wrapped layer;
* **check**: :func:`graph_adapter.check` finds nothing poptorch would reject.

A built row with a red cell gets a note from :data:`WHY_NOT`: ``why:`` the
causes, each measured by a probe on the same batches (a probe that does not
reproduce its cause makes the note ``unexplained: ...``, which
``tests/app/test_zoo.py`` rejects), ``Instead:`` what a user does, and after
``->`` the results of that workaround, run like a row. A row that cannot be
built here (needs an optional package, a hetero graph, a sparse adjacency,
...) says why. The table between the markers of ``docs/zoo.md`` is
rewritten by ``--write`` (the whole table: not with ``--only``, which runs
and prints a few rows while developing).

The rows live in :mod:`graph_adapter.app.zoo.layers`, the red rows' causes and
workarounds in :mod:`graph_adapter.app.zoo.why`, the run of one row in
:mod:`graph_adapter.app.zoo.run`; this module tables them.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Dict, List, Optional

from .layers import (AGGR, BUDGET, CONV, EDGE_DIM, FAMILIES, MODEL, NORM, POOL, F, Row,
                         rows)
from .run import run_row
from .why import CELLS, WHY_NOT, WIDTH, Probe, Try, WhyNot

__all__ = ["BEGIN", "END", "table", "write", "main", "run_row", "rows", "Row", "F", "EDGE_DIM",
           "BUDGET", "CONV", "AGGR", "NORM", "POOL", "MODEL", "FAMILIES", "CELLS", "WIDTH",
           "Probe", "Try", "WhyNot", "WHY_NOT"]

BEGIN, END = "<!-- zoo:begin -->", "<!-- zoo:end -->"


# --------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------
def _cell(v: str) -> str:
    return "✅" if v == "ok" else ("" if not v else f"❌ {v}")


def table(results: List[Dict[str, str]]) -> str:
    lines = ["| family | name | eager = unpadded | one compile per mode | export | check (poptorch) | note |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['family']} | `{r['name']}` | {_cell(r['eager'])} | {_cell(r['compile'])} "
                     f"| {_cell(r['export'])} | {_cell(r['check'])} | {r['note']} |")
    green = sum(all(r[k] == "ok" for k in CELLS) for r in results)
    built = sum(not r["note"].startswith("not built") for r in results)
    why = sum(r["note"].startswith("why:") for r in results)
    lines.append("")
    lines.append(f"{green} of {built} built rows all green, {why} say why not (note); "
                 f"{len(results) - built} not built here (reason in the row).")
    return "\n".join(lines)


def write(path: str, text: str) -> None:
    with open(path) as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        raise ValueError(f"{path} has no {BEGIN} ... {END} markers")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(path, "w") as f:
        f.write(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", help="rewrite the table in this markdown file (docs/zoo.md)")
    p.add_argument("--only", nargs="*", help="row names to run")
    args = p.parse_args(argv)
    if args.only and args.write:
        p.error("--write rewrites the whole table; --only runs a few rows (print them "
                "without --write)")
    results = []
    for family, name, entry in rows():
        if args.only and name not in args.only:
            continue
        t = time.perf_counter()
        results.append(run_row(family, name, entry))
        print(f"{family:6s} {name:28s} {time.perf_counter() - t:5.1f}s "
              f"{[results[-1][k] for k in ('eager', 'compile', 'export', 'check')]} {results[-1]['note']}",
              file=sys.stderr, flush=True)
    text = table(results)
    if args.write:
        write(args.write, text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
