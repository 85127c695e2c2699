"""The program every rank of doctor's proof by launch runs: `python -c` this text, the
seconds after which it ends itself (so a lost mpirun leaves no rank behind), and
`mpi` (mpi4py required) or `any`.

With mpi4py: an allreduce of rank + 1, and the hosts gathered; rank 0 writes one line,
MPICLUSTER-LAUNCH and JSON. Without mpi4py in this Python: every rank writes where it
ran and why mpi4py did not import, then exits 0 with `any`, or 1 with `mpi`, so that
mpirun ends the job at once instead of the other ranks waiting in the allreduce.
"""

import json
import os
import signal
import socket
import sys

MARK = "MPICLUSTER-LAUNCH "


def say(report):
    sys.stdout.write(MARK + json.dumps(report) + "\n")
    sys.stdout.flush()


def main():
    signal.alarm(int(sys.argv[1]))
    try:
        from mpi4py import MPI
    except ImportError as exc:
        rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK", "?"))
        host = socket.gethostname()
        say({"mpi": False, "rank": rank, "host": host, "python": sys.executable, "error": str(exc)})
        sys.exit(1 if sys.argv[2:] == ["mpi"] else 0)
    comm = MPI.COMM_WORLD
    hosts = comm.gather(socket.gethostname())
    total = comm.allreduce(comm.rank + 1)
    if comm.rank == 0:
        # "Open MPI v4.1.4, package: ...": its name and version (4.1.x ends it with a NUL)
        library = MPI.Get_library_version().replace("\x00", "").split(",")[0].strip()
        say({"mpi": True, "size": comm.size, "hosts": hosts, "sum": total, "library": library})


if __name__ == "__main__":
    main()
