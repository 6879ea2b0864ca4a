"""Every ```python block of README.md and docs/**/*.md runs.

The convention, for whoever writes docs. A block runs as written: alone, in a
fresh module, with the seeds of ``torch``, ``random`` and ``numpy`` set to 0
and a temporary directory as the working directory. An HTML comment right
before the fence (blank lines allowed; invisible on the rendered page) changes
that; one comment may hold several markers separated by ``;``:

* ``<!-- docs-test: continue -->``: run in the module the page's previous
  block left, for a page that builds one example step by step (blocks marked
  ``skip`` are not run, so they do not count as "previous");
* ``<!-- docs-test: requires MODULE -->``: skip (reason shown) when MODULE is
  not importable, for the optional extras (``rdkit``, ``lightning``,
  ``poptorch``); later ``continue`` blocks skip with it;
* ``<!-- docs-test: skip (REASON) -->``: never run (a signature, an excerpt);
  the reason is required and is pytest's skip reason;
* ``<!-- docs-test: slow -->``: the block compiles with inductor for more than
  ~10 s; it gets the ``slow`` marker.
* ``<!-- docs-test: extended -->``: the block trains with inductor for more
  than ~20 s (a page's whole worked example); it gets the ``extended`` marker
  (and ``slow``), so it runs in CI's second step (``-m "sweep or extended"``), not in the main
  suite. Only for a block no ``continue`` block follows.

A python-like fence other than ```python (```py, ```python3, ...), an unknown
marker or a ``skip`` without a reason fails the test suite, so no block goes
unrun unnoticed. Shell (```bash), ```text and the like are not run.

Blocks run as modules registered in ``sys.modules`` (named after page and
line) because ``ipu_wrap`` patches PyG functions in the modules of the user's
model classes; tracebacks name the markdown file and its line.
"""
import importlib.util
import os
import random
import re
import sys
import tempfile
import types
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np
import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_FENCE = re.compile(r"^\s*```\s*([\w+-]*)")
_MARKER = re.compile(r"^\s*<!--\s*docs-test:(.*?)-->\s*$")
_PYTHONISH = re.compile(r"^(py|python\d?|py\d|ipython\d?)$", re.I)


@dataclass
class Block:
    """One ```python block: its page, the markdown line of its first code line, its code, markers."""

    page: str
    line: int
    code: str
    continues: bool = False
    slow: bool = False
    extended: bool = False
    skip: Optional[str] = None
    requires: List[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _split_markers(text: str) -> List[str]:
    """Split on ``;`` outside parentheses (a skip reason may hold one)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == ";" and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]


def _apply_markers(block: Block, text: str, where: str) -> None:
    """Set ``block``'s fields from one comment's ``docs-test:`` text; raise on anything unknown."""
    for marker in filter(None, (m.strip() for m in _split_markers(text))):
        word, _, rest = marker.partition(" ")
        rest = rest.strip()
        if word == "continue" and not rest:
            block.continues = True
        elif word == "slow" and not rest:
            block.slow = True
        elif word == "extended" and not rest:
            block.extended = True
        elif word == "requires" and rest:
            block.requires.append(rest)
        elif word == "skip" and rest.startswith("(") and rest.endswith(")") and rest[1:-1].strip():
            block.skip = rest[1:-1].strip()
        else:
            raise ValueError(f"{where}: bad docs-test marker {marker!r} (continue, slow, "
                             f"extended, requires MODULE, skip (REASON))")


def parse_blocks(text: str, page: str) -> List[Block]:
    """The ```python blocks of one markdown text, in order, with their markers.

    Raises ValueError on a python-like fence that is not ```python, an unknown
    marker, a marker not followed by a ```python block, or a ``continue`` block
    after an ``extended`` one (the main suite would run it without its state).
    """
    lines = text.splitlines()
    blocks: List[Block] = []
    pending: List[Tuple[int, str]] = []  # markers seen since the last non-blank line
    i = 0
    while i < len(lines):
        line = lines[i]
        marker = _MARKER.match(line)
        fence = _FENCE.match(line)
        if marker:
            pending.append((i + 1, marker.group(1)))
        elif fence:
            lang = fence.group(1)
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith("```")), None)
            if end is None:
                raise ValueError(f"{page}:{i + 1}: unclosed code fence")
            if lang != "python":
                if _PYTHONISH.match(lang):
                    raise ValueError(f"{page}:{i + 1}: write ```python (not ```{lang}) so the block is run")
                if pending:
                    raise ValueError(f"{page}:{pending[0][0]}: docs-test marker before a ```{lang} block")
            else:
                block = Block(page, i + 2, "\n".join(lines[i + 1:end]) + "\n")
                for at, text_ in pending:
                    _apply_markers(block, text_, f"{page}:{at}")
                ran = [b for b in blocks if b.skip is None]
                if block.continues and ran and ran[-1].extended and not block.extended:
                    raise ValueError(f"{page}:{i + 1}: a continue block after the extended block "
                                     f"at line {ran[-1].line}: mark it extended too")
                blocks.append(block)
            pending = []
            i = end
        elif line.strip() and pending:
            raise ValueError(f"{page}:{pending[0][0]}: docs-test marker not right before a ```python block")
        i += 1
    if pending:
        raise ValueError(f"{page}:{pending[0][0]}: docs-test marker at the end of the page")
    return blocks


def _pages() -> List[str]:
    """README.md and every markdown file under docs/, relative to the repository root."""
    pages = ["README.md"]
    for folder, _, files in sorted(os.walk(os.path.join(ROOT, "docs"))):
        pages += sorted(os.path.relpath(os.path.join(folder, f), ROOT) for f in files if f.endswith(".md"))
    return pages


def _collect() -> Tuple[List[Block], List[str]]:
    """Every block of every page, and the parse errors (one string a page)."""
    blocks, errors = [], []
    for page in _pages():
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            text = f.read()
        try:
            blocks += parse_blocks(text, page)
        except ValueError as e:
            errors.append(str(e))
    return blocks, errors


BLOCKS, PARSE_ERRORS = _collect()


def _previous(block: Block) -> Block:
    """The block a ``continue`` block continues: the page's last earlier block not marked skip."""
    earlier = [b for b in BLOCKS if b.page == block.page and b.line < block.line and b.skip is None]
    if not earlier:
        raise ValueError(f"{block.id}: 'continue' but no earlier block on the page runs")
    return earlier[-1]


def _chain(block: Block) -> List[Block]:
    """The blocks to run, in order, to run ``block``: its ``continue`` predecessors, then itself."""
    chain = [block]
    while chain[0].continues:
        chain.insert(0, _previous(chain[0]))
    return chain


def _missing_requirement(chain: List[Block]) -> Optional[str]:
    for b in chain:
        for module in b.requires:
            if importlib.util.find_spec(module) is None:
                where = "" if b is chain[-1] else f" (needed by {b.id}, which this block continues)"
                return f"needs {module}, not installed{where}"
    return None


def _seed_dynamo_funcnames(path: str, source: str) -> None:
    """Dynamo names a traced function by tokenizing its whole source file
    (``torch._dynamo.funcname_cache``): here the markdown page, whose prose the
    tokenizer may reject with an ``IndentationError`` Dynamo does not catch (an
    unbalanced parenthesis or apostrophe earlier on the page), failing a block that
    compiles a model it defines. Seed that cache with the block's own code instead
    (merged with the page's earlier blocks: their lines differ)."""
    from torch._dynamo import funcname_cache

    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False, encoding="utf-8") as f:
        f.write(source)
    try:
        funcname_cache._add_file(f.name)
        names = funcname_cache.cache.pop(f.name)
    finally:
        os.remove(f.name)
    funcname_cache.cache[path] = {**funcname_cache.cache.get(path, {}), **names}


def _run(block: Block, module: types.ModuleType) -> None:
    """Execute one block in ``module``; line numbers in tracebacks are the markdown's."""
    source = "\n" * (block.line - 1) + block.code
    path = os.path.join(ROOT, block.page)
    _seed_dynamo_funcnames(path, source)
    code = compile(source, path, "exec")
    exec(code, module.__dict__)


def _fresh_module(block: Block) -> types.ModuleType:
    name = "docs_example_" + re.sub(r"\W", "_", block.id)
    module = types.ModuleType(name)
    module.__file__ = os.path.join(ROOT, block.page)
    sys.modules[name] = module
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    return module


# The module each page's last successful block left, to continue from: page -> (block id, module).
_STATE: Dict[str, Tuple[str, types.ModuleType]] = {}


def _module_for(chain: List[Block]) -> types.ModuleType:
    """The module to run ``chain[-1]`` in: the cached one after ``chain[-2]``, or one built by running the chain."""
    if len(chain) > 1 and chain[-2].page in _STATE and _STATE[chain[-2].page][0] == chain[-2].id:
        return _STATE[chain[-2].page][1]
    module = _fresh_module(chain[0])
    for b in chain[:-1]:
        _run(b, module)
    return module


def _param(block: Block):
    marks = [pytest.mark.slow] if block.slow or block.extended else []
    if block.extended:
        marks.append(pytest.mark.extended)
    if block.skip is not None:
        marks.append(pytest.mark.skip(reason=f"{block.id}: {block.skip}"))
    return pytest.param(block, id=block.id, marks=marks)


@pytest.fixture(scope="module")
def workdirs(tmp_path_factory):
    """One working directory a page, so a ``continue`` block sees the files its page wrote."""
    dirs: Dict[str, str] = {}

    def get(page: str) -> str:
        if page not in dirs:
            dirs[page] = str(tmp_path_factory.mktemp(re.sub(r"\W", "_", page)))
        return dirs[page]

    return get


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS])
def test_block_runs(block: Block, workdirs, monkeypatch):
    chain = _chain(block)
    reason = _missing_requirement(chain)
    if reason:
        pytest.skip(f"{block.id}: {reason}")
    monkeypatch.chdir(workdirs(block.page))
    module = _module_for(chain)
    _STATE.pop(block.page, None)
    _run(block, module)
    _STATE[block.page] = (block.id, module)


def test_every_page_parses():
    """No python-like fence other than ```python, no unknown or stray marker."""
    assert not PARSE_ERRORS, "\n".join(PARSE_ERRORS)


def test_the_pages_with_code_are_collected():
    pages = {b.page for b in BLOCKS}
    for page in ["README.md", "docs/quickstart.md", "docs/ipu.md", "docs/migrating.md"]:
        assert page in pages


def test_markers_are_parsed():
    text = ("<!-- docs-test: continue; slow -->\n\n```python\nx = 1\n```\n"
            "<!-- docs-test: skip (needs an IPU; or poptorch) -->\n```python\ny\n```\n"
            "<!-- docs-test: requires lightning -->\n```python\nz\n```\n```bash\nls\n```\n")
    a, b, c = parse_blocks(text, "p.md")
    assert (a.continues, a.slow, a.line, a.code) == (True, True, 4, "x = 1\n")
    assert b.skip == "needs an IPU; or poptorch" and c.requires == ["lightning"]


def test_an_extended_block_gets_the_extended_marker():
    (a,) = parse_blocks("<!-- docs-test: requires rdkit; extended -->\n```python\nx = 1\n```\n",
                        "p.md")
    assert a.extended and not a.slow
    assert [m.name for m in _param(a).marks] == ["slow", "extended"]


@pytest.mark.parametrize("text, message", [
    ("<!-- docs-test: extended -->\n```python\nx\n```\n<!-- docs-test: continue -->\n"
     "```python\ny\n```\n", "after the extended block"),
    ("<!-- docs-test: skip -->\n```python\nx\n```\n", "bad docs-test marker"),
    ("<!-- docs-test: skip () -->\n```python\nx\n```\n", "bad docs-test marker"),
    ("<!-- docs-test: sometimes -->\n```python\nx\n```\n", "bad docs-test marker"),
    ("```py\nx\n```\n", "write ```python"),
    ("<!-- docs-test: continue -->\nsome prose\n```python\nx\n```\n", "not right before"),
    ("<!-- docs-test: continue -->\n```bash\nls\n```\n", "before a ```bash block"),
    ("```python\nx\n", "unclosed"),
])
def test_bad_pages_are_refused(text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_blocks(text, "p.md")
