"""``compile(..., background=True)``: eager steps while a child process compiles.

A first inductor compile of a GNN step takes 20-35 s on a 2-core CPU, which
plain PyG never pays. With ``background=True``, :class:`~graph_adapter.backends.compiled.Compiled`
runs each new (signature, mode, grad mode) through the wrapped module itself,
eagerly (on the real rows only where ``ipu_wrap(trim=True)``), and forks a
child process that compiles that call and saves it as a precompiled entry
(:mod:`graph_adapter.tuning.precompile`) beside inductor's caches.
Once the child is done, the next call of that key loads the entry (no trace:
about a second) and every call after it runs compiled. The switch is at a call
boundary and the compiled program reads the same parameters and buffers, so
the optimizer, its state and BatchNorm's running statistics carry over.

Why a forked child and not a thread: the wrapper's eager calls and a trace
share process state (the static-size frames of :mod:`graph_adapter.nn.static`,
the trim plans, the gradients set aside while an entry is saved), and Dynamo
holds the GIL for most of a compile, so a thread would stall the eager steps it
is meant to spare. A fork sees the model, the batch and a notebook's own
classes as they are (nothing is pickled) and leaves nothing behind here.

The child runs on idle CPU time only (Linux's ``SCHED_IDLE``; elsewhere the
lowest ``nice``), and this process keeps all its torch threads at first: the
eager steps go first, and the compile takes what they leave (a notebook's
pauses between cells, the Python between kernels). A 2-thread eager step
whose second thread shares a core with anything waits at every OpenMP
barrier, so a child at an ordinary or ``nice`` priority slows the steps several
times over, and a core given to the child from the start
(``torch.set_num_threads(n - 1)`` while it runs) slows a GEMM-bound model's whole
run, which may end before the compile does. But a busy run leaves a compile on
idle time almost nothing (``docs/dev/RESULTS.md``, "First run: the compile on idle
time, then a thread"), so a run that is still going :data:`GIVE_UP_AFTER` seconds after
its child started gives the child a core: one torch thread fewer until no
child runs (the rent-or-buy rule: pay for the compile once the run has shown
it is long enough). The child:

* runs torch on one thread: the CPU build's OpenMP runtime (libgomp) has no
  fork handler, and a forked child that enters a parallel region waits for the
  parent's pool threads, which do not exist in it (a matmul hangs). The
  compile is told the parent's thread count (``torch.get_num_threads``, which
  inductor bakes into its CPU code and its cache key, and the entry's key
  records), and the child never runs the code it generates;
* compiles in its own process (``compile_threads=1``: it must not share the
  parent's pool of compile workers, whose pipes it inherited);
* ends with ``os._exit`` (the parent's ``atexit`` handlers do not run twice).

The switch is checked, not assumed: after it, the key's calls alternate
between the compiled program and the eager module until :data:`MEASURED_STEPS`
steps of each are timed (a step: from one call of the key to its next, so
forward, backward, optimizer and the next batch; interleaved, so that a slow
moment of a shared machine hits both sides alike; after :meth:`~BackgroundEngine.wait`
every call is compiled, timed against the eager steps before it), and where the compiled
steps' median is slower than the eager steps' by more than :data:`SLOWER_BY`,
the key goes back to eager for good (``state`` ``"eager"``, ``why`` gives both
figures): a compiled program that loses to the eager module on this machine is
not kept for the sake of it.

One child at a time (on 2 cores two compiles only slow each other down); later
keys wait their turn in order. A child that fails leaves its key eager and warns
once, with the child's error. A child still running after ``timeout`` seconds
is killed (its key stays eager). At the interpreter's exit a running child is
waited for up to :data:`EXIT_WAIT` seconds (a line on stderr says so) and then
killed; entries are written atomically, so a killed child leaves none, never
half of one.

``"inductor"`` on the CPU only (forking a process that holds a CUDA context is
not supported by CUDA); ``"aot_eager"`` runs the same machinery (its child
traces and checks the call; nothing it makes outlives it, so the parent
compiles at the switch): the cheap way to test it.
"""
from __future__ import annotations

import atexit
import dataclasses
import json
import math
import multiprocessing
import multiprocessing.util  # its exit handler first: see the atexit line at the end
import os
import statistics
import sys
import time
import traceback
import warnings
import weakref
from typing import Any, Dict, List, Mapping, Optional

import torch
from torch import Tensor, nn

from ..backends import (DynamoEngine, Engine, compile_in_this_process, device_of, has_rnn,
                        precompile_refusal)

__all__ = ["BackgroundEngine", "BackgroundStats", "EXIT_WAIT", "DEFAULT_TIMEOUT",
           "BACKGROUND_DEFAULT", "background_refusal", "plan_background"]

#: ``compile(background=None)``: whether ``"inductor"`` on the CPU compiles in the
#: background by default (``GRAPH_ADAPTER_BACKGROUND=0`` / ``1`` in the environment at
#: import overrides it; docs/benchmarks.md, "First run"). ``"aot_eager"`` only when
#: asked: its child hands nothing over. Off by default where :func:`_default_off_here`
#: says why.
BACKGROUND_DEFAULT = os.environ.get("GRAPH_ADAPTER_BACKGROUND", "1") == "1"

#: seconds the interpreter's exit waits for a running background compile to write
#: its entry before it is killed (``GRAPH_ADAPTER_BACKGROUND_EXIT_WAIT``)
EXIT_WAIT = float(os.environ.get("GRAPH_ADAPTER_BACKGROUND_EXIT_WAIT", "120"))
#: seconds a background compile may take before it is killed (its key stays eager)
DEFAULT_TIMEOUT = 600.0
#: compiled steps timed after a switch (after the first, which loads the entry)
MEASURED_STEPS = 8
#: a switch is undone when the compiled steps' median is slower than the eager ones' by this
SLOWER_BY = 0.05
#: what a deferral (:meth:`BackgroundEngine.expect_calls`) assumes a cold compile takes
#: (the models table's GNNs' first inductor step on 2 cores: docs/benchmarks.md)
COLD_COMPILE_S = 20.0
#: and what it assumes the compiled steps gain (the models table's lowest training ratio:
#: GIN 4x128, 1.35x eager PyG); the switch itself is judged on timed steps
ASSUMED_SPEEDUP = 1.35
#: and what it assumes loading a warm key's precompiled entry takes (on 2 cores; most of it
#: the first load's imports of inductor's runtime)
WARM_LOAD_S = 0.8
#: seconds a child compiles on idle CPU time only before this process runs torch on one
#: thread fewer, so that the child has a core (module doc; 0: from the start;
#: ``GRAPH_ADAPTER_BACKGROUND_GIVE_UP_AFTER``)
GIVE_UP_AFTER = float(os.environ.get("GRAPH_ADAPTER_BACKGROUND_GIVE_UP_AFTER", "20"))

_LIVE: List["_Child"] = []  # every running child of this process (for the exit wait)


def background_refusal(backend: str, device: torch.device, precompile_why_not: str) -> str:
    """Why ``background=True`` cannot serve this backend and model (``""``: it can)."""
    if backend not in ("inductor", "aot_eager"):
        return f"background compiles serve backends 'inductor' and 'aot_eager', not {backend!r}"
    if device.type != "cpu":
        return (f"background compiles run in a forked child process, and a process holding a "
                f"{device.type} context cannot be forked; the model is on {device}")
    if backend == "inductor" and precompile_why_not:
        return f"the child hands its compile over as a precompiled entry, and {precompile_why_not}"
    return ""


def _default_off_here() -> str:
    """Why this process compiles in the foreground by default (``""``: it need not)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return "a distributed run (every rank would fork a compile of its own)"
    if multiprocessing.current_process().daemon:
        return "a daemon process (a data-loading worker): it cannot have children"
    return ""


def plan_background(backend: str, engine: Any, wrapped: nn.Module, background: Optional[bool],
                    precompile: Optional[bool]) -> bool:
    """Whether this model compiles in the background (``background=None``: by
    :data:`BACKGROUND_DEFAULT`, where the backend and model allow it, never refused
    aloud); ``ValueError`` naming why where ``background=True`` cannot serve."""
    if background is None:  # the default: inductor only
        if not BACKGROUND_DEFAULT or backend != "inductor" or _default_off_here():
            return False
    elif not background:
        return False
    dynamo = engine is DynamoEngine
    why = background_refusal(backend, device_of(wrapped), precompile_refusal(
        backend, wrapped, has_rnn(wrapped), engine) if dynamo else "")
    if why and background:
        raise ValueError(f"compile({backend!r}, background=True): {why}; pass "
                         f"background=False (the first call compiles in this process)")
    if not why and precompile is False and backend == "inductor":
        if background:
            raise ValueError("compile('inductor', background=True, precompile=False): the "
                             "background compile hands its program over as a precompiled "
                             "entry; drop precompile=False or pass background=False")
        return False
    return not why


@dataclasses.dataclass
class BackgroundStats:
    """What ``compile(..., background=True)`` did so far (``compiled.stats.background``).

    Attributes:
        eager_calls: calls that ran the wrapped module eagerly (a key not compiled yet).
        compiled_calls: calls that ran the compiled program.
        keys: one entry a (signature, mode, grad mode) seen, in order of first call:
            ``mode`` (``"train"`` / ``"eval"``, ``"+no_grad"``), ``state``
            (``"warm"``: its precompiled entry is on disk, so this process loads it
            after :data:`MEASURED_STEPS` eager steps, no child;
            ``"timing"``: its first eager steps timed to judge a deferral,
            ``"deferred"``: its compile (or load) starts after the calls the run expects,
            ``"waiting"``, ``"compiling"``, ``"ready"``: compiled, switches at its
            next call, ``"compiled"``, ``"eager"``), ``why`` (why it stays eager: the
            child's error, a timeout, slower compiled steps), ``eager_calls`` (the
            judge's interleaved eager calls included), ``switched_at`` (this object's call number of the
            first compiled call, from 0; ``None`` before), ``compile_s`` (the
            child's wall time), ``switch_s`` (the first compiled call: the entry's
            load and the run), ``saved`` (the child wrote a precompiled entry),
            ``eager_step_s`` / ``compiled_step_s`` (median step times either
            side of the switch, from one call of the key to its next), ``pid``
            (the compile's process, once started), ``compiles`` (graphs its child
            compiled; the ones this process compiled are in ``compile_count``),
            ``loaded`` (a warm key's entry, loaded in this process in
            ``compile_s`` seconds), ``deferred`` (why its compile, or a warm key's load,
            waited for the run's expected calls:
            :meth:`BackgroundEngine.expect_calls`; ``None``: it did not),
            ``thread_given_at_s`` (how long its child had compiled on idle time when
            this process gave it a thread: :data:`GIVE_UP_AFTER`; ``None``: never).
    """

    eager_calls: int = 0
    compiled_calls: int = 0
    keys: List[Dict[str, Any]] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        """One line for people: how many calls ran eagerly and when each key switched."""
        parts = []
        for k in self.keys:
            if k["state"] == "compiled" and k.get("loaded"):
                switched = ("" if k["switched_at"] is None else
                            f", switched at call {k['switched_at']}")
                parts.append(f"{k['mode']}: {k['eager_calls']} eager calls, its precompiled "
                             f"entry loaded in {k['compile_s']:.2f} s{switched}")
            elif k["state"] in ("compiled", "ready") and k["switched_at"] is None:
                parts.append(f"{k['mode']}: {k['eager_calls']} eager calls, compiled in "
                             f"{k['compile_s']:.1f} s in the background, switches at its "
                             f"next call")
            elif k["state"] == "compiled":
                parts.append(f"{k['mode']}: {k['eager_calls']} eager calls, compiled in "
                             f"{k['compile_s']:.1f} s in the background, switched at call "
                             f"{k['switched_at']} ({k['switch_s']:.2f} s)")
            else:
                why = k.get("why") or (k.get("deferred") if k["state"] == "deferred" else None)
                why = f" ({why})" if why else ""
                parts.append(f"{k['mode']}: {k['state']}{why}, {k['eager_calls']} eager calls")
            if k.get("thread_given_at_s") is not None:
                parts[-1] += f", a thread given to its compile after {k['thread_given_at_s']:.0f} s"
            if k.get("deferred") and k["state"] != "deferred":
                parts[-1] += (", its " + ("load" if k.get("loaded") else "compile") +
                              " deferred past the run's expected calls")
        return "; ".join(parts) or "no calls yet"


@dataclasses.dataclass
class _Key:
    """One (signature, mode, grad mode) and its compile's progress."""

    info: Dict[str, Any]
    example: Optional[Dict[str, Tensor]] = None  # a batch to compile with (until it starts)
    warm: bool = False  # its entry is on disk: loaded here, never compiled by a child
    escalated: bool = False  # its child was given a thread (GIVE_UP_AFTER)
    child: Optional["_Child"] = None
    last: Optional[float] = None  # when the key's previous call began
    last_compiled: bool = False  # whether it ran compiled
    judging: bool = False  # after the switch, until its steps are compared with eager ones
    interleave: bool = True  # while judging: calls alternate compiled / eager (not after wait())
    flip: bool = True  # while interleaving: whether the next call runs compiled
    eager_steps: List[float] = dataclasses.field(default_factory=list)  # the last few
    compiled_steps: List[float] = dataclasses.field(default_factory=list)

    def step_ended(self, now: float) -> None:
        """A call began: time the step that ended (from the key's previous call) on the
        side it ran."""
        if self.last is not None:
            (self.compiled_steps if self.last_compiled else self.eager_steps).append(now - self.last)
            del self.eager_steps[:-2 * MEASURED_STEPS]
            del self.compiled_steps[2 * MEASURED_STEPS:]  # only the first few are judged
        self.last = now


class _Child:
    """One forked compile: the process and the read end of its report pipe."""

    def __init__(self, process: Any, conn: Any, started: float):
        self.process, self.conn, self.started = process, conn, started

    def report(self) -> Optional[Dict[str, Any]]:
        """The child's JSON report once it ended (``None`` while it runs)."""
        if self.process.is_alive():
            return None
        self.process.join()
        doc = None
        try:
            if self.conn.poll():
                doc = json.loads(self.conn.recv())
        except (EOFError, OSError, ValueError):
            doc = None
        self.conn.close()
        if doc is None:
            doc = {"ok": False, "error": f"the compile process ended with exit code "
                                         f"{self.process.exitcode} and no report"}
        return doc

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()


def _mode_name(key: Any, grad: bool) -> str:
    return ("train" if key[1] else "eval") + ("" if grad else "+no_grad")


class _Threads:
    """This process's torch threads: one fewer once a child has compiled on idle time for
    :data:`GIVE_UP_AFTER` seconds, all again when no child runs (module doc)."""

    children = 0
    saved = 0
    given = False

    @classmethod
    def child_started(cls) -> int:
        """Note a child; the thread count its compile is for (this process's own)."""
        if cls.children == 0:
            cls.saved = torch.get_num_threads()
        cls.children += 1
        return cls.saved

    @classmethod
    def give_up_one(cls) -> bool:
        """Run on one thread fewer while children run; whether a thread was given up."""
        if cls.children == 0 or cls.given or cls.saved < 2:
            return False
        torch.set_num_threads(cls.saved - 1)
        cls.given = True
        return True

    @classmethod
    def child_ended(cls) -> None:
        cls.children -= 1
        if cls.children == 0 and cls.given:
            cls.given = False
            if torch.get_num_threads() != cls.saved:
                torch.set_num_threads(cls.saved)


def _run_when_idle() -> None:
    """This process runs only on CPU time nobody else wants (Linux ``SCHED_IDLE``; where
    that is not allowed, the lowest ``nice``): the parent's eager steps, whose OpenMP
    threads wait on each other at every barrier, are never held up by the compile."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return
    except (AttributeError, OSError):  # not Linux, or not allowed here
        pass
    try:
        os.nice(19)
    except OSError:  # not allowed either: compile at the same priority
        pass


def _stop_idling(pid: int) -> None:
    """Best effort: the child ``pid`` back at an ordinary priority, where this process may
    (root, ``CAP_SYS_NICE``); an unprivileged process may not leave ``SCHED_IDLE``, and
    then the core given up is what the child gets."""
    try:
        os.sched_setscheduler(pid, os.SCHED_OTHER, os.sched_param(0))
    except (AttributeError, OSError):
        pass


def _run_child(inner: Any, flat: Dict[str, Tensor], grad: bool, threads: int,
               conn: Any, idle: bool = True) -> None:
    """The child's whole life (see the module doc): compile, report as JSON, exit."""
    t0 = time.perf_counter()
    try:
        if idle:
            _run_when_idle()  # the eager steps go first (module doc)
        torch.set_num_threads(1)
        torch.get_num_threads = lambda: threads  # what the parent's code will run on
        compile_in_this_process()
        with torch.set_grad_enabled(grad):
            saved = inner.warm(flat)
        doc = {"ok": True, "saved": bool(saved), "compiles": inner.compile_count,
               "seconds": time.perf_counter() - t0}
    except BaseException as exc:  # everything goes back to the parent as text
        doc = {"ok": False, "seconds": time.perf_counter() - t0,
               "error": f"{type(exc).__name__}: {exc}".strip()[:2000],
               "traceback": traceback.format_exc()[-4000:]}
    try:
        conn.send(json.dumps(doc))
        conn.close()
    finally:
        os._exit(0)


class BackgroundEngine(Engine):
    """Eager calls until a forked child has compiled a key, then the compiled ones.

    Wraps a :class:`~graph_adapter.backends.DynamoEngine` (``inner``)
    that loads the child's precompiled entry at the switch.
    :class:`~graph_adapter.backends.compiled.Compiled` calls :meth:`before_call`
    once a call (it picks eager or compiled for the whole call, every
    micro-batch alike) and :meth:`run` once a micro-batch.
    """

    def __init__(self, wrapped: nn.Module, inner: Any, *, timeout: float = DEFAULT_TIMEOUT):
        if not isinstance(inner, DynamoEngine):
            raise TypeError(f"a background compile wraps a DynamoEngine, not "
                            f"{type(inner).__name__}")
        self._wrapped, self._inner, self._timeout = wrapped, inner, timeout
        self._keys: Dict[Any, _Key] = {}
        self._order: List[Any] = []  # keys in order of first call (the waiting line)
        self._calls = 0
        self._child_compiles = 0
        self._compiled_now = False
        self._stats = BackgroundStats()
        self._left: Optional[int] = None  # calls the run still expects (expect_calls)

    # ---- what Compiled reads -----------------------------------------------
    @property
    def compile_count(self) -> int:
        """Graphs compiled for this model: in the children and in this process."""
        return self._inner.compile_count + self._child_compiles

    @property
    def runs_generated_code(self) -> bool:
        return self._inner.runs_generated_code

    @property
    def atomic_adds(self) -> Optional[bool]:
        return self._inner.atomic_adds

    @property
    def rewrites(self) -> Dict[str, int]:
        """The rewrites that fired in this process's compiles (a child's are its own)."""
        return self._inner.rewrites

    @property
    def background_stats(self) -> BackgroundStats:
        self.poll()
        return self._stats

    # ---- one call ------------------------------------------------------------
    def before_call(self, flat: Mapping[str, Tensor], key: Any) -> None:
        """Pick eager or compiled for this call; start or queue the key's compile."""
        self.poll()
        ck = (key, torch.is_grad_enabled())
        k = self._keys.get(ck)
        if k is None:
            info = {"mode": _mode_name(key, ck[1]), "state": "waiting", "why": None,
                    "eager_calls": 0, "switched_at": None, "compile_s": None,
                    "switch_s": None, "saved": False, "eager_step_s": None,
                    "compiled_step_s": None, "pid": None, "compiles": 0, "deferred": None,
                    "loaded": False, "thread_given_at_s": None}
            # a copy: the loader may hand out the same buffers again, changed
            k = self._keys[ck] = _Key(info, {n: v.detach().clone() for n, v in flat.items()})
            self._order.append(ck)
            self._stats.keys.append(info)
            if self._inner.has_saved_entry(flat):
                info["state"], k.warm = "warm", True  # no child: timed eagerly, loaded here
            elif self._left is not None:
                info["state"] = "timing"  # a cold compile: does it pay back in this run?
            self._start_next()
        k.step_ended(time.perf_counter())
        self._count_down()
        if len(k.eager_steps) >= MEASURED_STEPS:
            if k.info["state"] == "timing":
                self._defer_or_start(k)
            elif k.info["state"] == "warm":
                self._load_or_defer(ck, k)
        self._judge(k)
        compiled = k.info["state"] == "compiled"
        if compiled and k.judging and k.interleave:  # a slow moment of the machine hits both
            compiled, k.flip = k.flip, not k.flip
        self._compiled_now = k.last_compiled = compiled
        if self._compiled_now:
            self._stats.compiled_calls += 1
        else:
            self._stats.eager_calls += 1
            k.info["eager_calls"] += 1
        self._ck, self._calls = ck, self._calls + 1

    def _judge(self, k: _Key) -> None:
        """Switch a ready key; undo a switch whose compiled steps are slower than the eager
        ones timed between them (module doc)."""
        if k.info["state"] == "ready":
            self._switch(k)
        steps = k.compiled_steps[1:]  # the first ends the call that loaded the entry
        if k.info["state"] != "compiled" or not k.judging or len(steps) < MEASURED_STEPS \
                or len(k.eager_steps) < (MEASURED_STEPS if k.interleave else 1):
            return
        # interleaved: the eager steps between the compiled ones; after wait(): the last
        # eager steps before the switch (the caller asked for the compiled program)
        eager = statistics.median(k.eager_steps[:MEASURED_STEPS] if k.interleave
                                  else k.eager_steps[-MEASURED_STEPS:])
        compiled = statistics.median(steps[:MEASURED_STEPS])
        k.info["eager_step_s"], k.info["compiled_step_s"] = eager, compiled
        k.compiled_steps, k.judging = [], False
        if compiled > eager * (1 + SLOWER_BY):
            k.info["state"] = "eager"
            k.info["why"] = (f"its compiled steps took {compiled * 1e3:.2f} ms (median of "
                             f"{MEASURED_STEPS}), the eager ones {eager * 1e3:.2f} ms")

    @staticmethod
    def _switch(k: _Key) -> None:
        """The next call runs compiled; then, unless nothing could undo it, calls
        alternate with eager ones until :data:`MEASURED_STEPS` of each are timed (after
        :meth:`wait`: compiled calls only, against the eager steps timed before)."""
        k.info["state"] = "compiled"
        k.judging, k.flip = math.isfinite(SLOWER_BY), True
        k.compiled_steps = []
        if k.interleave:
            k.eager_steps = []

    def _load_here(self, ck: Any, k: _Key) -> None:
        """A warm key: load its entry in this process (about a second; a child would load
        it too, and then this process again); where it does not serve this process (its
        traced sources changed since), a child compiles it as for a cold key."""
        t0 = time.perf_counter()
        with torch.set_grad_enabled(ck[1]):
            loaded = self._inner.load_only(k.example, ck[0])
        if loaded:
            k.info.update(saved=True, loaded=True, compile_s=time.perf_counter() - t0)
            self._switch(k)
            k.example = None
        else:
            k.info["state"], k.warm = "waiting", False
            self._start_next()

    def _load_or_defer(self, ck: Any, k: _Key) -> None:
        """A warm key after its timed steps: load its entry now, unless the run's expected
        calls cannot pay the load back (:meth:`expect_calls`)."""
        why = self._cannot_pay_back(k, WARM_LOAD_S, "loading its precompiled entry")
        if why:
            k.info["state"], k.info["deferred"] = "deferred", why
        else:
            self._load_here(ck, k)

    # ---- a run of known length -------------------------------------------------
    def expect_calls(self, n: int) -> None:
        """The run makes about ``n`` more calls (training steps left: epochs x batches).

        A key first seen while calls are expected, with no precompiled entry on
        disk (a cold compile), runs :data:`MEASURED_STEPS` eager steps on all of
        this process's threads first; where the time the expected calls take
        eagerly, times what compiled steps would save (:data:`ASSUMED_SPEEDUP`),
        is under a cold compile's :data:`COLD_COMPILE_S`, the compile cannot pay
        back within the run: it starts at the last expected call instead (for
        what runs after: an evaluation, the next run's cache, :meth:`wait`), and
        until then no thread is given up. A warm key (its entry on disk) is loaded
        in this process after its timed steps, unless the same sum is under the
        load's :data:`WARM_LOAD_S`: then it is loaded at the first call after the
        expected ones (never within them).
        """
        if n < 0:
            raise ValueError(f"expect_calls({n}): the number of calls must be >= 0")
        self._left = int(n)

    def _count_down(self) -> None:
        if self._left is None:
            return
        self._left -= 1
        if self._left == 0:  # the last expected call: a held compile starts (for what follows)
            self._release("timing", "deferred", warm=False)
        elif self._left < 0:  # a call past them: a held load happens now (not in the run)
            self._left = None
            self._release("timing", "deferred")

    def _release(self, *states: str, warm: bool = True) -> None:
        """Held keys go on: a cold one waits for its child, a warm one (unless ``warm`` is
        False) loads at its next call."""
        for ck in self._order:
            k = self._keys[ck]
            if k.info["state"] in states and (warm or not k.warm):
                k.info["state"] = "warm" if k.warm else "waiting"
        self._start_next()

    def _cannot_pay_back(self, k: _Key, cost: float, what: str) -> str:
        """Why ``what`` (taking about ``cost`` seconds) cannot pay back within the run's
        expected calls (``""``: it can, or no count was given): the calls left, each at the
        key's median eager step, times what compiled steps would save
        (:data:`ASSUMED_SPEEDUP`), against ``cost``."""
        if self._left is None:
            return ""
        step = statistics.median(k.eager_steps[-MEASURED_STEPS:])
        saved = self._left * step * (1 - 1 / ASSUMED_SPEEDUP)
        if saved >= cost:
            return ""
        return (f"{what} (about {cost:.1f} s) could save at most {saved:.1f} s of the "
                f"{self._left} calls left ({step * 1e3:.1f} ms each eagerly): it waits for them")

    def _defer_or_start(self, k: _Key) -> None:
        why = self._cannot_pay_back(k, COLD_COMPILE_S, "a cold compile")
        if why:
            k.info["state"], k.info["deferred"] = "deferred", why
        else:
            k.info["state"] = "waiting"
            self._start_next()

    def run(self, flat: Dict[str, Tensor], key: Any) -> Dict[str, Tensor]:
        if self._compiled_now:
            k = self._keys[self._ck]
            if k.info["switched_at"] is None:  # the first compiled call: the switch
                t0 = time.perf_counter()
                out = self._inner.run(flat, key)
                k.info["switch_s"], k.info["switched_at"] = time.perf_counter() - t0, self._calls - 1
                return out
            return self._inner.run(flat, key)
        return self._wrapped(flat)

    # ---- the children ---------------------------------------------------------
    def poll(self) -> None:
        """Collect a finished child (and start the next waiting key); kill one past its time."""
        for ck in self._order:
            k = self._keys[ck]
            if k.child is None:
                continue
            doc = k.child.report()
            if doc is None:
                running = time.perf_counter() - k.child.started
                if running >= GIVE_UP_AFTER and not k.escalated:
                    self._escalate(k, running)
                if running > self._timeout:
                    k.child.kill()
                    doc = {"ok": False, "error": f"no compile after {self._timeout:.0f} s "
                                                 f"(the process was stopped)"}
                else:
                    continue
            self._finish(k, doc)
        self._start_next()

    @staticmethod
    def _escalate(k: _Key, running: float) -> None:
        """The run outlasted the child's idle start: give it a thread (and, where this
        process may, an ordinary priority, so that a busy machine gives it its turn)."""
        k.escalated = True
        if _Threads.give_up_one():
            k.info["thread_given_at_s"] = running
        _stop_idling(k.child.process.pid)

    def _finish(self, k: _Key, doc: Dict[str, Any]) -> None:
        _forget(k.child)
        k.child = None
        k.info["compile_s"] = doc.get("seconds")
        if doc.get("ok"):
            k.info["compiles"] = int(doc.get("compiles", 0))
            self._child_compiles += k.info["compiles"]
            k.info["state"], k.info["saved"] = "ready", bool(doc.get("saved"))
            return
        k.info["state"], k.info["why"] = "eager", doc.get("error")
        warnings.warn(f"graph_adapter.compile(background=True): the {k.info['mode']} compile "
                      f"failed in its process, so those calls stay eager: {doc.get('error')}",
                      RuntimeWarning, stacklevel=3)

    def _start_next(self) -> None:
        if any(self._keys[ck].child is not None for ck in self._order):
            return  # one child at a time
        for ck in self._order:
            k = self._keys[ck]
            if k.info["state"] == "waiting":
                self._fork(ck, k)
                return

    def _fork(self, ck: Any, k: _Key) -> None:
        ctx = multiprocessing.get_context("fork")
        recv, send = ctx.Pipe(duplex=False)
        flat, k.example = k.example, None
        threads = _Threads.child_started()
        proc = ctx.Process(target=_run_child, daemon=True,
                           args=(self._inner, flat, ck[1], threads, send, GIVE_UP_AFTER > 0),
                           name=f"graph_adapter compile ({k.info['mode']})")
        try:
            with warnings.catch_warnings():
                # Python >= 3.12 warns at every fork of a process with threads (torch's
                # pools); the child runs only the compile, in one thread, and hands its
                # program back through the pipe (module doc), so the warning is moot here
                warnings.filterwarnings("ignore", category=DeprecationWarning,
                                        message=r"This process \(pid=\d+\) is multi-threaded")
                proc.start()
        except OSError as exc:  # no fork here (memory, limits): this key stays eager
            _Threads.child_ended()
            recv.close()
            send.close()
            self._finish(k, {"ok": False, "error": f"could not start the compile process "
                                                   f"({type(exc).__name__}: {exc})"})
            return
        send.close()
        k.child = _Child(proc, recv, time.perf_counter())
        k.info["state"], k.info["pid"] = "compiling", proc.pid
        if GIVE_UP_AFTER <= 0:  # (the child does not idle: see its args)
            self._escalate(k, 0.0)
        _LIVE.append(k.child)
        # a compiled model dropped mid-compile: its child is stopped, the core given back
        # (not at the interpreter's exit, where _wait_at_exit lets it finish first)
        weakref.finalize(self, _abandon, k.child).atexit = False

    # ---- waiting and closing ----------------------------------------------------
    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block until no compile runs or waits (``timeout`` seconds at most); whether
        none does. The next call of each compiled key switches (module doc)."""
        end = None if timeout is None else time.perf_counter() + timeout
        for ck in self._order:  # asked for the compiled program: no eager calls after it
            self._keys[ck].interleave = False
        self._release("timing", "deferred")  # asked for: no reason to hold them back
        for ck in self._order:
            if self._keys[ck].info["state"] == "warm":
                self._load_here(ck, self._keys[ck])
        while True:
            self.poll()
            busy = [ck for ck in self._order if self._keys[ck].info["state"] in
                    ("waiting", "compiling")]
            if not busy:  # a ready key switches at its next call
                return True
            if end is not None and time.perf_counter() >= end:
                return False
            time.sleep(0.05)

    def close(self) -> None:
        """Stop a running compile now (its key stays eager; no entry is left half written)."""
        for ck in self._order:
            k = self._keys[ck]
            if k.child is not None:
                k.child.kill()
                _forget(k.child)
                k.child = None
            elif k.info["state"] not in ("waiting", "timing", "deferred", "warm"):
                continue
            k.info["state"], k.info["why"], k.example = "eager", "stopped by close()", None


def _forget(child: Optional[_Child]) -> None:
    """A child that ended: out of the exit wait's list, its core given back."""
    if child is not None and child in _LIVE:
        _LIVE.remove(child)
        _Threads.child_ended()


def _abandon(child: _Child) -> None:
    """The engine that started ``child`` is gone: nobody collects it, so stop it now."""
    if child in _LIVE and child.process.is_alive():
        child.kill()
    _forget(child)


def _wait_at_exit() -> None:
    """At the interpreter's exit: let a running compile write its entry (bounded), then stop it."""
    live = [c for c in _LIVE if c.process.is_alive()]
    if not live:
        return
    print(f"graph_adapter: waiting up to {EXIT_WAIT:.0f} s for {len(live)} background "
          f"compile(s) to write their cache entries (Ctrl-C stops them; the next run then "
          f"compiles again)", file=sys.stderr, flush=True)
    end = time.perf_counter() + EXIT_WAIT
    for c in live:  # nothing of this process's is left to go first
        _stop_idling(c.process.pid)
    try:
        for c in live:
            c.process.join(max(0.0, end - time.perf_counter()))
    except KeyboardInterrupt:
        pass
    for c in live:
        c.kill()


# Registered after multiprocessing's own exit handler (imported above), so it runs first:
# multiprocessing's would terminate the daemonic children without waiting.
atexit.register(_wait_at_exit)
