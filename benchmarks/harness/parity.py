"""Training parity sweep: the demo's eager PyG and graph_adapter runs over seeds.

``python benchmarks/bench_parity.py`` runs
``graph-adapter demo --seed S --model M`` for every seed, each in its own
process (same initial weights, optimizer, schedule and epochs for both runs:
the demo builds both models from one seeded state), and prints every seed's
test MAE for both columns, the per-seed difference (graph_adapter - eager PyG),
its mean and standard error, and the mean graphs a batch and steps an epoch of
both columns.  Parity holds when the mean difference is within one standard
error of zero, or within 3% of eager PyG's mean MAE.

The adapter runs on ``--backend`` (default ``eager``: parity is about the
model and the batches, not the compiler, and an eager sweep takes half the
time of an inductor one on a 2-core machine).  Results are appended, one JSON
line a seed, to ``--log`` as they finish, so a sweep cut short keeps what it
measured.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence

__all__ = ["run_seed", "summarize", "format_summary", "main"]


def run_seed(seed: int, model: str, backend: str = "eager", epochs: Optional[int] = None,
             limit: Optional[int] = None, threads: Optional[int] = None) -> Dict[str, Any]:
    """One demo run (its own process) -> the figures of both columns.

    Returns ``{"seed", "model", "backend", "adapter": {...}, "eager": {...}}``,
    each column with ``test_mae``, ``steps`` and ``mean_graphs_per_batch``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "demo.json")
        cmd = [sys.executable, "-m", "graph_adapter.app.cli", "demo", "--seed", str(seed),
               "--model", model, "--backend", backend, "--no-pyg-compile",
               "--train-rounds", "0", "--infer-rounds", "1", "--quiet", "--json", out]
        if epochs is not None:
            cmd += ["--epochs", str(epochs)]
        if limit is not None:
            cmd += ["--limit", str(limit)]
        if threads is not None:
            cmd += ["--threads", str(threads)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"bench_parity: the demo failed for seed {seed}, model {model} "
                               f"(rc {proc.returncode}): {proc.stderr[-2000:]}")
        with open(out, encoding="utf-8") as f:
            d = json.load(f)
    keep = ("test_mae", "steps", "mean_graphs_per_batch", "train_graphs")
    return {"seed": seed, "model": model, "backend": d.get("training_backend", backend),
            "budget": d.get("budget"),
            "adapter": {k: d["adapter"][k] for k in keep},
            "eager": {k: d["eager"][k] for k in keep}}


def summarize(rows: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Means, the per-seed difference (adapter - eager) with its standard error
    (sample std / sqrt(n); NaN for one seed) and the parity verdict."""
    n = len(rows)
    if n == 0:
        raise ValueError("summarize: no seeds")
    a = [r["adapter"]["test_mae"] for r in rows]
    e = [r["eager"]["test_mae"] for r in rows]
    diff = [x - y for x, y in zip(a, e)]
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    md = mean(diff)
    se = math.sqrt(sum((d - md) ** 2 for d in diff) / (n - 1) / n) if n > 1 else float("nan")
    me = mean(e)
    return {"seeds": n, "adapter_mae": mean(a), "eager_mae": me, "mean_diff": md,
            "se_diff": se, "adapter_above_in": sum(d > 0 for d in diff),
            "within_one_se": bool(n > 1 and abs(md) <= se),
            "within_3pct": bool(abs(md) <= 0.03 * me),
            "adapter_graphs_per_batch": mean([r["adapter"]["mean_graphs_per_batch"]
                                              for r in rows]),
            "eager_graphs_per_batch": mean([r["eager"]["mean_graphs_per_batch"] for r in rows]),
            "adapter_steps": mean([r["adapter"]["steps"] for r in rows]),
            "eager_steps": mean([r["eager"]["steps"] for r in rows])}


def format_summary(rows: Sequence[Dict[str, Any]]) -> str:
    """A markdown table, one row a seed, then the means and the verdict."""
    lines = ["| seed | graph_adapter MAE | eager PyG MAE | difference |",
             "|---|---|---|---|"]
    for r in rows:
        a, e = r["adapter"]["test_mae"], r["eager"]["test_mae"]
        lines.append(f"| {r['seed']} | {a:.2f} | {e:.2f} | {a - e:+.2f} |")
    s = summarize(rows)
    lines.append(f"| mean | {s['adapter_mae']:.2f} | {s['eager_mae']:.2f} | "
                 f"{s['mean_diff']:+.2f} (SE {s['se_diff']:.2f}) |")
    lines.append("")
    lines.append(f"graphs a batch: {s['adapter_graphs_per_batch']:.1f} (graph_adapter) / "
                 f"{s['eager_graphs_per_batch']:.1f} (eager PyG); steps an epoch: "
                 f"{s['adapter_steps'] / max(1, _epochs(rows)):.1f} / "
                 f"{s['eager_steps'] / max(1, _epochs(rows)):.1f}")
    verdict = "parity" if s["within_one_se"] or s["within_3pct"] else "NO parity"
    lines.append(f"{verdict}: mean difference {s['mean_diff']:+.3f} vs one SE {s['se_diff']:.3f}"
                 f" and 3% of eager's MAE {0.03 * s['eager_mae']:.3f}; adapter above eager in "
                 f"{s['adapter_above_in']} of {s['seeds']} seeds")
    return "\n".join(lines)


def _epochs(rows) -> int:
    """Epochs of the sweep (``steps`` are counted over all epochs)."""
    return int(rows[0].get("epochs", 10))


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/bench_parity.py", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(8)))
    p.add_argument("--models", nargs="+", default=["gine", "gin"])
    p.add_argument("--backend", default="eager")
    p.add_argument("--epochs", type=int, default=None, help="default: the demo's (10)")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--log", default=None, help="append one JSON line a seed here")
    a = p.parse_args(argv)
    for model in a.models:
        rows = []
        for seed in a.seeds:
            r = run_seed(seed, model, a.backend, a.epochs, a.limit, a.threads)
            r["epochs"] = a.epochs if a.epochs is not None else 10
            rows.append(r)
            print(json.dumps(r), flush=True)
            if a.log:
                with open(a.log, "a", encoding="utf-8") as f:
                    f.write(json.dumps(r) + "\n")
        print(f"\n## --model {model}, adapter backend {rows[0]['backend']}\n")
        print(format_summary(rows), flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
