"""The stack's files as `up` installed them: every node's active stack against the
manifest written when it was built (remote/plugins/module_utils/mpicluster_stackfiles.py), like
`rpm -V` for the tree mpicluster built: size, mode, kind and mtime of every file, the
sha256 of what a launch loads (every file's with `doctor --deep`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mpicluster.doctor.checks.common import UP, per_node, plural
from mpicluster.doctor.model import CheckReport, Result, failed, passed, warned

if TYPE_CHECKING:
    from mpicluster.doctor.runner import Gathered

NAME = "stack"
TITLE = "The stack's files as up installed them (its manifest)"
#: Problems named in one result's evidence; the counts are whole.
NAMED = 4


def check(g: Gathered) -> CheckReport:
    if g.layout.install != "source":
        report = CheckReport(NAME, TITLE)
        report.results.append(
            passed(
                None,
                "stack.install is packages: the distribution's packages, not a stack "
                "of mpicluster's (debsums verifies those)",
            )
        )
        return report
    return per_node(g, NAME, TITLE, judge)


def repair_fix(node: str) -> str:
    return (
        f"{UP}: it installs {node}'s stack again from the pack in the artifact cache (no "
        "rebuild); then find what wrote into the stack, or it will again"
    )


def describe(problem: dict) -> str:
    how = f" ({problem['how']})" if problem["how"] else ""
    return f"{problem['path']} {problem['what']}{how}"


def judge(node: str, facts: dict) -> list[Result]:
    """One result for the node: its stack intact, damaged (each changed, missing or
    added file named), or not verifiable (no manifest, or none that can be read)."""
    report = facts.get("stack_files")
    if report is None:
        return []  # no active stack here (the probe found no FINGERPRINT.json): versions says so
    if report.get("error"):
        return [failed(node, f"the stack's manifest: {report['error']}", repair_fix(node))]
    root = report["root"]
    if not report["manifest"]:
        return [
            warned(
                node,
                f"{root} has no manifest (built by an mpicluster before manifests): its "
                "files cannot be verified",
                f"{UP} with this mpicluster: it builds the stack again, with a manifest",
            )
        ]
    counts = report["counts"]
    how = (
        "sha256 of every file"
        if report["deep"]
        else (f"sha256 of the {plural(report['hashed'], 'file')} a launch loads")
    )
    checked = f"{report['files']:,} files against the manifest (size, mode, mtime; {how})"
    total = sum(counts.values())
    if not total:
        seconds = f"{report['seconds']:.1f} s"
        return [passed(node, f"{root}: {checked}, all as up installed them, in {seconds}")]
    parts = [f"{counts[k]} {k}" for k in ("changed", "missing", "added") if counts[k]]
    named = "; ".join(describe(p) for p in report["problems"][:NAMED])
    more = len(report["problems"]) - NAMED
    named += f"; and {more} more" if more > 0 else ""
    evidence = f"{root}: {', '.join(parts)} of {checked}: {named}"
    if counts["changed"] or counts["missing"]:
        return [failed(node, evidence, repair_fix(node))]
    return [warned(node, evidence, repair_fix(node))]  # only files added
