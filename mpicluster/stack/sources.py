"""Which sources a cluster needs: the lockfile's pins, overridden by the plan.

The lockfile (mpicluster/data/stack.lock.yaml, read by `mpicluster.cluster.lockfile`)
pins, for every component, where each release's file comes from and its sha256;
`default` is what an inventory gets when it names no version. A version like `5.0.x`
means the newest pinned release of that series. An inventory may give `url` and
`sha256` (and an exact `version`) for anything else, a local file included.
"""

from __future__ import annotations

from typing import Any

from mpicluster.cluster.lockfile import Source, default_version, resolve
from mpicluster.cluster.plan import ClusterPlan


def site_ucx(plan: ClusterPlan) -> str | None:
    """The site's own UCX the stack's Open MPI is built against (stack.ucx.prefix: HPC-X,
    DOCA), or None: UCX is built into the stack, or there is none."""
    stack = plan.stack
    return stack.ucx.prefix if stack.install == "source" else None


def ucx_wanted(plan: ClusterPlan, facts: dict[str, dict[str, Any]]) -> bool:
    """Whether the stack has UCX: as the inventory says, or ("auto") where any node has
    an RDMA device or GPUs beside a CUDA-aware Open MPI (UCX's CUDA transports carry
    point-to-point on device buffers, and UCC needs UCX), or the site's own (a prefix
    means true). One answer for the whole cluster: ranks whose Open MPIs pick different
    PMLs (ucx on one node, ob1 on another) cannot talk."""
    if site_ucx(plan):
        return True
    enabled = plan.stack.ucx.enabled
    if enabled != "auto":
        return bool(enabled)
    if ucx_with_cuda_possible(plan):
        return True
    return any((facts.get(n.name) or {}).get("rdma") for n in plan.nodes)


def ucc_wanted(plan: ClusterPlan, ucx: bool) -> bool:
    """Whether the stack has UCC (Open MPI's coll/ucc): as the inventory says, or
    ("auto") beside UCX where GPUs and a CUDA-aware Open MPI are; never without the
    stack's own UCX (a site's HPC-X brings its UCC: stack.openmpi.configure_args
    ["--with-ucc=<hpcx>/ucc"])."""
    enabled = plan.stack.ucc.enabled
    if not ucx or enabled is False or site_ucx(plan):
        return False
    return enabled is True or ucx_with_cuda_possible(plan)


def ucx_with_cuda_possible(plan: ClusterPlan) -> bool:
    """Whether UCX may be built with CUDA for this inventory (whatever the nodes' RDMA
    devices say): UCX not turned off nor the site's, Open MPI not kept from CUDA, some
    node with GPUs."""
    stack = plan.stack
    built = stack.ucx.enabled is not False and not site_ucx(plan)
    return plan.has_gpus and built and stack.openmpi.cuda is not False


def needed(plan: ClusterPlan, ucx: bool = False) -> list[Source]:
    """The sources `up` needs for this inventory (none for `install: packages`); UCX's
    when `ucx` (ucx_wanted's answer), unless the site's own UCX is used."""
    stack = plan.stack
    if stack.install != "source":
        return []
    wanted = ["openmpi", "mpi4py"]
    if ucx and not site_ucx(plan):
        wanted.append("ucx")
    openmpi = resolve("openmpi", stack.openmpi.version, stack.openmpi.url, stack.openmpi.sha256)
    # coll/ucc is Open MPI 5's (4.1's configure has no --with-ucc)
    if ucc_wanted(plan, ucx) and int(openmpi.version.split(".")[0]) >= 5:
        wanted.append("ucc")
    if plan.has_gpus:
        wanted.append("nccl")
        if stack.nccl_tests.enabled:
            wanted.append("nccl_tests")
    if stack.horovod.enabled:
        wanted.append("horovod")
    return [
        resolve(
            name,
            getattr(stack, name).version,
            getattr(stack, name).url,
            getattr(stack, name).sha256,
        )
        for name in wanted
    ]


#: What only GPU nodes build (a CPU node's fingerprint and build leave them out).
GPU_COMPONENTS = frozenset({"nccl", "nccl_tests"})


def built_on(needed: list[Source], cuda: str | None) -> list[Source]:
    """The sources a node builds: the GPU components only where it has CUDA."""
    return [s for s in needed if cuda or s.component not in GPU_COMPONENTS]


def pytorch_version(plan: ClusterPlan) -> str:
    return plan.stack.pytorch.version or default_version("pytorch")


def torch_requirement(plan: ClusterPlan) -> str | None:
    """What pip is asked for PyTorch (None: the stack's Python has no PyTorch)."""
    torch = plan.stack.pytorch
    if plan.stack.install != "source" or not torch.enabled:
        return None
    return pip_requirement(pytorch_version(plan), torch.cuda)


def pip_requirement(version: str, cuda: bool | str) -> str:
    """What pip is asked for. PyTorch labels its CPU builds "+cpu" (PyPI's Linux wheels
    are CUDA builds without a label), and `==V` also matches `V+cpu`, which pip prefers
    where both are offered: a CUDA build is asked for by leaving "+cpu" out."""
    if cuda is True:
        return f"torch=={version},!={version}+cpu"
    if cuda is False:
        return f"torch=={version}+cpu"
    return f"torch=={version}"
