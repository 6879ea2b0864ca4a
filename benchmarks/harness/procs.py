"""A process and its children, read from ``/proc`` (Linux): what the serving benchmarks
measure a server by (its program's and body reader's child processes included)."""
import os
from typing import List


def tree_pids(pid: int) -> List[int]:
    """``pid`` and its live descendants."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += [c for c, pp in parents.items() if pp == p]
    return out


def status_kb(pid: int, field: str = "VmRSS") -> int:
    """A ``/proc/PID/status`` memory field in kB (``VmRSS``, ``VmHWM``); 0 once gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
