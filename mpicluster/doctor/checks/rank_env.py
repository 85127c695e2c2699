"""What a rank gets: the variables of a non-interactive login (what mpirun's daemons,
and so the ranks, get) that change how a rank starts or what it loads, each named with
the file and line that set it; and what that environment resolves (the login's `python`,
the mpi4py it imports, the libmpi that mpi4py loads, `prted`), against the stack's own.
The probe reads it (remote/rankenv.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mpicluster.doctor.checks.common import UP, majority, set_at
from mpicluster.doctor.model import CheckReport, Result, Status, failed, passed, warned

if TYPE_CHECKING:  # shipped to the nodes (remote/health.py): stdlib at the top
    from mpicluster.cluster.layout import Layout
    from mpicluster.doctor.runner import Gathered

NAME = "rank"
TITLE = "What a rank gets: its environment, and the python, mpi4py, libmpi and prted it finds"

#: Files a non-interactive ssh login reads, in the order it reads them: the last line
#: that sets a variable is the one that counts.
LOGIN_FILES = (
    "/etc/environment",
    "/.pam_environment",
    "/.ssh/environment",
    "/etc/bash.bashrc",
    "/.bashrc",
    "/etc/zsh/zshenv",
    "/.zshenv",
)
#: What a loading variable does to a rank, for the evidence.
EFFECT = {
    "PYTHONPATH": "every rank's Python imports from there before the stack's packages",
    "PYTHONHOME": "every rank's Python looks for its standard library there",
    "PYTHONSTARTUP": "an interactive Python runs that file first",
    "PYTHONUSERBASE": "Python's user site moves there",
    "LD_PRELOAD": "every program a rank starts loads that library first",
    "LD_AUDIT": "the loader runs that audit library in every program",
    "OPAL_PREFIX": "Open MPI looks for its own files under that prefix, not where it was built for",
}


def check(g: Gathered) -> CheckReport:
    report = CheckReport(NAME, TITLE, not_checked=list(g.unprobed))
    expected = dict(g.plan.mpi_env)
    facts = {n: g.facts(n) or {} for n in g.probed}
    facts = {n: f for n, f in facts.items() if f.get("rank_env")}
    tuning = {n: _tuning(f["rank_env"], expected) for n, f in facts.items()}
    odd = _odd_settings(tuning, facts)
    for node, found in facts.items():
        results = judge_node(g.layout, expected, node, found, odd.get(node, []))
        if results is None:
            report.not_checked.append(node)
            continue
        report.results.extend(results)
    return report


def judge_node(
    lay: Layout, expected: dict[str, str], node: str, facts: dict, odd: list[Result] | None = None
) -> list[Result] | None:
    """One node's findings, with `odd` (its settings the other nodes do not share: the
    cluster's to tell); a pass saying what it resolved when there is none. None when its
    login finds no python at all: the env check names that cause."""
    resolved = facts["rank_env"].get("resolved") or {}
    if not (resolved.get("python") or {}).get("path"):
        return None
    results = [r for r in judge(lay, node, facts) + (odd or []) if r.status != Status.PASS]
    if not results:
        return [passed(node, _summary(node, facts, _tuning(facts["rank_env"], expected)))]
    return results


def _tuning(rank: dict, expected: dict[str, str]) -> dict[str, str]:
    """The settings (not loading variables), without what up's block sets as it sets it."""
    return {
        name: value
        for name, value in (rank.get("variables") or {}).items()
        if name not in rank.get("loading", []) and expected.get(name) != value
    }


def where_set(facts: dict, name: str) -> str | None:
    """The startup line ("file:line: text") that gives logins `name`: the last one a
    non-interactive login reads."""
    lines = ((facts.get("access") or {}).get("setters") or {}).get(name) or []
    read = [line for line in lines if line.split(":", 1)[0].endswith(LOGIN_FILES)]
    return (read or lines or [None])[-1]


def _set_at(facts: dict, name: str) -> str:
    unknown = "not set in a startup file doctor reads (sshd's SetEnv or AcceptEnv, or PAM?)"
    return set_at(where_set(facts, name), unknown)


def _remove(facts: dict, name: str, node: str) -> str:
    line = where_set(facts, name)
    return f"remove the line at {line.split(': ', 1)[0]}" if line else f"unset {name} on {node}"


def _odd_settings(tuning: dict[str, dict[str, str]], facts: dict) -> dict[str, list[Result]]:
    """Settings that differ between nodes: the nodes out of the majority, warned."""
    found: dict[str, list[Result]] = {}
    names = sorted({name for values in tuning.values() for name in values})
    for name in names:
        values = {node: tuning[node].get(name) for node in tuning}
        common, odd = majority(values)
        for node in odd:
            value = values[node]
            others = f"{name} unset" if common is None else f"{name}={common}"
            what = f"{name}={value}" if value is not None else f"no {name}"
            how = _set_at(facts[node], name) if value is not None else ""
            found.setdefault(node, []).append(
                warned(
                    node,
                    f"ranks on {node} get {what}"
                    + (f", {how}" if how else "")
                    + f"; most nodes have {others}",
                    (
                        _remove(facts[node], name, node)
                        if value is not None
                        else f"set {name} on {node} as on the others"
                    )
                    + ": ranks whose libraries read different settings can hang or slow a "
                    "collective; set it the same on every node, or nowhere",
                )
            )
    return found


def judge(lay: Layout, node: str, facts: dict) -> list[Result]:
    """The node's resolution against the stack, and its loading variables."""
    rank = facts["rank_env"]
    variables = rank.get("variables") or {}
    loading = rank.get("loading") or []
    resolved = rank.get("resolved") or {}
    root = rank.get("stack_root") if lay.install == "source" else None
    results = _resolution(lay, node, facts, resolved, root)
    blamed = {name for r in results for name in loading if name in r.evidence}
    for name in loading:
        if name in blamed:
            continue
        results.append(
            warned(
                node,
                f"logins get {name}={variables[name]}, {_set_at(facts, name)}: "
                f"{EFFECT[name]}; nothing doctor resolved comes from it now",
                f"keep it only if it is meant; {_remove(facts, name, node)} otherwise",
            )
        )
    return results


def _under(path: str | None, root: str | None) -> bool:
    return bool(path and root and path.startswith(root.rstrip("/") + "/"))


def _blamed(node: str, facts: dict, evidence: str, names: list[str], fix: str) -> Result:
    """A failure: blamed on the first of `names` the login sets (with its line, and the
    fix of removing it), else on what `fix` says."""
    variables = (facts.get("rank_env") or {}).get("variables") or {}
    name = next((n for n in names if n in variables), None)
    if name is None:
        return failed(node, evidence, fix)
    return failed(
        node,
        f"{evidence}; logins get {name}={variables[name]}, {_set_at(facts, name)}",
        f"{_remove(facts, name, node)}, or make it leave the stack's own first",
    )


def _stack_damage(facts: dict) -> str:
    files = facts.get("stack_files") or {}
    gone = [p for p in files.get("problems") or [] if "mpi4py" in p["path"]]
    if not gone:
        return ""
    return f"; the stack's manifest says {gone[0]['path']} {gone[0]['what']}"


def _resolution(
    lay: Layout, node: str, facts: dict, resolved: dict, root: str | None
) -> list[Result]:
    python = (resolved.get("python") or {}).get("path")
    if resolved.get("error") and not resolved.get("executable"):
        evidence = f"the login's python ({python}) does not start: {resolved['error']}"
        loading = ["PYTHONHOME", "PYTHONPATH", "LD_PRELOAD"]
        return [_blamed(node, facts, evidence, loading, f"{UP}: it installs the stack's Python")]
    executable = resolved.get("executable")
    if root and not _under(resolved.get("prefix"), root):
        return [
            failed(
                node,
                f"a login's `python` is {python} (its prefix {resolved.get('prefix')}), "
                f"not the stack's {lay.python}",
                f"the PATH of a non-interactive login on {node} must start with the stack's "
                f"{', '.join(lay.path_dirs)} (the env check says what sets it): {UP}",
            )
        ]
    if resolved.get("error"):
        evidence = f"`import mpi4py` in the login's python ({executable}): {resolved['error']}"
        if resolved.get("mpi4py"):
            evidence += f" (mpi4py from {resolved['mpi4py']})"
        variables = (facts.get("rank_env") or {}).get("variables") or {}
        loading = ["PYTHONPATH", "PYTHONHOME", "LD_PRELOAD"]
        if not any(name in variables for name in loading):
            evidence += _stack_damage(facts)
        fix = (
            f"{UP}: it installs python3-mpi4py for {executable} on {node} (where it is "
            "installed and still fails: apt-get install --reinstall python3-mpi4py)"
            if lay.install == "packages"
            else f"{UP}: it installs the stack again from the pack where its files differ "
            "from the manifest"
        )
        return [_blamed(node, facts, evidence, loading, fix)]
    results = []
    module = resolved.get("mpi4py")
    if root and module and not _under(module, root):
        results.append(
            _blamed(
                node,
                facts,
                f"the login's python imports mpi4py from {module}, not the stack's",
                ["PYTHONPATH", "PYTHONUSERBASE", "PYTHONHOME"],
                f"remove that mpi4py from the stack's Python path on {node} (a .pth file or "
                "a package installed into the stack's venv by hand)",
            )
        )
    foreign = [path for path in resolved.get("libmpi") or [] if root and not _under(path, root)]
    if foreign:
        path = (facts.get("env") or {}).get("LD_LIBRARY_PATH") or "unset"
        results.append(
            _blamed(
                node,
                facts,
                f"mpi4py loads {', '.join(foreign)}, not the stack's {lay.mpi_lib}/libmpi "
                f"(a login's LD_LIBRARY_PATH: {path})",
                ["LD_PRELOAD"],
                f"LD_LIBRARY_PATH of a non-interactive login on {node} must start with "
                f"{lay.mpi_lib} (the env check says what sets it), or {UP}",
            )
        )
    prted = (resolved.get("prted") or {}).get("real")
    if root and prted and not _under(prted, root):
        results.append(
            warned(
                node,
                f"a login's PATH finds prted at {prted} before the stack's: the stack's "
                "mpirun starts its own daemon by its prefix, but other launchers (a "
                "`prterun` from PATH, a job script) would mix the two",
                f"remove the other Open MPI's bin folder from PATH on {node}",
            )
        )
    return results


def _summary(node: str, facts: dict, tuning: dict[str, str]) -> str:
    resolved = facts["rank_env"].get("resolved") or {}
    found = [
        f"python -> {resolved.get('executable')}",
        f"mpi4py -> {resolved.get('mpi4py') or 'none'}",
        f"libmpi -> {', '.join(resolved.get('libmpi') or []) or 'none'}",
    ]
    prted = (resolved.get("prted") or {}).get("real")
    if prted:
        found.append(f"prted -> {prted}")
    settings = ", ".join(f"{k}={v}" for k, v in sorted(tuning.items())) or "none"
    return f"{'; '.join(found)}; rank settings: {settings}"
