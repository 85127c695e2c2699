"""What the inventory's `users:` cost `up`: N users (default 10) on a 3-node local cluster.

Brings up the local cluster `bench-users` (Podman nodes, 192.168.61.0/24, Debian's
Open MPI: `install: packages`), provisions it without users, then times:

  - `up --full --no-smoke` without users (every task, the baseline);
  - the `up` that adds the N users (accounts, their keys, a node key pair each on every
    node, their ssh config and known hosts), with its smoke test;
  - `up --full --no-smoke` with the N users (what the users' tasks add to a full run);
  - a no-op `up` with them (the fast path);
  - doctor's users check (each user's account on every node, then one launch as each);

and prints each, with the users' share per user. Tears the cluster down unless --keep.

    .venv/bin/python benchmarks/up_users.py [--users 10] [--nodes 3] [--keep]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest import mpicluster  # noqa: E402

NAME, SUBNET = "bench-users", "192.168.61.0/24"


def timed(*args: str) -> float:
    started = time.monotonic()
    done = mpicluster(*args, check=False, timeout=3600)
    if done.returncode != 0:
        said = done.stdout[-3000:] + done.stderr[-2000:]
        raise SystemExit(f"mpicluster {' '.join(args)} failed: {said}")
    return time.monotonic() - started


def people(folder: Path, count: int) -> list[dict]:
    """`count` users, each with a key made here (the public half in the inventory)."""
    users = []
    for index in range(count):
        name = f"user{index:02d}"
        key = folder / name
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        users.append({"name": name, "keys": [f"{key}.pub"]})
    return users


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-users-"))
    generated = work / "generated.yaml"
    mpicluster("local", "down", "--name", NAME, check=False)
    mpicluster(
        "local", "up", "--name", NAME, "--count", str(args.nodes), "--subnet", SUBNET,
        "--inventory", str(generated), timeout=1800,
    )  # fmt: skip
    try:
        data = yaml.safe_load(generated.read_text())
        data["stack"] = {"install": "packages"}
        bare, with_users = work / "bare.yaml", work / "users.yaml"
        bare.write_text(yaml.safe_dump(data, sort_keys=False))
        data["users"] = people(work, args.users)
        with_users.write_text(yaml.safe_dump(data, sort_keys=False))
        timed("up", str(bare))
        base = timed("up", str(bare), "--full", "--no-smoke")
        added = timed("up", str(with_users))
        full = timed("up", str(with_users), "--full", "--no-smoke")
        noop = timed("up", str(with_users))
        check = timed("doctor", str(with_users), "--check", "users")
    finally:
        if not args.keep:
            mpicluster("local", "down", "--name", NAME, check=False)
    each = (full - base) / args.users
    print(f"`up` with {args.users} users on {args.nodes} local nodes (Debian's Open MPI)")
    print(f"  full run without users:   {base:6.1f} s")
    print(f"  the up that adds them:    {added:6.1f} s (with its smoke test)")
    print(f"  full run with them:       {full:6.1f} s (+{full - base:.1f} s, {each:.2f} s a user)")
    print(f"  no-op up with them:       {noop:6.1f} s")
    print(f"  doctor --check users:     {check:6.1f} s (a launch as each user)")


if __name__ == "__main__":
    main()
