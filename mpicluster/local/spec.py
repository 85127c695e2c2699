"""What a local cluster is made of: its name, node count, subnet and provider."""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from mpicluster.errors import UsageError
from mpicluster.util.paths import state_dir

PROVIDERS = ("docker", "libvirt", "virtualbox")
IMAGE = "localhost/mpicluster-node:bookworm"
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
    image: str = IMAGE
    #: This machine's CUDA toolkit (resolved), mounted read-only at /usr/local/cuda in
    #: every node: GPU builds without GPUs. None: nodes without CUDA.
    cuda: str | None = None

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9-]{0,20}", self.name):
            raise UsageError(f"--name {self.name!r}: use up to 21 lowercase letters, digits, '-'")
        if not 1 <= self.nodes <= MAX_NODES:
            raise UsageError(f"--nodes {self.nodes}: must be between 1 and {MAX_NODES}")
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
        return cls(**json.loads(path.read_text()))


def local_dir(name: str) -> Path:
    return state_dir() / "local" / name
