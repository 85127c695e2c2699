"""`mpicluster run --requirements FILE`: a job's own Python packages on every node it
uses, layered on the stack's Python.

The packages are resolved once on this machine (mpicluster.stack.job_packages: the
stack's and the cluster's packages pinned, a conflict refused naming both), into a
folder of wheels per resolution. Each node keeps an environment per resolution and
stack, `~/.cache/mpicluster/envs/KEY` (KEY: the digest of both), a `pip install
--target` folder the job's ranks get first on PYTHONPATH: the job's packages on top,
the stack's (and the cluster's) beneath. A node that has it already does nothing; the
others get the wheels as `--sync` sends a tree (to the first of them, which passes
them on) and install them offline. A later job with the same file starts as fast as
one without (one ssh round trip to every node, at once, to find the environment).

Nothing here prints.
"""

from __future__ import annotations

import hashlib
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mpicluster.cluster.inventory import Node
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import facts as node_facts
from mpicluster.nodes import transport
from mpicluster.run import sync
from mpicluster.stack import ClusterPackages, job_packages
from mpicluster.util.errors import MpiclusterError, UsageError
from mpicluster.util.text import telling_line

ENVS = ".cache/mpicluster/envs"  # in the MPI user's home on every node
WHEELS = ".cache/mpicluster/wheels"
INSTALL_TIMEOUT = 1800
READY = ".complete"


@dataclass
class JobEnv:
    """Where the job's packages are on each node, and what it took."""

    key: str
    pythonpath: str  # absolute, the same on every node
    install: dict[str, str]  # name -> version of the job's own packages
    built_on: list[str] = field(default_factory=list)  # nodes that had to make it
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def read_requirements(path: Path) -> list[str]:
    """The file's requirement lines, or a one-line UsageError naming the line."""
    from mpicluster.cluster import requirements

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or "not UTF-8 text"
        raise UsageError(f"--requirements: cannot read {path}: {why}") from None
    lines = requirements.lines_of(text)
    for line in lines:
        if problem := requirements.problem_of(line.text):
            raise UsageError(f"--requirements: {path}:{line.number}: {problem}")
    if not lines:
        raise UsageError(f"--requirements: {path} has no requirement lines")
    return [line.text for line in lines]


def key_of(packages: ClusterPackages, fingerprint: str) -> str:
    return hashlib.sha256(f"{packages.digest} {fingerprint}".encode()).hexdigest()[:16]


def install_command(python: str, env: str, wheels: str, install: dict[str, str]) -> str:
    """Fill ENV.part offline from the wheels, then rename it into place (a half-made
    environment is never found); the wheels go after."""
    pins = [f"{name}=={version}" for name, version in sorted(install.items())]
    argv = [python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile"]
    argv += ["--disable-pip-version-check", "--quiet", "--target", f"{env}.part"]
    argv += ["--find-links", wheels, *pins]
    part = shlex.quote(f"{env}.part")
    return (
        f"rm -rf {part} && {shlex.join(argv)} && touch {part}/{READY} && "
        f"rm -rf {shlex.quote(env)} && mv {part} {shlex.quote(env)} && rm -rf {shlex.quote(wheels)}"
    )


def prepare(
    plan: ClusterPlan, nodes: list[Node], lines: list[str], progress: Callable[[str], None]
) -> JobEnv:
    """The job's environment on every node of `nodes`, made where it is missing."""
    started = time.monotonic()
    facts = node_facts.gather(plan)
    found = job_packages(plan, facts, lines, progress)
    fingerprints = {
        n.name: ((facts[n.name].get("current") or {}).get("fingerprint")) for n in nodes
    }
    if not all(fingerprints.values()):
        bare = next(name for name, fp in fingerprints.items() if not fp)
        raise MpiclusterError(
            f"{bare} has no stack of mpicluster's: --requirements layers the job's packages on it",
            hint="run `mpicluster up INVENTORY`",
        )
    keys = {name: key_of(found[name], fingerprints[name]) for name in fingerprints}
    if len(set(keys.values())) > 1:
        raise UsageError(
            "--requirements: the job's nodes have different stacks (a mixed cluster's job "
            "packages are not supported yet)"
        )
    key = next(iter(keys.values()))
    packages = found[nodes[0].name]
    homes, missing = _look(plan, nodes, key)
    env = f"{homes[nodes[0].name]}/{ENVS}/{key}"
    result = JobEnv(key, env, dict(packages.install))
    if missing:
        progress(
            f"The job's packages ({len(packages.install)}) for {', '.join(n.name for n in missing)}"
        )
        wheels = f"{WHEELS}/{packages.digest}"
        sync.sync_tree(plan, packages.path, wheels, missing[0], missing[1:], progress)
        command = install_command(
            plan.layout.python, env, f"{homes[nodes[0].name]}/{wheels}", packages.install
        )
        answers = transport.run_everywhere(plan, command, nodes=missing, timeout=INSTALL_TIMEOUT)
        failed = answers.failed
        if failed:
            name, answer = next(iter(failed.items()))
            why = answer.error or telling_line(answer.stderr or answer.stdout)
            raise MpiclusterError(f"{name}: the job's packages were not installed: {why}")
        result.built_on = [n.name for n in missing]
    result.seconds = time.monotonic() - started
    return result


def _look(plan: ClusterPlan, nodes: list[Node], key: str) -> tuple[dict[str, str], list[Node]]:
    """Each node's home, and the nodes without the environment."""
    env = f"{ENVS}/{key}/{READY}"
    command = f'printf "%s\\n" "$HOME"; test -e {shlex.quote(env)} && echo ready || echo missing'
    answers = transport.run_everywhere(plan, command, nodes=nodes, timeout=30)
    homes: dict[str, str] = {}
    missing: list[Node] = []
    for node in nodes:
        answer = answers[node.name]
        if not answer.ok:
            raise MpiclusterError(f"{node.name}: {answer.error or telling_line(answer.stderr)}")
        home, state = [*answer.stdout.split("\n"), "", ""][:2]
        homes[node.name] = home.strip()
        if state.strip() != "ready":
            missing.append(node)
    if len(set(homes.values())) > 1:
        seen = ", ".join(f"{name}: {home or '(none)'}" for name, home in homes.items())
        raise UsageError(f"--requirements: the MPI user's home differs between the nodes ({seen})")
    return homes, missing
