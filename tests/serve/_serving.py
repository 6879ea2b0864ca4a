"""Run ``graph_adapter.serve`` in a fresh interpreter where PyG (and, for ONNX, torch) cannot
be imported, on graphs handed over as an ``.npz`` (numpy only, no pickle)."""
import json
import os
import subprocess
import sys
import textwrap
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_SCRIPT = textwrap.dedent("""
    import json, sys
    BLOCKED = set(sys.argv[4].split(","))

    class Blocker:  # an import of a blocked package fails as if it were not installed
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
            return None

    sys.meta_path.insert(0, Blocker())
    import numpy as np
    from graph_adapter import serve

    z = np.load(sys.argv[2])
    count = int(z["count"])
    graphs = [{k.split("/", 1)[1]: z[k] for k in z.files if k.startswith(f"g{i}/")}
              for i in range(count)]
    p = serve.load(sys.argv[1], threads=1)
    preds = p.predict(graphs)
    out = {}
    for i, pred in enumerate(preds):
        for k, v in (pred.items() if isinstance(pred, dict) else [("", pred)]):
            out[f"p{i}/{k}"] = v.numpy() if hasattr(v, "numpy") else np.asarray(v)
    np.savez(sys.argv[3], **out)
    loaded = sorted({m.split(".")[0] for m in sys.modules})
    print(json.dumps({"calls": p.calls, "top_modules": loaded}))
""")


def save_graphs(graphs: Sequence[Any], keys: Sequence[str], path: str) -> None:
    """Request graphs as plain arrays in an .npz (what a client would send)."""
    arrays = {"count": np.asarray(len(graphs))}
    for i, d in enumerate(graphs):
        for k in keys:
            arrays[f"g{i}/{k}"] = d[k].numpy()
    np.savez(path, **arrays)


def serve_in_fresh_process(artifact: str, graphs: Sequence[Any], keys: Sequence[str],
                           tmp: str, blocked: Tuple[str, ...] = ("torch_geometric",)
                           ) -> Tuple[List[Dict[str, np.ndarray]], Dict[str, Any]]:
    """Per graph ``{output key or "": array}``, and what the process reported."""
    req, out = os.path.join(tmp, "request.npz"), os.path.join(tmp, "predictions.npz")
    save_graphs(graphs, keys, req)
    env = dict(os.environ, PYTHONPATH=ROOT)
    run = subprocess.run([sys.executable, "-c", _SCRIPT, artifact, req, out, ",".join(blocked)],
                         capture_output=True, text=True, timeout=300, env=env, cwd=tmp)
    assert run.returncode == 0, run.stderr[-3000:]
    info = json.loads(run.stdout.strip().splitlines()[-1])
    z = np.load(out)
    preds: List[Dict[str, np.ndarray]] = [{} for _ in graphs]
    for name in z.files:
        i, key = name[1:].split("/", 1)
        preds[int(i)][key] = z[name]
    return preds, info


def eager_per_graph(model: torch.nn.Module, graphs: Sequence[Any], call) -> List[torch.Tensor]:
    """The plain model's prediction of each graph alone (eager PyG, no padding)."""
    from torch_geometric.data import Batch

    out = []
    with torch.no_grad():
        for d in graphs:
            out.append(call(model, Batch.from_data_list([d])))
    return out
