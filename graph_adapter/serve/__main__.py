"""``python -m graph_adapter.serve model.pt2 --port 8000``: the server without the
``graph-adapter`` command (which needs PyG); see :mod:`graph_adapter.serve.server`."""
import sys

from .server import serve_main

if __name__ == "__main__":
    sys.exit(serve_main(prog="python -m graph_adapter.serve"))
