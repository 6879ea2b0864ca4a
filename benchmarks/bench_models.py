"""The "models" table: compiled training and inference vs eager PyG, per model, geomean.

``python benchmarks/bench_models.py [--only gcn gin] [--limit 1000] [--rounds 5]
[--threads 1] [--layout model|none|ell|hyb]``; see
:mod:`graph_adapter.app.bench.models` (``graph-adapter bench --only models``).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from graph_adapter.app.bench.models import main  # noqa: E402

if __name__ == "__main__":
    main()
