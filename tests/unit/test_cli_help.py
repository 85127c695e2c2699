"""Every command's help, as a real process prints it: `-h` works as `--help` does, names
instead of type markers, whole summaries in the root listing, the few-valued options'
choices, and examples."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

COMMANDS = [
    [],
    ["validate"],
    ["up"],
    ["down"],
    ["smoke"],
    ["fetch"],
    ["hostfile"],
    ["doctor"],
    ["bench"],
    ["nodes"],
    ["cordon"],
    ["uncordon"],
    ["run"],
    ["jobs"],
    ["logs"],
    ["stop"],
    ["collect"],
    ["local"],
    ["local", "up"],
    ["local", "down"],
    ["local", "status"],
]
#: What typer writes for a type, where a name belongs.
MARKERS = re.compile(r"<(list\[|int|float|path|text|str|bool)|\{")
#: Each few-valued option, by the command that has it, with its values.
CHOICES = {
    ("hostfile",): ("--format", ["openmpi", "mpich", "horovod", "deepspeed"]),
    ("run",): ("--launcher", ["mpirun", "torchrun"]),
    ("collect",): ("--collect-from", ["all", "head"]),
    ("local", "up"): ("--provider", ["docker", "libvirt", "virtualbox"]),
}


def helped(args: list[str], flag: str = "-h") -> str:
    done = subprocess.run(
        [sys.executable, "-m", "mpicluster", *args, flag],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "80"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


@pytest.fixture(scope="module")
def helps() -> dict[tuple[str, ...], str]:
    return {tuple(args): helped(args) for args in COMMANDS}


def test_every_command_is_listed():
    """COMMANDS above is every command the root and `local` list."""
    listed = {(name,) for name in commands_of(helped([]))}
    listed |= {("local", name) for name in commands_of(helped(["local"]))}
    assert listed | {()} == {tuple(args) for args in COMMANDS}


def commands_of(text: str) -> list[str]:
    section = text.split("Commands:\n", 1)[1].split("\n\n", 1)[0]
    return [m.group(1) for m in re.finditer(r"^  (\S+)  ", section, re.MULTILINE)]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a) or "root")
def test_dash_h_is_help(args, helps):
    text = helps[tuple(args)]
    assert text.startswith("Usage: ")
    assert "-h, --help" in text
    assert text == helped(args, "--help")


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a) or "root")
def test_no_type_markers(args, helps):
    text = helps[tuple(args)]
    assert not MARKERS.search(text), MARKERS.search(text)
    usage = text.splitlines()[0]
    assert "[OPTIONS]" in usage
    if args in (["cordon"], ["uncordon"], ["logs"]):
        assert usage.endswith(("INVENTORY NODE", "INVENTORY JOB"))


@pytest.mark.parametrize("args", COMMANDS[1:], ids=lambda a: " ".join(a))
def test_each_command_has_examples(args, helps):
    text = helps[tuple(args)]
    if args == ["local"]:
        return  # a group: its commands have them
    examples = text.split("Examples:\n", 1)[1].splitlines()
    assert examples and all(line.startswith("    mpicluster ") for line in examples if line)
    assert all(" ".join(args) in line for line in examples if line)
    if args[0] != "local":
        assert any("inventories/" in line for line in examples)


def test_the_root_lists_whole_summaries(helps):
    for name, summary in summaries(helps[()]).items():
        assert not summary.endswith("..."), name
        assert summary.endswith("."), (name, summary)
    assert len(summaries(helps[()])) == len(COMMANDS) - 4  # root, local's three


def summaries(text: str) -> dict[str, str]:
    """Each listed command's summary, its wrapped lines joined."""
    section = text.split("Commands:\n", 1)[1].split("\n\n", 1)[0]
    found: dict[str, str] = {}
    name = ""
    for line in section.splitlines():
        match = re.match(r"^  (\S+)\s+(.*)$", line)
        if match:
            name, found[match.group(1)] = match.group(1), match.group(2)
        else:
            found[name] += " " + line.strip()
    return found


@pytest.mark.parametrize("args", list(CHOICES), ids=" ".join)
def test_few_valued_options_show_their_choices(args, helps):
    option, values = CHOICES[args]
    text = helps[args]
    assert f"{option} [{'|'.join(values)}]" in text


def test_via_shows_its_choices(helps):
    assert "--via [mpirun|slurm]" in helps[("run",)]


def test_run_passes_h_after_the_dashes_to_its_program(tmp_path):
    """-h after `--` belongs to the program: run goes on to read its inventory."""
    done = subprocess.run(
        [sys.executable, "-m", "mpicluster", "run", str(tmp_path / "no.yaml"), "--", "ls", "-h"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 2
    assert "no such file" in done.stderr
    assert "Usage:" not in done.stdout


#: Each command that chooses nodes, with its option as help shows it, and the old
#: names help must not show (they still work: tests/unit/test_cli_names.py).
NODE_OPTIONS = {
    ("run",): ("--nodes NODE,...", ["--hosts"]),
    ("bench",): ("--nodes NODE,...", []),
    ("down",): ("--nodes NODE", ["--node "]),
    ("local", "up"): ("--count N", ["--nodes"]),
}


@pytest.mark.parametrize("args", list(NODE_OPTIONS), ids=" ".join)
def test_help_shows_the_new_names_not_the_old(args, helps):
    shown, hidden = NODE_OPTIONS[args]
    text = helps[args]
    assert shown in text
    for old in hidden:
        assert old not in text, old


def exit_paragraph(text: str) -> str:
    """The help's "Exit code(s)" paragraph, its wrapped lines joined."""
    found = re.search(r"^  Exit codes?\b(.*?)(?:\n\n|\Z)", text, re.MULTILINE | re.DOTALL)
    return " ".join(found.group(0).split()) if found else ""


@pytest.mark.parametrize("args", COMMANDS[1:], ids=lambda a: " ".join(a))
def test_each_command_says_its_exit_codes_from_the_one_table(args, helps):
    from mpicluster.util.exitcodes import TABLE

    if args == ["local"]:
        return  # a group: its commands say theirs
    said = exit_paragraph(helps[tuple(args)])
    assert said, f"{args}: no 'Exit codes:' paragraph"
    codes = {int(code) for code in re.findall(r"(?<![\w-])(\d+)(?![\w-])", said)}
    assert 0 in codes and 2 in codes, said
    assert codes <= set(TABLE), (said, codes - set(TABLE))
