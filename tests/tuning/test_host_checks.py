"""``backends/_host_checks``: inductor's ISA probes and header checks, remembered on disk.

A remembered answer is only ever the answer inductor's own check gave for the
same file in the same state; a changed, missing or unreadable file or record
runs the check again; inductor's functions are restored after the compile."""
import json
import os
import sys

import pytest
import torch
from hypothesis import given, settings, strategies as st

from graph_adapter.tuning import host_checks as H
from graph_adapter.tuning import registry


class _Calls:
    """A stand-in for inductor's check: answers from ``results`` and counts its calls."""

    def __init__(self, results):
        self.results = results
        self.calls = []

    def probe(self, isa, path):
        self.calls.append(path)
        return self.results[path]


def _touch(path, text):
    with open(path, "w") as f:
        f.write(text)


def _one_so(tmp_path, answer):
    """A built ``a.so``, the path of its (not yet written) record, and inductor's
    stand-in check answering ``answer`` for it."""
    so = str(tmp_path / "a.so")
    _touch(so, "x")
    return so, str(tmp_path / H.ISA_RECORD), _Calls({so: answer})


def test_probe_is_remembered_across_processes(tmp_path):
    so, record, check = _one_so(tmp_path, True)
    assert H._remembered_probe(check.probe, record)(None, so) is True
    assert check.calls == [so]
    # a later process (a new wrapper reading the record) does not probe again
    assert H._remembered_probe(check.probe, record)(None, so) is True
    assert check.calls == [so]
    data = json.load(open(record))
    assert data["torch"] == torch.__version__ and data["python"] == sys.executable


def test_a_changed_so_is_probed_again(tmp_path):
    so, record, check = _one_so(tmp_path, True)
    H._remembered_probe(check.probe, record)(None, so)
    _touch(so, "rebuilt, longer")  # size changes: a new build
    check.results[so] = False
    assert H._remembered_probe(check.probe, record)(None, so) is False
    assert check.calls == [so, so]


def test_a_failed_probe_is_not_remembered(tmp_path):
    so, record, check = _one_so(tmp_path, False)
    assert H._remembered_probe(check.probe, record)(None, so) is False
    assert H._remembered_probe(check.probe, record)(None, so) is False
    assert check.calls == [so, so]
    assert not os.path.exists(record)


@pytest.mark.parametrize("content", ["not json", json.dumps([1, 2]),
                                     json.dumps({"version": 1, "torch": "0.0", "python": sys.executable,
                                                 "entries": {}}),
                                     json.dumps({"version": 1, "torch": torch.__version__,
                                                 "python": "/other/python", "entries": {}})])
def test_unreadable_or_foreign_records_count_as_empty(tmp_path, content):
    so, record, check = _one_so(tmp_path, True)
    stamp = H._stamp(so)
    data = json.loads(content) if content.startswith("{") else None
    if data is not None:
        data["entries"] = {so: stamp}  # would answer, were the record this torch's / python's
        content = json.dumps(data)
    _touch(record, content)
    assert H._remembered_probe(check.probe, record)(None, so) is True
    assert check.calls == [so]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["probe", "rebuild", "new process"]),
                          st.integers(0, 2), st.booleans()), max_size=25))
def test_remembered_probe_answers_as_inductor_did_for_the_same_file(tmp_path_factory, ops):
    """Any interleaving of probes, rebuilt ``.so`` files and new processes: the answer
    is inductor's, except ``True`` where inductor said ``True`` for the file as it is now;
    inductor is called exactly when no such answer exists."""
    root = tmp_path_factory.mktemp("probes")
    files = [str(root / f"{i}.so") for i in range(3)]
    for i, f in enumerate(files):
        _touch(f, "v0")
    record = str(root / H.ISA_RECORD)
    check = _Calls({})
    probe = H._remembered_probe(check.probe, record)
    passed = set()  # (file, stamp) inductor answered True for
    version = [0, 0, 0]
    for op, i, result in ops:
        f = files[i]
        if op == "rebuild":
            version[i] += 1
            _touch(f, "v" * (version[i] + 1))  # new size: a new stamp
        elif op == "new process":
            probe = H._remembered_probe(check.probe, record)
        else:
            check.results[f] = result
            n = len(check.calls)
            answer = probe(None, f)
            known = (f, tuple(H._stamp(f))) in passed
            assert answer == (True if known else result)
            assert len(check.calls) == n + (0 if known else 1)
            if answer and not known:
                passed.add((f, tuple(H._stamp(f))))


def _header_setup(tmp_path, monkeypatch):
    """A fake torch include tree and a fake precompile that writes ``path.gch``."""
    include = tmp_path / "torch" / "include" / "h"
    include.mkdir(parents=True)
    _touch(str(include / "prefix.h"), "// header")
    monkeypatch.setattr(H, "_torch_header", lambda header: str(tmp_path / "torch" / "include" / header))
    calls = []

    def precompile(header, cmd_line, **options):
        calls.append((header, cmd_line, options))
        path = str(tmp_path / "pch" / f"{len(calls)}.h")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        _touch(path + ".gch", "gch")
        return path

    return calls, precompile, str(tmp_path / H.HEADER_RECORD)


def test_header_check_is_remembered_while_gch_and_source_are_unchanged(tmp_path, monkeypatch):
    calls, precompile, record = _header_setup(tmp_path, monkeypatch)
    first = H._remembered_header(precompile, record)("h/prefix.h", "g++ -O3", vec_isa="x")
    assert H._remembered_header(precompile, record)("h/prefix.h", "g++ -O3", vec_isa="x") == first
    assert len(calls) == 1
    # another command line or option: checked on its own
    H._remembered_header(precompile, record)("h/prefix.h", "g++ -O1", vec_isa="x")
    H._remembered_header(precompile, record)("h/prefix.h", "g++ -O3", vec_isa="y")
    assert len(calls) == 3
    # torch's header changed: inductor's check runs again
    _touch(str(tmp_path / "torch" / "include" / "h" / "prefix.h"), "// header, edited")
    H._remembered_header(precompile, record)("h/prefix.h", "g++ -O3", vec_isa="x")
    assert len(calls) == 4
    # the .gch was removed: again
    os.remove(first + ".gch")
    os.remove(str(tmp_path / "pch" / "4.h.gch"))
    H._remembered_header(precompile, record)("h/prefix.h", "g++ -O3", vec_isa="x")
    assert len(calls) == 5


def test_options_without_a_stable_text_are_never_remembered(tmp_path, monkeypatch):
    calls, precompile, record = _header_setup(tmp_path, monkeypatch)
    thing = object()  # its text carries its address: differs between processes
    for _ in range(2):
        H._remembered_header(precompile, record)("h/prefix.h", "g++", vec_isa=thing)
    assert len(calls) == 2
    assert H._stable_text(("a", 1, None)) == "tuple('a', 1, None)"
    assert H._stable_text([thing]) is None


class _ISA:
    """A stand-in for an inductor ``VecISA``: its name, flags and macros."""

    def __init__(self, name="avx2", flags="-mavx2 -mfma"):
        self.name, self.flags = name, flags

    def __str__(self):
        return self.name

    def build_arch_flags(self):
        return self.flags

    def build_macro(self):
        return ["CPU_CAPABILITY_" + self.name.upper()]


def _fingerprint(flags):
    return f"g++ 12={flags}={torch.__version__}"


@pytest.mark.skipif(H._cpu_flags() is None, reason="no /proc/cpuinfo flags on this host")
def test_an_isa_check_passed_on_this_machine_is_answered_for_a_new_cache_dir(tmp_path):
    """The whole check (build + dlopen) is machine-wide: a later process with an empty
    cache directory gets the recorded pass without building; a failure is never kept;
    another ISA, other flags, other test code or another compiler checks again."""
    record = str(tmp_path / H.ISA_ANSWER_RECORD)
    calls = []

    def check(isa, code):
        calls.append((str(isa), isa.build_arch_flags(), code))
        return isa.name != "avx512"

    avx2 = _ISA()
    assert H._remembered_check_build(check, record, _fingerprint)(avx2, "code") is True
    assert H._remembered_check_build(check, record, _fingerprint)(avx2, "code") is True
    assert len(calls) == 1  # the second process did not check
    assert H._remembered_check_build(check, record, _fingerprint)(_ISA("avx512"), "code") is False
    assert H._remembered_check_build(check, record, _fingerprint)(_ISA("avx512"), "code") is False
    assert len(calls) == 3  # a failure is checked again every time
    again = [
        (_ISA(flags="-mavx2 -mfma -mavx512bf16"), "code", _fingerprint),  # bf16 variant
        (avx2, "other code", _fingerprint),
        (avx2, "code", lambda flags: "clang 17=" + flags),  # another compiler
    ]
    for isa, code, fp in again:
        H._remembered_check_build(check, record, fp)(isa, code)
    assert len(calls) == 6


def test_no_isa_answer_is_remembered_without_cpu_flags(tmp_path, monkeypatch):
    monkeypatch.setattr(H, "_cpu_flags", lambda: None)
    record = str(tmp_path / H.ISA_ANSWER_RECORD)
    calls = []

    def check(isa, code):
        calls.append(code)
        return True

    for _ in range(2):
        assert H._remembered_check_build(check, record, _fingerprint)(_ISA(), "code") is True
    assert len(calls) == 2 and not os.path.exists(record)


def test_vec_isa_options_have_a_stable_text():
    """Inductor's ISA objects are what the header options hold; their ``repr`` carries an
    address (dataclass ``__hash__`` field), their key text must not."""
    from torch._inductor.cpu_vec_isa import invalid_vec_isa, pick_vec_isa

    for isa in (pick_vec_isa(), invalid_vec_isa):
        text = H._stable_text(isa)
        assert text is not None and "0x" not in text


def test_context_restores_inductor_and_can_be_off(monkeypatch):
    from torch._inductor import codecache, cpu_vec_isa

    probe = cpu_vec_isa.VecISA.__dict__["_probe_load"]
    check = cpu_vec_isa.VecISA.__dict__["check_build"]
    header = codecache._precompile_header
    with H.remembered_host_checks():
        assert cpu_vec_isa.VecISA.__dict__["_probe_load"] is not probe
        assert cpu_vec_isa.VecISA.__dict__["check_build"] is not check
        assert codecache._precompile_header is not header
    assert cpu_vec_isa.VecISA.__dict__["_probe_load"] is probe
    assert cpu_vec_isa.VecISA.__dict__["check_build"] is check
    assert codecache._precompile_header is header
    with registry.disabled("remembered_host_checks"), H.remembered_host_checks():
        assert cpu_vec_isa.VecISA.__dict__["_probe_load"] is probe
    with pytest.raises(RuntimeError):
        with H.remembered_host_checks():
            raise RuntimeError("compile failed")
    assert codecache._precompile_header is header


def test_nested_and_overlapping_entries_restore_inductor_once():
    """A compile inside a compile (or two threads' compiles) installs the wrappers once
    and leaves inductor's own functions in place when the last one exits."""
    from torch._inductor import codecache, cpu_vec_isa

    probe = cpu_vec_isa.VecISA.__dict__["_probe_load"]
    header = codecache._precompile_header
    outer = H.remembered_host_checks()
    outer.__enter__()
    installed = codecache._precompile_header
    with H.remembered_host_checks():
        assert codecache._precompile_header is installed  # not wrapped twice
    assert codecache._precompile_header is installed  # the inner exit left the outer's
    outer.__exit__(None, None, None)
    assert cpu_vec_isa.VecISA.__dict__["_probe_load"] is probe
    assert codecache._precompile_header is header


def test_concurrent_writers_of_one_environment_keep_each_others_entries(tmp_path):
    """Two processes that read the record before either wrote: the second write keeps
    the first's entries (merged, not replaced)."""
    record = str(tmp_path / H.HEADER_RECORD)
    mine, theirs = H._read(record), H._read(record)  # both read the empty record
    theirs["b"] = {"path": "b"}
    H._write(record, theirs)
    mine["a"] = {"path": "a"}
    H._write(record, mine)
    assert set(H._read(record)) == {"a", "b"}


def test_each_environment_has_its_own_record_names():
    """The header directory is global to the machine: a venv's records never replace
    another venv's (their names carry the torch version and the executable)."""
    for name in (H.ISA_RECORD, H.HEADER_RECORD):
        assert H._ENV in name and name.endswith(".json")
