"""What the ``"inductor"`` backend changes in inductor, and the caches around its compiles.

* :mod:`~graph_adapter.backends.inductor.cpu_settings`: the CPU training
  settings (boolean masks recomputed in the backward, ``index_add`` gradients,
  the generated code read for atomic adds) and the pass slots they fill;
* :mod:`~graph_adapter.backends.inductor.rewrites`: the graph rewrites run in
  those slots (embedding tables projected, thin matmuls transposed, linears
  composed, pure ops deduplicated, recomputed values stored once);
* :mod:`~graph_adapter.backends.inductor.host_checks`: inductor's per-process
  host checks (ISA probes, header preprocessing) answered from an earlier
  process's records;
* :mod:`~graph_adapter.backends.inductor.precompile`: precompiled entries
  (``compile(..., precompile=True)``) saved and loaded.

These modules touch torch's inductor and Dynamo internals by design (listed in
``docs/dev/ARCHITECTURE.md``). Used by :mod:`graph_adapter.backends` only; it
may import :mod:`graph_adapter.format` and torch.
"""
__all__ = ["cpu_settings", "rewrites", "host_checks", "precompile"]
