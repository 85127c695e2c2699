"""CI proves the README: .ci/run brings a fresh machine to README.md's starting point and
runs README.md's test command, nothing else. Every package it installs is one the README
tells a new user to have, or one `make test` installs by itself (tests/host_packages.py)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from mpicluster.local.host import missing_packages
from tests.host_packages import PACKAGES, TEST_PACKAGES

REPO = Path(__file__).resolve().parents[2]


def commands(script: str) -> list[list[str]]:
    """The script's commands as words: comments dropped, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", script)
    lines = (line.split("#", 1)[0].strip() for line in joined.splitlines()[1:])
    return [shlex.split(line) for line in lines if line]


def installed(words: list[str]) -> list[str]:
    """The packages of an `apt-get install` command (its options and redirections left out)."""
    return [w for w in words[2:] if not w.startswith(("-", ">", "2>"))]


def readme_starting_point() -> set[str]:
    """The packages README.md's set-up tells a new user to have before its two commands."""
    setup = (REPO / "README.md").read_text().split("## Set-up", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"`apt-get install ([a-z0-9. +-]+)`", setup.replace("\n", " "))
    assert len(found) == 1, "README.md's set-up names its starting point in one apt-get line"
    return set(found[0].split())


def test_ci_installs_only_the_readme_starting_point_then_runs_make_test():
    steps = commands((REPO / ".ci/run").read_text())
    apt = [installed(w) for w in steps if w[:2] == ["apt-get", "install"]]
    packages = {pkg for line in apt for pkg in line}
    start = readme_starting_point()
    assert packages - start - set(PACKAGES) == set(), "installed by CI, promised by nobody"
    assert packages == start, "CI installs the README's starting point, no more, no less"
    makes = [w for w in steps if w[0] == "make"]
    assert makes == [["make", "test"]]
    # nothing between the set-up and the README's test command but its timing
    allowed = {"set", "cd", "export", "apt-get", "make", "echo"}
    assert {w[0] for w in steps if not w[0].startswith("started=")} <= allowed


def test_the_starting_point_is_a_minimal_machine_not_a_second_list_of_test_packages():
    assert readme_starting_point() == {"git", "make", "python3"}
    assert not readme_starting_point() & set(PACKAGES)


def test_the_readme_test_command_installs_the_packages_first():
    makefile = (REPO / "Makefile").read_text()
    (test_rule,) = re.findall(r"^test: (.*)$", makefile, re.M)
    assert test_rule.split()[0] == "host-packages"
    assert "python -m tests.host_packages" in makefile


def test_every_package_names_a_file_it_provides_and_the_check_reads_it(tmp_path):
    assert all(path.startswith("/") for path in TEST_PACKAGES.values())
    here, gone = tmp_path / "here", tmp_path / "gone"
    here.touch()
    assert missing_packages({"a": str(here), "b": str(gone)}) == ["b"]
    assert missing_packages({"sh": "sh", "nope": "no-such-command-here"}) == ["nope"]
