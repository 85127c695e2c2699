"""mpi4py on GPU memory: PyTorch CUDA tensors handed to the stack's mpi4py as device
buffers, no copy to the host (issue 55). The one-box proof runs it with the stack's
mpirun and Python on 2 ranks sharing the one GPU:

    mpirun -np 2 <stack>/venv/bin/python tests/gpu/mpi4py_cuda.py --torch-path DIR

mpi4py takes a buffer by Python's buffer protocol, else DLPack, else the CUDA array
interface (its asbuffer.pxi, in that order): a CUDA tensor itself goes by DLPack, and
wrapped in an object that offers only __cuda_array_interface__ it goes the second way.
Both are checked, for float32 and float16: Allreduce (in place, sum of rank+1), Bcast
(rank 0's pattern) and Sendrecv (each rank's value to the next), every element compared
on the GPU with what it must be. mpi4py hands MPI the pointer without waiting for the
tensor's stream (DLPack's stream -1), so each call follows a synchronize. Then the 64 MiB
float32 Allreduce is timed (the slowest rank's average after a warm-up).

The stack's venv has no PyTorch (the box's own runs the torch programs): --torch-path
names the folder the box's torch is in, appended to sys.path after mpi4py is imported,
so that mpi4py is the stack's whatever that folder holds (its path is printed). MPI is
initialized after the rank takes its GPU, as the CUDA allreduce program does.

Rank 0 prints one JSON line shaped like the smoke test's reports ("results": one entry
per check, the timed one last) with mpi4py's path and version and the MPI library's.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys

ELEMENTS = 1 << 20  # the checks: 4 MiB of float32
TIMED = 16777216  # 64 MiB of float32
ITERATIONS = 5


class CudaArrayOnly:
    """A tensor seen only through __cuda_array_interface__ (no DLPack, no buffer)."""

    def __init__(self, tensor):
        self.tensor = tensor  # its memory stays the tensor's while MPI uses it
        self.__cuda_array_interface__ = tensor.__cuda_array_interface__


def checks(MPI, torch, comm, dtype, wrap) -> list[dict]:
    """Allreduce, Bcast and Sendrecv of `dtype` tensors handed over as `wrap` makes them:
    whether each came out exact on every rank, or the error mpi4py or MPI raised (the
    same on both ranks: a datatype mpi4py cannot name for MPI, an operation MPI lacks)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    left, right = (rank - 1) % size, (rank + 1) % size
    pattern = (torch.arange(ELEMENTS, device="cuda") % 1024).to(dtype)  # exact in float16

    def full(value):
        return torch.full((ELEMENTS,), value, dtype=dtype, device="cuda")

    def allreduce():
        summed = full(rank + 1)
        torch.cuda.synchronize()
        comm.Allreduce(MPI.IN_PLACE, wrap(summed), op=MPI.SUM)
        return summed, full(size * (size + 1) // 2)

    def bcast():
        sent = pattern.clone() if rank == 0 else torch.zeros_like(pattern)
        torch.cuda.synchronize()
        comm.Bcast(wrap(sent), root=0)
        return sent, pattern

    def sendrecv():
        got = full(0)
        torch.cuda.synchronize()
        comm.Sendrecv(wrap(full(rank + 1)), dest=right, recvbuf=wrap(got), source=left)
        return got, full(left + 1)

    done = []
    for name, operation in (("Allreduce", allreduce), ("Bcast", bcast), ("Sendrecv", sendrecv)):
        try:
            got, wanted = operation()
            torch.cuda.synchronize()
            exact, error = bool(torch.equal(got, wanted)), None
        except Exception as exc:  # recorded: the other checks still run
            exact, error = False, f"{type(exc).__name__}: {exc}"
        wrong = [r for r, ok in enumerate(comm.allgather(exact)) if not ok]
        done.append({"check": name, "exact": not wrong, "wrong_ranks": wrong})
        if error:
            done[-1]["error"] = error
    return done


def timed_allreduce(MPI, torch, comm) -> dict:
    rank, size = comm.Get_rank(), comm.Get_size()
    data = torch.zeros(TIMED, device="cuda")  # zeros stay zeros however often summed
    torch.cuda.synchronize()
    comm.Allreduce(MPI.IN_PLACE, data, op=MPI.SUM)
    comm.Barrier()
    start = MPI.Wtime()
    for _ in range(ITERATIONS):
        comm.Allreduce(MPI.IN_PLACE, data, op=MPI.SUM)
    torch.cuda.synchronize()
    seconds = comm.reduce((MPI.Wtime() - start) / ITERATIONS, op=MPI.MAX, root=0)
    data.fill_(rank + 1)
    torch.cuda.synchronize()
    comm.Allreduce(MPI.IN_PLACE, data, op=MPI.SUM)
    exact = bool(data.eq(size * (size + 1) // 2).all())
    wrong = [r for r, ok in enumerate(comm.allgather(exact)) if not ok]
    result = {"elements": TIMED, "bytes": TIMED * 4, "iterations": ITERATIONS}
    result.update(check="Allreduce float32 timed", exact=not wrong, wrong_ranks=wrong)
    if rank == 0:
        algbw = TIMED * 4 / seconds / 1e9
        busbw = algbw * 2 * (size - 1) / size if size > 1 else algbw
        result.update(seconds=seconds, algbw_gbs=round(algbw, 3), busbw_gbs=round(busbw, 3))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--torch-path", default="", help="the folder the box's torch is in")
    args = parser.parse_args()

    import mpi4py

    mpi4py.rc.initialize = False  # the GPU first, then MPI (see the docstring)
    from mpi4py import MPI

    if args.torch_path:
        sys.path.append(args.torch_path)
    import torch

    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
    torch.cuda.set_device(local % torch.cuda.device_count())
    MPI.Init_thread(MPI.THREAD_MULTIPLE)
    comm = MPI.COMM_WORLD
    results = []
    for dtype in (torch.float32, torch.float16):
        for way, wrap in (("DLPack", lambda t: t), ("__cuda_array_interface__", CudaArrayOnly)):
            for done in checks(MPI, torch, comm, dtype, wrap):
                name = f"{done['check']} {str(dtype).removeprefix('torch.')} by {way}"
                results.append({**done, "check": name, "elements": ELEMENTS})
    results.append(timed_allreduce(MPI, torch, comm))
    hosts = comm.gather(socket.gethostname(), root=0)
    devices = comm.gather(torch.cuda.get_device_name(), root=0)
    if comm.Get_rank() == 0:
        report = {
            "ranks": comm.Get_size(),
            "hosts": hosts,
            "library": MPI.Get_library_version().splitlines()[0],
            "mpi4py": mpi4py.__file__,
            "mpi4py_version": mpi4py.__version__,
            "torch": torch.__version__,
            "results": results,
            "devices": devices,
        }
        sys.stdout.write(json.dumps(report) + "\n")
        sys.stdout.flush()
    MPI.Finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
