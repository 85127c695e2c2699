"""Point-to-point, broadcast, gather and allreduce with mpi4py, on every node.

mpicluster run inventories/local.yaml --sync examples -- python mpi_demo.py
"""

import socket
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
host = socket.gethostname()

# a ring: every rank sends its number to the next and receives the previous one's
got = comm.sendrecv(rank, dest=(rank + 1) % size, source=(rank - 1) % size)
settings = comm.bcast({"lr": 0.1, "from": host} if rank == 0 else None, root=0)
hosts = comm.gather(host, root=0)
total = comm.allreduce(rank)

ok = got == (rank - 1) % size and total == size * (size - 1) // 2
if rank == 0:
    nodes = sorted(set(hosts))
    print(f"{size} rank(s) on {len(nodes)} node(s): {', '.join(nodes)}")
    print(f"ring ok: {ok}; broadcast from {settings['from']}; allreduce of ranks: {total}")
sys.exit(0 if comm.allreduce(ok, op=MPI.LAND) else 1)
