"""The PyG zoo table of ``docs/zoo.md``: every PyG layer through the adapter.

* :mod:`~graph_adapter.app.zoo.table`: the table (``python -m graph_adapter.app.zoo``);
* :mod:`~graph_adapter.app.zoo.layers`: its rows (one model per layer);
* :mod:`~graph_adapter.app.zoo.run`: the run of one row;
* :mod:`~graph_adapter.app.zoo.why`: the red rows' causes.
"""
