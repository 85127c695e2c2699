"""README.md is the way in on GitHub and the site's home page (docs/hooks/readme_home.py):
its links work in both, and the Python it names for the control machine is the one
pyproject.toml requires and `make` checks for."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def hook():
    spec = importlib.util.spec_from_file_location(
        "readme_home", REPO / "docs" / "hooks" / "readme_home.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_relative_link_of_the_readme_is_a_file_of_the_repository():
    targets = [t for _, t in re.findall(r"\[([^\]\n]+)\]\(([^)\s]+)\)", README)]
    local = [t.split("#", 1)[0] for t in targets if not t.startswith(("http", "#"))]
    assert local, "README links the docs"
    assert [t for t in local if not (REPO / t).exists()] == []


def test_the_site_links_the_docs_pages_and_leaves_other_files_as_text():
    site = hook().site_markdown(
        "[the inventory](docs/inventory.md), [users](docs/inventory.md#users), "
        "[tests/host_packages.py](tests/host_packages.py), [pipx](https://pipx.pypa.io), "
        "[below](#install), `[not a link]`"
    )
    assert site == (
        "[the inventory](inventory.md), [users](inventory.md#users), "
        "tests/host_packages.py, [pipx](https://pipx.pypa.io), [below](#install), "
        "`[not a link]`"
    )


def test_the_site_has_no_second_copy_of_the_readme():
    assert not (REPO / "docs" / "index.md").exists()
    assert "docs/hooks/readme_home.py" in (REPO / "mkdocs.yml").read_text()


def test_the_control_machines_python_is_the_one_pyproject_requires():
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == ">=3.11"
    install = " ".join(README.split("## Install", 1)[1].split("\n## ", 1)[0].split())
    assert "Linux with **Python 3.11 or newer**" in install
    script = (REPO / "scripts" / "ensure-python-venv.sh").read_text()
    assert "sys.version_info < (3, 11)" in script
