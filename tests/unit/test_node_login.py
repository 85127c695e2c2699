"""The MPI user's login as the node's own health check reproduces it without sshd
(remote/sshlogin.py), and what it reads for that user: pam_limits' lines computed over
real files, pam_env's file, the login's shell run for real (its startup file's lines
count), the node's listening sockets, the user's ssh files."""

from __future__ import annotations

import os
import pwd
import resource
import socket
from pathlib import Path

import pytest

from tests.shipped import load


@pytest.fixture(scope="module")
def login():
    return load("sshlogin")


@pytest.fixture(scope="module")
def limits():
    return load("loginlimits")


WHO = {"user": "mpi", "uid": 1001, "gid": 1001, "gids": [1001, 27], "groups": ["mpi", "sudo"]}
START = {"nofile": [1024, 524288], "memlock": [8 << 20, 8 << 20], "nproc": [3000, 3000]}


def computed(limits, tmp_path: Path, conf: str, *dropins: str) -> dict:
    (tmp_path / "limits.conf").write_text(conf)
    folder = tmp_path / "limits.d"
    folder.mkdir(exist_ok=True)
    for index, text in enumerate(dropins):
        (folder / f"{index:02d}-x.conf").write_text(text)
    patterns = (str(tmp_path / "limits.conf"), str(folder / "*.conf"))
    return limits.pam_limits(WHO, START, patterns)


def test_pam_limits_the_users_line_over_a_groups_over_anyones(limits, tmp_path):
    found = computed(
        limits,
        tmp_path,
        "*  soft  nofile  2048\n@sudo soft nofile 4096\nmpi soft nofile 8192\n"
        "other - nproc 10\n# mpi - nproc 1\n",
        "*  soft  nofile  100000\n",  # read later, but ranked below mpi's own line
    )
    assert found["nofile"] == [8192, 524288]
    assert found["nproc"] == [3000, 3000]  # another user's line, a comment: sshd's own
    assert found["memlock"] == [8 << 20, 8 << 20]


def test_pam_limits_among_equals_the_last_read_and_its_units(limits, tmp_path):
    found = computed(
        limits,
        tmp_path,
        "mpi - memlock 65536\nmpi hard nofile 4096\n",
        "mpi - memlock unlimited\n1000: soft nproc 500\n@:27 hard nproc 400\n",
    )
    assert found["memlock"] == [None, None]  # unlimited, read after the first line
    assert found["nofile"] == [1024, 4096]
    # a uid range ranks as the user's own line; a gid one as a group's: soft above the
    # hard limit is lowered to it, as pam_limits does
    assert found["nproc"] == [400, 400]
    ranged = computed(limits, _fresh(tmp_path, "b"), "@1000:1002 soft memlock 64\n")
    assert ranged["memlock"] == [64 * 1024, 8 << 20]
    nofile = computed(limits, _fresh(tmp_path, "c"), "mpi - nofile unlimited\n")
    ceiling = int(Path("/proc/sys/fs/nr_open").read_text())
    assert nofile["nofile"] == [ceiling, ceiling]


def _fresh(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    return folder


def test_a_process_limits_read_from_proc(limits):
    found = limits.proc_limits(os.getpid())
    for item, which in limits.ITEMS.items():
        soft, hard = resource.getrlimit(which)
        infinite = resource.RLIM_INFINITY
        assert found[item] == [
            None if soft == infinite else soft,
            None if hard == infinite else hard,
        ]
    assert limits.proc_limits(2**22 + 7) is None  # no such process


def test_pam_env_reads_its_files_literally(login, tmp_path):
    environment = tmp_path / "environment"
    environment.write_text(
        '# comment\nPATH="/opt/x/bin:/usr/bin"\nexport LANG=C.UTF-8\nODD=$HOME/bin\n'
        "PATH='/opt/y/bin:/usr/bin'\nnot an assignment\n"
    )
    found = login.pam_environment([str(environment), str(tmp_path / "missing")])
    assert found == {"PATH": "/opt/y/bin:/usr/bin", "LANG": "C.UTF-8", "ODD": "$HOME/bin"}


def me_at(home: Path, shell: str):
    me = pwd.getpwuid(os.getuid())
    return pwd.struct_passwd((me.pw_name, "x", me.pw_uid, me.pw_gid, "", str(home), shell))


def test_the_login_reads_bashrc_as_under_sshd_and_takes_the_session_limits(login, tmp_path):
    (tmp_path / ".bashrc").write_text(
        'export PATH="$HOME/bin:$PATH"\nexport PYTHONPATH=/somewhere\nulimit -Sn 700\n'
    )
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    session = {"nofile": [800, hard]}
    bash = me_at(tmp_path, "/bin/bash")
    environ = login.environment(bash, 2222, pam={"PATH": "/opt/stack/bin:/usr/bin:/bin"})
    assert environ["SSH_CLIENT"] == "127.0.0.1 0 2222" and "SHLVL" not in environ
    found = login.measure(bash, environ, session)
    assert found["env"]["PATH"] == f"{tmp_path}/bin:/opt/stack/bin:/usr/bin:/bin"
    assert found["env"]["PYTHONPATH"] == "/somewhere"
    assert found["limits"]["nofile"][0] == 700  # the session's, then the ulimit line
    plain = login.measure(me_at(tmp_path, "/bin/sh"), environ, session)
    assert plain["env"]["PATH"] == "/opt/stack/bin:/usr/bin:/bin"  # sh reads no bashrc
    assert plain["limits"]["nofile"][0] == 800
    assert "PYTHONPATH" not in plain["env"]


def test_a_login_that_fails_or_hangs_is_an_error(login, tmp_path):
    (tmp_path / ".bashrc").write_text("exit 3\n")
    bash = me_at(tmp_path, "/bin/bash")
    found = login.measure(bash, login.environment(bash, 22, pam={}))
    assert found == {"error": "/bin/bash -c exited 3: no output"}
    (tmp_path / ".bashrc").write_text("sleep 5\n")
    slow = login.measure(bash, login.environment(bash, 22, pam={}), timeout=0.5)
    assert slow == {"error": "/bin/bash -c did not finish in 0.5 s"}


def test_listening_reads_the_kernels_sockets():
    facts = load("accessfacts")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    port = server.getsockname()[1]
    assert facts.listening(port) == {"port": port, "listening": False}
    server.listen(1)
    try:
        assert facts.listening(port) == {"port": port, "listening": True}
    finally:
        server.close()


def test_the_users_ssh_files_read_in_their_home(tmp_path):
    facts = load("accessfacts")
    assert facts.trust("t", str(tmp_path))["key"] is False
    ssh = tmp_path / ".ssh"
    ssh.mkdir()
    (ssh / "mpicluster_t").write_text("private")
    (ssh / "authorized_keys").write_text("ssh-ed25519 AAAAC3Nz other\n")
    found = facts.trust("t", str(tmp_path))
    assert (found["key"], found["authorized"], found["home"]) == (True, False, str(tmp_path))
    (ssh / "authorized_keys").write_text('from="10.0.0.1" ssh-ed25519 AAAAC3Nz mpicluster:t\n')
    found = facts.trust("t", str(tmp_path))
    assert (found["authorized"], found["authorized_from"]) == (True, ["10.0.0.1"])
    me = pwd.getpwuid(os.getuid())
    mine = facts.login("t", me.pw_name)
    assert (mine["user"], mine["uid"]) == (me.pw_name, me.pw_uid)
    assert [p["path"] for p in mine["paths"]] == [
        me.pw_dir,
        f"{me.pw_dir}/.ssh",
        f"{me.pw_dir}/.ssh/authorized_keys",
    ]
