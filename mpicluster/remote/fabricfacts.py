"""What fast fabric a node has and whether its MPI and NCCL could use it.

A helper for doctor's probe (stdlib only, runs on the node's own Python 3.6+). It reads:
- the RDMA devices and their ports from sysfs (/sys/class/infiniband, written by the
  kernel's drivers/infiniband/core/sysfs.c): InfiniBand, RoCE and AWS EFA all show there;
- whether the user-space verbs library NCCL dlopens (libibverbs.so, then .so.1) and the
  provider for each device's driver (rdma-core's ibverbs-providers) are installed;
- which network components the MPI build has, from `ompi_info --parsable` (pml ucx for
  InfiniBand/RoCE, mtl ofi for EFA, Open MPI 4's btl openib).
It changes nothing and opens no device.
"""

import glob
import os
import re

from nodeinfo import read_text, run

SYSFS = "/sys/class/infiniband"
#: Where Debian, Ubuntu and RHEL keep the verbs library and its providers.
LIBRARY_DIRS = [
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/lib64",
]
#: Provider library names that differ from their devices' names (mlx5_0 -> mlx5).
PROVIDER_ALIASES = {"hfi1": "hfi1verbs", "qib": "ipathverbs"}
#: ompi_info components that carry MPI over a fast fabric.
FABRIC_COMPONENTS = ("pml:ucx", "mtl:ofi", "btl:openib", "btl:uct", "osc:ucx")


def numbered(text):
    """'4: ACTIVE' -> 'ACTIVE' (sysfs writes 'N: NAME'); None for nothing."""
    if text is None:
        return None
    text = text.strip()
    match = re.match(r"^\d+:\s*(.*)$", text)
    return match.group(1) if match else text


def gbps(rate):
    """'100 Gb/sec (4X EDR)' -> 100.0; None where unreadable."""
    match = re.match(r"^\s*([0-9.]+)\s*Gb/sec", rate or "")
    return float(match.group(1)) if match else None


def netdev(port_dir, device_dir):
    """The network interface a RoCE port runs over (GID 0's netdev, else the PCI
    function's); None for InfiniBand ports, which have none."""
    name = read_text(port_dir + "/gid_attrs/ndevs/0")
    if name and name.strip():
        return name.strip()
    found = sorted(glob.glob(device_dir + "/device/net/*"))
    return os.path.basename(found[0]) if found else None


def driver_of(device_dir):
    link = device_dir + "/device/driver"
    return os.path.basename(os.path.realpath(link)) if os.path.lexists(link) else None


def devices(root=SYSFS):
    """Every RDMA device under `root` with its ports, sorted by name."""
    found = []
    for device_dir in sorted(glob.glob(root + "/*")):
        name = os.path.basename(device_dir)
        ports = []
        for port_dir in sorted(
            glob.glob(device_dir + "/ports/*"),
            key=lambda p: int(os.path.basename(p)) if os.path.basename(p).isdigit() else 0,
        ):
            rate = (read_text(port_dir + "/rate") or "").strip() or None
            link_layer = (read_text(port_dir + "/link_layer") or "").strip() or None
            ports.append(
                {
                    "port": os.path.basename(port_dir),
                    "state": numbered(read_text(port_dir + "/state")),
                    "phys_state": numbered(read_text(port_dir + "/phys_state")),
                    "rate": rate,
                    "gbps": gbps(rate),
                    "link_layer": link_layer,
                    "netdev": netdev(port_dir, device_dir) if link_layer == "Ethernet" else None,
                }
            )
        found.append(
            {
                "name": name,
                "node_type": numbered(read_text(device_dir + "/node_type")),
                "fw_ver": (read_text(device_dir + "/fw_ver") or "").strip() or None,
                "driver": driver_of(device_dir),
                "provider": provider_name(name),
                "ports": ports,
            }
        )
    return found


def provider_name(device):
    """The rdma-core provider a device needs: its name less the instance number."""
    base = re.sub(r"_?\d+$", "", device)
    return PROVIDER_ALIASES.get(base, base)


def library_dirs(environ, system_dirs=None):
    """LD_LIBRARY_PATH's folders, then the system's: where dlopen looks."""
    extra = [d for d in (environ.get("LD_LIBRARY_PATH") or "").split(":") if d]
    return extra + (LIBRARY_DIRS if system_dirs is None else system_dirs)


def verbs(environ, wanted_providers, system_dirs=None):
    """Where libibverbs is (the first of the names NCCL dlopens, in the folders dlopen
    searches) and which of the wanted providers are installed (libNAME-rdmav*.so in a
    libibverbs/ folder). `system_dirs` replaces the system's folders and the loader's
    cache (tests)."""
    library = None
    dirs = library_dirs(environ, system_dirs)
    for soname in ("libibverbs.so", "libibverbs.so.1"):
        for directory in dirs:
            if os.path.exists(directory + "/" + soname):
                library = directory + "/" + soname
                break
        if library:
            break
    if library is None and system_dirs is None:
        code, out, _ = run(["ldconfig", "-p"], timeout=10)
        if code == 0:
            match = re.search(r"\slibibverbs\.so(?:\.1)?\s.*=>\s*(\S+)", out)
            library = match.group(1) if match else None
    installed = set()
    for directory in dirs:
        for path in glob.glob(directory + "/libibverbs/lib*-rdmav*.so"):
            installed.add(re.sub(r"^lib|-rdmav\d+\.so$", "", os.path.basename(path)))
    return {
        "library": library,
        "providers": sorted(p for p in wanted_providers if p in installed),
        "missing_providers": sorted(p for p in wanted_providers if p not in installed),
    }


def mpi_components(mpi_bin):
    """The fast-fabric components of the Open MPI next to `mpi_bin` ('pml:ucx', ...), or
    None where there is no ompi_info (not Open MPI) or it fails."""
    ompi_info = mpi_bin + "/ompi_info"
    if not os.path.exists(ompi_info):
        return None
    code, out, _ = run([ompi_info, "--parsable"], timeout=20)
    if code != 0:
        return None
    present = set()
    for line in out.splitlines():
        parts = line.split(":")
        if len(parts) > 3 and parts[0] == "mca" and parts[3] == "version":
            present.add(parts[1] + ":" + parts[2])
    return sorted(c for c in FABRIC_COMPONENTS if c in present)


def nccl_net_plugins(environ):
    """NCCL network plugins (libnccl-net*.so, e.g. aws-ofi-nccl for EFA) found."""
    found = []
    for directory in library_dirs(environ):
        found.extend(glob.glob(directory + "/libnccl-net*.so"))
    return sorted(set(found))


def fabric(mpi_bin, environ, root=SYSFS):
    """The node's fabric facts; the verbs library and NCCL plugins are looked for only
    where RDMA devices exist (nothing could use them elsewhere)."""
    found = devices(root)
    facts = {"devices": found, "mpi": mpi_components(mpi_bin), "verbs": None, "nccl_plugins": None}
    if found:
        facts["verbs"] = verbs(environ, sorted(set(d["provider"] for d in found)))
        facts["nccl_plugins"] = nccl_net_plugins(environ)
    return facts
