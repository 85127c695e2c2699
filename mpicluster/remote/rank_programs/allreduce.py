"""MPI allreduce across every rank: exact result checked, timings reported (mpi4py only).

Run by `mpicluster smoke` as: mpirun --hostfile ... python allreduce.py [ELEMENTS...]
Rank 0 prints one JSON object. Installed on every node in /etc/mpicluster/smoke/.
"""

import json
import socket
import sys
from array import array

from mpi4py import MPI


def pattern(count, scale):
    """`count` doubles, scale * ((i % 7) + 1): seven built in Python, repeated in C (a
    generator over a million elements took about a second a rank on these nodes)."""
    whole = array("d", [scale * (k + 1) for k in range(7)]) * (count // 7 + 1)
    del whole[count:]
    return whole


def main():
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    hosts = comm.allgather(socket.gethostname())
    sizes = [int(arg) for arg in sys.argv[1:]] or [1, 1024, 65536, 1048576]
    total = size * (size + 1) // 2
    results = []
    for count in sizes:
        send, expected = pattern(count, rank + 1), pattern(count, total)
        recv = array("d", bytes(8 * count))
        # A smoke test's figure, not a benchmark's (`mpicluster bench` is that): 20 at
        # most (100 took 2 of the no-op up's 4 s with 3 ranks sharing 2 cores)
        iterations = max(3, min(20, (1 << 22) // max(count, 1)))
        comm.Allreduce([send, MPI.DOUBLE], [recv, MPI.DOUBLE], op=MPI.SUM)  # warm-up
        comm.Barrier()
        start = MPI.Wtime()
        for _ in range(iterations):
            comm.Allreduce([send, MPI.DOUBLE], [recv, MPI.DOUBLE], op=MPI.SUM)
        seconds = comm.allreduce((MPI.Wtime() - start) / iterations, op=MPI.MAX)
        wrong = None  # the first wrong element, looked for only when there is one
        if recv != expected:
            wrong = next(i for i in range(count) if recv[i] != expected[i])
        wrong_ranks = [r for r, w in enumerate(comm.allgather(wrong)) if w is not None]
        if rank == 0:
            nbytes = 8 * count
            algbw = nbytes / seconds / 1e9 if seconds > 0 else 0.0
            results.append(
                {
                    "elements": count,
                    "bytes": nbytes,
                    "iterations": iterations,
                    "seconds": seconds,
                    "algbw_gbs": algbw,
                    "busbw_gbs": algbw * 2 * (size - 1) / size if size > 1 else algbw,
                    "exact": not wrong_ranks,
                    "wrong_ranks": wrong_ranks,
                }
            )
    if rank == 0:
        report = {
            "ranks": size,
            "hosts": hosts,
            "library": MPI.Get_library_version().strip().splitlines()[0],
            "results": results,
        }
        sys.stdout.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
