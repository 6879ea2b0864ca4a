"""``python -m graph_adapter.app.zoo``: writes or prints the zoo table."""
from .table import main

if __name__ == "__main__":
    raise SystemExit(main())
