"""The inventory: one YAML file that describes a cluster, validated in one place.

`load_inventory(path)` returns an `Inventory` or raises `InventoryError`, which
carries one `Problem` per thing wrong, each with the field's location and line.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)
from pydantic_core import PydanticCustomError

from mpicluster.cluster import requirements as requirements_text
from mpicluster.cluster import torch_versions, user_keys
from mpicluster.cluster import validators as names
from mpicluster.cluster.salvage import Parsed, salvage
from mpicluster.cluster.yamlsource import (
    Problem,
    YamlDocument,
    YamlSyntaxError,
    format_loc,
    load_text,
)
from mpicluster.util.errors import UsageError


def _check(problem_of):
    def validate(value: str) -> str:
        problem = problem_of(value)
        if problem:
            raise PydanticCustomError("mpicluster", problem)
        return value

    return AfterValidator(validate)


def _absolute_path(value: str) -> str:
    if not value.startswith("/"):
        raise PydanticCustomError("mpicluster", "must be an absolute path")
    bad = names.SHELL_METACHARACTERS & set(value)
    if bad:
        raise PydanticCustomError(
            "mpicluster", f"contains {sorted(bad)[0]!r}, a shell metacharacter"
        )
    _no_control_characters(value)
    return value.rstrip("/") or "/"


def _no_control_characters(value: str) -> str:
    # a newline would split an error line (and the ansible.cfg line a path goes into)
    bad = next((c for c in value if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        raise PydanticCustomError("mpicluster", f"contains the control character {bad!r}")
    return value


def _version(value: str) -> str:
    import re

    if not re.fullmatch(r"[0-9]+(\.[0-9]+){0,3}(\.x)?(-[0-9A-Za-z.]+)?|[0-9]+\.x", value):
        raise PydanticCustomError("mpicluster", "not a version (examples: 5.0.8, 5.0.x, 2.29.7-1)")
    return value


def _sha256(value: str) -> str:
    value = value.lower()
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise PydanticCustomError("mpicluster", "not a sha256 (64 hexadecimal characters)")
    return value


def _url(value: str) -> str:
    _no_control_characters(value)
    if value.startswith(("https://", "http://", "file://", "/")) and " " not in value:
        return value
    raise PydanticCustomError(
        "mpicluster", "not a URL (http://, https://, file:// or an absolute path)"
    )


Hostname = Annotated[str, _check(names.hostname_problem)]
Address = Annotated[str, _check(names.address_problem)]
ClusterName = Annotated[str, _check(names.cluster_name_problem)]
UserName = Annotated[str, _check(names.user_problem)]
InterfaceName = Annotated[str, _check(names.interface_problem)]
AccountName = Annotated[str, _check(names.account_problem)]
GroupName = Annotated[str, _check(names.group_problem)]
Port = Annotated[int, Field(ge=1, le=65535)]
AbsolutePath = Annotated[str, AfterValidator(_absolute_path)]
Version = Annotated[str, AfterValidator(_version)]
Sha256 = Annotated[str, AfterValidator(_sha256)]
Url = Annotated[str, AfterValidator(_url)]
UserPath = Annotated[str, Field(min_length=1), AfterValidator(_no_control_characters)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class SshSettings(_Model):
    """How the control machine reaches the nodes."""

    user: UserName | None = None
    port: Port = 22
    identity: UserPath | None = None
    known_hosts: UserPath | None = None
    accept_new_host_keys: bool = False
    become: bool = True
    connect_timeout: Annotated[int, Field(ge=1, le=300)] = 10


class NodeSsh(_Model):
    """Per-node overrides of the cluster-wide `ssh` settings."""

    user: UserName | None = None
    port: Port | None = None
    identity: UserPath | None = None


class Node(_Model):
    name: Hostname
    address: Address | None = None
    gpus: Annotated[int, Field(ge=0, le=64)] = 0
    slots: Annotated[int, Field(ge=1, le=4096)] | None = None
    ssh: NodeSsh = NodeSsh()

    @property
    def host(self) -> str:
        """Where to connect: the address, or the name when no address is given."""
        return self.address or self.name


class Network(_Model):
    """The network MPI traffic should use: an interface name or a CIDR (not both)."""

    interface: InterfaceName | None = None
    cidr: str | None = None

    @field_validator("cidr")
    @classmethod
    def _cidr(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            net = ipaddress.ip_network(value, strict=False)
        except ValueError:
            raise PydanticCustomError(
                "mpicluster", "not a network in CIDR notation (e.g. 10.0.0.0/24)"
            ) from None
        if str(net) != value and "/" in value:
            raise PydanticCustomError("mpicluster", f"has host bits set; did you mean {net}?")
        if "/" not in value:
            raise PydanticCustomError("mpicluster", f"needs a prefix length (e.g. {value}/24)")
        return value

    @property
    def selector(self) -> str | None:
        """What Open MPI's *_if_include parameters take."""
        return self.interface or self.cidr


def _true_false_auto(value: object) -> object:
    if value not in (True, False, "auto") or (
        isinstance(value, int) and not isinstance(value, bool)
    ):
        raise PydanticCustomError("mpicluster", "must be true, false or auto")
    return value


class Source(_Model):
    """Where a component's source comes from; unset fields come from the lockfile."""

    version: Version | None = None
    url: Url | None = None
    sha256: Sha256 | None = None


class OpenMPI(Source):
    #: Build CUDA-aware: true, false, or "auto" (when the node has CUDA).
    cuda: bool | Literal["auto"] = "auto"
    fortran: bool = False
    configure_args: list[Annotated[str, Field(min_length=1)]] = []

    _cuda = field_validator("cuda", mode="before")(_true_false_auto)


def _site_prefix(value: str) -> str:
    """A site's UCX folder: no `..` (the path is compared and shown as given) and not the
    root (a UCX's lib/ is never /lib)."""
    if ".." in value.split("/"):
        raise PydanticCustomError("mpicluster", "must not contain '..' (name the folder itself)")
    if value == "/":
        raise PydanticCustomError(
            "mpicluster", "the root folder holds no UCX (the distribution's UCX: /usr)"
        )
    return value


class Ucx(Source):
    #: Build UCX into the stack and Open MPI with it (pml ucx: InfiniBand and RoCE):
    #: true, false, or "auto" (when any node has an RDMA device; every node then gets the
    #: same build, since ranks that pick different PMLs cannot talk).
    enabled: bool | Literal["auto"] = "auto"
    #: The site's own UCX (HPC-X's <hpcx>/ucx, DOCA's or MLNX_OFED's /usr), the same path
    #: on every node: Open MPI is built against it and no UCX is built. Implies enabled.
    prefix: Annotated[AbsolutePath, AfterValidator(_site_prefix)] | None = None

    _enabled = field_validator("enabled", mode="before")(_true_false_auto)


class Ucc(Source):
    #: Build UCC beside UCX and Open MPI's coll/ucc with it (collectives on GPU buffers
    #: reduced on the GPU): true, false, or "auto" (where the stack has UCX and a
    #: CUDA-aware Open MPI, that is on GPU nodes).
    enabled: bool | Literal["auto"] = "auto"

    _enabled = field_validator("enabled", mode="before")(_true_false_auto)


class NCCL(Source):
    #: GPU architectures to build for, as compute capabilities ("9.0"); empty: those present.
    cuda_archs: list[Annotated[str, Field(pattern=r"^[0-9]{1,2}\.[0-9]a?$")]] = []
    #: NCCL's own development switch ONLY_FUNCS: build the device code of only these
    #: collectives (e.g. "AllReduce Sum f32 * *|SendRecv"). For test builds: a NCCL built
    #: with it cannot run the others. Unset builds them all.
    only_funcs: Annotated[str, Field(min_length=1, max_length=500)] | None = None


class NcclTests(Source):
    #: Build NVIDIA's nccl-tests (all_reduce_perf, ...) with MPI against the stack's NCCL.
    enabled: bool = True


class Mpi4py(Source):
    pass


class Horovod(Source):
    enabled: bool = True
    frameworks: list[Literal["pytorch"]] = ["pytorch"]
    #: How often Horovod's background thread looks for work, in ms (HOROVOD_CYCLE_TIME
    #: in the /etc/environment block); unset: Horovod's own 1 ms. Shorter: small
    #: operations wait less, the thread wakes more often.
    cycle_time_ms: Annotated[float, Field(ge=0.01, le=100)] | None = None


class PyTorch(_Model):
    #: Install PyTorch into the stack's Python (torch.distributed; Horovod builds on it).
    enabled: bool = True
    version: Version | None = None
    #: Which build: true takes a CUDA build (never a "+cpu" wheel), false a "+cpu" one
    #: (from an index that has them, e.g. PyTorch's CPU index), auto what the index gives.
    cuda: bool | Literal["auto"] = "auto"
    #: The NCCL that PyTorch loads: "wheel" (the one its wheels ship, as PyTorch tested
    #: it) or "stack" (the NCCL mpicluster built; at least the wheel's version).
    nccl: Literal["wheel", "stack"] = "wheel"
    #: An index pip asks beside PyPI for PyTorch (and its CUDA libraries), e.g. PyTorch's
    #: https://download.pytorch.org/whl/cu128 for a driver that runs CUDA 12.8: PyPI's
    #: default Linux build needs the newest CUDA. The wheelhouse is kept per index.
    index_url: Url | None = None

    _cuda = field_validator("cuda", mode="before")(_true_false_auto)


def _requirements(value: list[str] | str | None) -> list[str] | str | None:
    """A list of requirement lines (each checked), or the path of a file of them."""
    if isinstance(value, str):
        return _no_control_characters(value) if value else value
    for i, line in enumerate(value or []):
        problem = requirements_text.problem_of(line.strip())
        if problem:
            raise PydanticCustomError("mpicluster", f"[{i}]: {problem}")
    return [line.strip() for line in value] if value is not None else None


class Python(_Model):
    #: The cluster's own Python packages, beside the stack's (stack.install: source): a
    #: requirements file (relative to the inventory; requirement lines only) or a list of
    #: lines, e.g. ["transformers==4.46.0", "datasets"]. Resolved once on this machine
    #: with the stack's own packages pinned (a conflict is refused, naming both), carried
    #: to the nodes as the stack is, installed offline on every node.
    requirements: Annotated[list[str] | str | None, AfterValidator(_requirements)] = None


class Stack(_Model):
    install: Literal["source", "packages"] = "source"
    prefix: AbsolutePath = "/opt/mpicluster"
    cuda_home: AbsolutePath = "/usr/local/cuda"
    #: false: the nodes' GPUs are not there (CUDA nodes without GPUs): build the GPU
    #: stack for nccl.cuda_archs, skip the nvidia-smi check and the GPU smoke test.
    gpus_present: bool = True
    openmpi: OpenMPI = OpenMPI()
    ucx: Ucx = Ucx()
    ucc: Ucc = Ucc()
    nccl: NCCL = NCCL()
    nccl_tests: NcclTests = NcclTests()
    mpi4py: Mpi4py = Mpi4py()
    horovod: Horovod = Horovod()
    pytorch: PyTorch = PyTorch()


#: Slurm's time formats: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
#: days-hours:minutes, days-hours:minutes:seconds, or UNLIMITED.
_SLURM_TIME = re.compile(
    r"[0-9]+(:[0-9]{1,2})?|[0-9]+:[0-9]{1,2}:[0-9]{1,2}|[0-9]+-[0-9]+(:[0-9]{1,2}){0,2}|UNLIMITED"
)


def _slurm_time(value: str) -> str:
    if not _SLURM_TIME.fullmatch(value):
        raise PydanticCustomError(
            "mpicluster",
            "not a Slurm time limit (minutes, HH:MM:SS, D-HH:MM:SS or UNLIMITED; e.g. 2:00:00)",
        )
    return value


SlurmTime = Annotated[str, AfterValidator(_slurm_time)]


def _slurm_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,31}", value):
        raise PydanticCustomError(
            "mpicluster", "not a partition name (a letter, then letters, digits, _ or -; 1-32)"
        )
    return value


SlurmName = Annotated[str, AfterValidator(_slurm_name)]


class Partition(_Model):
    """A Slurm partition (a queue): its nodes, and the limits of the jobs it runs."""

    name: SlurmName
    #: Inventory node names; empty: every node.
    nodes: list[Hostname] = []
    #: The partition jobs go to when they name none (the first partition when none says).
    default: bool = False
    #: The longest a job may ask for; unset: no limit.
    max_time: SlurmTime | None = None
    #: What a job that asks for no time limit gets; unset: the cluster's default_time.
    default_time: SlurmTime | None = None


class Scheduler(_Model):
    """A batch scheduler on the cluster (Slurm, with munge and PMIx, from the distribution)."""

    type: Literal["slurm"]
    #: The node that runs slurmctld; unset: the head node (the first one).
    controller: Hostname | None = None
    #: Unset: one partition, "main", of every node.
    partitions: list[Partition] = []
    #: The time limit of a job that gives none; unset: the partition's max_time.
    default_time: SlurmTime | None = None


class Health(_Model):
    """The node's own health check (/usr/local/sbin/mpicluster-health)."""

    #: With Slurm: seconds between two runs of the check on every node (slurmd's
    #: HealthCheckInterval); a failing node is drained, and returned after two passes.
    interval: Annotated[int, Field(ge=5, le=86400)] = 300
    #: A site's own command, run at every drain or return (Slurm, on the node) and every
    #: cordon or return (on the control machine), with the node, the state and the
    #: reason as its three arguments.
    on_change: UserPath | None = None


def _extra_group(value: str) -> str:
    if value == "sudo":
        raise PydanticCustomError("mpicluster", "give sudo: true instead of the sudo group")
    if value == "root":
        raise PydanticCustomError("mpicluster", "the root group is not given to users")
    return value


class User(_Model):
    """A person's account on every node (the cluster shared by several people)."""

    name: AccountName
    #: Unset: up takes one that is free on every node, then keeps it. 1000-59999 are
    #: Debian's ids for people (Debian Policy 9.2.2, adduser's FIRST_UID and LAST_UID):
    #: below are the system's accounts, 60000-64999 the Debian project's, 65534 nobody.
    uid: Annotated[int, Field(ge=1000, le=59999)] | None = None
    #: Public key lines, or paths (relative to the inventory) of files of them.
    keys: Annotated[list[str], Field(min_length=1)]
    #: Extra groups (the user's own group is always made).
    groups: list[Annotated[GroupName, AfterValidator(_extra_group)]] = []
    #: Whether the user may run anything as root through sudo.
    sudo: bool = False


#: Open MPI parameter names (ompi_info's), e.g. mpi_yield_when_idle, btl_tcp_links.
_MCA_NAME = re.compile(r"[a-z][a-z0-9_]{0,79}")
#: Values /etc/environment takes literally (pam_env expands and quotes nothing there):
#: numbers, words, lists ("^openib,tcp"), paths.
_MCA_VALUE = re.compile(r"[A-Za-z0-9_.,:/+^@%=-]{1,200}")
#: Parameters the network section sets; the inventory gives them there.
_NETWORK_MCA = ("btl_tcp_if_include", "oob_tcp_if_include")


def _mca(value: object) -> object:
    if not isinstance(value, dict):
        return value  # the type check names it
    for name, setting in value.items():
        if not isinstance(name, str) or not _MCA_NAME.fullmatch(name):
            raise PydanticCustomError(
                "mpicluster",
                f"{name!r} is not an Open MPI parameter name (like mpi_yield_when_idle; "
                "without the OMPI_MCA_ prefix)",
            )
        if name in _NETWORK_MCA:
            raise PydanticCustomError(
                "mpicluster", f"{name}: network (interface or cidr) sets it; give it there"
            )
        if not isinstance(setting, str | int) or isinstance(setting, bool):
            raise PydanticCustomError(
                "mpicluster", f"{name}: {setting!r} is not a value (give a number or a word)"
            )
        if not _MCA_VALUE.fullmatch(str(setting)):
            raise PydanticCustomError(
                "mpicluster",
                f"{name}: {setting!r} is not a value /etc/environment keeps literally "
                "(a number, or letters, digits and _.,:/+^@%=-)",
            )
    return {name: str(setting) for name, setting in value.items()}


class Mpi(_Model):
    """Open MPI settings every rank of every job gets (the /etc/environment block)."""

    #: Open MPI (MCA) parameters by name, e.g. {mpi_yield_when_idle: 1}; written as
    #: OMPI_MCA_<name>=<value>, expected by doctor, used by the smoke test.
    mca: dict[str, str] = {}

    _mca = field_validator("mca", mode="before")(_mca)


class Sources(_Model):
    cache: UserPath = "~/.cache/mpicluster/sources"
    #: Packed builds (one per fingerprint) that new or reinstalled nodes get by copy.
    artifacts: UserPath = "~/.cache/mpicluster/artifacts"
    #: A base URL (e.g. an internal HTTP server or file:///srv/mirror) tried before upstream.
    mirror: Url | None = None
    #: Where a source archive without a generated configure (UCX's and UCC's tag
    #: archives) gets one: on the builder (autogen.sh; autotools among its build
    #: dependencies), or on this machine, which ships the tree with it ("control": for
    #: builders that cannot install autoconf, automake and libtool).
    autogen: Literal["builder", "control"] = "builder"


class Inventory(_Model):
    cluster: ClusterName
    ssh: SshSettings = SshSettings()
    network: Network = Network()
    mpi: Mpi = Mpi()
    nodes: Annotated[list[Node], Field(min_length=1)]
    stack: Stack = Stack()
    python: Python = Python()
    sources: Sources = Sources()
    #: Unset: no scheduler (jobs start with mpirun or `mpicluster run`).
    scheduler: Scheduler | None = None
    health: Health = Health()
    #: People's accounts on every node, their keys in authorized_keys.
    users: list[User] = []

    #: The file this inventory was read from (set by load_inventory).
    path: Path | None = Field(default=None, exclude=True)

    def python_requirements(self) -> list[str]:
        """The cluster's own packages' requirement lines (the file's, or the list)."""
        wanted = self.python.requirements
        if not wanted:
            return []
        if isinstance(wanted, list):
            return list(wanted)
        path = self.resolve_path(wanted)
        return [line.text for line in requirements_text.lines_of(path.read_text("utf-8"))]

    @property
    def total_gpus(self) -> int:
        return sum(node.gpus for node in self.nodes)

    @property
    def has_gpus(self) -> bool:
        return self.total_gpus > 0

    @property
    def gpu_nodes(self) -> list[Node]:
        """The nodes whose GPUs the smoke tests run on: the ones with GPUs, and none
        where the stack is built for GPUs that are not there (stack.gpus_present: false)."""
        if not self.stack.gpus_present:
            return []
        return [node for node in self.nodes if node.gpus]

    @property
    def controller(self) -> Node | None:
        """The node that runs the scheduler's controller (None: no scheduler)."""
        if self.scheduler is None:
            return None
        wanted = self.scheduler.controller or self.nodes[0].name
        return next((n for n in self.nodes if n.name == wanted), self.nodes[0])

    def partitions(self) -> list[Partition]:
        """The scheduler's partitions as they are configured: every node named, one default."""
        if self.scheduler is None:
            return []
        given = self.scheduler.partitions or [Partition(name="main")]
        every = [n.name for n in self.nodes]
        default = next((p.name for p in given if p.default), given[0].name)
        return [
            p.model_copy(
                update={
                    "nodes": p.nodes or every,
                    "default": p.name == default,
                    "default_time": p.default_time or self.scheduler.default_time,
                }
            )
            for p in given
        ]

    def node_ssh(self, node: Node) -> ResolvedSsh:
        """The SSH settings for one node: its overrides on top of the cluster's."""
        return ResolvedSsh(
            host=node.host,
            user=self.login_user(node),
            port=node.ssh.port or self.ssh.port,
            identity=self.resolve_path(node.ssh.identity or self.ssh.identity),
            known_hosts=self.known_hosts_path(),
            accept_new_host_keys=self.ssh.accept_new_host_keys,
            connect_timeout=self.ssh.connect_timeout,
        )

    def login_user(self, node: Node) -> str:
        """The MPI user on `node`, as whom mpicluster logs in: its ssh.user, the
        cluster's, else the login name on this machine."""
        return node.ssh.user or self.ssh.user or _login_name()

    def users_keys(self) -> list[list[str]]:
        """Each user's public key lines, their files read (InventoryError when one no
        longer reads as it did when the inventory was loaded)."""
        every, problems = [], []
        for i, user in enumerate(self.users):
            lines, wrong = _user_keys(self, user)
            every.append(lines)
            problems += [Problem(("users", i, "keys", j), message) for j, message in wrong]
        if problems:
            raise InventoryError(str(self.path or "<inventory>"), problems)
        return every

    def known_hosts_path(self) -> Path:
        return self.resolve_path(self.ssh.known_hosts) or Path("~/.ssh/known_hosts").expanduser()

    def resolve_path(self, value: str | None) -> Path | None:
        """A path from the inventory: ~ expanded, relative to the inventory's folder."""
        if value is None:
            return None
        try:
            path = Path(value).expanduser()
        except RuntimeError:  # ~name of a user this machine does not have
            path = Path(value)
        if not path.is_absolute() and self.path is not None:
            path = self.path.parent / path
        return path


class ResolvedSsh(BaseModel):
    model_config = ConfigDict(frozen=True)

    host: str
    user: str
    port: int
    identity: Path | None
    known_hosts: Path
    accept_new_host_keys: bool
    connect_timeout: int


def _login_name() -> str:
    import getpass

    return getpass.getuser()


class InventoryError(UsageError):
    """The inventory is invalid; `problems` holds one entry per thing wrong."""

    def __init__(self, source: str, problems: list[Problem]):
        self.source = source
        self.problems = problems
        super().__init__(self.lines()[0] if problems else f"{source}: invalid inventory")

    def lines(self) -> list[str]:
        return [problem.render(self.source) for problem in self.problems]


def load_inventory(path: str | os.PathLike[str]) -> Inventory:
    """Read and validate an inventory file."""
    path = Path(path)
    source = str(path)
    try:
        exists, is_dir = path.exists(), path.is_dir()
    except OSError as exc:  # a name too long, a folder that cannot be searched
        raise InventoryError(source, [Problem((), f"cannot read: {exc.strerror}")]) from None
    if not exists:
        raise InventoryError(source, [Problem((), "no such file")])
    if is_dir:
        raise InventoryError(source, [Problem((), "is a folder, not an inventory file")])
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise InventoryError(source, [Problem((), f"cannot read: {reason}")]) from None
    return parse_inventory(text, source=source, path=path.resolve())


def parse_inventory(
    text: str, *, source: str = "<inventory>", path: Path | None = None
) -> Inventory:
    try:
        doc = load_text(text)
    except YamlSyntaxError as exc:
        raise InventoryError(source, [Problem((), exc.message, exc.line)]) from None
    if doc.data is None:
        raise InventoryError(source, [Problem((), "the inventory is empty", 1)])
    if not isinstance(doc.data, dict):
        raise InventoryError(
            source, [Problem((), "the top level must be a mapping (cluster:, nodes:, ...)", 1)]
        )
    problems = list(doc.problems)
    parsed = Parsed()
    try:
        inventory = Inventory.model_validate({**doc.data, "path": path})
    except ValidationError as exc:
        failed = _problems_from(exc, doc)
        problems.extend(failed)
        # the checks below still run, on what did parse
        inventory, parsed = salvage(Inventory, doc.data, {p.loc for p in failed}, path=path)
    problems.extend(_cross_checks(inventory, doc, parsed))
    if problems:
        problems.sort(key=lambda p: (p.line or 0, format_loc(p.loc)))
        raise InventoryError(source, problems)
    return inventory


_MESSAGES = {
    "missing": "required",
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "model_type": "must be a mapping",
    "dict_type": "must be a mapping",
}


def _problems_from(exc: ValidationError, doc: YamlDocument) -> list[Problem]:
    problems = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        kind = error["type"]
        if kind == "extra_forbidden":
            message = _unknown_key(loc)
        elif kind == "too_short" and loc and loc[-1] == "nodes":
            message = "at least one node is required"
        elif kind == "too_short" and loc and loc[-1] == "keys":
            message = "at least one key is required (a public key line, or a file of them)"
        elif kind in ("greater_than_equal", "less_than_equal"):
            limit = error.get("ctx", {})
            message = f"must be >= {limit['ge']}" if "ge" in limit else f"must be <= {limit['le']}"
            if isinstance(error.get("input"), int):
                message += f" (got {error['input']})"
        elif kind == "literal_error":
            message = f"must be one of {error['ctx']['expected']}"
        elif kind == "string_pattern_mismatch":
            message = "not a compute capability like 9.0"
        elif _MESSAGES.get(kind):
            message = _MESSAGES[kind]
            if kind == "int_type" and isinstance(error.get("input"), bool):
                message += " (got a boolean)"
        else:
            message = error["msg"]
        message = _with_value(message, error)
        # strict mode reports a value of the wrong type once per union member; keep one
        loc = tuple(
            part
            for part in loc
            if not (
                (isinstance(part, str) and "[" in part)
                or part in ("literal['auto']", "bool", "str", "int", "none")
            )
        )
        problem = Problem(loc, message, doc.line_of(loc))
        if problem not in problems:
            problems.append(problem)
    return problems


def _unknown_key(loc: tuple) -> str:
    """An unknown key's message: the keys its section takes, the nearest named first."""
    parent = _model_at(loc[:-1])
    allowed = [name for name in parent.model_fields if name != "path"] if parent else []
    if not allowed:
        return "unknown key"
    near = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
    guess = f"; did you mean {near[0]}?" if near else ""
    return f"unknown key{guess} (expected one of: {', '.join(allowed)})"


#: Where a value is never repeated in a message: a user's keys (a private key pasted
#: there must not reach a terminal or a log).
_UNREPEATED = ("keys",)


def _with_value(message: str, error: dict) -> str:
    """`message` with the value it rejected: "'10.0.0.300' is not an IP address", "must
    be true or false (got 'yes')"; a section or list given where a value belongs is
    named by its kind."""
    if "input" not in error or error["type"] in ("missing", "extra_forbidden"):
        return message
    if any(part in _UNREPEATED for part in error["loc"]):
        return message
    value = error["input"]
    if isinstance(value, dict | list):
        if error["type"] not in _MESSAGES:
            return message  # a check of the whole section or list: its message names what
        return f"{message} (got a {'mapping' if isinstance(value, dict) else 'list'})"
    shown = _shown(value)
    if "(got " in message or message.startswith(shown):
        return message
    if message.startswith("not "):
        return f"{shown} is {message}"
    return f"{message} (got {shown})"


def _shown(value: object) -> str:
    """A value as the message repeats it: YAML's words for true, false and null, a
    string quoted (control characters escaped), a long one cut."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:76] + "...'"


def _model_at(loc: tuple) -> type[BaseModel] | None:
    model: type[BaseModel] | None = Inventory
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        annotation = field.annotation
        model = _model_in(annotation)
    return model


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found:
            return found
    return None


# Reports one problem at a location (a tuple of keys) with a message.
_Add = Callable[[tuple, str], None]


def _cross_checks(inv: Inventory, doc: YamlDocument, parsed: Parsed) -> list[Problem]:
    """Checks that span fields: duplicates, files that must exist, addresses in the CIDR.
    `parsed` says what of the file failed to parse: a check that needs it is skipped."""
    problems: list[Problem] = []

    def add(loc: tuple, message: str) -> None:
        problems.append(Problem(loc, message, doc.line_of(loc)))

    if inv.network.interface and inv.network.cidr:
        both = f"{inv.network.interface} and {inv.network.cidr}"
        add(("network",), f"give interface or cidr, not both (got {both})")
    _check_nodes(inv, parsed, add)
    _check_ssh_files(inv, add)
    _check_stack_choices(inv, parsed, add)
    _check_python(inv, add)
    for component in ("openmpi", "ucx", "ucc", "nccl", "nccl_tests", "mpi4py", "horovod"):
        if component != "ucx" or not _site_ucx_given(inv, parsed):
            _check_component_source(inv, component, parsed, add)
    _check_site_ucx(inv, parsed, add)
    _check_pytorch_version(inv, add)
    problems.extend(_scheduler_problems(inv, doc, parsed))
    _check_users(inv, parsed, add)
    return problems


def _check_nodes(inv: Inventory, parsed: Parsed, add: _Add) -> None:
    """Per node, in order: a duplicate name, a duplicate address, the CIDR, the key file."""
    seen_names: dict[str, int] = {}
    seen_hosts: dict[str, int] = {}
    for i, node in parsed.indexed(("nodes",), inv.nodes):
        key = node.name.lower()
        if key in seen_names:
            add(
                ("nodes", i, "name"),
                f"duplicate name {node.name!r} (also nodes[{seen_names[key]}])",
            )
        else:
            seen_names[key] = i
        host = node.host.lower()
        field = "address" if node.address else "name"
        if host in seen_hosts and field == "address":
            add(
                ("nodes", i, field),
                f"duplicate address {node.host!r} (also nodes[{seen_hosts[host]}])",
            )
        seen_hosts.setdefault(host, i)
        _check_node_in_cidr(inv, i, node, add)
        if node.ssh.identity:
            _check_key_file(inv, node.ssh.identity, ("nodes", i, "ssh", "identity"), add)


def _check_node_in_cidr(inv: Inventory, i: int, node: Node, add: _Add) -> None:
    if inv.network.cidr and node.address and names.is_ip(node.address):
        net = ipaddress.ip_network(inv.network.cidr)
        if ipaddress.ip_address(node.address) not in net:
            add(("nodes", i, "address"), f"{node.address} is outside network.cidr {net}")


def _check_ssh_files(inv: Inventory, add: _Add) -> None:
    """The cluster-wide key and known_hosts file must exist (and the key be private)."""
    if inv.ssh.identity:
        _check_key_file(inv, inv.ssh.identity, ("ssh", "identity"), add)
    if inv.ssh.known_hosts:
        path = inv.resolve_path(inv.ssh.known_hosts)
        if not _is_file(path):
            add(("ssh", "known_hosts"), f"no such file: {path}")


def _check_stack_choices(inv: Inventory, parsed: Parsed, add: _Add) -> None:
    """Stack switches that contradict one another (GPUs, PyTorch, Horovod, NCCL)."""
    archs_given = inv.stack.nccl.cuda_archs or parsed.is_lost(("stack", "nccl", "cuda_archs"))
    if not inv.stack.gpus_present and inv.has_gpus and not archs_given:
        add(
            ("stack", "gpus_present"),
            "false needs stack.nccl.cuda_archs: without GPUs, say which architectures "
            "to build for (e.g. ['9.0'])",
        )
    torch = inv.stack.pytorch
    horovod = inv.stack.horovod.enabled and not parsed.is_lost(("stack", "horovod", "enabled"))
    if horovod and not torch.enabled:
        add(
            ("stack", "pytorch", "enabled"),
            "false, but Horovod is built for PyTorch: set stack.horovod.enabled: false too",
        )
    if torch.nccl == "stack" and torch.cuda is False:
        add(("stack", "pytorch", "nccl"), "stack needs a CUDA build of PyTorch (cuda is false)")


def _site_ucx_given(inv: Inventory, parsed: Parsed) -> bool:
    """Whether the file names a site's UCX (stack.ucx.prefix), a value that failed too."""
    return inv.stack.ucx.prefix is not None or parsed.is_lost(("stack", "ucx", "prefix"))


def _check_site_ucx(inv: Inventory, parsed: Parsed, add: _Add) -> None:
    """A site's UCX is used as it is: nothing of UCX is built or fetched, and there is no
    UCX to turn off or take from the distribution's Open MPI."""
    if not _site_ucx_given(inv, parsed):
        return
    loc = ("stack", "ucx")
    ucx = inv.stack.ucx
    if ucx.enabled is False:
        add((*loc, "enabled"), "false, but stack.ucx.prefix names a UCX to use: remove one")
    for key in ("version", "url", "sha256"):
        if getattr(ucx, key) is not None:
            add(
                (*loc, key),
                "given beside stack.ucx.prefix: the site's UCX is used, no UCX is built "
                f"(remove {key})",
            )
    if inv.stack.install != "source":
        add(
            (*loc, "prefix"),
            "needs stack.install: source (the distribution's Open MPI has its own UCX)",
        )


def _check_python(inv: Inventory, add: _Add) -> None:
    """The cluster's packages go beside the stack's Python, from a readable file."""
    wanted = inv.python.requirements
    if not wanted:
        return
    loc = ("python", "requirements")
    if inv.stack.install != "source":
        add(loc, "needs stack.install: source (the packages go beside the stack's Python)")
        return
    if isinstance(wanted, list):
        return
    path = inv.resolve_path(wanted)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        add(loc, f"cannot read {path}: {getattr(exc, 'strerror', None) or 'not UTF-8 text'}")
        return
    lines = requirements_text.lines_of(text)
    for line in lines:
        if problem := requirements_text.problem_of(line.text):
            add(loc, f"{path}:{line.number}: {problem}")
    if not lines:
        add(loc, f"{path} has no requirement lines")


def _check_component_source(inv: Inventory, component: str, parsed: Parsed, add: _Add) -> None:
    """A component's url and sha256 come together, a local url exists, and the version fits
    (each where the url or sha256 it reads parsed)."""
    spec = getattr(inv.stack, component)
    loc = ("stack", component)
    url_lost, sha256_lost = (parsed.is_lost((*loc, key)) for key in ("url", "sha256"))
    if spec.sha256 and not spec.url and not url_lost:
        add((*loc, "sha256"), "given without url (the lockfile's checksum belongs to its URL)")
    if spec.url and not spec.sha256 and not sha256_lost:
        add((*loc, "url"), "needs a sha256 beside it (downloads are always verified)")
    if spec.url and spec.url.startswith(("/", "file://")):
        local = Path(spec.url.removeprefix("file://"))
        if not _is_file(local):
            add((*loc, "url"), f"no such file: {local}")
    if not url_lost:
        _check_component_version(component, spec, loc, add)


def _check_component_version(component: str, spec: Source, loc: tuple, add: _Add) -> None:
    """An own url needs an exact version; otherwise the lockfile must know the version."""
    if spec.url and (not spec.version or spec.version.endswith(".x")):
        add((*loc, "version"), "give the exact version of the file at url")
    elif not spec.url:
        from mpicluster.cluster.lockfile import LockfileError, resolve

        try:
            resolve(component, spec.version, None, None)
        except LockfileError as exc:
            add((*loc, "version"), exc.reason)


def _check_pytorch_version(inv: Inventory, add: _Add) -> None:
    """The PyTorch release pip is asked for can be had (unless PyTorch is left out)."""
    torch = inv.stack.pytorch
    if not torch.version or not torch.enabled:
        return
    if problem := torch_versions.problem_of(torch.version, torch.index_url):
        add(("stack", "pytorch", "version"), problem)


def _scheduler_problems(inv: Inventory, doc: YamlDocument, parsed: Parsed) -> list[Problem]:
    problems: list[Problem] = []
    if inv.scheduler is None:
        return problems

    def add(loc: tuple, message: str) -> None:
        problems.append(Problem(loc, message, doc.line_of(loc)))

    names = {n.name for n in inv.nodes}
    given = [n.name for n in inv.nodes] if parsed.complete(("nodes",)) else _names_given(doc)
    listed = ", ".join(given or [])

    def is_node(name: str) -> bool:
        # none given: no nodes, or one that did not parse may have any name; none judged
        return not given or name in given

    controller = inv.scheduler.controller
    if controller and not is_node(controller):
        add(("scheduler", "controller"), f"{controller!r} is not a node ({listed})")
    partitions = parsed.indexed(("scheduler", "partitions"), inv.scheduler.partitions)
    covered, defaults = _check_partitions(partitions, names, is_node, listed, add)
    if len(defaults) > 1:
        add(
            ("scheduler", "partitions", defaults[1], "default"),
            f"a second default partition (partitions[{defaults[0]}] is one); give one",
        )
    if inv.scheduler.partitions and parsed.complete(("scheduler", "partitions")):
        _check_partition_coverage(inv, covered, add)
    return problems


def _names_given(doc: YamlDocument) -> list[str] | None:
    """The nodes' names as the file gives them, valid or not; None where one is not a
    string (or nodes not a list)."""
    nodes = doc.data.get("nodes")
    if not isinstance(nodes, list):
        return None
    names = [node.get("name") if isinstance(node, dict) else None for node in nodes]
    return names if all(isinstance(name, str) for name in names) else None


def _check_partitions(
    partitions: Iterable[tuple[int, Partition]],
    names: set[str],
    is_node: Callable[[str], bool],
    listed: str,
    add: _Add,
) -> tuple[set[str], list[int]]:
    """Duplicate partition names and unknown nodes (`names`: the nodes'); returns (nodes
    covered, default indexes)."""
    seen: dict[str, int] = {}
    covered: set[str] = set()
    defaults = []
    for i, part in partitions:
        loc = ("scheduler", "partitions", i)
        if part.name.lower() in seen:
            first = seen[part.name.lower()]
            add((*loc, "name"), f"duplicate partition {part.name!r} (also partitions[{first}])")
        seen.setdefault(part.name.lower(), i)
        for j, name in enumerate(part.nodes):
            if not is_node(name):
                add((*loc, "nodes", j), f"{name!r} is not a node ({listed})")
        covered.update(part.nodes or names)
        if part.default:
            defaults.append(i)
    return covered, defaults


def _check_partition_coverage(inv: Inventory, covered: set[str], add: _Add) -> None:
    for node in inv.nodes:
        if node.name not in covered:
            add(
                ("scheduler", "partitions"),
                f"node {node.name} is in no partition: Slurm would never run a job on it "
                "(add it to one, or leave partitions out for one of every node)",
            )


#: Accounts a Debian node has already: a user of the inventory must not take one over
#: (systemd-* too, below).
_SYSTEM_ACCOUNTS = frozenset(
    [
        # base-passwd's, on every Debian system (gnats until bookworm)
        *("root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news"),
        *("uucp", "proxy", "www-data", "backup", "list", "irc", "gnats", "nobody", "_apt"),
        # the daemons a node runs or up installs (dbus, sshd, Slurm, the NVIDIA driver)
        *("messagebus", "sshd", "munge", "slurm", "nvidia-persistenced"),
    ]
)


def _check_users(inv: Inventory, parsed: Parsed, add: _Add) -> None:
    """Users: names and uids given once, no system account or MPI user taken, keys that
    are public keys (files read; no key text in any message)."""
    seen_names: dict[str, int] = {}
    #: a uid -> the index and name of the user who has it
    seen_uids: dict[int, tuple[int, str]] = {}
    #: a key's type and blob -> the user who holds it (whoever holds it logs in as her)
    seen_keys: dict[tuple[str, ...], str] = {}
    for i, user in parsed.indexed(("users",), inv.users):
        loc = ("users", i)
        first = seen_names.setdefault(user.name, i)
        if first != i:
            add((*loc, "name"), f"duplicate user {user.name!r} (also users[{first}])")
        if user.uid is not None:
            first, owner = seen_uids.setdefault(user.uid, (i, user.name))
            if first != i:
                add((*loc, "uid"), f"{user.uid} is also users[{first}]'s uid ({owner})")
        if problem := _taken_name(inv, parsed, user.name):
            add((*loc, "name"), problem)
        lines, wrong = _user_keys(inv, user)
        for j, message in wrong:
            add((*loc, "keys", j), message)
        for line in lines:
            holder = seen_keys.setdefault(tuple(line.split()[:2]), user.name)
            if holder != user.name:
                add(
                    (*loc, "keys"),
                    f"{user.name} and {holder} share a key: whoever holds it logs in as "
                    "both; give each person her own",
                )
                break


def _taken_name(inv: Inventory, parsed: Parsed, name: str) -> str | None:
    """Why `name` is not free for a person's account: a system's, or the MPI user's
    (not judged by an ssh.user that did not parse: its default stands in)."""
    if name in _SYSTEM_ACCOUNTS or name.startswith("systemd-"):
        return f"{name!r} is a system account on Debian nodes; give another name"
    for k, node in parsed.indexed(("nodes",), inv.nodes):
        if any(parsed.is_lost(loc) for loc in (("ssh", "user"), ("nodes", k, "ssh", "user"))):
            continue
        if inv.login_user(node) != name:
            continue
        if node.ssh.user:
            where = f"nodes[{k}].ssh.user"
        elif inv.ssh.user:
            where = "ssh.user"
        else:
            where = "your login name here, as ssh.user is unset"
        return f"{name!r} is the MPI user mpicluster logs in as ({where}); give another name"
    return None


def _user_keys(inv: Inventory, user: User) -> tuple[list[str], list[tuple[int, str]]]:
    """A user's public key lines, the files read, and what is wrong as (index in keys,
    message); each message names the user and, for a file, its path and line."""
    lines: list[str] = []
    problems: list[tuple[int, str]] = []
    for j, entry in enumerate(user.keys):
        if not user_keys.is_file_entry(entry):
            if problem := user_keys.entry_problem(entry):
                if problem == user_keys.PRIVATE:
                    problem += "; it is in the inventory: if that was shared, replace the key"
                problems.append((j, f"{user.name}'s key: {problem}"))
            else:
                lines.append(entry.strip())
            continue
        path = inv.resolve_path(entry.strip())
        text, problem = _key_file_text(path)
        if problem:
            problems.append((j, f"{user.name}'s key file: {problem}"))
            continue
        found, wrong = user_keys.file_lines(text)
        lines += found
        for number, problem in wrong:
            where = f"{path}:{number}" if number else str(path)
            problems.append((j, f"{user.name}'s key file: {where}: {problem}"))
    return lines, problems


#: A file of public keys is small; a bigger one is something else (or /dev/zero).
_KEY_FILE_LIMIT = 1 << 20


def _key_file_text(path: Path) -> tuple[str, str | None]:
    """The text of a file of keys, or why it cannot be read (its path said)."""
    try:
        if not path.exists():
            return "", f"no such file: {path}"
        if path.is_dir():
            return "", f"{path} is a folder, not a file of public keys"
        if not path.is_file():
            return "", f"{path} is not a regular file"
        if path.stat().st_size > _KEY_FILE_LIMIT:
            return "", f"{path} is bigger than 1 MiB: not a file of public keys"
        return path.read_text(encoding="utf-8"), None
    except UnicodeDecodeError:
        return "", f"{path}: not UTF-8 text"
    except OSError as exc:
        return "", f"cannot read {path}: {exc.strerror}"


def _is_file(path: Path) -> bool:
    """Path.is_file, False for a name the system cannot even look up (too long)."""
    try:
        return path.is_file()
    except OSError:
        return False


def _check_key_file(inv: Inventory, value: str, loc: tuple, add) -> None:
    path = inv.resolve_path(value)
    if not _is_file(path):
        add(loc, f"no such file: {path}")
        return
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        add(
            loc, f"permissions {mode:04o} are too open, ssh will refuse this key (chmod 600 {path})"
        )
