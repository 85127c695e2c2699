"""Horovod allreduce across every rank (PyTorch; on the GPU when there is one).

Run by the smoke test as: mpirun --hostfile ... python hvd_allreduce.py [ELEMENTS...]
Rank 0 prints one JSON object.
"""

import json
import socket
import sys
import time

import horovod
import horovod.torch as hvd
import torch


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    device = "cpu"
    if torch.cuda.is_available():
        torch.cuda.set_device(hvd.local_rank())
        device = f"cuda:{hvd.local_rank()}"
    hosts = hvd.allgather_object(socket.gethostname())
    sizes = [int(arg) for arg in sys.argv[1:]] or [1, 1024, 1048576]
    total = size * (size + 1) // 2
    results = []
    for count in sizes:
        pattern = (torch.arange(count, dtype=torch.float32) % 7 + 1).to(device)
        tensor = pattern * (rank + 1)
        hvd.allreduce(tensor, op=hvd.Sum, name=f"warmup.{count}")
        iterations = max(3, min(50, (1 << 22) // max(count, 1)))
        start = time.perf_counter()
        for i in range(iterations):
            out = hvd.allreduce(tensor, op=hvd.Sum, name=f"smoke.{count}.{i}")
        if device != "cpu":
            torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / iterations
        exact = bool(torch.equal(out, pattern * total))
        flags = hvd.allgather_object(exact)
        if rank == 0:
            algbw = 4 * count / seconds / 1e9 if seconds > 0 else 0.0
            results.append(
                {
                    "elements": count,
                    "bytes": 4 * count,
                    "iterations": iterations,
                    "seconds": seconds,
                    "algbw_gbs": algbw,
                    "busbw_gbs": algbw * 2 * (size - 1) / size if size > 1 else algbw,
                    "exact": all(flags),
                    "wrong_ranks": [r for r, ok in enumerate(flags) if not ok],
                }
            )
    if rank == 0:
        report = {
            "ranks": size,
            "hosts": hosts,
            "device": device,
            "library": f"Horovod {horovod.__version__} (PyTorch {torch.__version__}, "
            f"{'NCCL' if hvd.nccl_built() else 'MPI'} ops)",
            "results": results,
        }
        sys.stdout.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
