"""Run a script as several ranks of one ``torch.distributed`` job (gloo, CPU).

``run_ranks(script, world, *args)`` starts ``world`` processes of
``python script RANK WORLD PORT OUT *args`` on 127.0.0.1, waits for them with a
time limit (killing all of them on the first timeout), asserts every rank
exited 0 (showing the log's tail otherwise) and returns the JSON each wrote to
its ``OUT``. The script calls :func:`init` first, with its four arguments.
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
from typing import Any, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init(argv: List[str]):
    """Start the gloo group from ``argv[1:5]``; return ``(rank, world, out_path, rest)``."""
    import torch.distributed as dist

    rank, world, port, out = int(argv[1]), int(argv[2]), int(argv[3]), argv[4]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    return rank, world, out, argv[5:]


def run_ranks(script: str, world: int, *args: str, timeout: float = 180,
              env: dict = None) -> List[Any]:
    env = dict(os.environ if env is None else env,
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1")
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        outs = [os.path.join(tmp, f"rank{r}.json") for r in range(world)]
        procs = [subprocess.Popen([sys.executable, script, str(r), str(world), str(port), outs[r],
                                   *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT) for r in range(world)]
        logs = []
        try:
            for p in procs:
                logs.append(p.communicate(timeout=timeout)[0].decode(errors="replace"))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        for r, (p, log) in enumerate(zip(procs, logs)):
            assert p.returncode == 0, f"rank {r} exited {p.returncode}:\n{log[-4000:]}"
        res = []
        for o in outs:
            with open(o) as f:
                res.append(json.load(f))
        return res


def finish(out: str, result: Any) -> None:
    """Wait for every rank, end the group, write this rank's ``result`` as JSON."""
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump(result, f)


def error_text(fn, error: type) -> Any:
    """``str`` of the ``error`` that ``fn()`` raises, ``None`` if it raises none."""
    try:
        fn()
    except error as e:
        return str(e)
    return None
