"""The version lives in two places that must agree: setup.cfg (read by pip without
importing the package, whose import needs torch) and ``graph_adapter.__version__``
(``graph-adapter --version``); CHANGELOG.md has a section for it."""
import configparser
import os
import re

import graph_adapter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_setup_cfg_and_the_package_name_one_version():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    assert cfg["metadata"]["version"] == graph_adapter.__version__


def test_the_changelog_has_a_section_for_this_version():
    text = open(os.path.join(ROOT, "CHANGELOG.md")).read()
    assert re.search(rf"^## \[{re.escape(graph_adapter.__version__)}\] - \d{{4}}-\d\d-\d\d$",
                     text, re.M), f"CHANGELOG.md has no '## [{graph_adapter.__version__}] - date'"
