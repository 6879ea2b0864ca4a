"""How ``graph_adapter.compile(..., "inductor")`` steers inductor's code.

Settings, each measured on the demo's model (GINEConv 4 x 64 +
BatchNorm, 64 molecules a batch; ``docs/benchmarks.md``, "Compiled training
on CPU"), and one reading (4):

1. **Boolean masks are recomputed, not saved** (:func:`recompute_bool_masks`).
   AOTAutograd's partitioner saves the cheapest tensors for the backward
   pass; for ``relu`` that is the 1-byte mask ``out <= 0``. Inductor's CPU
   code stores a boolean vector through ``at::vec::VecMask::store(bool*)``,
   a generic element-by-element path: one ``[2246, 64]`` mask took 1.5 ms
   against 0.06 ms for the same kernel storing floats (torch 2.13,
   AVX-512). Marking every boolean computed from forward values
   ``MUST_RECOMPUTE`` makes the partitioner save the float instead and
   recompute the comparison inside the backward's fused loop (in
   registers, never stored). Compiled training went from 0.81x to 1.31x
   eager PyG at 1 thread. Booleans downstream of random ops (dropout's
   mask) are left alone: recomputing them would draw new numbers.
2. **The gradient of a gather is ATen's** ``index_add`` with more than one
   thread (``index_add_fallback``): inductor would decompose it into a loop
   of atomic adds.
3. **The gradient of an embedding, and of a gather written** ``x[index]``,
   **is an** ``index_add`` too, under the same rule: inductor's own decomposition scatters ``[N, D]`` rows into a small
   table with atomic adds, and two threads contend on its few rows
   (1.7 ms a step for the demo's 12 embeddings, 0.2 ms as ``index_add``).

4. **The backward is compiled with the forward** (:func:`compile_and_scan`),
   so that the code of both can be read for ``atomic_add``
   (``Compiled.atomic_adds``: whether sums change order from run to run).
5. **A linear layer of a sum of embedding lookups projects the tables**
   (``pre_grad_custom_pass``, :mod:`graph_adapter.backends.inductor.rewrites`): the
   demo's four per-layer edge projections of ``[E, 64]`` bond embeddings
   become products of the 30 bond-table rows, looked up inside the
   message kernel (compiled inference 26.4 -> 21.4 ms an epoch of 1000
   molecules under load, same process). Not CPU-specific: it applies on
   every device inductor compiles for. Before it, in the same pass, a linear
   layer of a linear layer whose input is narrow becomes one product of the
   raw input (:func:`~graph_adapter.backends.inductor.rewrites.compose_linears`:
   GINE's per-layer edge projections of encoded 3-feature bonds; compiled GINE
   inference 1.5-1.7x faster, ``docs/benchmarks.md``, "Compiled inference
   kernel by kernel").
6. **CPU inference graphs get the C++ wrapper** (:data:`CPU_INFERENCE_PATCHES`).
7. **The** ``index_add`` **setting is part of inductor's cache key**
   (:func:`key_decompositions`): a graph compiled with atomic adds was served
   to a compile with the fallback.
8. **The decomposition table pickles by its recipe** (:class:`DecompositionTable`):
   inductor keys its FX graph cache by the table too, by pickling every
   entry, and one of its own entries is a pybind11 function, so every graph
   compiled with the fallback bypassed the cache ("unpicklable type
   pybind11_detail_function_record") and a second process compiled it again.
   Measured on the demo's model at 2 threads: 3 bypasses before, 3 hits in
   the second process after (``tests/backends/test_compile_cache.py``).

10. **The host checks of a warm process are answered from disk**
   (:mod:`graph_adapter.backends.inductor.host_checks`, entered around the compile by
   the inductor engine): the per-process vector-ISA ``dlopen`` probes and the
   precompiled-header preprocessing, 1.5 s of subprocess CPU time in a warm
   first training step of the demo's model, now 0.00-0.01 s.

11. **No input size asserts in the generated wrapper** (:data:`CALL_PATCHES`).
12. **Thin matrix products are computed transposed** (``post_grad_custom_post_pass``,
   :func:`graph_adapter.backends.inductor.rewrites.transpose_thin_matmuls`): MKL's
   ``[128, N] x [N, 9]`` (the weight gradient of a 9-feature input linear) took
   5.6x the time of the same numbers as ``([9, N] x [N, 128])^T``. The same
   pass then merges an inference graph's repeated pure ops
   (:func:`~graph_adapter.backends.inductor.rewrites.dedupe_pure_ops`: GCN's
   per-layer ``gcn_norm``) and stores values inductor's fused loops would
   recompute per edge or per vector
   (:func:`~graph_adapter.backends.inductor.rewrites.realize_recomputed_values`:
   GCN's ``deg ** -0.5``, a scalar ``pow`` for every edge and channel vector
   before): compiled GCN inference about 2.2x faster.
13. **A CPU inference graph's ``addmm`` becomes ``mm`` + an add that fuses into a
   generated kernel** (:data:`UNFUSE_BIAS_ADDMM`,
   :func:`graph_adapter.backends.inductor.rewrites.unfuse_bias.unfuse_bias_addmm`,
   run before 12's rewrites in the same pass slot): ATen's CPU ``addmm`` copies
   the bias (or, chained, a whole product) into its output first.

14. **A narrowing linear layer of a sum or mean aggregation projects before it, and
   thin products of one operand are one product** (same pass slot as 12, before its
   rewrites: :func:`~graph_adapter.backends.inductor.rewrites.project_before_aggregate`,
   :func:`~graph_adapter.backends.inductor.rewrites.merge_shared_left_mms`): the node
   demo's last GraphSAGE layer gathers and sums 8 channels an edge instead of 64, and
   its two ``[N, 64] x [64, 8]`` products become one ``[64, 16]`` product. Compiled
   node-demo inference at 1 thread 1.70x -> 2.24x eager PyG (load 3,
   ``benchmarks/bench_node_inference.py --unprojected``). Inference graphs only in
   practice (a training forward keeps the aggregate for its gradient, and is left
   alone); no graph of the models table matches. Off:
   ``rewrites.project_aggregate.PROJECT_AGGREGATES`` /
   ``rewrites.shared_left.MERGE_SHARED_LEFT`` set to False before compiling.

Tried for the cold compile and not set (``docs/benchmarks.md``, "Where a first
step goes"): ``cpp_wrapper`` for training graphs (gcc summed 71 -> 50 s under
load, but steady training 0.94x), kernels at ``-O2`` (no cold gain measured).

Every setting keeps the results (equal to eager in the float64 tests): only
what is stored between the passes and which kernel adds change (an
``index_add`` may add in another order than a generated loop). User
``options`` override them (``options={"joint_custom_post_pass": None}``
turns 1 off, ``options={"pre_grad_custom_pass": None}`` turns 5 off (both of
its rewrites), ``options={"cpp_wrapper": False}`` turns 6 off,
``options={"post_grad_custom_post_pass": None}`` turns 12, 13 and 14 off (its
six rewrites)).
"""
from __future__ import annotations

import contextlib
import functools
import logging
from typing import Any, Callable, Dict, Iterator, Optional, Set, Tuple

import torch

__all__ = ["recompute_bool_masks", "use_index_add_fallback", "decompositions",
           "DecompositionTable", "key_decompositions",
           "config_patches",
           "CPU_INFERENCE_PATCHES", "UNFUSE_BIAS_ADDMM", "AUTOGRAD_CACHE_PATCHES", "CALL_PATCHES", "is_cpu_inference", "quiet_proxy_executor_notice",
           "compile_and_scan", "merge_atomic"]

#: Bumped whenever :func:`_mark_bool_masks` changes what it marks (inductor's
#: cache keys compiled graphs by it).
PASS_VERSION = 1


def _mark_bool_masks(graph: torch.fx.Graph) -> int:
    """Tag the boolean tensors of a joint graph's forward ``MUST_RECOMPUTE``; return how many.

    Runs on AOTAutograd's joint forward + backward graph before it is
    partitioned. A node is tagged (the activation-checkpointing tag the
    partitioner honours) when it produces a boolean CPU tensor of one or
    more dims, depends on no tangent (so it belongs to the forward) and on no
    random op, and carries no tag of the user's.
    """
    from torch.utils.checkpoint import CheckpointPolicy

    skip: Set[torch.fx.Node] = set()  # depends on a tangent or a random op
    marked = 0
    for node in graph.nodes:  # topological order
        if node.op == "placeholder":
            if node.name.startswith("tangents"):
                skip.add(node)
            continue
        if node.op != "call_function":
            continue
        # Random ops: the partitioner never recomputes them (it saves their
        # output; the dropout test passes without this check), but a mask drawn
        # from them is left as it is, not forced through that rule.
        if _is_random(node) or any(a in skip for a in node.all_input_nodes):
            skip.add(node)
            continue
        val = node.meta.get("val")
        if (isinstance(val, torch.Tensor) and val.dtype == torch.bool and val.dim() > 0
                and val.device.type == "cpu" and "recompute" not in node.meta):
            node.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
            marked += 1
    return marked


@functools.lru_cache(maxsize=None)
def _pass_class() -> type:
    # Defined on first use: importing torch._inductor costs about a second and
    # 800 modules. torch_geometric 2.8 imports it already, but graph_adapter
    # does not count on that.
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class RecomputeBoolMasks(CustomGraphPass):
        """Inductor's ``joint_custom_post_pass``: :func:`_mark_bool_masks`;
        ``marked`` counts the nodes of the last graph."""

        marked = 0

        def __call__(self, graph: torch.fx.Graph) -> None:
            self.marked = _mark_bool_masks(graph)

        def uuid(self) -> Any:  # inductor's cache keys compiled graphs by it
            return f"graph_adapter.RecomputeBoolMasks.v{PASS_VERSION}"

    return RecomputeBoolMasks


def recompute_bool_masks() -> Any:
    """A fresh instance of the joint-graph pass (a ``CustomGraphPass``, so inductor caches)."""
    return _pass_class()()


def _is_random(node: torch.fx.Node) -> bool:
    tags = getattr(node.target, "tags", ())
    return torch.Tag.nondeterministic_seeded in tags


def use_index_add_fallback(setting: Optional[bool]) -> bool:
    """Whether gathers' and embeddings' gradients run ATen's ``index_add``.

    ``None``: when torch runs more than one thread (inductor's own policy for
    ``scatter_reduce(sum)`` on CPU, ``config.cpp.fallback_scatter_reduce_sum``:
    atomic adds lose to ATen's kernel when more than one thread runs the
    generated loop; at 1 thread both were measured level).
    """
    if setting is not None:
        return bool(setting)
    return torch.get_num_threads() != 1


def _embedding_backward_as_index_add(grad_output: torch.Tensor, indices: torch.Tensor,
                                     num_weights: int, padding_idx: int,
                                     scale_grad_by_freq: bool) -> torch.Tensor:
    """``aten.embedding_dense_backward`` as one ``index_add`` of the gradient rows.

    ``grad_output`` is ``[*indices.shape, D]``; the result is the weight's
    gradient ``[num_weights, D]``; rows looked up at ``padding_idx`` add
    nothing (as ATen's kernel). ``scale_grad_by_freq`` keeps inductor's own
    decomposition.
    """
    from torch._decomp.decompositions import embedding_dense_backward

    if scale_grad_by_freq:
        return embedding_dense_backward(grad_output, indices, num_weights, padding_idx,
                                        scale_grad_by_freq)
    rows = grad_output.reshape(-1, grad_output.size(-1))
    index = indices.reshape(-1)
    if padding_idx >= 0:
        rows = torch.where((index == padding_idx).unsqueeze(-1), 0.0, rows)
    return rows.new_zeros(num_weights, rows.size(-1)).index_add(0, index, rows)


def _index_put_as_index_add(self: torch.Tensor, indices: Any, values: torch.Tensor,
                            accumulate: bool = False) -> Any:
    """``aten.index_put(self, [index], values, accumulate=True)`` with one integer index
    ``[R]`` on dim 0 and ``values`` ``[R, *self.shape[1:]]``, as ``index_add``.

    That is the gradient of ``x[index]`` (``aten.index``), the gather written
    with brackets instead of ``index_select``. Negative ids wrap first, as
    ``index_put`` wraps them. Any other form keeps inductor's lowering
    (``NotImplemented``).
    """
    if not accumulate or len(indices) != 1 or indices[0] is None:
        return NotImplemented
    index = indices[0]
    if index.dtype not in (torch.int64, torch.int32) or index.dim() != 1 \
            or self.dim() < 1 or tuple(values.shape) != (index.size(0),) + tuple(self.shape[1:]):
        return NotImplemented
    index = torch.where(index < 0, index + self.size(0), index)
    return self.index_add(0, index, values)


#: Bumped whenever :func:`decompositions` changes what it decomposes (the table is
#: part of inductor's cache key as ``(decompositions, (True, version))``).
_DECOMP_VERSION = 1


class DecompositionTable(dict):
    """A decomposition table that inductor's cache key pickles by its recipe.

    Inductor (torch 2.13) puts the table handed to ``compile_fx`` into its FX
    graph cache key (``fx_kwargs["get_decomp_fn"]``) by pickling every
    entry; one of its own default entries is a pybind11 function, which does
    not pickle ("Cannot produce stable cache key for unpicklable type
    pybind11_detail_function_record"), so every graph compiled with the
    ``index_add`` fallback bypassed the cache and was compiled again in the
    next process. Pickled as ``decompositions(True, version)`` instead (a
    module-level function, pickled by name), the key is stable and names
    both the setting and :data:`_DECOMP_VERSION`.
    """

    def __reduce__(self) -> Tuple[Callable[..., Any], Tuple[bool, int]]:
        return (_rebuild_table, (True, _DECOMP_VERSION))


def _rebuild_table(index_add_fallback: bool, version: int) -> Optional[Dict[Any, Callable]]:
    """What a pickled :class:`DecompositionTable` rebuilds (``version`` is only a key)."""
    return decompositions(index_add_fallback)


def decompositions(index_add_fallback: bool) -> Optional[Dict[Any, Callable]]:
    """Inductor's decomposition table with the ``index_add`` settings, or ``None`` for its own.

    With ``index_add_fallback``: no decomposition of ``aten.index_add`` (so
    ``aten::index_add``, in inductor's fallback allow list, runs ATen's
    kernel), and ``aten.embedding_dense_backward`` and an accumulating
    ``aten.index_put`` over dim 0 (the gradient of ``x[index]``) as that
    ``index_add``. A :class:`DecompositionTable`, so that inductor's FX graph
    cache can key the compile by it.
    """
    if not index_add_fallback:
        return None
    from torch._inductor.decomposition import select_decomp_table

    aten = torch.ops.aten
    table = DecompositionTable(select_decomp_table())
    for op in list(table):
        packet = getattr(op, "overloadpacket", None)
        if packet is aten.index_add:
            del table[op]
        elif packet is aten.embedding_dense_backward:
            table[op] = _embedding_backward_as_index_add
    table[aten.index_put.default] = _index_put_as_index_add
    return table


@functools.lru_cache(maxsize=None)
def _keyed_pass_class() -> type:
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class KeyedByDecompositions(CustomGraphPass):
        """Inductor's ``post_grad_custom_pre_pass``: runs ``inner`` (a user's pass, or
        nothing) and puts ``tag`` into inductor's cache key."""

        def __init__(self, tag: str, inner: Any) -> None:
            self.tag, self.inner = tag, inner

        def __call__(self, graph: torch.fx.Graph) -> None:
            if self.inner is not None:
                self.inner(graph)

        def uuid(self) -> Any:
            return (self.tag, None if self.inner is None else self.inner.uuid())

    return KeyedByDecompositions


def key_decompositions(index_add_fallback: bool, inner: Any) -> Any:
    """The ``post_grad_custom_pre_pass`` that keys a compile by the ``index_add`` setting.

    Inductor's caches (FX graph and AOTAutograd) key a compile by its graph,
    inputs and config, not by the decomposition table handed to
    ``compile_fx``: a graph compiled with atomic adds (``index_add_fallback``
    off, or the default at 1 thread) was served from the cache to a later
    compile with the fallback (the demo's model: 0.6x eager PyG instead of
    1.5x at 2 threads). A custom pass's ``uuid()`` is part of both keys, so the
    setting goes there, around the user's own pass (``inner``) if there is
    one. A pass that is not a ``CustomGraphPass`` makes inductor skip its
    cache already, and is left as it is.
    """
    from torch._inductor.custom_graph_pass import CustomGraphPass

    if inner is not None and not isinstance(inner, CustomGraphPass):
        return inner
    return _keyed_pass_class()(f"graph_adapter.index_add_fallback={bool(index_add_fallback)}",
                               inner)


def config_patches(cpu_inference: bool = False) -> Dict[str, Any]:
    """The inductor config this package sets for a compile (user ``options`` go on top).

    ``cpu_inference``: the graph runs on the CPU without a backward (compiled
    under ``torch.no_grad()``); it then gets inductor's C++ wrapper
    (:data:`CPU_INFERENCE_PATCHES`).
    """
    from .rewrites import project_embedding_tables_pass, transpose_thin_matmuls_pass

    patches = {"joint_custom_post_pass": recompute_bool_masks(),
               "pre_grad_custom_pass": project_embedding_tables_pass(),
               "post_grad_custom_post_pass": transpose_thin_matmuls_pass(),
               **CALL_PATCHES}
    if cpu_inference:
        patches.update(CPU_INFERENCE_PATCHES)
        if UNFUSE_BIAS_ADDMM:
            from .rewrites.unfuse_bias import unfuse_bias_pass

            # before the thin-matmul pass (its inner), which then sees the mm
            patches["post_grad_custom_post_pass"] = unfuse_bias_pass(
                patches["post_grad_custom_post_pass"])
    return patches


#: 11. **No size asserts in the generated code** (``size_asserts``): inductor's
#: wrapper checks the size and stride of every input of every graph at every call
#: (``assert_size_stride``, 134 calls a training step of GIN 4 x 128). Dynamo's
#: guards check the forward's inputs already, and the backward's are the saved
#: tensors of the compiled forward and the tangents AOTAutograd lays out as traced.
#: GIN 4 x 128 training: 15.58 -> 15.25 ms a step (1 thread, one process,
#: interleaved; ``docs/benchmarks.md``, "Models table").
CALL_PATCHES: Dict[str, Any] = {"size_asserts": False}


#: 6. **Inference graphs on the CPU run from C++** (``cpp_wrapper``): the
#: generated ``call`` that allocates buffers, checks input sizes and launches
#: each kernel is C++ instead of Python. Measured on the demo's model
#: (2 threads, one process, interleaved): compiled inference 6-10% faster
#: (``docs/benchmarks.md``), for about 4 s more of cold compile per graph.
#: Training graphs keep the Python wrapper (+3% there, not worth a slower
#: compile of both passes).
CPU_INFERENCE_PATCHES: Dict[str, Any] = {"cpp_wrapper": True}

#: 13. **A CPU inference graph's ``addmm`` as ``mm`` + an add fused into a kernel**
#: (:mod:`.rewrites.unfuse_bias`): ATen's CPU ``addmm`` copies its ``inp`` (a
#: bias, or a whole product in SAGEConv's ``lin_l(aggr) + lin_r(x)``) into the
#: output before the GEMM; the add then fuses into a generated kernel instead,
#: and a thin product is computed transposed (rule 12). Measured on the node
#: demo's GraphSAGE and two graph-level models: ``docs/dev/RESULTS.md``. Off:
#: set this to False before compiling (``options={"post_grad_custom_post_pass":
#: None}`` turns off rule 12's rewrites as well).
UNFUSE_BIAS_ADDMM = True


#: 9. **AOTAutograd's cache takes graphs with custom autograd Functions**
#: (``autograd_cache_allow_custom_autograd_functions``, off in torch 2.13): the
#: ELL/HYB layouts' gathers are ``autograd.Function``s
#: (:mod:`graph_adapter.nn.static_layout`), and without it every process traced
#: the demo's joint graph again ("Unsupported call_function target
#: autograd_function_apply") before inductor's cache served the kernels. The
#: Functions' forward and backward are traced into the Dynamo graph as
#: subgraphs, which are part of the key; torch calls the flag unsafe for
#: Functions whose backward reads Python state outside its traced body, which
#: graph_adapter's do not. A user's own Function in the model gets the same rule.
AUTOGRAD_CACHE_PATCHES: Dict[str, Any] = {"autograd_cache_allow_custom_autograd_functions": True}


def is_cpu_inference(example_inputs: Any) -> bool:
    """Whether a graph Dynamo hands to the backend is a CPU inference graph: compiled
    without grad mode (no backward will be built) and every tensor input on the CPU."""
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    return not torch.is_grad_enabled() and all(t.device.type == "cpu" for t in tensors)


class _NoProxyExecutorNotice(logging.Filter):
    """Drops inductor's "... is missing a c-shim implementation, using proxy executor as
    fallback" warning: with ``cpp_wrapper``, an ATen op without a C shim (the
    ``index_add`` of the HYB spill lists) runs through the proxy executor, which is
    the designed route, not a problem for the user to act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "using proxy executor as fallback" not in str(record.msg)


@contextlib.contextmanager
def quiet_proxy_executor_notice() -> Iterator[None]:
    """:class:`_NoProxyExecutorNotice` on inductor's IR logger while compiling."""
    logger = logging.getLogger("torch._inductor.ir")
    notice = _NoProxyExecutorNotice()
    logger.addFilter(notice)
    try:
        yield
    finally:
        logger.removeFilter(notice)


def merge_atomic(*found: Optional[bool]) -> Optional[bool]:
    """What several compiles' :func:`compile_and_scan` answers say together: ``True``
    if any graph adds atomically, else ``None`` if any could not be read, else ``False``."""
    return True if True in found else (None if None in found else False)


def compile_and_scan(compile: Callable[[], Any]) -> Tuple[Any, Optional[bool]]:
    """``(compile(), atomic)``: whether the code that inductor compile generated, or
    loaded from its cache, adds with ``atomic_add`` (the one atomic read-modify-write
    inductor's CPU code emits: sums whose order changes from run to run on more
    than one thread). ``atomic`` is ``None`` when the generated modules cannot be
    read (inductor's module registry, ``PyCodeCache``, is internal)."""
    try:
        from torch._inductor.codecache import PyCodeCache

        before = len(PyCodeCache.modules)
    except (ImportError, AttributeError, TypeError):
        return compile(), None
    # AOTAutograd compiles the backward at its first call unless told otherwise:
    # compile it now, so that its code is read too (and its compile time is
    # part of the first step, where a user looks for it)
    from torch._functorch import config as functorch_config

    with functorch_config.patch(force_non_lazy_backward_lowering=True,
                                **AUTOGRAD_CACHE_PATCHES):
        out = compile()
    try:
        found = False
        for module in PyCodeCache.modules[before:]:
            with open(module.__file__, encoding="utf-8") as f:
                found = found or "atomic_add" in f.read()
        return out, found
    except (AttributeError, OSError, TypeError):
        return out, None
