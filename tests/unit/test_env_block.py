"""The /etc/environment block: literal values, other lines byte for byte, idempotent."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from mpicluster import remote
from mpicluster.remote.plugins.module_utils import mpicluster_envblock as env

REPO = Path(__file__).resolve().parents[2]


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, remote.MODULES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


resolve = _module("mpicluster_resolve")
BEGIN, END = "# BEGIN mpicluster (test)", "# END mpicluster"
DEFAULT = ["/usr/local/bin", "/usr/bin", "/bin"]


def render(text, prepend=("/opt/m/current/bin",), libs=("/opt/m/current/lib",), variables=None):
    return env.render(text, BEGIN, END, list(prepend), list(libs), variables or {}, DEFAULT)


def test_block_is_appended_and_other_lines_kept_byte_for_byte():
    original = 'LANG="C.UTF-8"\r\n# a comment with $HOME\nFOO=bar'  # CRLF, no final newline
    out = render(original)
    assert out.startswith(original + "\n")
    block = out[len(original) + 1 :]
    assert block == (
        f"{BEGIN}\n"
        'PATH="/opt/m/current/bin:/usr/local/bin:/usr/bin:/bin"\n'
        'LD_LIBRARY_PATH="/opt/m/current/lib"\n'
        f"{END}\n"
    )


def test_second_render_changes_nothing():
    first = render("A=1\n")
    assert render(first) == first


def test_existing_path_outside_the_block_is_kept_and_extended():
    original = 'PATH="/custom/bin:/usr/bin:/bin"\nZ=1\n'
    out = render(original)
    assert out.startswith(original)
    assert 'PATH="/opt/m/current/bin:/custom/bin:/usr/bin:/bin"' in out
    assert render(out) == out


def test_block_is_rewritten_in_place_between_other_lines():
    before, after = "A=1\n", "B=2\n"
    old = f'{before}{BEGIN}\nPATH="/old"\nJUNK=1\n{END}\n{after}'
    out = render(old)
    assert out.startswith(before + BEGIN)
    assert out.endswith(END + "\n" + after)
    assert "/old" not in out and "JUNK" not in out


def test_values_with_dollar_are_dropped_or_refused():
    out = render('PATH="$PATH:/x"\n')  # pam_env would not expand it: drop the $ item
    assert 'PATH="/opt/m/current/bin:/x"' in out
    with pytest.raises(ValueError, match="literal"):
        render("", variables={"OMPI_MCA_x": "$HOME"})


def test_variables_are_sorted_and_literal():
    out = render("", prepend=(), libs=(), variables={"Z": "1", "A": "192.168.0.0/24"})
    assert out.splitlines()[1:4] == [
        'PATH="/usr/local/bin:/usr/bin:/bin"',
        'A="192.168.0.0/24"',
        'Z="1"',
    ]


def test_resolution_ignores_our_own_block():
    hosts = f"{BEGIN}\n10.0.0.2 n2\n{END}\n127.0.1.1 n1\n10.0.0.3 n3 n3.example\n"
    mapping = resolve.hosts_outside_block(hosts, BEGIN, END)
    assert mapping == {"n1": "127.0.1.1", "n3": "10.0.0.3", "n3.example": "10.0.0.3"}
    wanted = {"n1": "10.0.0.1", "n2": "10.0.0.2", "n3": "10.0.0.3", "n4": "10.0.0.4"}
    dns = {"n4": ["10.0.0.4"]}
    wrong = resolve.needed(wanted, mapping, resolver=lambda name: dns.get(name, []))
    assert wrong == {"n1": ("10.0.0.1", "127.0.1.1"), "n2": ("10.0.0.2", None)}
