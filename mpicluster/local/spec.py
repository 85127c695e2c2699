"""What a local cluster is made of: its name, node count, subnet, provider and each
node's Debian release."""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from mpicluster.util.errors import UsageError
from mpicluster.util.paths import state_dir

PROVIDERS = ("docker", "libvirt", "virtualbox")
#: The Debian releases a node may run (Debian 12 and 13): the image or box of each.
RELEASES = ("bookworm", "trixie")
IMAGE = "localhost/mpicluster-node:{release}"
BOX = "debian/{release}64"
FIRST_HOST = 11  # node1 gets .11, node2 .12, ...
#: Where the nodes see the shared CUDA toolkit (an inventory's default stack.cuda_home).
NODE_CUDA_HOME = "/usr/local/cuda"
MAX_NODES = 200


@dataclass(frozen=True)
class LocalSpec:
    name: str = "local"
    nodes: int = 3
    subnet: str = "192.168.61.0/24"
    provider: str = "docker"
    #: One release for every node, or one per node (node1's first): a mixed cluster.
    releases: tuple[str, ...] = ("bookworm",)
    #: This machine's CUDA toolkit (resolved), mounted read-only at /usr/local/cuda in
    #: every node: GPU builds without GPUs. None: nodes without CUDA.
    cuda: str | None = None

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9-]{0,20}", self.name):
            raise UsageError(f"--name {self.name!r}: use up to 21 lowercase letters, digits, '-'")
        if not 1 <= self.nodes <= MAX_NODES:
            raise UsageError(f"--count {self.nodes}: must be between 1 and {MAX_NODES}")
        if self.provider not in PROVIDERS:
            raise UsageError(f"--provider {self.provider!r}: must be one of {', '.join(PROVIDERS)}")
        try:
            net = ipaddress.IPv4Network(self.subnet)
        except ValueError:
            raise UsageError(
                f"--subnet {self.subnet!r}: not an IPv4 network like 192.168.61.0/24"
            ) from None
        if net.num_addresses < FIRST_HOST + self.nodes + 1:
            raise UsageError(f"--subnet {self.subnet}: too small for {self.nodes} nodes")
        for release in self.releases:
            if release not in RELEASES:
                raise UsageError(
                    f"--release {release!r}: one of {', '.join(RELEASES)} (Debian 12, 13)"
                )
        if len(self.releases) not in (1, self.nodes):
            raise UsageError(
                f"--release {','.join(self.releases)}: give one release for every node, "
                f"or one per node ({self.nodes})"
            )
        if self.cuda is not None:
            if self.provider != "docker":
                raise UsageError("--cuda: only the docker provider shares this machine's CUDA")
            if not (Path(self.cuda) / "bin" / "nvcc").is_file():
                raise UsageError(
                    f"--cuda-home {self.cuda}: no CUDA toolkit there (bin/nvcc is missing)"
                )

    @property
    def network_name(self) -> str:
        return f"mpicluster-{self.name}"

    @property
    def node_names(self) -> list[str]:
        return [f"node{i}" for i in range(1, self.nodes + 1)]

    @property
    def node_releases(self) -> list[str]:
        """Each node's release, node1's first."""
        if len(self.releases) == 1:
            return [self.releases[0]] * self.nodes
        return list(self.releases)

    @property
    def images(self) -> list[str]:
        """Each node's image (docker provider)."""
        return [IMAGE.format(release=r) for r in self.node_releases]

    @property
    def boxes(self) -> list[str]:
        """Each node's Vagrant box (libvirt, virtualbox)."""
        return [BOX.format(release=r) for r in self.node_releases]

    @property
    def addresses(self) -> list[str]:
        net = ipaddress.IPv4Network(self.subnet)
        return [str(net.network_address + FIRST_HOST + i) for i in range(self.nodes)]

    @property
    def dir(self) -> Path:
        return local_dir(self.name)

    @property
    def dotfile_path(self) -> Path:
        return self.dir / "vagrant"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "spec.json").write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def saved(cls, name: str) -> LocalSpec | None:
        path = local_dir(name) / "spec.json"
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        known = {f.name for f in fields(cls)}  # a spec saved before --release: bookworm
        data["releases"] = tuple(data.get("releases") or ("bookworm",))
        return cls(**{k: v for k, v in data.items() if k in known})


def local_dir(name: str) -> Path:
    return state_dir() / "local" / name
