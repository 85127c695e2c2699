"""From this node, ssh to every peer in a non-interactive shell and report what it sees.

Sent over the control connection (`python3 - SPEC_JSON`: the peers in the order to
try them, the timeout, how many logins at once), stdlib only (and nodeinfo, which
remote.script sends with it). For each peer it prints
PATH, LD_LIBRARY_PATH and `command -v mpirun` as the peer's non-interactive shell has
them, which is exactly what mpirun's ssh launch gets.
"""

import json
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from nodeinfo import ssh_dropped

REMOTE = (
    'printf "HOSTNAME=%s\\n" "$(hostname)"; printf "PATH=%s\\n" "$PATH"; '
    'printf "LD_LIBRARY_PATH=%s\\n" "${LD_LIBRARY_PATH-}"; '
    'printf "MPIRUN=%s\\n" "$(command -v mpirun)"'
)


def probe(peer, timeout, attempts=2):
    # A fresh connection (no ControlMaster reuse): a multiplexed session would show the
    # environment of the connection's first login, not what a new login gets now.
    ssh = shutil.which("ssh") or "/usr/bin/ssh"
    argv = [
        ssh,
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={timeout}",
        "-o",
        "ControlMaster=no",
        "-o",
        "ControlPath=none",
        peer,
        REMOTE,
    ]
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout + 20,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return {"peer": peer, "rc": None, "stderr": "timed out", "env": {}}
    if attempts > 1 and ssh_dropped(done.returncode, done.stderr):
        time.sleep(0.2)  # a burst sshd dropped: once more
        return probe(peer, timeout, attempts - 1)
    env = {}
    for line in done.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            env[key] = value
    return {"peer": peer, "rc": done.returncode, "stderr": done.stderr.strip()[-400:], "env": env}


def main():
    spec = json.loads(sys.argv[1])
    workers = min(spec.get("workers", 4), max(1, len(spec["peers"])))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda p: probe(p, spec["timeout"]), spec["peers"]))
    sys.stdout.write(json.dumps(results) + "\n")


if __name__ == "__main__":
    main()
