"""How `mpicluster doctor` fans out: 4, 16 and 32 nodes, against `ansible all -m ping`.

Brings up the local cluster `bench` (32 Podman nodes, 192.168.66.0/24) once,
provisions it with `mpicluster up` (install: packages) so that doctor checks a
healthy cluster (a real ssh login for every node pair, not an early refusal), then
times on the first 4, 16 and all 32 nodes, in one run and interleaved:

  - `mpicluster doctor INVENTORY --json` (every check with its defaults: above 8 nodes
    the mesh logs in on a ring and a sample of 4 peers per node and judges every other
    pair from facts; the launch proof);
  - the same with `--all-pairs` (N*(N-1) ssh logins), to show what the sample saves;
  - `mpicluster doctor` with every check but the node-to-node mesh and the launches;
  - `ansible all -m ping` on the same hosts, with the files `mpicluster up` would
    use (strict host key checking, forks = nodes) and a fresh ControlPath each run.

Prints the median of --repeat runs per cell and the two ratios the issue sets goals
for: doctor@32 / ansible@32 (goal: <= 0.5) and doctor@32 / doctor@4 (goal: <= 2.5).
Tears the cluster down at the end unless --keep.

    .venv/bin/python benchmarks/doctor_fanout.py [--repeat 3] [--keep] [--no-up]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mpicluster.doctor import select_checks  # noqa: E402
from mpicluster.nodes import pairs as pair_plan  # noqa: E402

NAME, SUBNET, NODES = "bench", "192.168.66.0/24", 32
SIZES = (4, 16, 32)
#: every check but the mesh, the hostfile and the launch (what they add is timed apart)
NO_MESH = [n for n in select_checks(None) if n not in ("mesh", "hostfile", "launch")]


def run(argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 3600):
    started = time.monotonic()
    done = subprocess.run(
        argv,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    return time.monotonic() - started, done


def mpicluster(*args: str, attempts: int = 1) -> None:
    for attempt in range(1, attempts + 1):
        seconds, done = run([sys.executable, "-m", "mpicluster", *args])
        print(f"  mpicluster {args[0]} {args[1]}: {seconds:.0f} s", file=sys.stderr)
        if done.returncode == 0:
            return
        sys.stderr.write(done.stdout[-2000:] + done.stderr[-2000:])
        if attempt == attempts:
            raise SystemExit(f"mpicluster {' '.join(args)} failed ({done.returncode})")


def sub_inventory(full: dict, count: int, path: Path) -> Path:
    data = dict(full)
    data["nodes"] = full["nodes"][:count]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def time_doctor(
    inventory: Path, checks: list[str] | None = None, *extra: str
) -> tuple[float, dict]:
    argv = [sys.executable, "-m", "mpicluster", "doctor", str(inventory), "--json", *extra]
    for name in checks or []:
        argv += ["--check", name]
    seconds, done = run(argv)
    if done.returncode not in (0, 5, 6) or not done.stdout.strip():  # a report
        sys.stderr.write(done.stderr[-3000:])
        raise SystemExit(f"doctor on {inventory} failed ({done.returncode})")
    return seconds, json.loads(done.stdout)


def ansible_files(inventory: Path, work: Path) -> tuple[Path, Path]:
    from mpicluster.cluster.plan import ClusterPlan
    from mpicluster.nodes.ansible_run import prepare_run

    plan = ClusterPlan.load(inventory)
    run_dir, _ = prepare_run(work, "ping", plan, {}, {}, "site.yml")
    return run_dir / "hosts.yml", run_dir / "ansible.cfg"


def time_ansible(hosts: Path, config: Path, count: int) -> float:
    # a fresh ControlPath folder each run (no warm masters), short: sockets need < 108 bytes
    control = Path(tempfile.mkdtemp(prefix="mpicluster-cp-", dir="/tmp"))
    ansible = str(Path(sys.executable).parent / "ansible")
    seconds, done = run(
        [ansible, "all", "-i", str(hosts), "-m", "ping"],
        env={"ANSIBLE_CONFIG": str(config), "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control)},
    )
    pongs = done.stdout.count('"ping": "pong"')
    if done.returncode != 0 or pongs != count:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-2000:])
        raise SystemExit(f"ansible ping failed ({done.returncode}, {pongs}/{count} pong)")
    _stop_masters(control)
    shutil.rmtree(control, ignore_errors=True)
    return seconds


def _stop_masters(control: Path) -> None:
    for socket_path in control.glob("*"):
        subprocess.run(
            ["ssh", "-o", f"ControlPath={socket_path}", "-O", "exit", "x"],
            capture_output=True,
            check=False,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per cell (median shown)")
    parser.add_argument("--keep", action="store_true", help="leave the bench cluster up")
    parser.add_argument("--no-up", action="store_true", help="reuse a running bench cluster")
    parser.add_argument("--work", help="folder for inventories (default: a temporary one)")
    options = parser.parse_args()
    work = Path(options.work or tempfile.mkdtemp(prefix="mpicluster-doctor-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    generated = work / "generated.yaml"
    try:
        if not options.no_up:
            print(f"Bringing up {NODES} nodes and provisioning them (once)", file=sys.stderr)
            subprocess.run(
                [sys.executable, "-m", "mpicluster", "local", "down", "--name", NAME],
                cwd=REPO,
                capture_output=True,
                check=False,
            )
        mpicluster(
            "local",
            "up",
            "--name",
            NAME,
            "--count",
            str(NODES),
            "--subnet",
            SUBNET,
            "--inventory",
            str(generated),
            # right after 32 nodes boot, local up's own reachability probe can catch a
            # node before its address is configured; a second local up finds it ready
            attempts=3,
        )
        full = yaml.safe_load(generated.read_text())
        full["stack"] = {"install": "packages"}
        inventories = {n: sub_inventory(full, n, work / f"bench{n}.yaml") for n in SIZES}
        if not options.no_up:
            mpicluster("up", str(inventories[NODES]), "--no-smoke")
        ansible = {n: ansible_files(inventories[n], work / f"ansible{n}") for n in SIZES}
        cells: dict[tuple[str, int], list[float]] = {}
        codes: dict[int, set[int]] = {}
        for round_ in range(options.repeat):
            for n in SIZES:
                seconds, report = time_doctor(inventories[n])
                cells.setdefault(("doctor", n), []).append(seconds)
                codes.setdefault(n, set()).add(report["summary"]["fail"])
                seconds, _ = time_doctor(inventories[n], None, "--all-pairs")
                cells.setdefault(("doctor, all pairs", n), []).append(seconds)
                seconds, _ = time_doctor(inventories[n], NO_MESH)
                cells.setdefault(("doctor, no mesh", n), []).append(seconds)
                cells.setdefault(("ansible ping", n), []).append(time_ansible(*ansible[n], n))
            print(f"  round {round_ + 1}/{options.repeat} done", file=sys.stderr)
    finally:
        if not options.keep:
            subprocess.run(
                [sys.executable, "-m", "mpicluster", "local", "down", "--name", NAME],
                cwd=REPO,
                capture_output=True,
                check=False,
            )
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept: the bench cluster and {work}", file=sys.stderr)
    median = {key: statistics.median(values) for key, values in cells.items()}
    cpus = os.cpu_count()
    print(f"doctor fan-out, median of {options.repeat} run(s), wall seconds ({cpus} CPUs)")
    print(f"{'':<18}" + "".join(f"{n:>4} nodes" for n in SIZES))
    for label in ("doctor", "doctor, all pairs", "doctor, no mesh", "ansible ping"):
        print(f"{label:<18}" + "".join(f"{median[(label, n)]:>10.2f}" for n in SIZES))
    logins = {n: sum(len(t) for t in pair_plan.plan(list(range(n))).values()) for n in SIZES}
    print("mesh logins       " + "".join(f"{logins[n]:>10}" for n in SIZES))
    print("all pairs         " + "".join(f"{n * (n - 1):>10}" for n in SIZES))
    print(f"failing results per doctor run (sub-inventories: hostfile lists 32): {codes}")
    vs_ansible = median[("doctor", 32)] / median[("ansible ping", 32)]
    scaling = median[("doctor", 32)] / median[("doctor", 4)]
    print(f"doctor@32 / ansible ping@32 = {vs_ansible:.2f}  (goal <= 0.5)")
    print(f"doctor@32 / doctor@4        = {scaling:.2f}  (goal <= 2.5)")
    no_mesh = median[("doctor, no mesh", 32)]
    print(
        f"without the mesh: doctor@32 / ansible@32 = {no_mesh / median[('ansible ping', 32)]:.2f}"
        f", doctor@32 / doctor@4 = {no_mesh / median[('doctor, no mesh', 4)]:.2f}"
    )


if __name__ == "__main__":
    main()
