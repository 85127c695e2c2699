"""Build the local cluster's node image from Debian's archive (no registry is needed).

The image is a debootstrapped Debian (bookworm or trixie) with sshd, sudo, python3 and a
`vagrant` user holding Vagrant's insecure public key (Vagrant swaps it for a
per-node key on first boot). It holds no SSH host keys: every node makes its
own when it starts, so nodes are told apart by their keys as real machines are.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from mpicluster.util import proc
from mpicluster.util.errors import CommandError, ToolMissingError
from mpicluster.util.paths import state_dir

Progress = Callable[[str], None]

PACKAGES = [
    "openssh-server",
    "python3",
    "sudo",
    "iproute2",
    "iptables",
    "procps",
    "dumb-init",
    "ca-certificates",
    "netbase",
]
RECIPE_LABEL = "io.mpicluster.recipe"

NODE_INIT = """\
#!/bin/sh
# mpicluster node init: fresh host keys per node, then sshd in the foreground.
set -e
ssh-keygen -A >/dev/null
mkdir -p /run/sshd
exec /usr/sbin/sshd -D -e
"""

SSHD_CONFIG = """\
# mpicluster local node: keys only.
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UseDNS no
MaxStartups 200:30:400
MaxSessions 64
"""

# Where Debian's vagrant package and HashiCorp's own package keep Vagrant's gem.
INSECURE_KEY_GLOBS = [
    ("/usr/share/rubygems-integration/all/gems", "vagrant-*/keys/vagrant.pub"),
    ("/opt/vagrant/embedded/gems", "**/vagrant-*/keys/vagrant.pub"),
]


def recipe_digest(suite: str) -> str:
    """Changes whenever the image recipe does, so an old image gets rebuilt."""
    text = "\n".join([suite, *PACKAGES, NODE_INIT, SSHD_CONFIG, "recipe-v1"])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def mirror() -> str:
    """The Debian mirror debootstrap fetches from: $MPICLUSTER_DEBIAN_MIRROR, else the one
    this machine's own apt sources use (so a proxy or internal mirror is followed)."""
    from mpicluster.util.debian_archive import debootstrap_mirror

    return debootstrap_mirror()


def insecure_public_key() -> str:
    explicit = os.environ.get("MPICLUSTER_VAGRANT_PUBKEY")
    candidates = (
        [explicit]
        if explicit
        else sorted(
            path for base, pattern in INSECURE_KEY_GLOBS for path in Path(base).glob(pattern)
        )
    )
    for path in candidates:
        if path and Path(path).is_file():
            return Path(path).read_text()
    raise ToolMissingError(
        "Vagrant's insecure public key (keys/vagrant.pub in Vagrant's gem) was not found",
        hint="set MPICLUSTER_VAGRANT_PUBKEY to its path",
    )


def image_is_current(image: str, suite: str, env: dict[str, str]) -> bool:
    result = proc.run(
        [
            "podman",
            "image",
            "inspect",
            "--format",
            '{{index .Labels "' + RECIPE_LABEL + '"}}',
            image,
        ],
        env=env,
        check=False,
    )
    return result.ok and result.output.strip() == recipe_digest(suite)


def build_image(image: str, suite: str, env: dict[str, str], progress: Progress) -> None:
    """debootstrap Debian `suite`'s root file system, configure it and import it into
    Podman."""
    key = insecure_public_key()
    work = state_dir() / "local" / "image-build"
    root = work / "rootfs"
    if work.exists():
        shutil.rmtree(work)  # a build interrupted earlier
    work.mkdir(parents=True)
    try:
        progress(f"Building node image {image} with debootstrap (a minute or two, once)")
        proc.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(PACKAGES)}",
                suite,
                str(root),
                mirror(),
            ],
            env=env,
            on_line=_debootstrap_progress(progress),
            hint="debootstrap needs Debian's archive (set MPICLUSTER_DEBIAN_MIRROR for a mirror)",
        )
        _configure(root, key, env)
        progress("Importing node image into Podman")
        _import(root, image, suite, env)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _debootstrap_progress(progress: Progress) -> Callable[[str], None]:
    def on_line(line: str) -> None:
        if line.startswith("I: ") and any(
            word in line
            for word in (
                "Retrieving Release",
                "Installing core",
                "Unpacking the base",
                "Configuring the base",
                "Base system",
            )
        ):
            progress(f"  debootstrap: {line[3:]}")

    return on_line


def _configure(root: Path, public_key: str, env: dict[str, str]) -> None:
    proc.run(
        ["chroot", str(root), "useradd", "--create-home", "--shell", "/bin/bash", "vagrant"],
        env=env,
    )
    sudoers = root / "etc/sudoers.d/vagrant"
    sudoers.write_text("vagrant ALL=(ALL) NOPASSWD:ALL\n")
    sudoers.chmod(0o440)
    ssh_dir = root / "home/vagrant/.ssh"
    ssh_dir.mkdir(mode=0o700)
    (ssh_dir / "authorized_keys").write_text(public_key)
    (ssh_dir / "authorized_keys").chmod(0o600)
    proc.run(["chroot", str(root), "chown", "-R", "vagrant:vagrant", "/home/vagrant/.ssh"], env=env)
    for host_key in (root / "etc/ssh").glob("ssh_host_*"):
        host_key.unlink()
    (root / "etc/ssh/sshd_config.d/mpicluster-local.conf").write_text(SSHD_CONFIG)
    init = root / "usr/local/sbin/node-init"
    init.write_text(NODE_INIT)
    init.chmod(0o755)
    shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
    (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)


def _import(root: Path, image: str, suite: str, env: dict[str, str]) -> None:
    full_env = {**os.environ, **env}
    argv = [
        "podman",
        "import",
        "--change",
        'CMD ["/usr/bin/dumb-init", "/usr/local/sbin/node-init"]',
        "--change",
        f"LABEL {RECIPE_LABEL}={recipe_digest(suite)}",
        "-",
        image,
    ]
    with subprocess.Popen(
        ["tar", "-C", str(root), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE, env=full_env
    ) as tar:
        result = subprocess.run(
            argv, stdin=tar.stdout, capture_output=True, env=full_env, check=False
        )
        if tar.stdout is not None:
            tar.stdout.close()
    if tar.returncode != 0 or result.returncode != 0:
        output = (result.stdout + result.stderr).decode("utf-8", "replace")
        raise CommandError(argv, result.returncode or tar.returncode, output)
