"""The learning-rate schedule: linear warm-up, then constant, cosine or linear decay (torch-free, pure)."""

import math

from trainer.config import OptimConfig


def lr_factor(step: int, total_steps: int, optim: OptimConfig) -> float:
    """The multiple of optim.lr used for optimizer step `step + 1` (LambdaLR's argument: steps taken so far).

    Warm-up rises linearly to 1 over warmup_steps; the decay then reaches min_lr at the last step. A function
    of the step alone: a resumed run (LambdaLR restores the step count) follows the same curve exactly.
    """
    if step < optim.warmup_steps:
        return (step + 1) / optim.warmup_steps
    if optim.schedule == "constant":
        return 1.0
    floor = optim.min_lr / optim.lr
    progress = min(1.0, (step - optim.warmup_steps) / max(1, total_steps - 1 - optim.warmup_steps))
    if optim.schedule == "cosine":
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
    return floor + (1 - floor) * (1 - progress)  # linear
