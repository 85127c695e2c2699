"""doctor's corpus: breakages cluster admins meet, each made for real on a provisioned
3-node local cluster (as root, through Podman), then undone.

For each: doctor must put the failure on the right node (or pair) and check, and the
fix must name the cause it saw on the node (the file and line, the mode, the setting),
not the usual suspect. Marked `doctor_corpus` (on demand): about 10 minutes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mpicluster.cluster import layout
from tests.cluster.nodes import podman_exec
from tests.conftest import LocalCluster, inventory_with, mpicluster, start_local_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.on_demand, pytest.mark.doctor_corpus]

NAME, SUBNET = "corpus", "192.168.66.0/24"
ADDRESS = {"node1": "192.168.66.11", "node2": "192.168.66.12", "node3": "192.168.66.13"}
HOME = "/home/vagrant"
SAVED = "/root/corpus-saved"
#: A control connection's address as the nodes see it (filled in by the fixture).
CONTROL: dict[str, str] = {}


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Iterator[LocalCluster]:
    inventory = tmp_path_factory.mktemp("corpus") / "raw.yaml"
    mpicluster("local", "down", "--name", NAME, check=False)  # leftovers of a killed run
    yield start_local_cluster(NAME, 3, SUBNET, inventory)
    mpicluster("local", "down", "--name", NAME, check=False)


@pytest.fixture(scope="module")
def inventory(raw) -> Path:
    path = inventory_with(
        raw.inventory, raw.inventory.parent / "packages.yaml", stack={"install": "packages"}
    )
    mpicluster("up", str(path), timeout=1800)
    CONTROL["address"] = raw.ssh("node2", "echo $SSH_CLIENT").stdout.split()[0]
    return path


def doctor(inventory: Path) -> tuple[int, dict]:
    done = mpicluster("doctor", str(inventory), "--json", check=False, timeout=600)
    assert done.returncode in (0, 5, 6), done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def findings(report: dict) -> dict[tuple[str, str | None], dict]:
    """(check, node) -> the result, of every result that is not a pass."""
    found = {}
    for check in report["checks"]:
        for result in check["results"]:
            if result["status"] != "pass":
                found.setdefault((check["name"], result["node"]), result)
    return found


def healthy(inventory: Path, seconds: float = 60) -> None:
    """doctor passes (sshd may still be restarting after a restore: retried a while)."""
    deadline = time.monotonic() + seconds
    while True:
        code, report = doctor(inventory)
        if code == 0:
            return
        assert time.monotonic() < deadline, json.dumps(list(findings(report).values()))[-4000:]
        time.sleep(2)


def user(command: str) -> str:
    """A root shell command that runs `command` as the MPI user (files keep their owner)."""
    return f"runuser -u vagrant -- sh -c '{command}'"


def save(node: str, *paths: str) -> str:
    return " && ".join(
        f"mkdir -p {SAVED} && cp -a {p} {SAVED}/{node}-{Path(p).name}" for p in paths
    )


def put_back(node: str, *paths: str) -> str:
    # cat, not cp: /etc/hosts is bind-mounted by Podman, and the inode stays the user's
    return " && ".join(f"cat {SAVED}/{node}-{Path(p).name} > {p}" for p in paths)


HUP_SSHD = "pkill -HUP -o -x sshd"
KEY = f"{HOME}/.ssh/mpicluster_{NAME}"


@dataclass(frozen=True)
class Case:
    id: str
    node: str
    breaks: str
    restore: str
    #: (check, node) that must fail (or warn, for the interfaces check) ...
    expect: tuple[tuple[str, str | None], ...]
    #: ... and words its fix must hold (the cause it names).
    fix: dict[tuple[str, str | None], tuple[str, ...]]
    #: (check, node) that may fail too: the same cause, seen by another check.
    allow: tuple[tuple[str, str | None], ...] = ()
    evidence: dict[tuple[str, str | None], tuple[str, ...]] = field(default_factory=dict)


def cases() -> list[Case]:
    hosts = "/etc/hosts"
    known = "/etc/ssh/ssh_known_hosts"
    keys = f"{HOME}/.ssh/authorized_keys"
    bashrc = f"{HOME}/.bashrc"
    params = "/etc/openmpi/openmpi-mca-params.conf"
    return [
        Case(
            # Debian's sshd accepts a group-writable home when the group is the user's own
            "strictmodes-home-writable-by-others",
            "node2",
            f"chmod o+w {HOME}",
            f"chmod o-w {HOME}",
            expect=(("ssh", "node2"), ("mesh", "node2")),
            fix={
                ("ssh", "node2"): ("StrictModes", "cluster key", "control machine's key"),
                ("mesh", "node2"): ("StrictModes",),
            },
        ),
        Case(
            "from-list-without-node1",
            "node2",
            save("node2", keys) + " && " + user(f'sed -i "s/{ADDRESS["node1"]},//" {keys}'),
            put_back("node2", keys),
            expect=(("mesh", "node1"), ("launch", "node2")),
            fix={("mesh", "node1"): ("from=", ADDRESS["node1"])},
        ),
        Case(
            "sshd-allowusers-control-only",
            "node2",
            "printf 'AllowUsers vagrant@%s\\n' \"$CONTROL\" "
            f"> /etc/ssh/sshd_config.d/00-corpus.conf && {HUP_SSHD}",
            f"rm /etc/ssh/sshd_config.d/00-corpus.conf && {HUP_SSHD}",
            expect=(("mesh", "node2"), ("launch", "node2")),
            fix={("mesh", "node2"): ("AllowUsers", "/etc/ssh/sshd_config.d/00-corpus.conf:1")},
        ),
        Case(
            "known-hosts-missing-a-peer",
            "node1",
            save("node1", known) + f" && sed -i '/^node2[ ,]/d' {known}",
            put_back("node1", known),
            expect=(("mesh", "node1"), ("launch", "node2")),
            fix={("mesh", "node1"): (f"node1's {known}", "no key for node2")},
        ),
        Case(
            "known-hosts-stale-key-on-one-node",
            "node1",
            save("node1", known)
            + " && rm -f /root/corpus-key* && ssh-keygen -q -t ed25519 -N '' -f /root/corpus-key"
            + " && key=$(cut -d' ' -f1,2 /root/corpus-key.pub)"
            + f' && sed -i "/^node2[ ,]/s| ssh-ed25519 .*| $key|" {known}',
            put_back("node1", known),
            expect=(("mesh", "node1"), ("launch", "node2")),
            fix={("mesh", "node1"): (f"node1's {known}", "stale")},
        ),
        Case(
            "stale-hosts-line-shadows-a-peer",
            "node1",
            save("node1", hosts)
            + f" && {{ echo '192.168.66.99 node2'; cat {SAVED}/node1-hosts; }} > {hosts}",
            put_back("node1", hosts),
            expect=(("names", "node1"),),
            fix={("names", "node1"): ("/etc/hosts:1", "192.168.66.99 node2")},
            allow=(("mesh", "node1"), ("launch", "node2"), ("launch", "node1"), ("launch", None)),
        ),
        Case(
            "nsswitch-without-files",
            "node2",
            save("node2", "/etc/nsswitch.conf")
            + " && sed -i 's/^hosts:.*/hosts: dns/' /etc/nsswitch.conf",
            put_back("node2", "/etc/nsswitch.conf"),
            expect=(("names", "node2"),),
            fix={("names", "node2"): ("/etc/nsswitch.conf", "files")},
            allow=(("mesh", "node2"), ("launch", "node2"), ("launch", None)),
        ),
        Case(
            "bashrc-overrides-mca-interface",
            "node2",
            save("node2", bashrc)
            + " && "
            + user(f'sed -i "1i export OMPI_MCA_btl_tcp_if_include=eth9" {bashrc}'),
            put_back("node2", bashrc),
            # mpirun hands its own OMPI_MCA_ settings to every rank, so launches from
            # node1 work: the fault is in every job started from node2
            expect=(("env", "node2"),),
            fix={("env", "node2"): (f"{bashrc}:1", "OMPI_MCA_btl_tcp_if_include")},
            allow=(("launch", "node2"), ("launch", None)),
        ),
        Case(
            "bashrc-overrides-an-mca-setting-of-the-inventory",
            "node3",
            save("node3", bashrc)
            + " && "
            + user(f'sed -i "1i export OMPI_MCA_mpi_yield_when_idle=0" {bashrc}'),
            put_back("node3", bashrc),
            # the local inventory's mpi.mca: its ranks would spin on the shared cores
            expect=(("env", "node3"),),
            fix={("env", "node3"): (f"{bashrc}:1", "OMPI_MCA_mpi_yield_when_idle")},
            allow=(("launch", "node3"), ("launch", None), ("rank_env", "node3")),
        ),
        Case(
            "mca-params-file-differs",
            "node2",
            save("node2", params) + f" && printf '\\nbtl = self,vader\\n' >> {params}",
            put_back("node2", params),
            expect=(("versions", "node2"), ("launch", "node2")),
            fix={("versions", "node2"): (params, "btl = self,vader")},
            allow=(("launch", None),),
        ),
        Case(
            "login-prints-a-banner",
            "node2",
            save("node2", bashrc)
            + " && "
            + user(f'sed -i "1i echo Welcome to node2, ask ops for help" {bashrc}'),
            put_back("node2", bashrc),
            expect=(("ssh", "node2"),),
            fix={("ssh", "node2"): (f"{bashrc}:1", "rsync")},
        ),
        Case(
            "ssh-config-user-before-the-block",
            "node1",
            save("node1", f"{HOME}/.ssh/config")
            + " && "
            + user(f'sed -i "1i Host *\\n    User root" {HOME}/.ssh/config'),
            put_back("node1", f"{HOME}/.ssh/config"),
            expect=(("mesh", "node1"), ("launch", "node1")),
            fix={("mesh", "node1"): ("User root", f"{HOME}/.ssh/config:2")},
        ),
        Case(
            "cluster-key-readable-by-others",
            "node2",
            f"chmod 0644 {KEY}",
            f"chmod 0600 {KEY}",
            expect=(("mesh", "node2"),),
            fix={("mesh", "node2"): ("chmod 600",)},
            evidence={("mesh", "node2"): ("mode 0644",)},
            allow=(("launch", "node2"), ("launch", None)),
        ),
        Case(
            "cluster-key-removed",
            "node2",
            f"mv {KEY} /root/corpus-key-aside",
            f"mv /root/corpus-key-aside {KEY}",
            expect=(("mesh", "node2"),),
            fix={("mesh", "node2"): ("no cluster key",)},
            allow=(("launch", "node2"), ("launch", None)),
        ),
        Case(
            "port-22-rejected",
            "node2",
            "iptables -I INPUT -p tcp --dport 22 -j REJECT --reject-with tcp-reset",
            "iptables -D INPUT -p tcp --dport 22 -j REJECT --reject-with tcp-reset",
            expect=(("ssh", "node2"),),
            fix={("ssh", "node2"): ("sshd", "firewall")},
        ),
        Case(
            "nologin-shell",
            "node2",
            "usermod -s /usr/sbin/nologin vagrant",
            "usermod -s /bin/bash vagrant",
            expect=(("ssh", "node2"),),
            fix={("ssh", "node2"): ("nologin", "chsh")},
            allow=(("mesh", "node2"),),
        ),
        Case(
            "firewall-rejects-one-pair",
            "node2",
            f"iptables -I INPUT -s {ADDRESS['node3']} -p tcp --dport 1024:65535 "
            "-m conntrack --ctstate NEW -j REJECT --reject-with tcp-reset",
            f"iptables -D INPUT -s {ADDRESS['node3']} -p tcp --dport 1024:65535 "
            "-m conntrack --ctstate NEW -j REJECT --reject-with tcp-reset",
            expect=(("ports", "node3"),),
            fix={("ports", "node3"): ("firewall",)},
            allow=(("launch", None), ("launch", "node2"), ("launch", "node3")),
        ),
        Case(
            "firewall-drops-ssh-from-one-node",
            "node2",
            f"iptables -I INPUT -s {ADDRESS['node1']} -p tcp --dport 22 -j DROP",
            f"iptables -D INPUT -s {ADDRESS['node1']} -p tcp --dport 22 -j DROP",
            expect=(("mesh", "node1"), ("launch", "node2")),
            fix={("mesh", "node1"): ("port 22", "node2")},
        ),
        Case(
            "dev-shm-full",
            "node2",
            "dd if=/dev/zero of=/dev/shm/corpus-fill bs=1M 2>/dev/null; true",
            "rm -f /dev/shm/corpus-fill",
            expect=(("disk", "node2"),),
            fix={("disk", "node2"): ("/dev/shm",)},
            allow=(("launch", "node2"), ("limits", "node2")),
        ),
        Case(
            "tmpdir-points-nowhere",
            "node2",
            save("node2", "/etc/environment") + " && echo TMPDIR=/scratch/tmp >> /etc/environment",
            put_back("node2", "/etc/environment"),
            expect=(("disk", "node2"),),
            fix={("disk", "node2"): ("/scratch/tmp", "/etc/environment")},
            allow=(("launch", "node2"),),
        ),
        Case(
            "hostfile-edited-by-hand",
            "node1",
            save("node1", layout.HOSTFILE) + f" && sed -i '/^node3/d' {layout.HOSTFILE}",
            put_back("node1", layout.HOSTFILE),
            expect=(("hostfile", "node1"),),
            fix={("hostfile", "node1"): ("mpicluster up",)},
            evidence={("hostfile", "node1"): ("node3",)},
        ),
        Case(
            "mtu-differs",
            "node2",
            "ip link set eth0 mtu 9000",
            "ip link set eth0 mtu 1500",
            expect=(("interfaces", "node2"),),
            fix={("interfaces", "node2"): ("mtu", "1500")},
            evidence={("interfaces", "node2"): ("MTU 9000",)},
        ),
        Case(
            "control-key-removed",
            "node2",
            save("node2", keys)
            + f" && grep ' mpicluster:{NAME}$' {SAVED}/node2-authorized_keys > {keys}",
            put_back("node2", keys),
            expect=(("ssh", "node2"),),
            fix={("ssh", "node2"): ("accepts the cluster key", "authorized_keys")},
        ),
        Case(
            # a half-removed `pip install --target ~/pylib mpi4py` and the line that put
            # it on every login's path: ranks on node2 import it, and `from mpi4py import
            # MPI` fails there (the job fails; blaming Debian's mpi4py would be wrong)
            "pythonpath-shadows-mpi4py",
            "node2",
            save("node2", bashrc)
            + " && "
            + user(f"mkdir -p {HOME}/pylib/mpi4py && touch {HOME}/pylib/mpi4py/__init__.py")
            + " && "
            + user(f'sed -i "1i export PYTHONPATH={HOME}/pylib" {bashrc}'),
            put_back("node2", bashrc) + f" && rm -rf {HOME}/pylib",
            expect=(("rank", "node2"), ("launch", "node2")),
            fix={
                ("rank", "node2"): (f"{bashrc}:1",),
                ("launch", "node2"): (f"{bashrc}:1",),
            },
            evidence={("rank", "node2"): ("PYTHONPATH=/home/vagrant/pylib", "pylib/mpi4py")},
            allow=(("launch", None), ("versions", "node2")),
        ),
        Case(
            # a killed job's segments, say: /dev/shm left with 12 MiB, less than the
            # 16 MiB Open MPI's shared-memory transport asks per rank ("Space Requested:
            # 16777216 B, Space Available: ..."): ranks fall back to slower paths
            "dev-shm-nearly-full",
            "node2",
            "free=$(df --output=avail -B1 /dev/shm | tail -1) && "
            "head -c $((free - 12 * 1024 * 1024)) /dev/zero > /dev/shm/vader_segment.corpus.0",
            "rm -f /dev/shm/vader_segment.corpus.0",
            expect=(("limits", "node2"), ("disk", "node2")),
            fix={("limits", "node2"): ("/dev/shm", "--shm-size")},
            evidence={("limits", "node2"): ("vader_segment.corpus.0",)},
            allow=(("launch", "node2"), ("launch", None)),
        ),
        Case(
            "bashrc-overrides-path",
            "node2",
            save("node2", bashrc)
            + " && "
            + user(f'sed -i "1i export PATH=/usr/local/sbin:/usr/local/bin" {bashrc}'),
            put_back("node2", bashrc),
            expect=(("env", "node2"), ("launch", "node2")),
            fix={("env", "node2"): (f"{bashrc}:1",)},
            allow=(("launch", None),),
        ),
    ]


CASES = cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_doctor_names_the_node_the_check_and_the_cause(case: Case, raw, inventory):
    env = f"CONTROL={CONTROL['address']}; "
    podman_exec(NAME, case.node, env + case.breaks)
    try:
        code, report = doctor(inventory)
        found = findings(report)
        shown = json.dumps([[*key, value] for key, value in found.items()], indent=1)[-6000:]
        assert code in (5, 6), shown  # a failure, or warnings only
        assert set(case.expect) <= set(found), shown
        assert set(found) <= set(case.expect) | set(case.allow), shown
        for key, words in case.fix.items():
            for word in words:
                assert word.lower() in (found[key]["fix"] or "").lower(), (word, found[key])
        for key, words in case.evidence.items():
            for word in words:
                assert word in found[key]["evidence"], (word, found[key])
    finally:
        podman_exec(NAME, case.node, env + case.restore)
    healthy(inventory)
