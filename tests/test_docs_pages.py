"""The user pages read as user pages: short, and free of the project's own history.

Every page of ``docs/*.md`` (not ``docs/dev/``, the developers' pages and the
measurement log) and the README:

* length: a page at most 400 lines (``api.md``, the generated API reference, is
  exempt); the README at most 120;
* no commit hash: a run of 7-40 hex digits with at least one digit and one letter
  ``a-f``, standing alone (not part of a longer word or number, not after ``0x``).
  Decimal figures (``1,995,817``), words of the letters a-f only (``decade``),
  ``0x`` literals and digests longer than 40 characters do not match. Prose,
  code spans and code blocks are all checked: a hash has no place in a sample
  output either;
* no word "issue" / "issues": that is the project tracker's word. The one
  exception is a link to another project's GitHub tracker, a URL of the form
  ``https://github.com/OWNER/REPO/issues/N`` (or ``/pull/N``): the word inside
  such a URL is not counted (the project's own tracker is not on GitHub);
* no machine-load figures (the pages would date with every run): no
  "load average", no "load 2.3" / "load of 6-7" / "loads ~3". The one exception is
  the benchmarks page's machine lines: on ``docs/benchmarks.md`` a paragraph that
  starts with ``Run ...:`` under a table (its date, load and command) may name the
  load. The README is checked for length, hashes and the word only.

The measurement history these rules keep out of the pages lives in
``docs/dev/RESULTS.md``. ``mkdocs build --strict`` runs in CI (``.ci/run``).
"""
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
MAX_PAGE_LINES = 400
MAX_README_LINES = 120
LENGTH_EXEMPT = {"docs/api.md"}
BENCHMARKS = "docs/benchmarks.md"

_HEX_RUN = re.compile(r"(?<![0-9A-Za-z_])[0-9a-f]{7,40}(?![0-9A-Za-z_])")
_ISSUE = re.compile(r"\bissues?\b", re.IGNORECASE)
_OTHER_TRACKER_URL = re.compile(r"https?://github\.com/[\w.-]+/[\w.-]+/(?:issues|pull)/\d+")
_LOAD = re.compile(r"\bload averages?\b|\bloads?\s+(?:of\s+)?(?:about\s+|~)?\d", re.IGNORECASE)
_RUN_LINE = re.compile(r"^Runs?\b[^:\n]{0,40}:")


def user_pages():
    """``docs/*.md`` as repository-relative paths (the top level only: ``docs/dev/`` is out)."""
    return sorted(f"docs/{f}" for f in os.listdir(DOCS) if f.endswith(".md"))


def _lines(page):
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return f.read().splitlines()


def commit_hashes(lines):
    """``(line number, token)`` for each token of ``lines`` that looks like a git hash."""
    found = []
    for n, line in enumerate(lines, 1):
        for m in _HEX_RUN.finditer(line):
            token = m.group()
            if re.search(r"[0-9]", token) and re.search(r"[a-f]", token):
                found.append((n, token))
    return found


def tracker_words(lines):
    """``(line number, word)`` for each "issue"/"issues" outside another project's GitHub URL."""
    return [(n, m.group()) for n, line in enumerate(lines, 1)
            for m in _ISSUE.finditer(_OTHER_TRACKER_URL.sub("", line))]


def _run_paragraph_lines(lines):
    """Line numbers inside paragraphs that start with ``Run ...:`` (a table's machine line)."""
    inside, exempt, previous_blank = False, set(), True
    for n, line in enumerate(lines, 1):
        if not line.strip():
            inside, previous_blank = False, True
            continue
        if previous_blank:
            inside = bool(_RUN_LINE.match(line))
        if inside:
            exempt.add(n)
        previous_blank = False
    return exempt


def load_figures(lines, machine_lines_allowed=False):
    """``(line number, text)`` for each load figure, outside the machine lines where allowed."""
    exempt = _run_paragraph_lines(lines) if machine_lines_allowed else set()
    return [(n, m.group()) for n, line in enumerate(lines, 1) if n not in exempt
            for m in _LOAD.finditer(line)]


# (the exempt pages are left out, not skipped: CI fails on a skip it does not expect)
@pytest.mark.parametrize("page", [p for p in user_pages() if p not in LENGTH_EXEMPT])
def test_page_length(page):
    n = len(_lines(page))
    assert n <= MAX_PAGE_LINES, f"{page}: {n} lines (at most {MAX_PAGE_LINES}; history goes to docs/dev/RESULTS.md)"


@pytest.mark.parametrize("page", user_pages() + ["README.md"])
def test_no_commit_hash(page):
    found = [f"{page}:{n}: {t}" for n, t in commit_hashes(_lines(page))]
    assert not found, "commit hashes in a user page:\n" + "\n".join(found)


@pytest.mark.parametrize("page", user_pages() + ["README.md"])
def test_no_tracker_word(page):
    found = [f"{page}:{n}: {w}" for n, w in tracker_words(_lines(page))]
    assert not found, "the tracker's word in a user page:\n" + "\n".join(found)


@pytest.mark.parametrize("page", user_pages())
def test_no_load_figures(page):
    found = [f"{page}:{n}: {t}" for n, t in
             load_figures(_lines(page), machine_lines_allowed=page == BENCHMARKS)]
    assert not found, "load figures in a user page:\n" + "\n".join(found)


def test_readme_length():
    n = len(_lines("README.md"))
    assert n <= MAX_README_LINES, f"README.md: {n} lines (at most {MAX_README_LINES})"


def test_benchmarks_page_has_run_lines_and_links_the_log():
    """Each table of the benchmarks page is followed by its machine line, and the page links the log."""
    lines = _lines(BENCHMARKS)
    tables = [n for n, line in enumerate(lines, 1)
              if line.startswith("|") and (n == 1 or not lines[n - 2].startswith("|"))]
    runs = [n for n in _run_paragraph_lines(lines)
            if n == 1 or not lines[n - 2].strip()]
    # the machine table (the first) describes the machine itself; every later table has a Run line
    # after it and before the next table
    for start, end in zip(tables[1:], tables[2:] + [len(lines) + 1]):
        assert any(start < r < end for r in runs), f"{BENCHMARKS}:{start}: a table without a Run line"
    assert any("dev/RESULTS.md" in line for line in lines)


# The rules themselves, on text written to fail and text written to pass.

def test_hash_rule_flags_hashes_and_not_figures():
    assert [t for _, t in commit_hashes(["at commit abbe44c, then 1c7c5c9-355d5aa",
                                         "`git checkout 4eb0e86f3a2b`"])] == \
        ["abbe44c", "1c7c5c9", "355d5aa", "4eb0e86f3a2b"]
    assert commit_hashes(["1,995,817 edges, 20002841 rows, 0x7fffff3a, a decade, "
                          "effaced", "sha256 " + "ab12" * 16, "float16 bfloat16 e4m3fn"]) == []


def test_tracker_word_rule_allows_other_projects_urls_only():
    assert [w for _, w in tracker_words(["The issue's goal", "see issues 14 and 24", "Issue 26"])] == \
        ["issue", "issues", "Issue"]
    assert tracker_words(["[PyG's bug](https://github.com/pyg-team/pytorch_geometric/issues/9999)",
                          "(https://github.com/pytorch/pytorch/pull/12345)", "tissues"]) == []
    assert len(tracker_words(["a known issue (https://github.com/pytorch/pytorch/issues/1)"])) == 1


def test_load_rule_and_the_machine_line_exception():
    text = ["measured at load average 3.2-4.7", "(load 2.3)", "at a load of 6-7", "loads ~3",
            "", "Run A: 2026-12-01 · load 0.6-1.0 · `cmd`", "continued, load 1.2", "",
            "Prose after it, load 0.9.", "the loader loads the batch; a 1-minute load (`uptime`)"]
    assert [n for n, _ in load_figures(text)] == [1, 2, 3, 4, 6, 7, 9]
    assert [n for n, _ in load_figures(text, machine_lines_allowed=True)] == [1, 2, 3, 4, 9]
