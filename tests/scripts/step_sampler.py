"""A plain DDP script that can be resumed on another number of processes, sample for sample:
trainer.sampler.StepSampler gives each global step the same samples on any world size, and its state goes in
the checkpoint. Run it as `python -m jobs.submit --wait -- python step_sampler.py STEPS [CHUNK]`; it stops
after CHUNK steps (it saves, then exits 0), and `python -m jobs.submit --resume RUN --gpus-per-node 1` goes
on from there on one process.

Rank 0 writes `steps.jsonl` in the run directory: per step, the sample indices every rank's loader gave and the
number of processes.
"""

import contextlib
import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainer import requeue
from trainer.sampler import StepSampler

STEPS = int(sys.argv[1])
CHUNK = int(sys.argv[2]) if len(sys.argv) > 2 else STEPS
GLOBAL_BATCH = 8

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
requeue.install()
torch.manual_seed(0)
x = torch.randn(50, 8)
data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True), torch.arange(50))
model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
sampler = StepSampler(len(data), GLOBAL_BATCH, world, rank, seed=0)
run_dir = os.environ["RUN_DIR"]
path = os.path.join(run_dir, "ckpt.pt")
step = 0
if os.path.exists(path):  # the run's own: its place, its global batch and order, on this many processes
    saved = torch.load(path)
    model.module.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    sampler.load_state_dict(saved["sampler"])
    step = saved["step"]
stop = min(STEPS, step + CHUNK)
loader = torch.utils.data.DataLoader(data, batch_sampler=sampler)


def save() -> None:
    if rank == 0:
        state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
        torch.save(state | {"sampler": sampler.state_dict()}, path + ".part")
        os.replace(path + ".part", path)  # whole or not at all
    dist.barrier()


while step < stop:
    seen: list[int] = []
    for i, (inputs, targets, indices) in enumerate(loader):  # `accumulation` micro-batches make one step
        last = (i + 1) % sampler.accumulation == 0
        with contextlib.nullcontext() if last else model.no_sync():  # one all-reduce per step
            loss = nn.functional.mse_loss(model(inputs), targets) / sampler.accumulation
            loss.backward()
        seen += indices.tolist()
        if not last:
            continue
        optimizer.step()
        optimizer.zero_grad()
        sampler.advance()
        step += 1
        everyone: list[list[int]] = [[] for _ in range(world)]
        dist.all_gather_object(everyone, seen)
        if rank == 0:
            with open(os.path.join(run_dir, "steps.jsonl"), "a") as out:
                out.write(json.dumps({"step": step, "samples": sorted(sum(everyone, [])), "processes": world}) + "\n")
        seen = []
        requeue.progress(step)
        asked = torch.tensor(int(requeue.requested()))
        dist.all_reduce(asked, op=dist.ReduceOp.MAX)
        if asked.item():
            save()
            requeue.exit_for_requeue()
        if step == stop:
            break
save()
# DDP holds the process group: let it go while Python is whole. Left to the interpreter's teardown, gloo's
# threads may outlive it and abort the process (SIGABRT once, where an exit code of 0 was due).
model = model.module
dist.destroy_process_group()
