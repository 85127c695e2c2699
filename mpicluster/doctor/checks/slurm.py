"""The slurm check (scheduler: slurm): daemons alive, one munge key (a credential from
the controller decodes everywhere; clocks within munge's tolerance), one slurm.conf that
matches each node's own `slurmd -C`, node states with their reasons and the command that
returns a node to service, and a PMIx launch that really starts one world."""

from __future__ import annotations

from mpicluster.doctor.model import CheckReport, Result, failed, passed, warned
from mpicluster.doctor.runner import Gathered
from mpicluster.slurm import MUNGE_TTL, RESUME, SlurmFacts, munge_cause, ready

NAME = "slurm"
TITLE = "Slurm: daemons, munge, slurm.conf, node states, a PMIx launch"
#: slurm.conf's hardware fields that must equal what slurmd measures.
SHAPE = ("CPUs", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")


def start_fix(node: str, daemon: str) -> str:
    by_hand = {
        "munged": "runuser -u munge -- /usr/sbin/munged",
        "slurmd": "/usr/sbin/slurmd",
        "slurmctld": "/usr/sbin/slurmctld",
    }[daemon]
    unit = "munge" if daemon == "munged" else daemon
    fix = (
        f"`mpicluster up INVENTORY` starts it again (by hand on {node}, as root: "
        f"`systemctl start {unit}`, or `{by_hand}` where systemd does not run)"
    )
    if daemon == "slurmd":
        fix += f"; then `{RESUME.format(node=node)}` if the node stays down"
    return fix


def check(g: Gathered) -> CheckReport:
    report = CheckReport(NAME, TITLE)
    if g.plan.scheduler is None:
        report.results.append(passed(None, "no scheduler in the inventory: nothing to check"))
        return report
    facts = g.slurm
    if facts is None:
        return report
    report.not_checked = [n for n, s in facts.nodes.items() if not s.reached]
    report.results += judge(facts)
    return report


def judge(facts: SlurmFacts) -> list[Result]:
    results: list[Result] = []
    controller = facts.controller
    home = facts.nodes.get(controller)
    if facts.credential_error:
        results.append(
            failed(
                controller,
                f"munge -n fails on the controller: {facts.credential_error}",
                start_fix(controller, "munged"),
            )
        )
    for name, node in facts.nodes.items():
        if not node.reached:
            continue
        results += judge_node(facts, name, node, home)
    if facts.ping_ok:
        results.append(passed(controller, f"slurmctld answers: {facts.ping}"))
    else:
        results.append(
            failed(
                controller,
                f"slurmctld does not answer `scontrol ping`: {facts.ping or 'no output'}",
                start_fix(controller, "slurmctld") + " (its log: /var/log/slurm/slurmctld.log)",
            )
        )
    results += judge_states(facts)
    results += judge_launch(facts)
    return results


def judge_node(facts: SlurmFacts, name: str, node, home) -> list[Result]:
    results: list[Result] = []
    wanted = ["munged", "slurmd"] + (["slurmctld"] if name == facts.controller else [])
    down = [d for d in wanted if not node.daemons.get(d)]
    for daemon in down:
        results.append(failed(name, f"{daemon} is not running on {name}", start_fix(name, daemon)))
    if not down:
        results.append(passed(name, f"{', '.join(wanted)} running"))
    if not facts.credential_error:
        if node.munge.startswith("STATUS: Success"):
            results.append(passed(name, "decodes the controller's munge credential"))
        else:
            results.append(
                failed(
                    name,
                    f"cannot decode the controller's munge credential: {node.munge or 'no answer'}",
                    munge_cause(node.munge)
                    + f" (munge refuses credentials from clocks more than {MUNGE_TTL} s apart)",
                )
            )
    if home is not None and home.conf and node.conf != home.conf:
        results.append(
            failed(
                name,
                "slurm.conf differs from the controller's" if node.conf else "no slurm.conf",
                "`mpicluster up INVENTORY` writes the same slurm.conf on every node "
                "(Slurm needs one file everywhere)",
            )
        )
    configured = facts.configured.get(name)
    if configured and node.hardware:
        wrong = [
            f"{key} {configured[key]} (slurmd -C: {node.hardware.get(key)})"
            for key in SHAPE
            if key in configured and configured[key] != node.hardware.get(key)
        ]
        memory, measured = configured.get("RealMemory"), node.hardware.get("RealMemory")
        if memory and measured and memory > measured:
            wrong.append(f"RealMemory {memory} MiB > the {measured} MiB slurmd measures")
        if wrong:
            results.append(
                failed(
                    name,
                    "slurm.conf's node line does not match the node: " + "; ".join(wrong),
                    "`mpicluster up INVENTORY` rewrites the node lines from each node's "
                    f"`slurmd -C`; then `{RESUME.format(node=name)}`",
                )
            )
        else:
            results.append(passed(name, "slurm.conf's node line matches `slurmd -C`"))
    return results


def judge_states(facts: SlurmFacts) -> list[Result]:
    results: list[Result] = []
    if not facts.ping_ok:
        return results
    for name in facts.nodes:
        state = facts.states.get(name)
        if state is None:
            results.append(
                failed(name, "not in sinfo", "`mpicluster up INVENTORY` writes its node line")
            )
        elif ready(state):
            results.append(passed(name, f"Slurm state {state}"))
        else:
            reason = facts.reasons.get(name)
            text = f"Slurm state {state}" + (f" ({reason})" if reason else "")
            fix = f"`{RESUME.format(node=name)}` returns it to service"
            unanswered = state.endswith("*") or state.startswith(("down", "unknown"))
            if unanswered and not facts.nodes[name].daemons.get("slurmd"):
                fix = start_fix(name, "slurmd")
            results.append(failed(name, text, fix))
    return results


def judge_launch(facts: SlurmFacts) -> list[Result]:
    if facts.launch_ok is None:
        if not facts.launch_skipped:
            return []
        return [
            warned(
                None,
                f"srun --mpi=pmix launch not tried: {facts.launch_skipped}",
                "fix the findings above, then run doctor again",
            )
        ]
    if facts.launch_ok:
        ranks = len(facts.nodes)
        return [passed(None, f"srun --mpi=pmix started one world of {ranks} ranks, exact")]
    return [
        failed(
            None,
            f"srun --mpi=pmix: {facts.launch_problem} ({facts.launch_command})",
            facts.launch_cause or "the ranks' output says why",
        )
    ]
