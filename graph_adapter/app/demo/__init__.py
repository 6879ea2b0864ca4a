"""``graph-adapter demo``: a stock PyG GNN trained through the adapter beside eager PyG.

* :mod:`~graph_adapter.app.demo.graph`: the molecule demo (:func:`run_demo`): loads and
  splits the molecules, fits the budget, trains the runs, times them, returns a
  :class:`DemoResult`;
* :mod:`~graph_adapter.app.demo.config`: its settings, one :class:`DemoConfig` built
  once (from the flags) and passed down;
* :mod:`~graph_adapter.app.demo.timing`: the runs (the adapter's, eager PyG's, PyG
  compiled's), the loops they share (epochs, evaluation), the interleaved rounds and
  the repeat probe;
* :mod:`~graph_adapter.app.demo.results`: what a run measured (:class:`DemoResult`),
  with :mod:`~graph_adapter.app.demo.run_stats` (one run's figures and the warm-up
  rule), :mod:`~graph_adapter.app.demo.report` (the text) and
  :mod:`~graph_adapter.app.demo.plot` (the figure);
* :mod:`~graph_adapter.app.demo.node`: the node-level demo on one large graph
  (``--task node``).

Imports run one way: ``graph`` imports ``results`` and ``timing``; ``results`` imports
``plot``, ``report``, ``run_stats`` and ``config``; ``timing`` imports ``run_stats`` and
``config``; ``node`` reads ``config`` only.
"""
