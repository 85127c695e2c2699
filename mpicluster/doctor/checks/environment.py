"""Check 3: the non-interactive environment MPI's ssh launch gets on every node.

The control connection is itself a non-interactive ssh login, so the probe's
environment is what pam_env gives mpirun's daemons: PATH and LD_LIBRARY_PATH must
hold the install, `mpirun` / `mpicc` must resolve to it, and /etc/environment's
mpicluster block must be present and literal (pam_env expands nothing there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mpicluster.cluster import layout
from mpicluster.cluster.layout import Layout
from mpicluster.doctor.checks.common import UP, per_node
from mpicluster.doctor.model import CheckReport, Result, Status, failed, passed, warned
from mpicluster.remote.plugins.module_utils import mpicluster_envblock as envblock

if TYPE_CHECKING:  # shipped to the nodes (remote/health.py): stdlib at the top
    from mpicluster.doctor.runner import Gathered

NAME = "env"
TITLE = "Non-interactive environment (PATH, LD_LIBRARY_PATH, /etc/environment)"


def check(g: Gathered) -> CheckReport:
    # the MPI settings `up` writes into the block (besides PATH and LD_LIBRARY_PATH)
    expected = dict(g.plan.mpi_env)
    # MPI settings logins get from elsewhere, node by node: one node's differ = a fault
    extra: dict[str, dict[str, str]] = {}
    for node in g.probed:
        mca = ((g.facts(node) or {}).get("access") or {}).get("mca_env") or {}
        for name, value in mca.items():
            if name not in expected:
                extra.setdefault(name, {})[node] = value
    report = per_node(g, NAME, TITLE, lambda node, facts: judge(g.layout, expected, node, facts))
    for name, values in sorted(extra.items()):
        report.results.extend(_foreign(g, name, values))
    _drop_passes_of_failed(report)
    return report


#: Startup files a non-interactive `ssh node command` reads after /etc/environment
#: (bash through sshd: ~/.bashrc and Debian's /etc/bash.bashrc; zsh: zshenv).
AFTER_PAM = ("/.bashrc", "/etc/bash.bashrc", "/.zshenv", "/etc/zsh/zshenv", "/.ssh/environment")


def setter(facts: dict, name: str, keeping: bool = True) -> str | None:
    """The startup line ("file:line: text") that sets `name` for non-interactive logins
    after /etc/environment; with keeping=False, only one that drops the value before it."""
    lines = ((facts.get("access") or {}).get("setters") or {}).get(name) or []
    for line in lines:
        path = line.split(":", 1)[0]
        if not path.endswith(AFTER_PAM):
            continue
        if not keeping and (f"${name}" in line or f"${{{name}}}" in line):
            continue
        return line
    return None


def _where(line: str) -> tuple[str, str]:
    place, _, text = line.partition(": ")
    return place, text


def _foreign(g: Gathered, name: str, values: dict[str, str]) -> list[Result]:
    """An MPI setting logins get on some nodes, not from mpicluster's block."""
    results = []
    probed = g.probed
    same = len(values) == len(probed) and len(set(values.values())) == 1
    for node, value in values.items():
        line = setter(g.facts(node) or {}, name)
        source = (
            f"set at {_where(line)[0]} (`{_where(line)[1]}`)" if line else "not set by mpicluster"
        )
        if same:
            results.append(
                warned(
                    node,
                    f"logins get {name}={value} on every node, {source}",
                    "every MPI job obeys it: keep it only if it is meant (it is not "
                    "mpicluster's; the inventory's network section sets the interface)",
                )
            )
            continue
        others = sorted(n for n in probed if n != node and values.get(n) != value)
        results.append(
            failed(
                node,
                f"logins on {node} get {name}={value}, {source}; "
                f"{', '.join(others)} {'do' if len(others) > 1 else 'does'} not",
                (f"remove it from {_where(line)[0]} on {node}" if line else f"unset it on {node}")
                + ": Open MPI reads it from the environment of every daemon and rank, and "
                "nodes that disagree on MPI settings fail or hang together",
            )
        )
    return results


def _drop_passes_of_failed(report: CheckReport) -> None:
    bad = {r.node for r in report.results if r.status != Status.PASS}
    report.results = [r for r in report.results if r.status != Status.PASS or r.node not in bad]


def parse_block(text: str | None) -> tuple[str, dict[str, str], list[str]]:
    """(state, block variables, problems) of /etc/environment's managed block."""
    return envblock.parse_block(text, layout.BLOCK_BEGIN, layout.BLOCK_END)


def judge(lay: Layout, expected: dict[str, str], node: str, facts: dict) -> list[Result]:
    env = facts.get("env") or {}
    where = f"{node}:{layout.ENVIRONMENT_FILE}"
    state, block, problems = parse_block(facts.get("environment_file"))
    results = _judge_block(node, where, state, problems)
    results.extend(_judge_path(lay, node, facts, where, state, block))
    results.extend(_judge_libraries(lay, node, env, where))
    if state == "ok":
        results.extend(_judge_mpi_settings(expected, node, facts, where, block))
    if not results:
        mpirun = (facts.get("which") or {}).get("mpirun") or {}
        results.append(
            passed(
                node,
                f"PATH holds {lay.mpi_bin}; mpirun -> {mpirun.get('path')}; "
                f"{layout.ENVIRONMENT_FILE} block present and literal",
            )
        )
    return results


def _judge_block(node: str, where: str, state: str, problems: list[str]) -> list[Result]:
    """The mpicluster block itself: present, and literal."""
    results: list[Result] = []
    if state in ("missing", "missing-file"):
        results.append(
            failed(
                node,
                f"{where} has no mpicluster block"
                + (" (the file does not exist)" if state == "missing-file" else ""),
                f"{UP}: it writes the block (PATH, LD_LIBRARY_PATH, MPI interface settings)",
            )
        )
    for problem in problems:
        results.append(
            failed(node, f"{where}: {problem}", f"{UP}: it rewrites the block with literal values")
        )
    return results


def _judge_path(
    lay: Layout, node: str, facts: dict, where: str, state: str, block: dict[str, str]
) -> list[Result]:
    """PATH of a login: overridden by a startup file, lacking the install, or (when it
    holds it) whether `mpirun` / `mpicc` resolve to the install."""
    env = facts.get("env") or {}
    missing, _ = lay.missing_dirs(env.get("PATH"), env.get("LD_LIBRARY_PATH"))
    if not missing:
        return _which(lay, node, facts)
    override = setter(facts, "PATH", keeping=False)
    if override:
        place, text = _where(override)
        return [
            failed(
                node,
                f"PATH of a non-interactive login is {env.get('PATH')!r}: lacks "
                f"{', '.join(missing)}; {place} sets it (`{text}`) after {layout.ENVIRONMENT_FILE}",
                f"{place} on {node} replaces PATH for ssh logins, which read it after "
                f"{layout.ENVIRONMENT_FILE}: keep the PATH it is given (`PATH=...:$PATH`) or "
                "move the line below the file's interactive-only guard",
            )
        ]
    block_path = block.get("PATH")
    cause = (
        f"the block's PATH line is {block_path!r}"
        if block_path is not None
        else "the block has no PATH line"
        if state == "ok"
        else "nothing sets it"
    )
    return [
        failed(
            node,
            f"PATH of a non-interactive login is {env.get('PATH')!r}: lacks "
            f"{', '.join(missing)} ({cause})",
            f"the PATH line of the mpicluster block in {where} must hold "
            f"{', '.join(missing)}: {UP}",
        )
    ]


def _judge_libraries(lay: Layout, node: str, env: dict, where: str) -> list[Result]:
    """LD_LIBRARY_PATH of a login must hold the install's libraries."""
    _, missing_libs = lay.missing_dirs(env.get("PATH"), env.get("LD_LIBRARY_PATH"))
    if not missing_libs:
        return []
    return [
        failed(
            node,
            f"LD_LIBRARY_PATH of a non-interactive login is "
            f"{env.get('LD_LIBRARY_PATH') or 'unset'}: lacks {', '.join(missing_libs)}",
            f"the LD_LIBRARY_PATH line of the mpicluster block in {where} must hold "
            f"{', '.join(missing_libs)}: {UP}",
        )
    ]


def _judge_mpi_settings(
    expected: dict[str, str], node: str, facts: dict, where: str, block: dict[str, str]
) -> list[Result]:
    """The block's MPI settings (of a present block) against the inventory's network,
    and what logins actually get of them."""
    env = facts.get("env") or {}
    results: list[Result] = []
    for name, value in expected.items():
        if block.get(name) != value:
            results.append(
                failed(
                    node,
                    f"{where}: {name} is {block.get(name)!r}, the inventory's network says "
                    f"{value!r}",
                    f"{UP}: MPI would pick interfaces on its own (a classic hang)",
                )
            )
        elif env.get(name) != value and (line := setter(facts, name)):
            place, text = _where(line)
            results.append(
                failed(
                    node,
                    f"{name} is {value!r} in {where}, but logins get {env.get(name)!r}: "
                    f"{place} sets it (`{text}`)",
                    f"remove the line at {place} on {node}: it overrides {name} for every "
                    "ssh login after /etc/environment, so MPI uses another interface there",
                )
            )
        elif env.get(name) != value:
            results.append(
                warned(
                    node,
                    f"{name} is in the block but a login gets {env.get(name)!r}",
                    f"check that pam_env is enabled for sshd on {node} (/etc/pam.d/sshd)",
                )
            )
    return results


def _which(lay: Layout, node: str, facts: dict) -> list[Result]:
    results = []
    for program in ("mpirun", "mpicc"):
        found = (facts.get("which") or {}).get(program) or {}
        wanted = f"{lay.mpi_bin}/{program}"
        if not found.get("path"):
            results.append(
                failed(
                    node,
                    f"`which {program}` finds nothing in PATH",
                    f"{UP}: it installs the MPI stack ({lay.install} install)",
                )
            )
        elif found["path"] != wanted:
            results.append(
                failed(
                    node,
                    f"`which {program}` gives {found['path']} (-> {found.get('real')}), "
                    f"not {wanted}: another MPI comes first in PATH",
                    f"remove the other MPI's directory from PATH on {node} (shell profiles do "
                    "not apply to non-interactive logins: look at /etc/environment), or "
                    f"{UP}",
                )
            )
    return results
