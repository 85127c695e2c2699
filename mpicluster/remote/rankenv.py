"""What a rank gets on this node: the variables of a non-interactive login that change
how a rank starts or what it loads, and what that environment resolves (which python,
which mpi4py, which libmpi mpi4py loads, which prted). Read by doctor's probe, which
runs in such a login (what mpirun's daemons, and so the ranks, get), stdlib only.
"""

import json
import os
import shutil
import subprocess

#: Variables that change what a rank loads or runs.
LOADING = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONUSERBASE",
    "PYTHONNOUSERSITE",
    "PYTHONSAFEPATH",
    "LD_PRELOAD",
    "LD_AUDIT",
    "OPAL_PREFIX",
)
#: Prefixes of the settings a rank's libraries read (Open MPI's MCA variables are the
#: env check's), and single ones.
TUNING_PREFIXES = ("UCX_", "NCCL_", "PMIX_", "PRTE_", "OMPI_", "CUDA_", "TORCH_NCCL_")
TUNING = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "HOROVOD_MPI_THREADS_DISABLE")
MCA_PREFIXES = ("OMPI_MCA_", "PRTE_MCA_", "PMIX_MCA_")
#: Not settings: what a login or mpicluster itself sets.
IGNORED = ("CUDA_HOME",)
TIMEOUT = 15

#: Run by the login's own `python`: where it is, and what `import mpi4py` and its MPI
#: module load (mpi4py.rc.initialize off: MPI is loaded, never started).
RESOLVE = r"""
import json, os, sys
out = {"executable": sys.executable, "prefix": os.path.realpath(sys.prefix)}
try:
    import mpi4py
    out["mpi4py"] = os.path.realpath(mpi4py.__file__)
    mpi4py.rc.initialize = False
    mpi4py.rc.finalize = False
    from mpi4py import MPI
    out["mpi4py_ext"] = os.path.realpath(MPI.__file__)
    libs = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and "/libmpi" in fields[5] and ".so" in fields[5]:
                libs.add(os.path.realpath(fields[5]))
    out["libmpi"] = sorted(libs)
except BaseException as exc:
    out["error"] = "%s: %s" % (exc.__class__.__name__, exc)
sys.stdout.write("MPICLUSTER-RESOLVE " + json.dumps(out) + "\n")
"""


def variables(environ):
    """{name: value} of the login's variables that change how a rank starts or what it
    loads; Open MPI's MCA variables are left to the env check."""
    found = {}
    for name, value in environ.items():
        if name in IGNORED or name.startswith(MCA_PREFIXES):
            continue
        if name in LOADING or name in TUNING or name.startswith(TUNING_PREFIXES):
            found[name] = value
    return found


def which(program, path=None):
    """Where `program` is found in `path` (this process's PATH by default)."""
    found = shutil.which(program, path=path)
    return {"path": found, "real": os.path.realpath(found) if found else None}


def resolve(python_name="python", environ=None, preexec=None):
    """What the login's `python` (python3 where there is none) resolves: in this
    process's environment, or (the node's health check, as root) in a login's
    `environ`, run as that login's user by `preexec`."""
    path = environ.get("PATH", "") if environ is not None else None
    found = which(python_name, path)
    if not found["path"]:
        found = which("python3", path)
    result = {"python": found, "prted": which("prted", path), "orted": which("orted", path)}
    if not found["path"]:
        result["error"] = "no python or python3 in PATH"
        return result
    try:
        done = subprocess.run(
            [found["path"], "-c", RESOLVE],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=environ,
            preexec_fn=preexec,
            timeout=TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        result["error"] = "%s could not run: %s" % (found["path"], exc)
        return result
    for line in done.stdout.decode("utf-8", "replace").splitlines():
        if line.startswith("MPICLUSTER-RESOLVE "):
            try:
                result.update(json.loads(line.split(" ", 1)[1]))
            except ValueError:
                break
            return result
    tail = done.stderr.decode("utf-8", "replace").strip().splitlines()
    result["error"] = "%s exited %d: %s" % (
        found["path"],
        done.returncode,
        tail[-1] if tail else "no output",
    )
    return result


def rank_environment(found, current, environ=None, preexec=None):
    """The facts doctor's rank check judges: `found` is variables(os.environ) (the
    probe reads the lines that set them with the others, accessfacts.setters);
    `current` is the stack's <current>; `environ` and `preexec`: resolve()'s."""
    return {
        "variables": found,
        "loading": [name for name in LOADING if name in found],
        "resolved": resolve(environ=environ, preexec=preexec),
        "stack_root": os.path.realpath(current) if os.path.exists(current) else None,
    }
