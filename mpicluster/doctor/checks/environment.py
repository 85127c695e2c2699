"""Check 3: the non-interactive environment MPI's ssh launch gets on every node.

The control connection is itself a non-interactive ssh login, so the probe's
environment is what pam_env gives mpirun's daemons: PATH and LD_LIBRARY_PATH must
hold the install, `mpirun` / `mpicc` must resolve to it, and /etc/environment's
mpicluster block must be present and literal (pam_env expands nothing there).
"""

from __future__ import annotations

from mpicluster import layout
from mpicluster.doctor.checks.common import UP, per_node
from mpicluster.doctor.model import CheckReport, Result, failed, passed, warned
from mpicluster.doctor.runner import Gathered
from mpicluster.layout import Layout
from mpicluster.mpi_settings import mpi_environment
from mpicluster.remote.module_utils import mpicluster_envblock as envblock

NAME = "env"
TITLE = "Non-interactive environment (PATH, LD_LIBRARY_PATH, /etc/environment)"


def check(g: Gathered) -> CheckReport:
    # the MPI settings `up` writes into the block (besides PATH and LD_LIBRARY_PATH)
    expected = mpi_environment(g.inventory.network)
    return per_node(g, NAME, TITLE, lambda node, facts: judge(g.layout, expected, node, facts))


def parse_block(text: str | None) -> tuple[str, dict[str, str], list[str]]:
    """(state, block variables, problems) of /etc/environment's managed block."""
    return envblock.parse_block(text, layout.BLOCK_BEGIN, layout.BLOCK_END)


def judge(lay: Layout, expected: dict[str, str], node: str, facts: dict) -> list[Result]:
    env = facts.get("env") or {}
    results: list[Result] = []
    where = f"{node}:{layout.ENVIRONMENT_FILE}"
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

    missing, missing_libs = lay.missing_dirs(env.get("PATH"), env.get("LD_LIBRARY_PATH"))
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
                f"{layout.ENVIRONMENT_FILE} block present and literal",
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
