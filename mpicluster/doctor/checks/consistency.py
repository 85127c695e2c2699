"""Check 6: every node runs the same MPI build and the same versions of what sits on it
(mpi4py, Horovod, PyTorch, NCCL, CUDA, Python). Mixed builds hang or crash silently.

The reference is what most nodes have; the nodes that differ are named.
"""

from __future__ import annotations

from mpicluster.doctor.checks.common import UP, majority
from mpicluster.doctor.model import CheckReport, Result, failed, passed
from mpicluster.doctor.runner import Gathered
from mpicluster.nodes.facts import release
from mpicluster.nodes.mpi_version import mpi_name

NAME = "versions"
TITLE = "Consistency (MPI build, mpi4py, Horovod, NCCL, CUDA, Python on every node)"
COMPONENTS = [
    ("mpi", "MPI"),
    ("build", "build"),
    ("cuda_aware", "CUDA-aware MPI"),
    ("mpi4py", "mpi4py"),
    ("horovod", "Horovod"),
    ("torch", "PyTorch"),
    ("torch_build", "PyTorch build"),
    ("torch_nccl", "PyTorch's NCCL"),
    ("nccl", "NCCL"),
    ("cuda", "CUDA"),
    ("python", "Python"),
]


#: What each OS release has its own of: the build (its fingerprint, or the
#: distribution's mpirun binary), Python, and the PyTorch wheel for that Python (with the
#: NCCL it brings): Debian 12's may be PyTorch's CPU build (2.13.0+cpu) where Debian 13's
#: is PyPI's CUDA build (2.13.0), which has no CPU one for Python 3.13. A mixed cluster
#: (Debian 12 and 13 nodes) is fine with one of each per release as long as the MPI and
#: the versions of what sits on it (PyTorch 2.13.0 on both) agree.
PER_RELEASE = ("build", "python", "torch_build", "torch_nccl")
#: Compared, not shown: the PyTorch line shows the build ("2.13.0+cpu").
NOT_SHOWN = ("mpi", "build", "torch")


def build_of(versions: dict, install: str) -> str | None:
    """What identifies the build: the stack's fingerprint (source installs), else the
    binary mpirun resolves to and a digest of it."""
    if install == "source":
        return f"fingerprint {versions['fingerprint']}" if versions.get("fingerprint") else None
    identity = versions.get("mpi")
    if not identity:
        return None
    return f"{identity['real']} sha256:{identity['sha256']}"


def components(facts: dict, install: str) -> dict[str, str | None]:
    versions = facts.get("versions") or {}
    return {
        "mpi": mpi_name(versions.get("mpi")),
        "build": build_of(versions, install),
        "cuda_aware": versions.get("cuda_aware"),
        "mpi4py": versions.get("mpi4py"),
        "horovod": versions.get("horovod"),
        "torch": _public(versions.get("torch")),
        "torch_build": versions.get("torch"),
        "torch_nccl": _loaded(versions.get("torch_nccl")),
        "nccl": versions.get("nccl"),
        "cuda": versions.get("cuda"),
        "python": versions.get("python"),
    }


def _public(version: str | None) -> str | None:
    """A version without its local label: "2.13.0" of "2.13.0+cpu"."""
    return version.split("+", 1)[0] if version else None


def _loaded(torch_nccl: dict | None) -> str | None:
    """ "stack 2.29.7" or "wheel 2.29.7": which NCCL file PyTorch loads."""
    if not torch_nccl:
        return None
    return f"{torch_nccl['loads']} {torch_nccl.get('version') or '?'}"


def _torch_nccl_problem(g: Gathered, node: str) -> Result | None:
    """The build linked PyTorch to the stack's NCCL and the link is gone (a `pip install`
    in the stack's Python reinstalls nvidia-nccl's own file)."""
    versions = (g.facts(node) or {}).get("versions") or {}
    seen = versions.get("torch_nccl")
    if not seen or seen.get("expected") != "stack" or seen["loads"] == "stack":
        return None
    stack_lib = f"{g.layout.stack_dir(versions['fingerprint'])}/lib/libnccl.so.2"
    return failed(
        node,
        f"PyTorch loads its wheel's NCCL {seen.get('version') or '?'} ({seen['path']} is a "
        "file), but this build links it to the stack's NCCL (stack.pytorch.nccl: stack)",
        f"on {node}: ln -sf {stack_lib} {seen['path']} "
        "(something reinstalled nvidia-nccl in the stack's Python)",
    )


def check(g: Gathered) -> CheckReport:
    report = CheckReport(NAME, TITLE, not_checked=g.unprobed)
    found = {node: components(g.facts(node) or {}, g.layout.install) for node in g.probed}
    releases = {node: release(g.facts(node) or {}) for node in found}
    differences: dict[str, list[str]] = {node: [] for node in found}
    for key, label in COMPONENTS:
        groups = (
            [[n for n in found if releases[n] == r] for r in dict.fromkeys(releases.values())]
            if key in PER_RELEASE
            else [list(found)]
        )
        for group in groups:
            values = {node: found[node][key] for node in group}
            if all(v is None for v in values.values()):
                continue
            best, odd = majority(values)
            others = len(values) - len(odd)
            among = f" of {releases[group[0]]}" if key in PER_RELEASE and len(groups) > 1 else ""
            for node in odd:
                differences[node].append(
                    f"{label} {values[node] or 'missing'} (the other {others} node(s){among}: "
                    f"{best or 'missing'})"
                )
    for node, parts in found.items():
        if g.layout.install == "source" and parts["build"] is None:
            report.results.append(
                failed(
                    node,
                    f"no mpicluster build at {g.layout.current} ({g.layout.fingerprint_file} "
                    "is missing)",
                    f"{UP}: it builds the stack once and installs it on every node",
                )
            )
            continue
        if parts["mpi"] is None:
            report.results.append(
                failed(
                    node,
                    f"no mpirun at {g.layout.mpi_bin}/mpirun or in PATH",
                    f"{UP}: it installs the MPI stack ({g.layout.install} install)",
                )
            )
            continue
        # the node's own record says what PyTorch should load: a cause, not a difference
        problem = _torch_nccl_problem(g, node)
        if problem:
            report.results.append(problem)
            continue
        if differences[node]:
            report.results.append(_differs(g, node, parts, differences[node]))
            continue
        shown = [
            f"{'PyTorch' if key == 'torch_build' else label} {parts[key]}"
            for key, label in COMPONENTS
            if parts[key] and key not in NOT_SHOWN
        ]
        params = _params_differ(g, node, found)
        if params:
            report.results.append(params)
            continue
        mixed = len(set(releases.values())) > 1
        same = (
            f", same as every node (its {releases[node]} build, Python and PyTorch wheel as every "
            f"{releases[node]} node's: the cluster mixes {len(set(releases.values()))} releases)"
            if mixed
            else ", same as every node"
        )
        report.results.append(
            passed(
                node,
                f"{parts['mpi']} ({parts['build']})"
                + (f", {', '.join(shown)}" if shown else "")
                + (same if len(found) > 1 else ""),
            )
        )
    return report


def _differs(g: Gathered, node: str, parts: dict, differences: list[str]) -> Result:
    mpi = ((g.facts(node) or {}).get("versions") or {}).get("mpi") or {}
    if g.layout.install == "packages":
        fix = (
            f"make {node} run the same MPI as the others: `update-alternatives --display "
            f"mpirun` on {node} shows what {mpi.get('path', 'mpirun')} points to "
            "(`update-alternatives --auto mpirun` and `--auto mpi` restore Open MPI), or "
            "remove the other MPI"
        )
    else:
        fix = f"{UP}: it installs the cluster's build on {node} (by copy when it is cached)"
    return failed(node, f"{node} differs: {'; '.join(differences)}", fix)


def _params(facts: dict) -> dict[tuple[str, str, str], int]:
    """(file, key, value) -> line, of Open MPI's parameter files on a node."""
    files = ((facts.get("access") or {}).get("mca_files")) or {}
    return {(path, k, v): line for path, entries in files.items() for k, v, line in entries}


def _params_differ(g: Gathered, node: str, nodes) -> Result | None:
    """Open MPI's parameter files setting on `node` what most nodes' do not (or the
    other way round): every launch there obeys them."""
    settings = {n: frozenset(_params(g.facts(n) or {})) for n in nodes}
    best, odd = majority(settings)
    if node not in odd or best is None:
        return None
    mine = _params(g.facts(node) or {})
    extra = sorted(set(mine) - set(best))  # type: ignore[arg-type]
    lacking = sorted(set(best) - set(mine))  # type: ignore[arg-type]
    others = len(settings) - len(odd)
    said = [f"{p}:{mine[(p, k, v)]} sets `{k} = {v}`" for p, k, v in extra[:3]]
    said += [f"{p} lacks `{k} = {v}`" for p, k, v in lacking[:3]]
    return failed(
        node,
        f"Open MPI's parameter files differ on {node}: {'; '.join(said)} (the other "
        f"{others} node(s) agree with each other)",
        f"make {node}'s files match the others ("
        + "; ".join(
            [f"remove `{k} = {v}` from {p}:{mine[(p, k, v)]}" for p, k, v in extra[:3]]
            + [f"add `{k} = {v}` to {p}" for p, k, v in lacking[:3]]
        )
        + "): mpirun and every daemon read them on each launch, and nodes that disagree on "
        "MPI's settings fail or hang together",
    )
