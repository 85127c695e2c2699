"""What a node is, for planning builds: platform, compiler, CUDA, GPUs, installed stack.

Sent over the control connection (`/usr/bin/python3 - PREFIX CUDA_HOME`), stdlib only;
prints one JSON object.
"""

import json
import os
import platform
import re
import subprocess
import sys


def run(argv, timeout=15):
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def os_release():
    values = {}
    try:
        with open("/etc/os-release", encoding="utf-8") as handle:
            for line in handle:
                key, sep, value = line.strip().partition("=")
                if sep:
                    values[key] = value.strip('"')
    except OSError:
        pass
    return {"id": values.get("ID", "unknown"), "version_id": values.get("VERSION_ID", "")}


def gcc_version():
    """The gcc a build here uses: the installed one, else the one apt would install."""
    installed = run(["dpkg-query", "-W", "-f", "${Version}", "gcc"])
    if installed:
        return installed.strip()
    policy = run(["apt-cache", "policy", "gcc"]) or ""
    match = re.search(r"Candidate:\s*(\S+)", policy)
    return match.group(1) if match and match.group(1) != "(none)" else None


def cuda_version(cuda_home):
    try:
        with open(os.path.join(cuda_home, "version.json"), encoding="utf-8") as handle:
            return json.load(handle)["cuda"]["version"]
    except (OSError, ValueError, KeyError):
        pass
    out = run([os.path.join(cuda_home, "bin", "nvcc"), "--version"])
    match = re.search(r"release [\d.]+, V([\d.]+)", out or "")
    return match.group(1) if match else None


def gpus():
    out = run(
        ["nvidia-smi", "--query-gpu=compute_cap,name,driver_version", "--format=csv,noheader"]
    )
    if out is None:
        return []
    found = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            found.append({"compute_cap": parts[0], "name": parts[1], "driver": parts[2]})
    return found


def current_stack(prefix):
    try:
        with open(os.path.join(prefix, "current", "FINGERPRINT.json"), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def main():
    prefix, cuda_home = sys.argv[1], sys.argv[2]
    facts = {
        "nproc": os.cpu_count() or 1,
        "os": os_release(),
        "arch": platform.machine(),
        "python": "%d.%d" % sys.version_info[:2],
        "glibc": platform.libc_ver()[1],
        "gcc": gcc_version(),
        "cuda": cuda_version(cuda_home),
        "gpus": gpus(),
        "current": current_stack(prefix),
    }
    sys.stdout.write(json.dumps(facts) + "\n")


if __name__ == "__main__":
    main()
