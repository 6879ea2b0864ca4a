"""The docs' code blocks fit the page: the built site does not cut off sample outputs.

Every code block of the pages a newcomer reads first (README, index, quickstart:
commands, code and the demo's sample output) is at most 88 columns; the site's
stylesheet wraps what is longer on any page instead of hiding it."""
import os
import re

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIDTH = 88
FIRST_PAGES = ["README.md", "docs/index.md", "docs/quickstart.md"]
_FENCE = re.compile(r"^\s*```\s*([\w+-]*)")


def _blocks(path):
    """``(language, first line number, lines)`` of each fenced block of a markdown file."""
    blocks, current = [], None
    with open(os.path.join(ROOT, path)) as f:
        for n, line in enumerate(f, 1):
            m = _FENCE.match(line)
            if m and current is None:
                current = (m.group(1), n + 1, [])
            elif m:
                blocks.append(current)
                current = None
            elif current is not None:
                current[2].append(line.rstrip("\n"))
    return blocks


def _too_long(path, languages=None):
    return [f"{path}:{start + i}: {len(line)} columns"
            for lang, start, lines in _blocks(path) if languages is None or lang in languages
            for i, line in enumerate(lines) if len(line) > WIDTH]


@pytest.mark.parametrize("page", FIRST_PAGES)
def test_first_pages_code_blocks_fit(page):
    assert _too_long(page) == []


def _pages():
    pages = ["README.md"]
    for root, _, files in os.walk(os.path.join(ROOT, "docs")):
        pages += [os.path.relpath(os.path.join(root, f), ROOT) for f in files if f.endswith(".md")]
    return sorted(pages)


@pytest.mark.parametrize("page", _pages())
def test_code_to_copy_fits_on_every_page(page):
    """Code a reader copies (python, bash) fits 88 columns on every page; sample
    outputs (text blocks) may be longer and are wrapped by the stylesheet."""
    assert _too_long(page, languages={"python", "bash", "sh", ""}) == []


def test_the_site_wraps_long_code_lines():
    with open(os.path.join(ROOT, "mkdocs.yml")) as f:
        config = yaml.safe_load(f)
    css = [os.path.join(ROOT, "docs", p) for p in config.get("extra_css", [])]
    assert css and all(os.path.isfile(p) for p in css)
    text = " ".join(open(p).read() for p in css)
    assert re.search(r"pre code\s*{[^}]*white-space:\s*pre-wrap", text)
