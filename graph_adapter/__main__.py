"""``python -m graph_adapter``: the ``graph-adapter`` command (see :mod:`graph_adapter.cli`)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
