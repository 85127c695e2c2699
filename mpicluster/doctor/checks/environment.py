"""Check 3: the non-interactive environment MPI's ssh launch gets on every node.

The control connection is itself a non-interactive ssh login, so the probe's
environment is what pam_env gives mpirun's daemons: PATH and LD_LIBRARY_PATH must
hold the install, `mpirun` / `mpicc` must resolve to it, and /etc/environment's
mpicluster block must be present and literal (pam_env expands nothing there).
"""

from __future__ import annotations

import re

from mpicluster import layout as paths
from mpicluster.doctor.checks.common import UP, per_node
from mpicluster.doctor.model import CheckReport, Result, failed, passed, warned
from mpicluster.doctor.runner import Gathered
from mpicluster.layout import Layout

NAME = "env"
TITLE = "Non-interactive environment (PATH, LD_LIBRARY_PATH, /etc/environment)"
_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def check(g: Gathered) -> CheckReport:
    expected = expected_variables(g)
    return per_node(g, NAME, TITLE, lambda node, facts: judge(g.layout, expected, node, facts))


def expected_variables(g: Gathered) -> dict[str, str]:
    """The MPI settings `up` writes into the block (besides PATH and LD_LIBRARY_PATH)."""
    selector = g.inventory.network.selector
    wanted: dict[str, str] = {}
    if selector:
        wanted["OMPI_MCA_btl_tcp_if_include"] = selector
        wanted["OMPI_MCA_oob_tcp_if_include"] = selector
        wanted["PRTE_MCA_oob_tcp_if_include"] = selector
    if g.inventory.network.interface:
        wanted["NCCL_SOCKET_IFNAME"] = g.inventory.network.interface
    return wanted


def parse_block(text: str | None) -> tuple[str, dict[str, str], list[str]]:
    """(state, block variables, problems) of /etc/environment's managed block.

    state: "missing-file", "missing", "broken" (markers out of order or doubled) or "ok".
    """
    if text is None:
        return "missing-file", {}, []
    lines = text.splitlines()
    begins = [i for i, line in enumerate(lines) if line.rstrip() == paths.ENV_BLOCK_BEGIN]
    ends = [i for i, line in enumerate(lines) if line.rstrip() == paths.ENV_BLOCK_END]
    if not begins and not ends:
        return "missing", {}, []
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        return "broken", {}, [f"{len(begins)} BEGIN and {len(ends)} END marker(s), out of order"]
    values: dict[str, str] = {}
    problems: list[str] = []
    for line in lines[begins[0] + 1 : ends[0]]:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _ASSIGNMENT.match(line)
        if not match:
            problems.append(f"not NAME=value: {line.strip()!r}")
            continue
        name, raw = match.group(1), match.group(2).strip()
        quoted = len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'"
        value = raw[1:-1] if quoted else raw
        if "$" in value or "`" in value:
            problems.append(f"{name} is not literal (pam_env does not expand it): {line.strip()!r}")
        elif not quoted and " " in value:
            problems.append(f"{name} has an unquoted space: {line.strip()!r}")
        values[name] = value
    for i, line in enumerate(lines[ends[0] + 1 :], start=ends[0] + 1):
        match = _ASSIGNMENT.match(line)
        if match and match.group(1) in ("PATH", "LD_LIBRARY_PATH"):
            problems.append(
                f"line {i + 1} sets {match.group(1)} after the block, overriding it: "
                f"{line.strip()!r}"
            )
    return "ok", values, problems


def judge(lay: Layout, expected: dict[str, str], node: str, facts: dict) -> list[Result]:
    env = facts.get("env") or {}
    results: list[Result] = []
    where = f"{node}:{paths.ENVIRONMENT_FILE}"
    state, block, problems = parse_block(facts.get("environment_file"))
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

    path = (env.get("PATH") or "").split(":")
    wanted_path = [lay.mpi_bin, *[d for d in lay.path_dirs if d != lay.mpi_bin]]
    missing = [d for d in wanted_path if d not in path]
    if missing:
        block_path = block.get("PATH")
        cause = (
            f"the block's PATH line is {block_path!r}"
            if block_path is not None
            else "the block has no PATH line"
            if state == "ok"
            else "nothing sets it"
        )
        results.append(
            failed(
                node,
                f"PATH of a non-interactive login is {env.get('PATH')!r}: lacks "
                f"{', '.join(missing)} ({cause})",
                f"the PATH line of the mpicluster block in {where} must hold "
                f"{', '.join(missing)}: {UP}",
            )
        )
    else:
        results.extend(_which(lay, node, facts))
    libs = (env.get("LD_LIBRARY_PATH") or "").split(":")
    missing_libs = [d for d in lay.library_dirs if d not in libs]
    if missing_libs:
        results.append(
            failed(
                node,
                f"LD_LIBRARY_PATH of a non-interactive login is "
                f"{env.get('LD_LIBRARY_PATH') or 'unset'}: lacks {', '.join(missing_libs)}",
                f"the LD_LIBRARY_PATH line of the mpicluster block in {where} must hold "
                f"{', '.join(missing_libs)}: {UP}",
            )
        )
    for name, value in expected.items():
        if state == "ok" and block.get(name) != value:
            results.append(
                failed(
                    node,
                    f"{where}: {name} is {block.get(name)!r}, the inventory's network says "
                    f"{value!r}",
                    f"{UP}: MPI would pick interfaces on its own (a classic hang)",
                )
            )
        elif state == "ok" and env.get(name) != value:
            results.append(
                warned(
                    node,
                    f"{name} is in the block but a login gets {env.get(name)!r}",
                    f"check that pam_env is enabled for sshd on {node} (/etc/pam.d/sshd)",
                )
            )
    if not results:
        mpirun = (facts.get("which") or {}).get("mpirun") or {}
        results.append(
            passed(
                node,
                f"PATH holds {lay.mpi_bin}; mpirun -> {mpirun.get('path')}; "
                f"{paths.ENVIRONMENT_FILE} block present and literal",
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
