"""The same training loop with Horovod (when the inventory builds it), for comparison:

    mpicluster run inventories/local.yaml --sync examples -- python horovod_train.py

Horovod takes its ranks from MPI; gradients are averaged by allreduce (on GPUs with
NCCL when Horovod was built with GPU operations, else over MPI).
"""

import sys

import horovod.torch as hvd
import torch

STEPS = 60

hvd.init()
rank, world = hvd.rank(), hvd.size()
device = torch.device("cuda", hvd.local_rank()) if torch.cuda.is_available() else None
if device is not None:
    torch.cuda.set_device(device)

torch.manual_seed(0)
model = torch.nn.Linear(16, 1).to(device)
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.05), named_parameters=model.named_parameters()
)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
data = torch.Generator().manual_seed(1000 + rank)
weights = torch.linspace(-1, 1, 16)

losses = []
for step in range(STEPS):
    x = torch.randn(64, 16, generator=data)
    y = x @ weights + 0.5
    loss = ((model(x.to(device)).squeeze(-1) - y.to(device)) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(hvd.allreduce(loss.detach(), name="loss").item())
    if rank == 0 and step % 10 == 0:
        print(f"step {step:3d}  loss {losses[-1]:.4f}", flush=True)

flat = torch.cat([p.detach().flatten() for p in model.parameters()])
replicas = hvd.allgather(flat.unsqueeze(0))
same = all(torch.equal(replicas[0], r) for r in replicas)
falling = losses[-1] < losses[0] / 4
if rank == 0:
    print(
        f"{world} rank(s), Horovod: loss {losses[0]:.4f} -> {losses[-1]:.4f}, "
        f"replicas equal: {same}"
    )
sys.exit(0 if same and falling else 1)
