"""The few Podman operations the local cluster needs."""

from __future__ import annotations

import json

from mpicluster.util import proc
from mpicluster.util.errors import UsageError

LABEL = "io.mpicluster.network"


class Podman:
    def __init__(self, env: dict[str, str]):
        self.env = env

    def _run(self, *args: str, check: bool = True) -> proc.Result:
        return proc.run(["podman", *args], env=self.env, check=check)

    def network_subnets(self, name: str) -> list[str] | None:
        result = self._run("network", "inspect", name, check=False)
        if not result.ok:
            return None
        info = json.loads(result.output)[0]
        return [s.get("subnet") for s in info.get("subnets") or []]

    def ensure_network(self, name: str, subnet: str) -> bool:
        """Create the network, or recreate one left with another subnet. True if created."""
        subnets = self.network_subnets(name)
        if subnets == [subnet]:
            return False
        if subnets is not None:
            if self.containers(name):
                raise UsageError(
                    f"Podman network {name} exists with subnet {', '.join(subnets)} and has "
                    "containers",
                    hint="run `mpicluster local down` first",
                )
            self._run("network", "rm", name)
        result = self._run("network", "create", "--subnet", subnet, name, check=False)
        if not result.ok:
            raise UsageError(
                f"cannot create Podman network {name} on {subnet}: {result.output.strip()}",
                hint="another network may use this subnet; pick one with --subnet",
            )
        return True

    def remove_network(self, name: str) -> bool:
        if self.network_subnets(name) is None:
            return False
        self._run("network", "rm", "--force", name)
        return True

    def containers(self, network: str) -> list[str]:
        """Ids of all containers (any state) that the local cluster on `network` made."""
        result = self._run(
            "ps",
            "--all",
            "--quiet",
            "--no-trunc",
            "--filter",
            f"label={LABEL}={network}",
            check=False,
        )
        return result.output.split() if result.ok else []

    def remove_containers(self, ids: list[str]) -> None:
        if ids:
            self._run("rm", "--force", "--volumes", *ids, check=False)

    def read_file(self, container: str, path_glob: str) -> str:
        result = self._run("exec", container, "sh", "-c", f"cat {path_glob}")
        return result.output

    def remove_image(self, image: str) -> bool:
        return self._run("rmi", "--force", image, check=False).ok
