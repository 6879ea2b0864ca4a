"""How ``graph_adapter.compile(..., "inductor")`` steers inductor: the settings.

Each setting that changes what inductor compiles is an entry of
:mod:`graph_adapter.tuning.registry` (what it does and when it applies is its
doc, below each definition); the graph rewrites are the entries of
:mod:`graph_adapter.tuning.rewrites`. :func:`config_patches` gathers the enabled
ones into inductor's config for one compile; :func:`decompositions` and
:func:`key_decompositions` are the ``index_add`` gradients and their cache key;
:func:`compile_and_scan` compiles the backward with the forward and reads the
generated code for atomic adds.

Every setting keeps the results (equal to eager in the float64 tests): only what
is stored between the passes and which kernel adds change (an ``index_add`` may
add in another order than a generated loop). User ``options`` override them
(``options={"joint_custom_post_pass": None}`` turns the boolean masks off,
``{"pre_grad_custom_pass": None}`` or ``{"post_grad_custom_post_pass": None}`` a
point's rewrites, ``{"cpp_wrapper": False}`` the C++ wrapper); a
:func:`~graph_adapter.tuning.registry.disabled` block turns off any entry by name.
The figures behind each are in ``docs/dev/RESULTS.md`` ("The tuning wing's settings").
"""
from __future__ import annotations

import contextlib
import functools
import logging
from typing import Any, Callable, Dict, Iterator, Optional, Set, Tuple

import torch

from ..backends import merge_atomic
from .registry import Entry, graph_pass, register, enabled

__all__ = ["recompute_bool_masks", "use_index_add_fallback", "decompositions",
           "DecompositionTable", "key_decompositions", "config_patches",
           "CPU_INFERENCE_PATCHES", "AUTOGRAD_CACHE_PATCHES", "CALL_PATCHES",
           "is_cpu_inference", "quiet_proxy_executor_notice", "compile_and_scan",
           "merge_atomic"]


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


register(Entry(
    "recompute_bool_masks",
    "Boolean tensors computed from forward values on the CPU (``relu``'s ``out <= 0``) "
    "are recomputed in the backward instead of saved: the partitioner saves the float "
    "and the comparison runs inside the backward's fused loop, because inductor's CPU "
    "code stores a boolean vector element by element. Applies to training graphs on "
    "the CPU (AOTAutograd's joint graph); masks downstream of random ops (dropout) "
    "and nodes the user tagged are left alone.",
    points=("joint",), order=10, version="1", run=_mark_bool_masks))


def recompute_bool_masks() -> Any:
    """A fresh joint-graph pass running the ``"joint"`` entries (a ``CustomGraphPass``,
    so inductor caches), or ``None`` where none is enabled."""
    return graph_pass("joint", False, {})


def _is_random(node: torch.fx.Node) -> bool:
    tags = getattr(node.target, "tags", ())
    return torch.Tag.nondeterministic_seeded in tags


def use_index_add_fallback(setting: Optional[bool]) -> bool:
    """Whether gathers' and embeddings' gradients run ATen's ``index_add``.

    ``None``: when torch runs more than one thread (inductor's own policy for
    ``scatter_reduce(sum)`` on CPU, ``config.cpp.fallback_scatter_reduce_sum``:
    atomic adds lose to ATen's kernel when more than one thread runs the
    generated loop; at 1 thread neither is faster: ``docs/dev/RESULTS.md``).
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


register(Entry(
    "index_add_gradients",
    "The gradients of gathers (``index_select``, ``x[index]``) and of embeddings run "
    "ATen's ``index_add`` kernel instead of inductor's loop of atomic adds, which "
    "threads contend on. Applies where ``compile(index_add_fallback=...)`` asks for it, "
    "or by default where torch runs more than one thread (inductor's own rule for "
    "``scatter_reduce``); the setting is part of inductor's cache key "
    "(:func:`key_decompositions`) and the table pickles by its recipe "
    "(:class:`DecompositionTable`), so a cached graph of the other setting is not served.",
    points=("config",), order=10, version=str(_DECOMP_VERSION)))


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
    compile with the fallback (at 2 threads, slower than eager PyG:
    ``docs/dev/RESULTS.md``). A custom pass's ``uuid()`` is part of both keys, so the
    setting goes there, around the user's own pass (``inner``) if there is
    one. A pass that is not a ``CustomGraphPass`` makes inductor skip its
    cache already, and is left as it is.
    """
    from torch._inductor.custom_graph_pass import CustomGraphPass

    if inner is not None and not isinstance(inner, CustomGraphPass):
        return inner
    return _keyed_pass_class()(f"graph_adapter.index_add_fallback={bool(index_add_fallback)}",
                               inner)


def config_patches(cpu_inference: bool = False,
                   fired: Optional[Dict[str, int]] = None) -> Dict[str, Any]:
    """The inductor config the enabled entries set for a compile (user ``options`` go
    on top): each point's pass (counting what fired into ``fired``) and the settings.

    ``cpu_inference``: the graph runs on the CPU without a backward (compiled under
    ``torch.no_grad()``); it then gets the C++ wrapper and the CPU-inference rewrites.
    """
    from . import rewrites  # noqa: F401  (registers the rewrites)

    fired = {} if fired is None else fired
    patches: Dict[str, Any] = {}
    for slot, point in (("joint_custom_post_pass", "joint"),
                        ("pre_grad_custom_pass", "pre_grad"),
                        ("post_grad_custom_post_pass", "post_grad")):
        p = graph_pass(point, cpu_inference, fired)
        if p is not None:
            patches[slot] = p
    if enabled("no_size_asserts"):
        patches.update(CALL_PATCHES)
    if cpu_inference and enabled("cpp_wrapper_cpu_inference"):
        patches.update(CPU_INFERENCE_PATCHES)
    return patches


#: ``size_asserts`` off (:data:`graph_adapter.tuning.registry` entry ``no_size_asserts``).
CALL_PATCHES: Dict[str, Any] = {"size_asserts": False}
register(Entry(
    "no_size_asserts",
    "Inductor's generated wrapper does not check the size and stride of every input of "
    "every graph at every call (``size_asserts=False``): Dynamo's guards check the "
    "forward's inputs already, and the backward's are the saved tensors and tangents "
    "AOTAutograd lays out as traced. Applies to every graph.",
    points=("config",), order=20, version="1", patches=CALL_PATCHES))

#: ``cpp_wrapper`` on (entry ``cpp_wrapper_cpu_inference``).
CPU_INFERENCE_PATCHES: Dict[str, Any] = {"cpp_wrapper": True}
register(Entry(
    "cpp_wrapper_cpu_inference",
    "CPU inference graphs run from inductor's C++ wrapper (``cpp_wrapper``): the "
    "generated ``call`` that allocates buffers and launches each kernel is C++ instead "
    "of Python, for a few seconds more of cold compile per graph. Applies to graphs "
    "compiled without grad mode with every input on the CPU; training graphs keep the "
    "Python wrapper.",
    points=("config",), order=30, version="1", cpu_inference_only=True,
    patches=CPU_INFERENCE_PATCHES))

#: AOTAutograd's cache takes custom autograd Functions (entry
#: ``autograd_cache_custom_functions``).
AUTOGRAD_CACHE_PATCHES: Dict[str, Any] = {"autograd_cache_allow_custom_autograd_functions": True}
register(Entry(
    "autograd_cache_custom_functions",
    "AOTAutograd's cache takes graphs that hold custom ``autograd.Function``s (the "
    "ELL/HYB layouts' gathers, :mod:`graph_adapter.nn.static_layout`), so a second "
    "process does not trace the joint graph again. Torch calls the flag unsafe for "
    "Functions whose backward reads Python state outside its traced body, which "
    "graph_adapter's do not; a user's own Function in the model gets the same rule. "
    "Applies to every compile.",
    points=("config",), order=40, version="1", patches=AUTOGRAD_CACHE_PATCHES))

register(Entry(
    "read_atomic_adds",
    "The backward is compiled with the forward (not at its first call), and the code of "
    "both is read for ``atomic_add`` (``Compiled.atomic_adds``: whether sums change "
    "order from run to run on more than one thread). Applies to every inductor compile; "
    "off, ``atomic_adds`` is ``None`` (unknown) and the backward compiles lazily.",
    points=("config",), order=50, version="1"))


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


def functorch_patches() -> Dict[str, Any]:
    """The functorch config the enabled entries set for a compile."""
    return dict(AUTOGRAD_CACHE_PATCHES) if enabled("autograd_cache_custom_functions") else {}


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

    with functorch_config.patch(force_non_lazy_backward_lowering=True, **functorch_patches()):
        out = compile()
    try:
        found = False
        for module in PyCodeCache.modules[before:]:
            with open(module.__file__, encoding="utf-8") as f:
                found = found or "atomic_add" in f.read()
        return out, found
    except (AttributeError, OSError, TypeError):
        return out, None
