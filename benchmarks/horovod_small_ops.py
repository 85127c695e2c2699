"""Small Horovod operations against the same operations through plain mpi4py, on the same
ranks, in one job: what one `hvd.broadcast` + `hvd.allreduce` of a 17-float tensor costs
(the shape of Horovod's own test_horovod_broadcast_grad), next to `comm.Bcast` +
`comm.Allreduce` of the same buffer.

Runs on a provisioned cluster with the from-source stack (`make demo`'s), through
`mpicluster run`, at 1 and 2 ranks per node, once per candidate environment (the stack as
`up` leaves it, then with the settings the local inventory changes put back: Horovod's own
1 ms cycle, and ranks that spin while they wait). Prints, per cell, the median time of one
operation pair for each library and their ratio (issue 49's goal: Horovod within 5x).

    .venv/bin/python benchmarks/horovod_small_ops.py inventories/local.yaml [--ops 40]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest import mpicluster  # noqa: E402

RANK_PROGRAM = """\
import json, statistics, sys, time
import torch
import horovod.torch as hvd
from mpi4py import MPI

ops = int(sys.argv[1])
hvd.init()
comm = MPI.COMM_WORLD
size, rank = comm.Get_size(), comm.Get_rank()
buf = torch.ones(17)


def mpi_pair(i):
    comm.Bcast(buf.numpy(), root=i % size)
    comm.Allreduce(MPI.IN_PLACE, buf.numpy())


def hvd_pair(i):
    out = hvd.broadcast(buf, i % size)
    hvd.allreduce(out)


def timed(pair):
    times = []
    for i in range(ops):
        comm.Barrier()
        started = time.perf_counter()
        pair(i)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


timed(mpi_pair), timed(hvd_pair)  # warm: connections, Horovod's first negotiations
mpi, horovod = timed(mpi_pair), timed(hvd_pair)
if rank == 0:
    print("RESULT " + json.dumps({"ranks": size, "mpi4py": mpi, "horovod": horovod}))
"""

#: name: --env arguments for `mpicluster run`
CANDIDATES = {
    "as up leaves it": [],
    "Horovod's 1 ms cycle": ["--env", "HOROVOD_CYCLE_TIME=1"],
    "1 ms cycle, ranks spin": [
        "--env",
        "HOROVOD_CYCLE_TIME=1",
        "--env",
        "OMPI_MCA_mpi_yield_when_idle=0",
    ],
}


def one(inventory: str, folder: Path, per_node: int, env: list[str], ops: int) -> dict:
    done = mpicluster(
        "run",
        inventory,
        "--sync",
        str(folder),
        "--per-node",
        str(per_node),
        "--hang-timeout",
        "300",
        *env,
        "--",
        "python",
        "small_ops.py",
        str(ops),
        check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise SystemExit(f"the job failed ({done.returncode}): {done.stderr[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inventory")
    parser.add_argument("--ops", type=int, default=40)
    parser.add_argument("--per-node", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "small_ops"
        folder.mkdir()
        (folder / "small_ops.py").write_text(RANK_PROGRAM)
        print(f"{'environment':26} {'ranks':>5} {'mpi4py ms':>10} {'horovod ms':>11} {'ratio':>6}")
        for name, env in CANDIDATES.items():
            for per_node in args.per_node:
                cell = one(args.inventory, folder, per_node, env, args.ops)
                mpi, hvd = cell["mpi4py"] * 1e3, cell["horovod"] * 1e3
                print(f"{name:26} {cell['ranks']:>5} {mpi:>10.2f} {hvd:>11.2f} {hvd / mpi:>6.1f}")


if __name__ == "__main__":
    main()
