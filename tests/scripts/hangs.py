"""Hangs on purpose: rank 1 stops at step 10, idle, while rank 0 waits for it in the next all_reduce."""

import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
for step in range(40):
    if step == 10 and dist.get_rank() == 1:
        time.sleep(3600)
    x = torch.ones(1)
    dist.all_reduce(x)
    time.sleep(0.2)
dist.destroy_process_group()
