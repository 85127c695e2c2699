"""`doctor --gpu-diag LEVEL`: NVIDIA DCGM's active diagnostics (`dcgmi diag -r LEVEL`) on
every GPU node at once, each under a time limit, where DCGM is installed. Never run by
default: they load the GPUs (level 1 takes seconds, 2 about two minutes, 3 and 4 tens of
minutes to hours), and a long diagnostic hangs a job's prolog (aws-parallelcluster
#6777). Read-only otherwise; the result is one more check in the report, `gpu_diag`.

`dcgmi diag -j` prints JSON: test categories, each with tests whose results carry a
status (Pass, Fail, Warn, Skip) per GPU and the warnings behind a failure. DCGM 3 names
the GPUs `gpu_ids`, DCGM 4 `entity_id`; both are read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from mpicluster.cluster.plan import ClusterPlan
from mpicluster.doctor.model import CheckReport, Result, failed, passed, warned
from mpicluster.nodes import transport
from mpicluster.util.errors import UsageError

NAME = "gpu_diag"
TITLE = "GPU diagnostics (DCGM: dcgmi diag)"
#: Seconds each level may take before it is stopped (DCGM's own estimates, doubled).
LIMITS = {1: 120, 2: 600, 3: 3600, 4: 7200}
NO_DCGMI = "mpicluster: no dcgmi"
INSTALL = (
    "install NVIDIA DCGM (datacenter-gpu-manager) and start its host engine "
    "(systemctl enable --now nvidia-dcgm)"
)


def command(level: int) -> str:
    limit = LIMITS[level]
    return (
        f"command -v dcgmi >/dev/null 2>&1 || {{ echo '{NO_DCGMI}'; exit 0; }}; "
        f"timeout -k 10 {limit} dcgmi diag -r {level} -j"
    )


def check_level(level: int | None) -> None:
    if level is not None and level not in LIMITS:
        raise UsageError(f"--gpu-diag {level}: a DCGM run level, 1 to 4")


def run(plan: ClusterPlan, level: int, progress: Callable[[str], None]) -> CheckReport:
    report = CheckReport(NAME, f"{TITLE} -r {level}")
    nodes = plan.gpu_nodes
    if not nodes or not plan.stack.gpus_present:
        report.results.append(passed(None, "no GPUs to diagnose (the inventory lists none here)"))
        return report
    limit = LIMITS[level]
    progress(f"GPU diagnostics: dcgmi diag -r {level} on {len(nodes)} node(s), {limit} s at most")
    said = transport.run_everywhere(plan, command(level), nodes=nodes, timeout=limit + 60)
    for node in nodes:
        result = said.get(node.name)
        if result is None or result.error:
            why = result.error if result else "not run"
            report.results.append(
                failed(
                    node.name,
                    f"{node.name}: could not run dcgmi: {why}",
                    "run `mpicluster doctor` without --gpu-diag",
                )
            )
            continue
        report.results += judge(node.name, level, result.exit_code, result.stdout, result.stderr)
    return report


def judge(node: str, level: int, exit_code: int | None, stdout: str, stderr: str) -> list[Result]:
    """One node's `dcgmi diag` run: each failing or warning test on each GPU, or a pass."""
    if stdout.strip() == NO_DCGMI:
        return [warned(node, f"{node}: DCGM is not installed: no diagnostics run", INSTALL)]
    if exit_code in (124, 137):
        return [
            failed(
                node,
                f"{node}: dcgmi diag -r {level} ran past {LIMITS[level]} s and was stopped",
                "run it alone in a maintenance window, or a lower level",
            )
        ]
    document = _json(stdout)
    if document is None:
        said = (stderr.strip() or stdout.strip() or f"exit {exit_code}").splitlines()[-1][:300]
        if "host engine" in said.lower() or "connect" in said.lower():
            return [warned(node, f"{node}: DCGM's host engine is not running: {said}", INSTALL)]
        return [failed(node, f"{node}: dcgmi diag -r {level} printed no result: {said}", INSTALL)]
    found = list(_findings(node, document))
    if found:
        return found
    ran = sum(1 for _ in _results(document))
    return [passed(node, f"{node}: dcgmi diag -r {level}: {ran} result(s), none failed")]


def _json(text: str) -> dict | None:
    start = text.find("{")
    if start < 0:
        return None
    try:
        document = json.loads(text[start:])
    except json.JSONDecodeError:
        return None
    return document if isinstance(document, dict) else None


def _results(document: Any, test: str = "") -> Iterator[tuple[str, dict]]:
    """(test name, result) for every result of every test, wherever it sits."""
    if isinstance(document, dict):
        name = str(document.get("name") or document.get("test_name") or test)
        for result in document.get("results") or []:
            if isinstance(result, dict) and "status" in result:
                yield name, result
        for key, value in document.items():
            if key != "results":
                yield from _results(value, name)
    elif isinstance(document, list):
        for item in document:
            yield from _results(item, test)


def _findings(node: str, document: dict) -> Iterator[Result]:
    for test, result in _results(document):
        status = str(result.get("status", "")).lower()
        if status not in ("fail", "warn", "warning"):
            continue
        gpu = result.get("gpu_ids", result.get("gpu_id", result.get("entity_id")))
        where = f"{node} GPU {gpu}" if gpu not in (None, "") else node
        evidence = f"{where}: DCGM {test}: {result.get('status')}"
        if why := _messages(result):
            evidence += f": {why}"
        fix = "see NVIDIA's DCGM diagnostics guide for this test; drain the node if it recurs"
        yield (failed if status == "fail" else warned)(node, evidence, fix)


def _messages(result: dict) -> str:
    texts = []
    for key in ("warnings", "errors"):
        for item in result.get(key) or []:
            if isinstance(item, dict):
                text = item.get("warning") or item.get("error") or item.get("message")
            else:
                text = item
            if text:
                texts.append(str(text).strip())
    if not texts and result.get("info"):
        info = result["info"]
        texts.append("; ".join(map(str, info)) if isinstance(info, list) else str(info))
    return "; ".join(texts)[:400]
