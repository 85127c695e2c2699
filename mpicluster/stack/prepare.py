"""Get a source install ready to run: sources and wheels cached, fingerprints planned,
and the variables the build and install roles read."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpicluster import __version__
from mpicluster.cluster.layout import site_ucx_lib
from mpicluster.cluster.lockfile import Source
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import facts as node_facts
from mpicluster.stack import (
    artifacts,
    autogen,
    cluster_packages,
    cuda_compat,
    disk_need,
    distribute,
    recipe,
    sources,
    wheels,
)
from mpicluster.stack.builds import Group, plan_builds
from mpicluster.stack.cache import CachedFile, SourceCache
from mpicluster.stack.fingerprint import Platform, platform_of, recipe_digest
from mpicluster.util.errors import MpiclusterError, UsageError

Progress = Callable[[str], None]

#: Downloads at once (sources and wheelhouses).
FETCH_WORKERS = 6
#: Horovod 0.28.x files that force C++14 (see the stack_build role's horovod.yml).
HOROVOD_CXX14_FILES = ["CMakeLists.txt", "horovod/torch/CMakeLists.txt"]


@dataclass
class StackPlan:
    groups: list[Group] = field(default_factory=list)
    variables: dict[str, Any] = field(default_factory=dict)
    host_vars: dict[str, dict[str, Any]] = field(default_factory=dict)
    builders: list[str] = field(default_factory=list)
    installers: list[str] = field(default_factory=list)
    #: What `up`'s plan says beside the groups (CUDA newer than a driver's, by a minor).
    notes: list[str] = field(default_factory=list)
    #: The nodes that lack the cluster's packages (python.requirements) as resolved now.
    packages_to: list[str] = field(default_factory=list)


def cache_of(plan: ClusterPlan) -> SourceCache:
    return SourceCache(plan.sources.cache, plan.sources.mirror)


@dataclass
class FetchResult:
    """What the source cache holds for an inventory: each component's file, and one
    wheelhouse per node platform."""

    files: dict[str, CachedFile]
    houses: dict[str, wheels.Wheelhouse]
    #: the cluster's own packages (python.requirements) per platform; empty: none asked
    packages: dict[str, cluster_packages.ClusterPackages] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster_packages": {t: p.to_dict() for t, p in self.packages.items()},
            "sources": {
                name: {
                    "version": f.source.version,
                    "path": str(f.path),
                    "fetched": f.fetched,
                    "sha256": f.source.sha256,
                }
                for name, f in self.files.items()
            },
            "wheelhouses": {
                target: {"path": str(h.path), "files": len(h.files), "digest": h.digest}
                for target, h in self.houses.items()
            },
        }


def fetch(
    plan: ClusterPlan,
    platforms: Iterable[Platform],
    progress: Progress,
    *,
    ucx: bool,
    offline: bool = False,
) -> FetchResult:
    """Every source and wheelhouse the inventory needs (UCX's where `ucx`), verified, in
    the cache."""
    cache = cache_of(plan)
    platforms = list(platforms)
    wanted_torch = sources.torch_requirement(plan)
    wanted = stack_wheels(plan, platforms)
    targets = {p.wheel_target: p for p in platforms}
    # Every download at once: each is a pip or apt-get start and an index's answer
    # before any bytes (10 s one after the other for a cold demo, 4.5 s at once).
    with ThreadPoolExecutor(max_workers=FETCH_WORKERS, thread_name_prefix="fetch") as pool:
        try:
            index_url = plan.stack.pytorch.index_url if wanted_torch else None
            return _fetched(pool, cache, plan, ucx, targets, wanted, index_url, progress, offline)
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)  # the first failure, said at once
            raise


def _fetched(
    pool: ThreadPoolExecutor,
    cache: SourceCache,
    plan: ClusterPlan,
    ucx: bool,
    targets: dict[str, Platform],
    wanted: list[str],
    index_url: str | None,
    progress: Progress,
    offline: bool,
) -> FetchResult:
    """Every download submitted to `pool`, then each waited for in the lockfile's order
    (the first failure raised is the first component's)."""
    pending = {
        source.component: pool.submit(cache.ensure, source, progress, offline=offline)
        for source in sources.needed(plan, ucx)
    }
    building = {
        target: pool.submit(
            wheels.ensure_wheelhouse,
            cache.root,
            platform,
            wanted,
            progress,
            offline=offline,
            index_url=index_url,
        )
        for target, platform in targets.items()
    }
    files = {name: future.result() for name, future in pending.items()}
    houses = {target: future.result() for target, future in building.items()}
    lines = plan.python_requirements
    if not lines:
        return FetchResult(files, houses)
    # the cluster's packages with the stack's pinned: after the stack's wheelhouses
    built = {name: files[name].source.version for name in ("mpi4py", "horovod") if name in files}
    resolving = {
        target: pool.submit(
            cluster_packages.resolve,
            cache.root,
            platform,
            lines,
            cluster_packages.stack_pins(houses[target], built),
            progress,
            offline=offline,
            index_url=index_url,
        )
        for target, platform in targets.items()
    }
    return FetchResult(files, houses, {t: f.result() for t, f in resolving.items()})


def fetch_for(
    plan: ClusterPlan,
    progress: Progress,
    *,
    python: str | None = None,
    arch: str = "x86_64",
    cuda: str | None = None,
) -> FetchResult:
    """`mpicluster fetch`: what the nodes need, asked over SSH; or, given `python` (nodes
    that cannot be reached), the platforms it and `arch`/`cuda` describe, with UCX's
    sources unless the inventory turns UCX off (or names the site's own)."""
    if python:
        wanted = platforms_unasked(plan, python, arch, cuda)
        ucx = plan.stack.ucx.enabled is not False
    else:
        facts = node_facts.gather(plan)
        wanted = list(platforms(plan, facts).values())
        ucx = sources.ucx_wanted(plan, facts)
    return fetch(plan, wanted, progress, ucx=ucx)


def stack_wheels(plan: ClusterPlan, platforms: list[Platform]) -> list[str]:
    """What the stack's wheelhouse is asked for (its manifest records it)."""
    wanted_torch = sources.torch_requirement(plan)
    wanted = wheels.requirements(plan.stack.horovod.enabled, wanted_torch)
    return wanted + nvml_requirements(plan, platforms)


def job_packages(
    plan: ClusterPlan,
    facts: dict[str, dict[str, Any]],
    lines: list[str],
    progress: Progress,
) -> dict[str, cluster_packages.ClusterPackages]:
    """A job's own packages (`run --requirements`), per node: resolved on this machine
    for each node's platform, with the stack's packages (and the cluster's) pinned to
    what the nodes have. The stack's wheelhouse must be in the cache (`up` put it there)."""
    cache = cache_of(plan)
    by_node = platforms(plan, facts)
    wanted = stack_wheels(plan, list(by_node.values()))
    index_url = plan.stack.pytorch.index_url if sources.torch_requirement(plan) else None
    built = {
        s.component: s.version
        for s in sources.needed(plan, False)
        if s.component in ("mpi4py", "horovod")
    }
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]
    found: dict[str, cluster_packages.ClusterPackages] = {}
    for platform in {p.wheel_target: p for p in by_node.values()}.values():
        house = wheels.ensure_wheelhouse(
            cache.root, platform, wanted, progress, offline=True, index_url=index_url
        )
        pins = cluster_packages.stack_pins(house, built)
        cluster_lines = plan.python_requirements
        if cluster_lines:
            ours = cluster_packages.resolve(
                cache.root,
                platform,
                cluster_lines,
                pins,
                progress,
                offline=True,
                index_url=index_url,
            )
            pins = dict(sorted((pins | ours.install).items()))
        found[platform.wheel_target] = cluster_packages.resolve(
            cache.root, platform, lines, pins, progress, index_url=index_url, kind=f"job-{digest}"
        )
    return {name: found[p.wheel_target] for name, p in by_node.items()}


def nvml_requirements(plan: ClusterPlan, platforms: list[Platform]) -> list[str]:
    """NVML's header wheel for each CUDA release among the platforms, for UCX's CUDA
    support where a toolkit lacks nvml.h (recipe.ucx_cuda): wanted wherever UCX may be
    built beside a CUDA-aware Open MPI, whatever the nodes' RDMA devices say, so that
    `fetch` without the nodes (--python, --cuda) fills the wheelhouse `up` asks for."""
    if not sources.ucx_with_cuda_possible(plan):
        return []
    return sorted({recipe.nvml_requirement(p.cuda) for p in platforms if p.cuda})


def prepare(
    plan: ClusterPlan,
    facts: dict[str, dict[str, Any]],
    progress: Progress,
    *,
    offline: bool = False,
) -> StackPlan:
    ucx = sources.ucx_wanted(plan, facts)
    fetched = fetch(plan, platforms(plan, facts).values(), progress, ucx=ucx, offline=offline)
    cached, houses = fetched.files, fetched.houses
    notes = check_drivers(plan, facts, houses)
    files = {name: entry.path for name, entry in cached.items()}
    needed = [entry.source for entry in cached.values()]  # the files actually used
    if plan.sources.autogen == "control":  # a dry run uses one made before, makes none
        files = autogen.apply(files, needed, make=not offline)
    cache_dir = plan.sources.artifacts
    cache_dir.mkdir(parents=True, exist_ok=True)
    groups = plan_builds(
        plan,
        facts,
        needed,
        {t: h.digest for t, h in houses.items()},
        recipe_digest(),
        cache_dir,
    )
    result = StackPlan(groups, notes=notes)
    for group in groups:
        if group.install and not group.builder and group.artifact is not None:
            progress(f"Checking {group.artifact.name} against its recorded sha256")
            artifacts.verify(group.artifact)
    specs = {}
    for group in groups:
        specs[group.fingerprint] = _group_spec(
            plan,
            plan.layout.stack_dir(group.fingerprint),
            group,
            needed,
            files,
            houses[group.platform.wheel_target],
        )
        for name in group.nodes:
            result.host_vars[name] = {"mpicluster_stack_fingerprint": group.fingerprint}
            if name in group.repair:
                result.host_vars[name]["mpicluster_stack_repair"] = True
            if name in group.install or name == group.builder:
                result.host_vars[name]["preflight_min_free_kb"] = disk_need.needed_kib(
                    specs[group.fingerprint], builder=name == group.builder
                )
        if note := _cpu_nodes_cuda_torch(group, specs[group.fingerprint]["pytorch"]):
            result.notes.append(note)
        if group.builder:
            result.builders.append(group.builder)
        result.installers += group.install
    result.variables = {
        "mpicluster_stack_groups": specs,
        "mpicluster_python_packages": _packages_spec(groups, fetched.packages, facts, result),
    }
    return result


def _packages_spec(
    groups: list[Group],
    packages: dict[str, cluster_packages.ClusterPackages],
    facts: dict[str, dict[str, Any]],
    result: StackPlan,
) -> dict[str, Any] | None:
    """The cluster's packages per fingerprint (None: none asked): what the nodes install,
    from which archive; the nodes that lack them get the archive node to node (host
    vars, not inputs of the record: the same packages make the same inputs)."""
    if not packages:
        return None
    specs = {}
    for group in groups:
        found = packages[group.platform.wheel_target]
        archive = wheels.archive_of(found.path, found.files, found.digest)
        specs[group.fingerprint] = {
            "digest": found.digest,
            "install": found.install,
            "archive": str(archive),
            "sha256": wheels.archive_sha256(archive),
            "python": group.platform.python,
        }
        needing = [
            n for n in group.nodes if (facts.get(n) or {}).get("cluster_packages") != found.digest
        ]
        for name in needing:
            result.host_vars.setdefault(name, {})["mpicluster_packages_needed"] = True
        result.packages_to += needing
        if needing:
            result.host_vars[needing[0]]["mpicluster_packages_relay"] = distribute.tree(needing)
    return specs


def check_drivers(
    plan: ClusterPlan, facts: dict[str, dict[str, Any]], houses: dict[str, wheels.Wheelhouse]
) -> list[str]:
    """Refuse, before anything is built, a GPU node whose driver cannot run the CUDA of
    its toolkit or of the wheelhouse's PyTorch (one line per node, with the fix); return
    the notes for what runs under minor version compatibility."""
    if not plan.stack.gpus_present:
        return []  # no driver to ask: the stack is built for GPUs that are not there
    requirement = sources.torch_requirement(plan)
    refused: dict[str, str] = {}
    notes: list[str] = []
    for node in plan.gpu_nodes:
        seen = facts.get(node.name) or {}
        gpus = seen.get("gpus") or {}
        torch = None
        if requirement:
            house = houses[platform_of(seen, plan, node.gpus).wheel_target]
            wheel = wheels.torch_wheel(house, requirement)
            if wheel and wheel.cuda_version:
                torch = (wheel.version, wheel.cuda_version)
        wanted = cuda_compat.needs(seen.get("cuda"), plan.stack.cuda_home, torch)
        if why := cuda_compat.refusal(gpus.get("driver"), gpus.get("cuda"), wanted):
            refused[node.name] = why
        notes += [f"{node.name}: {note}" for note in cuda_compat.notes(gpus.get("cuda"), wanted)]
    if refused:
        first, why = next(iter(refused.items()))
        more = f" (and {len(refused) - 1} more node(s))" if len(refused) > 1 else ""
        raise MpiclusterError(f"{first}: {why}{more}; nothing was changed on any node")
    return sorted(set(notes))


def _cpu_nodes_cuda_torch(group: Group, torch: dict[str, Any] | None) -> str | None:
    """A plan line where nodes without GPUs get a CUDA build of PyTorch (PyPI's Linux
    wheels are CUDA builds: several GB with their CUDA libraries), and where a CPU one is."""
    if not (group.install and torch and torch["cuda"]) or group.platform.cuda:
        return None
    return (
        f"Stack {group.fingerprint}: PyTorch {torch['version']} is a CUDA build, on nodes "
        "without GPUs: it runs on their CPUs; PyTorch's own index has a smaller CPU build "
        f"(stack.pytorch.index_url: {cuda_compat.PYTORCH_CPU_INDEX})"
    )


def platforms_unasked(
    plan: ClusterPlan, python: str, arch: str, cuda: str | None
) -> list[Platform]:
    """The nodes' platform as `fetch --python --arch --cuda` gives it, for a wheelhouse
    made without reaching them; UsageError where GPU nodes' CUDA release is needed (NVML's
    header wheel follows it) and not given."""
    if cuda is None and sources.ucx_with_cuda_possible(plan):
        raise UsageError(
            "--python: the inventory has GPU nodes, whose wheelhouse holds NVML's header "
            "for UCX's CUDA support: give their CUDA release with --cuda (e.g. 13.0)"
        )
    return [Platform.for_wheels(python, arch, cuda if plan.has_gpus else None)]


def platforms(plan: ClusterPlan, facts: dict[str, dict[str, Any]]) -> dict[str, Platform]:
    return {n.name: platform_of(facts[n.name], plan, n.gpus) for n in plan.nodes}


def _group_spec(
    plan: ClusterPlan,
    stack_dir: str,
    group: Group,
    needed: list[Source],
    files: dict[str, Path],
    house: wheels.Wheelhouse,
) -> dict[str, Any]:
    cuda_home = plan.stack.cuda_home if group.platform.cuda else None
    by_name = {s.component: s for s in sources.built_on(needed, cuda_home)}
    spec: dict[str, Any] = {
        **_delivery_spec(group, files, house, by_name),
        **_mpi_spec(plan, group, by_name, stack_dir, cuda_home),
        "build_requirements": list(wheels.BUILD_REQUIREMENTS),
        "tools": list(wheels.TOOLS),
        **_nccl_spec(plan, group, by_name, cuda_home),
        "horovod": None,
        "record": {
            "fingerprint": group.fingerprint,
            "inputs": group.document,
            "versions": {name: source.version for name, source in by_name.items()},
            "mpicluster": __version__,
        },
    }
    torch = torch_spec(plan, house, spec["nccl"] is not None, by_name.get("nccl"))
    spec["pytorch"] = torch
    if torch:
        spec["record"]["versions"]["pytorch"] = sources.pytorch_version(plan)
        spec["record"]["pytorch"] = {"cuda": torch["cuda"], "nccl": torch["nccl"]}
    if plan.stack.horovod.enabled:
        spec["horovod"] = _horovod_spec(
            group, by_name["horovod"], spec["nccl"], torch, cuda_home, stack_dir
        )
    return spec


def _delivery_spec(
    group: Group, files: dict[str, Path], house: wheels.Wheelhouse, by_name: dict[str, Source]
) -> dict[str, Any]:
    """Where the group's pack goes and what it is made from: artifact, builder, relay,
    wheelhouse and the cached source files."""
    return {
        "artifact": str(group.artifact),
        "builder": group.builder,  # None: installed from the artifact cache
        # how the pack reaches the nodes that install it (None: no node does); the
        # builder has the tree already
        "relay": distribute.tree([n for n in group.install if n != group.builder]),
        "wheelhouse": str(house.path),
        "wheelhouse_archive": str(wheels.archive(house)),
        "sources": {
            name: {
                "path": str(files[name]),
                "filename": files[name].name,
                "version": source.version,
            }
            for name, source in by_name.items()
        },
    }


def _mpi_spec(
    plan: ClusterPlan,
    group: Group,
    by_name: dict[str, Source],
    stack_dir: str,
    cuda_home: str | None,
) -> dict[str, Any]:
    """How Open MPI (and UCX beside it) are configured, and with which CUDA, if any; or
    against the site's own UCX (stack.ucx.prefix), with nothing of UCX built."""
    stack = plan.stack
    site = sources.site_ucx(plan)
    site_lib = site_ucx_lib(site)
    cuda_aware = bool(group.document["options"]["openmpi"]["cuda"])
    # the CUDA that Open MPI (and UCX beside it) are built against; None: no CUDA
    mpi_cuda_home = cuda_home if cuda_aware else None
    return {
        "openmpi_configure_args": recipe.openmpi_configure_args(
            by_name["openmpi"],
            stack_dir,
            cuda_home=mpi_cuda_home,
            fortran=stack.openmpi.fortran,
            extra=list(stack.openmpi.configure_args),
            ucx=stack_dir if "ucx" in by_name else site,
            ucc="ucc" in by_name,
        ),
        "prte_defaults": recipe.prte_defaults(by_name["openmpi"]),
        "openmpi_docs_left_out": list(recipe.OPENMPI_DOCS_LEFT_OUT),
        "ucx": _ucx_spec(by_name, stack_dir, mpi_cuda_home, gpus_present=stack.gpus_present),
        "ucc": _ucc_spec(by_name, stack_dir, mpi_cuda_home, group.platform.gpu_archs),
        "ucc_defaults": dict(recipe.UCC_DEFAULTS) if "ucc" in by_name else {},
        "site_ucx": site,
        # what the builder's runs of the new Open MPI (its checks, mpi4py's and Horovod's
        # builds) need to load a site's UCX: the nodes' own environment comes later
        "build_env": {"LD_LIBRARY_PATH": site_lib} if site_lib else {},
        "cuda_aware": cuda_aware,
        "openmpi_cuda": (
            recipe.openmpi_cuda(by_name["openmpi"], mpi_cuda_home, gpus_present=stack.gpus_present)
            if mpi_cuda_home
            else None
        ),
    }


def _ucx_spec(
    by_name: dict[str, Source], stack_dir: str, mpi_cuda_home: str | None, *, gpus_present: bool
) -> dict[str, Any] | None:
    """UCX's build, None where the stack has no UCX."""
    if "ucx" not in by_name:
        return None
    return {
        "version": by_name["ucx"].version,
        "configure_args": recipe.ucx_configure_args(stack_dir, mpi_cuda_home),
        "cuda": (
            recipe.ucx_cuda(mpi_cuda_home, gpus_present=gpus_present) if mpi_cuda_home else None
        ),
        "subdirs": list(recipe.UCX_SUBDIRS),
    }


def _ucc_spec(
    by_name: dict[str, Source], stack_dir: str, mpi_cuda_home: str | None, archs: tuple[str, ...]
) -> dict[str, Any] | None:
    """UCC's build (after UCX and NCCL, before Open MPI), None where the stack has none.
    With CUDA it links what UCX's CUDA support gathered (ucx.yml's cuda_link.sh)."""
    if "ucc" not in by_name:
        return None
    return {
        "version": by_name["ucc"].version,
        "configure_args": recipe.ucc_configure_args(
            stack_dir, mpi_cuda_home, archs, nccl="nccl" in by_name
        ),
        "cuda": mpi_cuda_home is not None,
    }


def _nccl_spec(
    plan: ClusterPlan, group: Group, by_name: dict[str, Source], cuda_home: str | None
) -> dict[str, Any]:
    """The "nccl" and "nccl_tests" entries: built only where there is CUDA (else None)."""
    spec: dict[str, Any] = {"nccl": None, "nccl_tests": None}
    if "nccl" in by_name:
        archs = group.platform.gpu_archs
        spec["nccl"] = {
            "archs": list(archs),
            "cuda_home": cuda_home,
            "gencode": recipe.nvcc_gencode(archs),
            "only_funcs": plan.stack.nccl.only_funcs or "",
        }
        if "nccl_tests" in by_name:
            spec["nccl_tests"] = {"binaries": list(recipe.NCCL_TESTS)}
    return spec


def _horovod_spec(
    group: Group,
    source: Source,
    nccl: dict[str, Any] | None,
    torch: dict[str, Any] | None,
    cuda_home: str | None,
    stack_dir: str,
) -> dict[str, Any]:
    """Horovod's build; GPU operations need the stack's NCCL and a CUDA build of PyTorch.
    The lockfile's patches are checked against their sha256 here, before any node is."""
    gpu_operations = bool(nccl) and bool(torch and torch["cuda"])
    return {
        "requirements": list(wheels.HOROVOD_REQUIREMENTS),
        "env": recipe.horovod_env(
            cuda_home=cuda_home if gpu_operations else None,
            nccl_home=stack_dir if gpu_operations else None,
            cuda_archs=group.platform.gpu_archs,
        ),
        "gpu_operations": gpu_operations,
        "cxx17_files": HOROVOD_CXX14_FILES,
        "patches": [
            {"path": str(patch.verified()), "file": patch.file, "sha256": patch.sha256}
            for patch in source.patches
        ],
    }


def torch_spec(
    plan: ClusterPlan, house: wheels.Wheelhouse, builds_nccl: bool, nccl: Source | None
) -> dict[str, Any] | None:
    """How a group installs PyTorch: the pip requirement, whether the wheel is a CUDA
    build, and which NCCL it loads ("stack": the wheel's copy is replaced by a link to
    the stack's, which must be at least as new as the one the wheel pins)."""
    requirement = sources.torch_requirement(plan)
    if requirement is None:
        return None
    wheel = wheels.torch_wheel(house, requirement)
    if wheel is None:
        raise MpiclusterError(
            f"the wheelhouse {house.path} has no PyTorch wheel for {requirement}",
            hint="check the version in stack.pytorch; a CPU build (cuda: false) needs an "
            f"index with +cpu wheels (PIP_EXTRA_INDEX_URL={cuda_compat.PYTORCH_CPU_INDEX})",
        )
    if plan.stack.pytorch.cuda is True and not wheel.cuda:
        raise MpiclusterError(f"stack.pytorch.cuda is true, but {wheel.filename} is a CPU build")
    chosen = "wheel"
    if plan.stack.pytorch.nccl == "stack" and builds_nccl and nccl is not None:
        if not wheel.cuda:
            raise MpiclusterError(
                f"stack.pytorch.nccl is stack, but {wheel.filename} is a CPU build without NCCL",
                hint="set stack.pytorch.cuda: true",
            )
        if wheel.nccl and recipe.release(nccl.version) < recipe.release(wheel.nccl):
            raise MpiclusterError(
                f"stack.pytorch.nccl is stack, but PyTorch {wheel.version} is built against "
                f"NCCL {wheel.nccl}, newer than the stack's {nccl.version}: it may call what "
                f"{nccl.version} lacks",
                hint=f"build NCCL {wheel.nccl} or newer (stack.nccl.version), "
                "or keep stack.pytorch.nccl: wheel",
            )
        chosen = "stack"
    return {
        "requirement": requirement,
        "version": wheel.version,
        "cuda": wheel.cuda,
        "cuda_version": wheel.cuda_version,
        "wheel_nccl": wheel.nccl,
        "nccl": chosen,
    }
