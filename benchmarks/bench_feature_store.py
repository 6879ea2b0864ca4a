"""Resident memory of FixedSizeNeighborLoader with features on disk against features in memory.

A graph whose node features (``--nodes`` x ``--dim`` float32, 1 GB by default) are
written once to a ``.npy`` file; then, each in a fresh process so the figures are
its own, one epoch slice (``--batches`` batches of ``--batch-size`` seeds,
``[10, 5]``) of the loader given:

* ``feature store``: ``(MemmapFeatureStore, graph store)``, PyG's remote-backend
  input: each batch reads its rows through ``multi_get_tensor``;
* ``memmap on Data``: ``Data(x=np.load(path, mmap_mode="r"), edge_index=...)``;
* ``tensor on Data``: the features read into a tensor first (what the loader
  would hold without the first two: the baseline).

For each: the growth of the process's anonymous memory (``RssAnon``: what the
process itself allocated: the loader, its CSC, its batches, any copy of the
features) from before the loader was built to after the batches, its file-backed
resident pages (``RssFile``: the feature file's pages the batches touched; the
kernel's page cache, shared and reclaimable, not a copy), and anonymous growth
over the feature file's size side by side.

Run: ``python benchmarks/bench_feature_store.py [--nodes 2000000 --dim 128 --batches 30]``
(``--dir`` keeps the files; default a temporary directory, removed after).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ("feature store", "memmap on Data", "tensor on Data")


def _status() -> dict:
    """RssAnon / RssFile / VmHWM of this process, in MB (Linux ``/proc/self/status``)."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("RssAnon", "RssFile", "VmHWM"):
                out[k] = int(v.split()[0]) / 1024
    return out


def _write(directory: str, nodes: int, dim: int, degree: int, seed: int) -> None:
    """The feature file, chunk by chunk (never whole in memory), and the edges."""
    import numpy as np
    import torch

    from graph_adapter.sampling import MemmapFeatureStore

    store = MemmapFeatureStore(os.path.join(directory, "store"))
    x = store.create_tensor(None, "x", (nodes, dim), "float32")
    rng = np.random.default_rng(seed)
    step = max(1, (64 << 20) // (4 * dim))  # 64 MB a chunk
    chunk = rng.standard_normal((min(step, nodes), dim), dtype=np.float32)
    for s in range(0, nodes, step):  # one random chunk, shifted: the values do not matter
        x[s:s + step] = chunk[:min(step, nodes - s)] + np.float32(s / nodes)
    x.flush()
    del x
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, nodes, (2, nodes * degree), generator=g)
    np.save(os.path.join(directory, "edge_index.npy"), ei.numpy())


def _x_path(directory: str) -> str:
    """The feature file, as the store's metadata names it."""
    with open(os.path.join(directory, "store", "metadata.json")) as f:
        return os.path.join(directory, "store", json.load(f)["columns"][0]["file"])


def _child(mode: str, directory: str, batches: int, batch_size: int) -> dict:
    """One mode's figures, in this (fresh) process."""
    import numpy as np
    import torch
    from torch_geometric.data import Data
    from torch_geometric.testing import MyGraphStore

    from graph_adapter.sampling import FixedSizeNeighborLoader, MemmapFeatureStore

    torch.set_num_threads(1)
    ei = torch.from_numpy(np.load(os.path.join(directory, "edge_index.npy")))
    store = MemmapFeatureStore(os.path.join(directory, "store"))
    from torch_geometric.data import TensorAttr

    nodes = store.get_tensor_size(TensorAttr(None, "x", None))[0]
    x_path = _x_path(directory)
    file_mb = os.path.getsize(x_path) / 2**20
    before = _status()
    t = time.perf_counter()
    if mode == "feature store":
        gs = MyGraphStore()
        gs.put_edge_index((ei[0], ei[1]), edge_type=None, layout="coo", size=(nodes, nodes))
        data = (store, gs)
    else:
        x = np.load(x_path, mmap_mode="r")
        if mode == "tensor on Data":
            x = torch.from_numpy(np.array(x))  # a copy, read whole: the baseline
        data = Data(x=x, edge_index=ei)
    loader = FixedSizeNeighborLoader(data, [10, 5], batch_size=batch_size, shuffle=True,
                                     fit_batches=4)
    built = _status()
    rows = 0
    for i, flat in enumerate(loader):
        rows += int(flat["node_mask"].sum())
        if i + 1 == batches:
            break
    after = _status()
    return {"mode": mode, "seconds": time.perf_counter() - t, "file_mb": file_mb,
            "anon_growth_mb": after["RssAnon"] - before["RssAnon"],
            "anon_after_build_mb": built["RssAnon"] - before["RssAnon"],
            "file_resident_mb": after["RssFile"] - before["RssFile"],
            "rows": rows, "batch_x_mb": float(flat["x"].numel() * 4 / 2**20),
            "budget": str(loader.budget)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=2_000_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--degree", type=int, default=4)
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--dir", default=None, help="keep the files here (default: a temp dir)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        print(json.dumps(_child(a.child, a.dir, a.batches, a.batch_size)))
        return
    directory = a.dir or tempfile.mkdtemp(prefix="bench_feature_store_")
    try:
        t = time.perf_counter()
        _write(directory, a.nodes, a.dim, a.degree, a.seed)
        print(f"graph: {a.nodes:,} nodes x {a.dim} float32 features "
              f"({a.nodes * a.dim * 4 / 2**30:.2f} GiB on disk), {a.nodes * a.degree:,} edges; "
              f"written in {time.perf_counter() - t:.1f} s; {a.batches} batches of "
              f"{a.batch_size} seeds, [10, 5]")
        rows = []
        for mode in MODES:
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode,
                                  "--dir", directory, "--batches", str(a.batches),
                                  "--batch-size", str(a.batch_size)],
                                 capture_output=True, text=True, cwd=ROOT,
                                 env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep +
                                          os.environ.get("PYTHONPATH", "")))
            if out.returncode != 0:
                print(f"{mode}: failed\n{out.stderr[-2000:]}")
                continue
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"\n{'input':<16} {'anon growth MB':>15} {'of it at build':>15} "
              f"{'file pages MB':>14} {'anon / file':>12} {'seconds':>8}")
        for r in rows:
            print(f"{r['mode']:<16} {r['anon_growth_mb']:>15.0f} {r['anon_after_build_mb']:>15.0f} "
                  f"{r['file_resident_mb']:>14.0f} {r['anon_growth_mb'] / r['file_mb']:>12.3f} "
                  f"{r['seconds']:>8.1f}")
        if rows:
            print(f"\nfeature file {rows[0]['file_mb']:.0f} MB; one batch's x "
                  f"{rows[0]['batch_x_mb']:.1f} MB ({rows[0]['budget']})")
        base = {r["mode"]: r for r in rows}.get("tensor on Data")
        if base:
            for r in rows:
                if r is not base:
                    print(f"{r['mode']}: anonymous growth {r['anon_growth_mb']:.0f} MB vs "
                          f"{base['anon_growth_mb']:.0f} MB in memory "
                          f"({r['anon_growth_mb'] / max(base['anon_growth_mb'], 1):.3f}x)")
    finally:
        if a.dir is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
