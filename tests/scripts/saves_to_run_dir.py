"""A plain DDP script as users write them: SGD on fixed data, a checkpoint in $RUN_DIR every 5 steps and at
the requeue signal (trainer.requeue), its steps reported, the final weights saved as final.pt."""

import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from trainer import requeue

dist.init_process_group("gloo")
rank, run_dir = dist.get_rank(), os.environ["RUN_DIR"]
requeue.install()
torch.manual_seed(0)
x = torch.randn(64, 4)
model = DDP(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
ckpt, step = os.path.join(run_dir, "ckpt.pt"), 0
if os.path.exists(ckpt):
    saved = torch.load(ckpt)
    model.module.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    step = saved["step"]


def save(path):
    if rank == 0:
        torch.save(
            {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, path + ".tmp"
        )
        os.replace(path + ".tmp", path)


while step < 40:
    batch = x[(step * 8) % 64 : (step * 8) % 64 + 8]
    optimizer.zero_grad()
    ((model(batch) - batch.sum(1, keepdim=True)) ** 2).mean().backward()
    optimizer.step()
    step += 1
    time.sleep(0.2)
    requeue.progress(step)
    asked = torch.tensor(int(requeue.requested()))
    dist.all_reduce(asked, op=dist.ReduceOp.MAX)
    if asked.item() or step % 5 == 0:
        save(ckpt)
        dist.barrier()
    if asked.item():
        requeue.exit_for_requeue()
if rank == 0:
    torch.save(model.module.state_dict(), os.path.join(run_dir, "final.pt"))
dist.destroy_process_group()
