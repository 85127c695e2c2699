"""The real probe program, run here through the same bootstrap doctor uses on nodes.

This machine stands in for a node: the conversation (script over stdin, JSON lines
both ways), the facts' shape, the TCP listener and the peer connects are all real.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from mpicluster.doctor.session import BOOTSTRAP, probe_script


def start(spec: dict) -> subprocess.Popen:
    script = probe_script()
    process = subprocess.Popen(
        [sys.executable, "-c", BOOTSTRAP, str(len(script))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdin is not None
    process.stdin.write(script + json.dumps({"spec": spec}).encode() + b"\n")
    process.stdin.flush()
    return process


def spec(**extra) -> dict:
    return {
        "cluster": "t",
        "token": "abc123",
        "deadline": 60,
        "listen": True,
        "names": ["localhost", "no-such-host.invalid"],
        "gpus": 0,
        "files": ["/etc/hostname", "/nonexistent/hostfile"],
        "resolve_timeout": 5,
        "layout": {
            "prefix": "/nonexistent/mpicluster",
            "install": "source",
            "mpi_bin": "/nonexistent/mpicluster/current/bin",
            "mpi_lib": "/nonexistent/mpicluster/current/lib",
            "python": "/nonexistent/mpicluster/current/venv/bin/python",
            "environment_file": "/etc/environment",
            "cuda_home": None,
        },
        **extra,
    }


def read(process: subprocess.Popen) -> dict:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, process.stderr.read().decode() if process.stderr else ""
    return json.loads(line)


def test_probe_conversation_facts_listener_and_peers():
    process = start(spec())
    try:
        facts = read(process)
        assert facts["kind"] == "facts"
        assert facts["resolve"]["localhost"]["addresses"][0].startswith("127.")
        assert "error" in facts["resolve"]["no-such-host.invalid"]
        assert facts["files"]["/nonexistent/hostfile"] is None
        assert facts["versions"]["fingerprint"] is None
        assert facts["disk"]["install"]["measured"] == "/"
        assert facts["disk"]["tmp"]["free"] > 0
        assert "lo" in facts["interfaces"]
        assert facts["neighbour"] == _neighbour_limits()
        assert facts["ssh"]["key"] is False and facts["gpus"] is None
        # no RDMA device here and no Open MPI at the layout's bin: nothing looked up
        assert facts["fabric"] == {"devices": [], "mpi": None, "verbs": None, "nccl_plugins": None}
        port = facts["port"]
        assert isinstance(port, int) and port > 1023

        peers = {
            "peers": {
                "ssh": [],
                "tcp": [
                    {"name": "self", "address": "127.0.0.1", "port": port},
                    {"name": "closed", "address": "127.0.0.1", "port": 1},
                ],
                "budget": 30,
                "ssh_timeout": 5,
                "tcp_timeout": 3,
            }
        }
        assert process.stdin is not None
        process.stdin.write(json.dumps(peers).encode() + b"\n")
        process.stdin.flush()
        assert read(process)["kind"] == "clock"
        result = read(process)
        assert result["kind"] == "pairs"
        tcp = {item["peer"]: item for item in result["tcp"]}
        assert tcp["self"]["ok"] is True  # our own listener answered with the token
        assert tcp["closed"]["ok"] is False and "refused" in tcp["closed"]["error"].lower()
        process.stdin.close()  # end of input: the listener closes and the probe exits
        assert process.wait(timeout=10) == 0
    finally:
        process.kill()


def test_probe_watchdog_ends_a_forgotten_probe():
    process = start(spec(deadline=2, listen=False))
    try:
        assert read(process)["kind"] == "facts"
        # control never answers: the watchdog must end it anyway
        assert process.wait(timeout=20) == 3
    finally:
        process.kill()


def _neighbour_limits():
    folder = Path("/proc/sys/net/ipv4/neigh/default")
    if not folder.is_dir():
        return None  # a network namespace that hides the table
    return {k: int((folder / k).read_text()) for k in ("gc_thresh1", "gc_thresh2", "gc_thresh3")}


def test_probe_launches_report_output_exit_codes_and_end_a_hang_with_its_group(tmp_path):
    """The launch message: each argv run with stdin from /dev/null (the probe's stdin is
    the conversation), output and exit code back; one past its timeout is a hang, and
    its whole process group is gone after (here a shell and the sleep it started)."""
    process = start(spec(listen=False))
    assert read(process)["kind"] == "facts"
    pidfile = tmp_path / "sleep.pid"
    items = [
        {
            "id": 0,
            "argv": [sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"],
            "timeout": 10,
        },
        {"id": 1, "argv": ["sh", "-c", "echo failing >&2; exit 3"], "timeout": 10},
        {"id": 2, "argv": ["sh", "-c", f"sleep 300 & echo $! > {pidfile}; wait"], "timeout": 4},
        {"id": 3, "argv": ["/nonexistent/mpirun"], "timeout": 10},
    ]
    message = {"launch": {"items": items, "workers": 4, "budget": 30}}
    assert process.stdin is not None
    process.stdin.write(json.dumps(message).encode() + b"\n")
    process.stdin.flush()
    answer = read(process)
    assert answer["kind"] == "launched"
    results = {r["id"]: r for r in answer["results"]}
    assert (results[0]["rc"], results[0]["output"].strip()) == (0, "''")  # stdin: /dev/null
    assert (results[1]["rc"], results[1]["output"].strip()) == (3, "failing")
    assert results[2]["hung"] and results[2]["rc"] is not None and results[2]["rc"] < 0
    sleeper = int(pidfile.read_text())

    def gone() -> bool:  # killed: gone, or a zombie (its parent, init here, reaps later)
        try:
            return "Z" in Path(f"/proc/{sleeper}/stat").read_text().split()[2]
        except FileNotFoundError:
            return True

    # SIGKILL is delivered at once but a loaded machine may take a moment to end it
    deadline = time.monotonic() + 5
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone()
    assert results[3]["rc"] is None and "No such file" in results[3]["output"]
    process.stdin.close()
    assert process.wait(10) == 0
