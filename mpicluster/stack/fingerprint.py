"""Build fingerprints: nodes with the same one share one build.

A fingerprint hashes what a build depends on: the node's OS release and
architecture, its compiler, Python and CUDA versions, the GPU architectures
the build targets, every component's version, checksum and options, the
wheelhouse contents, and the build recipe itself (the roles that build it).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpicluster.cluster.lockfile import Source
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes.facts import release
from mpicluster.stack.sources import built_on, site_ucx
from mpicluster.util.errors import UsageError
from mpicluster.util.paths import data_path

#: The role files that decide what a build produces (not how it is packed or checked).
RECIPE_FILES = (
    "build_deps/defaults/main.yml",
    "build_deps/tasks/main.yml",
    "stack_build/defaults/main.yml",
    "stack_build/tasks/build.yml",
    "stack_build/tasks/stage_inputs.yml",
    "stack_build/tasks/ucx.yml",
    "stack_build/tasks/ucc.yml",
    "stack_build/files/cuda_link.sh",
    "stack_build/tasks/openmpi.yml",
    "stack_build/tasks/openmpi_cuda.yml",
    "stack_build/tasks/nccl.yml",
    "stack_build/tasks/nccl_tests.yml",
    "stack_build/tasks/cuda_allreduce.yml",
    "stack_build/files/cuda_allreduce.c",
    "stack_build/tasks/python.yml",
    "stack_build/tasks/torch.yml",
    "stack_build/tasks/horovod.yml",
)


@dataclass(frozen=True)
class Platform:
    os: str
    arch: str
    python: str
    gcc: str | None
    cuda: str | None
    gpu_archs: tuple[str, ...]

    @classmethod
    def for_wheels(cls, python: str, arch: str, cuda: str | None = None) -> Platform:
        """Just what the wheelhouse depends on, for `fetch` without reaching the nodes;
        UsageError for a value no node reports (before anything is downloaded)."""
        if not re.fullmatch(r"3\.[0-9]{1,2}", python):
            raise UsageError(f"--python {python!r}: a Python version like 3.11")
        if not re.fullmatch(r"[a-z0-9_]{1,20}", arch):
            raise UsageError(f"--arch {arch!r}: an architecture like x86_64 or aarch64")
        if cuda is not None and not re.fullmatch(r"1[0-9]\.[0-9]{1,2}(\.[0-9]+)?", cuda):
            raise UsageError(f"--cuda {cuda!r}: the GPU nodes' CUDA release, like 13.0")
        return cls(os="", arch=arch, python=python, gcc=None, cuda=cuda, gpu_archs=())

    @property
    def wheel_target(self) -> str:
        """Names the wheelhouse this platform installs from."""
        return f"cp{self.python.replace('.', '')}-{self.arch}"


def platform_of(facts: dict[str, Any], plan: ClusterPlan, gpus: int) -> Platform:
    archs: tuple[str, ...] = ()
    cuda = facts.get("cuda") if gpus else None
    if gpus:
        devices = (facts.get("gpus") or {}).get("devices") or []
        wanted = plan.stack.nccl.cuda_archs or [d["compute_cap"] for d in devices]
        archs = tuple(sorted(set(wanted)))
    return Platform(
        os=release(facts),
        arch=facts["arch"],
        python=facts["python"],
        gcc=facts.get("gcc"),
        cuda=cuda,
        gpu_archs=archs,
    )


#: The module that writes the configure lines and build switches the roles run with.
RECIPE_MODULE = Path(__file__).with_name("recipe.py")


def recipe_digest(recipe_module: Path = RECIPE_MODULE) -> str:
    """Changes whenever the build recipe changes: the role files and the module that
    gives them configure arguments (a changed argument is another build)."""
    digest = hashlib.sha256()
    roles = data_path("playbooks") / "roles"
    for name in RECIPE_FILES:
        digest.update(name.encode())
        digest.update((roles / name).read_bytes())
    digest.update(recipe_module.read_bytes())
    return digest.hexdigest()


def options(plan: ClusterPlan, platform: Platform) -> dict[str, Any]:
    stack = plan.stack
    cuda_aware = stack.openmpi.cuda if stack.openmpi.cuda != "auto" else platform.cuda is not None
    site = site_ucx(plan)
    # The site's UCX by its folder alone: its version is not read from the nodes, whose
    # run-time files do not name it (ucx.pc comes with its development files, which
    # only the builder needs), and a fingerprint that read it would split nodes that
    # share one UCX. UCX keeps its ABI within 1.x (libucp.so.0): a UCX updated in place
    # still runs the stack built against the older one.
    ucx = {"ucx": {"prefix": site}} if site else {}
    return ucx | {
        "prefix": stack.prefix,
        "openmpi": {
            "cuda": bool(cuda_aware),
            # a build for nodes without GPUs may link a libcuda stub and quiets the
            # CUDA components' load errors: never shared with real GPU nodes
            "gpus_present": stack.gpus_present if cuda_aware else None,
            "fortran": stack.openmpi.fortran,
            "configure_args": list(stack.openmpi.configure_args),
        },
        "nccl": {"only_funcs": stack.nccl.only_funcs} if platform.cuda else None,
        "horovod": {
            "enabled": stack.horovod.enabled,
            "frameworks": sorted(stack.horovod.frameworks),
        },
        # which build of PyTorch is in the wheels digest; which NCCL it loads is here
        "pytorch": {
            "enabled": stack.pytorch.enabled,
            "nccl": stack.pytorch.nccl if platform.cuda else None,
        },
    }


def fingerprint(
    platform: Platform,
    sources: list[Source],
    plan: ClusterPlan,
    wheels_digest: str,
    recipe: str,
) -> tuple[str, dict[str, Any]]:
    """(short fingerprint, the document it hashes) for one platform."""
    document = {
        "platform": platform.__dict__ | {"gpu_archs": list(platform.gpu_archs)},
        "sources": {
            s.component: {"version": s.version, "sha256": s.sha256}
            | ({"patches": [p.sha256 for p in s.patches]} if s.patches else {})
            for s in built_on(sources, platform.cuda)
        },
        "options": options(plan, platform),
        "wheels": wheels_digest,
        "recipe": recipe,
    }
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16], document
