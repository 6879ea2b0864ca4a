"""How the ``graph-adapter`` command reports an expected failure: one line, exit code 2.

An expected failure is a bad option, a missing optional dependency (an
"extra" such as rdkit or matplotlib, or a backend's module such as
poptorch), a missing file or a module path that does not import. Each is
reported as one line on stderr, ``graph-adapter <command>: <what to do>``,
with exit code 2, and never as a traceback. Anything else is a bug and keeps
its traceback.
"""
from __future__ import annotations

import argparse
import sys
from typing import NoReturn

__all__ = ["EXIT_USAGE", "OneLineArgumentParser", "usage_error"]

#: The exit code of every expected failure.
EXIT_USAGE = 2


def usage_error(prog: str, message: str) -> None:
    """Print ``"<prog>: <message>"`` as one line on stderr (newlines folded)."""
    one_line = " ".join(str(message).split())
    print(f"{prog}: {one_line}", file=sys.stderr)


class OneLineArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line on stderr (exit code 2).

    argparse prints the whole usage block and then the error; the one line
    here names the error and where to read the usage (``--help``).
    """

    def error(self, message: str) -> NoReturn:
        usage_error(self.prog, f"error: {message} (see {self.prog} --help)")
        sys.exit(EXIT_USAGE)
