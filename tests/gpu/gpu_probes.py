"""What the box itself can do, without MPI (the one-box proof runs it at once, with the
box's own Python and PyTorch, while the stack compiles):

- host_register: cuMemHostRegister (what Open MPI's smcuda calls on its shared-memory
  segment, 128 MiB, and what failed on the first round's H200 with return value 1,
  CUDA_ERROR_INVALID_VALUE) on 128 MiB of anonymous memory and of a file mapped shared
  in each folder given (/dev/shm, a tmpfs; and the folder Open MPI's session files go
  to, with its file system's type): which of them the driver can pin;
- d2d_copy: a 64 MiB device-to-device copy on the GPU (bytes copied per second);
- cuda_ipc: a second process opens this one's 64 MiB through CUDA IPC (PyTorch's
  multiprocessing hands a CUDA tensor over by its IPC handle) and copies from it and
  into it: what two ranks sharing the GPU can move between them at best.

    python tests/gpu/gpu_probes.py FOLDER...

Prints one JSON line; "ok" is false where a probe could not run (its error says why).
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import platform
import resource
import sys
import tempfile
import traceback
from pathlib import Path

REGISTERED = 128 << 20  # smcuda's segment on the H200: cuMemHostRegister(..., 134217728, 0)
COPIED = 64 << 20
REPEATS = 20


def mount_type(folder: str) -> str:
    """The file system under `folder` (/proc/mounts' longest mount point above it)."""
    best, kind = "", "?"
    target = os.path.realpath(folder)
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        point = fields[1].replace("\\040", " ")
        if (target == point or target.startswith(point.rstrip("/") + "/")) and len(point) > len(
            best
        ):
            best, kind = point, fields[2]
    return f"{kind} at {best}" if best else kind


class Driver:
    """libcuda through ctypes, a context current on GPU 0 (cuMemHostRegister wants one)."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.call("cuInit", 0)
        device, context = ctypes.c_int(), ctypes.c_void_p()
        self.call("cuDeviceGet", ctypes.byref(device), 0)
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(context), device)
        self.call("cuCtxSetCurrent", context)

    def call(self, name: str, *args) -> None:
        code = getattr(self.lib, name)(*args)
        if code != 0:
            raise RuntimeError(f"{name} returned {code} ({self.error_name(code)})")

    def error_name(self, code: int) -> str:
        text = ctypes.c_char_p()
        self.lib.cuGetErrorName(code, ctypes.byref(text))
        return (text.value or b"?").decode()

    def register(self, memory: mmap.mmap) -> dict:
        """cuMemHostRegister(memory, its size, 0), and unregistered again where it worked."""
        view = ctypes.c_char.from_buffer(memory)
        address = ctypes.c_void_p(ctypes.addressof(view))
        code = self.lib.cuMemHostRegister_v2(address, ctypes.c_size_t(len(memory)), 0)
        if code == 0:
            self.lib.cuMemHostUnregister(address)
        del view
        return {"result": code, "name": self.error_name(code)}


def host_register(folders: list[str]) -> dict:
    driver = Driver()
    found = {"anonymous, private": _anonymous(driver, mmap.MAP_PRIVATE)}
    found["anonymous, shared"] = _anonymous(driver, mmap.MAP_SHARED)
    for folder in folders:
        found[f"file in {folder} ({mount_type(folder)}), shared"] = _file_backed(driver, folder)
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return {"bytes": REGISTERED, "by_memory": found, "memlock_limit": [soft, hard]}


def _anonymous(driver: Driver, flags: int) -> dict:
    with mmap.mmap(-1, REGISTERED, flags=flags) as memory:
        memory[:: mmap.PAGESIZE] = b"\1" * (REGISTERED // mmap.PAGESIZE)  # touched, as used
        return driver.register(memory)


def _file_backed(driver: Driver, folder: str) -> dict:
    """As opal's mmap shmem makes a segment: a file of the size, mapped shared."""
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix="onebox-hostreg-") as backing:
            os.ftruncate(backing.fileno(), REGISTERED)
            with mmap.mmap(backing.fileno(), REGISTERED, flags=mmap.MAP_SHARED) as memory:
                memory[:: mmap.PAGESIZE] = b"\1" * (REGISTERED // mmap.PAGESIZE)
                return driver.register(memory)
    except OSError as exc:
        return {"error": str(exc)}


def d2d_copy(torch) -> dict:
    src = torch.ones(COPIED // 4, device="cuda")
    dst = torch.empty_like(src)
    seconds = _timed(torch, lambda: dst.copy_(src))
    return {
        "bytes": COPIED,
        "gbs": round(COPIED / seconds / 1e9, 1),
        "exact": bool(dst.eq(1).all()),
    }


def _timed(torch, step) -> float:
    """Seconds per `step` on the GPU (CUDA events, after one warm-up)."""
    step()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(REPEATS):
        step()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000 / REPEATS


def cuda_ipc(torch) -> dict:
    """This process's 64 MiB handed to a second one, which reads and writes it through CUDA
    IPC; this one keeps it alive until the other is done."""
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    handed, answer = context.Queue(), context.Queue()
    mine = torch.ones(COPIED // 4, device="cuda")
    torch.cuda.synchronize()
    other = context.Process(target=ipc_peer, args=(handed, answer))
    other.start()
    handed.put(mine)
    result = answer.get(timeout=120)
    other.join(30)
    torch.cuda.synchronize()
    result["written_back_exact"] = bool(mine.eq(2).all())
    return result


def ipc_peer(handed, answer) -> None:
    """The second process: the first one's memory, opened through CUDA IPC."""
    import torch

    try:
        theirs = handed.get(timeout=60)
        mine = torch.empty_like(theirs)
        read = _timed(torch, lambda: mine.copy_(theirs))
        exact = bool(mine.eq(1).all())
        mine.fill_(2)
        wrote = _timed(torch, lambda: theirs.copy_(mine))
        answer.put(
            {
                "bytes": COPIED,
                "read_gbs": round(COPIED / read / 1e9, 1),
                "write_gbs": round(COPIED / wrote / 1e9, 1),
                "read_exact": exact,
            }
        )
    except Exception as exc:  # the first process waits for an answer either way
        answer.put({"error": repr(exc)})


def main(folders: list[str]) -> int:
    report: dict = {"kernel": platform.release(), "ok": True}
    probes = [("host_register", lambda: host_register(folders))]
    try:
        import torch

        report["torch"] = torch.__version__
        probes += [("d2d_copy", lambda: d2d_copy(torch)), ("cuda_ipc", lambda: cuda_ipc(torch))]
    except ImportError as exc:
        report.update(ok=False, torch=f"not importable: {exc}")
    for name, probe in probes:
        try:
            report[name] = probe()
        except Exception as exc:  # one probe's failure must not lose the others
            report[name] = {"error": repr(exc), "where": traceback.format_exc().splitlines()[-3:]}
            report["ok"] = False
        report["ok"] = report["ok"] and "error" not in report[name]
    sys.stdout.write(json.dumps(report) + "\n")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
