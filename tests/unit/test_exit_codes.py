"""One exit-code table for every command (mpicluster/util/exitcodes.py): each code one
meaning, the docs' table the same (docs/exit-codes.md); each command's help naming only
its codes is tests/unit/test_cli_help.py's."""

from __future__ import annotations

import re
from pathlib import Path

from mpicluster.util import exitcodes

REPO = Path(__file__).resolve().parents[2]


def named_codes() -> dict[str, int]:
    return {
        name: value
        for name, value in vars(exitcodes).items()
        if name.isupper() and isinstance(value, int)
    }


def test_no_code_has_two_names_or_two_meanings():
    names = named_codes()
    assert len(set(names.values())) == len(names), names
    assert set(names.values()) == set(exitcodes.TABLE)
    meanings = list(exitcodes.TABLE.values())
    assert len(set(meanings)) == len(meanings)


def test_the_table_is_the_one_the_issue_asked_for():
    assert named_codes() == {
        "OK": 0,
        "FAILED": 1,
        "USAGE": 2,
        "HOSTS_FAILED": 3,
        "HOSTS_UNREACHABLE": 4,
        "CHECK_FAILED": 5,
        "WARNINGS": 6,
        "HANG_TIMEOUT": 124,
        "INTERRUPTED": 130,
    }


def test_the_docs_page_lists_the_same_codes():
    text = (REPO / "docs" / "exit-codes.md").read_text()
    rows = re.findall(r"^\| (\d+) \| `(\w+)` \|", text, re.MULTILINE)
    assert [int(code) for code, _ in rows] == sorted(exitcodes.TABLE)
    assert {name: int(code) for code, name in rows} == named_codes()


def test_only_exitcodes_names_a_code_in_the_core():
    """Exit codes are decided by name (exitcodes.CHECK_FAILED), never a bare number, in
    the modules that raise typer.Exit or set an error's exit_code."""
    bare = re.compile(r"(typer\.Exit\(\d|exit_code=\d|exit_code = \d)")
    offenders = [
        str(path.relative_to(REPO))
        for path in (REPO / "mpicluster").rglob("*.py")
        if "remote" not in path.parts and bare.search(path.read_text())
    ]
    assert offenders == []
