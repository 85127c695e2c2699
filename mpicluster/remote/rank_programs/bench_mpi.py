"""bench's MPI measurements, one rank per node (mpi4py, the stack's own MPI).

Run as: mpirun ... python bench_mpi.py SPEC_JSON, where SPEC is
  {"mode": "pairs", "rounds": [[[i, j], ...], ...], "bytes": B, "iterations": K,
   "small": b, "small_iterations": k}
    each round's pairs (rank numbers) measure at once: bandwidth with B-byte messages
    both ways at once (MPI_Sendrecv, K times, fewer where the link is slow: about a
    second), latency with b-byte ping-pongs (k times,
    half the round trip); the other ranks wait at the round's barrier;
  {"mode": "allreduce", "sizes": [bytes, ...], "budget": seconds}
    MPI_Allreduce of doubles over every rank at each size: algorithm and bus bandwidth;
    no larger size once the sweep has taken `budget` seconds (a slow node).
Rank 0 prints one JSON line: {"hosts": [...], "library": ..., "pairs" or "sizes": [...]}.
Installed on every node with the smoke test's programs.
"""

import json
import socket
import sys
from array import array

from mpi4py import MPI

#: The pairs' probe (the warm-up, and the rate that sets the large message's count).
PROBE = 4 << 20
#: Seconds past which the allreduce sweep measures no larger size (a slow node makes
#: 256 MiB over 16 nodes take minutes): what was measured is reported.
SWEEP_BUDGET = 90
#: A size whose warm-up took this long is measured by it alone.
SLOW_SIZE = 2.0


def buffer(nbytes, fill):
    return bytearray([fill]) * nbytes


def pair_round(comm, pairs, spec):
    rank = comm.Get_rank()
    mine = None
    for pair in pairs:
        if rank in pair:
            mine = pair
    comm.Barrier()
    if mine is None:
        comm.Barrier()
        return None
    partner = mine[1] if mine[0] == rank else mine[0]
    first = rank == mine[0]
    nbytes, iterations = spec["bytes"], spec["iterations"]
    send, recv = buffer(nbytes, rank % 251), buffer(nbytes, 0)
    # warm-up (connect, register) and the link's rate with a PROBE-byte message, so
    # that a slow link gets about a second of the large one, not K times its 64 MiB
    # (at 100 Mbit/s one is 5 s); the two ends agree on the count
    probe = min(PROBE, nbytes)
    out, into = memoryview(send)[:probe], memoryview(recv)[:probe]
    comm.Sendrecv(out, partner, 1, into, partner, 1)
    start = MPI.Wtime()
    comm.Sendrecv(out, partner, 1, into, partner, 1)
    took = (MPI.Wtime() - start) * nbytes / probe  # the large message at the probe's rate
    once = max(took, comm.sendrecv(took, partner, 3, None, partner, 3))
    iterations = max(1, min(iterations, int(1.0 / max(once, 1e-9))))
    start = MPI.Wtime()
    for _ in range(iterations):
        comm.Sendrecv(send, partner, 1, recv, partner, 1)
    seconds = MPI.Wtime() - start
    intact = recv[0] == partner % 251 and recv[-1] == partner % 251
    small = buffer(spec["small"], 1)
    reply = buffer(spec["small"], 0)
    count = spec["small_iterations"]
    start = MPI.Wtime()
    for _ in range(count):
        if first:
            comm.Send(small, partner, 2)
            comm.Recv(reply, partner, 2)
        else:
            comm.Recv(reply, partner, 2)
            comm.Send(small, partner, 2)
    latency = (MPI.Wtime() - start) / count / 2
    comm.Barrier()
    return {
        "pair": list(mine),
        "rank": rank,
        "bytes": nbytes,
        "seconds": seconds,
        # each direction carried nbytes * iterations in `seconds`
        "gbs": nbytes * iterations / seconds / 1e9 if seconds > 0 else 0.0,
        "latency_us": latency * 1e6,
        "intact": intact,
    }


def pairs(comm, spec):
    found = []
    for pairs_of_round in spec["rounds"]:
        result = pair_round(comm, [tuple(p) for p in pairs_of_round], spec)
        every = comm.gather(result, root=0)
        if comm.Get_rank() == 0:
            found.append(
                [merge(r for r in every if r and r["pair"] == list(p)) for p in pairs_of_round]
            )
    return [item for group in found for item in group]


def merge(results):
    """One pair from its two ranks: the slower direction's bandwidth, the mean latency."""
    results = list(results)
    return {
        "pair": results[0]["pair"],
        "bytes": results[0]["bytes"],
        "gbs": min(r["gbs"] for r in results),
        "latency_us": sum(r["latency_us"] for r in results) / len(results),
        "intact": all(r["intact"] for r in results),
    }


def allreduce(comm, spec):
    size = comm.Get_size()
    found = []
    began = MPI.Wtime()
    for nbytes in spec["sizes"]:
        if comm.allreduce(MPI.Wtime() - began, op=MPI.MAX) > spec.get("budget", SWEEP_BUDGET):
            break  # the larger sizes: not measured (rank 0 reports the sizes it has)
        count = max(1, nbytes // 8)
        send = array("d", [1.0]) * count
        recv = array("d", [0.0]) * count
        start = MPI.Wtime()
        comm.Allreduce([send, MPI.DOUBLE], [recv, MPI.DOUBLE], op=MPI.SUM)
        once = comm.allreduce(MPI.Wtime() - start, op=MPI.MAX)
        # 64 MiB's worth (at most 200), and about two seconds where the network is slow;
        # a size whose warm-up took longer than that is measured by its warm-up
        iterations = max(1, min(200, (1 << 26) // max(nbytes, 1), int(2.0 / max(once, 1e-9))))
        if once > SLOW_SIZE:
            iterations, seconds = 0, once
        else:
            comm.Barrier()
            start = MPI.Wtime()
            for _ in range(iterations):
                comm.Allreduce([send, MPI.DOUBLE], [recv, MPI.DOUBLE], op=MPI.SUM)
            seconds = comm.allreduce((MPI.Wtime() - start) / iterations, op=MPI.MAX)
        algbw = 8 * count / seconds / 1e9 if seconds > 0 else 0.0
        found.append(
            {
                "bytes": 8 * count,
                "iterations": iterations,
                "seconds": seconds,
                "algbw_gbs": algbw,
                "busbw_gbs": algbw * 2 * (size - 1) / size if size > 1 else algbw,
                "exact": recv[0] == float(size) and recv[count - 1] == float(size),
            }
        )
    return found


def main():
    spec = json.loads(sys.argv[1])
    comm = MPI.COMM_WORLD
    hosts = comm.allgather(socket.gethostname())
    key = "pairs" if spec["mode"] == "pairs" else "sizes"
    found = pairs(comm, spec) if spec["mode"] == "pairs" else allreduce(comm, spec)
    if comm.Get_rank() == 0:
        report = {
            "mode": spec["mode"],
            "hosts": hosts,
            "library": MPI.Get_library_version().strip().splitlines()[0],
            key: found,
        }
        sys.stdout.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
