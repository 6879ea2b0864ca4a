"""Inductor's per-process host checks, remembered on disk (a warm start skips them).

Every new process that compiles for the CPU, even one whose every graph comes
from inductor's caches, re-runs two checks of the host before it loads a
kernel (torch 2.13; their cost is in ``docs/dev/RESULTS.md``, "The tuning wing's
settings"):

1. **The vector-ISA probe** (``torch._inductor.cpu_vec_isa.VecISA.check_build``):
   for each ISA the CPU claims (six on an AVX-512 host) inductor builds a tiny
   ``.so`` (cached in ``TORCHINDUCTOR_CACHE_DIR``) and then starts a fresh
   ``python -c`` that ``dlopen``s it (``_probe_load``), so that a broken
   toolchain cannot crash the compiling process: six interpreters.
2. **The precompiled-header check** (``torch._inductor.codecache._precompile_header``):
   once per compile command line, ``g++ -E`` of the header plus an
   ``openssl sha512`` of the result, to notice a header that changed under the
   same path.

:func:`remembered_host_checks` answers both from a record of an earlier
process, where that process ran the check on the same artifact: a probe is
skipped for a ``.so`` that passed its ``dlopen`` before (same path, size and
modification time, same torch and Python executable). The whole ISA check
(build and probe, ``check_build``) is also answered machine-wide, beside the
headers, for a new cache directory: its answer depends on the CPU, the
compiler and torch, not on the directory, so a check that passed with the same
test code, ISA flags, compiler version, torch, Python executable and CPU flags
(``/proc/cpuinfo``) passes again without its six builds and six interpreters.
A header check is
skipped for the same header, command line and compile options when the
``.gch`` it produced is still there (same size and time) and torch's copy of
the header has not changed (size and time). Anything else runs inductor's own
check and is recorded only when it passes. Records are JSON, one file per
cache directory; a record that cannot be read counts as empty, one that cannot
be written is skipped (the checks then simply run again next time).

What can go wrong and is accepted: a toolchain that breaks between two
processes without touching the ``.so`` would have failed inductor's probe and
passes it here (the kernels themselves would then fail to build or load, with
the compiler's error); a header *included by* the precompiled one, edited in
place while the top header keeps its size and time (a torch developer's
checkout; an install or upgrade rewrites every header), keeps the old ``.gch``
where inductor's preprocessing would have noticed. The registry entry
``remembered_host_checks`` off (``registry.disabled("remembered_host_checks")``)
restores inductor's checks for such a setup.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import threading
from typing import Any, Callable, Dict, Iterator, Optional

import torch

from .registry import Entry, enabled, register

__all__ = ["remembered_host_checks", "ISA_RECORD", "HEADER_RECORD", "ISA_ANSWER_RECORD"]

# One record per environment (torch version and Python executable): the header
# directory is global to the machine, and two venvs compiling at the same time
# must not replace each other's records (CI's clean clone lost its answers to a
# concurrent process of another venv that way).
_ENV = hashlib.sha256(f"{torch.__version__}\0{sys.executable}".encode("utf-8")).hexdigest()[:12]
#: File names of the records (JSON), one per environment: in inductor's cache
#: directory (``TORCHINDUCTOR_CACHE_DIR``) for the ISA probes, whose ``.so`` live
#: there; beside the precompiled headers (inductor's global header directory) for those.
ISA_RECORD = f"graph_adapter_isa_probes-{_ENV}.json"
HEADER_RECORD = f"graph_adapter_headers-{_ENV}.json"
#: ...and for the ISA checks' answers (machine-wide, beside the headers).
ISA_ANSWER_RECORD = f"graph_adapter_isa_answers-{_ENV}.json"

_VERSION = 1  # bumped when what a record entry means changes

register(Entry(
    "remembered_host_checks",
    "Inductor's per-process host checks (the vector-ISA build and ``dlopen`` probes, "
    "the precompiled header's preprocessing) are answered from the records of an "
    "earlier process that ran them on the same files, so a warm process skips them. "
    "Applies to every CPU compile and to loading a precompiled entry; torch's "
    "internals it wraps are those of the releases it was verified on (elsewhere it "
    "does nothing).",
    points=("config",), order=60, version=str(_VERSION)))

_LOCK = threading.Lock()
_DEPTH = [0]  # entries of remembered_host_checks now open, in every thread
_ORIGINALS: Dict[str, Any] = {}  # inductor's functions, as first found


def _stamp(path: str) -> Optional[list]:
    """``[size, mtime_ns]`` of a file, ``None`` if it is not there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _read(path: str) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != _VERSION \
            or data.get("torch") != torch.__version__ or data.get("python") != sys.executable:
        return {}
    entries = data.get("entries")
    return entries if isinstance(entries, dict) else {}


def _write(path: str, entries: Dict[str, Any]) -> None:
    """Write the record atomically (another process may read it meanwhile), merged with
    what other processes of this environment wrote since it was read (theirs first,
    ours on top: an entry is only ever a passing answer)."""
    merged = {**_read(path), **entries}
    entries.update(merged)
    data = {"version": _VERSION, "torch": torch.__version__, "python": sys.executable,
            "entries": merged}
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(tmp)


def _remembered_probe(original: Callable[[Any, str], bool], record: str) -> Callable[[Any, str], bool]:
    """``VecISA._probe_load`` that answers ``True`` for a ``.so`` recorded as loaded."""
    entries = _read(record)

    def probe(isa: Any, output_path: str) -> bool:
        return _passed(entries, record, output_path, _stamp(output_path),
                       lambda: original(isa, output_path))

    return probe


def _passed(entries: Dict[str, Any], record: str, key: Optional[str], value: Any,
            check: Callable[[], bool]) -> bool:
    """``True`` where ``entries`` recorded ``value`` under ``key`` (an earlier pass), else
    ``check()``, whose pass is recorded (``key`` or ``value`` ``None``: never recorded)."""
    rememberable = key is not None and value is not None
    if rememberable and entries.get(key) == value:
        return True
    ok = check()
    if ok and rememberable:
        entries[key] = value
        _write(record, entries)
    return ok


def _cpu_flags() -> Optional[str]:
    """The CPU's feature flags (the first ``flags`` line of ``/proc/cpuinfo``), or
    ``None`` where there is none (then no ISA answer is remembered)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return " ".join(sorted(line.partition(":")[2].split()))
    except OSError:
        pass
    return None


def _isa_key(isa: Any, code: str, fingerprint: Callable[[str], str],
             flags: Optional[str]) -> Optional[str]:
    """The record's key of one ISA check (``None``: not rememberable)."""
    if flags is None:
        return None
    try:
        text = repr((str(isa), isa.build_arch_flags(), list(isa.build_macro()), code,
                     fingerprint(isa.build_arch_flags()), flags))
    except Exception:  # torch's internals moved: let inductor check
        return None
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _remembered_check_build(original: Callable[[Any, str], bool], record: str,
                            fingerprint: Callable[[str], str]) -> Callable[[Any, str], bool]:
    """``VecISA.check_build`` that answers ``True`` for a check recorded as passed on this
    machine (same test code, ISA flags and macros, compiler version, torch, CPU flags)."""
    entries = _read(record)
    flags = _cpu_flags()

    def check_build(isa: Any, code: str) -> bool:
        return _passed(entries, record, _isa_key(isa, code, fingerprint, flags), True,
                       lambda: original(isa, code))

    return check_build


def _stable_text(value: Any) -> Optional[str]:
    """A text for ``value`` that is the same in every process, or ``None`` if there is none
    (an object whose text carries its address)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    if isinstance(value, (tuple, list)):
        parts = [_stable_text(v) for v in value]
        return None if None in parts else f"{type(value).__name__}({', '.join(parts)})"
    text = f"{type(value).__qualname__}:{value}"  # VecISA: its name ("avx512", "INVALID_VEC_ISA")
    return None if " at 0x" in text else text


def _header_key(header: str, cmd_line: str, options: Dict[str, Any]) -> Optional[str]:
    """The record's key of one header check (``None``: not rememberable)."""
    parts = [(k, _stable_text(v)) for k, v in sorted(options.items())]
    if any(text is None for _, text in parts):
        return None
    text = repr((header, cmd_line, parts))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _torch_header(header: str) -> str:
    return os.path.join(os.path.dirname(torch.__file__), "include", header)


def _remembered_header(original: Callable[..., str], record: str) -> Callable[..., str]:
    """``codecache._precompile_header`` that returns a recorded header whose ``.gch``
    and source are unchanged, without preprocessing the header again."""
    entries = _read(record)

    def precompile(header: str, hashable_cmd_line: str, **options: Any) -> str:
        key = _header_key(header, hashable_cmd_line, options)
        if key is None:
            return original(header, hashable_cmd_line, **options)
        entry = entries.get(key)
        if isinstance(entry, dict) and isinstance(entry.get("path"), str) \
                and _stamp(entry["path"] + ".gch") == entry.get("gch") \
                and _stamp(_torch_header(header)) == entry.get("source"):
            return entry["path"]
        path = original(header, hashable_cmd_line, **options)
        gch, source = _stamp(path + ".gch"), _stamp(_torch_header(header))
        if gch is not None and source is not None:
            entries[key] = {"path": path, "gch": gch, "source": source}
            _write(record, entries)
        return path

    return precompile


@contextlib.contextmanager
def remembered_host_checks() -> Iterator[None]:
    """While inductor compiles: answer its host checks from the records of earlier
    processes (see the module doc); inductor's own functions are restored after.
    Does nothing when the entry ``remembered_host_checks`` is off or torch's internals
    are not where torch 2.13 keeps them."""
    if not enabled("remembered_host_checks"):
        yield
        return
    try:
        from torch._inductor import codecache, cpu_vec_isa
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        probe_owner = cpu_vec_isa.VecISA
        # inductor's own functions: what an outer entry installed is not saved as one
        probe = _ORIGINALS.setdefault("probe", probe_owner.__dict__["_probe_load"])
        check = _ORIGINALS.setdefault("check_build", probe_owner.__dict__["check_build"])
        fingerprint = cpu_vec_isa._get_isa_dry_compile_fingerprint
        header = _ORIGINALS.setdefault("header", codecache._precompile_header)
        header_dir = codecache._HEADER_DIR
        isa_record = os.path.join(cache_dir(), ISA_RECORD)
    except (ImportError, AttributeError, KeyError):
        yield
        return
    # Installed by the outermost entry only and restored by its exit: compiles that
    # overlap (threads, a compile inside a compile) must not save our wrapper as
    # inductor's function and leave it installed.
    with _LOCK:
        outermost = _DEPTH[0] == 0
        if outermost:
            probe_owner._probe_load = _remembered_probe(probe, isa_record)
            probe_owner.check_build = _remembered_check_build(
                check, os.path.join(header_dir, ISA_ANSWER_RECORD), fingerprint)
            codecache._precompile_header = _remembered_header(
                header, os.path.join(header_dir, HEADER_RECORD))
        _DEPTH[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH[0] -= 1
            if outermost:
                probe_owner._probe_load = probe
                probe_owner.check_build = check
                codecache._precompile_header = header
