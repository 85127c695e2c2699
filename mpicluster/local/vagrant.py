"""Drive Vagrant for the local cluster: up, destroy, status and ssh-config."""

from __future__ import annotations

from pathlib import Path

from mpicluster.local.spec import LocalSpec
from mpicluster.util import proc
from mpicluster.util.paths import data_path
from mpicluster.util.proc import LineSink


def vagrant_env(spec: LocalSpec, base_env: dict[str, str]) -> dict[str, str]:
    return {
        **base_env,
        "VAGRANT_CWD": str(data_path("Vagrantfile").parent),
        "VAGRANT_DOTFILE_PATH": str(spec.dotfile_path),
        "VAGRANT_DEFAULT_PROVIDER": spec.provider,
        "VAGRANT_CHECKPOINT_DISABLE": "1",
        "VAGRANT_NO_COLOR": "1",
        "MPICLUSTER_NODES": str(spec.nodes),
        "MPICLUSTER_SUBNET": spec.subnet,
        "MPICLUSTER_NETWORK": spec.network_name,
        "MPICLUSTER_IMAGES": ",".join(spec.images),
        "MPICLUSTER_BOXES": ",".join(spec.boxes),
        "MPICLUSTER_CUDA": spec.cuda or "",
    }


class Vagrant:
    def __init__(self, spec: LocalSpec, base_env: dict[str, str]):
        self.spec = spec
        self.env = vagrant_env(spec, base_env)

    def run(
        self,
        *args: str,
        on_line: LineSink | None = None,
        check: bool = True,
        hint: str | None = None,
    ) -> proc.Result:
        return proc.run(["vagrant", *args], env=self.env, on_line=on_line, check=check, hint=hint)

    def up(self, on_line: LineSink) -> None:
        self.run(
            "up",
            f"--provider={self.spec.provider}",
            on_line=on_line,
            hint="see the log above; `mpicluster local down` then `up` starts afresh",
        )

    def destroy(self, on_line: LineSink) -> proc.Result:
        return self.run("destroy", "--force", on_line=on_line, check=False)

    def states(self) -> dict[str, str]:
        """Machine name -> Vagrant state (running, stopped, not_created...)."""
        result = self.run("status", "--machine-readable", check=False)
        states: dict[str, str] = {}
        for line in result.output.splitlines():
            parts = line.split(",")
            if len(parts) >= 4 and parts[2] == "state":
                states[parts[1]] = parts[3]
        return states

    def identity_files(self) -> dict[str, Path]:
        """Machine name -> the private key Vagrant made for it, from `vagrant ssh-config`."""
        result = self.run("ssh-config", check=False)
        keys: dict[str, Path] = {}
        host = None
        for raw in result.output.splitlines():
            line = raw.strip()
            if line.startswith("Host "):
                host = line.split(None, 1)[1]
            elif line.startswith("IdentityFile ") and host and host not in keys:
                keys[host] = Path(line.split(None, 1)[1].strip('"'))
        return keys

    def container_ids(self) -> dict[str, str]:
        """Machine name -> container id, from Vagrant's state folder (docker provider)."""
        ids = {}
        machines = self.spec.dotfile_path / "machines"
        for node in self.spec.node_names:
            id_file = machines / node / "docker" / "id"
            if id_file.exists() and id_file.read_text().strip():
                ids[node] = id_file.read_text().strip()
        return ids
