"""torch.distributed allreduce over NCCL, one rank per GPU, exact result checked.

Run by the smoke test as:
    mpirun -np GPUS ... python torch_allreduce.py MASTER_ADDR MASTER_PORT [ELEMENTS...]
Rank, world size and local rank come from Open MPI's environment (OMPI_COMM_WORLD_*);
MASTER_ADDR must be where rank 0 runs. Rank 0 prints one JSON object, or
{"skipped": ...} when this Python has no PyTorch or a CPU-only one (exit 0).
"""

import json
import os
import socket
import sys
import time

DEFAULT_SIZES = [1, 1024, 1048576, 16777216]


def mpi_ranks(environ):
    """(rank, world size, local rank) from Open MPI's variables."""
    return (
        int(environ.get("OMPI_COMM_WORLD_RANK", "0")),
        int(environ.get("OMPI_COMM_WORLD_SIZE", "1")),
        int(environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")),
    )


def loaded_library(maps_text, name="libnccl.so"):
    """The path of the first mapped file whose name starts with `name` (/proc/self/maps)."""
    for line in maps_text.splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6:
            path = fields[5].strip()
            if os.path.basename(path).startswith(name):
                return path
    return None


def version_text(version):
    """torch.cuda.nccl.version(): a tuple (2, 21, 5); old releases gave an int (2708)."""
    if isinstance(version, int):
        major, rest = divmod(version, 10000 if version >= 10000 else 1000)
        minor, patch = divmod(rest, 100)
        return "%d.%d.%d" % (major, minor, patch)
    return ".".join(map(str, version))


def bandwidths(count, seconds, size):
    algbw = 4 * count / seconds / 1e9 if seconds > 0 else 0.0
    return algbw, (algbw * 2 * (size - 1) / size if size > 1 else algbw)


def skip(rank, reason):
    if rank == 0:
        sys.stdout.write(json.dumps({"skipped": reason}) + "\n")
    sys.exit(0)


def run_size(torch, dist, count, rank, size):
    """Time `count` floats (on zeros, after a warm-up), then check one sum of rank+1."""
    scratch = torch.zeros(count, dtype=torch.float32, device="cuda")
    dist.all_reduce(scratch)
    torch.cuda.synchronize()
    dist.barrier(device_ids=[torch.cuda.current_device()])
    iterations = max(3, min(100, (1 << 22) // max(count, 1)))
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(scratch)
    torch.cuda.synchronize()
    seconds = torch.tensor([(time.perf_counter() - start) / iterations], device="cuda")
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    tensor = torch.full((count,), float(rank + 1), dtype=torch.float32, device="cuda")
    dist.all_reduce(tensor)
    exact = bool(torch.all(tensor == float(size * (size + 1) // 2)).item())
    flags = [None] * size
    dist.all_gather_object(flags, exact)
    algbw, busbw = bandwidths(count, seconds.item(), size)
    return {
        "elements": count,
        "bytes": 4 * count,
        "iterations": iterations,
        "seconds": seconds.item(),
        "algbw_gbs": algbw,
        "busbw_gbs": busbw,
        "exact": all(flags),
        "wrong_ranks": [r for r, ok in enumerate(flags) if not ok],
    }


def main():
    rank, size, local_rank = mpi_ranks(os.environ)
    try:
        import torch
    except ImportError:
        skip(rank, "PyTorch is not installed in this Python")
    if torch.version.cuda is None:
        skip(rank, "PyTorch is a CPU build")
    import torch.cuda.nccl
    import torch.distributed as dist

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = sys.argv[1], sys.argv[2]
    sizes = [int(arg) for arg in sys.argv[3:]] or DEFAULT_SIZES
    if torch.cuda.device_count() < 1:
        skip(rank, "PyTorch sees no CUDA device here")
    device = local_rank % torch.cuda.device_count()  # as cuda_allreduce.c takes its GPU
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=rank, world_size=size)
    hosts = [None] * size
    dist.all_gather_object(hosts, socket.gethostname())
    devices = [None] * size
    dist.all_gather_object(devices, torch.cuda.get_device_name(device))
    results = [run_size(torch, dist, count, rank, size) for count in sizes]
    if rank == 0:
        with open("/proc/self/maps") as maps:
            loaded = loaded_library(maps.read())
        built_with = version_text(torch.cuda.nccl.version())
        report = {
            "ranks": size,
            "hosts": hosts,
            "library": "PyTorch %s (CUDA %s, NCCL %s)"
            % (torch.__version__, torch.version.cuda, built_with),
            "results": results,
            "devices": devices,
            "nccl": {"torch_built_with": built_with, "loaded": loaded},
        }
        sys.stdout.write(json.dumps(report) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
