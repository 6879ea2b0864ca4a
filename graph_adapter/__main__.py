"""``python -m graph_adapter``: the ``graph-adapter`` command (see :mod:`graph_adapter.app.cli`)."""
import sys

from .app.cli import main

if __name__ == "__main__":
    sys.exit(main())
